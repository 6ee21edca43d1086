//! A drain's passes after the first: the continuation verified, one pass run, and the drain
//! carried on, by a continuation message or here in process (see the parent module's doc).

use super::kept;
use super::*;
use crate::domain::inbound::continuation::{message_group, within_sqs_limit};
use crate::domain::keys::{KeyRing, Unverified};
use crate::domain::surge::RoomWait;

/// What a port's failure to read the continuation key says first (of the same kind).
const KEY: &str = "reading the continuation key";
/// What a failure to queue a drain's continuation (or one too large to) says first.
const QUEUEING: &str = "queueing the drain's continuation";

/// The verdicts of `check` on each of `items` by the store's continuation keys, read again once
/// when a verdict is `newer` (names a key newer than those known: a rotation since this process
/// read them).
pub(super) async fn by_keys<T, E>(
    store: &dyn PoolStore,
    items: &[T],
    check: impl Fn(&T, &KeyRing) -> Result<(), E>,
    newer: impl Fn(&E) -> bool,
) -> Result<Vec<Result<(), E>>, crate::ports::PortError> {
    let keys = store.continuation_keys().await?;
    let mut verdicts: Vec<Result<(), E>> = items.iter().map(|i| check(i, &keys)).collect();
    let is_newer = |v: &Result<(), E>| v.as_ref().is_err_and(&newer);
    if verdicts.iter().any(is_newer)
        && let Some(again) = store.reread_continuation_keys().await?
    {
        for (item, verdict) in items.iter().zip(&mut verdicts) {
            if is_newer(verdict) {
                *verdict = check(item, &again);
            }
        }
    }
    Ok(verdicts)
}

/// Whether a drain pass from `continuation` at `now` keeps its lifecycle action alive: none
/// kept alive yet, or the last time [`HEARTBEAT_EVERY`] ago.
fn heartbeat_due(continuation: &Continuation, now: DateTime<Utc>) -> bool {
    (continuation.heartbeat_at).is_none_or(|at| now - at >= span(HEARTBEAT_EVERY))
}

