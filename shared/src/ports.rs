//! The traits the interruption path talks through, with their one error ([`PortError`]): the
//! clock, the pool store, the instance and node directories, the executor of node actions, the
//! load balancers, the continuation queue and redelivery, the completer of ASG lifecycle
//! actions, the notifier (webhook), the policy ConfigMap, the cluster catalog and each
//! cluster's priority expander. The adapters implement them; the application holds them as
//! `dyn` objects, so that tests can put fakes in their place. A port only another feature uses
//! lives with its consumer: `app::audit` (workloads), `app::leaving` (leaving instances),
//! `app::priorities` (node groups).

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use crate::domain::clusters::ClusterId;
use crate::domain::event::LifecycleAction;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::keys::KeyRing;
use crate::domain::plan::Plan;
pub use crate::domain::plan::pass::{DrainRole, Pass};
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolKey, PoolQuery, PoolRecord};
use crate::domain::report::{DrainSummary, Report};

/// What a call through a port is part of: the work under way, and when it must be over (a
/// Lambda invocation's deadline less its margin). Given to the adapters that retry: they retry
/// transient failures inside the work until its deadline, instead of giving up after a few
/// attempts. `deadline: None` (the default): no deadline is known (a replay, the command line,
/// a test), and adapters keep their few attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    pub deadline: Option<DateTime<Utc>>,
    /// An outage is not ridden out inside this work: a failure of the service (5xx, no answer)
    /// is not retried, and the event comes back instead; a throttle is still waited. Set for a
    /// cluster's share of a batch that spans several clusters, so that one cluster's outage
    /// holds up no invocation, and so no other cluster's records (see [`crate::app::fleet`]).
    pub fail_fast: bool,
}

/// The one clock: "now" for every decision, and every wait. Production reads the system clock
/// ([`crate::adapters::clock::SystemClock`]); tests use a clock they set and advance
/// (`adapters::clock::ManualClock`, a test support), so nothing in them sleeps for real.
#[async_trait]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now.
    fn now(&self) -> DateTime<Utc>;

    /// Lets `d` pass: a pause between two passes, a backoff, a poll. (A manual clock moves on
    /// by `d` at once.)
    async fn sleep(&self, d: std::time::Duration);

    /// Resolves once `at` has come: the alarm of a deadline, raced against the work it bounds.
    /// (A manual clock does not move on for it: it rings when something else moves the clock
    /// past `at`.)
    async fn alarm(&self, at: DateTime<Utc>);
}

/// `work`, unless `deadline` comes first on `clock` (then `None`; the work is dropped). No
/// deadline: the work always ends in time.
pub async fn until<F: std::future::Future>(
    clock: &dyn Clock,
    deadline: impl Into<Option<DateTime<Utc>>>,
    work: F,
) -> Option<F::Output> {
    let Some(deadline) = deadline.into() else {
        return Some(work.await);
    };
    tokio::select! {
        biased;
        out = work => Some(out),
        () = clock.alarm(deadline) => None,
    }
}

/// `d` from `from` as a `chrono` span (saturating: a span too long for `chrono` is ten years).
pub fn span(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or_else(|_| chrono::Duration::days(3650))
}

/// A call through a port that failed: what was called or acted on (`subject`: the call
/// `ec2:DescribeInstances`, the instance whose action failed, the queue, `pool store at T`), what
/// it was doing when the subject does not say it (`configmap/N/M`, `node N`), the kind of failure
/// and what the adapter met: `{subject}: [{doing}: ]{source}`. The causes a caller acts on are
/// typed errors in the chain of sources: an account not served ([`NotServed`]) or not reached
/// ([`AccountUnreachable`]), a malformed store item ([`Corrupt`]).
#[derive(Debug, thiserror::Error)]
#[error("{subject}: {}{source}", doing.as_deref().map(|d| format!("{d}: ")).unwrap_or_default())]
pub struct PortError {
    pub subject: String,
    pub doing: Option<String>,
    /// What kind of failure: whether the call is worth trying again.
    pub kind: FailureKind,
    /// The adapter's error, or the text of what went wrong.
    #[source]
    pub source: BoxError,
}

impl PortError {
    /// `source`, met by `subject`; its kind is `kind`.
    pub fn new(
        subject: impl Into<String>,
        kind: FailureKind,
        source: impl Into<BoxError>,
    ) -> PortError {
        PortError {
            subject: subject.into(),
            doing: None,
            kind,
            source: source.into(),
        }
    }

