//! The pipeline: decoded records → facts (one lookup per batch) → plans → actions and pool
//! updates → one report per record.
//!
//! Order matters for at-least-once delivery: node actions run before the pool update that also
//! records the event id, so an event whose actions failed is not marked applied and comes back;
//! and a drain's continuation is queued before that update, so an event is never recorded with
//! the rest of its drain dropped.
//!
//! Cordons first: before any event's work, one pass over the batch cordons and taints every node
//! its events will act on ([`Executor::cordon`]); evictions start only after it.
//!
//! Drains that do not block: with a [`Continue`], an event's first pass cordons and taints the
//! node and returns; the drain is carried on by later deliveries (see
//! [`crate::domain::continuation`]). Without one (a replay), the drain waits, as one whole pass.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use tracing::Instrument;

use chrono::{DateTime, Utc};

use crate::domain::config::{Config, Mode};
use crate::domain::continuation::Continuation;
use crate::domain::event::{Event, EventKind};
use crate::domain::facts::InstanceFacts;
use crate::domain::inbound::Record;
use crate::domain::plan::{Facts, decide};
use crate::domain::pool::Applied;
use crate::domain::report::{Outcome, Report};
use crate::ports::{
    ActionResult, Continuer, Executor, InstanceDirectory, NodeDirectory, Pass, PoolStore,
};

/// Wiring for one run of the pipeline.
pub struct Pipeline<'a> {
    pub config: &'a Config,
    /// What the run may change. In [`Mode::Plan`] the executor is never called; in
    /// [`Mode::DryRun`] it is (it only reads), and events are `planned` either way. The store is
    /// written as it is given (the wiring hands a read-only one to a dry run).
    pub mode: Mode,
    pub store: &'a dyn PoolStore,
    pub instances: &'a dyn InstanceDirectory,
    pub nodes: &'a dyn NodeDirectory,
    /// `None`: no live cluster — plans are made and pools recorded, nothing is acted on.
    pub executor: Option<&'a dyn Executor>,
    /// Where drains are continued; `None`: every drain waits in its one pass.
    pub continuer: Option<Continue<'a>>,
}

/// How drains are continued.
#[derive(Clone, Copy)]
pub struct Continue<'a> {
    pub continuer: &'a dyn Continuer,
    /// The delay between two passes.
    pub after: std::time::Duration,
    /// The least time between two heartbeats of a lifecycle action.
    pub heartbeat_every: chrono::Duration,
}

