//! The executor's delete of a node's NodeClaim, Machine or Node (see [`super::super::delete`]),
//! with its Events.

use k8s_openapi::api::core::v1::Node;

use super::super::connect::ClusterClient;
use super::super::delete::{DeleteOutcome, delete_target};
use super::super::error::KubeError;
use super::super::events::EventType;
use super::NodeOutcome;
use super::events::{Recorder, Said};
use crate::domain::plan::{NodeAction, Plan, Target};

/// Deletes what a node action names.
pub(super) struct Deleter<'a> {
    pub clients: &'a ClusterClient,
    /// Say what would be deleted, delete nothing.
    pub dry_run: bool,
    /// Where the deletes are recorded.
    pub events: Recorder<'a>,
}

/// The node a delete is about: its name, and the node as read (`None`: it is gone).
pub(super) struct Named<'a> {
    pub name: &'a str,
    pub node: Option<&'a Node>,
}

impl Deleter<'_> {
    /// Deletes `a`'s target (the node `node.name` by default), verified to be the instance's;
    /// with the Event of the decision and a `Deleted` Event on the node when it is there.
    pub async fn delete(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: Named<'_>,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let Named { name, node } = node;
        let target = a.target.clone().unwrap_or_else(|| Target::Node {
            name: name.to_string(),
        });
        let deleted = if node.is_none() && matches!(target, Target::Node { .. }) {
            DeleteOutcome::AlreadyGone {
                target: target.to_string(),
            }
        } else {
            delete_target(
                self.clients,
                &target,
                &a.instance_id,
                node.map(|_| name),
                self.dry_run,
            )
            .await?
        };
        if let Some(node) = node
            && !matches!(deleted, DeleteOutcome::Refused { .. })
        {
            let said = Said {
                reason: &a.event_reason,
                action: "Delete",
                type_: EventType::Warning,
                note: a.reason.clone(),
            };
            self.events.event(plan, node, said, out).await;
        }
        if let (Some(node), DeleteOutcome::Deleted { target }) = (node, &deleted) {
            let said = Said {
                reason: "Deleted",
                action: "Delete",
                type_: EventType::Normal,
                note: format!("Deleted {target}"),
            };
            self.events.event(plan, node, said, out).await;
        }
        out.delete = Some(deleted);
        Ok(())
    }
}