impl Pipeline<'_> {
    /// The plan a continuation carries, once it is shown to be forewarn's own and still this
    /// event's (see [`Pipeline::refusal`]). A continuation that is not is refused (ignored, with
    /// the reason in its report and a log line); one whose key cannot be read fails (it comes
    /// back).
    pub(super) async fn verified_plan(
        &self,
        record: &Record,
        event: &Event,
        continuation: &Continuation,
        now: DateTime<Utc>,
    ) -> Result<crate::domain::plan::Plan, Report> {
        let refuse = |why: String| {
            tracing::warn!(origin = %record.origin, %why, "refusing a continuation");
            Report::new(record).ended(Outcome::Ignored, format!("refused: {why}"))
        };
        let mut plan = continuation.plan.clone();
        let refusal = self.refusal(record, event, continuation, now).await?;
        let Some(mut why) = refusal.map_err(refuse)? else {
            return Ok(plan);
        };
        if continuation.owes_decision_events() {
            why.push_str(&self.announce_late(&plan).await);
        }
        // A launch hook's action is never completed late: its node did not become Ready
        // in time, and the hook's own timeout and default result decide.
        let completes = plan.actions.iter().any(|a| a.complete_lifecycle.is_some());
        if plan.kind == EventKind::AsgLaunch || !completes {
            return Err(refuse(why));
        }
        // The drain is over whatever happens now, so what waits on it is let go: no node is
        // touched, and the lifecycle action is completed (left alone, it would hold the
        // instance until the hook's timeout; a stale copy of a completed one is answered
        // "already completed").
        tracing::warn!(origin = %record.origin, %why, "ending a late continuation; completing its lifecycle action");
        for a in &mut plan.actions {
            a.action = crate::domain::config::Action::None;
            a.reason = format!("refused: {why}; its lifecycle action is completed");
        }
        Ok(plan)
    }

    /// Whether `continuation` (of `event`'s `record`) may run at `now`: `Err` why not when it is
    /// not signed by an accepted key (one this process does not know, a rotation since it read
    /// the keys, makes it read them again, once, before refusing) or its plan's event id and
    /// instances are not the event's; `Ok(Some)` why not when it comes late, past its drain's
    /// last pass: a pass interval after the drain's deadline, or until the instance goes when
    /// its notice says when (the deadline is then the notice's end less the margin): an
    /// eviction before the instance goes still starts its pod's replacement at once. A failure
    /// to read the keys fails the record (it comes back).
    pub(super) async fn refusal(
        &self,
        record: &Record,
        event: &Event,
        continuation: &Continuation,
        now: DateTime<Utc>,
    ) -> Result<Result<Option<String>, String>, Report> {
        let one = std::slice::from_ref(continuation);
        let newer = |e: &Unverified| matches!(e, Unverified::UnknownKey { .. });
        let verdicts = by_keys(self.store, one, Continuation::verify, newer).await;
        let failed = |e: PortError| PortError::new(KEY, e.kind, e).fail(Report::new(record));
        let plan = &continuation.plan;
        if let Err(e) = verdicts.map_err(failed)?.remove(0) {
            return Ok(Err(e.to_string()));
        }
        if let Err(e) = plan_is_the_events(plan, event) {
            return Ok(Err(e.to_string()));
        }
        // The earliest drain deadline of the plan.
        let deadline = (plan.actions.iter().filter_map(|a| a.deadline).min())
            .unwrap_or(continuation.started_at + self.config.drain_timeout);
        let notice_end = plan
            .actions
            .iter()
            .any(|a| a.grace_to_deadline)
            .then(|| deadline + self.config.deadline_margin);
        let last = (deadline + span(self.passes.interval)).max(notice_end.unwrap_or(deadline));
        let ended = notice_end.map_or("", |_| ", and the instance's notice has ended");
        Ok(Ok((now > last).then(|| {
            format!(
                "the drain's deadline {} is past by more than a pass interval{ended}: the chain ends",
                deadline.to_rfc3339(),
            )
        })))
    }

    /// The Events of the decision that the first pass of a drain left to a pass that came too
    /// late (see [`Pass::Announce`]): recorded alone; what became of them, for the refusal's
    /// reason.
    async fn announce_late(&self, plan: &Plan) -> String {
        let Some(executor) = self.executor.filter(|_| self.mode.writes_cluster()) else {
            return String::new();
        };
        match executor.execute(plan, Pass::Announce, self.work).await {
            Ok(results) => match results.iter().find_map(|r| r.refused.as_deref()) {
                Some(why) => format!(" (the Events of the decision were not recorded: {why})"),
                None => " (the Events of the decision, left to this pass, are recorded)".into(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "the Events of a late drain could not be recorded");
                format!(" (the Events of the decision could not be recorded: {e})")
            }
        }
    }

    /// A later pass of a drain, from its continuation message: the event was recorded by its
    /// first pass, so the ledger is not asked and the pools are not written again; the pass runs
    /// (the executor verifies the node live before anything), and while the drain is pending it
    /// is carried on.
    pub(super) async fn continue_drain(
        &self,
        record: &Record,
        plan: &Plan,
        continuation: &Continuation,
        room: &BTreeMap<String, RoomSeen>,
        mut report: Report,
    ) -> Report {
        // A run that does not write the cluster (a plan, a dry run) ends the chain; one that
        // would but holds no client of the cluster (its served clusters could not be listed)
        // fails the pass, which comes back: a drain is never acknowledged undone.
        if !self.mode.writes_cluster() {
            let why = "a drain's continuation, and this run does not act on a cluster";
            return report.ended(Outcome::Ignored, why);
        }
        let Some(executor) = self.executor else {
            let why = "a drain's continuation, and no client of its cluster is at hand (the \
                       served clusters could not be listed): it comes back";
            return report.failed(why.into());
        };
        let out = &mut report;
        let done = async move {
            if let (Some((wait, seen)), Some(queue)) = (
                self.still_waiting(plan, continuation, room),
                self.queue_for(record),
            ) {
                // Nothing is due: no other request, the next look queued.
                let now = self.clock.now();
                let detail = format!(
                    "waiting for room: {} placeholders, none running yet (looked at them alone); \
                     evicted when one runs, at the latest at {}",
                    seen.placeholders,
                    wait.until.to_rfc3339()
                );
                for a in &mut out.actions {
                    a.result = Some(detail.clone());
                }
                let wait = (wait.next_look(now) - now).to_std().unwrap_or_default();
                let after = pass_delay(wait, self.passes.interval);
                self.send(queue, &continuation.next(None), after).await?;
                return Ok(Outcome::Acted);
            }
            if !plan.has_node_work() {
                return Ok(Outcome::Acted);
            }
            self.drain_passes(executor, plan, continuation.clone(), record, out)
                .await
        };
        match done.await {
            Ok(outcome) => Report { outcome, ..report },
            Err(e) => e.fail(report),
        }
    }

    /// Drain passes of `plan` for `record` from `continuation`, their results put in `report`:
    /// one, its next queued, when `record` has a queue ([`Pipeline::queue_for`]), or none when
    /// it is a kept copy (see [`kept`]: its pass is quiet, no Event, and its queued twin carries
    /// the drain on); else pass after pass here, the clock letting the time between them pass,
    /// until it is over. `Ignored` when every action was refused by its live verification.
    pub(super) async fn drain_passes(
        &self,
        executor: &dyn Executor,
        plan: &Plan,
        mut continuation: Continuation,
        record: &Record,
        report: &mut Report,
    ) -> Result<Outcome, PortError> {
        loop {
            let pass = Pass::Drain {
                started_at: continuation.started_at,
                role: match record.kept {
                    true => DrainRole::Quiet,
                    false => DrainRole::of_pass(continuation.pass),
                },
                heartbeat: heartbeat_due(&continuation, self.clock.now()),
            };
            let results = executor.execute(plan, pass, self.work).await?;
            let pending = merge(report, &results);
            if let Some(why) = refusals(&results) {
                report.reason = Some(why);
                if results.iter().all(|r| r.refused.is_some()) {
                    return Ok(Outcome::Ignored);
                }
            }
            if !pending || record.kept {
                return Ok(Outcome::Acted);
            }
            let last_beat = report.actions.iter().filter_map(|a| a.heartbeat_at).max();
            let mut next = continuation.next(last_beat);
            // The wait of a pass whose pending actions all wait only for room (see [`RoomWait`]).
            let pending = results.iter().filter(|r| r.pending);
            next.room = pending
                .map(|r| r.room)
                .reduce(|a, b| Some(a?.and(b?)))
                .flatten();
            let after = next_pass_after(&results, self.passes.interval, self.clock.now());
            if let Some(queue) = self.queue_for(record) {
                let body = self.send(queue, &next, after).await?;
                self.keep_if_refused(report, body, queue.arn.to_string());
                return Ok(Outcome::Acted);
            }
            self.clock.sleep(after).await;
            continuation = next;
        }
    }

    /// The wait of a drain that only waited for room when its continuation was sent, and its
    /// placeholders as the batch's look saw them, when it still only waits (see
    /// [`RoomWait::still_waiting`]) and no lifecycle heartbeat is due: then the pass is skipped.
    /// `None` (a full pass) when any of its nodes was not looked at.
    pub(super) fn still_waiting(
        &self,
        plan: &Plan,
        continuation: &Continuation,
        room: &BTreeMap<String, RoomSeen>,
    ) -> Option<(RoomWait, RoomSeen)> {
        let wait = continuation.room?;
        if continuation.owes_decision_events() {
            // Its Events are due, so it is a full pass.
            return None;
        }
        let now = self.clock.now();
        if plan.actions.iter().any(|a| a.complete_lifecycle.is_some())
            && heartbeat_due(continuation, now)
        {
            return None;
        }
        let mut seen = RoomSeen::default();
        for node in room_nodes(plan) {
            seen = seen.and(*room.get(node)?);
        }
        wait.still_waiting(seen, now).then_some((wait, seen))
    }

    /// The placeholders of the batch's drains that waited for room when their continuations
    /// were sent, and still may (before their latest safe time), in one look for the whole
    /// batch. A look that fails or runs out of time costs those drains a full pass each, never
    /// the batch.
    pub(super) async fn room(&self, records: &[Record]) -> BTreeMap<String, RoomSeen> {
        let Some(executor) = self.executor.filter(|_| self.mode.writes_cluster()) else {
            return BTreeMap::new();
        };
        let now = self.clock.now();
        let nodes: BTreeSet<String> = records
            .iter()
            .filter_map(|r| r.continuation.as_ref())
            .filter(|c| c.room.is_some_and(|w| now < w.until))
            .flat_map(|c| room_nodes(&c.plan).map(str::to_string))
            .collect();
        if nodes.is_empty() {
            return BTreeMap::new();
        }
        let nodes: Vec<String> = nodes.into_iter().collect();
        let look = executor.room(&nodes, self.work);
        let seen = until(self.clock, self.work.deadline, look).await;
        seen.unwrap_or(Ok(BTreeMap::new())).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not look at the placeholders: drains waiting for room make full passes");
            BTreeMap::new()
        })
    }

    /// Where a pending drain of `record` is carried on as a continuation message: the
    /// record's queue, when the run has a [`ContinuationQueue`] and acts on the cluster; `None`:
    /// in process.
    pub(super) fn queue_for<'r>(&self, record: &'r Record) -> Option<Queued<'_, 'r>> {
        let writes = self.mode.writes_cluster();
        let queue = self.passes.queue.as_deref().filter(|_| writes)?;
        Some(Queued {
            queue,
            arn: record.queue_arn.as_deref()?,
            body: record.body.as_deref()?,
        })
    }

    /// Queues `next` as a continuation message, due after `after` (the pass comes back as a
    /// new delivery); the message's body.
    pub(super) async fn send(
        &self,
        to: Queued<'_, '_>,
        next: &Continuation,
        after: Duration,
    ) -> Result<String, PortError> {
        let keys = self.store.continuation_keys().await;
        let keys = keys.map_err(|e| PortError::new(KEY, e.kind, e))?;
        // Never an oversized message: SQS would refuse it, after the node was cordoned; the
        // event fails saying why instead.
        let body = within_sqs_limit(next.body(&keys.current));
        let body = body.map_err(|e| PortError::new(QUEUEING, FailureKind::Invalid, e))?;
        let group = message_group(next.plan.cluster.as_deref(), self.passes.tenant);
        let sent = to.queue.send(to.arn, &group, &body, after).await;
        sent.map_err(|e| PortError::new(QUEUEING, e.kind, e))?;
        Ok(body)
    }

    /// Keeps a copy of a continuation just queued (`body`, to `queue_arn`), due after
    /// [`kept::BUDGET_WAIT`], when the pass that sent it left a pod its budget refused and the
    /// environment keeps copies (see [`kept`]).
    fn keep_if_refused(&self, report: &Report, body: String, queue_arn: String) {
        let refused = (report.actions.iter()).any(|a| a.drain.is_some_and(|d| d.left > 0));
        if let Some(kept) = self.passes.kept.as_ref().filter(|_| refused) {
            let due = self.clock.now() + span(kept::BUDGET_WAIT);
            if !kept.keep(kept::Kept {
                due,
                body,
                queue_arn,
            }) {
                tracing::debug!("retries kept: full; this one waits for its queued continuation");
            }
        }
    }
}