impl Pipeline<'_> {
    /// Processes a batch of records with the default [`Limits`]; see [`Pipeline::process_with`].
    pub async fn process(&self, records: &[Record], now: DateTime<Utc>) -> Vec<Report> {
        self.process_with(records, now, Limits::default()).await
    }

    /// Processes a batch of records: one instance lookup, one node lookup and one ledger read for
    /// the whole batch, then the events — concurrently up to `limits.concurrency`, except that
    /// events sharing an instance run one after the other in event-time order. A record whose
    /// event id already came earlier in the batch is a duplicate of it. Work not finished by
    /// `limits.deadline` is reported failed (it goes back to the queue; every action is
    /// idempotent, so a half-done event is simply done again). Returns one report per record,
    /// in order.
    pub async fn process_with(
        &self,
        records: &[Record],
        now: DateTime<Utc>,
        limits: Limits,
    ) -> Vec<Report> {
        // Transient failures are retried inside the batch while its time allows.
        crate::ports::within_deadline(limits.deadline, self.process_in(records, now, limits)).await
    }

    async fn process_in(
        &self,
        records: &[Record],
        now: DateTime<Utc>,
        limits: Limits,
    ) -> Vec<Report> {
        let looked_up = match limits.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, self.look_up(records))
                .await
                .unwrap_or_else(|_| Err(OUT_OF_TIME.to_string())),
            None => self.look_up(records).await,
        };
        let (instances, nodes, applied) = match looked_up {
            Ok(found) => found,
            Err(message) => return self.none_looked_up(records, &message),
        };
        let facts = Facts {
            instances: &instances,
            nodes: &nodes,
        };
        let (lanes, repeats) = schedule(records);
        let cordoned = match limits.deadline {
            Some(deadline) => tokio::time::timeout_at(
                deadline,
                self.cordon_first(records, &lanes, facts, &applied),
            )
            .await
            .unwrap_or_default(),
            None => self.cordon_first(records, &lanes, facts, &applied).await,
        };
        // New events first (their cordons), then the drain passes of earlier ones (evictions).
        let (new, later) = by_phase(records, lanes);
        let mut done = self
            .run(records, new, facts, &applied, &cordoned, now, limits)
            .await;
        done.extend(
            self.run(records, later, facts, &applied, &cordoned, now, limits)
                .await,
        );
        let mut reports: Vec<Option<Report>> = vec![None; records.len()];
        for (i, report) in done {
            reports[i] = Some(report);
        }
        follow_firsts(records, &mut reports, repeats);
        records
            .iter()
            .zip(reports)
            .map(|(record, report)| {
                report.unwrap_or_else(|| match &record.event {
                    Err(e) => Report::new(record).failed(e.to_string()),
                    Ok(_) => Report::new(record).failed("internal: record not processed".into()),
                })
            })
            .collect()
    }

    /// The batch's lookups: one instance lookup, one node lookup and one ledger read for every
    /// supported event of `records`.
    async fn look_up(&self, records: &[Record]) -> Result<LookedUp, String> {
        // A drain's later passes carry their plan: nothing to look up for them.
        let wanted: Vec<&Event> = records
            .iter()
            .filter(|r| r.continuation.is_none())
            .filter_map(|r| r.event.as_ref().ok())
            .filter(|e| e.kind != EventKind::Unsupported)
            .collect();
        if wanted.is_empty() {
            return Ok((Default::default(), Vec::new(), HashSet::new()));
        }
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
        Ok((instances, nodes, applied))
    }

    /// The reports of a batch whose lookups failed: every supported event failed with
    /// `message` (it comes back), undecodable records failed, unsupported ones ignored.
    fn none_looked_up(&self, records: &[Record], message: &str) -> Vec<Report> {
        records
            .iter()
            .map(|r| match &r.event {
                Err(e) => Report::new(r).failed(e.to_string()),
                Ok(e) if e.kind == EventKind::Unsupported => ignored(r, e, self.config),
                Ok(_) => Report::new(r).failed(message.to_string()),
            })
            .collect()
    }

    /// The batch's cordon pass: every node the batch's new events act on is cordoned and
    /// tainted, all at once, before any eviction. Best effort: a failure here is met again (and
    /// reported) in the event's own pass. Returns the results by record index.
    async fn cordon_first(
        &self,
        records: &[Record],
        lanes: &[Vec<usize>],
        facts: Facts<'_>,
        applied: &HashSet<String>,
    ) -> HashMap<usize, Vec<ActionResult>> {
        let Some(executor) = self.executor.filter(|_| self.mode.runs_actions()) else {
            return HashMap::new();
        };
        let plans: Vec<(usize, crate::domain::plan::Plan)> = lanes
            .iter()
            .flatten()
            .filter_map(|&i| {
                let record = &records[i];
                let event = record.event.as_ref().ok()?;
                let cordon_pass_of_its_own = self.continuer.is_some()
                    && self.mode.writes_cluster()
                    && record.queue_arn.is_some()
                    && record.body.is_some();
                if record.continuation.is_some()
                    || applied.contains(&event.id)
                    || cordon_pass_of_its_own
                {
                    return None;
                }
                let plan = decide(event, facts, self.config);
                (plan.ignored.is_none() && plan.has_node_work()).then_some((i, plan))
            })
            .collect();
        if plans.is_empty() {
            return HashMap::new();
        }
        let width = plans.len();
        futures::stream::iter(plans)
            .map(|(i, plan)| async move {
                match executor.cordon(&plan).await {
                    Ok(results) => Some((i, results)),
                    Err(e) => {
                        tracing::warn!(event_id = %plan.event_id, error = %e, "cordon pass failed; the event's own pass tries again");
                        None
                    }
                }
            })
            .buffer_unordered(width)
            .filter_map(|x| async move { x })
            .collect()
            .await
    }

    /// Runs the lanes concurrently (up to `limits.concurrency`), each lane's events one after
    /// the other, each event within the deadline.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        records: &[Record],
        lanes: Vec<Vec<usize>>,
        facts: Facts<'_>,
        applied: &HashSet<String>,
        cordoned: &HashMap<usize, Vec<ActionResult>>,
        now: DateTime<Utc>,
        limits: Limits,
    ) -> Vec<(usize, Report)> {
        futures::stream::iter(lanes)
            .map(|lane| async move {
                let mut out = Vec::with_capacity(lane.len());
                for i in lane {
                    let record = &records[i];
                    let Ok(event) = &record.event else { continue };
                    let work = self
                        .handle(record, event, facts, applied, cordoned.get(&i), now)
                        .instrument(event_span(event));
                    let report = match limits.deadline {
                        Some(deadline) if tokio::time::Instant::now() >= deadline => {
                            Report::new(record).failed(format!("not started: {OUT_OF_TIME}"))
                        }
                        Some(deadline) => tokio::time::timeout_at(deadline, work)
                            .await
                            .unwrap_or_else(|_| {
                                Report::new(record).failed(format!("not finished: {OUT_OF_TIME}"))
                            }),
                        None => work.await,
                    };
                    out.push((i, report));
                }
                out
            })
            .buffer_unordered(limits.concurrency.max(1))
            .flat_map(futures::stream::iter)
            .collect()
            .await
    }

    async fn handle(
        &self,
        record: &Record,
        event: &Event,
        facts: Facts<'_>,
        applied: &HashSet<String>,
        cordoned: Option<&Vec<ActionResult>>,
        now: DateTime<Utc>,
    ) -> Report {
        let plan = match &record.continuation {
            Some(c) => match self.verified_plan(record, event, c, now).await {
                Ok(plan) => plan,
                Err(report) => return report,
            },
            None => decide(event, facts, self.config),
        };
        let span = tracing::Span::current();
        let nodes: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| a.node.as_deref())
            .collect();
        span.record("node", nodes.join(","));
        let pools: Vec<String> = plan.pools.iter().map(|m| m.pool.to_string()).collect();
        span.record("pool", pools.join(","));
        tracing::debug!(summary = %plan.summary, "planned");
        let mut report = Report::new(record).with_plan(&plan);
        if let Some(why) = &plan.ignored {
            report.outcome = Outcome::Ignored;
            report.reason = Some(why.clone());
            return report;
        }
        if let Some(continuation) = &record.continuation {
            return self
                .continue_drain(record, &plan, continuation, report)
                .await;
        }
        if applied.contains(&event.id) {
            report.outcome = Outcome::Duplicate;
            report.reason = Some("event id already applied".into());
            return report;
        }
        let mut outcome = Outcome::Planned;
        let executor = self.executor.filter(|_| self.mode.runs_actions());
        if let Some(executor) = executor.filter(|_| plan.has_node_work()) {
            // Only a record from a queue can be continued (a replay's drain waits).
            let from_queue = record.queue_arn.is_some() && record.body.is_some();
            let pass = match self.continuer {
                Some(_) if from_queue && self.mode.writes_cluster() => Pass::Cordon,
                _ => Pass::Whole,
            };
            match executor.execute(&plan, pass).await {
                Ok(results) => {
                    let pending = merge(&mut report, &results, cordoned);
                    if let Some(why) = refusals(&results) {
                        // Beside what the plan already says (pools left unrecorded).
                        report.reason = Some(match report.reason.take() {
                            Some(note) => format!("{why}; {note}"),
                            None => why,
                        });
                    }
                    if let (true, Some(c)) = (pending, &self.continuer) {
                        // The drain's first pass follows at once (behind the warnings already
                        // queued: their cordons come first).
                        let next = Continuation::first(now, event.time, plan.clone());
                        let after = std::time::Duration::ZERO;
                        if let Err(e) = self.send(c, record, &next, after).await {
                            return report.failed(e);
                        }
                    }
                    if self.mode.writes_cluster() {
                        outcome = Outcome::Acted;
                    }
                }
                Err(e) => return report.failed(e.to_string()),
            }
        } else if executor.is_some() && self.mode.writes_cluster() {
            outcome = Outcome::Acted;
        }
        match self.store.apply(&plan.pool_update(now)).await {
            Ok(Applied::Applied) => report.outcome = outcome,
            Ok(Applied::Duplicate) => {
                report.outcome = Outcome::Duplicate;
                report.reason = Some(if plan.also_keys.is_empty() {
                    "event id already applied".into()
                } else {
                    "already applied: this event id, or the same interruption of this run of \
                     the instance under another id (a repeated warning, or the sweeper's finding)"
                        .into()
                });
            }
            Err(e) => return report.failed(e.to_string()),
        }
        report
    }
}

