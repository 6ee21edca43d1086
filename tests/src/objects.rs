//! Kubernetes objects as the tests and the benchmarks put them in the fake.

use serde_json::{Value, json};

/// A ready node of instance `instance_id` in `zone`, named `name` (its private DNS name), with
/// the provider id and labels a kubelet on EC2 sets.
pub fn node(name: &str, instance_id: &str, zone: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "spec": {"providerID": format!("aws:///{zone}/{instance_id}")},
        "status": {"addresses": [{"type": "InternalDNS", "address": name}]}
    })
}

/// A running, ready pod `shop/<name>` on `node`, labelled `app=<name>`, controlled by an
/// owner of kind `owner_kind` (`ReplicaSet`, `DaemonSet`, ...).
pub fn pod(name: &str, node: &str, owner_kind: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": format!("{name}-owner"), "uid": format!("uid-{name}"), "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}
