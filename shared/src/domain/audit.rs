//! The spot-readiness audit: will an interruption hurt?
//!
//! A small model of the cluster's workloads ([`ClusterView`]: workloads and their pods, the
//! PodDisruptionBudgets, the nodes' spot-ness and pools, the priority classes), the rules that
//! find what would hurt when a spot node goes ([`audit`]), the summary, and the budgets to add
//! ([`suggested_budgets`], rendered as YAML by [`budgets_yaml`]). Pure: the adapters build the
//! view from the Kubernetes API or from `kubectl` captures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::domain::config::Config;
use crate::domain::pool::{CapacityType, PoolKey, PoolRecord};

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

/// How a workload is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    ReplicaSet,
    /// A bare pod: no controller recreates it.
    Pod,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::Pod => "Pod",
        })
    }
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
}

/// A label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }
}

impl FromStr for Operator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "In" => Ok(Operator::In),
            "NotIn" => Ok(Operator::NotIn),
            "Exists" => Ok(Operator::Exists),
            "DoesNotExist" => Ok(Operator::DoesNotExist),
            other => Err(format!(
                "`{other}` is not a selector operator (In, NotIn, Exists, DoesNotExist)"
            )),
        }
    }
}

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A `metav1.LabelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether the labels match every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    Operator::In => value.is_some_and(|v| r.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// An int-or-percent field of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(i32),
}

impl IntOrPercent {
    /// Parses the string form (`"50%"`, `"2"`) of an int-or-string.
    pub fn parse(s: &str) -> Result<IntOrPercent, String> {
        let t = s.trim();
        let bad = || format!("`{s}` is neither an integer nor a percentage");
        match t.strip_suffix('%') {
            Some(p) => p
                .parse::<i32>()
                .ok()
                .filter(|p| *p >= 0)
                .map(IntOrPercent::Percent)
                .ok_or_else(bad),
            None => t.parse::<i32>().map(IntOrPercent::Int).map_err(|_| bad()),
        }
    }

    /// `GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
    pub fn scaled(self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(n) => i64::from(n),
            IntOrPercent::Percent(p) => (i64::from(p) * total + 99) / 100,
        }
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A PodDisruptionBudget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub namespace: String,
    pub name: String,
    /// `None` (or empty) selects nothing, as in `policy/v1`.
    pub selector: Option<Selector>,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

impl Budget {
    /// Whether it selects a pod of `namespace` with these labels.
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespace == namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| !s.is_empty() && s.matches(labels))
    }

    /// The evictions it allows when all `expected` pods are healthy (the disruption
    /// controller's arithmetic: `maxUnavailable` wins over `minAvailable`; neither allows
    /// everything).
    pub fn allowed_when_healthy(&self, expected: i64) -> i64 {
        if expected <= 0 {
            return 0;
        }
        let desired = match (self.max_unavailable, self.min_available) {
            (Some(mu), _) => (expected - mu.scaled(expected)).max(0),
            (None, Some(ma)) => ma.scaled(expected),
            (None, None) => 0,
        };
        (expected - desired).max(0)
    }

    /// The spec for people (`maxUnavailable: 0`).
    pub fn describe(&self) -> String {
        match (self.max_unavailable, self.min_available) {
            (Some(mu), _) => format!("maxUnavailable: {mu}"),
            (None, Some(ma)) => format!("minAvailable: {ma}"),
            (None, None) => "no minAvailable nor maxUnavailable".into(),
        }
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

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "info" => Ok(Level::Info),
            "warning" => Ok(Level::Warning),
            "error" => Ok(Level::Error),
            other => Err(format!("`{other}` is not a level (error, warning, info)")),
        }
    }
}

