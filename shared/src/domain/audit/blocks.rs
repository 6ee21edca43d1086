//! The Capacity Block check ([`capacity_block`]). EC2 warns 40 minutes before a Capacity Block
//! for ML ends and begins to terminate its instances 30 minutes before the end:
//! [`BLOCK_WINDOW`] after the warning. Within those ten minutes (less forewarn's margin), can a
//! GPU workload's pods leave a block's node: (a) does its PodDisruptionBudget let all its pods
//! on one node go, in rounds that fit; (b) does its grace period end in time after them; (c)
//! does it checkpoint (a `preStop` hook on a GPU container)? One finding per GPU workload,
//! whatever its nodes' capacity type: the audit cannot tell which nodes are Capacity Blocks.
//!
//! A round is [`ROUND`], as surge counts it: an evicted pod's replacement started and Ready
//! before the budget lets the next go. The rounds are those of the node with the most of the
//! workload's GPU pods, with the most restrictive budget selecting its pods.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Duration;

use crate::domain::audit::findings::{Code, plural};
use crate::domain::audit::model::{AuditPod, Budget, ClusterView, DEFAULT_GRACE_SECONDS, Workload};
use crate::domain::config::Config;
use crate::domain::event::BLOCK_WARNING_LEAD;
use crate::domain::surge::ROUND;

/// How long after its expiration warning a Capacity Block's instances begin to terminate (the
/// warning comes 40 minutes before the block's end, the termination 30 minutes before it):
/// [`BLOCK_WARNING_LEAD`], as the drain of a block's node counts it.
pub const BLOCK_WINDOW: Duration = BLOCK_WARNING_LEAD;

/// How a drain of one node gets through a workload's budgets.
enum Rounds {
    /// The last round starting `last_start` seconds in; `text` says how.
    Fit { last_start: i64, text: String },
    /// Not within the window; `text` says why.
    Stall(String),
}

/// The Capacity Block finding of `workload`, when its pods request an accelerator (see the
/// module doc); `config` gives forewarn's margin.
pub(super) fn capacity_block(
    view: &ClusterView,
    workload: &Workload,
    config: &Config,
) -> Option<(Code, String)> {
    let gpu_pods: Vec<&AuditPod> = workload
        .pods
        .iter()
        .filter(|p| !p.gpus().is_empty())
        .collect();
    if gpu_pods.is_empty() {
        return None;
    }
    let window = BLOCK_WINDOW.num_seconds();
    let margin = config.deadline_margin.num_seconds().clamp(0, window);
    let available = window - margin;
    let grace = gpu_pods
        .iter()
        .map(|p| p.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS).max(0))
        .max()
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    let rounds = budget_rounds(view, workload, &gpu_pods, available);
    let last_start = match &rounds {
        Rounds::Fit { last_start, .. } => *last_start,
        Rounds::Stall(_) => 0,
    };
    let end = last_start.saturating_add(grace);
    let grace_fits = end <= available;
    let grace_text = if last_start == 0 {
        format!("{grace} s, done {end} s in")
    } else {
        format!("{grace} s after the last round's start, done {end} s in")
    };
    let missing = without_hook(&gpu_pods);
    let (code, budget_text) = match rounds {
        Rounds::Stall(text) => (
            Code::BlockDrainStalls,
            format!("budget does not fit: {text}"),
        ),
        Rounds::Fit { text, .. } => {
            let code = if !grace_fits {
                Code::BlockGraceLong
            } else if !missing.is_empty() {
                Code::BlockNoCheckpoint
            } else {
                Code::BlockReady
            };
            (code, format!("budget fits: {text}"))
        }
    };
    let grace_text = if grace_fits {
        format!("grace fits: {grace_text}")
    } else {
        format!("grace does not fit: {grace_text}, past the {available} s: killed mid-shutdown")
    };
    let hook_text = if missing.is_empty() {
        "checkpoint hook: preStop on its GPU containers".to_string()
    } else {
        format!(
            "no checkpoint hook: no preStop on its GPU containers ({}), so each pod gets only \
             SIGTERM and its {grace} s grace",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    Some((
        code,
        format!(
            "{} ({}) has {available} s to leave a Capacity Block (its instances terminate \
             {window} s after the expiration warning; forewarn's margin is {margin} s): \
             {budget_text}; {grace_text}; {hook_text}",
            workload.id(),
            describe_gpus(&gpu_pods),
        ),
    ))
}

/// `2 GPU pods, 16 nvidia.com/gpu`.
fn describe_gpus(gpu_pods: &[&AuditPod]) -> String {
    let mut total: BTreeMap<&str, i64> = BTreeMap::new();
    for p in gpu_pods {
        for (name, n) in p.gpus() {
            let e = total.entry(name).or_default();
            *e = e.saturating_add(n);
        }
    }
    let resources: Vec<String> = total.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "{}, {}",
        plural(gpu_pods.len(), "GPU pod"),
        resources.join(", ")
    )
}

