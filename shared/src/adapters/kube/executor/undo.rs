//! The executor's way back (see [`crate::domain::wayback`]): forewarn's cordon of a node undone,
//! with an `Uncordoned` Event saying why.

use k8s_openapi::api::core::v1::Node;

use super::super::connect::ClusterClient;
use super::super::cordon::{NodeWrite, uncordon};
use super::super::error::{KubeError, Refusal};
use super::super::events::{EventType, NodeEvent, record};
use super::super::node_facts::node_facts;
use crate::domain::wayback::{Undo, UndoOutcome};

/// Undoes forewarn's cordons.
pub(super) struct Undoer<'a> {
    pub clients: &'a ClusterClient,
    /// forewarn's own taint key (a cordon's record lists the others it put).
    pub taint_key: &'a str,
    /// `reportingInstance` of the Events.
    pub reporting_instance: &'a str,
    /// How its writes go (a dry run's too).
    pub write: NodeWrite,
}

impl Undoer<'_> {
    /// Undoes forewarn's cordon of `node` (read live) as `undo` says, with an `Uncordoned`
    /// Event saying why (see [`crate::ports::Executor::undo`]).
    pub async fn undo(&self, node: Node, undo: &Undo) -> Result<UndoOutcome, KubeError> {
        let verify = |n: &Node| -> Result<(), Refusal> {
            node_facts(n).verify_runs(&undo.instance_id)?;
            Ok(())
        };
        let outcome = uncordon(
            self.clients,
            node.clone(),
            self.taint_key,
            &undo.record,
            self.write,
            &verify,
        )
        .await?;
        if matches!(outcome, UndoOutcome::Undone | UndoOutcome::WouldUndo) {
            let event = NodeEvent {
                node: &node,
                event_id: &undo.record.event_id,
                reason: "Uncordoned",
                action: "Uncordon",
                type_: EventType::Normal,
                note: format!("forewarn's cordon undone: {}", undo.why),
            };
            let recorded = record(
                self.clients,
                &event,
                self.reporting_instance,
                self.write.dry_run,
            )
            .await;
            if let Err(e) = recorded {
                tracing::warn!(error = %e, "could not record the Uncordoned Event");
            }
        }
        Ok(outcome)
    }
}