/// The finding codes, stable: scripts match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    /// No budget selects the workload's pods: a drain evicts them all at once.
    NoPdb,
    /// A budget that never allows an eviction: the drain stalls until the instance dies.
    PdbBlocksEviction,
    /// Several budgets select one pod: the eviction API answers 500.
    PdbOverlap,
    SingleReplica,
    OneNode,
    OnePool,
    OneZone,
    /// A grace period longer than what a spot warning leaves.
    GraceTooLong,
    /// Replicas on pools interrupted recently.
    HotPool,
    /// `emptyDir` volumes a drain discards.
    LocalStorage,
    /// A bare pod: once evicted nothing recreates it.
    NoController,
    /// A `system-*` priority workload on spot capacity.
    CriticalOnSpot,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::NoPdb => "no-pdb",
            Code::PdbBlocksEviction => "pdb-blocks-eviction",
            Code::PdbOverlap => "pdb-overlap",
            Code::SingleReplica => "single-replica",
            Code::OneNode => "one-node",
            Code::OnePool => "one-pool",
            Code::OneZone => "one-zone",
            Code::GraceTooLong => "grace-too-long",
            Code::HotPool => "hot-pool",
            Code::LocalStorage => "local-storage",
            Code::NoController => "no-controller",
            Code::CriticalOnSpot => "critical-on-spot",
        }
    }

    /// The level of a finding with this code.
    pub fn level(self) -> Level {
        match self {
            Code::PdbBlocksEviction | Code::PdbOverlap | Code::SingleReplica | Code::OneNode => {
                Level::Error
            }
            Code::NoPdb
            | Code::OnePool
            | Code::GraceTooLong
            | Code::HotPool
            | Code::NoController
            | Code::CriticalOnSpot => Level::Warning,
            Code::OneZone | Code::LocalStorage => Level::Info,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that would hurt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `namespace/Kind/name`.
    pub workload: String,
    pub level: Level,
    pub code: Code,
    pub message: String,
}

/// A pool the pool table saw interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotPool {
    pub interruptions: u64,
    pub last_seen: DateTime<Utc>,
}

/// The pools among `records` interrupted at least once and last seen within `window` of `now`.
pub fn hot_pools(
    records: &[PoolRecord],
    now: DateTime<Utc>,
    window: Duration,
) -> BTreeMap<PoolKey, HotPool> {
    records
        .iter()
        .filter(|r| r.interruptions() > 0 && r.last_seen >= now - window)
        .map(|r| {
            (
                r.pool.clone(),
                HotPool {
                    interruptions: r.interruptions(),
                    last_seen: r.last_seen,
                },
            )
        })
        .collect()
}

/// What the audit found, with its summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Findings grouped by workload (in the view's order), most severe first within each.
    pub findings: Vec<Finding>,
    pub summary: Summary,
}

impl AuditReport {
    /// The most severe level found.
    pub fn worst(&self) -> Option<Level> {
        self.findings.iter().map(|f| f.level).max()
    }
}

/// The numbers of an audit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Workloads read (DaemonSets are not).
    pub workloads: usize,
    /// Those with at least one pod on spot capacity: the ones checked.
    pub checked: usize,
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
    /// Replicas (pods) on spot nodes.
    pub spot_replicas: usize,
    /// Those whose workload keeps a replica outside their pool when their pool is interrupted.
    pub surviving_replicas: usize,
}

impl Summary {
    /// `surviving_replicas / spot_replicas`, 1 when nothing runs on spot.
    pub fn survival(&self) -> f64 {
        if self.spot_replicas == 0 {
            1.0
        } else {
            self.surviving_replicas as f64 / self.spot_replicas as f64
        }
    }
}

/// Where one pod runs.
struct Placement<'a> {
    pod: &'a AuditPod,
    node: &'a str,
    node_facts: Option<&'a AuditNode>,
}

