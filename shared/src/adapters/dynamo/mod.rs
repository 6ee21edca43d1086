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
//!   [`rounds`]);
//! * a cluster's list shared between execution environments: its claim and pages (see
//!   [`lists`]).
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
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use chrono::{DateTime, Utc};

mod apply;
mod codec;
mod expr;
mod ledger;
mod lists;
mod queries;
mod rounds;
mod secret;
#[cfg(test)]
mod testing;

use codec::*;
use expr::Expr;
pub use secret::SecretKeys;

use crate::adapters::aws::{AwsError, CallError, OperationError, failure_kind};
use crate::adapters::backoff::backoff;
use crate::domain::fold::{history, validate};
use crate::domain::keys::KeyRing;
use crate::domain::plan::Plan;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolKey, PoolQuery, PoolRecord, Retention};
use crate::ports::{BoxError, FailureKind, PoolStore, PortError};
use backon::{BackoffBuilder, ExponentialBuilder};

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
#[derive(Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// What this store saw of each pool: read from its item after a lost bet, or its writes
    /// folded ([`crate::domain::fold::fold`]) into what it saw before; bounds that only
    /// tighten, to place the bets (hints only: a panic elsewhere cannot leave them wrong, only
    /// stale).
    known: Mutex<HashMap<PoolKey, PoolRecord>>,
    /// The continuation keys, once read (see [`crate::ports::KEY_CACHE_TTL`]).
    keys: crate::adapters::key_cache::KeyCache,
    /// What "now" is for the ledger's expiry.
    clock: std::sync::Arc<dyn crate::ports::Clock>,
    /// The continuation keys' secret (the stack's); none: a store for reading pools alone.
    secret: Option<SecretKeys>,
}

impl DynamoStore {
    /// The store of table `table`, without continuation keys (see [`DynamoStore::with_key_secret`]).
    pub fn new(client: Client, table: impl Into<String>) -> DynamoStore {
        DynamoStore {
            client,
            table: table.into(),
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

    /// The store on `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn crate::ports::Clock>) -> DynamoStore {
        self.clock = clock;
        self
    }

    /// An error of `kind` while doing `what`, as `why` says (kept as the source: an error met,
    /// or the text of what went wrong).
    fn fail(&self, kind: FailureKind, what: impl Display, why: impl Into<BoxError>) -> PortError {
        PortError::store(self.location(), kind, why).doing(what)
    }

    /// What makes the error of a request this store could not encode or build, `what`.
    fn invalid<E: Into<BoxError>>(&self, what: &str) -> impl FnOnce(E) -> PortError {
        move |e| self.fail(FailureKind::Invalid, what, e)
    }

    /// An AWS call that failed while doing `what`, with the kind its answer says.
    fn sdk_err<E: OperationError>(&self, what: impl Display, error: CallError<E>) -> PortError {
        self.fail(failure_kind(&error), what, AwsError(error.into()))
    }
}

#[async_trait]
impl PoolStore for DynamoStore {
    /// The ledger items of `event_ids` (read strongly consistent) that have not expired.
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, PortError> {
        let now = self.clock.now().timestamp();
        // The ids by their ledger key, each key once (a batch read refuses repeats).
        let ids: HashMap<String, &String> = event_ids.iter().map(|id| (event_pk(id), id)).collect();
        let keys = ids.keys().map(|pk| item_key(pk, EVENT_SK)).collect();
        let mut applied = HashSet::new();
        for item in self.batch_get(keys, "reading the ledger").await? {
            let pk = text(&item, "pk").unwrap_or("(ledger item)");
            let entry: LedgerItem = from_item(pk, &item)?;
            let live = ids.get(pk).filter(|_| entry.expires_at > now);
            applied.extend(live.map(|id| id.to_string()));
        }
        Ok(applied)
    }

