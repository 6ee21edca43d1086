//! The audit's view of the cluster ([`ClusterView`]): read live by [`KubeWorkloads`] — one
//! `list` (paged) of each kind it reads, Deployments, StatefulSets, ReplicaSets, Pods,
//! PodDisruptionBudgets (all namespaces), PriorityClasses and Nodes; read only:
//! `infra/k8s/audit-rbac.yaml` grants exactly these lists — or from a capture, and converted
//! ([`view`]): pods grouped under their controllers (a ReplicaSet owned by a Deployment under
//! the Deployment; DaemonSet, Job and mirror pods left out), budgets with their selectors and
//! numbers, nodes' spot-ness and pools, priority classes.

use std::collections::BTreeMap;
use std::fmt::Debug;

use ::kube::{Api, Resource};
use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;

use crate::adapters::kube::api::ns_name;
use crate::adapters::kube::placeholder::{container_requests, milli};
use crate::adapters::kube::{ClusterClient, KubeError};
use crate::app::audit::WorkloadSource;
use crate::domain::audit::{
    AuditContainer, AuditNode, AuditPod, ClusterView, Workload, WorkloadKind,
};
use crate::ports::{FailureKind, PortError};

mod budget;
pub use budget::{WorkloadError, budget, selector};

/// The objects the audit reads, as the API serves them.
#[derive(Debug, Clone, Default)]
pub struct RawWorkloads {
    pub deployments: Vec<Deployment>,
    pub stateful_sets: Vec<StatefulSet>,
    pub replica_sets: Vec<ReplicaSet>,
    pub pods: Vec<Pod>,
    pub budgets: Vec<PodDisruptionBudget>,
    pub priority_classes: Vec<PriorityClass>,
    pub nodes: Vec<Node>,
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

fn audit_pod(pod: &Pod) -> AuditPod {
    let spec = pod.spec.as_ref();
    AuditPod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        node: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
        empty_dirs: spec
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter(|v| v.empty_dir.is_some())
            .map(|v| v.name.clone())
            .collect(),
        priority_class: spec
            .and_then(|s| s.priority_class_name.clone())
            .filter(|c| !c.is_empty()),
        priority: spec.and_then(|s| s.priority),
        containers: spec
            .map(|s| s.containers.iter().map(audit_container).collect())
            .unwrap_or_default(),
    }
}

/// A container's extended resource requests (names with a domain outside `kubernetes.io`), a
/// limit standing for a missing request as the API server defaults it, in units rounded up
/// (the API server admits only whole numbers of them); and whether it has a `preStop` hook.
fn audit_container(c: &Container) -> AuditContainer {
    let extended = container_requests(c)
        .into_iter()
        .filter(|(name, _)| name.contains('/') && !name.contains("kubernetes.io/"))
        .filter_map(|(name, q)| {
            let units = milli(&q.0)?.saturating_add(999) / 1000;
            Some((name.clone(), i64::try_from(units).unwrap_or(i64::MAX)))
        })
        .collect();
    AuditContainer {
        name: c.name.clone(),
        extended,
        pre_stop: c.lifecycle.as_ref().is_some_and(|l| l.pre_stop.is_some()),
    }
}

/// A controller known by kind, namespace and name.
type Key = (WorkloadKind, String, String);

/// Builds the view. Pods that have finished (`Succeeded`, `Failed`) or are being deleted are
/// left out; so are DaemonSet pods and pods of other controllers (Jobs, mirror pods).
pub fn view(raw: &RawWorkloads) -> Result<ClusterView, WorkloadError> {
    let (mut workloads, rs_owner) = controllers(raw)?;
    let bare = add_pods(raw, &mut workloads, &rs_owner);
    let mut view = ClusterView {
        workloads: workloads.into_values().collect(),
        ..ClusterView::default()
    };
    view.workloads.extend(bare);
    view.workloads
        .sort_by(|a, b| (&a.namespace, a.kind, &a.name).cmp(&(&b.namespace, b.kind, &b.name)));
    for pdb in &raw.budgets {
        view.budgets.push(budget(pdb)?);
    }
    for node in &raw.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        view.nodes
            .insert(name.clone(), AuditNode::from_labels(&name, &labels));
    }
    for pc in &raw.priority_classes {
        if let Some(name) = &pc.metadata.name {
            view.priority_classes.insert(name.clone(), pc.value);
        }
    }
    Ok(view)
}

/// ReplicaSet (namespace, name) → its Deployment's name, for those a Deployment owns.
type RsOwners = BTreeMap<(String, String), String>;

