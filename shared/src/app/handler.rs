//! The interruption handler as a Lambda function sees it: an SQS batch (answered with a partial
//! batch response, so that only failed messages come back) or a bare EventBridge event (for rules
//! that target the function directly: a failure is an error, so Lambda retries it and sends it to
//! the on-failure destination).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::app::fleet::split::{self, Destination, Share};
use crate::app::fleet::triage;
use crate::app::fleet::{BREAK, Busy, Cluster, Fleet};
use crate::app::pipeline::{Described, OUT_OF_TIME, Passes, Pipeline, Traffic, describe_events};
use crate::app::telemetry::Telemetry;
use crate::domain::config::{Config, Mode};
use crate::domain::facts::InstanceFacts;
use crate::domain::inbound::{self, Record, SqsMessage};
use crate::domain::report::{Outcome, Report, Tally};
use crate::domain::retry;
use crate::ports::{
    Clock, FailureKind, InstanceDirectory, Notifier, Place, PoolStore, PortError, Redeliver,
    Redelivery, Work, span, until,
};

/// A payload the handler could not take at all.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("the payload is neither an SQS batch nor an EventBridge event: not an SQS event: {0}")]
    NotSqs(#[source] serde_json::Error),
    #[error("the payload is neither an SQS batch nor an EventBridge event: expected a JSON object")]
    NotAnObject,
    #[error("the payload is neither an SQS batch nor an EventBridge event: {0}")]
    NotAnEvent(#[source] crate::domain::event::DecodeError),
    #[error("the answer could not be written as JSON: {0}")]
    Answer(#[source] serde_json::Error),
    #[error(
        "SQS message at Records[{index}] has no messageId: it could not be reported failed alone, so the whole batch fails"
    )]
    NoMessageId { index: usize },
    #[error("event {origin} failed: {reason}")]
    EventFailed { origin: String, reason: String },
}

/// Everything the handler needs, built once per cold start (see [`Handler::from_settings`] in
/// [`crate::app::wiring`]).
pub struct Handler {
    pub config: Config,
    /// What it may change: plan, dry run or act.
    pub mode: Mode,
    pub store: Arc<dyn PoolStore>,
    pub instances: Arc<dyn InstanceDirectory>,
    /// The clusters it serves, each with its node directory, executor (`None`: plan and
    /// record, no cluster action), policy ConfigMap and expander (see [`crate::app::fleet`]).
    pub fleet: Fleet,
    /// Tells people what was done (the webhook), when configured.
    pub notifier: Option<Arc<dyn Notifier>>,
    /// Brings failed SQS messages back sooner than the queue's visibility timeout (see
    /// [`crate::domain::retry`]); `None`: they come back when it ends.
    pub redelivery: Option<Arc<dyn Redelivery>>,
    /// How a drain's passes are carried on: continuation messages, or in process.
    pub passes: Passes,
    /// Where "now" comes from (the system clock, or a test's).
    pub clock: Arc<dyn Clock>,
    /// Events handled at once within a batch.
    pub concurrency: usize,
    /// The messages of one cluster an invocation takes on (what its share of the cluster's
    /// API server cordons in about a second, [`triage::takes`]): a batch's others of that
    /// cluster go back to the queue in the message group of the cluster's continuations, as do
    /// a busy cluster's new warnings (see [`triage`]); `None` (no limit, or a deployment of one
    /// cluster): nothing is triaged, every one is taken on.
    pub takes_per_cluster: Option<usize>,
    /// Work stops this long before the Lambda's deadline, so the answer still gets out.
    pub safety_margin: Duration,
    /// What is written of each report besides its log line (the Lambda functions' EMF
    /// metrics); logs only by default.
    pub telemetry: Telemetry,
    /// Where drains' instances leave their load balancers before their first evictions (see
    /// [`crate::app::pipeline::Traffic`]); `None`: they are not taken off.
    pub traffic: Option<Traffic>,
}

/// What one invocation did.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The answer to return to Lambda.
    pub response: Value,
    pub reports: Vec<Report>,
}