    /// The same error, met while doing `doing`.
    pub fn doing(self, doing: impl std::fmt::Display) -> PortError {
        let doing = Some(doing.to_string());
        PortError { doing, ..self }
    }

    /// `source`, met by the pool store at `location`; its kind is `kind`.
    pub fn store(
        location: impl std::fmt::Display,
        kind: FailureKind,
        source: impl Into<BoxError>,
    ) -> PortError {
        PortError::new(format!("pool store at {location}"), kind, source)
    }

    /// The pool store's item `key`, malformed as `message` says ([`Corrupt`]: reading it again
    /// gives the same).
    pub fn corrupt(key: impl std::fmt::Display, message: impl std::fmt::Display) -> PortError {
        let (key, message) = (key.to_string(), message.to_string());
        PortError::new("pool store", FailureKind::Invalid, Corrupt { key, message })
    }

    /// `report` failed with this error, retryable as its kind says (see [`Report::failed_as`]).
    pub fn fail(&self, report: Report) -> Report {
        report.failed_as(self.to_string(), self.kind.retryable())
    }

    /// The first error of type `T` in the chain of sources: an account not served
    /// ([`NotServed`]) or not reached ([`AccountUnreachable`]) when that is why it failed.
    pub fn cause<T: std::error::Error + 'static>(&self) -> Option<&T> {
        let first: &(dyn std::error::Error + 'static) = self.source.as_ref();
        let mut chain = std::iter::successors(Some(first), |e| e.source());
        chain.find_map(|e| e.downcast_ref::<T>())
    }
}

/// An item of the pool store that does not read as what it should be: reading it again gives
/// the same (the source of a [`PortError::corrupt`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("item `{key}` is malformed: {message}")]
pub struct Corrupt {
    pub key: String,
    pub message: String,
}

/// An account this deployment does not serve: an event of another account than its own, and
/// either no member role is configured, or the served clusters name none of that account's
/// clusters. What an adapter answers, as the source of its error, for a lookup in such an
/// account: it is not this deployment's to handle, so its events are acknowledged, nothing is
/// done for them and their pools are not recorded. (An account that *is* served but cannot be
/// reached is [`AccountUnreachable`]: its events fail.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("account {account} is not served by this deployment: {why}")]
pub struct NotServed {
    pub account: String,
    /// Why it is not served.
    pub why: String,
}

/// A member account this deployment serves (the served clusters name its clusters) that it
/// cannot reach: STS refuses its member role (the role was deleted or re-created, its trust no
/// longer names this deployment's handler role, an SCP denies `sts:AssumeRole`, IAM has not yet
/// propagated a new role), or the role refuses the lookups made there. What an adapter answers,
/// as the source of its error: the account's events fail as retryable — retried within their
/// window, then kept in the dead-letter queue — and never acknowledged; the handler counts
/// them in the `AccountUnreachable` metric, by account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "account {account} is served but cannot be reached through its member role {role}: {why}; \
     the event is retried, then kept in the dead-letter queue (deploy infra/member.yaml in that \
     account, trusting this deployment's handler role)"
)]
pub struct AccountUnreachable {
    pub account: String,
    /// The member role's ARN.
    pub role: String,
    /// What STS or the service said.
    pub why: String,
}

/// What kind of failure an adapter met, as it can tell from the answer (an HTTP status, an AWS
/// error code) or its absence: what decides whether the same call, tried again, may succeed
/// ([`FailureKind::retryable`]). The adapters set it where they build their errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailureKind {
    /// The service asked to slow down (HTTP 429, AWS throttling codes).
    Throttled,
    /// The call, or the service behind it, timed out (HTTP 408, 504).
    Timeout,
    /// The service failed (HTTP 5xx).
    Unavailable,
    /// No answer: the connection could not be made, or broke.
    Connection,
    /// Concurrent writers kept conflicting (a transaction conflict, a node that keeps changing).
    Contention,
    /// The request was refused as invalid (HTTP 400, 422; a validation error), could not be
    /// built, or what was read is malformed.
    Invalid,
    /// The credentials were refused as expired or missing (HTTP 401, an expired token): the
    /// next call signs with credentials (and an EKS token) made anew.
    Unauthenticated,
    /// Not allowed (HTTP 403; access denied, credentials that are not valid).
    Forbidden,
    /// What the call names does not exist (HTTP 404, 410).
    NotFound,
    /// A condition of the write does not hold (HTTP 409, 412; a conditional-check failure).
    Conflict,
    /// Anything else: not known to pass by itself, nor known not to.
    #[default]
    Unknown,
}

