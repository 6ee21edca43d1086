//! The pipeline: decoded records → facts (one lookup per batch) → plans → actions and pool
//! updates → one report per record.
//!
//! Order matters for at-least-once delivery: node actions run before the pool update that also
//! records the event id, so an event whose actions failed is not marked applied and comes back;
//! and a drain's continuation is queued before that update, so an event is never recorded with
//! the rest of its drain dropped.
//!
//! One drain model: an event's work is its first pass ([`Pass::Cordon`]: a drain's node is
//! cordoned and tainted, nothing more), then, while its drain is pending, drain passes
//! ([`Pass::Drain`]) spaced by [`Passes::interval`] (or until terminating pods are due to be
//! gone). Two drivers carry the passes on, from one [`Continuation`] (when the drain started,
//! which pass, the last heartbeat):
//!
//! - continuation messages: a record from a queue, when the run has a [`ContinuationQueue`],
//!   queues each next pass as a message (see [`crate::domain::inbound::continuation`]); every Lambda
//!   invocation stays short;
//! - in process: otherwise (`forewarn replay`, the sweeper, the drain pass interval `off`)
//!   the same passes run one after the other within the event's work, the [`Clock`] letting the
//!   same time pass between them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Future, FutureExt as _, StreamExt};
use tracing::Instrument;

use chrono::{DateTime, Utc};

use crate::domain::clusters::Place;
use crate::domain::config::{Config, Mode};
use crate::domain::event::{Event, EventKind};
use crate::domain::facts::NodeFacts;
use crate::domain::inbound::Record;
use crate::domain::inbound::continuation::Continuation;
use crate::domain::inbound::continuation::Tenant;
use crate::domain::plan::{Facts, Plan, decide};
use crate::domain::pool::{Applied, PoolKey};
use crate::domain::report::{Outcome, Report};
use crate::domain::surge::RoomSeen;
use crate::ports::{
    ActionResult, Clock, ContinuationQueue, DrainRole, Executor, FailureKind, NodeDirectory, Pass,
    PoolStore, PortError, Work, span, until,
};

mod batch;
pub mod kept;
mod passes;
mod places;
mod traffic;

pub use places::{Described, describe_events, looked_up_events, place_report};
pub use traffic::{DEREGISTER_BUDGET, QUIET_FOR, Traffic};

use batch::{follow_firsts, schedule, split_lanes};
use passes::{Handled, merge, refusals};

/// Wiring for one run of the pipeline.
pub struct Pipeline<'a> {
    pub config: &'a Config,
    /// What the run may change. In [`Mode::Plan`] the executor is never called; in
    /// [`Mode::DryRun`] it is (it only reads), and events are `planned` either way. The store is
    /// written as it is given (the wiring hands a read-only one to a dry run).
    pub mode: Mode,
    pub store: &'a dyn PoolStore,
    /// The batch's instances, looked up once before the run ([`describe_events`]): the run
    /// decides from them and answers the events of a place whose lookup failed as it says.
    pub instances: &'a Described,
    pub nodes: &'a dyn NodeDirectory,
    /// `None`: no live cluster — plans are made and pools recorded, nothing is acted on.
    pub executor: Option<&'a dyn Executor>,
    /// How a drain's passes are carried on.
    pub passes: &'a Passes,
    /// Where "now" comes from, and how the time between passes passes.
    pub clock: &'a dyn Clock,
    /// Where drains' instances leave their load balancers before their first evictions (see
    /// [`traffic`]); `None`: they are not taken off.
    pub traffic: Option<&'a Traffic>,
    /// Events (of distinct instances) handled at once.
    pub concurrency: usize,
    /// The batch's work: when it must be over (a Lambda's deadline less a margin, on the
    /// pipeline's clock), and whether outages are ridden out; every call of the batch through
    /// the directory and the executor is part of it.
    pub work: Work,
}

/// How a drain's passes are carried on (see the module doc).
#[derive(Clone)]
pub struct Passes {
    /// The least time between two passes of a drain.
    pub interval: Duration,
    /// Where continuations are queued; `None`: every drain's passes run in process.
    pub queue: Option<Arc<dyn ContinuationQueue>>,
    /// Where the execution environment keeps copies of continuations whose pass left a pod its
    /// budget refused, to run them itself once due (see [`kept`]); `None`: none are kept.
    pub kept: Option<Arc<kept::KeptRetries>>,
    /// Whose tenant of the fair queue continuations are: their cluster's, or with an
    /// organization their account's (see [`Tenant`]).
    pub tenant: Tenant,
}

