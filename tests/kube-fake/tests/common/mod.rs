//! Builders shared by the integration tests.
#![allow(dead_code)]

pub mod sim;

use kube::core::Status;
use serde_json::{Value, json};

/// A ready node.
pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// A pod on `node_name` labelled `app=<app>`, in phase `phase`, `Ready` as given.
pub fn pod(ns: &str, name: &str, node_name: &str, app: &str, phase: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    })
}

/// A running, ready pod.
pub fn running(ns: &str, name: &str, node_name: &str, app: &str) -> Value {
    pod(ns, name, node_name, app, "Running", true)
}

/// A PodDisruptionBudget selecting `app=<app>` with the given spec fields.
pub fn pdb(ns: &str, name: &str, app: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// The API status inside a kube error, or a panic naming what came instead.
pub fn api_status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}