/// Where a continuation message goes: the queue, the record's queue ARN; and the record's
/// message body, which a first continuation carries (signed).
#[derive(Clone, Copy)]
pub(super) struct Queued<'q, 'r> {
    pub(super) queue: &'q dyn ContinuationQueue,
    pub(super) arn: &'r str,
    pub(super) body: &'r str,
}

/// What became of an event's work in its first run: done (reported), or the plan of a drain to
/// carry on in process before the event is recorded.
pub(super) enum Handled {
    Done(Report),
    Pending(Report, Box<Plan>),
}

/// When the next pass of a drain is due: after `interval` while something can be done (an
/// eviction refused or just sent, a critical pod not yet due); when the drain only waits for
/// terminating pods, when the last of them is due to be gone (and not sooner than `interval`);
/// at most SQS's longest delay, 900 s.
pub(super) fn next_pass_after(
    results: &[ActionResult],
    interval: Duration,
    now: DateTime<Utc>,
) -> Duration {
    // `None` (no wait) orders first: any pending result without a time wins.
    let pending = results.iter().filter(|r| r.pending);
    let soonest = pending.map(|r| r.wait_until).min().flatten();
    let wait = soonest.and_then(|t| (t - now).to_std().ok());
    pass_delay(wait.unwrap_or_default(), interval)
}

