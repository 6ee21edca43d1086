//! Helpers for the simulation's tests: a manual clock, sized nodes, pods with requests.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube_fake::KubeFake;
use serde_json::{Value, json};

use super::node;

/// A clock the test moves.
#[derive(Clone)]
pub struct Clock(Arc<Mutex<DateTime<Utc>>>);

impl Clock {
    /// Puts the fake on a clock at `2026-11-24T10:00:00Z`.
    pub fn install(fake: &KubeFake) -> Self {
        let t0: DateTime<Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
        let clock = Self(Arc::new(Mutex::new(t0)));
        let read = clock.clone();
        fake.set_clock(move || read.now());
        clock
    }

    pub fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }

    pub fn advance(&self, seconds: i64) {
        *self.0.lock().unwrap() += chrono::Duration::seconds(seconds);
    }

    /// `t0 + seconds`, for assertions.
    pub fn at(seconds: i64) -> DateTime<Utc> {
        "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
            + chrono::Duration::seconds(seconds)
    }
}

/// A ready node with this allocatable cpu and memory, room for 110 pods.
pub fn sized_node(name: &str, cpu: &str, memory: &str) -> Value {
    let mut n = node(name);
    n["status"]["allocatable"] = json!({"cpu": cpu, "memory": memory, "pods": "110"});
    n
}

/// A pod (not bound) in `web` requesting this cpu and memory, labelled `app=web`.
pub fn wants(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    })
}

/// A running pod bound to `node`, requesting this cpu, with no termination grace period.
pub fn running_with(name: &str, node_name: &str, cpu: &str, priority: i32) -> Value {
    let mut p = wants(name, cpu, "0");
    p["spec"]["nodeName"] = json!(node_name);
    p["spec"]["priority"] = json!(priority);
    p["spec"]["terminationGracePeriodSeconds"] = json!(0);
    p["status"] = json!({"phase": "Running",
                         "conditions": [{"type": "Ready", "status": "True"}]});
    p
}

/// Creates a pod through the API. A pod stating `spec.priority` (and maybe
/// `spec.preemptionPolicy`) is given a PriorityClass of that value and policy instead, stored
/// first: the Priority admission plugin refuses a pod stating a priority its class does not give.
pub async fn create(fake: &KubeFake, mut pod: Value) -> Pod {
    if let Some(priority) = pod["spec"]["priority"].as_i64() {
        let policy = pod["spec"]["preemptionPolicy"]
            .as_str()
            .unwrap_or("PreemptLowerPriority")
            .to_string();
        let class = format!("p{priority}-{}", policy.to_lowercase());
        fake.insert(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": class}, "value": priority, "preemptionPolicy": policy}),
        );
        let spec = pod["spec"].as_object_mut().unwrap();
        spec.remove("priority");
        spec.remove("preemptionPolicy");
        spec.insert("priorityClassName".into(), json!(class));
    }
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    let pod: Pod = serde_json::from_value(pod).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

/// Reads a pod through the API.
pub async fn read(fake: &KubeFake, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    pods.get(name).await.unwrap()
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// A condition of the pod: status, reason, message.
pub fn condition(pod: &Pod, kind: &str) -> Option<(String, Option<String>, Option<String>)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The `PodScheduled=False` message.
pub fn unschedulable_message(pod: &Pod) -> String {
    let (status, reason, message) = condition(pod, "PodScheduled").expect("PodScheduled");
    assert_eq!(status, "False");
    assert_eq!(reason.as_deref(), Some("Unschedulable"));
    message.unwrap_or_default()
}