impl Pipeline<'_> {
    /// The plan a continuation carries, once it is shown to be forewarn's own and still this
    /// event's: signed with the store's continuation key, its plan's event id and instances the
    /// event's, and its chain not past the drain's deadline by more than a pass interval. A
    /// continuation that fails any of these is refused (ignored, with the reason in its report
    /// and a log line); one whose key cannot be read fails (it comes back).
    async fn verified_plan(
        &self,
        record: &Record,
        event: &Event,
        continuation: &Continuation,
        now: DateTime<Utc>,
    ) -> Result<crate::domain::plan::Plan, Report> {
        let refuse = |why: String| {
            tracing::warn!(origin = %record.origin, %why, "refusing a continuation");
            let mut report = Report::new(record);
            report.outcome = Outcome::Ignored;
            report.reason = Some(format!("refused: {why}"));
            report
        };
        let body = record.body.as_deref().unwrap_or_default();
        let key = self.store.continuation_key().await.map_err(|e| {
            Report::new(record).failed(format!("reading the continuation key: {e}"))
        })?;
        continuation
            .verify(&key, body)
            .map_err(|e| refuse(e.to_string()))?;
        let plan = continuation.plan.clone();
        if plan.event_id != event.id {
            return Err(refuse(format!(
                "the plan is event {}'s, not this event's ({})",
                plan.event_id, event.id
            )));
        }
        if let Some(other) = plan
            .actions
            .iter()
            .map(|a| &a.instance_id)
            .chain(&plan.instance_ids)
            .find(|id| !event.instance_ids.contains(id))
        {
            return Err(refuse(format!(
                "the plan names instance {other}, which the event does not"
            )));
        }
        let deadline = crate::domain::plan::earliest_deadline(&plan)
            .unwrap_or(continuation.started_at + self.config.drain_timeout);
        let grace = self
            .continuer
            .map(|c| c.after)
            .and_then(|after| chrono::Duration::from_std(after).ok())
            .unwrap_or_default();
        if now > deadline + grace {
            let why = format!(
                "the drain's deadline {} is past by more than a pass interval: the chain ends",
                deadline.to_rfc3339()
            );
            if !plan.actions.iter().any(|a| a.complete_lifecycle.is_some()) {
                return Err(refuse(why));
            }
            // The drain is over whatever happens now, so what waits on it is let go: no node is
            // touched, and the lifecycle action is completed (left alone, it would hold the
            // instance until the hook's timeout; a stale copy of a completed one is answered
            // "already completed").
            tracing::warn!(origin = %record.origin, %why, "ending a late continuation; completing its lifecycle action");
            let mut plan = plan;
            for a in &mut plan.actions {
                a.action = crate::domain::config::Action::None;
                a.reason = format!("refused: {why}; its lifecycle action is completed");
            }
            return Ok(plan);
        }
        Ok(plan)
    }

    /// A later pass of a drain: the event was recorded by its first pass, so the ledger is not
    /// asked and the pools are not written again; the node's actions run for [`Pass::Drain`]
    /// (the executor verifies the node live before anything), and while the drain is pending
    /// the next continuation is queued.
    async fn continue_drain(
        &self,
        record: &Record,
        plan: &crate::domain::plan::Plan,
        continuation: &Continuation,
        mut report: Report,
    ) -> Report {
        let executor = self.executor.filter(|_| self.mode.writes_cluster());
        let (Some(executor), Some(c)) = (executor, &self.continuer) else {
            report.outcome = Outcome::Ignored;
            report.reason =
                Some("a drain's continuation, and this run does not act on a cluster".to_string());
            return report;
        };
        let heartbeat = match (&continuation.heartbeat_at, c.heartbeat_every) {
            (Some(at), every) => Utc::now() - *at >= every,
            (None, _) => true,
        };
        let pass = Pass::Drain {
            started_at: continuation.started_at,
            announce: continuation.pass == 1,
            heartbeat,
        };
        if plan.has_node_work() {
            match executor.execute(plan, pass).await {
                Ok(results) => {
                    if let Some(why) = refusals(&results) {
                        report.reason = Some(why);
                        if results.iter().all(|r| r.refused.is_some()) {
                            merge(&mut report, &results, None);
                            report.outcome = Outcome::Ignored;
                            return report;
                        }
                    }
                    if merge(&mut report, &results, None) {
                        let next = continuation.next(heartbeat_of(&report));
                        let after = next_pass_after(&results, c.after, Utc::now());
                        if let Err(e) = self.send(c, record, &next, after).await {
                            return report.failed(e);
                        }
                    }
                }
                Err(e) => return report.failed(e.to_string()),
            }
        }
        report.outcome = Outcome::Acted;
        report
    }

    /// Queues `next` on the record's queue, to come back after `after`.
    async fn send(
        &self,
        c: &Continue<'_>,
        record: &Record,
        next: &Continuation,
        after: std::time::Duration,
    ) -> Result<(), String> {
        let (Some(queue), Some(body)) = (&record.queue_arn, &record.body) else {
            return Err("the drain must continue, but the record came from no queue".into());
        };
        let key = self
            .store
            .continuation_key()
            .await
            .map_err(|e| format!("reading the continuation key: {e}"))?;
        c.continuer
            .continue_later(queue, &next.body(&key, body), after)
            .await
            .map_err(|e| format!("queueing the drain's continuation: {e}"))
    }
}

