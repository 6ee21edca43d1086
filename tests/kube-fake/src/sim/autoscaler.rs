//! A Cluster Autoscaler model (scale-up only). Pending pods the scheduler found no node for,
//! not nominated to one, at or above the expendable cutoff, are packed first-fit into the nodes
//! already launching, then into new nodes of the first group (in the order configured) whose
//! template takes them; a pod no template takes triggers nothing. New nodes join Ready after
//! the launch delay.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::cluster::{NodeEntry, PodEntry};
use super::scheduler::insufficient;
use super::settings::{AutoscalerSettings, NodeGroup};
use super::timeline::LaunchedNode;
use super::{Event, Sim, chrono_of, rfc3339};
use crate::filters::NodeShape;
use crate::quantity::Resources;
use crate::store::Store;

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// The autoscaler's own state.
pub(super) struct State {
    settings: AutoscalerSettings,
    /// Each group's template, as the filters see a node of it.
    templates: Vec<NodeEntry>,
    /// Names handed out, by group.
    counters: Vec<usize>,
    /// Nodes launched (or launching), by group.
    sizes: Vec<usize>,
    /// Launching: group and name.
    in_flight: Vec<(usize, String)>,
    pub launched: Vec<LaunchedNode>,
}

/// A node being filled in the scale-up simulation.
struct Bin {
    group: usize,
    used: Resources,
    pods: i64,
}

/// The Node object of a group's node.
fn node_object(group: &NodeGroup, name: &str, provider_id: &str, ip: &str, t: &str) -> Value {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    labels.extend(group.labels.clone());
    labels.insert(HOSTNAME.into(), name.into());
    let taints: Vec<Value> = group
        .taints
        .iter()
        .map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
        .collect();
    let mut spec = json!({"providerID": provider_id});
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": group.allocatable,
            "allocatable": group.allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}],
        },
    })
}

impl State {
    pub fn new(settings: &AutoscalerSettings) -> Self {
        let templates = settings
            .groups
            .iter()
            .map(|g| {
                let name = format!("template-node-for-{}", g.name);
                NodeEntry::parse(&node_object(g, &name, "", "", ""))
            })
            .collect();
        let n = settings.groups.len();
        Self {
            settings: settings.clone(),
            templates,
            counters: vec![0; n],
            sizes: vec![0; n],
            in_flight: Vec::new(),
            launched: Vec::new(),
        }
    }

    /// Whether a node of group `g` passes the pod's non-resource filters.
    fn accepts(&self, g: usize, pod: &PodEntry) -> bool {
        let template = &self.templates[g];
        let name = template
            .labels
            .get(HOSTNAME)
            .map(String::as_str)
            .unwrap_or_default();
        pod.placement
            .check(&NodeShape {
                name,
                labels: &template.labels,
                taints: &template.taints,
                unschedulable: false,
            })
            .is_ok()
    }

    /// Puts the pod in the bin if it fits there.
    fn take(&self, bin: &mut Bin, pod: &PodEntry) -> bool {
        let allocatable = &self.templates[bin.group].allocatable;
        if !self.accepts(bin.group, pod)
            || !insufficient(&pod.requests, allocatable, &bin.used, bin.pods).is_empty()
        {
            return false;
        }
        bin.used.add(&pod.requests);
        bin.pods += 1;
        true
    }

    /// How many new nodes each group needs for these pods (in order).
    fn plan(&self, pods: &[&PodEntry]) -> Vec<usize> {
        let mut bins: Vec<Bin> = self
            .in_flight
            .iter()
            .map(|(g, _)| Bin {
                group: *g,
                used: Resources::default(),
                pods: 0,
            })
            .collect();
        let mut new = vec![0; self.templates.len()];
        for pod in pods {
            if bins.iter_mut().any(|b| self.take(b, pod)) {
                continue;
            }
            for (g, added) in new.iter_mut().enumerate() {
                let room = self.settings.groups[g]
                    .max_size
                    .is_none_or(|max| self.sizes[g] + *added < max);
                let mut bin = Bin {
                    group: g,
                    used: Resources::default(),
                    pods: 0,
                };
                if room && self.take(&mut bin, pod) {
                    bins.push(bin);
                    *added += 1;
                    break;
                }
            }
        }
        new
    }
}

