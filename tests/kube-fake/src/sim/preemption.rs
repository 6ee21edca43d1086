//! The `DefaultPreemption` plugin: when a pod fits nowhere, find the node where deleting pods of
//! a strictly lower priority makes it fit, delete them gracefully and nominate the node.
//! PodDisruptionBudgets are ignored (the real plugin only prefers candidates that violate fewer
//! of them, best effort), as is the victims' start time in the tie-breaks.

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::cluster::{PodEntry, PodKey};
use super::scheduler::{NodeStatus, Reason, fit_error, insufficient};
use super::{Sim, rfc3339, set_condition};
use crate::store::Store;

const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// What preemption did for a pod.
pub(super) enum Preempted {
    /// Victims are going; the pod waits for this node.
    Nominated(String),
    /// Nothing: the `preemption: …` part of the message, and whether the pod's nomination is
    /// to be cleared (no node where preemption might help).
    Not { message: String, clear: bool },
}

/// A node and the pods to delete there.
struct Candidate {
    node: String,
    victims: Vec<(PodKey, i32)>,
}

impl Candidate {
    /// `pickOneNodeForPreemption`, less PDBs and start times: the lowest highest-priority
    /// victim, the lowest sum of priorities, the fewest victims, then the node's name.
    fn rank(&self) -> (i32, i64, usize, &str) {
        let highest = self
            .victims
            .iter()
            .map(|(_, p)| *p)
            .max()
            .unwrap_or(i32::MIN);
        let sum = self
            .victims
            .iter()
            .map(|(_, p)| i64::from(*p) + i64::from(i32::MAX) + 1)
            .sum();
        (highest, sum, self.victims.len(), self.node.as_str())
    }
}

impl Sim {
    /// Preemption for `pod`, which failed on the nodes in `statuses`.
    pub(super) fn preempt(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        pod: &PodEntry,
        statuses: &[(String, NodeStatus)],
        t: DateTime<Utc>,
    ) -> Preempted {
        if let Some(why) = self.not_eligible(pod, statuses) {
            return Preempted::Not {
                message: why.to_string(),
                clear: false,
            };
        }
        let mut diagnosis = Vec::new();
        let mut candidates = Vec::new();
        let mut might_help = false;
        // No bound pod of a lower priority anywhere: no node has victims.
        let victims_somewhere = self
            .cluster
            .lowest_bound_priority()
            .is_some_and(|lowest| lowest < pod.priority);
        for (name, status) in statuses {
            if !status.resolvable {
                diagnosis.push((
                    name.clone(),
                    NodeStatus {
                        reasons: vec![Cow::Borrowed(NOT_HELPFUL)],
                        resolvable: false,
                    },
                ));
                continue;
            }
            might_help = true;
            let found = if victims_somewhere {
                self.select_victims(key, pod, name)
            } else {
                Err(vec![Cow::Borrowed(NO_VICTIMS)])
            };
            match found {
                Ok(candidate) => candidates.push(candidate),
                Err(reasons) => diagnosis.push((
                    name.clone(),
                    NodeStatus {
                        reasons,
                        resolvable: true,
                    },
                )),
            }
        }
        let Some(best) = candidates
            .into_iter()
            .min_by(|a, b| a.rank().cmp(&b.rank()))
        else {
            return Preempted::Not {
                message: fit_error(self.cluster.nodes.len(), &diagnosis),
                clear: !might_help,
            };
        };
        self.delete_victims(store, key, pod, &best, t);
        Preempted::Nominated(best.node)
    }