/// The delay of a drain's next pass that waits `wait`: not sooner than the pass `interval`, at
/// most SQS's longest delay, 900 s.
fn pass_delay(wait: Duration, interval: Duration) -> Duration {
    wait.max(interval).min(Duration::from_secs(900))
}

/// The nodes of `plan` whose drains surge (see [`crate::domain::surge`]).
fn room_nodes(plan: &Plan) -> impl Iterator<Item = &str> {
    plan.actions
        .iter()
        .filter(|a| a.surge)
        .filter_map(|a| a.node.as_deref())
}

/// Puts a pass's `results` in `report`, after what earlier passes of the same work put there
/// (passes run in process report together: their details joined, their evictions added up, the
/// first cordon kept); true when a drain is pending.
pub(super) fn merge(report: &mut Report, results: &[ActionResult]) -> bool {
    for result in results.iter().cloned() {
        if let Some(a) = report
            .actions
            .iter_mut()
            .find(|a| a.instance_id == result.instance_id)
        {
            let before = a.result.take().map(|before| format!("{before}; then "));
            a.result = Some(before.unwrap_or_default() + &result.detail);
            a.cordoned_at = a.cordoned_at.or(result.cordoned_at);
            let before = a.drain.unwrap_or_default();
            a.drain = result.drain.map(|mut d| {
                d.evicted += before.evicted;
                d.pod_events += before.pod_events;
                d.pod_events_given_up += before.pod_events_given_up;
                d.placeholders_refused += before.placeholders_refused;
                d
            });
            a.heartbeat_at = result.heartbeat_at.or(a.heartbeat_at);
        }
    }
    results.iter().any(|r| r.pending)
}

