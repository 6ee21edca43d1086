//! What became of each record: the reports the pipeline returns, `forewarn replay` prints and
//! the telemetry and webhook read.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::config::Action;
use super::event::EventKind;
use super::inbound::Record;
use super::names::string_forms;
use super::plan::{Plan, Target};
use super::pool::PoolKey;

/// What became of one record. Ordered from the least to the most worth telling (the outcome
/// of a record split between clusters is its parts' greatest: see `app::fleet::split`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Outcome {
    /// Nothing to do: unsupported, or a state not acted on.
    Ignored,
    /// Applied before: nothing changed.
    Duplicate,
    /// Not worked on in this invocation: a message of a cluster busy here, sent back
    /// to the queue in the cluster's message group (see `app::fleet::triage`).
    Requeued,
    /// Decided (and pools recorded) but nothing done to the cluster: a dry run.
    Planned,
    /// Decided and carried out.
    Acted,
    /// Could not be decoded or carried out: it goes back to the queue (what a report is until
    /// an outcome is set).
    #[default]
    Failed,
}

string_forms!(Outcome, "an outcome");

/// A pool in a report: its key's fields, and until when it is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReport {
    #[serde(flatten)]
    pub pool: PoolKey,
    pub unavailable_until: Option<DateTime<Utc>>,
}

/// A node action in a report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub cordoned_at: Option<DateTime<Utc>>,
    /// What the drain did (`cordon-drain` only).
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
    /// Events recorded on the pods this pass evicted (one per pod).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pod_events: usize,
    /// Pod Events given up: past the pass's budget, the client's rate limit busy, or failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pod_events_given_up: usize,
    /// Placeholders the API server refused (admission, RBAC): their pods were evicted at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub placeholders_refused: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One line of `forewarn replay --output json`, and the handler's log of each record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub event_id: Option<String>,
    pub kind: Option<EventKind>,
    /// The cluster it was handled in, when the deployment names its clusters (an instance of
    /// no served cluster: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
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
    /// Why it was ignored, duplicate or failed; for an event planned or acted on, the pools it
    /// did not record (past [`crate::domain::pool::MAX_POOLS_PER_UPDATE`]), if any.
    pub reason: Option<String>,
    /// Which later pass of the event's drain this is (a continuation); absent for the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<u32>,
    /// The failure will not pass by itself: the same call was refused (access denied, a
    /// request refused as invalid, something missing), so the message comes back slowly (see
    /// [`crate::domain::retry`]). Absent unless true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
    /// A drain's first evictions were about to come: what became of taking its instances off
    /// their cluster's load balancers first (see [`crate::domain::traffic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<String>,
    /// A failed record that would fail the same way, without a request, if it came back before
    /// this time (its cluster left alone, in a deployment serving several): its message comes
    /// back no sooner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_not_before: Option<DateTime<Utc>>,
    /// The served account whose member role could not be assumed, or was refused the lookups
    /// (the record failed, to be retried): what the `AccountUnreachable` metric counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_unreachable: Option<String>,
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
            pass: record.continuation.as_ref().map(|c| c.pass),
            ..Report::default()
        }
    }

    /// The report with what `plan` decided (no result yet); its reason says which pools it
    /// does not record, if any.
    pub fn with_plan(mut self, plan: &Plan) -> Report {
        self.summary = Some(plan.summary.clone());
        self.cluster = plan.cluster.clone();
        self.reason = plan.pools_not_recorded.clone();
        self.pools = plan
            .pools
            .iter()
            .map(|m| PoolReport {
                pool: m.pool.clone(),
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
                ..ActionReport::default()
            })
            .collect();
        self
    }

    /// The report with this outcome, and why.
    pub fn ended(self, outcome: Outcome, reason: impl Into<String>) -> Report {
        Report {
            outcome,
            reason: Some(reason.into()),
            ..self
        }
    }

    /// The report marked failed, with why (a failure that may pass if tried again).
    pub fn failed(self, reason: String) -> Report {
        self.failed_as(reason, true)
    }

    /// The report marked failed, with why; `retryable` false: the same call meets the same
    /// refusal (see [`Report::permanent`]).
    pub fn failed_as(self, reason: String, retryable: bool) -> Report {
        Report {
            permanent: !retryable,
            ..self.ended(Outcome::Failed, reason)
        }
    }
}