    /// `PodEligibleToPreemptOthers`.
    fn not_eligible(
        &self,
        pod: &PodEntry,
        statuses: &[(String, NodeStatus)],
    ) -> Option<&'static str> {
        if pod.never {
            return Some("not eligible due to preemptionPolicy=Never.");
        }
        let nominated = pod.nominated.as_ref()?;
        if statuses
            .iter()
            .any(|(n, s)| n == nominated && !s.resolvable)
        {
            return None;
        }
        let usage = self.cluster.usage.get(nominated)?;
        let waiting = usage
            .pods
            .iter()
            .filter_map(|k| self.cluster.pods.get(k))
            .any(|p| p.priority < pod.priority && p.terminating && p.preempted);
        waiting.then_some("not eligible due to a terminating pod on the nominated node.")
    }

    /// `SelectVictimsOnNode`: remove every lower-priority pod; if the pod then fits, give back
    /// the most important ones that can stay.
    fn select_victims(
        &self,
        key: &PodKey,
        pod: &PodEntry,
        node: &str,
    ) -> Result<Candidate, Vec<Reason>> {
        let (Some(entry), Some(usage)) =
            (self.cluster.nodes.get(node), self.cluster.usage.get(node))
        else {
            return Err(vec![Cow::Borrowed(NO_VICTIMS)]);
        };
        if usage
            .lowest_priority()
            .is_none_or(|lowest| lowest >= pod.priority)
        {
            return Err(vec![Cow::Borrowed(NO_VICTIMS)]);
        }
        let mut potential: Vec<(&PodKey, &PodEntry)> = usage
            .pods
            .iter()
            .filter_map(|k| self.cluster.pods.get(k).map(|p| (k, p)))
            .filter(|(_, p)| p.priority < pod.priority)
            .collect();
        if potential.is_empty() {
            return Err(vec![Cow::Borrowed(NO_VICTIMS)]);
        }
        let (used, mut count) = self.cluster.used_for(node, key, pod.priority);
        let mut used = used.into_owned();
        for (_, p) in &potential {
            used.sub(&p.requests);
            count -= 1;
        }
        let reasons = insufficient(&pod.requests, &entry.allocatable, &used, count);
        if !reasons.is_empty() {
            return Err(reasons);
        }
        potential.sort_by(|a, b| b.1.priority.cmp(&a.1.priority).then(a.0.cmp(b.0)));
        let mut victims = Vec::new();
        for (k, p) in potential {
            let mut with = used.clone();
            with.add(&p.requests);
            if insufficient(&pod.requests, &entry.allocatable, &with, count + 1).is_empty() {
                used = with;
                count += 1;
            } else {
                victims.push((k.clone(), p.priority));
            }
        }
        Ok(Candidate {
            node: node.to_string(),
            victims,
        })
    }

    /// `prepareCandidate`: each victim gets `DisruptionTarget` and a graceful delete; pods of a
    /// lower priority nominated to the node lose their nomination.
    fn delete_victims(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        pod: &PodEntry,
        candidate: &Candidate,
        t: DateTime<Utc>,
    ) {
        for (victim, _) in &candidate.victims {
            let okey = self.pod_key(store, victim);
            let Some(mut obj) = store.object(&okey).cloned() else {
                continue;
            };
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            set_condition(
                &mut obj,
                json!({"type": "DisruptionTarget", "status": "True",
                       "reason": "PreemptionByScheduler",
                       "message": "default-scheduler: preempting to accommodate a higher priority pod",
                       "lastTransitionTime": rfc3339(t)}),
            );
            // Its own grace period; the fake's eviction grace for a pod that states none.
            let grace = obj
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .map_or(store.pod_grace, |s| Duration::from_secs(s.max(0) as u64));
            store.write(okey.clone(), obj);
            store.delete_pod_gracefully(&okey, grace);
            self.pod_changed(store, &okey, t);
        }
        let mut lower: Vec<PodKey> = self
            .cluster
            .nominated
            .get(&candidate.node)
            .into_iter()
            .flatten()
            .filter(|k| *k != key)
            .filter(|k| {
                self.cluster
                    .pods
                    .get(*k)
                    .is_some_and(|p| p.priority < pod.priority)
            })
            .cloned()
            .collect();
        lower.sort();
        for k in lower {
            let message = self.condition_message(store, &k);
            self.write_unschedulable(store, &k, &message, Some(None), t);
            if let Some(p) = self.cluster.pods.get_mut(&k) {
                p.tried = None;
            }
            self.sched_dirty = true;
        }
    }
}
