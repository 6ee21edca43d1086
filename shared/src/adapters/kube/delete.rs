//! Delete: the Karpenter NodeClaim (`karpenter.sh/v1`, cluster-scoped) or the Cluster API
//! Machine (`cluster.x-k8s.io/v1beta1`, namespaced) that owns the node — their controllers drain
//! the node and replace it — otherwise the Node itself.
//!
//! The object is read first: when it is gone, or already being deleted (`deletionTimestamp`,
//! finalizers at work), nothing is sent, so a redelivered event writes nothing. A 404 on the
//! delete itself is success too.
//!
//! What is read is verified before anything is deleted (see [`verify_target`]): the target must
//! be the event's instance's — a NodeClaim or Machine whose provider id names the instance (or,
//! lacking one, whose node is the live node just verified) — and never control-plane. Otherwise
//! the delete is refused, with the reason. A Node target is the node the pass has just read and
//! verified as every pass does (its provider id, never control-plane): it is not read again,
//! and the delete's uid precondition deletes that very object or nothing.

use ::kube::api::{ApiResource, DeleteParams, DynamicObject, Preconditions};
use ::kube::core::GroupVersionKind;
use ::kube::{Api, ResourceExt};

use k8s_openapi::api::core::v1::Node;

use super::api::retry::with_retry;
use super::error::{KubeError, Refusal};
use super::events::EventType::{Normal, Warning};
use super::events::Said;
use super::executor::KubeExecutor;
use super::outcome::{DeleteOutcome, NodeOutcome};
use crate::domain::facts::instance_id_from_provider_id;
use crate::domain::plan::{NodeAction, Plan, Target};

/// The label of a Cluster API control-plane Machine.
const LABEL_CAPI_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";

/// Whether `object`, the delete's target as just read, belongs to instance `instance_id`, whose
/// live node (already verified to run it) is `node` when there is one; otherwise why not.
///
/// - its provider id (NodeClaim `status.providerID`, Machine `spec.providerID`) names the
///   instance — one naming another instance is refused whatever else matches;
/// - lacking one, a NodeClaim whose `status.nodeName`, or a Machine whose `status.nodeRef.name`,
///   is the live node;
/// - never a control-plane Machine (label `cluster.x-k8s.io/control-plane`).
///
/// A Node target passes: it is the pass's own node, verified as the pass read it.
pub(crate) fn verify_target(
    target: &Target,
    object: &DynamicObject,
    instance_id: &str,
    node: Option<&str>,
) -> Result<(), Refusal> {
    let (id_at, node_at) = match target {
        Target::NodeClaim { .. } => ("/status/providerID", "/status/nodeName"),
        Target::Machine { .. } if object.labels().contains_key(LABEL_CAPI_CONTROL_PLANE) => {
            return Err(Refusal::ControlPlaneMachine {
                target: target.to_string(),
                label: LABEL_CAPI_CONTROL_PLANE,
            });
        }
        Target::Machine { .. } => ("/spec/providerID", "/status/nodeRef/name"),
        // A Node: the pass's own node, verified by the pass as it read it (control-plane,
        // provider id), and deleted only as that object.
        Target::Node { .. } => return Ok(()),
    };
    let text = |at| object.data.pointer(at).and_then(serde_json::Value::as_str);
    let named = text(id_at).and_then(instance_id_from_provider_id);
    match (named, text(node_at)) {
        (Some(id), _) if id == instance_id => Ok(()),
        (Some(other), _) => Err(Refusal::OtherInstance {
            target: target.to_string(),
            other: other.to_string(),
            instance_id: instance_id.to_string(),
        }),
        (None, Some(name)) if node == Some(name) => Ok(()),
        (None, Some(name)) => Err(Refusal::OtherNode {
            target: target.to_string(),
            name: name.to_string(),
            instance_id: instance_id.to_string(),
            node: node.map(str::to_string),
        }),
        (None, None) => Err(Refusal::Unverifiable {
            target: target.to_string(),
            instance_id: instance_id.to_string(),
        }),
    }
}

impl KubeExecutor {
    /// Deletes `a`'s target (the node `name` by default, `node` as read: `None`, gone) unless it
    /// is gone or going, or is not the instance's (see [`verify_target`]); with the Event of the
    /// decision and a `Deleted` Event on the node when it is there.
    pub(super) async fn delete(
        &self,
        plan: &Plan,
        a: &NodeAction,
        name: &str,
        node: Option<&Node>,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let target = (a.target.clone()).unwrap_or_else(|| Target::Node { name: name.into() });
        let deleted = self.delete_target(&target, &a.instance_id, node).await?;
        if let DeleteOutcome::Refused { why, .. } = &deleted {
            out.result.refused = Some(why.clone());
        } else if let Some(node) = node {
            let said = Said(Warning, &plan.event_reason, "Delete", a.reason.clone());
            self.event(&plan.event_id, node, said, out).await;
            if let DeleteOutcome::Deleted { target } = &deleted {
                let said = Said(Normal, "Deleted", "Delete", format!("Deleted {target}"));
                self.event(&plan.event_id, node, said, out).await;
            }
        }
        out.say(deleted.to_string());
        Ok(())
    }

