//! A Kubernetes `Node` object read into the [`NodeFacts`] the decision core decides on.

use ::kube::ResourceExt;
use k8s_openapi::api::core::v1::Node;

use crate::domain::facts::{
    ANNOTATION_CAPI_MACHINE, ANNOTATION_CAPI_NAMESPACE, CAPI_GROUP, KARPENTER_GROUP, NodeFacts,
    Target,
};

/// Reads the facts from a Node object.
pub fn node_facts(node: &Node) -> NodeFacts {
    let meta = &node.metadata;
    let spec = node.spec.as_ref();
    let (labels, annotations) = (node.labels().clone(), node.annotations().clone());
    let machine = |name: &String| Target::Machine {
        namespace: (annotations.get(ANNOTATION_CAPI_NAMESPACE).cloned())
            .unwrap_or_else(|| "default".into()),
        name: name.clone(),
    };
    let annotated = annotations.get(ANNOTATION_CAPI_MACHINE);
    let owner = (node.owner_references().iter())
        .find_map(|r| {
            let group = r.api_version.split('/').next().unwrap_or_default();
            match (group, r.kind.as_str()) {
                (KARPENTER_GROUP, "NodeClaim") => Some(Target::NodeClaim {
                    name: r.name.clone(),
                }),
                (CAPI_GROUP, "Machine") => Some(machine(&r.name)),
                _ => None,
            }
        })
        .or_else(|| annotated.filter(|m| !m.is_empty()).map(machine));
    let taints = (spec.and_then(|s| s.taints.as_ref()).into_iter().flatten())
        .map(|t| t.key.clone())
        .collect();
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
    let dns_names = (addresses.into_iter().flatten())
        .filter(|a| matches!(a.type_.as_str(), "InternalDNS" | "Hostname" | "ExternalDNS"))
        .map(|a| a.address.clone())
        .collect();
    NodeFacts {
        name: meta.name.clone().unwrap_or_default(),
        provider_id: spec.and_then(|s| s.provider_id.clone()),
        labels,
        annotations,
        taints,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        owner,
        dns_names,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_from_node_objects() {
        let karpenter: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "ownerReferences": [
                {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-abc", "uid": "u"}
            ]},
            "spec": {"providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f60001",
                     "taints": [{"key": "a", "effect": "NoSchedule"}], "unschedulable": true}
        }))
        .unwrap();
        let f = node_facts(&karpenter);
        assert_eq!(
            f.owner,
            Some(Target::NodeClaim {
                name: "default-abc".into()
            })
        );
        assert_eq!(f.instance_id(), Some("i-0a1b2c3d4e5f60001"));
        assert!(f.unschedulable && f.has_taint("a"));
        let capi: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2", "annotations": {
                "cluster.x-k8s.io/machine": "m-1", "cluster.x-k8s.io/cluster-namespace": "capi"
            }}
        }))
        .unwrap();
        assert_eq!(
            node_facts(&capi).owner,
            Some(Target::Machine {
                namespace: "capi".into(),
                name: "m-1".into()
            })
        );
        let cp: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n3", "labels": {"node-role.kubernetes.io/control-plane": ""}}
        }))
        .unwrap();
        assert!(node_facts(&cp).is_control_plane());
    }
}
