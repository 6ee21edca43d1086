//! The opt-in cluster simulation: a scheduler with priority preemption, ReplicaSets that
//! replace the pods that leave, and a Cluster Autoscaler model, all on the fake's clock.
//!
//! The store logs every write to pods, nodes and PriorityClasses; before the fake answers a
//! request (or its handle looks), [`Sim::advance`] brings the simulation to the clock's time:
//! it takes the logged changes into its index ([`cluster::Cluster`]), schedules, preempts,
//! replaces and scales up, then steps through what falls due in between (graceful deletions
//! finishing, pods starting, nodes launching) in time order, each at its own time. Nothing
//! sleeps: a test moves its clock and the next look sees what happened meanwhile.

mod autoscaler;
mod cluster;
mod kubelet;
mod preemption;
mod replicaset;
mod scheduler;
pub(crate) mod settings;
pub(crate) mod timeline;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::store::{ObjKey, Store};
use cluster::{Classes, Cluster, NodeEntry, PodEntry, PodKey};
use settings::SimSettings;
use timeline::{LaunchedNode, PodTimeline, Timeline};

/// Rounds of work at one instant before the simulation gives up settling (a safety net).
const MAX_ROUNDS: usize = 10_000;

/// Something due at a time.
#[derive(Debug)]
enum Event {
    /// The kubelet starts a bound pod.
    Start { key: PodKey, uid: String },
    /// An autoscaled node joins, Ready.
    Launch { group: usize, name: String },
}

#[derive(Debug)]
struct Timed {
    at: DateTime<Utc>,
    seq: u64,
    event: Event,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The indices of the kinds the simulation reads.
#[derive(Debug, Clone, Copy)]
struct Kinds {
    pod: usize,
    node: usize,
    replicaset: Option<usize>,
    priority_class: Option<usize>,
}

pub(crate) struct Sim {
    settings: SimSettings,
    kinds: Kinds,
    /// The time the simulation has got to.
    time: Option<DateTime<Utc>>,
    cluster: Cluster,
    events: BinaryHeap<Reverse<Timed>>,
    event_seq: u64,
    /// Bumped whenever room may have appeared on a node (it changed, a pod left it, a
    /// nomination to it was dropped): pending pods last tried in an older epoch are tried
    /// again, on the nodes in `room_log` since then only (the others have not changed for them).
    epoch: u64,
    room_log: Vec<(u64, String)>,
    sched_dirty: bool,
    autoscale_dirty: bool,
    timeline: Timeline,
    autoscaler: Option<autoscaler::State>,
    /// Pod IPs handed out.
    ips: u32,
}

pub(crate) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or_else(|_| chrono::Duration::zero())
}

/// Sets (or replaces, by `type`) a condition; `lastTransitionTime` stays when the status does.
pub(crate) fn set_condition(obj: &mut Value, mut condition: Value) {
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let status = &mut obj["status"];
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let list = status["conditions"]
        .as_array_mut()
        .expect("conditions was just made a list");
    let kind = condition.get("type").cloned();
    match list.iter_mut().find(|c| c.get("type") == kind.as_ref()) {
        Some(existing) => {
            if existing.get("status") == condition.get("status")
                && let Some(since) = existing.get("lastTransitionTime")
            {
                condition["lastTransitionTime"] = since.clone();
            }
            *existing = condition;
        }
        None => list.push(condition),
    }
}

impl Sim {
    /// A simulation over `store`, which from now on logs the writes it needs.
    pub fn new(settings: SimSettings, store: &mut Store) -> Self {
        let kinds = Kinds {
            pod: store.find_kind("v1", "Pod").expect("pods are served"),
            node: store.find_kind("v1", "Node").expect("nodes are served"),
            replicaset: store.find_kind("apps/v1", "ReplicaSet"),
            priority_class: store.find_kind("scheduling.k8s.io/v1", "PriorityClass"),
        };
        let tracked: Vec<usize> = [Some(kinds.pod), Some(kinds.node), kinds.priority_class]
            .into_iter()
            .flatten()
            .collect();
        store.track(&tracked);
        let autoscaler = settings.autoscaler.as_ref().map(autoscaler::State::new);
        Self {
            settings,
            kinds,
            time: None,
            cluster: Cluster {
                classes: Classes::load(store, kinds.priority_class),
                ..Cluster::default()
            },
            events: BinaryHeap::new(),
            event_seq: 0,
            epoch: 0,
            room_log: Vec::new(),
            sched_dirty: false,
            autoscale_dirty: false,
            timeline: Timeline::default(),
            autoscaler,
            ips: 0,
        }
    }