/// When the next pass of a drain is due: after `interval` while something can be done (an
/// eviction refused or just sent, a critical pod not yet due); when the drain only waits for
/// terminating pods, when the last of them is due to be gone (and not sooner than `interval`);
/// at most SQS's longest delay, 900 s.
fn next_pass_after(
    results: &[ActionResult],
    interval: std::time::Duration,
    now: DateTime<Utc>,
) -> std::time::Duration {
    let pending: Vec<&ActionResult> = results.iter().filter(|r| r.pending).collect();
    let wait = match pending
        .iter()
        .map(|r| r.wait_until)
        .collect::<Option<Vec<_>>>()
    {
        Some(untils) => untils
            .into_iter()
            .min()
            .and_then(|t| (t - now).to_std().ok())
            .unwrap_or_default(),
        None => std::time::Duration::ZERO,
    };
    wait.max(interval).min(std::time::Duration::from_secs(900))
}

/// Puts the executor's `results` (and the cordon pass's time) in `report`; true when a drain is
/// pending.
fn merge(
    report: &mut Report,
    results: &[ActionResult],
    cordoned: Option<&Vec<ActionResult>>,
) -> bool {
    let mut pending = false;
    for result in results.iter().cloned() {
        pending |= result.pending;
        if let Some(a) = report
            .actions
            .iter_mut()
            .find(|a| a.instance_id == result.instance_id)
        {
            let first = cordoned
                .and_then(|c| c.iter().find(|c| c.instance_id == result.instance_id))
                .and_then(|c| c.cordoned_at);
            a.result = Some(result.detail);
            a.cordoned_at = first.or(result.cordoned_at);
            a.drain = result.drain;
            a.heartbeat_at = result.heartbeat_at;
        }
    }
    pending
}