impl Sim {
    /// Scales up for the pods the scheduler could not place.
    pub(super) fn autoscale_pass(&mut self, store: &mut Store, t: DateTime<Utc>) {
        let Some(state) = self.autoscaler.as_ref() else {
            return;
        };
        let cutoff = state.settings.expendable_priority_cutoff;
        let mut waiting: Vec<(Reverse<i32>, u64, &PodEntry)> = self
            .cluster
            .pending
            .iter()
            .filter_map(|k| self.cluster.pods.get(k))
            .filter(|p| p.schedulable && p.failed && p.nominated.is_none() && p.priority >= cutoff)
            .map(|p| (Reverse(p.priority), p.seq, p))
            .collect();
        waiting.sort_by_key(|a| (a.0, a.1));
        let pods: Vec<&PodEntry> = waiting.into_iter().map(|(_, _, p)| p).collect();
        let plan = state.plan(&pods);
        for (g, count) in plan.into_iter().enumerate() {
            for _ in 0..count {
                self.start_launch(store, g, t);
            }
        }
    }

    /// Decides one node of group `g`: named, given an instance, due after the launch delay.
    fn start_launch(&mut self, store: &mut Store, g: usize, t: DateTime<Utc>) {
        let hex = format!(
            "{:x}{:016x}",
            store.next_random_u64() % 16,
            store.next_random_u64()
        );
        let node_kind = self.kinds.node;
        let Some(state) = self.autoscaler.as_mut() else {
            return;
        };
        let group = &state.settings.groups[g];
        let name = loop {
            state.counters[g] += 1;
            let name = format!("{}-{}", group.name, state.counters[g]);
            let taken = store
                .object(&store.key_of(node_kind, None, &name))
                .is_some()
                || state.in_flight.iter().any(|(_, n)| *n == name);
            if !taken {
                break name;
            }
        };
        let zone = group.labels.get(ZONE).map_or("us-east-1a", String::as_str);
        let ready_at = t + chrono_of(state.settings.launch_delay);
        state.launched.push(LaunchedNode {
            group: group.name.clone(),
            name: name.clone(),
            provider_id: format!("aws:///{zone}/i-{hex}"),
            requested_at: t,
            ready_at,
        });
        state.sizes[g] += 1;
        state.in_flight.push((g, name.clone()));
        self.schedule_event(ready_at, Event::Launch { group: g, name });
    }

    /// The node joins the cluster, Ready.
    pub(super) fn launch_node(
        &mut self,
        store: &mut Store,
        g: usize,
        name: &str,
        t: DateTime<Utc>,
    ) {
        let Some(state) = self.autoscaler.as_mut() else {
            return;
        };
        state.in_flight.retain(|(_, n)| n != name);
        let Some(record) = state.launched.iter().find(|l| l.name == name) else {
            return;
        };
        let n = state.launched.len();
        let ip = format!("192.168.{}.{}", (n >> 8) & 0xff, n & 0xff);
        let node = node_object(
            &state.settings.groups[g],
            name,
            &record.provider_id,
            &ip,
            &rfc3339(t),
        );
        if let Err(e) = store.seed(node) {
            tracing::warn!("kube-fake: autoscaler: node {name}: {e}");
        }
        self.autoscale_dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Resources;

    fn pod(cpu: i64) -> PodEntry {
        let mut p = PodEntry::parse(
            &json!({"metadata": {"uid": "u"}, "spec": {}}),
            &super::super::cluster::Classes::default(),
        );
        p.requests = Resources {
            cpu,
            ..Resources::default()
        };
        p
    }

    #[test]
    fn pods_are_packed_first_fit_and_the_max_size_holds() {
        let settings = AutoscalerSettings::default()
            .group(NodeGroup::new("small").allocatable("cpu", "2").max_size(2))
            .group(NodeGroup::new("big").allocatable("cpu", "8"));
        let state = State::new(&settings);
        let pods: Vec<PodEntry> = [1500, 1500, 500, 1500, 1500].map(pod).into();
        let refs: Vec<&PodEntry> = pods.iter().collect();
        // 1500 | 1500+500 | then small is full (max 2): 1500+1500 on one big node.
        assert_eq!(state.plan(&refs), vec![2, 1]);
        assert_eq!(state.plan(&[&pod(9000)]), vec![0, 0], "no template fits");
    }
}
