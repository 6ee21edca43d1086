//! What the simulation knows of the cluster, kept up to date from the store's writes: one entry
//! per pod and per node (parsed once per change), each node's allocated requests, the pending
//! pods, the nominations, the PriorityClasses.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use crate::filters::{Placement, Taint};
use crate::quantity::{Resources, pod_requests};
use crate::store::{Store, meta_str};

/// A pod: namespace and name.
pub(crate) type PodKey = (String, String);

/// Built-in classes every cluster has (the API server creates them).
const SYSTEM_CLASSES: &[(&str, i32)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// A pod's controller (`ownerReferences` with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// One PriorityClass: value and preemption policy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Class {
    value: i32,
    never: bool,
}

/// The stored PriorityClasses.
#[derive(Debug, Default)]
pub(crate) struct Classes {
    by_name: HashMap<String, Class>,
    global_default: Option<Class>,
}

impl Classes {
    pub fn load(store: &Store, idx: Option<usize>) -> Self {
        let mut out = Self::default();
        for (name, value) in SYSTEM_CLASSES {
            out.by_name.insert(
                (*name).to_string(),
                Class {
                    value: *value,
                    never: false,
                },
            );
        }
        let Some(idx) = idx else {
            return out;
        };
        for pc in store.objects_of(idx, None) {
            let class = Class {
                value: pc.get("value").and_then(Value::as_i64).unwrap_or(0) as i32,
                never: pc.get("preemptionPolicy").and_then(Value::as_str) == Some("Never"),
            };
            if pc.get("globalDefault").and_then(Value::as_bool) == Some(true) {
                out.global_default = Some(class.clone());
            }
            out.by_name
                .insert(meta_str(pc, "name").unwrap_or("").to_string(), class);
        }
        out
    }

    /// Priority admission: `spec.priority`, else the class named (else the global default
    /// class), else 0; the preemption policy likewise. The flag says a class was used.
    fn resolve(&self, spec: &Value) -> (i32, bool, bool) {
        let policy_never = spec.get("preemptionPolicy").and_then(Value::as_str);
        let named = spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let class = match named {
            Some(name) => self.by_name.get(name),
            None => self.global_default.as_ref(),
        };
        let explicit = spec.get("priority").and_then(Value::as_i64);
        let priority = explicit
            .map(|p| p as i32)
            .or(class.map(|c| c.value))
            .unwrap_or(0);
        let never = match policy_never {
            Some(p) => p == "Never",
            None => class.is_some_and(|c| c.never),
        };
        (priority, never, explicit.is_none())
    }
}

/// One pod, as the scheduler, the ReplicaSet model and the timeline see it.
#[derive(Debug, Clone)]
pub(crate) struct PodEntry {
    pub uid: String,
    /// First-seen order: the scheduling queue's tie-break.
    pub seq: u64,
    pub node: Option<String>,
    pub requests: Resources,
    /// `Succeeded` or `Failed`.
    pub terminal: bool,
    /// Phase `Running`.
    pub running: bool,
    /// Has a `deletionTimestamp`.
    pub terminating: bool,
    /// Terminating because the scheduler preempted it (`DisruptionTarget`, `PreemptionByScheduler`).
    pub preempted: bool,
    pub priority: i32,
    /// `preemptionPolicy: Never`.
    pub never: bool,
    /// The priority came from a PriorityClass (re-read when classes change).
    pub from_class: bool,
    pub controller: Option<Owner>,
    pub nominated: Option<String>,
    /// For the default scheduler and not gated.
    pub schedulable: bool,
    pub placement: Placement,
    /// The scheduling epoch of the last attempt.
    pub tried: Option<u64>,
    /// The last attempt found no node.
    pub failed: bool,
}

