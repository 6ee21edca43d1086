//! What the executor did for each node action ([`NodeOutcome`]), and what it reports of it to the
//! pipeline ([`results`]).

use chrono::{DateTime, Utc};

use super::cordon::CordonOutcome;
use super::delete::DeleteOutcome;
use super::drain::DrainReport;
use super::events::EventOutcome;
use super::launch::Joining;
use crate::domain::config::Action;
use crate::domain::plan::NodeAction;
use crate::domain::report::DrainSummary;
use crate::domain::wayback::UndoOutcome;
use crate::ports::{ActionResult, LifecycleOutcome};

/// What was done for one node action.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOutcome {
    pub instance_id: String,
    pub node: Option<String>,
    pub action: Action,
    pub dry_run: bool,
    /// The node was not there when read: nothing to do to it.
    pub node_gone: bool,
    /// Why the action was refused: the node, as read live, failed verification (see
    /// [`KubeExecutor::run`]'s module doc).
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
            node_gone: false,
            refused: None,
            cordon: None,
            cordoned_before: false,
            cordoned_at: None,
            drain: None,
            delete: None,
            lifecycle: None,
            lifecycle_hook: a
                .complete_lifecycle
                .as_ref()
                .map(|l| format!("{}/{}", l.asg_name, l.hook_name)),
            undo: None,
            drain_pending: false,
            heartbeat_at: None,
            joining: None,
            events: Vec::new(),
            event_failures: Vec::new(),
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
        let mut parts: Vec<String> = Vec::new();
        if self.dry_run {
            parts.push("dry run".into());
        }
        if let Some(why) = &self.refused {
            parts.push(format!("refused: {why}"));
        }
        if self.node_gone && self.delete.is_none() {
            parts.push(format!("node/{node} is gone"));
        }
        match &self.cordon {
            Some(CordonOutcome::Cordoned { .. }) => parts.push(format!("cordoned node/{node}")),
            Some(CordonOutcome::AlreadyCordoned) if self.cordoned_before => {
                parts.push(format!("cordoned node/{node}"))
            }
            Some(CordonOutcome::AlreadyCordoned) => {
                parts.push(format!("node/{node} already cordoned"))
            }
            Some(CordonOutcome::WouldCordon { .. }) => {
                parts.push(format!("would cordon and taint node/{node}"))
            }
            Some(CordonOutcome::NodeGone) => parts.push(format!("node/{node} is gone")),
            // Said with the refusal.
            Some(CordonOutcome::Refused { .. }) | None => {}
        }
        if let Some(d) = &self.drain {
            parts.push(d.summary());
        } else if self.drain_pending {
            parts.push("drain in the next pass".into());
        }
        if let Some(d) = &self.delete {
            parts.push(d.summary());
        }
        if let Some(j) = &self.joining {
            parts.push(j.summary());
        }
        if let (Some(l), Some(hook)) = (&self.lifecycle, &self.lifecycle_hook) {
            parts.push(l.summary(hook));
        }
        match &self.undo {
            Some(UndoOutcome::Undone) => {
                parts.push(format!("undid forewarn's cordon of node/{node}"))
            }
            Some(UndoOutcome::WouldUndo) => {
                parts.push(format!("would undo forewarn's cordon of node/{node}"))
            }
            Some(UndoOutcome::NodeGone) => parts.push(format!("node/{node} is gone")),
            Some(UndoOutcome::Refused { why }) => parts.push(format!("left cordoned: {why}")),
            None => {}
        }
        let would: Vec<&str> = self
            .events
            .iter()
            .filter(|(_, o)| *o == EventOutcome::WouldCreate)
            .map(|(r, _)| r.as_str())
            .collect();
        if !would.is_empty() {
            parts.push(format!("would record Events {}", would.join(", ")));
        }
        if let Some(d) = &self.drain
            && d.pod_events.would_record > 0
        {
            parts.push(format!(
                "would record an Event on each pod evicted ({})",
                d.pod_events.would_record
            ));
        }
        for f in &self.event_failures {
            parts.push(format!("Event not recorded: {f}"));
        }
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
