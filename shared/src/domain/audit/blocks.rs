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
use crate::domain::audit::model::{
    AuditContainer, AuditPod, ClusterView, DEFAULT_GRACE_SECONDS, Workload, sum_gpus,
};
use crate::domain::config::Config;
use crate::domain::event::BLOCK_WARNING_LEAD;
use crate::domain::surge::ROUND;

/// How long after its expiration warning a Capacity Block's instances begin to terminate (the
/// warning comes 40 minutes before the block's end, the termination 30 minutes before it):
/// [`BLOCK_WARNING_LEAD`], as the drain of a block's node counts it.
pub const BLOCK_WINDOW: Duration = BLOCK_WARNING_LEAD;

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
        .filter(|p| p.containers.iter().any(AuditContainer::is_gpu))
        .collect();
    let grace = gpu_pods
        .iter()
        .map(|p| p.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS).max(0))
        .max()?;
    let window = BLOCK_WINDOW.num_seconds();
    let margin = config.deadline_margin.num_seconds().clamp(0, window);
    let available = window - margin;
    let rounds = budget_rounds(view, workload, &gpu_pods, available);
    let end = rounds
        .as_ref()
        .map_or(0, |(start, _)| *start)
        .saturating_add(grace);
    let after = match rounds {
        Ok((start, _)) if start > 0 => " after the last round's start",
        _ => "",
    };
    let (grace_fits, past) = if end <= available {
        ("grace fits", String::new())
    } else {
        let past = format!(", past the {available} s: killed mid-shutdown");
        ("grace does not fit", past)
    };
    let missing = without_hook(&gpu_pods);
    let (code, budget_text) = match rounds {
        Err(text) => (
            Code::BlockDrainStalls,
            format!("budget does not fit: {text}"),
        ),
        Ok((_, text)) if end > available => (Code::BlockGraceLong, format!("budget fits: {text}")),
        Ok((_, text)) if !missing.is_empty() => {
            (Code::BlockNoCheckpoint, format!("budget fits: {text}"))
        }
        Ok((_, text)) => (Code::BlockReady, format!("budget fits: {text}")),
    };
    let hook_text = if missing.is_empty() {
        "checkpoint hook: preStop on its GPU containers".to_string()
    } else {
        format!(
            "no checkpoint hook: no preStop on its GPU containers ({}), so each pod gets only \
             SIGTERM and its {grace} s grace",
            Vec::from_iter(missing).join(", ")
        )
    };
    let gpus = sum_gpus(gpu_pods.iter().flat_map(|p| &p.containers));
    let gpus = Vec::from_iter(gpus.iter().map(|(r, n)| format!("{n} {r}")));
    Some((
        code,
        format!(
            "{} ({}, {}) has {available} s to leave a Capacity Block (its instances terminate \
             {window} s after the expiration warning; forewarn's margin is {margin} s): \
             {budget_text}; {grace_fits}: {grace} s{after}, done {end} s in{past}; {hook_text}",
            workload.id(),
            plural(gpu_pods.len(), "GPU pod"),
            gpus.join(", "),
        ),
    ))
}

/// How a drain of the node with the most of `gpu_pods` (the first by name among equals) gets
/// through the budgets that select the workload's pods, within `available` seconds: the start
/// of its last round and how, or why it does not fit.
fn budget_rounds(
    view: &ClusterView,
    workload: &Workload,
    gpu_pods: &[&AuditPod],
    available: i64,
) -> Result<(i64, String), String> {
    let mut per_node: BTreeMap<&str, i64> = BTreeMap::new();
    for node in gpu_pods.iter().filter_map(|p| p.node.as_deref()) {
        *per_node.entry(node).or_default() += 1;
    }
    let busiest = per_node.into_iter().rev().max_by_key(|(_, n)| *n);
    let (pods, on_node) = match busiest {
        Some((node, n)) => (format!("the {} on node {node}", plural(n, "pod")), n),
        None => ("its pods (none on a node yet)".to_string(), 1),
    };
    let budgets = view.budgets_of(workload);
    let (overlapping, names) = workload.overlapping(&budgets);
    if overlapping > 0 {
        return Err(format!(
            "several PodDisruptionBudgets ({names}) select one pod: the eviction API answers 500"
        ));
    }
    let by_allowed = budgets.iter().map(|b| view.describe(b));
    let Some((about, allowed)) = by_allowed.min_by_key(|(_, allowed)| *allowed) else {
        return Ok((
            0,
            format!("no PodDisruptionBudget selects its pods: {pods} may go at once"),
        ));
    };
    if allowed <= 0 {
        return Err(format!(
            "{about} allows no eviction: {pods} cannot leave before the instance terminates"
        ));
    }
    let rounds = (on_node.saturating_add(allowed - 1) / allowed).max(1);
    if rounds == 1 {
        return Ok((0, format!("{about} lets {pods} go at once")));
    }
    let round = ROUND.num_seconds();
    let last_start = (rounds - 1).saturating_mul(round);
    let how = format!(
        "{about} lets {pods} go {allowed} at a time: {rounds} rounds of {round} s, the last \
         starting {last_start} s in"
    );
    if last_start > available {
        Err(format!("{how}, past the {available} s"))
    } else {
        Ok((last_start, how))
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