/// The executor's refusals among `results` (its live verification), as one reason.
fn refusals(results: &[ActionResult]) -> Option<String> {
    let whys: Vec<&str> = results
        .iter()
        .filter_map(|r| r.refused.as_deref())
        .collect();
    (!whys.is_empty()).then(|| format!("refused: {}", whys.join("; ")))
}

/// The latest heartbeat of a report's actions.
fn heartbeat_of(report: &Report) -> Option<DateTime<Utc>> {
    report.actions.iter().filter_map(|a| a.heartbeat_at).max()
}

/// What the batch's lookups found: instance facts, candidate nodes, event ids applied before.
type LookedUp = (
    BTreeMap<String, InstanceFacts>,
    Vec<crate::domain::facts::NodeFacts>,
    HashSet<String>,
);

/// The first record of each event id does the work, in lanes of events that share an
/// instance; later records of an id are `(record, first record)` repeats.
fn schedule(records: &[Record]) -> (Vec<Vec<usize>>, Vec<(usize, usize)>) {
    // A drain's pass is a repeat only of the same message (a duplicated continuation: the same
    // pass with the same signature), never of the event's first delivery, of another pass, or of
    // a message that only claims to be the same pass (a forged one must not make the genuine one
    // a repeat of its refusal).
    type Key<'r> = (&'r str, Option<(u32, Option<&'r str>)>);
    let mut first_of: HashMap<Key<'_>, usize> = HashMap::new();
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    let mut lanes = Lanes::default();
    for (i, record) in records.iter().enumerate() {
        if let Ok(event) = &record.event {
            let key = (
                event.id.as_str(),
                record
                    .continuation
                    .as_ref()
                    .map(|c| (c.pass, c.mac.as_deref())),
            );
            match first_of.get(&key) {
                Some(&first) => repeats.push((i, first)),
                None => {
                    first_of.insert(key, i);
                    lanes.add(i, &event.instance_ids);
                }
            }
        }
    }
    (lanes.into_lanes(records), repeats)
}

/// The lanes split in two phases: new events, then continuations (a lane keeps its order in
/// each).
fn by_phase(records: &[Record], lanes: Vec<Vec<usize>>) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut new = Vec::new();
    let mut later = Vec::new();
    for lane in lanes {
        let (c, n): (Vec<usize>, Vec<usize>) = lane
            .into_iter()
            .partition(|&i| records[i].continuation.is_some());
        if !n.is_empty() {
            new.push(n);
        }
        if !c.is_empty() {
            later.push(c);
        }
    }
    (new, later)
}

/// A repeated event id follows its first record: failed when it failed, else a duplicate of it
/// (an ignored event stays ignored).
fn follow_firsts(records: &[Record], reports: &mut [Option<Report>], repeats: Vec<(usize, usize)>) {
    for (i, first) in repeats {
        let first_report = reports[first].clone();
        let record = &records[i];
        let report = match first_report {
            Some(f) if f.outcome == Outcome::Failed => {
                Report::new(record).failed(format!("same event id as {}, which failed", f.origin))
            }
            Some(f) => {
                let mut r = f.clone();
                r.origin = record.origin.to_string();
                r.message_id = record.origin.message_id.clone();
                if f.outcome != Outcome::Ignored {
                    r.outcome = Outcome::Duplicate;
                    r.reason = Some(format!("same event id as {}", f.origin));
                }
                r
            }
            None => Report::new(record).failed("internal: first record not processed".into()),
        };
        reports[i] = Some(report);
    }
}

