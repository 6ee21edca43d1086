//! kube-scheduler, in its default profile, for what forewarn depends on: the queue (priority,
//! then arrival), the filters `NodeUnschedulable`, `TaintToleration`, `NodeAffinity` and
//! `NodeResourcesFit` with their real reasons and the real `FitError` message, a
//! least-allocated score, binding, and the kubelet starting the pod after the start delay.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::cluster::{NodeEntry, PodEntry, PodKey};
use super::preemption::Preempted;
use super::{Event, Sim, chrono_of, rfc3339, set_condition};
use crate::filters::NodeShape;
use crate::quantity::Resources;
use crate::store::Store;

/// Why one node was filtered out.
#[derive(Debug, Clone)]
pub(super) struct NodeStatus {
    pub reasons: Vec<Reason>,
    /// `Unschedulable` (preemption may help: resources) rather than
    /// `UnschedulableAndUnresolvable` (cordon, taints, affinity).
    pub resolvable: bool,
}

/// A filter's reason (most are constants).
pub(super) type Reason = Cow<'static, str>;

/// `NodeResourcesFit`'s reasons: the pod count, then each resource that lacks room.
pub(super) fn insufficient(
    req: &Resources,
    allocatable: &Resources,
    used: &Resources,
    pods: i64,
) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if pods + 1 > allocatable.pods {
        reasons.push(Cow::Borrowed("Too many pods"));
    }
    if req.is_empty_request() {
        return reasons;
    }
    for (name, want, reason) in [
        ("cpu", req.cpu, "Insufficient cpu"),
        ("memory", req.memory, "Insufficient memory"),
        (
            "ephemeral-storage",
            req.ephemeral_storage,
            "Insufficient ephemeral-storage",
        ),
    ] {
        if want > 0 && want > allocatable.get(name).saturating_sub(used.get(name)) {
            reasons.push(Cow::Borrowed(reason));
        }
    }
    for (name, want) in &req.scalar {
        if *want > 0 && *want > allocatable.get(name).saturating_sub(used.get(name)) {
            reasons.push(Cow::Owned(format!("Insufficient {name}")));
        }
    }
    reasons
}

/// `NodeResourcesFit` with the `LeastAllocated` strategy on cpu and memory (0 to 100).
fn least_allocated(req: &Resources, allocatable: &Resources, used: &Resources) -> i64 {
    let score = |alloc: i64, used: i64, want: i64| {
        if alloc <= 0 {
            return 0;
        }
        let after = used.saturating_add(want);
        i64::try_from(i128::from((alloc - after).max(0)) * 100 / i128::from(alloc)).unwrap_or(0)
    };
    (score(allocatable.cpu, used.cpu, req.cpu) + score(allocatable.memory, used.memory, req.memory))
        / 2
}

/// The real `FitError` text: `0/3 nodes are available: 1 node(s) were unschedulable, 2
/// Insufficient cpu.` (reasons counted over the nodes and sorted as strings).
pub(super) fn fit_error(total: usize, statuses: &[(String, NodeStatus)]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, status) in statuses {
        for reason in &status.reasons {
            *counts.entry(reason.as_ref()).or_insert(0) += 1;
        }
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    let mut message = format!("0/{total} nodes are available:");
    if !parts.is_empty() {
        message.push_str(&format!(" {}.", parts.join(", ")));
    }
    message
}

/// What a scheduling attempt found.
type Found = Result<String, Vec<(String, NodeStatus)>>;

impl Sim {
    /// Tries the pending pods that have something new to look at, highest priority first.
    pub(super) fn schedule_pass(&mut self, store: &mut Store, t: DateTime<Utc>) {
        let epoch = self.epoch;
        let mut queue: Vec<(Reverse<i32>, u64, PodKey)> = self
            .cluster
            .pending
            .iter()
            .filter_map(|k| {
                let p = self.cluster.pods.get(k)?;
                let due = p.schedulable && p.tried.is_none_or(|e| e < epoch);
                due.then(|| (Reverse(p.priority), p.seq, k.clone()))
            })
            .collect();
        queue.sort();
        for (_, _, key) in queue {
            self.schedule_one(store, &key, t);
        }
        self.prune_room_log();
    }

    fn schedule_one(&mut self, store: &mut Store, key: &PodKey, t: DateTime<Utc>) {
        let epoch = self.epoch;
        let Some(entry) = self.cluster.pods.get_mut(key) else {
            return;
        };
        if !entry.pending() || !entry.schedulable {
            return;
        }
        let since = entry.tried.replace(epoch);
        let pod = entry.clone();
        // A pod tried before needs only look at the nodes where room appeared since.
        let only = since.map(|e| self.rooms_since(e));
        match self.find_node(key, &pod, only.as_deref()) {
            Ok(node) => self.bind(store, key, &node, t),
            Err(statuses) if only.is_none() => self.unschedulable(store, key, &pod, &statuses, t),
            Err(statuses) => self.still_unschedulable(store, key, &pod, &statuses, t),
        }
    }

