//! The pipeline: decoded records → facts (one lookup per batch) → plans → actions and pool
//! updates → one report per record.
//!
//! Order matters for at-least-once delivery: node actions run before the pool update that also
//! records the event id, so an event whose actions failed is not marked applied and comes back.

use std::collections::{BTreeSet, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{Action, Config};
use crate::event::{Event, EventKind, Record};
use crate::facts::InstanceFacts;
use crate::plan::{Facts, Plan, Target, plan};
use crate::pool::{Applied, PoolStore};
use crate::ports::{InstanceDirectory, NodeDirectory};

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
}

impl Report {
    fn new(record: &Record) -> Report {
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
        }
    }

    fn with_plan(mut self, plan: &Plan) -> Report {
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
                target: a.target.as_ref().map(Target::describe),
                deadline: a.deadline,
                reason: a.reason.clone(),
                complete_lifecycle: a
                    .complete_lifecycle
                    .as_ref()
                    .map(|l| format!("{}/{}", l.asg_name, l.hook_name)),
                result: None,
            })
            .collect();
        self
    }

    fn failed(mut self, reason: String) -> Report {
        self.outcome = Outcome::Failed;
        self.reason = Some(reason);
        self
    }
}

/// The result of carrying out one node action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionResult {
    pub instance_id: String,
    /// What was done, for people (`cordoned`, `evicted 3 pods`, `deleted nodeclaim/x`).
    pub detail: String,
}

/// An action that could not be carried out; the event goes back to the queue.
#[derive(Debug, thiserror::Error)]
#[error("{instance_id}: {message}")]
pub struct ExecuteError {
    pub instance_id: String,
    pub message: String,
}

/// Carries out a plan's node actions (the Kubernetes API, the ASG lifecycle action).
#[async_trait]
pub trait Executor: Send + Sync {
    /// Carries out every action of `plan`, idempotently. An `Err` means the event must be
    /// retried (nothing is recorded as applied).
    async fn execute(&self, plan: &Plan) -> Result<Vec<ActionResult>, ExecuteError>;
}

/// Wiring for one run of the pipeline.
pub struct Pipeline<'a> {
    pub config: &'a Config,
    pub store: &'a dyn PoolStore,
    pub instances: &'a dyn InstanceDirectory,
    pub nodes: &'a dyn NodeDirectory,
    /// `None`: plan only (dry run) — pools are still recorded in the store.
    pub executor: Option<&'a dyn Executor>,
}

impl Pipeline<'_> {
    /// Processes a batch of records: one instance lookup, one node lookup and one ledger read for
    /// the whole batch, then each event in order. Returns one report per record, in order.
    pub async fn process(&self, records: &[Record], now: DateTime<Utc>) -> Vec<Report> {
        let events: Vec<&Event> = records
            .iter()
            .filter_map(|r| r.event.as_ref().ok())
            .collect();
        let wanted: Vec<&Event> = events
            .iter()
            .copied()
            .filter(|e| e.kind != EventKind::Unsupported)
            .collect();
        let ids: Vec<String> = wanted
            .iter()
            .flat_map(|e| e.instance_ids.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let event_ids: Vec<String> = wanted
            .iter()
            .map(|e| e.id.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();

        let lookups = async {
            if wanted.is_empty() {
                return Ok((Default::default(), Vec::new(), HashSet::new()));
            }
            let instances = if ids.is_empty() {
                Default::default()
            } else {
                self.instances
                    .describe(&ids)
                    .await
                    .map_err(|e| e.to_string())?
            };
            let known: Vec<InstanceFacts> = instances.values().cloned().collect();
            let nodes = self.nodes.nodes(&known).await.map_err(|e| e.to_string())?;
            let applied = self
                .store
                .applied(&event_ids)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((instances, nodes, applied))
        };
        let (instances, nodes, mut applied) = match lookups.await {
            Ok(found) => found,
            Err(message) => {
                return records
                    .iter()
                    .map(|r| match &r.event {
                        Err(e) => Report::new(r).failed(e.to_string()),
                        Ok(e) if e.kind == EventKind::Unsupported => ignored(r, e, self.config),
                        Ok(_) => Report::new(r).failed(message.clone()),
                    })
                    .collect();
            }
        };
        let facts = Facts {
            instances: &instances,
            nodes: &nodes,
        };

        let mut reports = Vec::with_capacity(records.len());
        for record in records {
            let event = match &record.event {
                Err(e) => {
                    reports.push(Report::new(record).failed(e.to_string()));
                    continue;
                }
                Ok(event) => event,
            };
            reports.push(self.handle(record, event, facts, &mut applied, now).await);
        }
        reports
    }

    async fn handle(
        &self,
        record: &Record,
        event: &Event,
        facts: Facts<'_>,
        applied: &mut HashSet<String>,
        now: DateTime<Utc>,
    ) -> Report {
        let plan = plan(event, facts, self.config);
        let mut report = Report::new(record).with_plan(&plan);
        if let Some(why) = &plan.ignored {
            report.outcome = Outcome::Ignored;
            report.reason = Some(why.clone());
            return report;
        }
        if applied.contains(&event.id) {
            report.outcome = Outcome::Duplicate;
            report.reason = Some("event id already applied".into());
            return report;
        }
        let mut outcome = Outcome::Planned;
        if let Some(executor) = self.executor.filter(|_| plan.has_node_work()) {
            match executor.execute(&plan).await {
                Ok(results) => {
                    for result in results {
                        if let Some(a) = report
                            .actions
                            .iter_mut()
                            .find(|a| a.instance_id == result.instance_id)
                        {
                            a.result = Some(result.detail);
                        }
                    }
                    outcome = Outcome::Acted;
                }
                Err(e) => return report.failed(e.to_string()),
            }
        } else if self.executor.is_some() {
            outcome = Outcome::Acted;
        }
        match self.store.apply(&plan.pool_update(now)).await {
            Ok(Applied::Applied) => {
                applied.insert(event.id.clone());
                report.outcome = outcome;
            }
            Ok(Applied::Duplicate) => {
                applied.insert(event.id.clone());
                report.outcome = Outcome::Duplicate;
                report.reason = Some("event id already applied".into());
            }
            Err(e) => return report.failed(e.to_string()),
        }
        report
    }
}

fn ignored(record: &Record, event: &Event, config: &Config) -> Report {
    let empty = Default::default();
    let plan = plan(
        event,
        Facts {
            instances: &empty,
            nodes: &[],
        },
        config,
    );
    let mut report = Report::new(record).with_plan(&plan);
    report.outcome = Outcome::Ignored;
    report.reason = plan.ignored;
    report
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