impl PodEntry {
    pub fn parse(obj: &Value, classes: &Classes) -> Self {
        let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        let phase = obj
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (priority, never, from_class) = classes.resolve(&spec);
        let str_of = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
        let controller = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            })
            .map(|r| Owner {
                api_version: str_of(r, "apiVersion").unwrap_or_default(),
                kind: str_of(r, "kind").unwrap_or_default(),
                name: str_of(r, "name").unwrap_or_default(),
                uid: str_of(r, "uid").unwrap_or_default(),
            });
        let scheduler = spec
            .get("schedulerName")
            .and_then(Value::as_str)
            .unwrap_or("default-scheduler");
        let gated = spec
            .get("schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        Self {
            uid: meta_str(obj, "uid").unwrap_or("").to_string(),
            seq: 0,
            node: str_of(&spec, "nodeName").filter(|n| !n.is_empty()),
            requests: pod_requests(&spec),
            terminal: matches!(phase, "Succeeded" | "Failed"),
            running: phase == "Running",
            terminating: meta_str(obj, "deletionTimestamp").is_some(),
            preempted: has_condition(obj, "DisruptionTarget", "PreemptionByScheduler"),
            priority,
            never,
            from_class,
            controller,
            nominated: obj
                .pointer("/status/nominatedNodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            schedulable: scheduler == "default-scheduler" && !gated,
            placement: Placement::from_spec(&spec),
            tried: None,
            failed: false,
        }
    }

    /// Bound and not terminal: its requests count on its node (terminating pods included).
    pub fn counts(&self) -> bool {
        self.node.is_some() && !self.terminal
    }

    /// What a ReplicaSet counts: neither terminating nor terminal.
    pub fn active(&self) -> bool {
        !self.terminating && !self.terminal
    }

    /// Waiting for the scheduler.
    pub fn pending(&self) -> bool {
        self.node.is_none() && self.active()
    }

    /// Whether an update left what the scheduler decides on unchanged (so the last attempt
    /// still stands).
    pub fn same_scheduling(&self, other: &Self) -> bool {
        self.uid == other.uid
            && self.requests == other.requests
            && self.priority == other.priority
            && self.never == other.never
            && self.schedulable == other.schedulable
            && self.placement == other.placement
    }
}

fn has_condition(obj: &Value, kind: &str, reason: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
                    && c.get("reason").and_then(Value::as_str) == Some(reason)
            })
        })
}

/// One node, as the filters see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEntry {
    pub labels: BTreeMap<String, String>,
    /// `spec.taints`, and the node lifecycle controller's `not-ready`/`unreachable`
    /// `NoSchedule` taint when the node is not Ready.
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
}

impl NodeEntry {
    pub fn parse(obj: &Value) -> Self {
        let labels = crate::selectors::string_map(obj.pointer("/metadata/labels"));
        let mut taints: Vec<Taint> = obj
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .map(|ts| ts.iter().map(Taint::from_value).collect())
            .unwrap_or_default();
        let ready = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
            })
            .and_then(|c| c.get("status").and_then(Value::as_str));
        let implied = match ready {
            Some("True") => None,
            Some("Unknown") => Some("node.kubernetes.io/unreachable"),
            _ => Some("node.kubernetes.io/not-ready"),
        };
        if let Some(key) = implied
            && !taints
                .iter()
                .any(|t| t.key == key && t.effect == "NoSchedule")
        {
            taints.push(Taint {
                key: key.to_string(),
                value: String::new(),
                effect: "NoSchedule".into(),
            });
        }
        // The API server defaults a missing allocatable to the capacity.
        let allocatable = obj
            .pointer("/status/allocatable")
            .or_else(|| obj.pointer("/status/capacity"));
        Self {
            labels,
            taints,
            unschedulable: obj.pointer("/spec/unschedulable").and_then(Value::as_bool)
                == Some(true),
            allocatable: Resources::from_list(allocatable),
        }
    }
}

/// What is bound to one node.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    /// The sum of the requests of the pods that count.
    pub requested: Resources,
    pub pods: BTreeSet<PodKey>,
    /// How many of them have each priority.
    pub priorities: BTreeMap<i32, usize>,
}

impl Usage {
    /// The lowest priority of a pod here.
    pub fn lowest_priority(&self) -> Option<i32> {
        self.priorities.keys().next().copied()
    }
}

/// The index.
#[derive(Debug, Default)]
pub(crate) struct Cluster {
    pub pods: HashMap<PodKey, PodEntry>,
    pub nodes: BTreeMap<String, NodeEntry>,
    /// By node name (nodes that are not stored too: seeded pods may name any node).
    pub usage: HashMap<String, Usage>,
    pub pending: BTreeSet<PodKey>,
    /// Pending pods by the node they are nominated to.
    pub nominated: HashMap<String, BTreeSet<PodKey>>,
    /// Active pods by controller (namespace, kind, name).
    pub active_by_owner: HashMap<(String, String, String), i64>,
    pub classes: Classes,
    pub seq: u64,
    /// How many bound pods (that count) have each priority, over all nodes.
    pub bound_priorities: BTreeMap<i32, usize>,
}

impl Cluster {
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn owner_key(key: &PodKey, owner: &Owner) -> (String, String, String) {
        (key.0.clone(), owner.kind.clone(), owner.name.clone())
    }

