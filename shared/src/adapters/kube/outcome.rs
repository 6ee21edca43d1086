//! What the executor did for each node action ([`NodeOutcome`]: its cordon, drain, delete,
//! Events, launch check), and what it reports of it to the pipeline ([`results`]).

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::config::Action;
use crate::domain::cordon_record::UndoOutcome;
use crate::domain::plan::NodeAction;
use crate::domain::report::DrainSummary;
use crate::domain::surge::RoomWait;
use crate::ports::{ActionResult, LifecycleOutcome};

/// What a cordon did.
#[derive(Debug, Clone, PartialEq)]
pub enum CordonOutcome {
    /// Patched, after `attempts` tries (more than one when the node changed under us).
    Cordoned { attempts: u32 },
    /// The node already had exactly that state: nothing sent.
    AlreadyCordoned,
    /// Dry run: the patch that would be sent.
    WouldCordon { patch: Value },
}

/// What a delete did; displayed for people.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum DeleteOutcome {
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
    /// Not sent: past the pass's budget, the client's rate limit busy, or after a failure.
    pub given_up: usize,
    /// Failed when sent (counted in `given_up` too).
    pub failed: usize,
    /// Dry run: the Events that would be recorded.
    pub would_record: usize,
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

/// Where a launching instance's node stands; displayed for people.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum Joining {
    /// The node runs the instance and is Ready: the lifecycle action is completed.
    #[strum(to_string = "node/{node} runs the instance and is Ready")]
    Ready { node: String },
    /// Not yet: why, and when it is looked at again.
    #[strum(to_string = "{why}: looked at again in the next pass")]
    Waiting {
        why: String,
        next_check: DateTime<Utc>,
    },
    /// The deadline passed first: the hook is left to its own timeout and default result.
    #[strum(
        to_string = "{why} by the deadline: the lifecycle action is left to the hook's own timeout and default result"
    )]
    TimedOut { why: String },
}

/// What was done for one node action.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeOutcome {
    pub instance_id: String,
    pub node: Option<String>,
    pub action: Action,
    pub dry_run: bool,
    /// The node was not there when read (or was gone when cordoned): nothing to do to it.
    pub node_gone: bool,
    /// Why the action was refused: the node, as read live (or read again when a cordon
    /// conflicted), failed verification (see [`super::KubeExecutor`]).
    pub refused: Option<String>,
    pub cordon: Option<CordonOutcome>,
    /// The node was found cordoned with forewarn's taint when the drain's first pass announced
    /// it: the event's first pass (or an earlier delivery) did it for this event.
    pub cordoned_before: bool,
    /// When the node was seen cordoned (by this action or before it; not in a dry run).
    pub cordoned_at: Option<DateTime<Utc>>,
    pub drain: Option<DrainReport>,
    pub delete: Option<DeleteOutcome>,
    pub lifecycle: Option<LifecycleOutcome>,
    /// The lifecycle hook completed after the action (`<asg>/<hook name>`).
    pub lifecycle_hook: Option<String>,
    /// What became of an `uncordon` (the way back).
    pub undo: Option<UndoOutcome>,
    /// The cordon pass ([`Pass::Cordon`]) left the drain to the drain passes.
    pub drain_pending: bool,
    /// When the lifecycle action was kept alive (a drain still pending).
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Where a launching instance's node stands (a launch hook's action).
    pub joining: Option<Joining>,
    /// Event reasons, with what became of each.
    pub events: Vec<(String, EventOutcome)>,
    /// Events that could not be recorded (best effort).
    pub event_failures: Vec<String>,
}

impl NodeOutcome {
    pub(super) fn new(a: &NodeAction, dry_run: bool) -> NodeOutcome {
        NodeOutcome {
            instance_id: a.instance_id.clone(),
            node: a.node.clone(),
            action: a.action,
            dry_run,
            lifecycle_hook: a
                .complete_lifecycle
                .as_ref()
                .map(|l| format!("{}/{}", l.asg_name, l.hook_name)),
            ..NodeOutcome::default()
        }
    }

    /// The drain (or the wait for a launching instance's node) goes on in a later pass; a dry
    /// run has none.
    pub fn pending(&self) -> bool {
        self.drain_pending
            || self.drain.as_ref().is_some_and(|d| d.pending)
            || (!self.dry_run && matches!(self.joining, Some(Joining::Waiting { .. })))
    }

