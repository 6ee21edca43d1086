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
//!   `kind`, `recorded_at` and `expires_at`.
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
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, KeysAndAttributes, Put,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

mod codec;
mod expr;

use codec::*;
pub use codec::{EVENT_SK, POOL_SK, event_pk, pool_pk};
use expr::*;

use crate::domain::continuation::ContinuationKey;
use crate::domain::fold::{PoolDelta, pool_deltas, validate};
use crate::domain::pool::{
    Applied, PoolKey, PoolQuery, PoolRecord, PoolUpdate, Retention, counter_name, sort_newest_first,
};
use crate::domain::stats::HistoryEntry;
use crate::ports::{PoolStore, StoreError};

/// Index of the pools ever marked unavailable: partition `sk` (= `POOL`), sort `unavailable_until`.
pub const INDEX_UNAVAILABLE: &str = "unavailable";
/// Index of the pools by zone: partition `zone`, sort `last_seen`.
pub const INDEX_BY_ZONE: &str = "by-zone";
/// Index of the pools by instance type: partition `instance_type`, sort `last_seen`.
pub const INDEX_BY_TYPE: &str = "by-type";
/// A transaction holds at most 100 items: the ledger entries and this many pools, each with its
/// history item (a pool marked twice by one event takes one pool item and two history items).
/// A domain limit: plans record no more ([`crate::domain::plan::decide`]).
pub use crate::domain::pool::MAX_POOLS_PER_UPDATE;

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
    /// What this store saw of each pool (by `pk`): bounds that only tighten, to place the bets.
    known: Mutex<HashMap<String, Known>>,
    /// The continuation key, once read (one read per process: per Lambda cold start).
    key: tokio::sync::OnceCell<ContinuationKey>,
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
    pub fn new(client: Client, table: impl Into<String>) -> DynamoStore {
        DynamoStore {
            client,
            table: table.into(),
            retention: Retention::default(),
            known: Mutex::new(HashMap::new()),
            key: tokio::sync::OnceCell::new(),
        }
    }

    /// A store on `table` with the standard AWS configuration (environment, profile, instance or
    /// task role; `AWS_ENDPOINT_URL_DYNAMODB` or `AWS_ENDPOINT_URL` for another endpoint), and
    /// [`DEFAULT_MAX_ATTEMPTS`](crate::adapters::aws::DEFAULT_MAX_ATTEMPTS) attempts per request
    /// unless configured otherwise (see [`crate::adapters::aws::default_retries`]).
    pub async fn from_env(table: impl Into<String>) -> DynamoStore {
        DynamoStore::new(Client::new(&crate::adapters::aws::load().await), table)
    }

    /// The store with another retention (default: [`Retention::default`]).
    pub fn with_retention(mut self, retention: Retention) -> DynamoStore {
        self.retention = retention;
        self
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One pool's record (strongly consistent), whatever its expiry; `None` if absent.
    pub async fn pool(&self, key: &PoolKey) -> Result<Option<PoolRecord>, StoreError> {
        let pk = pool_pk(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(&pk))
            .key(SK, s(POOL_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err(format_args!("reading pool {key}"), DisplayErrorContext(e)))?;
        out.item().map(decode_pool).transpose()
    }

    fn err(&self, what: impl Display, error: impl Display) -> StoreError {
        StoreError::Backend {
            location: self.location(),
            message: format!("{what}: {error}"),
        }
    }

    /// The continuation key item (`pk = KEY#continuation`, `sk = KEY`, the 32 bytes in `secret`),
    /// strongly consistent; `None` when there is none yet.
    async fn read_continuation_key(&self) -> Result<Option<ContinuationKey>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(CONTINUATION_KEY_PK))
            .key(SK, s(SECRET_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("reading the continuation key", DisplayErrorContext(e)))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let corrupt = |message: String| StoreError::Corrupt {
            key: CONTINUATION_KEY_PK.to_string(),
            message,
        };
        let bytes = item
            .get(SECRET)
            .and_then(|v| v.as_b().ok())
            .ok_or_else(|| corrupt(format!("no binary attribute `{SECRET}`")))?;
        ContinuationKey::from_slice(bytes.as_ref())
            .map(Some)
            .ok_or_else(|| {
                corrupt(format!(
                    "{} bytes instead of {}",
                    bytes.as_ref().len(),
                    ContinuationKey::LEN
                ))
            })
    }

    /// Reads the continuation key, or creates it: a put conditioned on there being none, so that
    /// concurrent first callers (several cold starts at once) end up with the same key.
    async fn load_continuation_key(&self) -> Result<ContinuationKey, StoreError> {
        if let Some(key) = self.read_continuation_key().await? {
            return Ok(key);
        }
        let key = ContinuationKey::new(rand::random());
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PK, s(CONTINUATION_KEY_PK))
            .item(SK, s(SECRET_SK))
            .item(
                SECRET,
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
                    key.bytes().to_vec(),
                )),
            )
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await;
        match put {
            Ok(_) => {
                tracing::info!(table = %self.table, "created the continuation key");
                Ok(key)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                // Another process created it first: use that one.
                self.read_continuation_key().await?.ok_or_else(|| {
                    self.err(
                        "reading the continuation key",
                        "gone right after it was created",
                    )
                })
            }
            Err(e) => Err(self.err("creating the continuation key", DisplayErrorContext(e))),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        // The map only holds hints: a panic elsewhere cannot leave it wrong, only stale.
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ledger_put(&self, update: &PoolUpdate, key: &str) -> Result<TransactWriteItem, StoreError> {
        let recorded = update.recorded_at.timestamp();
        let expires = ceil_secs(update.recorded_at + self.retention.ledger);
        let put = Put::builder()
            .table_name(&self.table)
            .item(PK, s(&event_pk(key)))
            .item(SK, s(EVENT_SK))
            .item(KIND, s(update.kind.as_str()))
            .item(RECORDED_AT, n(recorded))
            .item(EXPIRES_AT, n(expires))
            // An expired entry (not yet deleted by the TTL) no longer counts as applied.
            .condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":now", n(recorded))
            .build()
            .map_err(|e| self.err("building the ledger put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn pool_update(
        &self,
        update: &PoolUpdate,
        delta: &PoolDelta,
        bets: Bets,
    ) -> Result<TransactWriteItem, StoreError> {
        let plan = PoolWrite::new(update, delta, &self.retention);
        let mut e = Expr::default();
        let mut set = vec![
            format!(
                "{} = {}",
                e.name(POOL),
                e.value("pool", s(&delta.pool.to_string()))
            ),
            format!(
                "{} = {}",
                e.name(CAPACITY_TYPE),
                e.value("ct", s(delta.pool.capacity_type.as_str()))
            ),
            format!(
                "{} = {}",
                e.name(INSTANCE_TYPE),
                e.value("it", s(&delta.pool.instance_type))
            ),
            format!(
                "{} = {}",
                e.name(ZONE),
                e.value("zone", s(&delta.pool.zone))
            ),
        ];
        if let Some(region) = &update.region {
            set.push(format!(
                "{} = {}",
                e.name(REGION),
                e.value("region", s(region))
            ));
        }
        let mut conditions = Vec::new();
        let mut field = |e: &mut Expr,
                         attr: &str,
                         placeholder: &str,
                         value: AttributeValue,
                         win: bool,
                         op: &str| {
            let name = e.name(attr);
            let value = e.value(placeholder, value);
            conditions.push(format!(
                "(attribute_not_exists({name}) OR {name} {op} {value})"
            ));
            if win {
                set.push(format!("{name} = {value}"));
            } else {
                set.push(format!("{name} = if_not_exists({name}, {value})"));
            }
        };
        if let Some(until) = plan.until {
            let op = if bets.until { "<=" } else { ">=" };
            field(&mut e, UNAVAILABLE_UNTIL, "until", n(until), bets.until, op);
        }
        let op = if bets.last { "<=" } else { ">" };
        field(&mut e, LAST_SEEN, "t", n(plan.time), bets.last, op);
        let op = if bets.first { ">=" } else { "<=" };
        field(&mut e, FIRST_SEEN, "t", n(plan.time), bets.first, op);
        let op = if bets.expires { "<=" } else { ">=" };
        field(&mut e, EXPIRES_AT, "exp", n(plan.expires), bets.expires, op);
        for (attr, placeholder, value) in [
            (LAST_EVENT_ID, "eid", update.event_id.as_str()),
            (LAST_REASON, "reason", update.reason.as_str()),
            (LAST_INSTANCE_ID, "iid", delta.instance_id.as_str()),
        ] {
            let name = e.name(attr);
            let value = e.value(placeholder, s(value));
            if bets.last {
                set.push(format!("{name} = {value}"));
            } else {
                set.push(format!("{name} = if_not_exists({name}, {value})"));
            }
        }
        let counter = e.name(counter_name(update.kind));
        let count = e.value("n", AttributeValue::N(delta.count.to_string()));
        let expression = format!("SET {} ADD {counter} {count}", set.join(", "));
        let up = Update::builder()
            .table_name(&self.table)
            .key(PK, s(&pool_pk(&delta.pool)))
            .key(SK, s(POOL_SK))
            .update_expression(expression)
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| {
                self.err(
                    format_args!("building the update of pool {}", delta.pool),
                    e,
                )
            })?;
        Ok(TransactWriteItem::builder().update(up).build())
    }

    /// What to do about one pool whose condition failed: learn the item as it is.
    async fn observe(
        &self,
        delta: &PoolDelta,
        reason: &CancellationReason,
    ) -> Result<Known, StoreError> {
        let pk = pool_pk(&delta.pool);
        match reason.item() {
            Some(item) => Known::from_item(&pk, item),
            // A service that does not return the item on a failed condition: read it.
            None => match self.pool_item(&pk).await? {
                Some(item) => Known::from_item(&pk, &item),
                None => Ok(Known::default()),
            },
        }
    }

    async fn pool_item(
        &self,
        pk: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(POOL_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err(format_args!("reading item {pk}"), DisplayErrorContext(e)))?;
        Ok(out.item)
    }

    /// Pages through a query or scan, decoding every pool item.
    async fn collect(&self, request: Request) -> Result<Vec<PoolRecord>, StoreError> {
        let mut records = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let (items, next) = match &request {
                Request::Query {
                    index,
                    key_condition,
                    filter,
                    expr,
                } => {
                    let out = self
                        .client
                        .query()
                        .table_name(&self.table)
                        .index_name(*index)
                        .key_condition_expression(key_condition)
                        .filter_expression(filter)
                        .set_expression_attribute_names(Some(expr.names.clone()))
                        .set_expression_attribute_values(Some(expr.values.clone()))
                        .scan_index_forward(false)
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(|e| {
                            self.err(
                                format_args!("querying index {index}"),
                                DisplayErrorContext(e),
                            )
                        })?;
                    (out.items, out.last_evaluated_key)
                }
                Request::Scan { filter, expr } => {
                    let out = self
                        .client
                        .scan()
                        .table_name(&self.table)
                        .filter_expression(filter)
                        .set_expression_attribute_names(Some(expr.names.clone()))
                        .set_expression_attribute_values(Some(expr.values.clone()))
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(|e| self.err("scanning the pools", DisplayErrorContext(e)))?;
                    (out.items, out.last_evaluated_key)
                }
            };
            for item in items.unwrap_or_default() {
                records.push(decode_pool(&item)?);
            }
            match next.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(records),
            }
        }
    }
}