impl Passes {
    /// Passes `interval` apart, run in process: test support, compiled for tests and the
    /// `fixtures` feature only (a record without a queue has its passes run in process anyway).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn in_process(interval: Duration) -> Passes {
        Passes {
            interval,
            queue: None,
            kept: None,
            tenant: Tenant::Cluster,
        }
    }
}

/// The default time between two passes of a drain (the settings').
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);

/// A pending lifecycle action is kept alive at most this often.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);

/// What the batch's events are handled with: what the batch's lookups found, and when.
#[derive(Clone, Copy)]
struct BatchFacts<'a> {
    /// The facts decisions are made from (instances, nodes, pool history).
    facts: Facts<'a>,
    /// The batch's event ids already applied.
    applied: &'a HashSet<String>,
    /// The placeholders of the drains that wait for room, as one look saw them (nothing for
    /// the batch's new events).
    room: &'a BTreeMap<String, RoomSeen>,
    /// When the batch began.
    now: DateTime<Utc>,
    /// The batch's round of taking drains off their load balancers (see [`traffic`]): a drain's
    /// first pass waits for it (true once made) before evicting; the batch's other work does not.
    gate: &'a tokio::sync::watch::Receiver<bool>,
}

impl Pipeline<'_> {
    /// Processes a batch of records: one instance lookup, one node lookup and one ledger read for
    /// the whole batch, then the events — concurrently up to `concurrency`, except that
    /// events sharing an instance run one after the other in event-time order. A record whose
    /// event id already came earlier in the batch is a duplicate of it. Work not finished by
    /// the [`Work`]'s deadline is reported failed (it goes back to the queue; every action is
    /// idempotent, so a half-done event is simply done again); every call of the batch through
    /// the directory and the executor is part of its [`Work`] (transient failures are retried
    /// inside the batch while its time allows). Returns one report per record, in order.
    pub async fn process(&self, records: &[Record]) -> Vec<Report> {
        let now = self.clock.now();
        let looked_up = until(self.clock, self.work.deadline, self.look_up(records)).await;
        let (nodes, applied, followed) = match looked_up {
            Some(Ok(looked_up)) => looked_up,
            Some(Err(e)) => return self.none_looked_up(records, |r| e.fail(r)),
            None => return self.none_looked_up(records, |r| r.failed(OUT_OF_TIME.into())),
        };
        let (lanes, repeats) = schedule(records);
        // New events first (their cordons), then the drain passes of earlier ones (evictions),
        // then the drains carried on in process (their evictions, after every cordon).
        let (later, new) = split_lanes(lanes, |i| records[i].continuation.is_some());
        // The events of a place whose lookup failed are answered as it says, and only they.
        let (new, unlooked) = self.instances.set_aside(records, new);
        let nothing_seen = BTreeMap::new();
        let (cleared, gate) = tokio::sync::watch::channel(false);
        let mut seen = BatchFacts {
            facts: Facts {
                instances: &self.instances.found,
                nodes: &nodes,
                followed: &followed,
            },
            applied: &applied,
            room: &nothing_seen,
            now,
            gate: &gate,
        };
        let first = self.run(records, new, seen).await;
        // One look at the placeholders of every drain of the batch that waits for room.
        let room = self.room(records).await;
        seen.room = &room;
        // Traffic first: the drains about to evict, off their load balancers (after the
        // cordons; each first drain pass waits for the round, the batch's other passes go on).
        let traffic = async {
            let notes = self.clear_traffic(records, &later, &first).await;
            cleared.send_replace(true);
            notes
        };
        let (notes, later) = tokio::join!(traffic, self.run(records, later.clone(), seen));
        // The drains carried on in process come after it too.
        let mut done = self.finish(records, later, now).await;
        done.extend(self.finish(records, first, now).await);
        done.extend(unlooked);
        let mut reports: Vec<Option<Report>> = vec![None; records.len()];
        for (i, mut report) in done {
            report.traffic = notes.get(&i).cloned();
            reports[i] = Some(report);
        }
        follow_firsts(records, &mut reports, repeats);
        let unanswered = |record: &Record| match &record.event {
            Err(e) => Report::new(record).failed(e.to_string()),
            Ok(_) => Report::new(record).failed("internal: record not processed".into()),
        };
        let answered = records.iter().zip(reports);
        answered
            .map(|(r, report)| report.unwrap_or_else(|| unanswered(r)))
            .collect()
    }

    /// The batch's lookups besides its instances' (given, see [`places`]): one node lookup and
    /// one ledger read for every supported event of `records`.
    async fn look_up(&self, records: &[Record]) -> Result<LookedUp, PortError> {
        // A drain's later passes carry their plan: nothing to look up for them.
        let wanted = looked_up_events(records);
        if wanted.is_empty() {
            return Ok(Default::default());
        }
        let event_ids: BTreeSet<String> = wanted.iter().map(|e| e.id.clone()).collect();
        // Only the nodes of this run's instances: the lookup may be a whole batch's, of
        // several clusters.
        let found = &self.instances.found;
        let ids: BTreeSet<&String> = wanted.iter().flat_map(|e| &e.instance_ids).collect();
        let known = Vec::from_iter(ids.iter().filter_map(|id| found.get(*id).cloned()));
        let mut nodes = self.nodes.nodes(&known, self.work).await?;
        drop_unverified_records(self.store, &mut nodes).await;
        let applied = self.store.applied(&Vec::from_iter(event_ids)).await?;
        // `adaptive` decides from the pools' history: read once for the batch, when needed, and
        // only for the pools of the batch's recommendations (one query each).
        let policy = &self.config.policy;
        let adaptive = policy.uses_adaptive();
        let pools: BTreeSet<PoolKey> = wanted
            .iter()
            .filter(|e| adaptive && e.kind == EventKind::RebalanceRecommendation)
            .flat_map(|e| e.instance_ids.iter())
            .filter_map(|id| found.get(id)?.pool())
            .collect();
        let mut followed = BTreeMap::new();
        if !pools.is_empty() {
            let (now, pools) = (self.clock.now(), Vec::from_iter(pools));
            let since = policy.adaptive.since(now);
            let history = self.store.history_of(&pools, since, now).await?;
            let window = policy.adaptive.window;
            followed = crate::domain::policy::adaptive::followed(&history, window, since, now);
        }
        Ok((nodes, applied, followed))
    }

    /// The reports of a batch whose lookups failed: every supported event failed by `fail` (it
    /// comes back), undecodable records failed, unsupported ones ignored.
    fn none_looked_up(&self, records: &[Record], fail: impl Fn(Report) -> Report) -> Vec<Report> {
        records
            .iter()
            .map(|r| match &r.event {
                Err(e) => Report::new(r).failed(e.to_string()),
                Ok(e) if e.kind == EventKind::Unsupported => {
                    let plan = decide(e, Facts::new(&BTreeMap::new(), &[]), self.config);
                    let why = plan.ignored.clone().unwrap_or_default();
                    Report::new(r).with_plan(&plan).ended(Outcome::Ignored, why)
                }
                Ok(_) => fail(Report::new(r)),
            })
            .collect()
    }

    /// `each` of every item of `lanes`: the lanes at once (up to `concurrency`), each
    /// lane's items one after the other; what each lane gave, in its order.
    async fn lanes<I, O, F: Future<Output = O>>(
        &self,
        lanes: Vec<Vec<I>>,
        each: impl Fn(I) -> F,
    ) -> Vec<Vec<O>> {
        let each = &each;
        futures::stream::iter(lanes)
            .map(|lane| futures::stream::iter(lane).then(each).collect())
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await
    }

    /// Handles the events of `lanes` (see [`Pipeline::lanes`]), each within the deadline.
    async fn run(
        &self,
        records: &[Record],
        lanes: Vec<Vec<usize>>,
        seen: BatchFacts<'_>,
    ) -> Vec<Vec<(usize, Handled)>> {
        self.lanes(lanes, |i| async move {
            let work = self.in_time(&records[i], self.handle(&records[i], seen));
            (i, work.await.unwrap_or_else(Handled::Done))
        })
        .await
    }

    /// The drains that events' first passes left pending to be carried on in process, lane by
    /// lane as their first passes ran, each then recorded (see [`Pipeline::carry_on_here`]).
    async fn finish(
        &self,
        records: &[Record],
        lanes: Vec<Vec<(usize, Handled)>>,
        now: DateTime<Utc>,
    ) -> Vec<(usize, Report)> {
        let done = self.lanes(lanes, |(i, handled)| async move {
            let report = match handled {
                Handled::Pending(report, plan) => {
                    let work = self.carry_on_here(&records[i], *plan, now, report);
                    let (Ok(report) | Err(report)) = self.in_time(&records[i], work).await;
                    report
                }
                Handled::Done(report) => report,
            };
            (i, report)
        });
        done.await.into_iter().flatten().collect()
    }

    /// `work` (in the span of the record's event) if it ends by the work's deadline; else
    /// (or when that is already past) the record's failed report. A panic in `work` fails this
    /// record alone (logged with its message id): the batch's other records are answered as
    /// they went.
    async fn in_time<T>(
        &self,
        record: &Record,
        work: impl Future<Output = T>,
    ) -> Result<T, Report> {
        let span = (record.event.as_ref()).map_or_else(|_| tracing::Span::none(), event_span);
        let work = std::panic::AssertUnwindSafe(work.instrument(span)).catch_unwind();
        if self.work.deadline.is_some_and(|d| self.clock.now() >= d) {
            return Err(Report::new(record).failed(format!("not started: {OUT_OF_TIME}")));
        }
        let done = until(self.clock, self.work.deadline, work).await;
        let done =
            done.ok_or_else(|| Report::new(record).failed(format!("not finished: {OUT_OF_TIME}")))?;
        done.map_err(|panic| panicked(record, panic.as_ref()))
    }

    async fn handle(&self, record: &Record, seen: BatchFacts<'_>) -> Handled {
        let event = match &record.event {
            Ok(event) => event,
            Err(e) => return Handled::Done(Report::new(record).failed(e.to_string())),
        };
        let now = seen.now;
        let plan = match &record.continuation {
            Some(c) => match self.verified_plan(record, event, c, now).await {
                Ok(plan) => plan,
                Err(report) => return Handled::Done(report),
            },
            None => decide(event, seen.facts, self.config),
        };
        let span = tracing::Span::current();
        let nodes = plan.actions.iter().filter_map(|a| a.node.as_deref());
        span.record("node", nodes.collect::<Vec<_>>().join(","));
        let pools = plan.pools.iter().map(|m| m.pool.to_string());
        span.record("pool", pools.collect::<Vec<_>>().join(","));
        tracing::debug!(summary = %plan.summary, "planned");
        let mut report = Report::new(record).with_plan(&plan);
        if let Some(why) = &plan.ignored {
            return Handled::Done(report.ended(Outcome::Ignored, why.clone()));
        }
        if let Some(continuation) = &record.continuation {
            if continuation.pass == 1 {
                // A first drain pass evicts once its instance is off its load balancers (or
                // the round's budget is spent).
                let _ = seen.gate.clone().wait_for(|cleared| *cleared).await;
            }
            let room = seen.room;
            let done = self.continue_drain(record, &plan, continuation, room, report);
            return Handled::Done(done.await);
        }
        if seen.applied.contains(&event.id) {
            return Handled::Done(report.ended(Outcome::Duplicate, "event id already applied"));
        }
        let executor = self.executor.filter(|_| self.mode.runs_actions());
        if let Some(executor) = executor.filter(|_| plan.has_node_work()) {
            let results = match executor.execute(&plan, Pass::Cordon, self.work).await {
                Ok(results) => results,
                Err(e) => return Handled::Done(e.fail(report)),
            };
            let pending = merge(&mut report, &results);
            if let Some(why) = refusals(&results) {
                // Beside what the plan already says (pools left unrecorded).
                let note = report.reason.take().map(|note| format!("; {note}"));
                report.reason = Some(why + &note.unwrap_or_default());
            }
            if pending {
                // The drain's first pass follows at once: queued behind the warnings already
                // queued, or, in process, once the batch's first passes are done (their
                // cordons come first).
                let Some(queue) = self.queue_for(record) else {
                    return Handled::Pending(report, Box::new(plan));
                };
                self.offer_early(&Place::of_event(event), &plan).await;
                let next = Continuation::first(now, event.time, plan.clone(), queue.body);
                if let Err(e) = self.send(queue, &next, Duration::ZERO).await {
                    return Handled::Done(e.fail(report));
                }
            }
        }
        Handled::Done(self.record_event(&plan, report, now).await)
    }

    /// Records an event whose node work is done or carried on: its pools and its id (a
    /// duplicate of an id or key already recorded is reported so); acted when the run writes
    /// the cluster through an executor, else planned.
    async fn record_event(&self, plan: &Plan, report: Report, now: DateTime<Utc>) -> Report {
        let outcome = match self.executor.is_some() && self.mode.writes_cluster() {
            true => Outcome::Acted,
            false => Outcome::Planned,
        };
        match self.store.apply(plan, now).await {
            Ok(Applied::Applied) => Report { outcome, ..report },
            Ok(Applied::Duplicate) if plan.also_keys.is_empty() => {
                report.ended(Outcome::Duplicate, "event id already applied")
            }
            Ok(Applied::Duplicate) => report.ended(
                Outcome::Duplicate,
                "already applied: this event id, or the same interruption of this run of the \
                 instance under another id (a repeated warning, or the sweeper's finding)",
            ),
            Err(e) => e.fail(report),
        }
    }

    /// The drain of `plan` that the first pass of `record`'s event (at `now`) left pending,
    /// carried on here pass after pass; then, if it did not fail, the event recorded (a failed
    /// drain leaves the event unrecorded, so that it comes back whole).
    async fn carry_on_here(
        &self,
        record: &Record,
        plan: Plan,
        now: DateTime<Utc>,
        mut report: Report,
    ) -> Report {
        let (Some(executor), Ok(event)) = (self.executor, &record.event) else {
            return report;
        };
        let body = record.body.as_deref().unwrap_or_default();
        let first = Continuation::first(now, event.time, plan.clone(), body);
        let passes = self.drain_passes(executor, &plan, first, record, &mut report);
        match passes.await {
            Ok(_) => self.record_event(&plan, report, now).await,
            Err(e) => e.fail(report),
        }
    }
}