    /// Filters and scores the nodes (all, or `only` these), the nominated node first.
    fn find_node(&self, key: &PodKey, pod: &PodEntry, only: Option<&[String]>) -> Found {
        if let Some(nominated) = &pod.nominated
            && only.is_none_or(|o| o.contains(nominated))
            && let Some(node) = self.cluster.nodes.get(nominated)
            && self.filter(key, pod, nominated, node).is_ok()
        {
            return Ok(nominated.clone());
        }
        let nodes: Box<dyn Iterator<Item = (&String, &NodeEntry)>> = match only {
            None => Box::new(self.cluster.nodes.iter()),
            Some(names) => Box::new(
                names
                    .iter()
                    .filter_map(|n| self.cluster.nodes.get_key_value(n)),
            ),
        };
        let mut best: Option<(i64, &String)> = None;
        let mut statuses = Vec::new();
        for (name, node) in nodes {
            match self.filter(key, pod, name, node) {
                Ok(score) => {
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, name));
                    }
                }
                Err(status) => statuses.push((name.clone(), status)),
            }
        }
        best.map(|(_, n)| n.clone()).ok_or(statuses)
    }

    /// The filters on one node; its score when it passes.
    pub(super) fn filter(
        &self,
        key: &PodKey,
        pod: &PodEntry,
        name: &str,
        node: &NodeEntry,
    ) -> Result<i64, NodeStatus> {
        let shape = NodeShape {
            name,
            labels: &node.labels,
            taints: &node.taints,
            unschedulable: node.unschedulable,
        };
        pod.placement.check(&shape).map_err(|r| NodeStatus {
            reasons: vec![r],
            resolvable: false,
        })?;
        let (used, count) = self.cluster.used_for(name, key, pod.priority);
        let reasons = insufficient(&pod.requests, &node.allocatable, &used, count);
        if !reasons.is_empty() {
            return Err(NodeStatus {
                reasons,
                resolvable: true,
            });
        }
        Ok(least_allocated(&pod.requests, &node.allocatable, &used))
    }

    /// A full attempt found no node: preemption, then the `PodScheduled=False` condition.
    fn unschedulable(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        pod: &PodEntry,
        statuses: &[(String, NodeStatus)],
        t: DateTime<Utc>,
    ) {
        let total = self.cluster.nodes.len();
        let mut nomination = None;
        let message = if total == 0 {
            "no nodes available to schedule pods".to_string()
        } else {
            let mut message = fit_error(total, statuses);
            if self.preemption_on() {
                match self.preempt(store, key, pod, statuses, t) {
                    Preempted::Nominated(node) => nomination = Some(Some(node)),
                    Preempted::Not {
                        message: why,
                        clear,
                    } => {
                        message.push_str(&format!(" preemption: {why}."));
                        if clear {
                            nomination = Some(None);
                        }
                    }
                }
            }
            message
        };
        self.write_unschedulable(store, key, &message, nomination, t);
        if let Some(p) = self.cluster.pods.get_mut(key) {
            p.failed = true;
        }
        self.waiting_for_a_node(key);
    }

    /// A retry on the nodes with new room found none: preemption there may now help; the
    /// condition's message stays.
    fn still_unschedulable(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        pod: &PodEntry,
        statuses: &[(String, NodeStatus)],
        t: DateTime<Utc>,
    ) {
        if !self.preemption_on() || statuses.is_empty() {
            return;
        }
        if let Preempted::Nominated(node) = self.preempt(store, key, pod, statuses, t) {
            let message = self.condition_message(store, key);
            self.write_unschedulable(store, key, &message, Some(Some(node)), t);
        }
    }

    fn preemption_on(&self) -> bool {
        self.settings
            .scheduler
            .as_ref()
            .is_some_and(|s| s.preemption)
    }

    pub(super) fn condition_message(&self, store: &Store, key: &PodKey) -> String {
        store
            .object(&self.pod_key(store, key))
            .and_then(|o| o.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
            })
            .and_then(|c| c.get("message").and_then(Value::as_str))
            .unwrap_or_default()
            .to_string()
    }

    /// Writes `PodScheduled=False` (`Unschedulable`) and, when given, the nomination (`None`:
    /// cleared). Nothing is written when nothing changes.
    pub(super) fn write_unschedulable(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        message: &str,
        nomination: Option<Option<String>>,
        t: DateTime<Utc>,
    ) {
        let okey = self.pod_key(store, key);
        let Some(old) = store.object(&okey).cloned() else {
            return;
        };
        let mut obj = old.clone();
        set_condition(
            &mut obj,
            json!({"type": "PodScheduled", "status": "False", "lastProbeTime": null,
                   "lastTransitionTime": rfc3339(t), "reason": "Unschedulable", "message": message}),
        );
        match nomination {
            Some(Some(node)) => obj["status"]["nominatedNodeName"] = json!(node),
            Some(None) => {
                if let Some(status) = obj["status"].as_object_mut() {
                    status.remove("nominatedNodeName");
                }
            }
            None => {}
        }
        if obj != old {
            store.write(okey.clone(), obj);
            self.pod_changed(store, &okey, t);
        }
    }

    /// Binds the pod (`spec.nodeName`, `PodScheduled=True`); the kubelet starts it later.
    fn bind(&mut self, store: &mut Store, key: &PodKey, node: &str, t: DateTime<Utc>) {
        let okey = self.pod_key(store, key);
        let Some(mut obj) = store.object(&okey).cloned() else {
            return;
        };
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        obj["spec"]["nodeName"] = json!(node);
        set_condition(
            &mut obj,
            json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                   "lastTransitionTime": rfc3339(t)}),
        );
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        store.write(okey.clone(), obj);
        self.pod_changed(store, &okey, t);
        let delay = self
            .settings
            .scheduler
            .as_ref()
            .map(|s| s.start_delay)
            .unwrap_or_default();
        self.schedule_event(
            t + chrono_of(delay),
            Event::Start {
                key: key.clone(),
                uid,
            },
        );
    }
}