/// The span every log line of one event's work carries (the executor's lines among them).
fn event_span(event: &Event) -> tracing::Span {
    tracing::info_span!(
        "event",
        event_id = %event.id,
        kind = event.kind.as_str(),
        instance = %event.instance_ids.join(","),
        node = tracing::field::Empty,
        pool = tracing::field::Empty,
    )
}

const OUT_OF_TIME: &str = "the time left for this batch ran out; the event goes back to the queue";

/// How a batch is processed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Events (of distinct instances) handled at once.
    pub concurrency: usize,
    /// When the batch must be over (a Lambda's deadline minus a margin).
    pub deadline: Option<tokio::time::Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrency: 8,
            deadline: None,
        }
    }
}

/// Groups record indexes so that events sharing an instance land in one lane.
#[derive(Default)]
struct Lanes {
    /// Union-find parent of each member index.
    parent: HashMap<usize, usize>,
    owner_of_instance: HashMap<String, usize>,
    order: Vec<usize>,
}

impl Lanes {
    fn find(&mut self, i: usize) -> usize {
        let p = self.parent[&i];
        if p == i {
            return i;
        }
        let root = self.find(p);
        self.parent.insert(i, root);
        root
    }

    fn add(&mut self, i: usize, instance_ids: &[String]) {
        self.parent.insert(i, i);
        self.order.push(i);
        for id in instance_ids {
            match self.owner_of_instance.get(id).copied() {
                Some(other) => {
                    let (a, b) = (self.find(other), self.find(i));
                    if a != b {
                        self.parent.insert(b, a);
                    }
                }
                None => {
                    self.owner_of_instance.insert(id.clone(), i);
                }
            }
        }
    }

    /// The lanes, each in event-time order (record order among equal times).
    fn into_lanes(mut self, records: &[Record]) -> Vec<Vec<usize>> {
        let mut lanes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in self.order.clone() {
            let root = self.find(i);
            lanes.entry(root).or_default().push(i);
        }
        lanes
            .into_values()
            .map(|mut lane| {
                lane.sort_by_key(|&i| (records[i].event.as_ref().map(|e| e.time).ok(), i));
                lane
            })
            .collect()
    }
}

