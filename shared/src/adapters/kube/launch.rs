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
use super::outcome::NodeOutcome;
use crate::domain::event::EventKind;
use crate::domain::facts::NotItsNode;
use crate::domain::plan::{NodeAction, Plan};
use crate::ports::Pass;

/// How often a node that has not joined yet is looked at again.
pub const LAUNCH_CHECK_EVERY: chrono::Duration = chrono::Duration::seconds(15);

/// What a look at a launching instance's node found.
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
            Err(why @ NotItsNode::ControlPlane { .. }) => return Ok(Look::Refused(why)),
            Err(why) => whys.push(why.to_string()),
            Ok(()) => {
                return Ok(match ready(&node) {
                    Ok(()) => Look::Ready((*name).to_string()),
                    Err(why) => Look::NotYet(format!("node/{name} is not Ready ({why})")),
                });
            }
        }
    }
    let looked = format!(
        "no node of instance {} yet (looked for node/{})",
        a.instance_id,
        names.join(", node/")
    );
    whys.insert(0, looked);
    Ok(Look::NotYet(whys.join("; ")))
}

/// Whether the node's `Ready` condition is `True`; otherwise what it says (`Ready is False:
/// KubeletNotReady`, `no Ready condition yet`).
fn ready(node: &Node) -> Result<(), String> {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = (conditions.into_iter().flatten()).find(|c| c.type_ == "Ready");
    let c = ready.ok_or("no Ready condition yet")?;
    let reason = c.reason.as_deref().map(|r| format!(": {r}"));
    match c.status.as_str() {
        "True" => Ok(()),
        status => Err(format!("Ready is {status}{}", reason.unwrap_or_default())),
    }
}

impl KubeExecutor {
    /// The lifecycle action of `a`, once the node is handled: kept alive while the drain (or the
    /// wait for a launching instance's node) is pending, completed when it is over. A launch
    /// hook's first looks at where its instance's node stands: past the action's deadline a node
    /// not Ready yet times out (the action is left to the hook's timeout), and a control-plane
    /// node leaves it alone (refused).
    pub(super) async fn lifecycle_step(
        &self,
        plan: &Plan,
        a: &NodeAction,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let mut waiting = false;
        if plan.kind == EventKind::AsgLaunch && a.complete_lifecycle.is_some() {
            let now = self.clients.clock().now();
            match look(&self.clients, a).await? {
                Look::Refused(why) => {
                    tracing::warn!(%why, "refusing to complete a launch lifecycle action");
                    out.refuse(format!("{why}: its lifecycle action is left alone"));
                    return Ok(());
                }
                Look::Ready(node) => out.say(format!("node/{node} runs the instance and is Ready")),
                Look::NotYet(why) if a.deadline.is_some_and(|d| now > d) => {
                    tracing::warn!(%why, "a launching instance's node did not become Ready in time");
                    out.say(format!(
                        "{why} by the deadline: the lifecycle action is left to the hook's own \
                         timeout and default result"
                    ));
                    return Ok(());
                }
                Look::NotYet(why) => {
                    // Looked at again in the next pass. A dry run has none, but a node not Ready
                    // yet is no reason to complete either.
                    out.say(format!("{why}: looked at again in the next pass"));
                    waiting = true;
                    out.result.pending |= !out.dry_run;
                    (out.result.wait_until).get_or_insert(now + LAUNCH_CHECK_EVERY);
                }
            }
        }
        let pending = out.result.pending || waiting;
        if let (Some(lifecycle), true) = (&a.complete_lifecycle, pending) {
            if matches!(pass, Pass::Drain { heartbeat, .. } if heartbeat)
                && let Some(completer) = &self.lifecycle
                && completer.heartbeat(&a.instance_id, lifecycle).await?
            {
                out.result.heartbeat_at = Some(self.clients.clock().now());
            }
        } else if let Some(lifecycle) = &a.complete_lifecycle {
            let hook = format!("{}/{}", lifecycle.asg_name, lifecycle.hook_name);
            out.say(if self.settings.dry_run {
                format!("would complete lifecycle action {hook} (CONTINUE)")
            } else if let Some(completer) = &self.lifecycle {
                match completer.complete(&a.instance_id, lifecycle).await? {
                    true => format!("completed lifecycle action {hook} (CONTINUE)"),
                    false => format!("lifecycle action {hook} already completed or timed out"),
                }
            } else {
                tracing::warn!("no Auto Scaling client: the lifecycle action is left to time out");
                format!("lifecycle action {hook} not completed: no Auto Scaling client configured")
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
            )),
            Err("Ready is False: KubeletNotReady".into())
        );
        assert_eq!(
            ready(&node(
                json!([{"type": "MemoryPressure", "status": "False"}])
            )),
            Err("no Ready condition yet".into())
        );
        assert!(ready(&node(json!(null))).is_err());
    }
}