impl Handler {
    /// A handler of `config` over `store` and nothing else: no instance facts, no nodes, no
    /// executor (plans are made and pools recorded), no notifier, no redelivery; drains' passes
    /// in process, 5 s apart; the system clock; [`crate::app::pipeline::CONCURRENCY`] events at
    /// once; a [`crate::app::settings::SAFETY_MARGIN`] — the settings' defaults. The tests set
    /// what they need over it (`Handler { executor, ..Handler::new(..) }`); test support,
    /// compiled for tests and the `fixtures` feature only (the wiring builds its own).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn new(config: Config, store: Arc<dyn PoolStore>) -> Handler {
        Handler {
            config,
            mode: Mode::Act,
            store,
            instances: Arc::new(crate::adapters::snapshot::SnapshotInstances::default()),
            fleet: Fleet::one(Cluster::none()),
            notifier: None,
            redelivery: None,
            passes: Passes::in_process(crate::app::pipeline::PASS_INTERVAL),
            clock: crate::adapters::clock::SystemClock::shared(),
            concurrency: crate::app::pipeline::CONCURRENCY,
            takes_per_cluster: None,
            safety_margin: crate::app::settings::SAFETY_MARGIN,
            telemetry: Telemetry::default(),
            traffic: None,
        }
    }

    /// The work of a batch due by `deadline`: over a safety margin before it.
    fn work(&self, deadline: Option<DateTime<Utc>>) -> Work {
        let deadline = deadline.map(|d| d - span(self.safety_margin));
        Work {
            deadline,
            fail_fast: false,
        }
    }

    /// Takes decoded records through the pipeline as one batch, within `deadline` less the
    /// safety margin (what `forewarn replay` runs, with its own output): the Capacity Blocks its
    /// events name looked up first ([`crate::app::blocks`]), then the batch's instances looked
    /// up once (in each event's account and region, the blocks' not again) and the records split
    /// by the served cluster their instances belong to ([`Handler::route`]); each cluster's share
    /// runs on its own services, the shares at once (see [`crate::app::fleet`]), its instances
    /// answered from the one lookup.
    pub async fn run(&self, records: &[Record], deadline: Option<DateTime<Utc>>) -> Vec<Report> {
        let own = self.instances.as_ref();
        // A block's other instances, each a warning of its own on the queue, when there is one
        // to come back on and the run writes the cluster; a busy cluster's messages past what
        // an invocation takes on, back on it (see `triage`), likewise.
        let queue = (self.passes.queue.as_deref()).filter(|_| self.mode.writes_cluster());
        let expanded = crate::app::blocks::expand(own, queue, records, self.clock.now()).await;
        let (records, known) = (&expanded.records, &expanded.described);
        let (shares, described, work) = self.route(records, known, self.work(deadline)).await;
        let described = &described;
        // A position in several shares: a record split between clusters (never sent back).
        let mut seen = BTreeSet::new();
        let parted: BTreeSet<usize> = (shares.values().flat_map(|s| &s.positions))
            .filter(|p| !seen.insert(**p))
            .copied()
            .collect();
        // A cluster whose new warnings were all the batch's (more than one) is busy here for
        // a while: the queue's head was its burst alone (see `triage`).
        let new_warnings: usize = shares.values().map(triage::new_warnings).sum();
        // The batch's new warnings, each its cluster: in a mass interruption, their clusters'
        // instances are listed in the background, to answer their next lookups.
        let read = (shares.iter()).flat_map(|(to, share)| match to {
            Destination::Cluster(Some(id)) => vec![id.clone(); triage::new_warnings(share)],
            _ => Vec::new(),
        });
        let lists = (self.instances.clone(), Some(self.store.clone()));
        if let Some(lists) = self.fleet.know(read.collect(), lists, self.clock.clone()) {
            tokio::spawn(lists);
        }
        let parted = &parted;
        let runs = shares.into_iter().map(|(to, share)| async move {
            // A cluster's share is triaged (what it does not take on sent back, see `triage`).
            let (Destination::Cluster(id), Some((takes, queue))) =
                (&to, self.takes_per_cluster.zip(queue))
            else {
                let ran = self.run_share(to, share, described, work).await;
                return (ran, Default::default());
            };
            let cluster = id.as_ref().map(ToString::to_string);
            let now = self.clock.now();
            let busy = |why| matches!(&cluster, Some(n) if self.fleet.busy(n, why, now));
            // Busy with a burst, it keeps what its rate limit lets out at once (see
            // `triage::keeps`).
            let keeps = if busy(Busy::Burst) {
                let cluster = self.fleet.cluster(id.as_ref()).await.ok();
                let free = cluster.and_then(|c| c.executor.as_ref()?.free_requests());
                Some(triage::keeps(free))
            } else {
                None
            };
            let turn = triage::Turn {
                takes,
                keeps,
                backlog: busy(Busy::Backlog).then_some(now),
            };
            let own = triage::new_warnings(&share);
            let burst = own > 1 && own == new_warnings;
            let triaged = share.records.iter().any(|r| r.triaged);
            let (share, later) = triage::triage(share, &turn, parted);
            let share = self.run_share(to.clone(), share, described, work);
            let from = (cluster.as_deref(), self.passes.tenant);
            let sent_back = triage::requeue(queue, from, later, &turn);
            let ran = futures::future::join(share, sent_back).await;
            // What makes the cluster busy here: a burst of its new warnings (the queue's head
            // was its alone); a share of its triaged warnings (more are queued), until a share
            // without any (the head of its group is past them).
            if let Some(cluster) = cluster {
                let now = self.clock.now();
                if burst {
                    self.fleet.mark(&cluster, Busy::Burst, now, true);
                }
                self.fleet.mark(&cluster, Busy::Backlog, now, triaged);
            }
            ran
        });
        let runs = futures::future::join_all(runs).await;
        let runs = runs.into_iter().flat_map(|(share, later)| [share, later]);
        let reports = split::join(records, runs.collect());
        expanded.answer(reports)
    }

    /// A cluster's `share` of a batch bound `to`, run through the pipeline on its services
    /// (see [`Handler::run`]), with its reports.
    async fn run_share(
        &self,
        to: Destination,
        share: Share,
        described: &Described,
        work: Work,
    ) -> (Share, Vec<Report>) {
        let records = &share.records;
        let (cluster, config) = match self.cluster_for(&to, records, work).await {
            Ok(found) => found,
            Err(reports) => return (share, reports),
        };
        let pipeline = Pipeline {
            config: &config,
            mode: self.mode,
            store: self.store.as_ref(),
            instances: described,
            nodes: cluster.nodes.as_ref(),
            executor: cluster.executor.as_deref(),
            passes: &self.passes,
            clock: self.clock.as_ref(),
            traffic: self.traffic.as_ref(),
            concurrency: self.concurrency,
            work,
        };
        let reports = pipeline.process(records).await;
        if let Destination::Cluster(Some(id)) = &to {
            let failed = |r: &Report| r.outcome == Outcome::Failed && !r.permanent;
            let failed_whole = !reports.is_empty() && reports.iter().all(failed);
            let (name, now) = (id.to_string(), self.clock.now());
            self.fleet.record_outcome(&name, failed_whole, now);
        }
        (share, reports)
    }

    /// The batch's instances, looked up once for every cluster (within the batch's time; the
    /// blocks' instances, `known`, not again; nor those a mass interruption's lists hold, see
    /// `Fleet::know`), and its records split by destination, with the work each share runs as.
    /// When the served clusters cannot be listed, nothing can be routed: every event fails as a
    /// failed lookup fails it.
    async fn route(
        &self,
        records: &[Record],
        known: &BTreeMap<(Place, String), InstanceFacts>,
        mut work: Work,
    ) -> (BTreeMap<Destination, Share>, Described, Work) {
        let events = crate::app::pipeline::looked_up_events(records);
        let mut listed = self.fleet.listed(&events, self.clock.now());
        listed.extend(known.clone());
        let lookup = describe_events(self.instances.as_ref(), &events, &listed);
        let looked_up = until(self.clock.as_ref(), work.deadline, lookup).await;
        let out_of_time = PortError::new("ec2", FailureKind::Timeout, OUT_OF_TIME);
        let described = looked_up.unwrap_or_else(|| Described::failing(&events, out_of_time));
        let found = described.found.values();
        let seen: Vec<&str> = found.flat_map(InstanceFacts::clusters).collect();
        let now = self.clock.now();
        let served = match self.fleet.served(&self.config, now, &seen).await {
            Ok(served) => served,
            Err(e) => {
                tracing::error!(error = %e, "the served clusters could not be listed");
                let all = Share {
                    records: records.to_vec(),
                    positions: (0..records.len()).collect(),
                };
                let shares = BTreeMap::from([(Destination::Unrouted, all)]);
                return (shares, Described::failing(&events, e), work);
            }
        };
        let shares = split::split(records, &described, (&served, self.fleet.own()));
        // Any batch of a deployment serving several clusters (a batch spanning several is one:
        // every cluster share is a served cluster's): no cluster's outage may hold it up (see
        // `Fleet::backing_off`). The event source mapping's pollers are every cluster's, and a
        // fair queue fills a batch with one cluster's retried records while another's drains
        // wait.
        work.fail_fast = served.len() > 1;
        (shares, described, work)
    }

    /// The cluster a share of `records` bound `to` runs in, and the configuration to decide by
    /// there; or the share's reports when it does not run, every record failed: a cluster that
    /// cannot be reached (it comes back, and the cluster is tried again with the next batch), or
    /// (in a deployment serving several, `work.fail_fast`) one whose last share failed whole,
    /// left alone for a while (its records fail at once and come back no sooner than the break's
    /// end, when they would fail again without a request); a continuation of a cluster not
    /// served, refused for good (a forgery, or a cluster removed from the deployment: it ends in
    /// the dead-letter queue, where it can be read). Outside a served cluster, no cluster:
    /// nothing is acted on.
    async fn cluster_for(
        &self,
        to: &Destination,
        records: &[Record],
        work: Work,
    ) -> Result<(Arc<Cluster>, Config), Vec<Report>> {
        let fail = |why: String, retryable, cluster: Option<String>, not_before| {
            let failed = |r| Report {
                cluster: cluster.clone(),
                retry_not_before: not_before,
                ..Report::new(r).failed_as(why.clone(), retryable)
            };
            records.iter().map(failed).collect::<Vec<_>>()
        };
        let cluster = match to {
            Destination::Cluster(id) => {
                let name = id.as_ref().map(ToString::to_string);
                if let Some(name) = name.clone().filter(|_| work.fail_fast)
                    && let Some(since) = self.fleet.backing_off(&name, self.clock.now())
                {
                    let why = format!(
                        "cluster {name}: its API server failed a whole share of a batch at {} \
                         (down, or not answering): left alone for a few seconds in batches with \
                         other clusters' records; the event comes back shortly",
                        since.to_rfc3339()
                    );
                    return Err(fail(why, true, Some(name), Some(since + BREAK)));
                }
                let cluster = self.fleet.cluster(id.as_ref()).await;
                cluster.map_err(|e| fail(e.to_string(), e.kind.retryable(), name, None))?
            }
            Destination::Elsewhere | Destination::Unrouted => Arc::new(Cluster::none()),
            Destination::NotServed(name) => {
                let why = match name {
                    Some(name) => format!(
                        "a drain's continuation naming cluster {name}, which this deployment \
                         does not serve: refused, nothing done (no client of that cluster is made)"
                    ),
                    None => "a drain's continuation naming no cluster, in a deployment serving \
                             several: refused, nothing done"
                        .to_string(),
                };
                return Err(fail(why, false, None, None));
            }
        };
        let mut config = cluster.config(&self.config, self.clock.as_ref()).await;
        config.unserved = *to == Destination::Elsewhere;
        Ok((cluster, config))
    }

    /// Each report logged (with its metrics when running as a Lambda function) and told to the
    /// notifier, within `deadline`.
    async fn tell(&self, reports: &[Report], deadline: Option<DateTime<Utc>>) {
        self.telemetry.observe(reports, self.clock.now());
        if let Some(notifier) = &self.notifier {
            let due = self.work(deadline).deadline;
            let time_left = due.map(|d| (d - self.clock.now()).to_std().unwrap_or_default());
            notifier.notify(reports, time_left).await;
        }
    }

    /// Handles an SQS batch: every failed record's message id goes in `batchItemFailures`.
    async fn handle_sqs(
        &self,
        batch: &[SqsMessage],
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Invocation, HandlerError> {
        let unnamed = |m: &SqsMessage| m.message_id.as_deref().is_none_or(str::is_empty);
        if let Some(index) = batch.iter().position(unnamed) {
            return Err(HandlerError::NoMessageId { index });
        }
        let now = self.clock.now();
        let mut records = inbound::decode_sqs_messages("sqs", batch, now);
        let own = records.len();
        records.extend(self.kept_due(batch, now));
        let done = tokio::sync::Notify::new();
        let work = async {
            let reports = self.run(&records, deadline).await;
            self.tell(&reports, deadline).await;
            done.notify_one();
            reports
        };
        let mut reports = tokio::join!(work, self.hold(batch, &done)).0;
        // The kept copies' reports are logged; the answer is about the batch's messages.
        reports.truncate(own);
        self.retry_soon(batch, &reports, deadline).await;
        let mut response = SqsBatchResponse::default();
        for report in reports.iter().filter(|r| r.outcome == Outcome::Failed) {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = report.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
        let tally = Tally::of(&reports);
        tracing::info!(
            records = reports.len(),
            acted = tally.acted,
            planned = tally.planned,
            ignored = tally.ignored,
            duplicate = tally.duplicate,
            requeued = tally.requeued,
            failed = tally.failed,
            "batch handled"
        );
        let response = serde_json::to_value(&response).map_err(HandlerError::Answer)?;
        Ok(Invocation { response, reports })
    }

    /// The copies of continuations this environment kept that are due by `now` (see
    /// [`crate::app::pipeline::kept`]), as records run beside the batch's `messages`; a copy
    /// whose queued twin is among them is dropped.
    fn kept_due(&self, messages: &[SqsMessage], now: DateTime<Utc>) -> Vec<Record> {
        let Some(kept) = &self.passes.kept else {
            return Vec::new();
        };
        let due = kept.take_due(now, |body| {
            messages.iter().any(|m| m.body.as_deref() == Some(body))
        });
        let copies: Vec<SqsMessage> = due
            .into_iter()
            .map(|k| SqsMessage {
                body: Some(k.body),
                event_source_arn: Some(k.queue_arn),
                ..Default::default()
            })
            .collect();
        let mut records = inbound::decode_sqs_messages("kept", &copies, now);
        records.iter_mut().for_each(|r| r.kept = true);
        records
    }

    /// Keeps the `batch`'s messages invisible [`LEASE`] at a time while it is worked on (with a
    /// [`Redelivery`]), until `done`: set at once (the queue's visibility timeout, 900 s in the
    /// stack, is not what a dead invocation's messages wait out), and renewed every half lease.
    /// Runs beside the work, so the first cordon does not wait for it. Whatever ends the
    /// invocation without an answer (out of memory, a panic, the deadline) leaves its messages
    /// visible again within a lease of the last renewal. A renewal that fails is logged: the
    /// messages may then come back while still worked on, and are handled again as any
    /// duplicate is.
    async fn hold(&self, batch: &[SqsMessage], done: &tokio::sync::Notify) {
        let messages: Vec<Redeliver> = batch.iter().filter_map(lease).collect();
        let Some(redelivery) = self.redelivery.as_deref().filter(|_| !messages.is_empty()) else {
            return;
        };
        loop {
            // A renewal is never cut short by the work's end (the failed messages' own
            // visibility, set after the hold, is the last word), only by half a lease.
            let next = self.clock.now() + span(LEASE / 2);
            let then = "they may come back while still worked on";
            self.redeliver(redelivery, &messages, next, then).await;
            tokio::select! {
                biased;
                () = done.notified() => return,
                () = self.clock.alarm(next) => {}
            }
        }
    }

    /// Sets the visibility of `messages` (see [`Redelivery`]), giving up at `by`: best effort,
    /// what could not be set logged with what the messages do `then`.
    async fn redeliver(
        &self,
        redelivery: &dyn Redelivery,
        messages: &[Redeliver],
        by: DateTime<Utc>,
        then: &str,
    ) {
        let changing = until(self.clock.as_ref(), by, redelivery.redeliver(messages));
        match changing.await {
            Some(Ok(())) => tracing::debug!(messages = messages.len(), "messages' visibility set"),
            Some(Err(e)) => tracing::warn!(error = %e, "messages' visibility not all set: {then}"),
            None => tracing::warn!("setting messages' visibility timed out: {then}"),
        }
    }

    /// Shortens the visibility of every message reported failed, by [`retry::delay`] (with a
    /// [`Redelivery`]). Best effort, within the invocation's deadline (the safety margin is
    /// there for the answer and this call) and at most 10 s: a message whose visibility could
    /// not be changed still comes back, after the queue's visibility timeout.
    async fn retry_soon(
        &self,
        batch: &[SqsMessage],
        reports: &[Report],
        deadline: Option<DateTime<Utc>>,
    ) {
        let Some(redelivery) = self.redelivery.as_deref() else {
            return;
        };
        let now = self.clock.now();
        // One report per message of the batch, in its order.
        let failed = batch.iter().zip(reports);
        let failed = failed.filter(|(_, r)| r.outcome == Outcome::Failed);
        let messages: Vec<Redeliver> = failed
            .filter_map(|(message, report)| {
                let receives = message.attributes.get("ApproximateReceiveCount");
                let receives = receives.and_then(|n| n.parse::<u32>().ok()).unwrap_or(1);
                if report.permanent {
                    tracing::error!(
                        message_id = report.message_id.as_deref().unwrap_or_default(),
                        reason = report.reason.as_deref().unwrap_or_default(),
                        "a refusal that trying again will meet again: the message comes back slowly"
                    );
                }
                let delay = retry::delay(report, &self.config, receives, now);
                Some(Redeliver {
                    delay,
                    ..lease(message)?
                })
            })
            .collect();
        if messages.is_empty() {
            return;
        }
        let limit = deadline
            .map(|d| (d - now).to_std().unwrap_or_default())
            .unwrap_or(Duration::MAX)
            .clamp(Duration::from_millis(500), Duration::from_secs(10));
        let then = "they come back after the queue's visibility timeout";
        self.redeliver(redelivery, &messages, now + span(limit), then)
            .await;
    }

    /// Handles whatever Lambda passed: an SQS batch or a bare EventBridge event.
    pub async fn invoke(
        &self,
        mut payload: Value,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Invocation, HandlerError> {
        if let Some(records) = payload.get_mut("Records").map(Value::take) {
            // Lambda's SQS event: its messages as the way in reads them (their other fields,
            // `messageAttributes`, `md5OfBody`, `awsRegion`..., are not used).
            let batch: Vec<SqsMessage> =
                serde_json::from_value(records).map_err(HandlerError::NotSqs)?;
            return self.handle_sqs(&batch, deadline).await;
        }
        if !payload.is_object() {
            return Err(HandlerError::NotAnObject);
        }
        let records = inbound::decode_value("eventbridge", payload, self.clock.now())
            .map_err(HandlerError::NotAnEvent)?;
        let reports = self.run(&records, deadline).await;
        self.tell(&reports, deadline).await;
        if let Some(failed) = reports.iter().find(|r| r.outcome == Outcome::Failed) {
            let origin = failed.event_id.as_ref().unwrap_or(&failed.origin).clone();
            let reason = failed.reason.clone().unwrap_or_default();
            return Err(HandlerError::EventFailed { origin, reason });
        }
        let response = serde_json::to_value(&reports).map_err(HandlerError::Answer)?;
        Ok(Invocation { response, reports })
    }
}

/// How long a batch's messages stay invisible at a time while the handler works on them
/// (renewed every half of it, see `Handler::hold`): what a dead invocation's messages wait
/// before another invocation gets them. Lambda's own hold is the queue's visibility timeout
/// (900 s in the stack, six times the function's timeout, as Lambda requires).
pub const LEASE: Duration = Duration::from_secs(20);

/// The lease of a batch's message: held [`LEASE`] (a message without an id, a receipt handle or
/// a queue cannot be held).
fn lease(m: &SqsMessage) -> Option<Redeliver> {
    Some(Redeliver {
        queue_arn: m.event_source_arn.clone()?,
        receipt_handle: m.receipt_handle.clone()?,
        message_id: m.message_id.clone()?,
        delay: LEASE,
    })
}

/// Epoch milliseconds before this are not an epoch deadline (2001-09-09).
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// The deadline of a Lambda invocation (epoch milliseconds), received at `now`. Lambda sends an
/// epoch time; cargo-lambda's local emulator sends the timeout itself (e.g. `600000`), which is
/// taken as time left from now, so that a local replay is bounded the same way.
pub fn deadline_from_epoch_ms(deadline_ms: u64, now: DateTime<Utc>) -> DateTime<Utc> {
    let deadline = if deadline_ms < EPOCH_MS_FLOOR {
        now + span(Duration::from_millis(deadline_ms))
    } else {
        i64::try_from(deadline_ms)
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .unwrap_or(now)
    };
    tracing::debug!(
        deadline_ms,
        time_left_ms = (deadline - now).num_milliseconds(),
        "invocation deadline"
    );
    deadline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::EmbeddedStore;
    use serde_json::json;

    fn handler(dir: &std::path::Path) -> Handler {
        Handler {
            clock: crate::adapters::clock::ManualClock::at("2026-11-20T10:01:00Z".parse().unwrap())
                .shared(),
            concurrency: 4,
            ..Handler::new(
                Config::default(),
                Arc::new(EmbeddedStore::open(dir).unwrap()),
            )
        }
    }

    fn spot(id: &str) -> String {
        json!({"id": id, "source": "aws.ec2", "detail-type": crate::domain::event::DT_SPOT,
               "time": "2026-11-20T10:00:00Z", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}})
        .to_string()
    }

    /// A share of a cluster in trouble, in a batch of several clusters, fails at once: to come
    /// back, no sooner than its break's end; a continuation of a cluster not served, for good.
    #[tokio::test]
    async fn a_share_left_alone_fails_until_its_break_ends() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let since = h.clock.now();
        h.fleet.record_outcome("blue", true, since);
        let batch = [spot("e1"), spot("e2")].map(|s| serde_json::from_str::<Value>(&s).unwrap());
        let records = inbound::decode_value("t", json!(batch), since).unwrap();
        let blue = crate::domain::clusters::ClusterId::parse("blue").ok();
        let blue = Destination::Cluster(blue);
        let work = Work {
            fail_fast: true,
            ..Work::default()
        };
        let refused = h.cluster_for(&blue, &records, work).await;
        let reports = refused.err().unwrap();
        assert_eq!(reports.len(), 2);
        for r in &reports {
            assert_eq!(r.outcome, Outcome::Failed);
            assert!(!r.permanent);
            assert_eq!(r.cluster.as_deref(), Some("blue"));
            assert_eq!(r.retry_not_before, Some(since + BREAK), "{r:?}");
        }
        // A continuation naming a cluster not served is refused for good, with why.
        let attacker = Destination::NotServed(Some("attacker".into()));
        let refused = h
            .cluster_for(&attacker, &records, work)
            .await
            .err()
            .unwrap();
        assert_eq!(refused[0].outcome, Outcome::Failed);
        assert!(refused[0].permanent, "it ends in the dead-letter queue");
        let why = refused[0].reason.as_deref().unwrap_or_default();
        assert!(
            why.contains("cluster attacker, which this deployment does not serve"),
            "{why}"
        );
    }

    #[test]
    fn deadlines_from_lambda_and_from_the_local_emulator() {
        let now: DateTime<Utc> = "2026-11-20T10:01:00Z".parse().unwrap();
        let in_a_minute = u64::try_from(now.timestamp_millis()).unwrap() + 60_000;
        let left = deadline_from_epoch_ms(in_a_minute, now) - now;
        assert_eq!(left, chrono::Duration::seconds(60));
        let past = deadline_from_epoch_ms(in_a_minute - 120_000, now) - now;
        assert_eq!(
            past,
            chrono::Duration::seconds(-60),
            "a past deadline is past"
        );
        let relative = deadline_from_epoch_ms(600_000, now) - now;
        assert_eq!(relative, chrono::Duration::seconds(600));
    }

    #[tokio::test]
    async fn partial_batch_response_names_only_failed_messages() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let payload = json!({"Records": [
            {"messageId": "ok", "body": spot("e1")},
            {"messageId": "bad", "body": "{oops"},
            {"messageId": "other", "body": "{\"detail-type\": \"Something\"}"},
        ]});
        let inv = h.invoke(payload, None).await.unwrap();
        assert_eq!(
            inv.response,
            json!({"batchItemFailures": [{"itemIdentifier": "bad"}]})
        );
        assert_eq!(inv.reports[2].outcome, Outcome::Ignored);
    }

    /// What a handler sent to its queue: (queue, group, body); failing every send when told.
    #[derive(Default)]
    struct Sent(std::sync::Mutex<Vec<(String, String, String)>>, bool);

    #[async_trait::async_trait]
    impl crate::ports::ContinuationQueue for Sent {
        async fn send(
            &self,
            queue_arn: &str,
            group: &str,
            body: &str,
            _delay: Duration,
        ) -> Result<(), PortError> {
            if self.1 {
                return Err(PortError::new("sqs", FailureKind::Throttled, "slow down"));
            }
            let sent = (queue_arn.into(), group.into(), body.into());
            self.0.lock().unwrap().push(sent);
            Ok(())
        }
    }

    /// A batch holding more messages of one cluster than an invocation takes on: the
    /// first are handled, the others sent back as they came, in the cluster's message group,
    /// and acknowledged only once sent (a send that fails fails its message, to come back).
    /// The handler is given `takes_per_cluster` here; the wiring gives it to a deployment of
    /// several clusters only (see `triage::takes`).
    #[tokio::test]
    async fn a_busy_clusters_first_time_events_past_what_is_taken_go_back_to_the_queue() {
        const ARN: &str = "arn:aws:sqs:us-east-1:123456789012:forewarn-events";
        let warning = |n: u32| {
            json!({"id": format!("e{n}"), "source": "aws.ec2",
                   "detail-type": crate::domain::event::DT_SPOT, "time": "2026-11-20T10:00:00Z",
                   "detail": {"instance-id": format!("i-0a1b2c3d4e5f6000{n}")}})
            .to_string()
        };
        let payload = json!({"Records": (1..=4).map(|n| json!({
            "messageId": format!("m{n}"), "body": warning(n), "eventSourceARN": ARN,
            "receiptHandle": format!("r{n}")})).collect::<Vec<_>>()});
        for failing in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let queue = Arc::new(Sent(Default::default(), failing));
            let mut h = handler(dir.path());
            h.passes.queue = Some(queue.clone());
            h.takes_per_cluster = Some(2);
            let inv = h.invoke(payload.clone(), None).await.unwrap();
            let outcomes: Vec<Outcome> = inv.reports.iter().map(|r| r.outcome).collect();
            let later = if failing {
                Outcome::Failed
            } else {
                Outcome::Requeued
            };
            assert_eq!(outcomes[2..], [later, later], "{:#?}", inv.reports);
            assert!(!outcomes[..2].contains(&later), "{:#?}", inv.reports);
            let why = inv.reports[3].reason.as_deref().unwrap_or_default();
            assert!(why.contains("message group forewarn"), "{why}");
            if failing {
                assert_eq!(
                    inv.response,
                    json!({"batchItemFailures": [{"itemIdentifier": "m3"}, {"itemIdentifier": "m4"}]})
                );
                assert!(why.contains("slow down"), "{why}");
                continue;
            }
            assert_eq!(inv.response, json!({"batchItemFailures": []}));
            let sent = queue.0.lock().unwrap().clone();
            let group = "forewarn".to_string();
            // Each a warning marked triaged, the original inside (see `triaged_body`).
            let triaged = |n| crate::domain::inbound::sqs::triaged_body(&warning(n), "served");
            assert_eq!(
                sent,
                [
                    (ARN.into(), group.clone(), triaged(3)),
                    (ARN.into(), group, triaged(4))
                ]
            );
        }
        // Without a queue to send them back to (a replay), every one is taken on.
        let dir = tempfile::tempdir().unwrap();
        let mut h = handler(dir.path());
        h.takes_per_cluster = Some(2);
        let inv = h.invoke(payload, None).await.unwrap();
        assert!(inv.reports.iter().all(|r| r.outcome != Outcome::Requeued));
    }

    fn hook_notification(event: &str, token: Option<&str>) -> String {
        let mut v = json!({
            "Origin": "AutoScalingGroup", "LifecycleHookName": "forewarn-drain",
            "Destination": "EC2", "AccountId": "123456789012", "RequestId": "5e1f0c3a",
            "AutoScalingGroupName": "eks-demo-ng-1", "Service": "AWS Auto Scaling",
            "Time": "2026-11-20T10:01:20.187Z", "EC2InstanceId": "i-0a1b2c3d4e5f60009",
        });
        if event == crate::domain::event::autoscaling::ASG_TEST_NOTIFICATION {
            v["Event"] = json!(event);
        } else {
            v["LifecycleTransition"] = json!(event);
        }
        if let Some(token) = token {
            v["LifecycleActionToken"] = json!(token);
        }
        v.to_string()
    }

    #[tokio::test]
    async fn partial_batch_response_on_hook_notifications_test_notifications_and_warnings() {
        use crate::domain::event::EventKind;
        use crate::domain::event::autoscaling::{ASG_TERMINATING, ASG_TEST_NOTIFICATION};
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let eventbridge_test = json!({
            "version": "0", "id": "d3f5a7c9", "source": "aws.autoscaling",
            "detail-type": crate::domain::event::DT_ASG_TERMINATE,
            "time": "2026-11-20T10:01:32Z",
            "detail": {"AutoScalingGroupName": "eks-demo-ng-1", "Event": ASG_TEST_NOTIFICATION}
        })
        .to_string();
        let payload = json!({"Records": [
            {"messageId": "hook", "body": hook_notification(ASG_TERMINATING, Some("tok-1")),
             "attributes": {"SentTimestamp": "1795168880214"}},
            {"messageId": "test", "body": hook_notification(ASG_TEST_NOTIFICATION, None)},
            {"messageId": "eb-test", "body": eventbridge_test},
            {"messageId": "warning", "body": spot("e1")},
            {"messageId": "launch", "body": hook_notification("autoscaling:EC2_INSTANCE_LAUNCHING", Some("tok-2"))},
            {"messageId": "no-token", "body": hook_notification(ASG_TERMINATING, None)},
        ]});
        let inv = h.invoke(payload.clone(), None).await.unwrap();
        assert_eq!(
            inv.response,
            json!({"batchItemFailures": [{"itemIdentifier": "no-token"}]}),
            "only the hook notification without a token comes back"
        );
        let outcomes: Vec<(Option<&str>, Outcome)> = inv
            .reports
            .iter()
            .map(|r| (r.message_id.as_deref(), r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            vec![
                (Some("hook"), Outcome::Planned),
                (Some("test"), Outcome::Ignored),
                (Some("eb-test"), Outcome::Ignored),
                (Some("warning"), Outcome::Planned),
                (Some("launch"), Outcome::Planned),
                (Some("no-token"), Outcome::Failed),
            ]
        );
        let hook = &inv.reports[0];
        assert_eq!(hook.kind, Some(EventKind::AsgTermination));
        assert_eq!(hook.event_id.as_deref(), Some("lifecycle-action:tok-1"));
        let launch = &inv.reports[4];
        assert_eq!(launch.kind, Some(EventKind::AsgLaunch));
        assert_eq!(launch.event_id.as_deref(), Some("lifecycle-action:tok-2"));
        for r in &inv.reports[1..3] {
            let reason = r.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("test notification"), "{reason}");
        }
        let failed = inv.reports[5].reason.as_deref().unwrap_or_default();
        assert!(
            failed.contains("field `LifecycleActionToken`: missing"),
            "{failed}"
        );
        assert!(failed.contains("messageId no-token"), "{failed}");

        // Delivered again: the hook notification is a duplicate (its id is its token's).
        let again = h.invoke(payload, None).await.unwrap();
        assert_eq!(again.reports[0].outcome, Outcome::Duplicate);
    }

    #[tokio::test]
    async fn a_message_without_id_fails_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let payload = json!({"Records": [{"body": spot("e1")}]});
        let err = h.invoke(payload, None).await.unwrap_err();
        assert!(
            matches!(err, HandlerError::NoMessageId { index: 0 }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn bare_eventbridge_events() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let inv = h
            .invoke(serde_json::from_str(&spot("e9")).unwrap(), None)
            .await
            .unwrap();
        assert_eq!(inv.reports[0].outcome, Outcome::Planned);
        let err = h
            .invoke(json!({"id": "x", "source": "aws.ec2", "detail-type": crate::domain::event::DT_SPOT, "time": "2026-11-20T10:00:00Z", "detail": {}}), None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("detail.instance-id"), "{err}");
        assert!(h.invoke(json!([1]), None).await.is_err());
    }

    /// Records each call: what it is asked to redeliver.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<Vec<Redeliver>>>);

    #[async_trait::async_trait]
    impl Redelivery for Recorder {
        async fn redeliver(&self, messages: &[Redeliver]) -> Result<(), crate::ports::PortError> {
            self.0.lock().unwrap().push(messages.to_vec());
            Ok(())
        }
    }

    impl Recorder {
        /// The batch's lease (the first call: every message held [`LEASE`]) and the failed
        /// messages brought back (the last call), checking that there was nothing else (the
        /// manual clock did not move half a lease on).
        fn lease_and_retries(&self) -> (Vec<Redeliver>, Vec<Redeliver>) {
            let calls = self.0.lock().unwrap().clone();
            let [lease, retries] = &calls[..] else {
                panic!("a lease and the retries: {calls:#?}");
            };
            assert!(lease.iter().all(|m| m.delay == LEASE), "{lease:#?}");
            (lease.clone(), retries.clone())
        }
    }

    /// A batch's messages are held a lease at a time while it is worked on: at once, then
    /// every half lease on the handler's clock, and no more once the work is done (so the
    /// failed messages' own visibility, set after it, is the last word).
    #[tokio::test]
    async fn a_batch_is_held_a_lease_at_a_time_while_it_is_worked_on() {
        let dir = tempfile::tempdir().unwrap();
        let clock =
            crate::adapters::clock::ManualClock::at("2026-11-20T10:00:10Z".parse().unwrap());
        let recorder = Arc::new(Recorder::default());
        let h = Handler {
            clock: clock.shared(),
            redelivery: Some(recorder.clone()),
            ..handler(dir.path())
        };
        let batch: Vec<SqsMessage> = serde_json::from_value(json!([
            {"messageId": "a", "receiptHandle": "rh-a", "body": "{}", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"},
            {"messageId": "b", "receiptHandle": "rh-b", "body": "{}", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"},
            {"messageId": "kept", "body": "{}"}
        ]))
        .unwrap();
        let messages: Vec<Redeliver> = batch.iter().filter_map(lease).collect();
        assert_eq!(
            messages.len(),
            2,
            "a message without a receipt handle is not held"
        );
        let done = tokio::sync::Notify::new();
        let work = async {
            // 25 s of work, in steps: the lease is renewed at 10 s and at 20 s.
            for _ in 0..5 {
                tokio::task::yield_now().await;
                clock.advance(LEASE / 4);
                tokio::task::yield_now().await;
            }
            done.notify_one();
        };
        tokio::join!(work, h.hold(&batch, &done));
        let calls = recorder.0.lock().unwrap().clone();
        assert_eq!(calls.len(), 3, "{calls:#?}");
        for call in &calls {
            let held: Vec<(&str, &str, Duration)> = call
                .iter()
                .map(|m| (m.message_id.as_str(), m.receipt_handle.as_str(), m.delay))
                .collect();
            assert_eq!(held, [("a", "rh-a", LEASE), ("b", "rh-b", LEASE)]);
        }
    }

    /// A store whose reads fail with this kind of failure: every supported event of a batch
    /// fails its lookups.
    struct Unreachable(crate::ports::FailureKind);

    #[async_trait::async_trait]
    impl PoolStore for Unreachable {
        async fn applied(
            &self,
            _: &[String],
        ) -> Result<std::collections::HashSet<String>, crate::ports::PortError> {
            Err(crate::ports::PortError::store(
                "test",
                self.0,
                "unreachable",
            ))
        }
        async fn apply(
            &self,
            _: &crate::domain::plan::Plan,
            _: DateTime<Utc>,
        ) -> Result<crate::domain::pool::Applied, crate::ports::PortError> {
            unreachable!("lookups fail first")
        }
        async fn pools(
            &self,
            _: &crate::domain::pool::PoolQuery,
            _: DateTime<Utc>,
        ) -> Result<Vec<crate::domain::pool::PoolRecord>, crate::ports::PortError> {
            Ok(Vec::new())
        }
        async fn history(
            &self,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Vec<crate::domain::pool::HistoryEntry>, crate::ports::PortError> {
            Ok(Vec::new())
        }
        async fn history_of(
            &self,
            _: &[crate::domain::pool::PoolKey],
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Vec<crate::domain::pool::HistoryEntry>, crate::ports::PortError> {
            unreachable!("lookups fail first")
        }
        async fn continuation_keys(
            &self,
        ) -> Result<crate::domain::keys::KeyRing, crate::ports::PortError> {
            unreachable!("lookups fail first")
        }
        async fn reread_continuation_keys(
            &self,
        ) -> Result<Option<crate::domain::keys::KeyRing>, crate::ports::PortError> {
            unreachable!("lookups fail first")
        }
        async fn rotate_continuation_key(
            &self,
        ) -> Result<crate::domain::keys::KeyRing, crate::ports::PortError> {
            unreachable!("lookups fail first")
        }
        fn location(&self) -> String {
            "test".into()
        }
    }

    #[tokio::test]
    async fn failed_messages_are_brought_back_by_the_retry_policy() {
        let dir = tempfile::tempdir().unwrap();
        let recorder = Arc::new(Recorder::default());
        let mut h = handler(dir.path());
        h.redelivery = Some(recorder.clone());
        h.store = Arc::new(Unreachable(crate::ports::FailureKind::Connection));
        // A day after the warnings of 2026-11-20: their windows are over.
        h.clock = crate::adapters::clock::ManualClock::at("2026-11-21T10:00:00Z".parse().unwrap())
            .shared();
        let arn = "arn:aws:sqs:us-east-1:123456789012:events";
        let message = |id: &str, body: String, receives: &str| {
            json!({"messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                   "eventSourceARN": arn, "attributes": {"ApproximateReceiveCount": receives}})
        };
        let payload = json!({"Records": [
            message("junk", "{oops".into(), "1"),
            message("late", spot("e-late"), "2"),
            message("other", "{\"detail-type\": \"Something\"}".into(), "1"),
        ]});
        let inv = h.invoke(payload, None).await.unwrap();
        assert_eq!(
            inv.response,
            json!({"batchItemFailures": [{"itemIdentifier": "junk"}, {"itemIdentifier": "late"}]})
        );
        let (lease, asked) = recorder.lease_and_retries();
        // Every message of the batch was held while it was worked on.
        let held: Vec<&str> = lease.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(held, ["junk", "late", "other"]);
        let by_id: std::collections::BTreeMap<&str, &Redeliver> =
            asked.iter().map(|m| (m.message_id.as_str(), m)).collect();
        assert_eq!(by_id.len(), 2, "{asked:?}");
        // a record that cannot be decoded comes back at once, to reach the DLQ
        assert_eq!(by_id["junk"].delay, Duration::ZERO);
        assert_eq!(by_id["junk"].receipt_handle, "rh-junk");
        assert_eq!(by_id["junk"].queue_arn, arn);
        // a warning whose window is over (2026-11-20) comes back slowly
        assert_eq!(by_id["late"].delay, retry::AFTER_WINDOW);
    }

    /// Inside a warning's window, a failure that may pass comes back within seconds; a refusal
    /// that the same call meets again (access denied) comes back at the slow pace from the
    /// first receive, and its report says so.
    #[tokio::test]
    async fn a_refusal_comes_back_slowly_even_inside_the_window() {
        use crate::ports::FailureKind;
        let arn = "arn:aws:sqs:us-east-1:123456789012:events";
        let payload = json!({"Records": [{"messageId": "m", "receiptHandle": "rh", "body": spot("e-1"),
            "eventSourceARN": arn, "attributes": {"ApproximateReceiveCount": "1"}}]});
        let mut delays = Vec::new();
        for kind in [FailureKind::Connection, FailureKind::Forbidden] {
            let dir = tempfile::tempdir().unwrap();
            let recorder = Arc::new(Recorder::default());
            let mut h = handler(dir.path());
            h.redelivery = Some(recorder.clone());
            h.store = Arc::new(Unreachable(kind));
            // 10 s into the warning of 2026-11-20T10:00:00Z: its window is open.
            h.clock =
                crate::adapters::clock::ManualClock::at("2026-11-20T10:00:10Z".parse().unwrap())
                    .shared();
            let inv = h.invoke(payload.clone(), None).await.unwrap();
            assert_eq!(inv.reports[0].outcome, Outcome::Failed);
            assert_eq!(inv.reports[0].permanent, !kind.retryable(), "{kind:?}");
            let (_, asked) = recorder.lease_and_retries();
            assert_eq!(asked.len(), 1, "{asked:?}");
            delays.push(asked[0].delay);
        }
        assert_eq!(delays, vec![retry::FIRST, retry::AFTER_WINDOW]);
    }
}