/// The executor's refusals among `results` (its live verification), as one reason.
pub(super) fn refusals(results: &[ActionResult]) -> Option<String> {
    let whys = Vec::from_iter(results.iter().filter_map(|r| r.refused.as_deref()));
    (!whys.is_empty()).then(|| format!("refused: {}", whys.join("; ")))
}

/// Why a continuation's plan is not its event's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotTheEvents {
    #[error("the plan is event {plan}'s, not this event's ({event})")]
    OtherEvent { plan: String, event: String },
    #[error("the plan names instance {0}, which the event does not")]
    OtherInstance(String),
}

/// Whether `plan` is `event`'s: its event id (or the id of its part in one cluster,
/// `<id>#<cluster>`: see `crate::app::fleet::split`), and no instance the event does not name;
/// else why not.
pub(super) fn plan_is_the_events(plan: &Plan, event: &Event) -> Result<(), NotTheEvents> {
    let rest = plan.event_id.strip_prefix(event.id.as_str());
    let part = rest.is_some_and(|rest| rest.starts_with('#'));
    if plan.event_id != event.id && !part {
        return Err(NotTheEvents::OtherEvent {
            plan: plan.event_id.clone(),
            event: event.id.clone(),
        });
    }
    let mut ids = plan.actions.iter().map(|a| &a.instance_id);
    match ids.find(|id| !event.instance_ids.contains(id)) {
        Some(other) => Err(NotTheEvents::OtherInstance(other.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::config::Config;
    use crate::domain::event::EventKind;
    use crate::domain::fixtures::event;
    use crate::domain::plan::{Facts, decide};

    const A: &str = "i-0a1b2c3d4e5f60001";
    const B: &str = "i-0a1b2c3d4e5f60002";

    #[test]
    fn a_plan_is_its_events_or_its_parts_in_one_cluster_and_names_only_its_instances() {
        let e = event(EventKind::ScheduledChange, "e1", A).build();
        let none = std::collections::BTreeMap::new();
        let plan = decide(&e, Facts::new(&none, &[]), &Config::default());
        assert_eq!(plan_is_the_events(&plan, &e), Ok(()));
        // The part of the event in one cluster (`fleet::split`) is the event's.
        let part = Plan {
            event_id: "e1#123456789012/us-east-1/blue".into(),
            ..plan.clone()
        };
        assert_eq!(plan_is_the_events(&part, &e), Ok(()));
        for other in ["e2", "e1x", "e10#blue"] {
            let forged = Plan {
                event_id: other.into(),
                ..plan.clone()
            };
            assert_eq!(
                plan_is_the_events(&forged, &e),
                Err(NotTheEvents::OtherEvent {
                    plan: other.into(),
                    event: "e1".into()
                })
            );
        }
        let mut more = plan.clone();
        more.actions[0].instance_id = B.into();
        assert_eq!(
            plan_is_the_events(&more, &e).unwrap_err().to_string(),
            format!("the plan names instance {B}, which the event does not")
        );
    }
}