    /// For people: `cordoned node/x; evicted 3 pods; completed lifecycle action asg/hook`.
    pub fn detail(&self) -> String {
        let node = self.node.as_deref().unwrap_or("?");
        let cordon = match (&self.cordon, self.cordoned_before) {
            (Some(CordonOutcome::Cordoned { .. }), _)
            | (Some(CordonOutcome::AlreadyCordoned), true) => format!("cordoned node/{node}"),
            (Some(CordonOutcome::AlreadyCordoned), false) => {
                format!("node/{node} already cordoned")
            }
            (Some(CordonOutcome::WouldCordon { .. }), _) => {
                format!("would cordon and taint node/{node}")
            }
            (None, _) => String::new(),
        };
        let drain = match &self.drain {
            Some(d) => d.summary(false),
            None if self.drain_pending => "drain in the next pass".into(),
            None => String::new(),
        };
        let undo = match &self.undo {
            Some(UndoOutcome::Undone) => format!("undid forewarn's cordon of node/{node}"),
            Some(UndoOutcome::WouldUndo) => format!("would undo forewarn's cordon of node/{node}"),
            Some(UndoOutcome::NodeGone) => format!("node/{node} is gone"),
            Some(UndoOutcome::Refused { why }) => format!("left cordoned: {why}"),
            None => String::new(),
        };
        let would: Vec<&str> = (self.events.iter())
            .filter(|(_, o)| *o == EventOutcome::WouldCreate)
            .map(|(r, _)| r.as_str())
            .collect();
        let pod_events = self.drain.as_ref().map_or(0, |d| d.pod_events.would_record);
        let mut parts: Vec<String> = [
            self.dry_run.then(|| "dry run".to_string()),
            self.refused.as_ref().map(|why| format!("refused: {why}")),
            (self.node_gone && self.delete.is_none()).then(|| format!("node/{node} is gone")),
            Some(cordon),
            Some(drain),
            self.delete.as_ref().map(DeleteOutcome::to_string),
            self.joining.as_ref().map(Joining::to_string),
            (self.lifecycle.as_ref().zip(self.lifecycle_hook.as_ref()))
                .map(|(l, hook)| l.summary(hook)),
            Some(undo),
            (!would.is_empty()).then(|| format!("would record Events {}", would.join(", "))),
            (pod_events > 0)
                .then(|| format!("would record an Event on each pod evicted ({pod_events})")),
        ]
        .into_iter()
        .flatten()
        .filter(|p| !p.is_empty())
        .chain(
            self.event_failures
                .iter()
                .map(|f| format!("Event not recorded: {f}")),
        )
        .collect();
        if parts.is_empty() || (self.dry_run && parts.len() == 1) {
            parts.push("nothing to do".into());
        }
        parts.join("; ")
    }
}

/// What the executor reports to the pipeline of each node's outcome.
pub(crate) fn results(outcomes: &[NodeOutcome]) -> Vec<ActionResult> {
    outcomes
        .iter()
        .map(|o| ActionResult {
            instance_id: o.instance_id.clone(),
            detail: o.detail(),
            cordoned_at: o.cordoned_at,
            drain: o
                .drain
                .as_ref()
                .filter(|_| !o.dry_run)
                .map(|d| DrainSummary {
                    evicted: d.evicted.len(),
                    left: d.left.len(),
                    complete: d.complete(),
                    pending: d.pending,
                    pod_events: d.pod_events.recorded,
                    pod_events_given_up: d.pod_events.given_up,
                    placeholders_refused: d.placeholders_refused,
                }),
            pending: o.pending(),
            wait_until: o
                .drain
                .as_ref()
                .and_then(|d| d.wait_until)
                .or(match &o.joining {
                    Some(Joining::Waiting { next_check, .. }) => Some(*next_check),
                    _ => None,
                }),
            room: o.drain.as_ref().and_then(|d| d.room),
            heartbeat_at: o.heartbeat_at,
            refused: o.refused.clone().or_else(|| match &o.delete {
                Some(DeleteOutcome::Refused { why, .. }) => Some(why.clone()),
                _ => None,
            }),
        })
        .collect()
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
        let ready = Joining::Ready { node: "n1".into() };
        assert_eq!(ready.to_string(), "node/n1 runs the instance and is Ready");
        let waiting = Joining::Waiting {
            why: "no node yet".into(),
            next_check: DateTime::<Utc>::UNIX_EPOCH,
        };
        assert_eq!(
            waiting.to_string(),
            "no node yet: looked at again in the next pass"
        );
        let timed_out = Joining::TimedOut {
            why: "no node yet".into(),
        };
        assert_eq!(
            timed_out.to_string(),
            "no node yet by the deadline: the lifecycle action is left to the hook's own timeout \
             and default result"
        );
    }
}