impl Placement<'_> {
    fn spot(&self) -> bool {
        self.node_facts.is_some_and(AuditNode::is_spot)
    }
    fn pool(&self) -> Option<PoolKey> {
        self.node_facts.and_then(AuditNode::pool)
    }
    fn zone(&self) -> Option<&str> {
        self.node_facts.and_then(|n| n.zone.as_deref())
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The expected pods of a budget: the replicas of every workload it selects a pod of.
fn expected_pods(view: &ClusterView, budget: &Budget) -> i64 {
    view.workloads
        .iter()
        .filter(|w| w.namespace == budget.namespace)
        .filter(|w| {
            w.pods
                .iter()
                .any(|p| budget.selects(&w.namespace, &p.labels))
        })
        .map(|w| i64::from(w.replicas.max(0)))
        .sum()
}

/// Runs every rule over every workload with a pod on spot capacity.
///
/// `hot` are the pools recently interrupted ([`hot_pools`]); `config` gives the notice and
/// forewarn's margin (the grace rule).
pub fn audit(view: &ClusterView, config: &Config, hot: &BTreeMap<PoolKey, HotPool>) -> AuditReport {
    let mut report = AuditReport::default();
    let grace_limit = (config.interruption_notice - config.deadline_margin).num_seconds();
    for workload in &view.workloads {
        report.summary.workloads += 1;
        let placements: Vec<Placement<'_>> = workload
            .pods
            .iter()
            .filter_map(|pod| {
                let node = pod.node.as_deref()?;
                Some(Placement {
                    pod,
                    node,
                    node_facts: view.nodes.get(node),
                })
            })
            .collect();
        let spot: Vec<&Placement<'_>> = placements.iter().filter(|p| p.spot()).collect();
        if spot.is_empty() {
            continue;
        }
        report.summary.checked += 1;
        let mut found: Vec<(Code, String)> = Vec::new();

        // Survival: a spot replica survives when its workload keeps a replica elsewhere.
        for p in &spot {
            report.summary.spot_replicas += 1;
            let pool = p.pool();
            let elsewhere = placements.iter().any(|q| match (&pool, q.pool()) {
                (Some(a), Some(b)) => *a != b,
                // Pool unknown: only another node counts.
                _ => q.node != p.node,
            });
            if elsewhere {
                report.summary.surviving_replicas += 1;
            }
        }

        // Budgets.
        let budgets: Vec<&Budget> = view
            .budgets
            .iter()
            .filter(|b| {
                workload
                    .pods
                    .iter()
                    .any(|p| b.selects(&workload.namespace, &p.labels))
            })
            .collect();
        if workload.kind == WorkloadKind::Pod {
            found.push((
                Code::NoController,
                format!(
                    "bare pod on spot node {}: once evicted or interrupted nothing recreates it",
                    spot[0].node
                ),
            ));
        } else if budgets.is_empty() {
            found.push((
                Code::NoPdb,
                "no PodDisruptionBudget selects its pods: a drain may evict them all at once"
                    .into(),
            ));
        }
        for b in &budgets {
            let expected = expected_pods(view, b);
            if b.allowed_when_healthy(expected) == 0 {
                found.push((
                    Code::PdbBlocksEviction,
                    format!(
                        "PodDisruptionBudget {}/{} ({}, {} expected) never allows an eviction: \
                         a drain stalls until the instance is reclaimed",
                        b.namespace,
                        b.name,
                        b.describe(),
                        plural(expected as usize, "pod")
                    ),
                ));
            }
        }
        let mut overlapping: BTreeSet<String> = BTreeSet::new();
        let mut overlap_pods = 0;
        for pod in &workload.pods {
            let names: Vec<&str> = budgets
                .iter()
                .filter(|b| b.selects(&workload.namespace, &pod.labels))
                .map(|b| b.name.as_str())
                .collect();
            if names.len() > 1 {
                overlap_pods += 1;
                overlapping.extend(names.into_iter().map(str::to_string));
            }
        }
        if overlap_pods > 0 {
            found.push((
                Code::PdbOverlap,
                format!(
                    "{} selected by several PodDisruptionBudgets ({}): the eviction API answers \
                     500 and a drain cannot evict them",
                    plural(overlap_pods, "pod"),
                    overlapping.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }

        // Spread.
        if workload.kind != WorkloadKind::Pod && workload.replicas <= 1 {
            found.push((
                Code::SingleReplica,
                format!(
                    "{} replica, on spot node {}: an interruption is an outage until it is \
                     rescheduled",
                    workload.replicas.max(0),
                    spot[0].node
                ),
            ));
        } else if placements.len() > 1 {
            let nodes: BTreeSet<&str> = placements.iter().map(|p| p.node).collect();
            let pools: BTreeSet<Option<PoolKey>> = placements.iter().map(|p| p.pool()).collect();
            let zones: BTreeSet<Option<&str>> = placements.iter().map(|p| p.zone()).collect();
            let n = placements.len();
            if nodes.len() == 1 {
                found.push((
                    Code::OneNode,
                    format!(
                        "all {n} replicas on spot node {}: one interruption takes them all",
                        spot[0].node
                    ),
                ));
            } else if pools.len() == 1
                && let Some(Some(pool)) = pools.first()
            {
                found.push((
                    Code::OnePool,
                    format!(
                        "all {n} replicas in spot pool {pool}: one pool interruption can take \
                         them all"
                    ),
                ));
            } else if zones.len() == 1
                && let Some(Some(zone)) = zones.first()
            {
                found.push((Code::OneZone, format!("all {n} replicas in zone {zone}")));
            }
        }

        // Grace periods.
        let mut long: Vec<(i64, &str)> = spot
            .iter()
            .map(|p| {
                (
                    p.pod.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS),
                    p.pod.name.as_str(),
                )
            })
            .filter(|(g, _)| *g > grace_limit)
            .collect();
        long.sort();
        if let Some((grace, pod)) = long.last() {
            found.push((
                Code::GraceTooLong,
                format!(
                    "terminationGracePeriodSeconds {grace} (pod {pod}) is longer than the {grace_limit} s \
                     a spot warning leaves ({} s notice, {} s margin): it is killed mid-shutdown",
                    config.interruption_notice.num_seconds(),
                    config.deadline_margin.num_seconds()
                ),
            ));
        }

        // Recently interrupted pools.
        let mut hot_here: BTreeMap<PoolKey, (usize, &HotPool)> = BTreeMap::new();
        for p in &spot {
            if let Some(pool) = p.pool()
                && let Some(h) = hot.get(&pool)
            {
                hot_here.entry(pool).or_insert((0, h)).0 += 1;
            }
        }
        if !hot_here.is_empty() {
            let parts: Vec<String> = hot_here
                .iter()
                .map(|(pool, (n, h))| {
                    format!(
                        "{} in {pool} ({}, last {})",
                        plural(*n, "replica"),
                        plural(h.interruptions as usize, "interruption"),
                        h.last_seen.format("%Y-%m-%d %H:%M UTC")
                    )
                })
                .collect();
            found.push((
                Code::HotPool,
                format!("recently interrupted pools: {}", parts.join("; ")),
            ));
        }

        // Local storage.
        let mut volumes: BTreeSet<&str> = BTreeSet::new();
        let mut with_local = 0;
        for p in &spot {
            if !p.pod.empty_dirs.is_empty() {
                with_local += 1;
                volumes.extend(p.pod.empty_dirs.iter().map(String::as_str));
            }
        }
        if with_local > 0 {
            found.push((
                Code::LocalStorage,
                format!(
                    "{} on spot with emptyDir volumes ({}): a drain discards their data",
                    plural(with_local, "pod"),
                    volumes.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }

        // Priority.
        let critical = spot.iter().find_map(|p| {
            let value = p
                .pod
                .priority_class
                .as_ref()
                .and_then(|c| view.priority_classes.get(c).copied())
                .or(p.pod.priority)?;
            (value >= CRITICAL_PRIORITY)
                .then(|| (p.pod.priority_class.clone().unwrap_or_default(), value))
        });
        if let Some((class, value)) = critical {
            let class = if class.is_empty() {
                String::new()
            } else {
                format!("{class}, ")
            };
            found.push((
                Code::CriticalOnSpot,
                format!(
                    "critical priority ({class}{value}) on spot capacity: keep it on on-demand nodes"
                ),
            ));
        }

        found.sort_by(|a, b| b.0.level().cmp(&a.0.level()).then(a.0.cmp(&b.0)));
        for (code, message) in found {
            let level = code.level();
            match level {
                Level::Error => report.summary.errors += 1,
                Level::Warning => report.summary.warnings += 1,
                Level::Info => report.summary.infos += 1,
            }
            report.findings.push(Finding {
                workload: workload.id(),
                level,
                code,
                message,
            });
        }
    }
    report
}

/// A PodDisruptionBudget to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuggestedBudget {
    /// The workload it protects (`namespace/Kind/name`).
    pub workload: String,
    pub namespace: String,
    pub name: String,
    pub selector: Selector,
    pub max_unavailable: i32,
    pub replicas: i32,
}

/// The `maxUnavailable` of a suggested budget: a quarter of the replicas, at least 1, so that a
/// drain can always evict and never takes more than a quarter at once.
pub fn suggested_max_unavailable(replicas: i32) -> i32 {
    (replicas / 4).max(1)
}

/// One budget per workload with a pod on spot that no budget selects and whose selector is
/// known (bare pods get none: a budget cannot bring them back). The name is the workload's,
/// or `<name>-pdb` when a budget of that name exists in the namespace.
pub fn suggested_budgets(view: &ClusterView) -> Vec<SuggestedBudget> {
    let mut out = Vec::new();
    let mut taken: BTreeSet<(String, String)> = view
        .budgets
        .iter()
        .map(|b| (b.namespace.clone(), b.name.clone()))
        .collect();
    for w in &view.workloads {
        let Some(selector) = w.selector.as_ref().filter(|s| !s.is_empty()) else {
            continue;
        };
        let on_spot = w.pods.iter().any(|p| {
            p.node
                .as_ref()
                .and_then(|n| view.nodes.get(n))
                .is_some_and(AuditNode::is_spot)
        });
        let selected = view
            .budgets
            .iter()
            .any(|b| w.pods.iter().any(|p| b.selects(&w.namespace, &p.labels)));
        if !on_spot || selected {
            continue;
        }
        let mut name = w.name.clone();
        if taken.contains(&(w.namespace.clone(), name.clone())) {
            name = format!("{}-pdb", w.name);
        }
        taken.insert((w.namespace.clone(), name.clone()));
        out.push(SuggestedBudget {
            workload: w.id(),
            namespace: w.namespace.clone(),
            name,
            selector: selector.clone(),
            max_unavailable: suggested_max_unavailable(w.replicas),
            replicas: w.replicas,
        });
    }
    out
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One budget as a YAML document (no `---`), ready for `kubectl apply -f`.
pub fn budget_yaml(b: &SuggestedBudget) -> String {
    let mut y = String::new();
    y.push_str(&format!(
        "# {}: {}, no PodDisruptionBudget selects them\n",
        b.workload.replace('\n', " "),
        plural(b.replicas.max(0) as usize, "replica")
    ));
    y.push_str("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n");
    y.push_str(&format!("  name: {}\n", quote(&b.name)));
    y.push_str(&format!("  namespace: {}\n", quote(&b.namespace)));
    y.push_str("  labels:\n    app.kubernetes.io/managed-by: \"forewarn\"\n");
    y.push_str("spec:\n");
    y.push_str(&format!("  maxUnavailable: {}\n", b.max_unavailable));
    y.push_str("  selector:\n");
    if !b.selector.match_labels.is_empty() {
        y.push_str("    matchLabels:\n");
        for (k, v) in &b.selector.match_labels {
            y.push_str(&format!("      {}: {}\n", quote(k), quote(v)));
        }
    }
    if !b.selector.match_expressions.is_empty() {
        y.push_str("    matchExpressions:\n");
        for r in &b.selector.match_expressions {
            y.push_str(&format!("      - key: {}\n", quote(&r.key)));
            y.push_str(&format!("        operator: {}\n", r.operator.as_str()));
            if !r.values.is_empty() {
                let values: Vec<String> = r.values.iter().map(|v| quote(v)).collect();
                y.push_str(&format!("        values: [{}]\n", values.join(", ")));
            }
        }
    }
    y
}

/// Every budget as one multi-document YAML stream.
pub fn budgets_yaml(budgets: &[SuggestedBudget]) -> String {
    budgets
        .iter()
        .map(|b| format!("---\n{}", budget_yaml(b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn spot_node(name: &str, itype: &str, zone: &str) -> AuditNode {
        AuditNode::from_labels(
            name,
            &labels(&[
                ("karpenter.sh/capacity-type", "spot"),
                ("node.kubernetes.io/instance-type", itype),
                ("topology.kubernetes.io/zone", zone),
            ]),
        )
    }

    fn od_node(name: &str) -> AuditNode {
        AuditNode::from_labels(
            name,
            &labels(&[
                ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
                ("node.kubernetes.io/instance-type", "m5.large"),
                ("topology.kubernetes.io/zone", "us-east-1a"),
            ]),
        )
    }

    /// Nodes: a1, a2 (spot m5.large 1a), b1 (spot c5.xlarge 1b), a3 (spot c5.xlarge 1a),
    /// od (on-demand).
    fn nodes() -> BTreeMap<String, AuditNode> {
        [
            spot_node("a1", "m5.large", "us-east-1a"),
            spot_node("a2", "m5.large", "us-east-1a"),
            spot_node("a3", "c5.xlarge", "us-east-1a"),
            spot_node("b1", "c5.xlarge", "us-east-1b"),
            od_node("od"),
        ]
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect()
    }

    fn pod(name: &str, node: &str) -> AuditPod {
        AuditPod {
            name: name.into(),
            labels: labels(&[("app", "web")]),
            node: Some(node.into()),
            ..AuditPod::default()
        }
    }

    fn deployment(nodes: &[&str]) -> Workload {
        Workload {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: "web".into(),
            replicas: nodes.len() as i32,
            selector: Some(Selector {
                match_labels: labels(&[("app", "web")]),
                ..Selector::default()
            }),
            pods: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| pod(&format!("web-{i}"), n))
                .collect(),
        }
    }

    fn budget(name: &str, ma: Option<IntOrPercent>, mu: Option<IntOrPercent>) -> Budget {
        Budget {
            namespace: "shop".into(),
            name: name.into(),
            selector: Some(Selector {
                match_labels: labels(&[("app", "web")]),
                ..Selector::default()
            }),
            min_available: ma,
            max_unavailable: mu,
        }
    }

    fn view(w: Workload, budgets: Vec<Budget>) -> ClusterView {
        ClusterView {
            workloads: vec![w],
            budgets,
            nodes: nodes(),
            priority_classes: [("system-cluster-critical".to_string(), 2_000_000_000)].into(),
        }
    }

    fn ok_budget() -> Vec<Budget> {
        vec![budget("web", None, Some(IntOrPercent::Int(1)))]
    }

    fn codes(v: &ClusterView, hot: &BTreeMap<PoolKey, HotPool>) -> Vec<&'static str> {
        audit(v, &Config::default(), hot)
            .findings
            .iter()
            .map(|f| f.code.as_str())
            .collect()
    }

    #[test]
    fn spot_labels() {
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("eks.amazonaws.com/capacityType", "SPOT")], true),
            (&[("eks.amazonaws.com/capacityType", "ON_DEMAND")], false),
            (&[("karpenter.sh/capacity-type", "spot")], true),
            (&[("karpenter.sh/capacity-type", "on-demand")], false),
            (&[("node.kubernetes.io/lifecycle", "spot")], true),
            (&[("node.kubernetes.io/lifecycle", "normal")], false),
            (&[("lifecycle", "Ec2Spot")], true),
            (&[("lifecycle", "OnDemand")], false),
            (&[], false),
        ];
        for (l, spot) in cases {
            assert_eq!(
                AuditNode::from_labels("n", &labels(l)).is_spot(),
                *spot,
                "{l:?}"
            );
        }
        let n = spot_node("n", "m5.large", "us-east-1a");
        assert_eq!(n.pool().unwrap().to_string(), "spot#m5.large#us-east-1a");
        let beta = AuditNode::from_labels(
            "n",
            &labels(&[
                ("beta.kubernetes.io/instance-type", "m5.large"),
                ("failure-domain.beta.kubernetes.io/zone", "us-east-1b"),
            ]),
        );
        assert_eq!(
            beta.pool().unwrap().to_string(),
            "on-demand#m5.large#us-east-1b"
        );
    }

    #[test]
    fn budget_arithmetic() {
        use IntOrPercent::{Int, Percent};
        // (minAvailable, maxUnavailable, expected, allowed)
        let cases = [
            (None, Some(Int(0)), 3, 0),
            (None, Some(Int(1)), 3, 1),
            (None, Some(Percent(0)), 3, 0),
            (None, Some(Percent(10)), 3, 1), // rounds up
            (Some(Int(3)), None, 3, 0),
            (Some(Int(4)), None, 3, 0),
            (Some(Int(2)), None, 3, 1),
            (Some(Percent(100)), None, 3, 0),
            (Some(Percent(50)), None, 3, 1), // 2 desired
            (Some(Percent(50)), None, 1, 0),
            (Some(Int(0)), None, 1, 1),
            (None, None, 2, 2),
            (None, Some(Int(1)), 0, 0),
            (Some(Int(1)), Some(Int(0)), 3, 0), // maxUnavailable wins
        ];
        for (ma, mu, expected, allowed) in cases {
            let b = budget("b", ma, mu);
            assert_eq!(
                b.allowed_when_healthy(expected),
                allowed,
                "{ma:?} {mu:?} {expected}"
            );
        }
        assert_eq!(IntOrPercent::parse("25%"), Ok(Percent(25)));
        assert_eq!(IntOrPercent::parse("2"), Ok(Int(2)));
        assert!(IntOrPercent::parse("x%").is_err());
        assert!(IntOrPercent::parse("-5%").is_err());
    }

    #[test]
    fn selectors() {
        let s = Selector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                Requirement {
                    key: "tier".into(),
                    operator: Operator::In,
                    values: vec!["a".into(), "b".into()],
                },
                Requirement {
                    key: "canary".into(),
                    operator: Operator::DoesNotExist,
                    values: vec![],
                },
            ],
        };
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")])));
        assert!(!s.matches(&labels(&[("tier", "a")])));
        let b = Budget {
            selector: Some(Selector::default()),
            ..budget("empty", None, Some(IntOrPercent::Int(1)))
        };
        assert!(
            !b.selects("shop", &labels(&[("app", "web")])),
            "empty selects nothing"
        );
        assert!(!budget("x", None, None).selects("other", &labels(&[("app", "web")])));
    }

    #[test]
    fn each_rule_on_small_states() {
        use IntOrPercent::{Int, Percent};
        let none = BTreeMap::new();
        let with_grace = |g: i64| {
            let mut w = deployment(&["a1", "b1"]);
            w.pods[1].grace_seconds = Some(g);
            w
        };
        let with_empty_dir = {
            let mut w = deployment(&["a1", "b1"]);
            w.pods[0].empty_dirs = vec!["cache".into()];
            w
        };
        let critical = {
            let mut w = deployment(&["a1", "b1"]);
            w.pods[0].priority_class = Some("system-cluster-critical".into());
            w
        };
        let critical_by_value = {
            let mut w = deployment(&["a1", "b1"]);
            w.pods[0].priority = Some(2_000_001_000);
            w
        };
        let bare = Workload {
            kind: WorkloadKind::Pod,
            replicas: 1,
            selector: None,
            ..deployment(&["a1"])
        };
        let overlap = vec![
            budget("web", None, Some(Int(1))),
            budget("all", Some(Int(1)), None),
        ];
        let cases: Vec<(&str, ClusterView, Vec<&str>)> = vec![
            (
                "spread and budgeted",
                view(deployment(&["a1", "b1"]), ok_budget()),
                vec![],
            ),
            ("not on spot", view(deployment(&["od"]), vec![]), vec![]),
            ("pending pods", view(deployment(&[]), vec![]), vec![]),
            (
                "no budget",
                view(deployment(&["a1", "b1"]), vec![]),
                vec!["no-pdb"],
            ),
            (
                "maxUnavailable 0",
                view(
                    deployment(&["a1", "b1"]),
                    vec![budget("web", None, Some(Int(0)))],
                ),
                vec!["pdb-blocks-eviction"],
            ),
            (
                "minAvailable = replicas",
                view(
                    deployment(&["a1", "b1"]),
                    vec![budget("web", Some(Int(2)), None)],
                ),
                vec!["pdb-blocks-eviction"],
            ),
            (
                "minAvailable 100%",
                view(
                    deployment(&["a1", "b1"]),
                    vec![budget("web", Some(Percent(100)), None)],
                ),
                vec!["pdb-blocks-eviction"],
            ),
            (
                "minAvailable below replicas",
                view(
                    deployment(&["a1", "b1"]),
                    vec![budget("web", Some(Int(1)), None)],
                ),
                vec![],
            ),
            (
                "two budgets",
                view(deployment(&["a1", "b1"]), overlap),
                vec!["pdb-overlap"],
            ),
            (
                "one replica",
                view(deployment(&["a1"]), ok_budget()),
                vec!["single-replica"],
            ),
            (
                "one node",
                view(deployment(&["a1", "a1"]), ok_budget()),
                vec!["one-node"],
            ),
            (
                "one pool",
                view(deployment(&["a1", "a2"]), ok_budget()),
                vec!["one-pool"],
            ),
            (
                "one zone",
                view(deployment(&["a1", "a3"]), ok_budget()),
                vec!["one-zone"],
            ),
            (
                "one spot pool and on-demand",
                view(deployment(&["a1", "od"]), ok_budget()),
                vec!["one-zone"],
            ),
            ("grace 105", view(with_grace(105), ok_budget()), vec![]),
            (
                "grace 106",
                view(with_grace(106), ok_budget()),
                vec!["grace-too-long"],
            ),
            (
                "emptyDir",
                view(with_empty_dir, ok_budget()),
                vec!["local-storage"],
            ),
            (
                "critical class",
                view(critical, ok_budget()),
                vec!["critical-on-spot"],
            ),
            (
                "critical value",
                view(critical_by_value, ok_budget()),
                vec!["critical-on-spot"],
            ),
            ("bare pod", view(bare, vec![]), vec!["no-controller"]),
        ];
        for (name, v, want) in cases {
            assert_eq!(codes(&v, &none), want, "{name}");
        }
    }

    #[test]
    fn hot_pools_from_the_pool_table() {
        let now: DateTime<Utc> = "2026-11-20T12:00:00Z".parse().unwrap();
        let record = |pool: &str, n: u64, age_h: i64| PoolRecord {
            pool: pool.parse().unwrap(),
            region: None,
            unavailable_until: None,
            expires_at: now + Duration::days(30),
            counters: [("interruptions".to_string(), n)].into(),
            first_seen: now - Duration::hours(age_h),
            last_seen: now - Duration::hours(age_h),
            last_event_id: "e".into(),
            last_reason: "r".into(),
            last_instance_id: "i".into(),
        };
        let records = vec![
            record("spot#c5.xlarge#us-east-1b", 2, 1),
            record("spot#m5.large#us-east-1a", 1, 24 * 30),
        ];
        let hot = hot_pools(&records, now, Duration::days(7));
        assert_eq!(hot.len(), 1, "the old one is not recent");
        let v = view(deployment(&["a1", "b1"]), ok_budget());
        let report = audit(&v, &Config::default(), &hot);
        assert_eq!(report.findings.len(), 1);
        assert_eq!(report.findings[0].code, Code::HotPool);
        assert_eq!(report.findings[0].level, Level::Warning);
        assert!(
            report.findings[0]
                .message
                .contains("1 replica in spot#c5.xlarge#us-east-1b (2 interruptions"),
            "{}",
            report.findings[0].message
        );
    }

    #[test]
    fn findings_are_ordered_and_summarised() {
        let mut w = deployment(&["a1", "a1", "od"]);
        w.pods[0].empty_dirs = vec!["tmp".into()];
        let mut v = view(w, vec![]);
        v.workloads.push(Workload {
            name: "solo".into(),
            selector: None,
            ..deployment(&["od"])
        });
        let report = audit(&v, &Config::default(), &BTreeMap::new());
        let got: Vec<(&str, Level)> = report
            .findings
            .iter()
            .map(|f| (f.code.as_str(), f.level))
            .collect();
        assert_eq!(
            got,
            vec![
                ("no-pdb", Level::Warning),
                ("one-zone", Level::Info),
                ("local-storage", Level::Info)
            ]
        );
        assert_eq!(report.findings[0].workload, "shop/Deployment/web");
        let s = &report.summary;
        assert_eq!((s.workloads, s.checked), (2, 1));
        assert_eq!((s.errors, s.warnings, s.infos), (0, 1, 2));
        // Both spot replicas share a pool, the on-demand one survives it.
        assert_eq!((s.spot_replicas, s.surviving_replicas), (2, 2));
        assert_eq!(report.worst(), Some(Level::Warning));

        let v = view(deployment(&["a1", "a2"]), ok_budget());
        let s = audit(&v, &Config::default(), &BTreeMap::new()).summary;
        assert_eq!((s.spot_replicas, s.surviving_replicas), (2, 0));
        assert_eq!(s.survival(), 0.0);
        assert_eq!(Summary::default().survival(), 1.0);
    }

    #[test]
    fn suggested_budgets_and_their_yaml() {
        let mut v = view(
            deployment(&["a1", "b1", "a2", "a3", "b1", "a1", "a2", "a3"]),
            vec![],
        );
        v.budgets.push(Budget {
            name: "web".into(),
            selector: Some(Selector {
                match_labels: labels(&[("app", "other")]),
                ..Selector::default()
            }),
            ..budget("web", None, None)
        });
        v.workloads[0]
            .selector
            .as_mut()
            .unwrap()
            .match_expressions
            .push(Requirement {
                key: "tier".into(),
                operator: Operator::NotIn,
                values: vec!["a\"b".into()],
            });
        v.workloads.push(Workload {
            name: "od-only".into(),
            ..deployment(&["od"])
        });
        let budgets = suggested_budgets(&v);
        assert_eq!(budgets.len(), 1);
        let b = &budgets[0];
        assert_eq!(b.name, "web-pdb", "the name `web` is taken");
        assert_eq!(b.max_unavailable, 2);
        assert_eq!(
            budget_yaml(b),
            "# shop/Deployment/web: 8 replicas, no PodDisruptionBudget selects them\n\
             apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: \"web-pdb\"\n\
             \x20 namespace: \"shop\"\n  labels:\n    app.kubernetes.io/managed-by: \"forewarn\"\n\
             spec:\n  maxUnavailable: 2\n  selector:\n    matchLabels:\n      \"app\": \"web\"\n\
             \x20   matchExpressions:\n      - key: \"tier\"\n        operator: NotIn\n\
             \x20       values: [\"a\\\"b\"]\n"
        );
        assert_eq!(suggested_max_unavailable(1), 1);
        assert_eq!(suggested_max_unavailable(3), 1);
        assert!(budgets_yaml(&budgets).starts_with("---\n# shop"));
        // Budgeted or bare: nothing to suggest.
        assert!(suggested_budgets(&view(deployment(&["a1"]), ok_budget())).is_empty());
        let bare = Workload {
            kind: WorkloadKind::Pod,
            selector: None,
            ..deployment(&["a1"])
        };
        assert!(suggested_budgets(&view(bare, vec![])).is_empty());
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a"), "\"a\"");
        assert_eq!(quote("x\ny\u{1}"), "\"x\\ny\\u0001\"");
    }
}