/// Removes the cordon records of `nodes` that do not verify with the store's continuation keys
/// (a node's kubelet may write its own annotations), each logged: nothing is decided from them
/// (see [`crate::domain::wayback`]). The keys are read only when a node carries a record.
/// Answers the nodes whose record was removed, with why.
pub async fn drop_unverified_records(
    store: &dyn PoolStore,
    nodes: &mut [NodeFacts],
) -> Vec<(String, String)> {
    use crate::domain::cordon_record::{ANNOTATION_CORDON, drop_unverified};
    let carries = |n: &NodeFacts| n.annotations.contains_key(ANNOTATION_CORDON);
    if !nodes.iter().any(carries) {
        return Vec::new();
    }
    let keys = store.continuation_keys().await;
    let keys = keys.inspect_err(|e| {
        tracing::warn!(error = %e, "the continuation keys cannot be read: no cordon record verifies");
    });
    let dropped = drop_unverified(nodes, keys.ok().as_ref());
    for (node, why) in &dropped {
        tracing::warn!(%node, %why, "refusing a cordon record");
    }
    dropped
}

/// What the batch's lookups found besides its instances: candidate nodes, event ids applied
/// before, the pools `adaptive` follows.
type LookedUp = (
    Vec<NodeFacts>,
    HashSet<String>,
    BTreeMap<PoolKey, crate::domain::policy::Followed>,
);

/// The failed report of a record whose work panicked (a bug: nothing that arrives should make
/// forewarn panic), logged with its message id. It comes back from the queue as any failure,
/// and ends in the dead-letter queue if it panics every time.
fn panicked(record: &Record, panic: &(dyn std::any::Any + Send)) -> Report {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    tracing::error!(
        origin = %record.origin,
        message_id = record.origin.message_id.as_deref().unwrap_or_default(),
        panic = %what,
        "a record's work panicked: this record fails, the batch's others are answered"
    );
    Report::new(record).failed(format!("internal error (panicked): {what}"))
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

/// Why work the batch's time ran out for fails (the batch's instance lookup too).
pub const OUT_OF_TIME: &str =
    "the time left for this batch ran out; the event goes back to the queue";

/// Events handled at once within a batch by default (`FOREWARN_CONCURRENCY`'s default).
pub const CONCURRENCY: usize = 8;

#[cfg(test)]
mod tests;