impl FailureKind {
    /// Whether the same call, tried again later, may succeed: true for throttling, timeouts,
    /// 5xx, connection failures, contention and expired credentials (made anew for the next
    /// call), and — as every failure was retried before kinds
    /// were known — for an unknown failure; false for validation, forbidden, not found and
    /// conditional-check failures, which the same call meets again.
    pub fn retryable(self) -> bool {
        use FailureKind::*;
        !matches!(self, Invalid | Forbidden | NotFound | Conflict)
    }

    /// The kind of an answer with this HTTP status (an error status; `Unknown` otherwise).
    pub fn of_status(status: u16) -> FailureKind {
        match status {
            429 => FailureKind::Throttled,
            408 | 504 => FailureKind::Timeout,
            500..=599 => FailureKind::Unavailable,
            401 => FailureKind::Unauthenticated,
            403 => FailureKind::Forbidden,
            404 | 410 => FailureKind::NotFound,
            409 | 412 => FailureKind::Conflict,
            400..=499 => FailureKind::Invalid,
            _ => FailureKind::Unknown,
        }
    }
}

/// The AWS account and region an event comes from (see [`crate::domain::clusters::Place`]).
pub use crate::domain::clusters::Place;

/// Where facts about instances come from: EC2 `DescribeInstances`, or a capture.
#[async_trait]
pub trait InstanceDirectory: Send + Sync {
    /// Facts for the instances it knows among `instance_ids`, in the account and region of
    /// `place` (one call for the whole batch; a directory of one account and region, or a
    /// capture, describes every place alike; the default place is the directory's own).
    async fn describe(
        &self,
        place: &Place,
        instance_ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError>;

    /// The Capacity Block `reservation_id` in the account and region of `place` and its
    /// instances, every state (EC2: one `DescribeCapacityReservations` and one
    /// `DescribeInstances` filtered on `capacity-reservation-id`). A directory that cannot ask
    /// EC2 (a capture) answers from the instances it knows run in the reservation.
    async fn capacity_block(
        &self,
        place: &Place,
        reservation_id: &str,
    ) -> Result<CapacityBlock, PortError> {
        let _ = (place, reservation_id);
        Ok(CapacityBlock::default())
    }

    /// The facts of the running instances tagged `kubernetes.io/cluster/<cluster>` in the
    /// account and region of `place`, each page to `found` as it comes: what a mass
    /// interruption's lookups are answered from (see [`crate::app::fleet::Fleet::know`]). EC2:
    /// `DescribeInstances` filtered on the tag, [`CLUSTER_PAGES_MAX`] pages of 1,000 at most:
    /// in each zone of the region at once when they are no more than `at_once` (and can
    /// be read), else in one list. A directory that cannot list finds none.
    async fn cluster_instances(
        &self,
        place: &Place,
        cluster: &str,
        at_once: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), PortError> {
        let _ = (place, cluster, at_once, found);
        Ok(())
    }
}

/// The most pages of 1,000 [`InstanceDirectory::cluster_instances`] reads in a list (a zone's,
/// or a region's): ten execution environments listing a cluster of 5,000 in three of a
/// region's six zones take 90 of an account's burst of `DescribeInstances` (100 at once).
pub const CLUSTER_PAGES_MAX: usize = 5;

pub use crate::domain::facts::{BlockFacts, CapacityBlock};

/// Where facts about nodes come from: the Kubernetes API, or a capture.
#[async_trait]
pub trait NodeDirectory: Send + Sync {
    /// Candidate nodes for these instances (it may return more; resolution picks), as part of
    /// `work` (a directory that retries retries transient failures until its deadline).
    async fn nodes(
        &self,
        instances: &[InstanceFacts],
        work: Work,
    ) -> Result<Vec<NodeFacts>, PortError>;

    /// Every node of the cluster (the sweeper looks for nodes whose instance is gone).
    async fn all(&self) -> Result<Vec<NodeFacts>, PortError>;
}

/// No nodes at all (replay without `--cluster-state`).
pub struct NoNodes;

#[async_trait]
impl NodeDirectory for NoNodes {
    async fn nodes(&self, _: &[InstanceFacts], _: Work) -> Result<Vec<NodeFacts>, PortError> {
        Ok(Vec::new())
    }