    /// One transaction, sent again until its bets hold (see the module's documentation).
    async fn apply(&self, plan: &Plan, at: DateTime<Utc>) -> Result<Applied, PortError> {
        let id = &plan.event_id;
        let what = format!("applying event {id}");
        let keys = plan.ledger_keys();
        // At most `MAX_POOLS_PER_UPDATE` pools: with their history items and the ledger
        // entries, one transaction's 100 items.
        validate(plan).map_err(self.invalid(&what))?;
        let pools = history(plan, &Retention::default());
        let max_lost_bets = 4 * pools.len() + 1;
        let (mut conflicts, mut lost_bets) = (0, 0);
        let mut waits = BACKOFF.build();
        while conflicts <= MAX_CONFLICTS && lost_bets <= max_lost_bets {
            let (items, token) = self.transaction(plan, at, &keys, &pools)?;
            let sent = (self.client.transact_write_items())
                .set_transact_items(Some(items))
                .client_request_token(token)
                .send()
                .await;
            let Err(error) = sent else {
                self.remember(plan);
                return Ok(Applied::Applied);
            };
            let (conflict, lost) = match error.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                    let reasons = c.cancellation_reasons();
                    match self.cancelled(&keys, &pools, reasons, &what).await? {
                        None => return Ok(Applied::Duplicate),
                        Some((false, 0)) => {
                            let why = format!(
                                "the transaction was cancelled without a reason to retry it: {}",
                                DisplayErrorContext(&error)
                            );
                            return Err(self.fail(FailureKind::Unknown, what, why));
                        }
                        Some(cancelled) => cancelled,
                    }
                }
                // The same transaction (same token) is still being applied: an SDK retry overtook
                // it. Sent again unchanged after a pause, it is answered as that one ended.
                Some(TransactWriteItemsError::TransactionInProgressException(_)) => (true, 0),
                _ => return Err(self.sdk_err(what, error)),
            };
            lost_bets += lost;
            if conflict {
                conflicts += 1;
                tracing::debug!(table = %self.table, event = %id, conflicts, "transaction in conflict or in progress, backing off");
                self.back_off(&mut waits).await;
            }
        }
        let why = format!(
            "gave up after {conflicts} transactions cancelled by conflicts with concurrent \
             writers and {lost_bets} by pools changing under the update"
        );
        Err(self.fail(FailureKind::Contention, what, why))
    }

    /// A `Scan` of the history items (every page) whose event or window touches the period and
    /// that have not expired: an operator's report, not a hot path.
    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut e = Expr::default();
        let filter = format!(
            "begins_with({sk}, {prefix}) AND {exp} > {now} AND {at} <= {now} AND ({at} >= {since} OR {until} > {since})",
            sk = e.name("sk"),
            prefix = e.value("hist", s(HISTORY_SK_PREFIX)),
            exp = e.name("expires_at"),
            now = e.value("now", n(now.timestamp())),
            at = e.name("at"),
            until = e.name("until"),
            since = e.value("since", n(since.timestamp())),
        );
        let items = self.items(None, filter, e, "scanning the history").await?;
        let entries = items.iter().map(decode_history);
        // Malformed items are errors, the others in the period kept.
        let kept =
            |e: &Result<HistoryEntry, _>| e.as_ref().ok().is_none_or(|e| e.in_period(since, now));
        entries.filter(kept).collect()
    }

    /// A `Query` of each pool's history items whose event time is in `[since, now]` and that
    /// have not expired (every page): the sort key orders them by event time.
    async fn history_of(
        &self,
        pools: &[PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut entries = Vec::new();
        for pool in pools {
            let mut e = Expr::default();
            let key_condition = format!(
                "{pool} AND {sk} BETWEEN {from} AND {to}",
                pool = e.is("pk", s(&pool_pk(pool))),
                sk = e.name("sk"),
                from = e.value("from", s(&history_sk_at(since))),
                // `~` sorts after every character of an event id or instance id.
                to = e.value("to", s(&format!("{}~", history_sk_at(now)))),
            );
            let now_value = e.value("now", n(now.timestamp()));
            let filter = format!("{} > {now_value}", e.name("expires_at"));
            let what = "querying a pool's history";
            let items = self.items(Some((None, key_condition)), filter, e, what);
            for item in items.await? {
                entries.push(decode_history(&item)?);
            }
        }
        Ok(entries)
    }

    /// The pools `query` asks for, newest first, through the index that fits it.
    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError> {
        let mut e = Expr::default();
        let now_value = e.value("now", n(now.timestamp()));
        let mut filter = vec![format!("{} > {now_value}", e.name("expires_at"))];
        // Only the pools unavailable at `now`: the sort key of their index, else a filter.
        let mut until = (!query.include_available)
            .then(|| format!("{} > {now_value}", e.name("unavailable_until")));
        let index = match (&query.instance_type, &query.zone) {
            (Some(instance_type), zone) => {
                filter.extend(zone.as_ref().map(|zone| e.is("zone", s(zone))));
                Some((INDEX_BY_TYPE, e.is("instance_type", s(instance_type))))
            }
            (None, Some(zone)) => Some((INDEX_BY_ZONE, e.is("zone", s(zone)))),
            (None, None) => {
                let sk = e.is("sk", s(POOL_SK));
                let on = until.take().map(|until| format!("{sk} AND {until}"));
                filter.extend(on.is_none().then_some(sk));
                on.map(|key_condition| (INDEX_UNAVAILABLE, key_condition))
            }
        };
        filter.extend(until);
        let what = (index.as_ref()).map_or("scanning the pools".into(), |(i, _)| {
            format!("querying index {i}")
        });
        let index = index.map(|(index, key_condition)| (Some(index), key_condition));
        let items = self.items(index, filter.join(" AND "), e, what).await?;
        let records = items.iter().map(decode_pool).collect::<Result<_, _>>()?;
        // Indexes are eventually consistent and the TTL deletes late: the query decides.
        Ok(query.select(records, now))
    }

    async fn continuation_keys(&self) -> Result<KeyRing, PortError> {
        self.keys.or_read(self.clock.now(), self.read_keys()).await
    }

    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, PortError> {
        let read = async { self.read_keys().await.map(Some) };
        self.keys.kept(self.clock.now(), read).await
    }

    async fn rotate_continuation_key(&self) -> Result<KeyRing, PortError> {
        let rotate = self.rotate_key(rand::random());
        self.keys.kept(self.clock.now(), rotate).await
    }

    fn traffic_rounds(&self) -> Option<&dyn crate::ports::TrafficRounds> {
        Some(self)
    }

    fn shared_lists(&self) -> Option<&dyn crate::ports::SharedLists> {
        Some(self)
    }

    fn location(&self) -> String {
        format!("dynamodb table {}", self.table)
    }
}

/// The wait after a transaction cancelled by a conflict (or in progress), and between two
/// rounds of a ledger read: at most 50 ms, doubling up to 1 s, equal jitter (see
/// [`backoff`]); the loops count their attempts themselves.
pub(super) const BACKOFF: ExponentialBuilder =
    backoff(Duration::from_millis(50), Duration::from_secs(1));

impl DynamoStore {
    /// Waits the next of `waits` on the store's clock.
    pub(super) async fn back_off(&self, waits: &mut impl Iterator<Item = Duration>) {
        let wait = waits.next().unwrap_or(Duration::from_secs(1));
        self.clock.sleep(wait).await;
    }
}