    /// Takes a pod out, with what it added up.
    pub fn remove_pod(&mut self, key: &PodKey) -> Option<PodEntry> {
        let entry = self.pods.remove(key)?;
        if entry.counts()
            && let Some(node) = &entry.node
            && let Some(usage) = self.usage.get_mut(node)
        {
            usage.requested.sub(&entry.requests);
            usage.pods.remove(key);
            for counts in [&mut usage.priorities, &mut self.bound_priorities] {
                if let Some(n) = counts.get_mut(&entry.priority) {
                    *n -= 1;
                    if *n == 0 {
                        counts.remove(&entry.priority);
                    }
                }
            }
            if usage.pods.is_empty() {
                self.usage.remove(node);
            }
        }
        self.pending.remove(key);
        if let Some(node) = &entry.nominated
            && let Some(set) = self.nominated.get_mut(node)
        {
            set.remove(key);
            if set.is_empty() {
                self.nominated.remove(node);
            }
        }
        if entry.active()
            && let Some(owner) = &entry.controller
        {
            let k = Self::owner_key(key, owner);
            if let Some(n) = self.active_by_owner.get_mut(&k) {
                *n -= 1;
                if *n <= 0 {
                    self.active_by_owner.remove(&k);
                }
            }
        }
        Some(entry)
    }

    /// Puts a pod in, adding it up.
    pub fn insert_pod(&mut self, key: PodKey, entry: PodEntry) {
        if entry.counts()
            && let Some(node) = &entry.node
        {
            let usage = self.usage.entry(node.clone()).or_default();
            usage.requested.add(&entry.requests);
            usage.pods.insert(key.clone());
            *usage.priorities.entry(entry.priority).or_insert(0) += 1;
            *self.bound_priorities.entry(entry.priority).or_insert(0) += 1;
        }
        if entry.pending() {
            self.pending.insert(key.clone());
            if let Some(node) = &entry.nominated {
                self.nominated
                    .entry(node.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        if entry.active()
            && let Some(owner) = &entry.controller
        {
            *self
                .active_by_owner
                .entry(Self::owner_key(&key, owner))
                .or_insert(0) += 1;
        }
        self.pods.insert(key, entry);
    }

    /// The lowest priority of a bound pod.
    pub fn lowest_bound_priority(&self) -> Option<i32> {
        self.bound_priorities.keys().next().copied()
    }

    /// Active pods of a controller.
    pub fn active_of(&self, namespace: &str, kind: &str, name: &str) -> i64 {
        self.active_by_owner
            .get(&(namespace.to_string(), kind.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// What a node holds for `pod` (at `priority`): the bound pods, plus the pending pods
    /// nominated to it at the same or a higher priority (the scheduler keeps their room).
    pub fn used_for(&self, node: &str, pod: &PodKey, priority: i32) -> (Cow<'_, Resources>, i64) {
        let (mut used, mut count) = self
            .usage
            .get(node)
            .map_or((Cow::Borrowed(&NOTHING), 0), |u| {
                (Cow::Borrowed(&u.requested), u.pods.len() as i64)
            });
        for key in self.nominated.get(node).into_iter().flatten() {
            if key == pod {
                continue;
            }
            if let Some(other) = self.pods.get(key)
                && other.priority >= priority
            {
                used.to_mut().add(&other.requests);
                count += 1;
            }
        }
        (used, count)
    }
}

static NOTHING: Resources = Resources::ZERO;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn priority_comes_from_the_pod_then_its_class_then_the_default_class() {
        let mut classes = Classes::default();
        classes.by_name.insert(
            "placeholder".into(),
            Class {
                value: -1,
                never: true,
            },
        );
        assert_eq!(classes.resolve(&json!({"priority": 5})), (5, false, false));
        assert_eq!(
            classes.resolve(&json!({"priorityClassName": "placeholder"})),
            (-1, true, true)
        );
        assert_eq!(
            classes.resolve(&json!({"priorityClassName": "placeholder",
                                    "preemptionPolicy": "PreemptLowerPriority"})),
            (-1, false, true)
        );
        assert_eq!(classes.resolve(&json!({})), (0, false, true));
        classes.global_default = Some(Class {
            value: 7,
            never: false,
        });
        assert_eq!(classes.resolve(&json!({})), (7, false, true));
    }

    #[test]
    fn a_node_that_is_not_ready_carries_the_lifecycle_taint() {
        let node = |status: Value| NodeEntry::parse(&json!({"status": status}));
        assert!(
            node(json!({"conditions": [{"type": "Ready", "status": "True"}]}))
                .taints
                .is_empty()
        );
        assert_eq!(
            node(json!({"conditions": [{"type": "Ready", "status": "Unknown"}]})).taints[0].key,
            "node.kubernetes.io/unreachable"
        );
        assert_eq!(
            node(json!({})).taints[0].key,
            "node.kubernetes.io/not-ready"
        );
        let cap = node(json!({"capacity": {"cpu": "2"}}));
        assert_eq!(
            cap.allocatable.cpu, 2000,
            "allocatable defaults to capacity"
        );
    }
}