enum Request {
    Query {
        index: &'static str,
        key_condition: String,
        filter: String,
        expr: Expr,
    },
    Scan {
        filter: String,
        expr: Expr,
    },
}

#[async_trait]
impl PoolStore for DynamoStore {
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, StoreError> {
        let now = Utc::now().timestamp();
        let mut unique: Vec<&String> = Vec::with_capacity(event_ids.len());
        let mut seen = HashSet::new();
        for id in event_ids {
            if seen.insert(id) {
                unique.push(id);
            }
        }
        let mut applied = HashSet::new();
        for chunk in unique.chunks(100) {
            let keys = chunk
                .iter()
                .map(|id| {
                    HashMap::from([
                        (PK.to_string(), s(&event_pk(id))),
                        (SK.to_string(), s(EVENT_SK)),
                    ])
                })
                .collect();
            let mut request = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .projection_expression("#pk, #exp")
                    .expression_attribute_names("#pk", PK)
                    .expression_attribute_names("#exp", EXPIRES_AT)
                    .build()
                    .map_err(|e| self.err("building a ledger read", e))?,
            );
            let mut round = 0;
            while let Some(keys) = request.take() {
                if round == MAX_BATCH_ROUNDS {
                    return Err(self.err(
                        "reading the ledger",
                        format_args!("keys still unprocessed after {MAX_BATCH_ROUNDS} rounds"),
                    ));
                }
                if round > 0 {
                    tokio::time::sleep(backoff(round)).await;
                }
                round += 1;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, keys)
                    .send()
                    .await
                    .map_err(|e| self.err("reading the ledger", DisplayErrorContext(e)))?;
                let items = out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default();
                for item in items {
                    let pk = req_s("(ledger item)", &item, PK)?;
                    let id = pk
                        .strip_prefix("EVENT#")
                        .ok_or_else(|| StoreError::Corrupt {
                            key: pk.to_string(),
                            message: "a ledger key without the EVENT# prefix".into(),
                        })?;
                    if req_n(pk, &item, EXPIRES_AT)? > now {
                        applied.insert(id.to_string());
                    }
                }
                request = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys().is_empty());
            }
        }
        Ok(applied)
    }

    async fn apply(&self, update: &PoolUpdate) -> Result<Applied, StoreError> {
        let id = &update.event_id;
        let deltas = pool_deltas(update);
        let keys = update.ledger_keys();
        self.check_update(update, &deltas, &keys)?;
        let pks: Vec<String> = deltas.iter().map(|d| pool_pk(&d.pool)).collect();
        let writes: Vec<PoolWrite> = deltas
            .iter()
            .map(|d| PoolWrite::new(update, d, &self.retention))
            .collect();
        let max_lost_bets = 4 * deltas.len() + 1;
        let (mut conflicts, mut lost_bets) = (0, 0);
        while conflicts <= MAX_CONFLICTS && lost_bets <= max_lost_bets {
            let items = self.transaction(update, &keys, &deltas, &pks, &writes)?;
            let token = request_token(id, &items);
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .client_request_token(token)
                .send()
                .await;
            let error = match result {
                Ok(_) => {
                    self.remember(&pks, &writes);
                    return Ok(Applied::Applied);
                }
                Err(e) => e,
            };
            let reasons = match error.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                    c.cancellation_reasons().to_vec()
                }
                // The same transaction (same token) is still being applied: an SDK retry overtook
                // it. Sent again unchanged after a pause, it is answered as that one ended.
                Some(TransactWriteItemsError::TransactionInProgressException(_)) => {
                    conflicts += 1;
                    tracing::debug!(table = %self.table, event = %id, conflicts, "transaction in progress, backing off");
                    tokio::time::sleep(backoff(conflicts)).await;
                    continue;
                }
                _ => {
                    return Err(self.err(
                        format_args!("applying event {id}"),
                        DisplayErrorContext(error),
                    ));
                }
            };
            match self
                .cancelled(id, &keys, &deltas, &pks, &reasons, &error)
                .await?
            {
                Cancelled::Duplicate => return Ok(Applied::Duplicate),
                Cancelled::Again { conflict, lost } => {
                    lost_bets += lost;
                    if conflict {
                        conflicts += 1;
                        tracing::debug!(table = %self.table, event = %id, conflicts, "transaction conflict, backing off");
                        tokio::time::sleep(backoff(conflicts)).await;
                    }
                }
            }
        }
        Err(self.err(
            format_args!("applying event {id}"),
            format_args!(
                "gave up after {conflicts} transactions cancelled by conflicts with concurrent \
                 writers and {lost_bets} by pools changing under the update"
            ),
        ))
    }

    /// A `Scan` of the history items (every page) whose event or window touches the period and
    /// that have not expired: an operator's report, not a hot path.
    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut e = Expr::default();
        let filter = format!(
            "begins_with({sk}, {prefix}) AND {exp} > {now} AND {at} <= {now} AND ({at} >= {since} OR {until} > {since})",
            sk = e.name(SK),
            prefix = e.value("hist", s(HISTORY_SK_PREFIX)),
            exp = e.name(EXPIRES_AT),
            now = e.value("now", n(now.timestamp())),
            at = e.name(AT),
            until = e.name(UNTIL),
            since = e.value("since", n(since.timestamp())),
        );
        let mut entries = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression(&filter)
                .set_expression_attribute_names(Some(e.names.clone()))
                .set_expression_attribute_values(Some(e.values.clone()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|err| self.err("scanning the history", DisplayErrorContext(err)))?;
            for item in out.items.unwrap_or_default() {
                let entry = decode_history(&item)?;
                if entry.in_period(since, now) {
                    entries.push(entry);
                }
            }
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(entries),
            }
        }
    }

    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, StoreError> {
        let mut e = Expr::default();
        let now_value = e.value("now", n(now.timestamp()));
        let mut filter = vec![format!("{} > {now_value}", e.name(EXPIRES_AT))];
        let request = if let Some(instance_type) = &query.instance_type {
            let key_condition = format!(
                "{} = {}",
                e.name(INSTANCE_TYPE),
                e.value("it", s(instance_type))
            );
            if let Some(zone) = &query.zone {
                filter.push(format!("{} = {}", e.name(ZONE), e.value("zone", s(zone))));
            }
            if !query.include_available {
                filter.push(format!("{} > {now_value}", e.name(UNAVAILABLE_UNTIL)));
            }
            Request::Query {
                index: INDEX_BY_TYPE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else if let Some(zone) = &query.zone {
            let key_condition = format!("{} = {}", e.name(ZONE), e.value("zone", s(zone)));
            if !query.include_available {
                filter.push(format!("{} > {now_value}", e.name(UNAVAILABLE_UNTIL)));
            }
            Request::Query {
                index: INDEX_BY_ZONE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else if !query.include_available {
            let key_condition = format!(
                "{} = {} AND {} > {now_value}",
                e.name(SK),
                e.value("pool", s(POOL_SK)),
                e.name(UNAVAILABLE_UNTIL)
            );
            Request::Query {
                index: INDEX_UNAVAILABLE,
                key_condition,
                filter: filter.join(" AND "),
                expr: e,
            }
        } else {
            filter.push(format!("{} = {}", e.name(SK), e.value("pool", s(POOL_SK))));
            Request::Scan {
                filter: filter.join(" AND "),
                expr: e,
            }
        };
        let mut records = self.collect(request).await?;
        // Indexes are eventually consistent and the TTL deletes late: the query decides.
        records.retain(|r| query.matches(r, now));
        sort_newest_first(&mut records);
        Ok(records)
    }

    async fn continuation_key(&self) -> Result<ContinuationKey, StoreError> {
        self.key
            .get_or_try_init(|| self.load_continuation_key())
            .await
            .cloned()
    }

    fn location(&self) -> String {
        format!("dynamodb table {}", self.table)
    }
}

/// What a cancelled transaction of [`DynamoStore::apply`] says to do next.
enum Cancelled {
    /// A ledger key was there already: the event was applied before.
    Duplicate,
    /// Send it again: after a backoff when a writer conflicted, at once when only bets were
    /// lost (`lost` of them, each now corrected from the pool's current item).
    Again { conflict: bool, lost: usize },
}

impl DynamoStore {
    /// One transaction holds at most 100 items, and the update must be well formed.
    fn check_update(
        &self,
        update: &PoolUpdate,
        deltas: &[PoolDelta],
        keys: &[&str],
    ) -> Result<(), StoreError> {
        let id = &update.event_id;
        if deltas.len() + keys.len() + update.marks.len() > 100 {
            return Err(self.err(
                format_args!("applying event {id}"),
                format_args!(
                    "it marks {} pools ({} marks) with {} ledger keys, but one transaction holds \
                     at most 100 items: the ledger entries, the pools and their history entries",
                    deltas.len(),
                    update.marks.len(),
                    keys.len()
                ),
            ));
        }
        validate(update).map_err(|m| self.err(format_args!("applying event {id}"), m))
    }

    /// The items of one attempt: the ledger entries, then each pool's update with this store's
    /// bets on which of its fields the event's values win.
    fn transaction(
        &self,
        update: &PoolUpdate,
        keys: &[&str],
        deltas: &[PoolDelta],
        pks: &[String],
        writes: &[PoolWrite],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let bets: Vec<Bets> = {
            let known = self.known();
            pks.iter()
                .zip(writes)
                .map(|(pk, w)| Known::bets(known.get(pk), w))
                .collect()
        };
        let mut items = keys
            .iter()
            .map(|k| self.ledger_put(update, k))
            .collect::<Result<Vec<_>, _>>()?;
        for (delta, bets) in deltas.iter().zip(&bets) {
            items.push(self.pool_update(update, delta, *bets)?);
        }
        // Last, so the cancellation reasons of the items above keep their places.
        for entry in HistoryEntry::of(update, &self.retention) {
            items.push(self.history_put(&entry)?);
        }
        Ok(items)
    }

    /// The history item of `entry` (no index holds it: it has none of their sort keys).
    fn history_put(&self, entry: &HistoryEntry) -> Result<TransactWriteItem, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.table)
            .item(PK, s(&pool_pk(&entry.pool)))
            .item(SK, s(&history_sk(entry)))
            .item(POOL, s(&entry.pool.to_string()))
            .item(KIND, s(entry.kind.as_str()))
            .item(EVENT_ID, s(&entry.event_id))
            .item(INSTANCE_ID, s(&entry.instance_id))
            .item(AT, n(entry.at.timestamp()))
            .item(EXPIRES_AT, n(ceil_secs(entry.expires_at)));
        if let Some(until) = entry.unavailable_until {
            put = put.item(UNTIL, n(ceil_secs(until)));
        }
        let put = put
            .build()
            .map_err(|e| self.err("building a history put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Remembers what an applied transaction wrote, to place the next bets.
    fn remember(&self, pks: &[String], writes: &[PoolWrite]) {
        let mut known = self.known();
        if known.len() + pks.len() > MAX_KNOWN_POOLS {
            known.clear();
        }
        for (pk, w) in pks.iter().zip(writes) {
            let k = known.get(pk).copied().unwrap_or_default().after(w);
            known.insert(pk.clone(), k);
        }
    }

    /// Reads the cancellation reasons of one attempt, item by item (the ledger entries first,
    /// then the pools): a ledger key already there is a duplicate; a pool whose condition
    /// failed lost a bet (what is known of it is read again); a conflict or throttling is
    /// retried; anything else is an error, and so is a cancellation with no reason to retry.
    async fn cancelled(
        &self,
        id: &str,
        keys: &[&str],
        deltas: &[PoolDelta],
        pks: &[String],
        reasons: &[CancellationReason],
        error: &(dyn std::error::Error + Send + Sync + 'static),
    ) -> Result<Cancelled, StoreError> {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        let ledger = keys.len();
        let mut conflict = false;
        for (k, key) in keys.iter().enumerate() {
            match code(k) {
                "ConditionalCheckFailed" => return Ok(Cancelled::Duplicate),
                "None" => {}
                c if retryable(c) => conflict = true,
                c => {
                    return Err(self.err(
                        format_args!("applying event {id}"),
                        format_args!(
                            "the ledger put of {key} was refused: {c}: {}",
                            message(reasons, k)
                        ),
                    ));
                }
            }
        }
        let mut lost = 0;
        for (i, delta) in deltas.iter().enumerate() {
            match code(ledger + i) {
                "None" => {}
                "ConditionalCheckFailed" => {
                    let Some(reason) = reasons.get(ledger + i) else {
                        continue;
                    };
                    lost += 1;
                    let seen = self.observe(delta, reason).await?;
                    tracing::debug!(
                        table = %self.table, event = %id, pool = %delta.pool,
                        "pool changed under the bet, sending the event again"
                    );
                    self.known().insert(pks[i].clone(), seen);
                }
                c if retryable(c) => conflict = true,
                c => {
                    return Err(self.err(
                        format_args!("applying event {id}"),
                        format_args!(
                            "the update of pool {} was refused: {c}: {}",
                            delta.pool,
                            message(reasons, ledger + i)
                        ),
                    ));
                }
            }
        }
        if !conflict && lost == 0 {
            return Err(self.err(
                format_args!("applying event {id}"),
                format_args!(
                    "the transaction was cancelled without a reason to retry it: {}",
                    DisplayErrorContext(error)
                ),
            ));
        }
        Ok(Cancelled::Again { conflict, lost })
    }
}

/// The `ClientRequestToken` of a transaction of event `event_id` (at most 36 characters, as
/// DynamoDB takes): `fw-` and 128 bits of the SHA-256 of the event id and the items in a
/// canonical form (every map in key order). The same transaction gets the same token, another
/// transaction (other bets, another event, another `recorded_at`) another one.
pub fn request_token(event_id: &str, items: &[TransactWriteItem]) -> String {
    let mut canonical = String::new();
    canonical.push_str(&format!("{event_id:?}\n"));
    for item in items {
        canonical.push_str(&canonical_item(item));
        canonical.push('\n');
    }
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("fw-{hex}")
}

/// One item of a transaction as text, with its maps sorted (a `HashMap`'s order is random).
fn canonical_item(item: &TransactWriteItem) -> String {
    fn map<V: std::fmt::Debug>(m: Option<&HashMap<String, V>>) -> String {
        let mut entries: Vec<String> = m
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k:?}:{v:?}"))
            .collect();
        entries.sort();
        format!("{{{}}}", entries.join(","))
    }
    if let Some(p) = item.put() {
        format!(
            "put {:?} {} {:?} {} {} {:?}",
            p.table_name(),
            map(Some(p.item())),
            p.condition_expression(),
            map(p.expression_attribute_names()),
            map(p.expression_attribute_values()),
            p.return_values_on_condition_check_failure(),
        )
    } else if let Some(u) = item.update() {
        format!(
            "update {:?} {} {:?} {:?} {} {} {:?}",
            u.table_name(),
            map(Some(u.key())),
            u.update_expression(),
            u.condition_expression(),
            map(u.expression_attribute_names()),
            map(u.expression_attribute_values()),
            u.return_values_on_condition_check_failure(),
        )
    } else {
        // This store writes puts and updates only; anything else in its plain form.
        format!("{item:?}")
    }
}

/// Cancellation codes worth another transaction after a pause.
fn retryable(code: &str) -> bool {
    matches!(
        code,
        "TransactionConflict"
            | "ThrottlingError"
            | "ProvisionedThroughputExceeded"
            | "RequestLimitExceeded"
    )
}

fn message(reasons: &[CancellationReason], i: usize) -> &str {
    reasons
        .get(i)
        .and_then(|r| r.message())
        .unwrap_or("no message")
}

/// Exponential backoff with full jitter: up to 25 ms × 2^attempt, at most 1 s.
fn backoff(attempt: u32) -> Duration {
    let cap_ms = (25u64 << attempt.min(6)).min(1000);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_millis(cap_ms / 2 + random % (cap_ms / 2 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use crate::domain::pool::{CapacityType, PoolMark};
    use aws_config::BehaviorVersion;
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn write(time: i64, until: Option<i64>, expires: i64) -> PoolWrite {
        PoolWrite {
            time,
            until,
            expires,
        }
    }

    #[test]
    fn bets_default_to_this_event_being_the_latest() {
        let b = Known::bets(None, &write(100, Some(200), 300));
        assert_eq!(
            b,
            Bets {
                until: true,
                last: true,
                first: false,
                expires: true
            }
        );
        // A count-only event does not bet on the window.
        assert!(!Known::bets(None, &write(100, None, 300)).until);
    }

    #[test]
    fn known_bounds_make_losing_bets_certain() {
        let known = Known {
            until: Some(500),
            last_seen: Some(150),
            first_seen: Some(120),
            expires_at: Some(900),
        };
        // A late event with a shorter window, inside the known window.
        let b = Known::bets(Some(&known), &write(100, Some(200), 300));
        assert_eq!(
            b,
            Bets {
                until: false,
                last: false,
                first: true,
                expires: false
            }
        );
        // Ties go to the event: `>=` on last_seen.
        assert!(Known::bets(Some(&known), &write(150, None, 300)).last);
        let after = known.after(&write(100, Some(200), 300));
        assert_eq!(
            after,
            Known {
                until: Some(500),
                last_seen: Some(150),
                first_seen: Some(100),
                expires_at: Some(900)
            }
        );
        let after = Known::default().after(&write(100, None, 300));
        assert_eq!(after.until, None);
        assert_eq!(after.first_seen, Some(100));
    }

    fn update(marks: usize) -> PoolUpdate {
        PoolUpdate {
            event_id: "e-1".into(),
            kind: EventKind::SpotInterruption,
            event_time: at(0) + chrono::Duration::milliseconds(700),
            region: Some("us-east-1".into()),
            reason: "r".into(),
            marks: (0..marks)
                .map(|i| PoolMark {
                    pool: PoolKey::new(CapacityType::Spot, &format!("m{i}.large"), "us-east-1a"),
                    instance_id: format!("i-{i}"),
                    unavailable_until: Some(at(60) + chrono::Duration::milliseconds(1)),
                })
                .collect(),
            recorded_at: at(1),
            also_keys: Vec::new(),
        }
    }

    fn store() -> DynamoStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        DynamoStore::new(Client::from_conf(config), "t")
    }

    #[test]
    fn times_round_outwards() {
        let u = update(1);
        let w = PoolWrite::new(&u, &pool_deltas(&u)[0], &Retention::default());
        assert_eq!(w.time, at(0).timestamp(), "event times round down");
        assert_eq!(w.until, Some(at(61).timestamp()), "windows round up");
        assert_eq!(
            w.expires,
            (at(61) + Retention::default().history).timestamp()
        );
    }

    #[test]
    fn the_update_of_a_pool_counts_atomically_and_bets_in_its_condition() {
        let store = store();
        let u = update(1);
        let delta = &pool_deltas(&u)[0];
        let win = Known::bets(None, &PoolWrite::new(&u, delta, &store.retention));
        let item = store.pool_update(&u, delta, win).unwrap();
        let up = item.update().unwrap();
        let expr = up.update_expression();
        assert!(expr.ends_with("ADD #interruptions :n"), "{expr}");
        assert!(expr.contains("#unavailable_until = :until"), "{expr}");
        assert!(expr.contains("#last_event_id = :eid"), "{expr}");
        assert!(
            expr.contains("#first_seen = if_not_exists(#first_seen, :t)"),
            "{expr}"
        );
        let cond = up.condition_expression().unwrap();
        assert!(
            cond.contains("(attribute_not_exists(#last_seen) OR #last_seen <= :t)"),
            "{cond}"
        );
        assert!(
            cond.contains(
                "(attribute_not_exists(#unavailable_until) OR #unavailable_until <= :until)"
            ),
            "{cond}"
        );
        // Every placeholder is used (DynamoDB rejects unused ones) and vice versa.
        let text = format!("{expr} {cond}");
        for name in up.expression_attribute_names().unwrap().keys() {
            assert!(text.contains(name.as_str()), "{name} unused");
        }
        for value in up.expression_attribute_values().unwrap().keys() {
            assert!(text.contains(value.as_str()), "{value} unused");
        }
        assert_eq!(
            up.return_values_on_condition_check_failure(),
            Some(&ReturnValuesOnConditionCheckFailure::AllOld)
        );

        let lose = Bets {
            until: false,
            last: false,
            first: true,
            expires: false,
        };
        let item = store.pool_update(&u, delta, lose).unwrap();
        let up = item.update().unwrap();
        let expr = up.update_expression();
        assert!(
            expr.contains("#last_event_id = if_not_exists(#last_event_id, :eid)"),
            "{expr}"
        );
        assert!(expr.contains("#first_seen = :t"), "{expr}");
        let cond = up.condition_expression().unwrap();
        assert!(
            cond.contains("(attribute_not_exists(#last_seen) OR #last_seen > :t)"),
            "{cond}"
        );
    }

    #[tokio::test]
    async fn more_pools_than_a_transaction_holds_is_an_error_naming_the_count() {
        let err = store().apply(&update(100)).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("100 pools") && msg.contains("dynamodb table t"),
            "{msg}"
        );
    }

    #[test]
    fn the_request_token_is_the_same_for_the_same_transaction_only() {
        let store = store();
        let u = update(3);
        let keys = u.ledger_keys();
        let deltas = pool_deltas(&u);
        let pks: Vec<String> = deltas.iter().map(|d| pool_pk(&d.pool)).collect();
        let writes: Vec<PoolWrite> = deltas
            .iter()
            .map(|d| PoolWrite::new(&u, d, &store.retention))
            .collect();
        let items = |store: &DynamoStore| {
            store
                .transaction(&u, &keys, &deltas, &pks, &writes)
                .unwrap()
        };
        let token = request_token(&u.event_id, &items(&store));
        // DynamoDB takes 1 to 36 characters.
        assert_eq!(token.len(), 35, "{token}");
        assert!(token.starts_with("fw-") && token[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        // The same transaction built again (every map a new `HashMap`, in another order): the
        // same token, as for the SDK's retry of a request whose answer was lost.
        for _ in 0..5 {
            assert_eq!(request_token(&u.event_id, &items(&store)), token);
        }
        // Another event id: another token.
        assert_ne!(request_token("e-2", &items(&store)), token);
        // The transaction sent again after a lost bet (another condition): another token.
        store.known().insert(
            pks[0].clone(),
            Known {
                until: Some(i64::MAX),
                last_seen: Some(i64::MAX),
                first_seen: Some(0),
                expires_at: Some(i64::MAX),
            },
        );
        let changed = items(&store);
        assert_ne!(request_token(&u.event_id, &changed), token);
        // The same event recorded at another time (a redelivery): another token.
        let mut later = u.clone();
        later.recorded_at = at(2);
        let later_items = DynamoStore::new(store.client.clone(), "t")
            .transaction(&later, &keys, &deltas, &pks, &writes)
            .unwrap();
        assert_ne!(request_token(&u.event_id, &later_items), token);
        // Another table: another token.
        let other = DynamoStore::new(store.client.clone(), "t2");
        assert_ne!(request_token(&u.event_id, &items(&other)), token);
    }

    #[test]
    fn numbers_and_malformed_items() {
        assert_eq!(parse_n("12"), Some(12));
        assert_eq!(parse_n("12.9"), Some(12));
        assert_eq!(parse_n("1.2E1"), Some(12));
        assert_eq!(parse_n("soon"), None);
        let mut item: HashMap<String, AttributeValue> = [
            ("pk", s("POOL#spot#m5.large#us-east-1a")),
            ("sk", s("POOL")),
            ("pool", s("spot#m5.large#us-east-1a")),
            ("expires_at", n(100)),
            ("first_seen", n(1)),
            ("last_seen", n(2)),
            ("last_event_id", s("e")),
            ("last_reason", s("r")),
            ("last_instance_id", s("i")),
            ("interruptions", n(3)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let r = decode_pool(&item).unwrap();
        assert_eq!(r.interruptions(), 3);
        assert_eq!(r.unavailable_until, None);
        assert_eq!(r.region, None);
        item.insert("pool".into(), s("spot#c5.large#us-east-1a"));
        match decode_pool(&item) {
            Err(StoreError::Corrupt { key, message }) => {
                assert_eq!(key, "POOL#spot#m5.large#us-east-1a");
                assert!(message.contains("does not match"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        item.insert("pool".into(), s("spot#m5.large#us-east-1a"));
        item.insert("interruptions".into(), n(-1));
        assert!(matches!(
            decode_pool(&item),
            Err(StoreError::Corrupt { .. })
        ));
        item.insert("interruptions".into(), n(1));
        item.remove("last_seen");
        match decode_pool(&item) {
            Err(StoreError::Corrupt { message, .. }) => assert!(message.contains("last_seen")),
            other => panic!("{other:?}"),
        }
    }
}