/// Counts of outcomes, for summaries and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub planned: usize,
    pub acted: usize,
    pub ignored: usize,
    pub duplicate: usize,
    pub requeued: usize,
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
                Outcome::Requeued => &mut t.requeued,
                Outcome::Failed => &mut t.failed,
            } += 1;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::domain::config::Config;
    use crate::domain::event::{Event, Origin};
    use crate::domain::fixtures::{event, instance, node_facts};
    use crate::domain::fold::validate;
    use crate::domain::plan::{Facts, decide};
    use crate::domain::pool::{CapacityType, MAX_POOLS_PER_UPDATE};

    /// A Health event about `n` instances, each in a pool of its own (instance type `m<i>.large`)
    /// but the last two, which share the first's pool, with each instance's node.
    fn health_of(
        n: usize,
    ) -> (
        Event,
        BTreeMap<String, crate::domain::facts::InstanceFacts>,
        Vec<crate::domain::facts::NodeFacts>,
    ) {
        let ids: Vec<String> = (0..n).map(|i| format!("i-0a1b2c3d4e5f{i:05x}")).collect();
        let mut e = event(EventKind::ScheduledChange, "h-many", &ids[0]).build();
        e.instance_ids = ids.clone();
        let instances = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let pool = if i + 2 >= n { 0 } else { i };
                let facts = instance(id)
                    .typed(&format!("m{pool}.large"), "us-east-1a")
                    .capacity(CapacityType::OnDemand)
                    .build();
                (id.clone(), facts)
            })
            .collect();
        let nodes = ids
            .iter()
            .map(|id| node_facts(&format!("n-{id}"), id))
            .collect();
        (e, instances, nodes)
    }

    #[test]
    fn an_event_of_more_pools_than_one_update_records_keeps_every_node_action() {
        let (e, instances, nodes) = health_of(62);
        let facts = Facts::new(&instances, &nodes);
        let plan = decide(&e, facts, &Config::default());
        // Every instance gets its node action.
        assert_eq!(plan.actions.len(), 62);
        assert!(plan.actions.iter().all(|a| a.action == Action::CordonDrain));
        // The first 49 pools in event order are recorded; 60 pools in all, 11 left out.
        assert_eq!(plan.pools.len(), MAX_POOLS_PER_UPDATE);
        let recorded: Vec<String> = plan
            .pools
            .iter()
            .map(|m| m.pool.instance_type.clone())
            .collect();
        let expected: Vec<String> = (0..49).map(|i| format!("m{i}.large")).collect();
        assert_eq!(recorded, expected);
        let why = plan.pools_not_recorded.as_deref().expect("a reason");
        assert!(
            why.starts_with(
                "11 of the event's 60 pools not recorded: one event records at most 49"
            ),
            "{why}"
        );
        assert!(
            why.contains("on-demand#m49.large#us-east-1a")
                && why.contains("on-demand#m59.large#us-east-1a"),
            "{why}"
        );
        assert!(!why.contains("m48.large"), "{why}");
        // The store is never given more than it takes.
        assert_eq!(validate(&plan), Ok(()));
        // The report says so.
        let record = Record::new(Origin::bare("h.json"), Ok(e.clone()));
        let report = Report::new(&record).with_plan(&plan);
        assert_eq!(report.reason.as_deref(), Some(why));
        assert_eq!(report.pools.len(), MAX_POOLS_PER_UPDATE);
        // The plan travels in continuations as JSON; one without the field still reads.
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(serde_json::from_value::<Plan>(json.clone()).unwrap(), plan);
        let mut old = json;
        old.as_object_mut().unwrap().remove("pools_not_recorded");
        let old: Plan = serde_json::from_value(old).unwrap();
        assert_eq!(old.pools_not_recorded, None);
    }

    #[test]
    fn up_to_the_limit_every_pool_is_recorded_without_a_note() {
        // 51 instances, 49 pools (the last two share the first's).
        let (e, instances, nodes) = health_of(51);
        let plan = decide(&e, Facts::new(&instances, &nodes), &Config::default());
        assert_eq!(plan.pools.len(), 49);
        assert_eq!(plan.pools_not_recorded, None);
        let serialized = serde_json::to_value(&plan).unwrap();
        assert!(serialized.get("pools_not_recorded").is_none());
        let record = Record::new(Origin::bare("h.json"), Ok(e));
        assert_eq!(Report::new(&record).with_plan(&plan).reason, None);
        // One mark more is refused by every store.
        let mut update = plan.clone();
        let mut extra = update.pools[0].clone();
        extra.pool.instance_type = "x1.large".into();
        update.pools.push(extra);
        let err = validate(&update).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it marks 50 pools, and one update records at most 49"
        );
    }
}
