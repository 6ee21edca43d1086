//! The DynamoDB pool store: one table (single-table design, on-demand capacity), defined in
//! `infra/pool-table.yaml` and described in `docs/pool-table.md`.
//!
//! Items:
//!
//! * a pool: `pk` = `POOL#<capacity_type>#<instance_type>#<zone>`, `sk` = `POOL`, with `pool`,
//!   `capacity_type`, `instance_type`, `zone`, `region`, `unavailable_until`, `expires_at` (the
//!   TTL attribute), one counter per event kind (named by [`counter_name`]), `first_seen`,
//!   `last_seen`, `last_event_id`, `last_reason` and `last_instance_id`. Every time is whole Unix
//!   epoch seconds (N): windows and expiries rounded up, event times rounded down;
//! * an applied event (the idempotence ledger): `pk` = `EVENT#<event id>`, `sk` = `EVENT`, with
//!   `kind`, `recorded_at` and `expires_at`;
//! * the rounds of traffic first of a place and cluster, and each instance's outcome (see
//!   [`rounds`]).
//!
//! Indexes (all projecting every attribute): [`INDEX_UNAVAILABLE`] (partition `sk`, sort
//! `unavailable_until`; only pools ever marked unavailable have both), [`INDEX_BY_ZONE`] (partition
//! `zone`, sort `last_seen`) and [`INDEX_BY_TYPE`] (partition `instance_type`, sort `last_seen`).
//! Ledger items carry none of the indexes' keys but `sk`, so they are in none of them.
//!
//! [`PoolStore::apply`] is one `TransactWriteItems`: a `Put` of the ledger item conditioned on it
//! not existing (or having expired) and one `Update` per pool. The update counts with an atomic
//! `ADD`. For every other field it bets on whether this event "wins" (is the latest event, has the
//! longest window, the latest expiry, the earliest time): a won field is `SET`, a lost one is
//! left alone (`if_not_exists`), and the bet is the update's condition. When a bet is wrong the
//! transaction is cancelled, nothing is written, the cancellation reason carries the pool item as
//! it is (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), and the transaction is sent again with
//! the bets that item implies. The bets start from what this store saw of each pool before (every
//! such field only ever grows, or for `first_seen` shrinks, so a lost bet stays lost), else from
//! "this event is the latest": in-order events and events after which this process saw the pool
//! take one round trip; a late event takes two.
//!
//! Every transaction carries a `ClientRequestToken` ([`request_token`]), derived from the event
//! id and the transaction's content: when the SDK retries a transaction that had in fact
//! committed (its answer lost to a timeout), DynamoDB answers the retry as the success it was,
//! where without a token the ledger's condition would fail and read back as a duplicate. A
//! transaction sent again unchanged (after `TransactionInProgressException` or a conflict) keeps
//! its token; one changed after a lost bet gets another, as DynamoDB refuses a token reused with
//! other parameters within 10 minutes (`IdempotentParameterMismatch`).

use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, Utc};

mod apply;
mod codec;
mod expr;
mod ledger;
mod queries;
mod rounds;
mod secret;
#[cfg(test)]
mod testing;

pub use codec::{EVENT_SK, POOL_SK, event_pk, pool_pk};
use expr::Known;
pub use secret::SecretKeys;

use crate::adapters::aws::{CallError, OperationError, sdk_failure};
use crate::adapters::backoff::Backoff;
use crate::domain::keys::KeyRing;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolQuery, PoolRecord, PoolUpdate, Retention};
use crate::ports::{FailureKind, PoolStore, PortError};

/// Index of the pools ever marked unavailable: partition `sk` (= `POOL`), sort `unavailable_until`.
pub const INDEX_UNAVAILABLE: &str = "unavailable";
/// Index of the pools by zone: partition `zone`, sort `last_seen`.
pub const INDEX_BY_ZONE: &str = "by-zone";
/// Index of the pools by instance type: partition `instance_type`, sort `last_seen`.
pub const INDEX_BY_TYPE: &str = "by-type";

/// Transactions of one event cancelled by conflicts with concurrent writers (or throttling) before
/// giving up; each is followed by a backoff. Lost bets are bounded otherwise: each flips at least
/// one bet from "wins" to "loses" for good (the fields only move one way), so an event on `p`
/// pools loses at most `4 p` bets.
const MAX_CONFLICTS: u32 = 8;
/// Rounds of `BatchGetItem` for one chunk of ledger keys (unprocessed keys are asked again).
const MAX_BATCH_ROUNDS: u32 = 10;
/// Bounds of the pools this store remembers to place its bets.
const MAX_KNOWN_POOLS: usize = 10_000;

