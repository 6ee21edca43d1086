//! What the audit reports: levels, finding codes, findings and their summary, and the pools the
//! pool table saw interrupted.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::domain::names::string_forms;
use crate::domain::pool::{PoolKey, PoolRecord};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum Level {
    Info,
    Warning,
    Error,
}

string_forms!(Level, "a level");

/// The finding codes, stable: scripts match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
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
    /// A GPU workload whose pods cannot all leave a Capacity Block's node in the ten minutes
    /// before its instances terminate: its budget allows no eviction, several budgets select a
    /// pod (the eviction API answers 500), or it needs more rounds than fit.
    BlockDrainStalls,
    /// A GPU workload whose grace period, after its budget's rounds, ends past the termination
    /// of a Capacity Block's instances.
    BlockGraceLong,
    /// A GPU workload that leaves a Capacity Block in time but without a checkpoint hook (no
    /// `preStop` on a GPU container): its pods get only SIGTERM and their grace.
    BlockNoCheckpoint,
    /// A GPU workload that leaves a Capacity Block in time, with a checkpoint hook.
    BlockReady,
}

string_forms!(Code, "a finding code");

impl Code {
    /// The level of a finding with this code.
    pub fn level(self) -> Level {
        match self {
            Code::PdbBlocksEviction
            | Code::PdbOverlap
            | Code::SingleReplica
            | Code::OneNode
            | Code::BlockDrainStalls => Level::Error,
            Code::NoPdb
            | Code::OnePool
            | Code::GraceTooLong
            | Code::HotPool
            | Code::NoController
            | Code::CriticalOnSpot
            | Code::BlockGraceLong
            | Code::BlockNoCheckpoint => Level::Warning,
            Code::OneZone | Code::LocalStorage | Code::BlockReady => Level::Info,
        }
    }
}

/// `1 pod`, `2 pods`: `n` of `one`, for a finding's text.
pub(super) fn plural(n: impl std::fmt::Display, one: &str) -> String {
    let n = n.to_string();
    format!("{n} {one}{}", if n == "1" { "" } else { "s" })
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

/// The pools among `records` interrupted at least once and last seen within `window` of `now`.
pub fn hot_pools(
    records: &[PoolRecord],
    now: DateTime<Utc>,
    window: Duration,
) -> BTreeMap<PoolKey, &PoolRecord> {
    records
        .iter()
        .filter(|r| r.interruptions() > 0 && r.last_seen >= now - window)
        .map(|r| (r.pool.clone(), r))
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

/// The numbers of an audit (serialized as `--output json`'s summary line has them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Workloads read (DaemonSets are not).
    pub workloads: usize,
    /// Those with at least one pod on spot capacity: the ones checked.
    pub checked: usize,
    pub findings: Counts,
    /// Replicas (pods) on spot nodes.
    pub spot_replicas: usize,
    /// Those whose workload keeps a replica outside their pool when their pool is interrupted.
    pub surviving_replicas: usize,
}

/// The findings of each level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub error: usize,
    pub info: usize,
    pub warning: usize,
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
