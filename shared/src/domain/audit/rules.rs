//! The rules: what would hurt when a spot node goes, workload by workload ([`audit`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::audit::blocks::capacity_block;
use crate::domain::audit::findings::{AuditReport, Code, Finding, HotPool, Level, plural};
use crate::domain::audit::model::{
    AuditNode, AuditPod, Budget, CRITICAL_PRIORITY, ClusterView, DEFAULT_GRACE_SECONDS, Workload,
    WorkloadKind,
};
use crate::domain::config::Config;
use crate::domain::pool::PoolKey;

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

/// Runs every rule over every workload with a pod on spot capacity, and the Capacity Block
/// check ([`capacity_block`]) over every GPU workload, on spot or not.
///
/// `hot` are the pools recently interrupted ([`hot_pools`](super::hot_pools)); `config` gives
/// the notice and forewarn's margin (the grace rules).
pub fn audit(view: &ClusterView, config: &Config, hot: &BTreeMap<PoolKey, HotPool>) -> AuditReport {
    let mut report = AuditReport::default();
    for workload in &view.workloads {
        report.summary.workloads += 1;
        let mut found: Vec<(Code, String)> =
            capacity_block(view, workload, config).into_iter().collect();
        let checked = Checked::new(view, workload);
        if !checked.spot.is_empty() {
            report.summary.checked += 1;
            checked.count_survivors(&mut report);
            found.extend(checked.budgets());
            found.extend(checked.spread());
            found.extend(checked.grace(config));
            found.extend(checked.hot_pools(hot));
            found.extend(checked.local_storage());
            found.extend(checked.priority());
        }
        record(&mut report, workload, found);
    }
    report
}

/// One workload with a pod on spot capacity, where its pods run.
struct Checked<'a> {
    view: &'a ClusterView,
    workload: &'a Workload,
    placements: Vec<Placement<'a>>,
    /// The indexes in `placements` of the pods on spot nodes.
    spot: Vec<usize>,
}

