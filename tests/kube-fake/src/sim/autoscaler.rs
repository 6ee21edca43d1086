//! A Cluster Autoscaler model (scale-up only). Pending pods the scheduler found no node for,
//! not nominated to one, at or above the expendable cutoff, are counted first-fit into the
//! nodes already launching, else into a new node of the first group (in the order configured)
//! whose template takes them; a pod no template takes triggers nothing. New nodes join Ready
//! after the launch delay.
//!
//! Unlike CA, which simulates again from scratch every 10 s, the model keeps the launching
//! nodes with the pods counted in them and only places the pods that newly found no node (or
//! whose node came and still left them waiting); a pod that stops waiting gives its room back.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::cluster::{NodeEntry, PodEntry, PodKey};
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
    /// The nodes launching, with the waiting pods counted in them.
    in_flight: Vec<Bin>,
    /// The launching node each counted pod waits for.
    assigned: HashMap<PodKey, String>,
    /// Pods to count at the next pass.
    pub queue: Vec<PodKey>,
    pub launched: Vec<LaunchedNode>,
}

/// A launching node and the pods counted in it.
struct Bin {
    group: usize,
    name: String,
    used: Resources,
    members: HashMap<PodKey, Resources>,
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
            assigned: HashMap::new(),
            queue: Vec::new(),
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

    /// Whether the pod fits beside what is counted in a node of group `g`.
    fn fits(&self, g: usize, used: &Resources, pods: usize, pod: &PodEntry) -> bool {
        self.accepts(g, pod)
            && insufficient(
                &pod.requests,
                &self.templates[g].allocatable,
                used,
                pods as i64,
            )
            .is_empty()
    }

    /// Counts a waiting pod in a launching node, else in a new node of the first group that
    /// takes it (named here, `taken` telling the names in use): that node, to launch.
    fn account(
        &mut self,
        key: &PodKey,
        pod: &PodEntry,
        taken: &dyn Fn(&str) -> bool,
    ) -> Option<(usize, String)> {
        let existing = self
            .in_flight
            .iter()
            .position(|b| self.fits(b.group, &b.used, b.members.len(), pod));
        let (index, new) = match existing {
            Some(i) => (i, None),
            None => {
                let g = (0..self.templates.len()).find(|&g| {
                    let room = self.settings.groups[g]
                        .max_size
                        .is_none_or(|max| self.sizes[g] < max);
                    room && self.fits(g, &Resources::default(), 0, pod)
                })?;
                let name = loop {
                    self.counters[g] += 1;
                    let name = format!("{}-{}", self.settings.groups[g].name, self.counters[g]);
                    if !taken(&name) && self.in_flight.iter().all(|b| b.name != name) {
                        break name;
                    }
                };
                self.sizes[g] += 1;
                self.in_flight.push(Bin {
                    group: g,
                    name: name.clone(),
                    used: Resources::default(),
                    members: HashMap::new(),
                });
                (self.in_flight.len() - 1, Some((g, name)))
            }
        };
        let bin = &mut self.in_flight[index];
        bin.used.add(&pod.requests);
        bin.members.insert(key.clone(), pod.requests.clone());
        self.assigned.insert(key.clone(), bin.name.clone());
        new
    }

    /// A pod no longer waits: its room in a launching node is free again.
    fn unassign(&mut self, key: &PodKey) {
        let Some(name) = self.assigned.remove(key) else {
            return;
        };
        if let Some(bin) = self.in_flight.iter_mut().find(|b| b.name == name)
            && let Some(requests) = bin.members.remove(key)
        {
            bin.used.sub(&requests);
        }
    }

    /// The node joined: the pods counted in it are to be counted again if they still wait.
    fn landed(&mut self, name: &str) {
        let Some(i) = self.in_flight.iter().position(|b| b.name == name) else {
            return;
        };
        let bin = self.in_flight.remove(i);
        for key in bin.members.into_keys() {
            self.assigned.remove(&key);
            self.queue.push(key);
        }
    }
}

impl Sim {
    /// Scales up for the pods the scheduler could not place.
    pub(super) fn autoscale_pass(&mut self, store: &mut Store, t: DateTime<Utc>) {
        let node_kind = self.kinds.node;
        let Some(state) = self.autoscaler.as_mut() else {
            return;
        };
        let cutoff = state.settings.expendable_priority_cutoff;
        let cluster = &self.cluster;
        let waiting = |k: &PodKey| {
            cluster.pods.get(k).filter(|p| {
                p.pending()
                    && p.schedulable
                    && p.failed
                    && p.nominated.is_none()
                    && p.priority >= cutoff
            })
        };
        let mut gone: Vec<PodKey> = state
            .assigned
            .keys()
            .filter(|k| waiting(k).is_none())
            .cloned()
            .collect();
        gone.sort();
        for key in gone {
            state.unassign(&key);
        }
        let mut queue: Vec<(Reverse<i32>, u64, PodKey)> = std::mem::take(&mut state.queue)
            .into_iter()
            .filter(|k| !state.assigned.contains_key(k))
            .filter_map(|k| waiting(&k).map(|p| (Reverse(p.priority), p.seq, k)))
            .collect();
        queue.sort();
        queue.dedup();
        let taken = |name: &str| store.object(&store.key_of(node_kind, None, name)).is_some();
        let mut launches = Vec::new();
        for (_, _, key) in queue {
            if let Some(pod) = cluster.pods.get(&key)
                && let Some(launch) = state.account(&key, pod, &taken)
            {
                launches.push(launch);
            }
        }
        for (g, name) in launches {
            self.start_launch(store, g, name, t);
        }
    }

    /// A pod found no node: the next pass counts it.
    pub(super) fn waiting_for_a_node(&mut self, key: &PodKey) {
        if let Some(state) = self.autoscaler.as_mut() {
            state.queue.push(key.clone());
            self.autoscale_dirty = true;
        }
    }

    /// Records the launch of node `name` of group `g`, given an instance; it joins after the
    /// launch delay.
    fn start_launch(&mut self, store: &mut Store, g: usize, name: String, t: DateTime<Utc>) {
        let hex = format!(
            "{:x}{:016x}",
            store.next_random_u64() % 16,
            store.next_random_u64()
        );
        let Some(state) = self.autoscaler.as_mut() else {
            return;
        };
        let group = &state.settings.groups[g];
        let zone = group.labels.get(ZONE).map_or("us-east-1a", String::as_str);
        let ready_at = t + chrono_of(state.settings.launch_delay);
        state.launched.push(LaunchedNode {
            group: group.name.clone(),
            name: name.clone(),
            provider_id: format!("aws:///{zone}/i-{hex}"),
            requested_at: t,
            ready_at,
        });
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
        state.landed(name);
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
        let mut state = State::new(&settings);
        let free = |_: &str| false;
        let mut launches = Vec::new();
        for (i, cpu) in [1500, 1500, 500, 1500, 1500, 9000].into_iter().enumerate() {
            let key = ("ns".to_string(), format!("p{i}"));
            launches.push(state.account(&key, &pod(cpu), &free).map(|(_, name)| name));
        }
        // 1500 | 1500+500 | then small is full (max 2): 1500+1500 on one big node; 9000 fits
        // no template.
        let names = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        let mut want = names(&["small-1", "small-2"]);
        want.extend([None, Some("big-1".to_string()), None, None]);
        assert_eq!(launches, want);
        // A pod that no longer waits gives its room back.
        state.unassign(&("ns".to_string(), "p3".to_string()));
        let again = state.account(&("ns".into(), "p9".into()), &pod(6000), &free);
        assert_eq!(again, None, "fits big-1 again");
    }
}