    /// The fake was put on another clock: the simulation goes on from that clock's time (what
    /// is scheduled keeps its time).
    pub fn clock_changed(&mut self) {
        self.time = None;
    }

    pub fn pod_timeline(&self) -> Vec<PodTimeline> {
        self.timeline.entries()
    }

    pub fn launched_nodes(&self) -> Vec<LaunchedNode> {
        self.autoscaler
            .as_ref()
            .map(|a| a.launched.clone())
            .unwrap_or_default()
    }

    /// Brings the simulation to the clock's time.
    pub fn advance(&mut self, store: &mut Store) {
        let now = store.now();
        let mut t = match self.time {
            Some(prev) if prev <= now => prev,
            _ => now,
        };
        loop {
            store.freeze(Some(t));
            self.settle_at(store, t);
            let next_event = self.events.peek().map(|Reverse(e)| e.at);
            let next = match (next_event, store.next_graceful()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match next {
                Some(at) if at <= now => {
                    t = t.max(at);
                    store.freeze(Some(t));
                    self.fire_due(store, t);
                }
                _ => break,
            }
        }
        store.freeze(None);
        self.time = Some(now);
    }

    fn schedule_event(&mut self, at: DateTime<Utc>, event: Event) {
        self.event_seq += 1;
        self.events.push(Reverse(Timed {
            at,
            seq: self.event_seq,
            event,
        }));
    }

    /// Runs what is due at `t`: graceful deletions first, then the events in order.
    fn fire_due(&mut self, store: &mut Store, t: DateTime<Utc>) {
        store.reap_until(t);
        while self.events.peek().is_some_and(|Reverse(e)| e.at <= t) {
            let Some(Reverse(timed)) = self.events.pop() else {
                break;
            };
            match timed.event {
                Event::Start { key, uid } => self.start_pod(store, &key, &uid, t),
                Event::Launch { group, name } => self.launch_node(store, group, &name, t),
            }
        }
    }

    /// Takes in the logged changes and reacts until nothing more happens at `t`.
    fn settle_at(&mut self, store: &mut Store, t: DateTime<Utc>) {
        for _ in 0..MAX_ROUNDS {
            for key in store.take_changes() {
                self.changed(store, &key, t);
            }
            if self.sched_dirty {
                self.sched_dirty = false;
                if self.settings.scheduler.is_some() {
                    self.schedule_pass(store, t);
                }
            }
            if store.has_changes() || self.sched_dirty {
                continue;
            }
            if self.autoscale_dirty {
                self.autoscale_dirty = false;
                self.autoscale_pass(store, t);
            }
            if !store.has_changes() && !self.sched_dirty {
                return;
            }
        }
        tracing::warn!("kube-fake: the simulation did not settle at {t}");
    }

    fn changed(&mut self, store: &mut Store, key: &ObjKey, t: DateTime<Utc>) {
        if key.0 == self.kinds.pod {
            self.pod_changed(store, key, t);
        } else if key.0 == self.kinds.node {
            self.node_changed(store, key, t);
        } else if Some(key.0) == self.kinds.priority_class {
            self.classes_changed(store, t);
        }
    }

    fn pod_key(&self, store: &Store, key: &PodKey) -> ObjKey {
        store.key_of(self.kinds.pod, Some(&key.0), &key.1)
    }

    /// Re-reads one pod into the index and reacts to what changed.
    fn pod_changed(&mut self, store: &mut Store, okey: &ObjKey, t: DateTime<Utc>) {
        let key: PodKey = (okey.1.clone(), okey.2.clone());
        let old = self.cluster.remove_pod(&key);
        let mut new = store
            .object(okey)
            .map(|o| PodEntry::parse(o, &self.cluster.classes));
        if let Some(n) = &mut new {
            match &old {
                Some(o) if o.uid == n.uid => {
                    n.seq = o.seq;
                    if n.same_scheduling(o) {
                        n.tried = o.tried;
                        n.failed = o.failed;
                    }
                }
                _ => n.seq = self.cluster.next_seq(),
            }
            if n.pending() && n.tried.is_none() {
                self.sched_dirty = true;
            }
        }
        if let Some(o) = &old {
            let same = |n: &PodEntry| n.uid == o.uid;
            let freed = o.counts()
                && !new.as_ref().is_some_and(|n| {
                    same(n) && n.counts() && n.node == o.node && n.requests == o.requests
                });
            let unnominated = o.pending()
                && o.nominated.is_some()
                && !new
                    .as_ref()
                    .is_some_and(|n| same(n) && n.pending() && n.nominated == o.nominated);
            if freed && let Some(node) = &o.node {
                self.room_appeared(node);
            }
            if unnominated && let Some(node) = &o.nominated {
                self.room_appeared(node);
            }
        }
        self.timeline.observe(&key, old.as_ref(), new.as_ref(), t);
        let left = old.as_ref().is_some_and(|o| {
            o.active() && !new.as_ref().is_some_and(|n| n.uid == o.uid && n.active())
        });
        if let Some(n) = new {
            self.cluster.insert_pod(key.clone(), n);
        }
        if left
            && self.settings.replicasets
            && let Some(o) = old
        {
            self.replace_pod(store, &key, &o);
        }
    }

    fn room_appeared(&mut self, node: &str) {
        self.epoch += 1;
        self.room_log.push((self.epoch, node.to_string()));
        self.sched_dirty = true;
    }

    /// The nodes where room appeared after `epoch`, by name.
    fn rooms_since(&self, epoch: u64) -> Vec<String> {
        let start = self.room_log.partition_point(|(e, _)| *e <= epoch);
        let mut nodes: Vec<String> = self.room_log[start..]
            .iter()
            .map(|(_, n)| n.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// Forgets the room no pending pod still has to look at.
    fn prune_room_log(&mut self) {
        let oldest = self
            .cluster
            .pending
            .iter()
            .filter_map(|k| self.cluster.pods.get(k))
            .filter(|p| p.schedulable)
            .map(|p| p.tried.unwrap_or(0))
            .min();
        match oldest {
            Some(e) => self.room_log.retain(|(at, _)| *at > e),
            None => self.room_log.clear(),
        }
    }

    fn node_changed(&mut self, store: &mut Store, okey: &ObjKey, t: DateTime<Utc>) {
        let name = okey.2.clone();
        let new = store.object(okey).map(NodeEntry::parse);
        let old = self.cluster.nodes.remove(&name);
        match new {
            Some(entry) => {
                let changed = old.as_ref() != Some(&entry);
                self.cluster.nodes.insert(name.clone(), entry);
                if changed {
                    self.room_appeared(&name);
                    self.autoscale_dirty = true;
                }
            }
            None if old.is_some() => {
                self.autoscale_dirty = true;
                if self.settings.scheduler.is_some() {
                    self.collect_orphans(store, &name, t);
                }
            }
            None => {}
        }
    }

    /// The pod garbage collector: the pods of a deleted node are deleted at once.
    fn collect_orphans(&mut self, store: &mut Store, node: &str, t: DateTime<Utc>) {
        let orphans: Vec<PodKey> = self
            .cluster
            .usage
            .get(node)
            .map(|u| u.pods.iter().cloned().collect())
            .unwrap_or_default();
        for key in orphans {
            let okey = self.pod_key(store, &key);
            store.delete_pod_gracefully(&okey, Duration::ZERO);
            self.pod_changed(store, &okey, t);
        }
    }

    /// A PriorityClass changed: pods whose priority came from a class are read again.
    fn classes_changed(&mut self, store: &mut Store, t: DateTime<Utc>) {
        self.cluster.classes = Classes::load(store, self.kinds.priority_class);
        let mut affected: Vec<PodKey> = self
            .cluster
            .pods
            .iter()
            .filter(|(_, p)| p.from_class)
            .map(|(k, _)| k.clone())
            .collect();
        affected.sort();
        for key in affected {
            let okey = self.pod_key(store, &key);
            self.pod_changed(store, &okey, t);
        }
    }
}
