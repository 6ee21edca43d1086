//! The audit's model of the cluster: workloads and their pods, label selectors, the
//! PodDisruptionBudgets, the nodes' spot-ness and pools ([`ClusterView`]).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::audit::findings::plural;
use crate::domain::budget::{Budget, Selector};
use crate::domain::pool::{CapacityType, PoolKey};

/// Node labels that say how a node's capacity is paid for, with the values meaning spot.
pub const SPOT_LABELS: &[(&str, &str)] = &[
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("karpenter.sh/capacity-type", "spot"),
    ("node.kubernetes.io/lifecycle", "spot"),
    ("lifecycle", "Ec2Spot"),
    ("node-lifecycle", "spot"),
];

/// Label keys naming the instance type, first found wins.
const INSTANCE_TYPE_LABELS: &[&str] = &[
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
];

/// Label keys naming the zone, first found wins.
const ZONE_LABELS: &[&str] = &[
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
];

/// A priority at or above this is a `system-*` class (`system-cluster-critical` is 2e9).
pub const CRITICAL_PRIORITY: i32 = 1_000_000_000;

/// The grace period Kubernetes gives a pod that does not set one.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The extended resources that are accelerators (NVIDIA GPUs; AWS Trainium and Inferentia
/// through the Neuron device plugin): a pod requesting any of them is a GPU pod, whose
/// workload the audit checks for a Capacity Block's end.
pub const GPU_RESOURCES: &[&str] = &[
    "nvidia.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "aws.amazon.com/neurondevice",
];

/// How a workload is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, strum::Display)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    ReplicaSet,
    /// A bare pod: no controller recreates it.
    Pod,
}

/// A node as the audit sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditNode {
    pub name: String,
    pub capacity_type: CapacityType,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
}

impl AuditNode {
    /// Reads spot-ness, instance type and zone from a node's labels. Only the spot labels
    /// ([`SPOT_LABELS`]) make a node interruptible; anything else counts as on-demand.
    pub fn from_labels(name: &str, labels: &BTreeMap<String, String>) -> AuditNode {
        let spot = SPOT_LABELS
            .iter()
            .any(|(k, v)| labels.get(*k).is_some_and(|l| l.eq_ignore_ascii_case(v)));
        let first = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| labels.get(*k).filter(|v| !v.is_empty()).cloned())
        };
        AuditNode {
            name: name.to_string(),
            capacity_type: if spot {
                CapacityType::Spot
            } else {
                CapacityType::OnDemand
            },
            instance_type: first(INSTANCE_TYPE_LABELS),
            zone: first(ZONE_LABELS),
        }
    }

    pub fn is_spot(&self) -> bool {
        self.capacity_type == CapacityType::Spot
    }

    /// The node's pool, when its instance type and zone are known.
    pub fn pool(&self) -> Option<PoolKey> {
        Some(PoolKey::new(
            self.capacity_type,
            self.instance_type.as_deref()?,
            self.zone.as_deref()?,
        ))
    }
}

/// One pod of a workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditPod {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The node it is bound to (none while pending).
    pub node: Option<String>,
    /// `terminationGracePeriodSeconds` ([`DEFAULT_GRACE_SECONDS`] when unset).
    pub grace_seconds: Option<i64>,
    /// The names of its `emptyDir` volumes.
    pub empty_dirs: Vec<String>,
    pub priority_class: Option<String>,
    /// `spec.priority`, as admission set it.
    pub priority: Option<i32>,
    /// Its containers (`spec.containers`; init containers are not: none runs when a pod is
    /// stopped).
    pub containers: Vec<AuditContainer>,
}

impl AuditPod {
    /// The accelerators it requests, per resource ([`GPU_RESOURCES`]; none when it is not a
    /// GPU pod).
    pub fn gpus(&self) -> BTreeMap<&'static str, i64> {
        sum_gpus(&self.containers)
    }
}

/// The accelerators `containers` request, per resource.
pub(super) fn sum_gpus<'a>(
    containers: impl IntoIterator<Item = &'a AuditContainer>,
) -> BTreeMap<&'static str, i64> {
    let mut out: BTreeMap<&str, i64> = BTreeMap::new();
    for (name, n) in containers.into_iter().flat_map(AuditContainer::gpus) {
        let e = out.entry(name).or_default();
        *e = e.saturating_add(n);
    }
    out
}