/// The pool store in one DynamoDB table.
pub struct DynamoStore {
    client: Client,
    table: String,
    retention: Retention,
    /// What this store saw of each pool (by `pk`): bounds that only tighten, to place the bets
    /// (hints only: a panic elsewhere cannot leave them wrong, only stale).
    known: Mutex<HashMap<String, Known>>,
    /// The continuation keys, once read (see [`crate::ports::KEY_CACHE_TTL`]).
    keys: crate::adapters::key_cache::KeyCache,
    /// What "now" is for the ledger's expiry.
    clock: std::sync::Arc<dyn crate::ports::Clock>,
    /// The continuation keys' secret (the stack's); none: a store for reading pools alone.
    secret: Option<SecretKeys>,
}

impl std::fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.table)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    /// The store of table `table`, without continuation keys (see [`DynamoStore::with_key_secret`]).
    pub fn new(client: Client, table: impl Into<String>) -> DynamoStore {
        DynamoStore {
            client,
            table: table.into(),
            retention: Retention::default(),
            known: Mutex::new(HashMap::new()),
            keys: Default::default(),
            clock: crate::adapters::clock::SystemClock::shared(),
            secret: None,
        }
    }

    /// The store with its continuation keys in `secret` (see [`SecretKeys`]).
    pub fn with_key_secret(mut self, secret: SecretKeys) -> DynamoStore {
        self.secret = Some(secret);
        self
    }

    /// The continuation keys' secret, or why there is none.
    fn key_secret(&self) -> Result<&SecretKeys, PortError> {
        let why =
            "no key secret is set (FOREWARN_KEY_SECRET, the stack's <stack>-continuation-key)";
        let what = "reading the continuation key";
        (self.secret.as_ref()).ok_or_else(|| self.fail(FailureKind::Invalid, what, why))
    }

    /// The store on `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn crate::ports::Clock>) -> DynamoStore {
        self.clock = clock;
        self
    }

    /// An error of `kind` while doing `what`, as `why` says (kept as the source: an error met,
    /// or the text of what went wrong).
    fn fail(
        &self,
        kind: FailureKind,
        what: impl Display,
        why: impl Into<crate::ports::BoxError>,
    ) -> PortError {
        PortError::store(self.location(), kind, why).doing(what)
    }

    /// What makes the error of a request this store could not encode or build, `what`.
    fn invalid<'a, E>(&'a self, what: &'a str) -> impl FnOnce(E) -> PortError + 'a
    where
        E: Into<crate::ports::BoxError>,
    {
        move |e| self.fail(FailureKind::Invalid, what, e)
    }

    /// A DynamoDB call that failed while doing `what`, with the kind its answer says.
    fn sdk_err<E: OperationError>(&self, what: impl Display, error: CallError<E>) -> PortError {
        let (kind, error) = sdk_failure(error);
        self.fail(kind, what, error)
    }
}

#[async_trait]
impl PoolStore for DynamoStore {
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, PortError> {
        self.read_ledger(event_ids).await
    }

    async fn apply(&self, update: &PoolUpdate) -> Result<Applied, PortError> {
        self.transact(update).await
    }

    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        self.scan_history(since, now).await
    }

    async fn history_of(
        &self,
        pools: &[crate::domain::pool::PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut entries = Vec::new();
        for pool in pools {
            entries.extend(self.query_history(pool, since, now).await?);
        }
        Ok(entries)
    }

    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError> {
        self.query_pools(query, now).await
    }

    async fn continuation_keys(&self) -> Result<KeyRing, PortError> {
        let read = async { self.key_secret()?.read().await };
        self.keys.or_read(self.clock.now(), read).await
    }

    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, PortError> {
        let read = async { self.key_secret()?.read().await.map(Some) };
        self.keys.kept(self.clock.now(), read).await
    }

    async fn rotate_continuation_key(&self) -> Result<KeyRing, PortError> {
        let rotate = async { self.key_secret()?.rotate(rand::random()).await };
        self.keys.kept(self.clock.now(), rotate).await
    }

    fn traffic_rounds(&self) -> Option<&dyn crate::ports::TrafficRounds> {
        Some(self)
    }

    fn location(&self) -> String {
        format!("dynamodb table {}", self.table)
    }
}

/// The wait after a transaction cancelled by a conflict (or in progress), and between two
/// rounds of a ledger read: at most 50 ms, doubling up to 1 s, equal jitter (see
/// [`Backoff`]); the loops count their attempts themselves.
pub(super) const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

impl DynamoStore {
    /// Waits the next of `waits` on the store's clock.
    pub(super) async fn back_off(&self, waits: &mut impl Iterator<Item = Duration>) {
        let wait = waits.next().unwrap_or(Duration::from_secs(1));
        self.clock.sleep(wait).await;
    }
}
