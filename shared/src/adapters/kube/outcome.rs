//! What the executor did for each node action ([`NodeOutcome`]: its cordon, drain, delete,
//! Events), and the port's result its steps make of it.

use chrono::{DateTime, Utc};

use crate::domain::plan::NodeAction;
use crate::domain::report::DrainSummary;
use crate::domain::surge::RoomWait;
use crate::ports::ActionResult;

/// What a delete did; displayed for people (the action's detail).
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub(crate) enum DeleteOutcome {
    /// Deleted (`nodeclaim/x`, `machine/ns/x`, `node/x`).
    #[strum(to_string = "deleted {target}")]
    Deleted { target: String },
    /// Nothing of that name: deleted before.
    #[strum(to_string = "{target} already gone")]
    AlreadyGone { target: String },
    /// Deletion under way (`deletionTimestamp` set): nothing sent.
    #[strum(to_string = "{target} already being deleted")]
    AlreadyDeleting { target: String },
    /// Dry run.
    #[strum(to_string = "would delete {target}")]
    WouldDelete { target: String },
    /// Not deleted: the object read does not belong to the event's instance, or is
    /// control-plane.
    #[strum(to_string = "refused to delete {target}: {why}")]
    Refused { target: String, why: String },
}

/// A pod not evicted by the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftPod {
    /// `<namespace>/<name>`.
    pub pod: String,
    /// The last refusal (`429 TooManyRequests: Cannot evict pod ... The disruption budget web-pdb
    /// needs 2 healthy pods ...`).
    pub reason: String,
}

/// A pod a drain leaves alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedPod {
    pub pod: String,
    /// `daemonset`, `mirror`, `succeeded`, `failed`.
    pub why: &'static str,
}

/// What became of the Events on the pods a drain pass evicted (see
/// [`super::KubeExecutor`]): best effort, never the drain's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodEventCounts {
    /// Created.
    pub recorded: usize,
    /// There already (a redelivered event: 409).
    pub existed: usize,
    /// Not sent: past the pass's budget, the client's rate limit busy, or after a failure (the
    /// one that failed when sent counted too).
    pub given_up: usize,
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Evictions the API accepted, in the order they were accepted.
    pub evicted: Vec<String>,
    /// The uid of each pod of `evicted` (by `namespace/name`), when it had one.
    pub uids: std::collections::BTreeMap<String, String>,
    /// The Events on the pods this pass evicted.
    pub pod_events: PodEventCounts,
    /// Pods gone before their eviction (404).
    pub already_gone: Vec<String>,
    /// Pods still refused at the deadline.
    pub left: Vec<LeftPod>,
    /// Evicted or terminating pods still present when the drain stopped waiting.
    pub terminating: Vec<String>,
    /// Pods left alone.
    pub skipped: Vec<SkippedPod>,
    /// Dry run: the pods that would be evicted, in order.
    pub would_evict: Vec<String>,
    /// The pass ([`super::drain`]) left work for a later pass: pods
    /// evicted or terminating and not yet gone, refused evictions, critical pods not yet due.
    pub pending: bool,
    /// When the drain is pending only for terminating pods: when the last of them is due to be
    /// gone (the latest `deletionTimestamp`); or, pods waiting for room, when to look again.
    pub wait_until: Option<DateTime<Utc>>,
    /// Pods not evicted yet: they wait for room (their placeholder to run) or their latest safe
    /// time.
    pub waiting: Vec<String>,
    /// The drain only waits for room (every pod left waits for its placeholder): until when at
    /// the latest, and how many placeholders hold it.
    pub room: Option<RoomWait>,
    /// Placeholders created, and deleted (their pod gone, or the drain over), in this pass.
    pub placeholders_created: usize,
    pub placeholders_deleted: usize,
    /// Placeholders the API server refused (their pods evicted at once).
    pub placeholders_refused: usize,
    /// Those refusals reported for the first time in this environment (an Event on the node).
    /// (`placeholders for pods of namespace shop refused by <step>: <message>`).
    pub new_refusals: Vec<String>,
}

impl DrainReport {
    /// No pod was left on the node for want of an eviction (and none is pending).
    pub fn complete(&self) -> bool {
        self.left.is_empty() && !self.pending
    }