/// One container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditContainer {
    pub name: String,
    /// The extended resources it requests (a name with a domain outside `kubernetes.io`:
    /// `nvidia.com/gpu`, ...), in units; a limit stands for a missing request, as the API
    /// server defaults it.
    pub extended: BTreeMap<String, i64>,
    /// Whether it has a `lifecycle.preStop` hook (where a workload checkpoints before it is
    /// stopped).
    pub pre_stop: bool,
}

impl AuditContainer {
    /// The accelerators it requests ([`GPU_RESOURCES`]), those above 0.
    pub fn gpus(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        GPU_RESOURCES.iter().filter_map(|name| {
            let n = self.extended.get(*name).copied().unwrap_or(0);
            (n > 0).then_some((*name, n))
        })
    }

    /// Whether it requests an accelerator.
    pub fn is_gpu(&self) -> bool {
        self.gpus().next().is_some()
    }
}

/// A workload: a controller and its pods (or a bare pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    pub kind: WorkloadKind,
    pub name: String,
    /// The desired replicas (`spec.replicas`, 1 when unset; 1 for a bare pod).
    pub replicas: i32,
    /// The controller's pod selector; `None` for a bare pod or a controller not seen.
    pub selector: Option<Selector>,
    pub pods: Vec<AuditPod>,
}

impl Workload {
    /// `namespace/Kind/name`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }

    /// How many of its pods several of `budgets` select (the eviction API refuses them), and
    /// those budgets' names (`a, b`).
    pub(super) fn overlapping(&self, budgets: &[&Budget]) -> (usize, String) {
        let mut names: BTreeSet<&str> = BTreeSet::new();
        let mut pods = 0;
        for pod in &self.pods {
            let on_pod: Vec<&str> = budgets
                .iter()
                .filter(|b| b.selects(&self.namespace, &pod.labels))
                .map(|b| b.name.as_str())
                .collect();
            if on_pod.len() > 1 {
                pods += 1;
                names.extend(on_pod);
            }
        }
        (pods, names.into_iter().collect::<Vec<_>>().join(", "))
    }
}

impl Budget {
    /// Whether it selects a pod of `workload`.
    pub fn selects_pod_of(&self, workload: &Workload) -> bool {
        workload
            .pods
            .iter()
            .any(|p| self.selects(&workload.namespace, &p.labels))
    }
}

/// What the audit reads: the cluster's workloads, budgets, nodes and priority classes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub workloads: Vec<Workload>,
    pub budgets: Vec<Budget>,
    pub nodes: BTreeMap<String, AuditNode>,
    /// PriorityClass name → value.
    pub priority_classes: BTreeMap<String, i32>,
}

impl ClusterView {
    /// The budgets that select a pod of `workload`.
    pub fn budgets_of(&self, workload: &Workload) -> Vec<&Budget> {
        self.budgets
            .iter()
            .filter(|b| b.selects_pod_of(workload))
            .collect()
    }

    /// A budget for people (`PodDisruptionBudget shop/web (maxUnavailable: 1, 2 pods
    /// expected)`), and the evictions it allows when its expected pods (the replicas of every
    /// workload it selects a pod of) are healthy.
    pub fn describe(&self, b: &Budget) -> (String, i64) {
        let expected: i64 = self
            .workloads
            .iter()
            .filter(|w| b.selects_pod_of(w))
            .map(|w| i64::from(w.replicas.max(0)))
            .sum();
        let spec = match (b.max_unavailable, b.min_available) {
            (Some(mu), _) => format!("maxUnavailable: {mu}"),
            (None, Some(ma)) => format!("minAvailable: {ma}"),
            (None, None) => "no minAvailable nor maxUnavailable".into(),
        };
        let about = format!(
            "PodDisruptionBudget {}/{} ({spec}, {} expected)",
            b.namespace,
            b.name,
            plural(expected, "pod")
        );
        (about, b.allowed_when_healthy(expected))
    }

    /// The node `pod` runs on, when bound to one the view knows.
    pub fn node_of(&self, pod: &AuditPod) -> Option<&AuditNode> {
        self.nodes.get(pod.node.as_deref()?)
    }
}