fn ignored(record: &Record, event: &Event, config: &Config) -> Report {
    let empty = Default::default();
    let plan = decide(
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration as StdDuration;

    use serde_json::json;

    use super::*;
    use crate::adapters::embedded::EmbeddedStore;
    use crate::adapters::snapshot::SnapshotInstances;
    use crate::domain::facts::{InstanceFacts, NodeFacts};
    use crate::domain::fixtures::{event_json, spot_json as spot};
    use crate::domain::inbound::decode_value;
    use crate::domain::plan::Plan;
    use crate::domain::pool::CapacityType;
    use crate::ports::DirectoryError;
    use crate::ports::{ActionResult, ExecuteError};
    use async_trait::async_trait;

    const A: &str = "i-0a1b2c3d4e5f60001";
    const B: &str = "i-0a1b2c3d4e5f60002";

    fn world() -> (SnapshotInstances, crate::adapters::snapshot::ClusterState) {
        let mut instances = BTreeMap::new();
        let mut nodes = Vec::new();
        for id in [A, B] {
            instances.insert(
                id.to_string(),
                InstanceFacts {
                    instance_id: id.into(),
                    instance_type: Some("m5.large".into()),
                    zone: Some("us-east-1a".into()),
                    capacity_type: Some(CapacityType::Spot),
                    ..InstanceFacts::default()
                },
            );
            nodes.push(NodeFacts {
                name: format!("node-{id}"),
                provider_id: Some(format!("aws:///us-east-1a/{id}")),
                ..NodeFacts::default()
            });
        }
        (
            SnapshotInstances(instances),
            crate::adapters::snapshot::ClusterState {
                nodes,
                pods: vec![],
            },
        )
    }

    /// Records the order of calls; fails or sleeps for chosen event ids.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        plans: Mutex<Vec<Plan>>,
        fail: Vec<String>,
        sleep: Option<StdDuration>,
    }

    #[async_trait]
    impl Executor for Recorder {
        async fn execute(
            &self,
            plan: &Plan,
            _pass: Pass,
        ) -> Result<Vec<ActionResult>, ExecuteError> {
            self.calls.lock().unwrap().push(plan.event_id.clone());
            self.plans.lock().unwrap().push(plan.clone());
            if let Some(d) = self.sleep {
                tokio::time::sleep(d).await;
            }
            if self.fail.contains(&plan.event_id) {
                return Err(ExecuteError {
                    instance_id: plan.instance_ids[0].clone(),
                    message: "API answered 500".into(),
                    kind: crate::ports::FailureKind::Unavailable,
                });
            }
            Ok(vec![ActionResult {
                instance_id: plan.instance_ids[0].clone(),
                detail: "done".into(),
                ..ActionResult::default()
            }])
        }
    }

    fn records(batch: serde_json::Value) -> Vec<Record> {
        decode_value("batch", batch, chrono::Utc::now()).unwrap()
    }

    async fn run(
        store: &EmbeddedStore,
        exec: &Recorder,
        batch: serde_json::Value,
        limits: Limits,
    ) -> Vec<Report> {
        let (instances, nodes) = world();
        let config = Config::default();
        let p = Pipeline {
            continuer: None,
            mode: Mode::Act,
            config: &config,
            store,
            instances: &instances,
            nodes: &nodes,
            executor: Some(exec),
        };
        p.process_with(&records(batch), Utc::now(), limits).await
    }

    #[tokio::test]
    async fn duplicates_in_a_batch_act_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let exec = Recorder::default();
        let batch = json!([
            spot("e1", A, "2026-11-20T10:00:00Z"),
            spot("e1", A, "2026-11-20T10:00:00Z")
        ]);
        let reports = run(&store, &exec, batch.clone(), Limits::default()).await;
        assert_eq!(reports[0].outcome, Outcome::Acted);
        assert_eq!(reports[0].actions[0].result.as_deref(), Some("done"));
        assert_eq!(reports[1].outcome, Outcome::Duplicate);
        assert_eq!(exec.calls.lock().unwrap().len(), 1);
        // and across batches
        let again = run(&store, &exec, batch, Limits::default()).await;
        assert!(again.iter().all(|r| r.outcome == Outcome::Duplicate));
        assert_eq!(exec.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_failed_action_is_not_recorded_and_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let exec = Recorder {
            fail: vec!["e1".into()],
            ..Recorder::default()
        };
        let batch = json!([
            spot("e1", A, "2026-11-20T10:00:00Z"),
            spot("e1", A, "2026-11-20T10:00:00Z"),
            spot("e2", B, "2026-11-20T10:00:00Z")
        ]);
        let reports = run(&store, &exec, batch.clone(), Limits::default()).await;
        assert_eq!(reports[0].outcome, Outcome::Failed);
        assert!(
            reports[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("API answered 500")
        );
        assert_eq!(
            reports[1].outcome,
            Outcome::Failed,
            "its twin must come back too"
        );
        assert_eq!(reports[2].outcome, Outcome::Acted);
        let applied = store.applied(&["e1".into(), "e2".into()]).await.unwrap();
        assert_eq!(applied, HashSet::from(["e2".to_string()]));
        // redelivered after the fault: it is applied now
        let ok = Recorder::default();
        let reports = run(&store, &ok, batch, Limits::default()).await;
        assert_eq!(reports[0].outcome, Outcome::Acted);
        assert_eq!(reports[2].outcome, Outcome::Duplicate);
    }

    #[tokio::test]
    async fn events_of_one_instance_run_in_event_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let exec = Recorder::default();
        let batch = json!([
            spot("late", A, "2026-11-20T10:00:09Z"),
            event_json(
                crate::domain::event::DT_REBALANCE,
                "early",
                A,
                "2026-11-20T10:00:01Z",
                json!({"instance-action": "terminate"})
            ),
        ]);
        let reports = run(&store, &exec, batch, Limits::default()).await;
        assert!(
            reports.iter().all(|r| r.outcome == Outcome::Acted),
            "{reports:#?}"
        );
        assert_eq!(*exec.calls.lock().unwrap(), vec!["early", "late"]);
    }

    #[tokio::test]
    async fn work_past_the_deadline_is_failed_and_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let exec = Recorder {
            sleep: Some(StdDuration::from_millis(300)),
            ..Recorder::default()
        };
        let batch = json!([
            spot("s1", A, "2026-11-20T10:00:00Z"),
            spot("s2", A, "2026-11-20T10:00:01Z")
        ]);
        let limits = Limits {
            concurrency: 4,
            deadline: Some(tokio::time::Instant::now() + StdDuration::from_millis(100)),
        };
        let reports = run(&store, &exec, batch, limits).await;
        assert_eq!(reports[0].outcome, Outcome::Failed);
        assert!(
            reports[0]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("not finished")
        );
        assert_eq!(reports[1].outcome, Outcome::Failed);
        assert!(
            reports[1]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("not started")
        );
        assert!(
            store
                .applied(&["s1".into(), "s2".into()])
                .await
                .unwrap()
                .is_empty()
        );
    }

    struct Broken;

    #[async_trait]
    impl InstanceDirectory for Broken {
        async fn describe(
            &self,
            _ids: &[String],
        ) -> Result<BTreeMap<String, InstanceFacts>, DirectoryError> {
            Err(DirectoryError {
                service: "ec2:DescribeInstances",
                message: "throttled".into(),
                kind: crate::ports::FailureKind::Throttled,
            })
        }
    }

    #[tokio::test]
    async fn a_failed_lookup_fails_the_events_but_not_the_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let (_, nodes) = world();
        let config = Config::default();
        let p = Pipeline {
            continuer: None,
            mode: Mode::Act,
            config: &config,
            store: &store,
            instances: &Broken,
            nodes: &nodes,
            executor: None,
        };
        let batch = json!({"Records": [
            {"messageId": "m1", "body": spot("e1", A, "2026-11-20T10:00:00Z").to_string()},
            {"messageId": "m2", "body": "{\"hello\": 1}"},
            {"messageId": "m3", "body": "nope"},
        ]});
        let reports = p.process(&records(batch), Utc::now()).await;
        let outcomes: Vec<Outcome> = reports.iter().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            vec![Outcome::Failed, Outcome::Ignored, Outcome::Failed]
        );
        assert!(
            reports[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("ec2:DescribeInstances: throttled")
        );
        assert_eq!(reports[0].message_id.as_deref(), Some("m1"));
    }

    /// Queues nothing, counts what it is asked to queue.
    #[derive(Default)]
    struct Queue(Mutex<usize>);

    #[async_trait]
    impl Continuer for Queue {
        async fn continue_later(
            &self,
            _queue_arn: &str,
            _body: &str,
            _delay: std::time::Duration,
        ) -> Result<(), String> {
            *self.0.lock().unwrap() += 1;
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_late_continuation_touches_no_node_and_lets_its_lifecycle_action_go() {
        use crate::domain::config::Action;
        use crate::domain::continuation::Continuation;
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let key = store.continuation_key().await.unwrap();
        let (instances, nodes) = world();
        let config = Config::default();
        let now = Utc::now();
        // A drain whose deadline passed a minute ago (its passes came late), with and without a
        // lifecycle action waiting on it.
        let continuation = |id: &str, lifecycle: bool| {
            let time = (now - chrono::Duration::minutes(3)).to_rfc3339();
            let body = spot(id, A, &time).to_string();
            let event = decode_value("b", serde_json::from_str(&body).unwrap(), now)
                .unwrap()
                .remove(0)
                .event
                .unwrap();
            let facts = Facts {
                instances: &instances.0,
                nodes: &nodes.nodes,
            };
            let mut plan = decide(&event, facts, &config);
            assert_eq!(plan.actions[0].action, Action::CordonDrain);
            plan.actions[0].deadline = Some(now - chrono::Duration::minutes(1));
            if lifecycle {
                plan.actions[0].complete_lifecycle =
                    Some(crate::domain::fixtures::lifecycle("asg", "hook"));
            }
            let started = now - chrono::Duration::minutes(3);
            json!({"messageId": id, "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
                   "body": Continuation::first(started, started, plan).body(&key, &body)})
        };
        let exec = Recorder::default();
        let queue = Queue::default();
        let p = Pipeline {
            continuer: Some(Continue {
                continuer: &queue,
                after: StdDuration::from_secs(5),
                heartbeat_every: chrono::Duration::seconds(30),
            }),
            mode: Mode::Act,
            config: &config,
            store: &store,
            instances: &instances,
            nodes: &nodes,
            executor: Some(&exec),
        };
        let batch =
            json!({"Records": [continuation("late-hook", true), continuation("late", false)]});
        let reports = p.process(&records(batch), now).await;
        // With a lifecycle action: the executor is asked for it alone, no node action.
        let plans = exec.plans.lock().unwrap().clone();
        assert_eq!(plans.len(), 1, "{reports:#?}");
        assert_eq!(plans[0].event_id, "late-hook");
        assert_eq!(plans[0].actions[0].action, Action::None);
        assert!(plans[0].actions[0].complete_lifecycle.is_some());
        assert_eq!(reports[0].outcome, Outcome::Acted);
        assert!(
            reports[0].actions[0].reason.contains("deadline"),
            "{reports:#?}"
        );
        // Without one: refused, nothing asked of the executor.
        assert_eq!(reports[1].outcome, Outcome::Ignored);
        let why = reports[1].reason.as_deref().unwrap();
        assert!(why.starts_with("refused: the drain's deadline"), "{why}");
        // Neither chain goes on.
        assert_eq!(*queue.0.lock().unwrap(), 0);
    }
}
