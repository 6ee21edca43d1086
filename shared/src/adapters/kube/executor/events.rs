//! The executor's Events: each recorded best effort (a failure is logged and reported in the
//! outcome, never an error), and the Events of the decision (what forewarn does and why, the
//! cordon).

use k8s_openapi::api::core::v1::Node;

use super::super::connect::ClusterClient;
use super::super::events::{EventType, NodeEvent, record};
use super::NodeOutcome;
use crate::domain::config::Action;
use crate::domain::plan::{NodeAction, Plan};

/// What an Event says (the node and the event it is about are the recorder's caller's).
pub(super) struct Said<'a> {
    pub reason: &'a str,
    pub action: &'a str,
    pub type_: EventType,
    pub note: String,
}

/// The Events of the decision a pass records.
pub(super) struct Decision {
    /// What forewarn does and why (see [`Recorder::announce`]).
    pub announce: bool,
    /// The note of a `Cordoned` Event, when there is one to record.
    pub cordoned: Option<String>,
}

/// Records the executor's Events about nodes.
pub(super) struct Recorder<'a> {
    pub clients: &'a ClusterClient,
    /// `reportingInstance` of the Events.
    pub reporting_instance: &'a str,
    /// Say what would be recorded, record nothing.
    pub dry_run: bool,
}

impl Recorder<'_> {
    /// Records an Event about `node` for `plan`'s event, best effort: what became of it, or the
    /// failure, goes in `out`.
    pub async fn event(&self, plan: &Plan, node: &Node, said: Said<'_>, out: &mut NodeOutcome) {
        let Said {
            reason,
            action,
            type_,
            note,
        } = said;
        let event = NodeEvent {
            node,
            event_id: &plan.event_id,
            reason,
            action,
            type_,
            note,
        };
        match record(self.clients, &event, self.reporting_instance, self.dry_run).await {
            Ok(outcome) => out.events.push((reason.to_string(), outcome)),
            Err(e) => {
                tracing::warn!(reason, error = %e, "could not record the Event");
                out.event_failures.push(format!("{reason}: {e}"));
            }
        }
    }

    /// The Events of the decision: with `announce`, what forewarn does and why (see
    /// [`Self::announce`]); with a note, `Cordoned`.
    pub async fn decision(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        decision: Decision,
        out: &mut NodeOutcome,
    ) {
        if decision.announce {
            self.announce(plan, a, node, out).await;
        }
        if let Some(note) = decision.cordoned {
            let said = Said {
                reason: "Cordoned",
                action: "Cordon",
                type_: EventType::Normal,
                note,
            };
            self.event(plan, node, said, out).await;
        }
    }

    /// The Event that says what forewarn is about to do and why (with the drain's deadline).
    async fn announce(&self, plan: &Plan, a: &NodeAction, node: &Node, out: &mut NodeOutcome) {
        let action = if a.action == Action::Cordon {
            "Cordon"
        } else {
            "CordonDrain"
        };
        let mut note = a.reason.clone();
        if let Some(deadline) = a.deadline {
            note.push_str(&format!(" (drain deadline {})", deadline.to_rfc3339()));
        }
        let said = Said {
            reason: &a.event_reason,
            action,
            type_: EventType::Warning,
            note,
        };
        self.event(plan, node, said, out).await;
    }
}