    async fn all(&self) -> Result<Vec<NodeFacts>, PortError> {
        Ok(Vec::new())
    }
}

/// How long a store answers [`PoolStore::continuation_keys`] from what it read: a rotation
/// reaches every process (a warm Lambda environment) within this.
pub const KEY_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// The pool store port: DynamoDB in AWS, an embedded database locally.
#[async_trait]
pub trait PoolStore: Send + Sync {
    /// The subset of `event_ids` already applied (within the ledger's retention).
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, PortError>;

    /// Applies one event's plan at most once, recorded `at` (the caller's clock): atomically
    /// records its ledger keys ([`Plan::ledger_keys`]) and updates every pool it marks. A
    /// duplicate of any key changes nothing and answers `Duplicate`.
    async fn apply(&self, plan: &Plan, at: DateTime<Utc>) -> Result<Applied, PortError>;

    /// The pools answering `query` at `now`, newest first.
    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError>;

    /// The history entries that matter for `[since, now]` (see
    /// [`HistoryEntry::in_period`]): what `forewarn pools --stats` reads.
    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError>;

    /// The history entries of `pools` whose event time is in `[since, now]`: what `adaptive`
    /// reads on the hot path (one query per pool, not a read of the whole history).
    async fn history_of(
        &self,
        pools: &[PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError>;

    /// The keys drain continuations and cordon records are signed with (see
    /// [`crate::domain::inbound::continuation`]): the current key (32 random bytes and its id), which
    /// signs, and the one before the last rotation, kept in the store. Created (id 1) by the
    /// first caller when there is none, with a conditional write (so that concurrent first
    /// callers agree on one key); read once and cached by the store for at most
    /// [`KEY_CACHE_TTL`] (a rotation reaches every process within it).
    async fn continuation_keys(&self) -> Result<KeyRing, PortError>;

    /// The keys as stored now (a strongly consistent read), never created: `None` when there are
    /// none. The cache [`PoolStore::continuation_keys`] answers from is replaced: what a
    /// signature by a key id this process does not know asks for, once, before refusing it.
    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, PortError>;

    /// Rotates the keys: a new current key of the next id, the current one kept as the previous
    /// (so what it signed still verifies), the previous one dropped. With no key yet, creates
    /// the first. A write conditioned on the keys read: a concurrent rotation makes it fail
    /// ([`FailureKind::Conflict`]) rather than lose a key.
    async fn rotate_continuation_key(&self) -> Result<KeyRing, PortError>;

    /// The rounds of traffic first this store shares between execution environments (see
    /// [`TrafficRounds`]); `None`: it shares none, and drains are not taken off their load
    /// balancers first.
    fn traffic_rounds(&self) -> Option<&dyn TrafficRounds> {
        None
    }

    /// The clusters' lists this store shares between execution environments (see
    /// [`SharedLists`]); `None`: it shares none, and each environment lists for itself.
    fn shared_lists(&self) -> Option<&dyn SharedLists> {
        None
    }

    /// A short description for messages (`dynamodb table T`, `embedded store at P`).
    fn location(&self) -> String;
}

/// The result of carrying out one node action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionResult {
    pub instance_id: String,
    /// What was done, for people (`cordoned`, `evicted 3 pods`, `deleted nodeclaim/x`).
    pub detail: String,
    /// When the node was seen cordoned (not in a dry run).
    pub cordoned_at: Option<DateTime<Utc>>,
    /// What the drain did.
    pub drain: Option<DrainSummary>,
    /// The drain must be continued by a later pass (see [`Pass`]).
    pub pending: bool,
    /// When pending only for pods that are terminating: when the last of them is due to be
    /// gone (their `deletionTimestamp`), so the next pass need not come sooner.
    pub wait_until: Option<DateTime<Utc>>,
    /// When pending only for room (surge: every pod left waits for its placeholder to run):
    /// until when at the latest, and how many placeholders hold room.
    pub room: Option<crate::domain::surge::RoomWait>,
    /// When the lifecycle action was kept alive in this pass (`RecordLifecycleActionHeartbeat`).
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Why the action was refused: what it would act on failed its live verification (another
    /// instance's node or NodeClaim, a control-plane node, forewarn's taint removed).
    pub refused: Option<String>,
}

/// Any error, boxed: the source a [`PortError`] keeps of what the adapter met.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Carries out a plan's node actions (the Kubernetes API, the ASG lifecycle action).
#[async_trait]
pub trait Executor: Send + Sync {
    /// Carries out every action of `plan` for `pass`, idempotently, as part of `work` (its
    /// calls retry transient failures until the work's deadline). An `Err` means the event must
    /// be retried (nothing is recorded as applied).
    async fn execute(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<ActionResult>, PortError>;

    /// The placeholders of `nodes` (see [`crate::domain::surge`]) as one look sees them, as part
    /// of `work`: for every node asked, how many there are and how many run elsewhere. One
    /// request for a whole batch's drains that wait for room. An executor that cannot look
    /// answers nothing, and those drains make full passes.
    async fn room(
        &self,
        nodes: &[String],
        work: Work,
    ) -> Result<BTreeMap<String, crate::domain::surge::RoomSeen>, PortError>;

    /// The requests its client-side rate limit lets out at once now, without waiting (see
    /// [`crate::app::fleet::triage`]); `None`: no limit.
    fn free_requests(&self) -> Option<f64> {
        None
    }
}

/// Where a drain's continuations go (see [`crate::domain::inbound::continuation`]): a new message on
/// the queue the event came from, delivered after `delay` (SQS `SendMessage` with
/// `DelaySeconds`).
#[async_trait]
pub trait ContinuationQueue: Send + Sync {
    /// Sends the continuation `body` to the queue of `queue_arn` in the message group `group`
    /// (its cluster's or account's: see [`crate::domain::inbound::continuation::message_group`]),
    /// to be delivered after `delay`.
    async fn send(
        &self,
        queue_arn: &str,
        group: &str,
        body: &str,
        delay: std::time::Duration,
    ) -> Result<(), PortError>;
}

/// The unit tests' continuation queue: keeps what is sent to it, `(group, body)`, or refuses
/// every send as SQS throttling does (`refuse`).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct RecordingQueue {
    pub(crate) sent: std::sync::Mutex<Vec<(String, String)>>,
    pub(crate) refuse: bool,
}

#[cfg(test)]
#[async_trait]
impl ContinuationQueue for RecordingQueue {
    async fn send(
        &self,
        _queue_arn: &str,
        group: &str,
        body: &str,
        _delay: std::time::Duration,
    ) -> Result<(), PortError> {
        if self.refuse {
            return Err(PortError::new("q", FailureKind::Throttled, "slow down"));
        }
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.push((group.to_string(), body.to_string()));
        Ok(())
    }
}

/// What the cluster's policy ConfigMap holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyText {
    /// There is no policy ConfigMap.
    Absent,
    /// The ConfigMap has no `policy.yaml` key.
    NoKey,
    /// Its `policy.yaml`.
    Text(String),
}

/// Where the functions read the policy per node group in a cluster: the ConfigMap
/// `forewarn/forewarn-policy` (see [`crate::app::policy`]).
#[async_trait]
pub trait PolicySource: Send + Sync {
    /// The policy's YAML as the ConfigMap holds it.
    async fn read(&self) -> Result<PolicyText, PortError>;
    /// Says, where people look (an Event on the ConfigMap), that the policy or a rule of it was
    /// refused: `message` says what, why and what applies instead. Best effort.
    async fn refused(&self, message: &str);
}

/// The clusters there are to serve when a deployment serves every one of a place
/// (`*`, `account/*` among the served clusters): EKS `ListClusters` in that account and region, or a
/// kubeconfig's contexts of that place.
#[async_trait]
pub trait ClusterCatalog: Send + Sync {
    /// Every cluster's name in `place` (whole: its account and region are known, or the
    /// deployment's own are not).
    async fn clusters(&self, place: &Place) -> Result<Vec<String>, PortError>;
}

/// Completes ASG lifecycle actions (a trait so the executor works without AWS).
#[async_trait]
pub trait LifecycleCompleter: Send + Sync {
    /// Completes `action` for `instance_id` with `CONTINUE`. False when no such action is
    /// pending (completed before, or timed out): the AWS message is logged.
    async fn complete(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, PortError>;

    /// Keeps `action` of `instance_id` alive (`RecordLifecycleActionHeartbeat`): its timeout
    /// starts again, so a drain that takes long is not cut short. False when no such action is
    /// pending any more (completed, or timed out).
    async fn heartbeat(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, PortError>;
}

/// Takes the instances whose drains are about to evict off their cluster's load balancers (see
/// [`crate::domain::traffic`]).
#[async_trait]
pub trait LoadBalancers: Send + Sync {
    /// Deregisters `doomed`'s targets (in the account and region of `key`'s place) from every
    /// target group tagged for its cluster, one `DeregisterTargets` per group for all of its
    /// doomed targets, at most [`crate::domain::traffic::ELB_RATE`] calls at a time; a group
    /// whose deregistration fails is named in the answer, the others still done. The groups are
    /// those known (found by their tag and kept fresh in the background); an error: none is
    /// known and they could not be found, or their targets could not be read: nothing was
    /// deregistered.
    ///
    /// `seed` are the target groups of `key` as another execution environment found them: taken
    /// as known when this one knows none yet (and found again in the background), so that its
    /// first round need not find them.
    async fn deregister(
        &self,
        key: &ClusterId,
        doomed: &[crate::domain::traffic::Doomed],
        seed: &[String],
    ) -> Result<crate::domain::traffic::Deregistered, PortError>;
}

/// Rounds of traffic first shared by every batch of every execution environment, through the
/// pool store: each batch offers its doomed instances, whoever claims the next round (at most
/// one a [`crate::domain::traffic::ROUND_EVERY`] per place and cluster, spaced further by the
/// ELB calls it made) takes off every instance offered so far, in one `DeregisterTargets` per
/// group, and settles each instance's outcome, which the other batches read.
#[async_trait]
pub trait TrafficRounds: Send + Sync {
    /// Adds `doomed` to the instances the next round of `key` takes off.
    async fn offer(
        &self,
        key: &ClusterId,
        doomed: &[crate::domain::traffic::Doomed],
        now: DateTime<Utc>,
    ) -> Result<(), PortError>;

    /// Takes the next round of `key` when it is due at `now` and some instance waits: the round
    /// is the caller's for `lease` (no other is made meanwhile), or until it settles.
    async fn claim(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Claim, PortError>;

    /// Ends the caller's round: each instance's outcome, when the next round may come, and, when
    /// the round throttled or went unanswered, until when no round is made.
    async fn settle(
        &self,
        key: &ClusterId,
        settled: &Settled,
        now: DateTime<Utc>,
    ) -> Result<(), PortError>;

    /// The outcomes known of `instances` (kept [`OUTCOME_KEPT`] at least).
    async fn outcomes(
        &self,
        key: &ClusterId,
        instances: &[String],
    ) -> Result<BTreeMap<String, crate::domain::traffic::Outcome>, PortError>;
}

pub use crate::domain::traffic::{Claim, OUTCOME_KEPT, Settled};

/// A cluster's running instances as one execution environment listed them, shared with the
/// others through the pool store (see [`crate::app::fleet::Fleet::know`]): in a mass
/// interruption every environment would list the same clusters, and the account's
/// `DescribeInstances` (a burst of 100, 20 a second) is the lookups'. The pages are opaque here
/// (the fleet signs them: a table writer cannot forge an instance's facts).
#[async_trait]
pub trait SharedLists: Send + Sync {
    /// Claims the list of `key` at `now` (whole milliseconds): `None` when it is the caller's
    /// to make (none was claimed within `lease` before), else when the list being made or
    /// made was claimed.
    async fn claim_list(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Option<DateTime<Utc>>, PortError>;

    /// Writes page `n` of the list of `key` claimed `at` (kept for [`LIST_KEPT`]).
    async fn put_page(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        n: usize,
        page: &str,
    ) -> Result<(), PortError>;

    /// The pages of the list of `key` claimed `at` from page `from` on, in order, up to the
    /// first not written yet, at most [`PAGES_READ`].
    async fn pages(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        from: usize,
    ) -> Result<Vec<String>, PortError>;
}

/// How long a shared list's pages are kept (past its use, [`crate::app::fleet::KNOWN_FOR`]).
pub const LIST_KEPT: std::time::Duration = std::time::Duration::from_secs(120);
/// The most pages [`SharedLists::pages`] answers at once: every environment of a mass
/// interruption reads each of its clusters' lists every [`crate::app::fleet::LIST_POLL`], and
/// a strongly consistent read costs a read unit even for a page not written yet (ten
/// environments reading ten lists: 4,000 units a second, a new on-demand table's first
/// capacity).
pub const PAGES_READ: usize = 4;

/// Tells people what was done (the webhook). Best effort: it never fails an event.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Sends what `reports` are worth telling, all within `time_left`; how many were sent and
    /// how many failed is logged.
    async fn notify(&self, reports: &[Report], time_left: Option<std::time::Duration>);
}

/// A message to come back after `delay` rather than after the queue's visibility timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redeliver {
    /// The queue's ARN (`eventSourceARN` of the record).
    pub queue_arn: String,
    pub receipt_handle: String,
    /// The message id, for messages.
    pub message_id: String,
    pub delay: std::time::Duration,
}

/// Changes when failed messages come back (SQS `ChangeMessageVisibilityBatch`). When it fails,
/// the messages still come back, after the queue's visibility timeout: nothing is lost.
#[async_trait]
pub trait Redelivery: Send + Sync {
    /// Sets the visibility of each message; an error says which could not be set (the others
    /// were) and why.
    async fn redeliver(&self, messages: &[Redeliver]) -> Result<(), PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port error says what each port's own error said, and keeps its source.
    #[test]
    fn errors_keep_their_source_and_their_text() {
        use std::error::Error;
        let reset = || std::io::Error::other("connection reset");
        let e = PortError::new("i-1", FailureKind::Connection, reset()).doing("node n");
        assert_eq!(e.to_string(), "i-1: node n: connection reset");
        assert_eq!(e.source().unwrap().to_string(), "connection reset");
        let d = PortError::new("ec2:DescribeInstances", FailureKind::Connection, reset());
        assert_eq!(d.to_string(), "ec2:DescribeInstances: connection reset");
        let s = PortError::store("t", FailureKind::Connection, reset()).doing("reading pool p");
        assert_eq!(
            s.to_string(),
            "pool store at t: reading pool p: connection reset"
        );
        let c = PortError::corrupt("k", "m");
        assert_eq!(c.to_string(), "pool store: item `k` is malformed: m");
        assert_eq!(c.cause::<Corrupt>().map(|c| c.key.as_str()), Some("k"));
        assert!(!c.kind.retryable());
        assert!(d.cause::<Corrupt>().is_none());
    }

    #[test]
    fn what_is_worth_retrying() {
        let retryable = [
            FailureKind::Throttled,
            FailureKind::Timeout,
            FailureKind::Unavailable,
            FailureKind::Connection,
            FailureKind::Contention,
            FailureKind::Unknown,
        ];
        let not = [
            FailureKind::Invalid,
            FailureKind::Forbidden,
            FailureKind::NotFound,
            FailureKind::Conflict,
        ];
        assert!(retryable.iter().all(|k| k.retryable()));
        assert!(not.iter().all(|k| !k.retryable()));
        assert_eq!(FailureKind::default(), FailureKind::Unknown);
    }

    #[test]
    fn http_statuses() {
        let kinds = [
            (429, FailureKind::Throttled),
            (408, FailureKind::Timeout),
            (504, FailureKind::Timeout),
            (500, FailureKind::Unavailable),
            (502, FailureKind::Unavailable),
            (503, FailureKind::Unavailable),
            (400, FailureKind::Invalid),
            (422, FailureKind::Invalid),
            (401, FailureKind::Unauthenticated),
            (403, FailureKind::Forbidden),
            (404, FailureKind::NotFound),
            (410, FailureKind::NotFound),
            (409, FailureKind::Conflict),
            (412, FailureKind::Conflict),
            (200, FailureKind::Unknown),
        ];
        for (status, kind) in kinds {
            assert_eq!(FailureKind::of_status(status), kind, "{status}");
        }
        assert!(FailureKind::of_status(503).retryable());
        assert!(!FailureKind::of_status(400).retryable());
        assert!(!FailureKind::of_status(403).retryable());
        // Expired credentials: the next call signs with new ones.
        assert!(FailureKind::of_status(401).retryable());
    }

    #[test]
    fn a_port_error_fails_a_report_retryable_as_its_kind_says() {
        let fail =
            |kind| PortError::new("ec2:DescribeInstances", kind, "m").fail(Report::default());
        assert!(!fail(FailureKind::Throttled).permanent);
        assert!(fail(FailureKind::Forbidden).permanent);
    }
}