/// The controllers read (Deployments, StatefulSets, ReplicaSets no Deployment owns), without
/// their pods, and the ReplicaSets a Deployment owns.
fn controllers(raw: &RawWorkloads) -> Result<(BTreeMap<Key, Workload>, RsOwners), WorkloadError> {
    let deployments = raw.deployments.iter().map(|d| {
        let spec = d.spec.as_ref().map(|s| (s.replicas, s.selector.clone()));
        (WorkloadKind::Deployment, &d.metadata, spec)
    });
    let stateful_sets = raw.stateful_sets.iter().map(|s| {
        let spec = s.spec.as_ref().map(|s| (s.replicas, s.selector.clone()));
        (WorkloadKind::StatefulSet, &s.metadata, spec)
    });
    let mut rs_owner = RsOwners::new();
    let mut replica_sets = Vec::new();
    for rs in &raw.replica_sets {
        match controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
            Some(owner) => {
                rs_owner.insert(ns_name(&rs.metadata), owner.name.clone());
            }
            None => {
                let spec = rs.spec.as_ref().map(|s| (s.replicas, s.selector.clone()));
                replica_sets.push((WorkloadKind::ReplicaSet, &rs.metadata, spec));
            }
        }
    }
    let mut workloads: BTreeMap<Key, Workload> = BTreeMap::new();
    for (kind, meta, spec) in deployments.chain(stateful_sets).chain(replica_sets) {
        let (replicas, sel) = spec.unwrap_or_default();
        let (namespace, name) = ns_name(meta);
        let object = format!("{}/{namespace}/{name}", kind.to_string().to_lowercase());
        let workload = Workload {
            namespace: namespace.clone(),
            kind,
            name: name.clone(),
            replicas: replicas.unwrap_or(1),
            selector: Some(selector(&sel, &object)?),
            pods: Vec::new(),
        };
        workloads.insert((kind, namespace, name), workload);
    }
    Ok((workloads, rs_owner))
}

/// Adds every running pod to its workload (a controller not read is added, with its pods as its
/// replicas); returns the bare pods, each a workload of its own.
fn add_pods(
    raw: &RawWorkloads,
    workloads: &mut BTreeMap<Key, Workload>,
    rs_owner: &RsOwners,
) -> Vec<Workload> {
    let mut bare: Vec<Workload> = Vec::new();
    for pod in &raw.pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed"))
            || pod.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let (namespace, name) = ns_name(&pod.metadata);
        let facts = audit_pod(pod);
        let key = match controller_of(&pod.metadata) {
            None => {
                bare.push(Workload {
                    namespace,
                    kind: WorkloadKind::Pod,
                    name,
                    replicas: 1,
                    selector: None,
                    pods: vec![facts],
                });
                continue;
            }
            Some(o) if o.kind == "ReplicaSet" => {
                match rs_owner.get(&(namespace.clone(), o.name.clone())) {
                    Some(deployment) => (WorkloadKind::Deployment, namespace, deployment.clone()),
                    None => (WorkloadKind::ReplicaSet, namespace, o.name.clone()),
                }
            }
            Some(o) if o.kind == "StatefulSet" => {
                (WorkloadKind::StatefulSet, namespace, o.name.clone())
            }
            // DaemonSets, Jobs, nodes (mirror pods), other controllers.
            Some(_) => continue,
        };
        // A controller not read (not in the capture): replicas = its pods, selector unknown.
        let w = workloads.entry(key.clone()).or_insert_with(|| Workload {
            namespace: key.1.clone(),
            kind: key.0,
            name: key.2.clone(),
            replicas: 0,
            selector: None,
            pods: Vec::new(),
        });
        if w.selector.is_none() {
            w.replicas += 1;
        }
        w.pods.push(facts);
    }
    bare
}

const SERVICE: &str = "kubernetes";

/// [`WorkloadSource`] over the Kubernetes API.
#[derive(Debug, Clone)]
pub struct KubeWorkloads {
    clients: ClusterClient,
}

impl KubeWorkloads {
    pub fn new(clients: ClusterClient) -> KubeWorkloads {
        KubeWorkloads { clients }
    }

    /// Every object of a kind, in every namespace (see [`crate::adapters::kube::api::retry::list_all`]).
    async fn list<K>(&self, client: &::kube::Client, what: &str) -> Result<Vec<K>, PortError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(client.clone());
        crate::adapters::kube::api::retry::list_all(&self.clients, &api, what)
            .await
            .map_err(error)
    }
}

/// A call that failed, with its kind.
fn error(e: impl Into<KubeError>) -> PortError {
    let e = e.into();
    PortError::new(SERVICE, e.kind(), e)
}