    /// Deletes `target` unless it is gone or going, or is not instance `instance_id`'s (whose
    /// live node, read and verified by the pass, is `node`, when there is one): see
    /// [`verify_target`].
    async fn delete_target(
        &self,
        target: &Target,
        instance_id: &str,
        node: Option<&Node>,
    ) -> Result<DeleteOutcome, KubeError> {
        let (clients, described) = (&self.clients, target.to_string());
        let client = clients.client().await?;
        let resource = |group, version, kind, plural| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
        };
        let (api, name): (Api<DynamicObject>, _) = match target {
            Target::Node { name } => (
                Api::all_with(client, &ApiResource::erase::<Node>(&())),
                name,
            ),
            Target::NodeClaim { name } => {
                let claims = resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims");
                (Api::all_with(client, &claims), name)
            }
            Target::Machine { namespace, name } => {
                let machines = resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
                (Api::namespaced_with(client, namespace, &machines), name)
            }
        };
        // A Node target is the node the pass has just read and verified: not read again.
        let existing = match target {
            Target::Node { .. } => node.map(|n| DynamicObject {
                types: None,
                metadata: n.metadata.clone(),
                data: serde_json::Value::Null,
            }),
            _ => with_retry(clients, "get", &described, || api.get_opt(name)).await?,
        };
        let Some(existing) = existing else {
            return Ok(DeleteOutcome::AlreadyGone { target: described });
        };
        if existing.metadata.deletion_timestamp.is_some() {
            return Ok(DeleteOutcome::AlreadyDeleting { target: described });
        }
        let node = node.and_then(|n| n.metadata.name.as_deref());
        if let Err(why) = verify_target(target, &existing, instance_id, node) {
            tracing::warn!(target = %described, %why, "refusing to delete");
            let why = why.to_string();
            return Ok(DeleteOutcome::Refused {
                target: described,
                why,
            });
        }
        if self.settings.dry_run {
            return Ok(DeleteOutcome::WouldDelete { target: described });
        }
        // Only the object read: if it was replaced by one of the same name meanwhile, leave that be.
        let params = DeleteParams {
            preconditions: (existing.metadata.uid.clone()).map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match with_retry(clients, "delete", &described, || api.delete(name, &params)).await {
            Ok(_) => {
                tracing::info!(target = %described, "deleted");
                Ok(DeleteOutcome::Deleted { target: described })
            }
            // 409: the uid precondition failed, the object of that name is a new one.
            Err(e) if e.is_not_found() || e.is_conflict() => {
                Ok(DeleteOutcome::AlreadyGone { target: described })
            }
            Err(e) => Err(KubeError::Api(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "i-0a1b2c3d4e5f60001";

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn claim() -> Target {
        Target::NodeClaim { name: "nc".into() }
    }

    fn machine() -> Target {
        Target::Machine {
            namespace: "capi".into(),
            name: "m".into(),
        }
    }

    #[test]
    fn a_nodeclaim_is_verified_by_its_provider_id_then_its_node() {
        let by_id = object(json!({"metadata": {"name": "nc"},
            "status": {"providerID": format!("aws:///us-east-1a/{ID}"), "nodeName": "other"}}));
        verify_target(&claim(), &by_id, ID, Some("n1")).unwrap();
        let other = object(json!({"metadata": {"name": "nc"},
            "status": {"providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f69999", "nodeName": "n1"}}));
        let why = verify_target(&claim(), &other, ID, Some("n1")).unwrap_err();
        assert_eq!(
            why.to_string(),
            "nodeclaim/nc is instance i-0a1b2c3d4e5f69999's (provider id), not the event's \
             i-0a1b2c3d4e5f60001"
        );
        let by_node = object(json!({"metadata": {"name": "nc"}, "status": {"nodeName": "n1"}}));
        verify_target(&claim(), &by_node, ID, Some("n1")).unwrap();
        assert_eq!(
            verify_target(&claim(), &by_node, ID, Some("n2"))
                .unwrap_err()
                .to_string(),
            "nodeclaim/nc is node/n1's, not the event's instance i-0a1b2c3d4e5f60001's (node/n2)"
        );
        assert!(
            verify_target(&claim(), &by_node, ID, None).is_err(),
            "no live node: only the provider id can vouch for it"
        );
        let bare = object(json!({"metadata": {"name": "nc"}}));
        assert!(matches!(
            verify_target(&claim(), &bare, ID, Some("n1")),
            Err(Refusal::Unverifiable { .. })
        ));
    }

    #[test]
    fn a_machine_is_verified_and_never_control_plane() {
        let ok = object(json!({"metadata": {"name": "m", "namespace": "capi"},
            "spec": {"providerID": format!("aws:///us-east-1a/{ID}")}}));
        verify_target(&machine(), &ok, ID, None).unwrap();
        let by_ref = object(json!({"metadata": {"name": "m", "namespace": "capi"},
            "status": {"nodeRef": {"kind": "Node", "name": "n1"}}}));
        verify_target(&machine(), &by_ref, ID, Some("n1")).unwrap();
        let cp = object(json!({"metadata": {"name": "m", "namespace": "capi",
            "labels": {"cluster.x-k8s.io/control-plane": ""}},
            "spec": {"providerID": format!("aws:///us-east-1a/{ID}")}}));
        let why = verify_target(&machine(), &cp, ID, Some("n1")).unwrap_err();
        assert_eq!(
            why.to_string(),
            "machine/capi/m is a control-plane Machine (label cluster.x-k8s.io/control-plane)"
        );
    }
}