impl<'a> Checked<'a> {
    fn new(view: &'a ClusterView, workload: &'a Workload) -> Checked<'a> {
        let placements: Vec<Placement<'a>> = workload
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
        let spot = (0..placements.len())
            .filter(|i| placements[*i].spot())
            .collect();
        Checked {
            view,
            workload,
            placements,
            spot,
        }
    }

    /// The placements on spot nodes.
    fn spot(&self) -> impl Iterator<Item = &Placement<'a>> {
        self.spot.iter().map(|i| &self.placements[*i])
    }

    /// The first spot node (there is one: only such workloads are checked).
    fn first_spot_node(&self) -> &'a str {
        self.placements[self.spot[0]].node
    }

    /// Survival: a spot replica survives when its workload keeps a replica elsewhere.
    fn count_survivors(&self, report: &mut AuditReport) {
        for p in self.spot() {
            report.summary.spot_replicas += 1;
            let pool = p.pool();
            let elsewhere = self.placements.iter().any(|q| match (&pool, q.pool()) {
                (Some(a), Some(b)) => *a != b,
                // Pool unknown: only another node counts.
                _ => q.node != p.node,
            });
            if elsewhere {
                report.summary.surviving_replicas += 1;
            }
        }
    }

    /// Budgets: none, one that never allows an eviction, several on one pod.
    fn budgets(&self) -> Vec<(Code, String)> {
        let (view, workload) = (self.view, self.workload);
        let mut found = Vec::new();
        let budgets: Vec<&Budget> = view.budgets_of(workload);
        if workload.kind == WorkloadKind::Pod {
            found.push((
                Code::NoController,
                format!(
                    "bare pod on spot node {}: once evicted or interrupted nothing recreates it",
                    self.first_spot_node()
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
            let expected = view.expected_pods(b);
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
        found.extend(overlap(workload, &budgets));
        found
    }

    /// Spread: one replica, or every replica on one node, in one pool or in one zone.
    fn spread(&self) -> Option<(Code, String)> {
        let (workload, placements) = (self.workload, &self.placements);
        if workload.kind != WorkloadKind::Pod && workload.replicas <= 1 {
            return Some((
                Code::SingleReplica,
                format!(
                    "{} replica, on spot node {}: an interruption is an outage until it is \
                     rescheduled",
                    workload.replicas.max(0),
                    self.first_spot_node()
                ),
            ));
        }
        if placements.len() <= 1 {
            return None;
        }
        let nodes: BTreeSet<&str> = placements.iter().map(|p| p.node).collect();
        let pools: BTreeSet<Option<PoolKey>> = placements.iter().map(|p| p.pool()).collect();
        let zones: BTreeSet<Option<&str>> = placements.iter().map(|p| p.zone()).collect();
        let n = placements.len();
        if nodes.len() == 1 {
            Some((
                Code::OneNode,
                format!(
                    "all {n} replicas on spot node {}: one interruption takes them all",
                    self.first_spot_node()
                ),
            ))
        } else if pools.len() == 1
            && let Some(Some(pool)) = pools.first()
        {
            Some((
                Code::OnePool,
                format!(
                    "all {n} replicas in spot pool {pool}: one pool interruption can take \
                     them all"
                ),
            ))
        } else if zones.len() == 1
            && let Some(Some(zone)) = zones.first()
        {
            Some((Code::OneZone, format!("all {n} replicas in zone {zone}")))
        } else {
            None
        }
    }

    /// Grace periods longer than what a spot warning leaves.
    fn grace(&self, config: &Config) -> Option<(Code, String)> {
        let grace_limit = (config.interruption_notice - config.deadline_margin).num_seconds();
        let mut long: Vec<(i64, &str)> = self
            .spot()
            .map(|p| {
                (
                    p.pod.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS),
                    p.pod.name.as_str(),
                )
            })
            .filter(|(g, _)| *g > grace_limit)
            .collect();
        long.sort();
        let (grace, pod) = long.last()?;
        Some((
            Code::GraceTooLong,
            format!(
                "terminationGracePeriodSeconds {grace} (pod {pod}) is longer than the {grace_limit} s \
                 a spot warning leaves ({} s notice, {} s margin): it is killed mid-shutdown",
                config.interruption_notice.num_seconds(),
                config.deadline_margin.num_seconds()
            ),
        ))
    }

    /// Recently interrupted pools.
    fn hot_pools(&self, hot: &BTreeMap<PoolKey, HotPool>) -> Option<(Code, String)> {
        let mut hot_here: BTreeMap<PoolKey, (usize, &HotPool)> = BTreeMap::new();
        for p in self.spot() {
            if let Some(pool) = p.pool()
                && let Some(h) = hot.get(&pool)
            {
                hot_here.entry(pool).or_insert((0, h)).0 += 1;
            }
        }
        if hot_here.is_empty() {
            return None;
        }
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
        Some((
            Code::HotPool,
            format!("recently interrupted pools: {}", parts.join("; ")),
        ))
    }

    /// Local storage a drain discards.
    fn local_storage(&self) -> Option<(Code, String)> {
        let mut volumes: BTreeSet<&str> = BTreeSet::new();
        let mut with_local = 0;
        for p in self.spot() {
            if !p.pod.empty_dirs.is_empty() {
                with_local += 1;
                volumes.extend(p.pod.empty_dirs.iter().map(String::as_str));
            }
        }
        (with_local > 0).then(|| {
            (
                Code::LocalStorage,
                format!(
                    "{} on spot with emptyDir volumes ({}): a drain discards their data",
                    plural(with_local, "pod"),
                    volumes.into_iter().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }

    /// Priority: a critical workload on spot capacity.
    fn priority(&self) -> Option<(Code, String)> {
        let (class, value) = self.spot().find_map(|p| {
            let value = p
                .pod
                .priority_class
                .as_ref()
                .and_then(|c| self.view.priority_classes.get(c).copied())
                .or(p.pod.priority)?;
            (value >= CRITICAL_PRIORITY)
                .then(|| (p.pod.priority_class.clone().unwrap_or_default(), value))
        })?;
        let class = if class.is_empty() {
            String::new()
        } else {
            format!("{class}, ")
        };
        Some((
            Code::CriticalOnSpot,
            format!(
                "critical priority ({class}{value}) on spot capacity: keep it on on-demand nodes"
            ),
        ))
    }
}

/// Pods selected by several of `budgets`: the eviction API refuses them.
fn overlap(workload: &Workload, budgets: &[&Budget]) -> Option<(Code, String)> {
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
    (overlap_pods > 0).then(|| {
        (
            Code::PdbOverlap,
            format!(
                "{} selected by several PodDisruptionBudgets ({}): the eviction API answers \
                 500 and a drain cannot evict them",
                plural(overlap_pods, "pod"),
                overlapping.into_iter().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

/// Adds a workload's findings to the report, most severe first, and counts them.
fn record(report: &mut AuditReport, workload: &Workload, mut found: Vec<(Code, String)>) {
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