    /// `evicted 3 pods; 1 left (blocked at the deadline: web/w1); 2 still terminating`; or
    /// (`later`) the summary of a drain's later pass, after earlier passes evicted what there was
    /// (which this pass does not count): `no pod left to evict; 3 pods left alone`.
    pub fn summary(&self, later: bool) -> String {
        let still = if later { " left" } else { "" };
        // `(3 pods, "a, b, c")` of a list that is not empty.
        let some =
            |list: &[String]| (!list.is_empty()).then(|| (pods(list.len()), list.join(", ")));
        let left: Vec<String> = self.left.iter().map(|l| l.pod.clone()).collect();
        let until = if self.pending {
            "for now"
        } else {
            "until the deadline"
        };
        let count = |n: usize, what: &str| (n > 0).then(|| format!("{n} placeholders {what}"));
        let nothing = self.would_evict.is_empty() && self.evicted.is_empty() && left.is_empty();
        let parts = [
            some(&self.would_evict).map(|(n, names)| format!("would evict {n} ({names})")),
            nothing.then(|| format!("no pod{still} to evict")),
            some(&self.evicted).map(|(n, _)| format!("evicted {n}")),
            some(&self.already_gone).map(|(n, _)| format!("{n} already gone")),
            some(&left).map(|(n, names)| format!("{n} left (eviction refused {until}: {names})")),
            some(&self.terminating).map(|(n, names)| format!("{n} still terminating ({names})")),
            (!self.skipped.is_empty()).then(|| format!("{} left alone", pods(self.skipped.len()))),
            some(&self.waiting)
                .map(|(n, names)| format!("{n} waiting for room elsewhere ({names})")),
            count(self.placeholders_created, "created"),
            count(
                self.placeholders_refused,
                "refused by the API server (their pods evicted at once)",
            ),
            count(self.placeholders_deleted, "deleted"),
            self.pending
                .then(|| "continued in a later pass".to_string()),
        ];
        parts.into_iter().flatten().collect::<Vec<_>>().join("; ")
    }
}

fn pods(n: usize) -> String {
    format!("{n} pod{}", if n == 1 { "" } else { "s" })
}

/// What became of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    Created,
    /// Recorded before (a redelivered event).
    Exists,
    /// Dry run.
    WouldCreate,
}

/// What was done for one node action: what each step did, and the port's [`ActionResult`]
/// the steps make as they go (its `detail` said part by part, joined when they are done).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeOutcome {
    pub result: ActionResult,
    pub drain: Option<DrainReport>,
    /// Event reasons, with what became of each.
    pub events: Vec<(String, EventOutcome)>,
    pub(super) dry_run: bool,
    /// What the steps did, for people, in order: `cordoned node/x`, `evicted 3 pods`.
    said: Vec<String>,
}

impl NodeOutcome {
    pub(super) fn new(a: &NodeAction, dry_run: bool) -> NodeOutcome {
        let result = ActionResult {
            instance_id: a.instance_id.clone(),
            ..ActionResult::default()
        };
        NodeOutcome {
            result,
            dry_run,
            said: dry_run.then(|| "dry run".to_string()).into_iter().collect(),
            ..NodeOutcome::default()
        }
    }

    /// Adds `part` to the detail.
    pub(super) fn say(&mut self, part: impl Into<String>) {
        self.said.push(part.into());
    }

    /// Why the action was refused: the node (or what it would act on), as read live, failed
    /// verification (see [`super::KubeExecutor`]).
    pub(super) fn refuse(&mut self, why: String) {
        self.say(format!("refused: {why}"));
        self.result.refused = Some(why);
    }

    /// What a drain pass did (`report`): said, and told the port.
    pub(super) fn drained(&mut self, d: DrainReport) {
        self.say(d.summary(false));
        let r = &mut self.result;
        (r.pending, r.wait_until, r.room) = (r.pending || d.pending, d.wait_until, d.room);
        r.drain = (!self.dry_run).then(|| DrainSummary {
            evicted: d.evicted.len(),
            left: d.left.len(),
            complete: d.complete(),
            pending: d.pending,
            pod_events: d.pod_events.recorded,
            pod_events_given_up: d.pod_events.given_up,
            placeholders_refused: d.placeholders_refused,
        });
        self.drain = Some(d);
    }

    /// The detail, once every step is done: what they said, then the Events a dry run would
    /// record (`cordoned node/x; evicted 3 pods; completed lifecycle action asg/hook`).
    pub(super) fn finish(mut self) -> NodeOutcome {
        let would: Vec<&str> = (self.events.iter())
            .filter(|(_, o)| *o == EventOutcome::WouldCreate)
            .map(|(r, _)| r.as_str())
            .collect();
        // A dry run's drain would record an Event on each pod it would evict.
        let pod_events = self.drain.as_ref().map_or(0, |d| d.would_evict.len());
        let tail = [
            (!would.is_empty()).then(|| format!("would record Events {}", would.join(", "))),
            (pod_events > 0)
                .then(|| format!("would record an Event on each pod evicted ({pod_events})")),
        ];
        self.said.extend(tail.into_iter().flatten());
        // Nothing said (but `dry run`).
        if self.said.len() == usize::from(self.dry_run) {
            self.say("nothing to do");
        }
        self.result.detail = self.said.join("; ");
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_for_people() {
        let target = || "nodeclaim/nc".to_string();
        let deletes = [
            (
                DeleteOutcome::Deleted { target: target() },
                "deleted nodeclaim/nc",
            ),
            (
                DeleteOutcome::AlreadyGone { target: target() },
                "nodeclaim/nc already gone",
            ),
            (
                DeleteOutcome::AlreadyDeleting { target: target() },
                "nodeclaim/nc already being deleted",
            ),
            (
                DeleteOutcome::WouldDelete { target: target() },
                "would delete nodeclaim/nc",
            ),
            (
                DeleteOutcome::Refused {
                    target: target(),
                    why: "another instance's".into(),
                },
                "refused to delete nodeclaim/nc: another instance's",
            ),
        ];
        for (outcome, said) in deletes {
            assert_eq!(outcome.to_string(), said);
        }
    }
}
