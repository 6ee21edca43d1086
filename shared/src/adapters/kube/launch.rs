//! ASG lifecycle actions: kept alive while a node action is pending and completed when it is
//! over ([`KubeExecutor::lifecycle_step`]); and a launch hook's check (see
//! [`crate::domain::plan`]'s `asg-launch` plans): has the instance's node joined the cluster and
//! become Ready?
//!
//! The node is read by name, live, in every pass: the name planned (the node already found, or
//! the instance's private DNS name, which EKS and Karpenter give nodes on EC2), then the
//! instance id (nodes named after it). A node of that name counts only if its `spec.providerID`
//! names the instance (a node object left by an earlier instance with the same address does
//! not); a control-plane node is refused. One `get` per name and pass: no list, so a scale-up
//! of hundreds of instances costs the API server a few requests a second.

use k8s_openapi::api::core::v1::Node;

use super::connect::ClusterClient;
use super::cordon::get_node;
use super::error::KubeError;
use super::executor::KubeExecutor;
use super::node_facts::node_facts;
use super::outcome::{Joining, NodeOutcome};
use crate::domain::facts::NotItsNode;
use crate::domain::plan::NodeAction;
use crate::ports::{LifecycleOutcome, Pass};

/// How often a node that has not joined yet is looked at again.
pub const LAUNCH_CHECK_EVERY: chrono::Duration = chrono::Duration::seconds(15);

/// Why a launch hook's lifecycle action is left alone.
#[derive(Debug, thiserror::Error)]
#[error("{node}: its lifecycle action is left alone")]
struct LeftAlone {
    /// What the node is (a control-plane node).
    #[source]
    pub node: NotItsNode,
}

/// A launch hook's action: where its instance's node stands; `Err`: why its lifecycle action is
/// left alone (a control-plane node). Past the action's deadline a node not Ready yet is
/// [`Joining::TimedOut`]: the action is left to the hook's timeout.
async fn joined(
    clients: &ClusterClient,
    a: &NodeAction,
) -> Result<Result<Joining, LeftAlone>, KubeError> {
    let now = clients.clock().now();
    Ok(Ok(match look(clients, a).await? {
        Look::Refused(why) => {
            tracing::warn!(%why, "refusing to complete a launch lifecycle action");
            return Ok(Err(LeftAlone { node: why }));
        }
        Look::Ready(node) => Joining::Ready { node },
        Look::NotYet(why) if a.deadline.is_some_and(|d| now > d) => {
            tracing::warn!(%why, "a launching instance's node did not become Ready in time");
            Joining::TimedOut { why }
        }
        Look::NotYet(why) => Joining::Waiting {
            why,
            next_check: now + LAUNCH_CHECK_EVERY,
        },
    }))
}

/// What a look at the node found.
#[derive(Debug)]
enum Look {
    Ready(String),
    NotYet(String),
    /// A control-plane node: never touched, its hook left alone.
    Refused(NotItsNode),
}

/// Looks for the node of launch action `a`: Ready, not yet, or refused.
async fn look(clients: &ClusterClient, a: &NodeAction) -> Result<Look, KubeError> {
    let mut names: Vec<&str> = a.node.iter().map(String::as_str).collect();
    if !names.contains(&a.instance_id.as_str()) {
        names.push(&a.instance_id);
    }
    let mut whys = Vec::new();
    for name in &names {
        let Some(node) = get_node(clients, name).await? else {
            continue;
        };
        match node_facts(&node).verify_runs(&a.instance_id) {
            Ok(()) => {}
            Err(why @ NotItsNode::ControlPlane { .. }) => return Ok(Look::Refused(why)),
            Err(why) => {
                whys.push(why.to_string());
                continue;
            }
        }
        return Ok(match ready(&node) {
            Ok(()) => Look::Ready((*name).to_string()),
            Err(why) => Look::NotYet(format!("node/{name} is not Ready ({why})")),
        });
    }
    let mut why = format!(
        "no node of instance {} yet (looked for node/{})",
        a.instance_id,
        names.join(", node/")
    );
    if !whys.is_empty() {
        why.push_str(&format!("; {}", whys.join("; ")));
    }
    Ok(Look::NotYet(why))
}

/// Why a node is not Ready (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotReady {
    /// Its `Ready` condition says something else than `True`.
    #[error("Ready is {status}{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Condition {
        status: String,
        reason: Option<String>,
    },
    #[error("no Ready condition yet")]
    NoCondition,
}

/// Whether the node's `Ready` condition is `True`; otherwise what it says.
fn ready(node: &Node) -> Result<(), NotReady> {
    let condition = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    match condition {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(NotReady::Condition {
            status: c.status.clone(),
            reason: c.reason.clone(),
        }),
        None => Err(NotReady::NoCondition),
    }
}

impl KubeExecutor {
    /// The lifecycle action of `a`, once the node is handled: kept alive while the drain (or the
    /// wait for a launching instance's node) is pending, completed when it is over.
    pub(super) async fn lifecycle_step(
        &self,
        a: &NodeAction,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        if a.complete_lifecycle.as_ref().is_some_and(|l| l.is_launch()) {
            match joined(&self.clients, a).await? {
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
                && let Some(completer) = &self.lifecycle
                && completer.heartbeat(&a.instance_id, lifecycle).await?
            {
                out.heartbeat_at = Some(self.clients.clock().now());
            }
        } else if let Some(lifecycle) = &a.complete_lifecycle {
            out.lifecycle = Some(if self.settings.dry_run {
                LifecycleOutcome::WouldComplete
            } else if let Some(completer) = &self.lifecycle {
                completer.complete(&a.instance_id, lifecycle).await?
            } else {
                tracing::warn!("no Auto Scaling client: the lifecycle action is left to time out");
                LifecycleOutcome::NotConfigured
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(conditions: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn ready_only_when_the_condition_is_true() {
        assert_eq!(
            ready(&node(json!([{"type": "Ready", "status": "True"}]))),
            Ok(())
        );
        assert_eq!(
            ready(&node(
                json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}])
            ))
            .map_err(|e| e.to_string()),
            Err("Ready is False: KubeletNotReady".into())
        );
        assert_eq!(
            ready(&node(
                json!([{"type": "MemoryPressure", "status": "False"}])
            )),
            Err(NotReady::NoCondition)
        );
        assert!(ready(&node(json!(null))).is_err());
    }
}