/// The node with the most of `gpu_pods` (the first by name among equals) and how many are on
/// it; `None` and 1 when none is on a node yet.
fn busiest_node<'a>(gpu_pods: &[&'a AuditPod]) -> (Option<&'a str>, usize) {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in gpu_pods {
        if let Some(node) = p.node.as_deref() {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let mut busiest: (Option<&str>, usize) = (None, 1);
    for (node, n) in per_node {
        if busiest.0.is_none() || n > busiest.1 {
            busiest = (Some(node), n);
        }
    }
    busiest
}

/// How a drain of the node with the most of `gpu_pods` gets through the budgets that select
/// the workload's pods, within `available` seconds.
fn budget_rounds(
    view: &ClusterView,
    workload: &Workload,
    gpu_pods: &[&AuditPod],
    available: i64,
) -> Rounds {
    let (node, on_node) = busiest_node(gpu_pods);
    let pods = match node {
        Some(node) => format!("the {} on node {node}", plural(on_node, "pod")),
        None => "its pods (none on a node yet)".to_string(),
    };
    let budgets: Vec<&Budget> = view.budgets_of(workload);
    let mut overlapping: BTreeSet<&str> = BTreeSet::new();
    for p in &workload.pods {
        let names: Vec<&str> = budgets
            .iter()
            .filter(|b| b.selects(&workload.namespace, &p.labels))
            .map(|b| b.name.as_str())
            .collect();
        if names.len() > 1 {
            overlapping.extend(names);
        }
    }
    if !overlapping.is_empty() {
        return Rounds::Stall(format!(
            "several PodDisruptionBudgets ({}) select one pod: the eviction API answers 500",
            overlapping.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let Some((budget, expected, allowed)) = budgets
        .iter()
        .map(|b| {
            let expected = view.expected_pods(b);
            (*b, expected, b.allowed_when_healthy(expected))
        })
        .min_by_key(|(_, _, allowed)| *allowed)
    else {
        return Rounds::Fit {
            last_start: 0,
            text: format!("no PodDisruptionBudget selects its pods: {pods} may go at once"),
        };
    };
    let about = format!(
        "PodDisruptionBudget {}/{} ({}, {} expected)",
        budget.namespace,
        budget.name,
        budget.describe(),
        plural(expected.max(0) as usize, "pod")
    );
    rounds_of(&about, &pods, on_node, allowed, available)
}

/// The rounds a budget (`about`) that allows `allowed` evictions needs for `on_node` pods
/// (`pods`), within `available` seconds.
fn rounds_of(about: &str, pods: &str, on_node: usize, allowed: i64, available: i64) -> Rounds {
    if allowed <= 0 {
        return Rounds::Stall(format!(
            "{about} allows no eviction: {pods} cannot leave before the instance terminates"
        ));
    }
    let on_node = i64::try_from(on_node).unwrap_or(i64::MAX);
    let rounds = (on_node.saturating_add(allowed - 1) / allowed).max(1);
    let round = ROUND.num_seconds();
    let last_start = (rounds - 1).saturating_mul(round);
    if rounds == 1 {
        return Rounds::Fit {
            last_start,
            text: format!("{about} lets {pods} go at once"),
        };
    }
    let how = format!(
        "{about} lets {pods} go {allowed} at a time: {rounds} rounds of {round} s, the last \
         starting {last_start} s in"
    );
    if last_start > available {
        Rounds::Stall(format!("{how}, past the {available} s"))
    } else {
        Rounds::Fit {
            last_start,
            text: how,
        }
    }
}

/// The GPU containers of the pods of `gpu_pods` that have no `preStop` hook on any GPU
/// container, by name.
fn without_hook<'a>(gpu_pods: &[&'a AuditPod]) -> BTreeSet<&'a str> {
    let mut missing = BTreeSet::new();
    for p in gpu_pods {
        let gpu: Vec<_> = p.containers.iter().filter(|c| c.is_gpu()).collect();
        if !gpu.iter().any(|c| c.pre_stop) {
            missing.extend(gpu.iter().map(|c| c.name.as_str()));
        }
    }
    missing
}
