//! The rules: what would hurt when a spot node goes, workload by workload ([`audit`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::audit::blocks::capacity_block;
use crate::domain::audit::findings::{AuditReport, Code, Finding, Level, plural};
use crate::domain::audit::model::{
    AuditNode, AuditPod, CRITICAL_PRIORITY, ClusterView, DEFAULT_GRACE_SECONDS, Workload,
    WorkloadKind,
};
use crate::domain::config::Config;
use crate::domain::pool::{PoolKey, PoolRecord};

/// Runs every rule over every workload with a pod on spot capacity, and the Capacity Block
/// check ([`capacity_block`]) over every GPU workload, on spot or not. Findings come grouped by
/// workload, most severe first.
///
/// `hot` are the pools recently interrupted ([`hot_pools`](super::hot_pools)); `config` gives
/// the notice and forewarn's margin (the grace rules).
pub fn audit(
    view: &ClusterView,
    config: &Config,
    hot: &BTreeMap<PoolKey, &PoolRecord>,
) -> AuditReport {
    let mut report = AuditReport::default();
    for workload in &view.workloads {
        report.summary.workloads += 1;
        let mut found: Vec<(Code, String)> =
            capacity_block(view, workload, config).into_iter().collect();
        if let Some(checked) = Checked::new(view, workload) {
            report.summary.checked += 1;
            checked.count_survivors(&mut report);
            found.extend(checked.budgets());
            found.extend(checked.spread());
            found.extend(checked.grace(config));
            found.extend(checked.hot_pools(hot));
            found.extend(checked.local_storage());
            found.extend(checked.priority());
        }
        found.sort_by_key(|(code, _)| (Reverse(code.level()), *code));
        for (code, message) in found {
            let (level, counts) = (code.level(), &mut report.summary.findings);
            *match level {
                Level::Error => &mut counts.error,
                Level::Warning => &mut counts.warning,
                Level::Info => &mut counts.info,
            } += 1;
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

/// Where one pod runs.
struct Placement<'a> {
    pod: &'a AuditPod,
    node: &'a str,
    spot: bool,
    pool: Option<PoolKey>,
    zone: Option<&'a str>,
}

/// One workload with a pod on spot capacity, where its pods run.
struct Checked<'a> {
    view: &'a ClusterView,
    workload: &'a Workload,
    placements: Vec<Placement<'a>>,
    /// The node of its first pod on spot capacity.
    first_spot: &'a str,
}

/// The one value `items` all have, if they agree (`None` when there is none).
fn only<T: PartialEq>(mut items: impl Iterator<Item = T>) -> Option<T> {
    let first = items.next()?;
    items.all(|i| i == first).then_some(first)
}

impl<'a> Checked<'a> {
    /// `None` when no pod of `workload` runs on spot capacity.
    fn new(view: &'a ClusterView, workload: &'a Workload) -> Option<Checked<'a>> {
        let placements: Vec<Placement<'a>> = workload
            .pods
            .iter()
            .filter_map(|pod| {
                let (node, facts) = (pod.node.as_deref()?, view.node_of(pod));
                Some(Placement {
                    pod,
                    node,
                    spot: facts.is_some_and(AuditNode::is_spot),
                    pool: facts.and_then(AuditNode::pool),
                    zone: facts.and_then(|n| n.zone.as_deref()),
                })
            })
            .collect();
        let first_spot = placements.iter().find(|p| p.spot)?.node;
        Some(Checked {
            view,
            workload,
            placements,
            first_spot,
        })
    }

    /// The placements on spot nodes.
    fn spot(&self) -> impl Iterator<Item = &Placement<'a>> {
        self.placements.iter().filter(|p| p.spot)
    }

    /// Survival: a spot replica survives when its workload keeps a replica elsewhere.
    fn count_survivors(&self, report: &mut AuditReport) {
        for p in self.spot() {
            let elsewhere = self.placements.iter().any(|q| match (&p.pool, &q.pool) {
                (Some(a), Some(b)) => a != b,
                // Pool unknown: only another node counts.
                _ => q.node != p.node,
            });
            report.summary.spot_replicas += 1;
            report.summary.surviving_replicas += usize::from(elsewhere);
        }
    }

    /// Budgets: none, one that never allows an eviction, several on one pod.
    fn budgets(&self) -> Vec<(Code, String)> {
        let budgets = self.view.budgets_of(self.workload);
        let mut found = Vec::new();
        if self.workload.kind == WorkloadKind::Pod {
            found.push((
                Code::NoController,
                format!(
                    "bare pod on spot node {}: once evicted or interrupted nothing recreates it",
                    self.first_spot
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
            let (about, allowed) = self.view.describe(b);
            if allowed == 0 {
                found.push((
                    Code::PdbBlocksEviction,
                    format!(
                        "{about} never allows an eviction: a drain stalls until the instance is \
                         reclaimed"
                    ),
                ));
            }
        }
        let (pods, names) = self.workload.overlapping(&budgets);
        if pods > 0 {
            found.push((
                Code::PdbOverlap,
                format!(
                    "{} selected by several PodDisruptionBudgets ({names}): the eviction API \
                     answers 500 and a drain cannot evict them",
                    plural(pods, "pod")
                ),
            ));
        }
        found
    }

    /// Spread: one replica, or every replica on one node, in one pool or in one zone.
    fn spread(&self) -> Option<(Code, String)> {
        let (workload, placements) = (self.workload, &self.placements);
        let n = placements.len();
        if workload.kind != WorkloadKind::Pod && workload.replicas <= 1 {
            return Some((
                Code::SingleReplica,
                format!(
                    "{} replica, on spot node {}: an interruption is an outage until it is \
                     rescheduled",
                    workload.replicas.max(0),
                    self.first_spot
                ),
            ));
        }
        if n <= 1 {
            None
        } else if let Some(node) = only(placements.iter().map(|p| p.node)) {
            Some((
                Code::OneNode,
                format!("all {n} replicas on spot node {node}: one interruption takes them all"),
            ))
        } else if let Some(Some(pool)) = only(placements.iter().map(|p| &p.pool)) {
            Some((
                Code::OnePool,
                format!(
                    "all {n} replicas in spot pool {pool}: one pool interruption can take \
                     them all"
                ),
            ))
        } else if let Some(Some(zone)) = only(placements.iter().map(|p| p.zone)) {
            Some((Code::OneZone, format!("all {n} replicas in zone {zone}")))
        } else {
            None
        }
    }

    /// Grace periods longer than what a spot warning leaves.
    fn grace(&self, config: &Config) -> Option<(Code, String)> {
        let grace_limit = (config.interruption_notice - config.deadline_margin).num_seconds();
        let (grace, pod) = self
            .spot()
            .map(|p| {
                let grace = p.pod.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS);
                (grace, &p.pod.name)
            })
            .filter(|(g, _)| *g > grace_limit)
            .max()?;
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
    fn hot_pools(&self, hot: &BTreeMap<PoolKey, &PoolRecord>) -> Option<(Code, String)> {
        let mut here: BTreeMap<&PoolKey, (usize, &PoolRecord)> = BTreeMap::new();
        for p in self.spot() {
            if let Some((pool, h)) = p.pool.as_ref().and_then(|pool| hot.get_key_value(pool)) {
                here.entry(pool).or_insert((0, h)).0 += 1;
            }
        }
        let parts: Vec<String> = here
            .iter()
            .map(|(pool, (n, h))| {
                format!(
                    "{} in {pool} ({}, last {})",
                    plural(n, "replica"),
                    plural(h.interruptions(), "interruption"),
                    h.last_seen.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .collect();
        let parts = parts.join("; ");
        let message = format!("recently interrupted pools: {parts}");
        (!parts.is_empty()).then_some((Code::HotPool, message))
    }

    /// Local storage a drain discards.
    fn local_storage(&self) -> Option<(Code, String)> {
        let pods = self.spot().filter(|p| !p.pod.empty_dirs.is_empty()).count();
        let volumes: BTreeSet<&str> = (self.spot().flat_map(|p| &p.pod.empty_dirs))
            .map(String::as_str)
            .collect();
        let message = format!(
            "{} on spot with emptyDir volumes ({}): a drain discards their data",
            plural(pods, "pod"),
            Vec::from_iter(volumes).join(", ")
        );
        (pods > 0).then_some((Code::LocalStorage, message))
    }

    /// Priority: a critical workload on spot capacity.
    fn priority(&self) -> Option<(Code, String)> {
        let (class, value) = self.spot().find_map(|p| {
            let class = p.pod.priority_class.as_ref();
            let value = class
                .and_then(|c| self.view.priority_classes.get(c).copied())
                .or(p.pod.priority)?;
            (value >= CRITICAL_PRIORITY).then_some((class, value))
        })?;
        let class = (class.filter(|c| !c.is_empty())).map_or(String::new(), |c| format!("{c}, "));
        Some((
            Code::CriticalOnSpot,
            format!(
                "critical priority ({class}{value}) on spot capacity: keep it on on-demand nodes"
            ),
        ))
    }
}
