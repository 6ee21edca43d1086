//! The executor's last step for a node action: its ASG lifecycle action, kept alive while the
//! node's drain (or the wait for a launching instance's node) is pending, completed when it is
//! over.

use std::sync::Arc;

use super::super::connect::ClusterClient;
use super::super::error::KubeError;
use super::super::launch::{self, Joining};
use super::NodeOutcome;
use crate::domain::plan::NodeAction;
use crate::ports::{LifecycleCompleter, LifecycleOutcome, Pass};

/// Keeps alive and completes ASG lifecycle actions.
pub(super) struct Lifecycle<'a> {
    pub clients: &'a ClusterClient,
    /// Where lifecycle actions are completed; `None`: they are left to time out.
    pub completer: Option<&'a Arc<dyn LifecycleCompleter>>,
    /// Say what would be done, do nothing.
    pub dry_run: bool,
}

impl Lifecycle<'_> {
    /// The lifecycle action of `a`, once the node is handled: kept alive while the drain (or the
    /// wait for a launching instance's node) is pending, completed when it is over.
    pub async fn step(
        &self,
        a: &NodeAction,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        if a.complete_lifecycle.as_ref().is_some_and(|l| l.is_launch()) {
            match launch::joined(self.clients, a).await? {
                Err(why) => out.refused = Some(why.to_string()),
                Ok(joining) => out.joining = Some(joining),
            }
            if out.refused.is_some() || matches!(out.joining, Some(Joining::TimedOut { .. })) {
                return Ok(());
            }
        }
        // A dry run has no later pass, but a node not Ready yet is no reason to complete either.
        let pending = out.pending() || matches!(out.joining, Some(Joining::Waiting { .. }));
        if let (Some(lifecycle), true) = (&a.complete_lifecycle, pending) {
            let heartbeat = match pass {
                Pass::Drain { heartbeat, .. } => heartbeat,
                Pass::Cordon | Pass::Announce => false,
            };
            if heartbeat
                && let Some(completer) = self.completer
                && completer.heartbeat(&a.instance_id, lifecycle).await?
            {
                out.heartbeat_at = Some(self.clients.clock().now());
            }
        } else if let Some(lifecycle) = &a.complete_lifecycle {
            out.lifecycle = Some(if self.dry_run {
                LifecycleOutcome::WouldComplete
            } else if let Some(completer) = self.completer {
                completer.complete(&a.instance_id, lifecycle).await?
            } else {
                tracing::warn!("no Auto Scaling client: the lifecycle action is left to time out");
                LifecycleOutcome::NotConfigured
            });
        }
        Ok(())
    }
}