#[async_trait]
impl WorkloadSource for KubeWorkloads {
    #[tracing::instrument(skip_all, err)]
    async fn workloads(&self) -> Result<ClusterView, PortError> {
        let client = self.clients.client().await.map_err(error)?;
        let raw = RawWorkloads {
            deployments: self.list(&client, "deployments").await?,
            stateful_sets: self.list(&client, "statefulsets").await?,
            replica_sets: self.list(&client, "replicasets").await?,
            pods: self.list(&client, "pods").await?,
            budgets: self.list(&client, "poddisruptionbudgets").await?,
            priority_classes: self.list(&client, "priorityclasses").await?,
            nodes: self.list(&client, "nodes").await?,
        };
        view(&raw).map_err(|e| PortError::new(SERVICE, FailureKind::Invalid, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pods_are_grouped_under_their_controllers() {
        let owner = |kind: &str, name: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": true}]);
        let pod = |name: &str, owners: serde_json::Value, phase: &str| -> Pod {
            from(
                json!({"metadata": {"name": name, "namespace": "shop", "ownerReferences": owners,
                "labels": {"app": "web"}},
                "spec": {"nodeName": "n1", "containers": [], "terminationGracePeriodSeconds": 200,
                    "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}]},
                "status": {"phase": phase}}),
            )
        };
        let raw = RawWorkloads {
            deployments: vec![from(
                json!({"metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {}}}),
            )],
            replica_sets: vec![
                from(json!({"metadata": {"name": "web-1", "namespace": "shop",
                    "ownerReferences": owner("Deployment", "web")},
                    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}}})),
                from(json!({"metadata": {"name": "lone", "namespace": "shop"},
                    "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}})),
            ],
            pods: vec![
                pod("web-1-a", owner("ReplicaSet", "web-1"), "Running"),
                pod("web-1-b", owner("ReplicaSet", "web-1"), "Running"),
                pod("web-1-done", owner("ReplicaSet", "web-1"), "Succeeded"),
                pod("ds-a", owner("DaemonSet", "ds"), "Running"),
                pod("gone-a", owner("ReplicaSet", "gone-9"), "Running"),
                pod("solo", json!([]), "Running"),
            ],
            ..RawWorkloads::default()
        };
        let v = view(&raw).unwrap();
        let ids: Vec<(String, usize, i32)> = v
            .workloads
            .iter()
            .map(|w| (w.id(), w.pods.len(), w.replicas))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("shop/Deployment/web".to_string(), 2, 3),
                ("shop/ReplicaSet/gone-9".to_string(), 1, 1),
                ("shop/ReplicaSet/lone".to_string(), 0, 1),
                ("shop/Pod/solo".to_string(), 1, 1),
            ]
        );
        let p = &v.workloads[0].pods[0];
        assert_eq!(p.grace_seconds, Some(200));
        assert_eq!(p.empty_dirs, vec!["cache".to_string()]);
        assert!(v.workloads[1].selector.is_none());
    }

    #[test]
    fn containers_give_their_accelerators_and_hooks() {
        let pod: Pod = from(json!({"metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {"nodeName": "g1", "containers": [
            {"name": "trainer", "resources": {
                "limits": {"nvidia.com/gpu": "8", "memory": "64Gi"},
                "requests": {"cpu": "4", "vpc.amazonaws.com/efa": "1"}},
             "lifecycle": {"preStop": {"exec": {"command": ["/checkpoint"]}}}},
            {"name": "sidecar", "resources": {"limits": {"aws.amazon.com/neuron": "1"},
                "requests": {"aws.amazon.com/neuron": "1",
                             "example.kubernetes.io/thing": "1"}}}
        ]}}));
        let p = audit_pod(&pod);
        assert_eq!(
            p.containers,
            vec![
                AuditContainer {
                    name: "trainer".into(),
                    extended: [
                        ("nvidia.com/gpu".to_string(), 8),
                        ("vpc.amazonaws.com/efa".to_string(), 1)
                    ]
                    .into(),
                    pre_stop: true,
                },
                AuditContainer {
                    name: "sidecar".into(),
                    extended: [("aws.amazon.com/neuron".to_string(), 1)].into(),
                    pre_stop: false,
                },
            ],
            "a limit stands for a missing request; native resources are not extended"
        );
        assert_eq!(
            p.gpus(),
            [("aws.amazon.com/neuron", 1), ("nvidia.com/gpu", 8)].into()
        );
    }

    #[test]
    fn bad_objects_are_named() {
        let raw = RawWorkloads {
            budgets: vec![from(json!({"metadata": {"name": "b", "namespace": "shop"},
                "spec": {"maxUnavailable": "lots"}}))],
            ..RawWorkloads::default()
        };
        let e = view(&raw).unwrap_err();
        assert_eq!(
            e.to_string(),
            "poddisruptionbudget/shop/b: spec.maxUnavailable: `lots` is neither an integer nor a percentage"
        );
        let raw = RawWorkloads {
            deployments: vec![from(json!({"metadata": {"name": "d", "namespace": "x"},
                "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}, "template": {}}}))],
            ..RawWorkloads::default()
        };
        let e = view(&raw).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("deployment/x/d: selector.matchExpressions[0]: `Near`"),
            "{e}"
        );
    }
}
