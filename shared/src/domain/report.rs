//! What became of each record: the reports the pipeline returns, `forewarn replay` prints and
//! the telemetry and webhook read.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::config::Action;
use super::event::{EventKind, Record};
use super::plan::{Plan, Target};

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Decided (and pools recorded) but nothing done to the cluster: a dry run.
    Planned,
    /// Decided and carried out.
    Acted,
    /// Nothing to do: unsupported, or a state not acted on.
    Ignored,
    /// Applied before: nothing changed.
    Duplicate,
    /// Could not be decoded or carried out: it goes back to the queue.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Planned => "planned",
            Outcome::Acted => "acted",
            Outcome::Ignored => "ignored",
            Outcome::Duplicate => "duplicate",
            Outcome::Failed => "failed",
        }
    }
}

/// A pool in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReport {
    pub capacity_type: String,
    pub instance_type: String,
    pub zone: String,
    pub unavailable_until: Option<DateTime<Utc>>,
}

/// A node action in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionReport {
    pub instance_id: String,
    pub node: Option<String>,
    pub action: Action,
    /// What a `delete` removes (`nodeclaim/x`, `machine/ns/x`, `node/x`).
    pub target: Option<String>,
    pub deadline: Option<DateTime<Utc>>,
    /// Why this action, or why none.
    pub reason: String,
    /// The ASG lifecycle hook completed after the action (`asg/hook`).
    pub complete_lifecycle: Option<String>,
    /// What carrying it out did (only when acted).
    pub result: Option<String>,
    /// When the node was seen cordoned: by this action, or already before it.
    #[serde(default)]
    pub cordoned_at: Option<DateTime<Utc>>,
    /// What the drain did (`cordon-drain` only).
    #[serde(default)]
    pub drain: Option<DrainSummary>,
    /// When the lifecycle action was kept alive during a pending drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<DateTime<Utc>>,
}

/// What a drain did, in numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainSummary {
    /// Evictions the API accepted.
    pub evicted: usize,
    /// Pods whose eviction was still refused at the deadline (a disruption budget).
    pub left: usize,
    /// No pod was left for want of an eviction (and the drain is over).
    pub complete: bool,
    /// The drain goes on in a later pass (a continuation).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// One line of `forewarn replay --output json`, and the handler's log of each record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub event_id: Option<String>,
    pub kind: Option<EventKind>,
    /// What the event is, for people (`spot-interruption (terminate)`).
    pub summary: Option<String>,
    /// Where the record came from (`file: Records[2] (messageId m)`).
    pub origin: String,
    pub message_id: Option<String>,
    pub time: Option<DateTime<Utc>>,
    pub instance_ids: Vec<String>,
    pub outcome: Outcome,
    pub pools: Vec<PoolReport>,
    pub actions: Vec<ActionReport>,
    /// Why it was ignored or failed.
    pub reason: Option<String>,
    /// Which later pass of the event's drain this is (a continuation); absent for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<u32>,
}

impl Report {
    /// A report of `record` before any work: failed until an outcome is set.
    pub fn new(record: &Record) -> Report {
        let event = record.event.as_ref().ok();
        Report {
            event_id: event.map(|e| e.id.clone()),
            kind: event.map(|e| e.kind),
            summary: event.map(|e| e.kind.to_string()),
            origin: record.origin.to_string(),
            message_id: record.origin.message_id.clone(),
            time: event.map(|e| e.time),
            instance_ids: event.map(|e| e.instance_ids.clone()).unwrap_or_default(),
            outcome: Outcome::Failed,
            pools: Vec::new(),
            actions: Vec::new(),
            reason: None,
            pass: record.continuation.as_ref().map(|c| c.pass),
        }
    }

    /// The report with what `plan` decided (no result yet).
    pub fn with_plan(mut self, plan: &Plan) -> Report {
        self.summary = Some(plan.summary.clone());
        self.pools = plan
            .pools
            .iter()
            .map(|m| PoolReport {
                capacity_type: m.pool.capacity_type.to_string(),
                instance_type: m.pool.instance_type.clone(),
                zone: m.pool.zone.clone(),
                unavailable_until: m.unavailable_until,
            })
            .collect();
        self.actions = plan
            .actions
            .iter()
            .map(|a| ActionReport {
                instance_id: a.instance_id.clone(),
                node: a.node.clone(),
                action: a.action,
                target: a.target.as_ref().map(Target::to_string),
                deadline: a.deadline,
                reason: a.reason.clone(),
                complete_lifecycle: a
                    .complete_lifecycle
                    .as_ref()
                    .map(|l| format!("{}/{}", l.asg_name, l.hook_name)),
                result: None,
                cordoned_at: None,
                drain: None,
                heartbeat_at: None,
            })
            .collect();
        self
    }

    /// The report marked failed, with why.
    pub fn failed(mut self, reason: String) -> Report {
        self.outcome = Outcome::Failed;
        self.reason = Some(reason);
        self
    }
}

/// Counts of outcomes, for summaries and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub planned: usize,
    pub acted: usize,
    pub ignored: usize,
    pub duplicate: usize,
    pub failed: usize,
}

impl Tally {
    pub fn of(reports: &[Report]) -> Tally {
        let mut t = Tally::default();
        for r in reports {
            *match r.outcome {
                Outcome::Planned => &mut t.planned,
                Outcome::Acted => &mut t.acted,
                Outcome::Ignored => &mut t.ignored,
                Outcome::Duplicate => &mut t.duplicate,
                Outcome::Failed => &mut t.failed,
            } += 1;
        }
        t
    }
}
