//! The embedded pool store: one redb file (`pools.redb`) in a per-user state directory (which
//! the settings choose: `crate::app::settings::Settings::state_dir`).
//!
//! Two tables: `ledger` (event id → (recorded_at, expires_at), both Unix milliseconds) is the
//! idempotence ledger, and `pools` (pool key `capacity_type#instance_type#zone` → the
//! [`PoolRecord`] as JSON). [`PoolStore::apply`] is one redb write transaction, so an event's
//! ledger entry and all its pool updates commit together or not at all; redb serialises write
//! transactions, so concurrent applies never lose an increment. Expired ledger entries and pools
//! are dropped when the store is opened (and by [`EmbeddedStore::purge`]); until then they are
//! ignored by every read.

use std::collections::HashSet;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::domain::continuation::{ContinuationKey, KeyId, KeyRing};
use crate::domain::stats::HistoryEntry;

use crate::adapters::clock::SystemClock;
use crate::domain::fold::{fold, pool_deltas, validate};
use crate::domain::pool::{
    Applied, PoolKey, PoolQuery, PoolRecord, PoolUpdate, Retention, sort_newest_first,
};
use crate::ports::{BoxError, Clock, FailureKind, PoolStore, StoreError};

/// Event id → (recorded_at, expires_at), Unix milliseconds.
const LEDGER: TableDefinition<&str, (i64, i64)> = TableDefinition::new("ledger");
/// Pool key → [`PoolRecord`] as JSON.
const POOLS: TableDefinition<&str, &str> = TableDefinition::new("pools");
/// The history (`forewarn pools --stats`): `<pool>#<event time, ms>#<event id>#<instance id>`
/// → the entry as JSON.
const HISTORY: TableDefinition<&str, &str> = TableDefinition::new("history");
/// The rounds of traffic first: `TRAFFIC#<account>#<region>#<cluster>` → the
/// [`crate::domain::traffic::Rounds`] as JSON.
const ROUNDS: TableDefinition<&str, &str> = TableDefinition::new("rounds");
/// Each instance's outcome: `<rounds key>#<instance id>` → (expires_at ms, the
/// [`crate::domain::traffic::Outcome`] as JSON).
const OUTCOMES: TableDefinition<&str, (i64, &str)> = TableDefinition::new("outcomes");
/// Secrets by name: the continuation key (`continuation`, 32 bytes).
const SECRETS: TableDefinition<&str, &[u8]> = TableDefinition::new("secrets");
const CONTINUATION_SECRET: &str = "continuation";

/// What [`EmbeddedStore::purge`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Purged {
    pub events: usize,
    pub pools: usize,
}

/// The pool store in a local redb file. Cloning gives another handle to the same database.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    path: PathBuf,
    retention: Retention,
    /// The continuation keys, once read (shared by the clones; see
    /// [`crate::ports::KEY_CACHE_TTL`]).
    keys: Arc<crate::adapters::key_cache::KeyCache>,
    /// What "now" is for the ledger's expiry and the purge on open.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// The database file's name inside the store's directory.
    pub const FILE_NAME: &'static str = "pools.redb";

    /// Opens (creating when missing) the store in `dir`: the directory and `dir/pools.redb`.
    /// Drops the expired ledger entries and pools. Fails when another process holds the file.
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        let path = dir.join(Self::FILE_NAME);
        std::fs::create_dir_all(dir).map_err(|e| {
            backend(
                &path,
                format_args!("creating the directory {}", dir.display()),
                e,
            )
        })?;
        let db = Database::create(&path).map_err(|e| backend(&path, "opening the database", e))?;
        let txn = db
            .begin_write()
            .map_err(|e| backend(&path, "creating the tables", e))?;
        {
            txn.open_table(LEDGER)
                .map_err(|e| backend(&path, "creating the ledger table", e))?;
            txn.open_table(POOLS)
                .map_err(|e| backend(&path, "creating the pools table", e))?;
        }
        txn.commit()
            .map_err(|e| backend(&path, "creating the tables", e))?;
        let store = EmbeddedStore {
            db: Arc::new(db),
            path,
            retention: Retention::default(),
            keys: Arc::default(),
            clock: SystemClock::shared(),
        };
        store.purge_blocking(store.clock.now())?;
        Ok(store)
    }

    /// The store with another retention (default: [`Retention::default`]).
    /// The store on `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> EmbeddedStore {
        self.clock = clock;
        self
    }

    pub fn with_retention(mut self, retention: Retention) -> EmbeddedStore {
        self.retention = retention;
        self
    }

    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One pool's record, whatever its expiry (`None`: never recorded, or purged).
    pub async fn pool(&self, key: &PoolKey) -> Result<Option<PoolRecord>, StoreError> {
        let key = key.to_string();
        self.blocking(move |store| {
            let txn = store.read_txn()?;
            let table = txn
                .open_table(POOLS)
                .map_err(|e| store.err("opening the pools table", e))?;
            let value = table
                .get(key.as_str())
                .map_err(|e| store.err(format_args!("reading pool {key}"), e))?;
            value.map(|v| decode(&key, v.value())).transpose()
        })
        .await
    }

    /// Removes the ledger entries, pools, history entries and traffic outcomes expired at `now`.
    /// Malformed pool records are left in place (reads report them).
    pub async fn purge(&self, now: DateTime<Utc>) -> Result<Purged, StoreError> {
        self.blocking(move |store| store.purge_blocking(now)).await
    }

    fn purge_blocking(&self, now: DateTime<Utc>) -> Result<Purged, StoreError> {
        let now_ms = now.timestamp_millis();
        let mut purged = Purged::default();
        let txn = self
            .db
            .begin_write()
            .map_err(|e| self.err("starting the purge", e))?;
        {
            let mut ledger = txn
                .open_table(LEDGER)
                .map_err(|e| self.err("opening the ledger table", e))?;
            ledger
                .retain(|_, (_, expires)| {
                    let keep = expires > now_ms;
                    purged.events += usize::from(!keep);
                    keep
                })
                .map_err(|e| self.err("purging the ledger", e))?;
            let mut pools = txn
                .open_table(POOLS)
                .map_err(|e| self.err("opening the pools table", e))?;
            pools
                .retain(|key, json| {
                    let keep = decode(key, json).map_or(true, |r| r.expires_at > now);
                    purged.pools += usize::from(!keep);
                    keep
                })
                .map_err(|e| self.err("purging the pools", e))?;
            let mut history = txn
                .open_table(HISTORY)
                .map_err(|e| self.err("opening the history table", e))?;
            history
                .retain(|_, json| {
                    serde_json::from_str::<HistoryEntry>(json).map_or(true, |e| e.expires_at > now)
                })
                .map_err(|e| self.err("purging the history", e))?;
            let mut outcomes = txn
                .open_table(OUTCOMES)
                .map_err(|e| self.err("opening the outcomes table", e))?;
            outcomes
                .retain(|_, (expires, _)| expires > now_ms)
                .map_err(|e| self.err("purging the outcomes", e))?;
        }
        txn.commit()
            .map_err(|e| self.err("committing the purge", e))?;
        Ok(purged)
    }

    fn apply_blocking(&self, update: &PoolUpdate) -> Result<Applied, StoreError> {
        let id = update.event_id.as_str();
        validate(update).map_err(|m| {
            backend_of(
                FailureKind::Invalid,
                &self.path,
                format_args!("applying event {id}"),
                m,
            )
        })?;
        let recorded_ms = update.recorded_at.timestamp_millis();
        let deltas = pool_deltas(update);
        let txn = self
            .db
            .begin_write()
            .map_err(|e| self.err(format_args!("starting to apply event {id}"), e))?;
        {
            let mut ledger = txn
                .open_table(LEDGER)
                .map_err(|e| self.err("opening the ledger table", e))?;
            for key in update.ledger_keys() {
                let seen = ledger
                    .get(key)
                    .map_err(|e| self.err(format_args!("reading the ledger entry {key}"), e))?
                    .map(|v| v.value());
                if seen.is_some_and(|(_, expires)| expires > recorded_ms) {
                    return Ok(Applied::Duplicate);
                }
            }
            let expires = (update.recorded_at + self.retention.ledger).timestamp_millis();
            for key in update.ledger_keys() {
                ledger
                    .insert(key, (recorded_ms, expires))
                    .map_err(|e| self.err(format_args!("recording {key} (event {id})"), e))?;
            }
            let mut pools = txn
                .open_table(POOLS)
                .map_err(|e| self.err("opening the pools table", e))?;
            for delta in &deltas {
                let key = delta.pool.to_string();
                let existing = pools
                    .get(key.as_str())
                    .map_err(|e| self.err(format_args!("reading pool {key}"), e))?
                    .map(|v| decode(&key, v.value()))
                    .transpose()?;
                let record = fold(existing, update, delta, &self.retention);
                let json = serde_json::to_string(&record)
                    .map_err(|e| self.err(format_args!("encoding pool {key} (event {id})"), e))?;
                pools
                    .insert(key.as_str(), json.as_str())
                    .map_err(|e| self.err(format_args!("writing pool {key} (event {id})"), e))?;
            }
            let mut history = txn
                .open_table(HISTORY)
                .map_err(|e| self.err("opening the history table", e))?;
            for entry in HistoryEntry::of(update, &self.retention) {
                let key = format!(
                    "{}#{:013}#{}#{}",
                    entry.pool,
                    entry.at.timestamp_millis().max(0),
                    entry.event_id,
                    entry.instance_id
                );
                let json = serde_json::to_string(&entry)
                    .map_err(|e| self.err(format_args!("encoding history {key}"), e))?;
                history
                    .insert(key.as_str(), json.as_str())
                    .map_err(|e| self.err(format_args!("writing history {key}"), e))?;
            }
        }
        txn.commit()
            .map_err(|e| self.err(format_args!("committing event {id}"), e))?;
        Ok(Applied::Applied)
    }

    fn read_txn(&self) -> Result<redb::ReadTransaction, StoreError> {
        self.db
            .begin_read()
            .map_err(|e| self.err("starting a read", e))
    }

    /// Runs blocking redb work off the async executor.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&EmbeddedStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| self.err("running a database task", e))?
    }

    fn err(&self, what: impl Display, error: impl Into<BoxError>) -> StoreError {
        backend(&self.path, what, error)
    }
}

/// A failure of the local database (a file, redb): nothing tells whether it passes.
fn backend(path: &Path, what: impl Display, error: impl Into<BoxError>) -> StoreError {
    backend_of(FailureKind::Unknown, path, what, error)
}

/// `error`, met while doing `what` (kept as the source).
fn backend_of(
    kind: FailureKind,
    path: &Path,
    what: impl Display,
    error: impl Into<BoxError>,
) -> StoreError {
    StoreError::Backend {
        location: path.display().to_string(),
        message: what.to_string(),
        kind,
        source: Some(error.into()),
    }
}

fn decode(key: &str, json: &str) -> Result<PoolRecord, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.to_string(),
        message,
    };
    let record: PoolRecord =
        serde_json::from_str(json).map_err(|e| corrupt(format!("not a pool record: {e}")))?;
    if record.pool.to_string() != key {
        return Err(corrupt(format!(
            "holds the record of pool {} instead",
            record.pool
        )));
    }
    Ok(record)
}

#[async_trait]
impl PoolStore for EmbeddedStore {
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, StoreError> {
        let ids = event_ids.to_vec();
        let now_ms = self.clock.now().timestamp_millis();
        self.blocking(move |store| {
            let txn = store.read_txn()?;
            let ledger = txn
                .open_table(LEDGER)
                .map_err(|e| store.err("opening the ledger table", e))?;
            let mut applied = HashSet::new();
            for id in ids {
                let entry = ledger
                    .get(id.as_str())
                    .map_err(|e| store.err(format_args!("reading the ledger entry of {id}"), e))?;
                if entry.is_some_and(|v| v.value().1 > now_ms) {
                    applied.insert(id);
                }
            }
            Ok(applied)
        })
        .await
    }

    async fn apply(&self, update: &PoolUpdate) -> Result<Applied, StoreError> {
        let update = update.clone();
        self.blocking(move |store| store.apply_blocking(&update))
            .await
    }

    async fn history_of(
        &self,
        pools: &[crate::domain::pool::PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        Ok(self
            .history(since, now)
            .await?
            .into_iter()
            .filter(|e| pools.contains(&e.pool) && e.at >= since && e.at <= now)
            .collect())
    }

    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        self.blocking(move |store| {
            let txn = store.read_txn()?;
            let table = match txn.open_table(HISTORY) {
                Ok(table) => table,
                // A store written before the history existed.
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(store.err("opening the history table", e)),
            };
            let mut entries = Vec::new();
            for item in table
                .iter()
                .map_err(|e| store.err("listing the history", e))?
            {
                let (key, json) = item.map_err(|e| store.err("listing the history", e))?;
                let entry: HistoryEntry =
                    serde_json::from_str(json.value()).map_err(|e| StoreError::Corrupt {
                        key: key.value().to_string(),
                        message: e.to_string(),
                    })?;
                if entry.in_period(since, now) {
                    entries.push(entry);
                }
            }
            Ok(entries)
        })
        .await
    }

    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, StoreError> {
        let query = query.clone();
        self.blocking(move |store| {
            let txn = store.read_txn()?;
            let table = txn
                .open_table(POOLS)
                .map_err(|e| store.err("opening the pools table", e))?;
            let mut records = Vec::new();
            for entry in table
                .iter()
                .map_err(|e| store.err("listing the pools", e))?
            {
                let (key, json) = entry.map_err(|e| store.err("listing the pools", e))?;
                let record = decode(key.value(), json.value())?;
                if query.matches(&record, now) {
                    records.push(record);
                }
            }
            sort_newest_first(&mut records);
            Ok(records)
        })
        .await
    }

    async fn continuation_keys(&self) -> Result<KeyRing, StoreError> {
        let now = self.clock.now();
        if let Some(keys) = self.keys.fresh(now) {
            return Ok(keys);
        }
        let keys = self
            .keys_op(KeyOp::LoadOrCreate)
            .await?
            .ok_or_else(|| self.err("reading the continuation key", "none after it was created"))?;
        self.keys.put(&keys, now);
        Ok(keys)
    }

    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, StoreError> {
        let now = self.clock.now();
        let keys = self.keys_op(KeyOp::Read).await?;
        if let Some(keys) = &keys {
            self.keys.put(keys, now);
        }
        Ok(keys)
    }

    async fn rotate_continuation_key(&self) -> Result<KeyRing, StoreError> {
        let now = self.clock.now();
        let keys = self
            .keys_op(KeyOp::Rotate)
            .await?
            .ok_or_else(|| self.err("rotating the continuation key", "no key after it"))?;
        self.keys.put(&keys, now);
        Ok(keys)
    }

    fn traffic_rounds(&self) -> Option<&dyn crate::ports::TrafficRounds> {
        Some(self)
    }

    fn location(&self) -> String {
        format!("embedded store at {}", self.path.display())
    }
}

/// What [`EmbeddedStore::keys_op`] does with the continuation keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyOp {
    /// Read them; `None` when there are none.
    Read,
    /// Read them, or create the first.
    LoadOrCreate,
    /// Rotate them (create the first when there are none).
    Rotate,
}

/// The stored value of the keys: the current key's id (8 bytes, big-endian) and bytes, then the
/// previous key's, if any. A value of 32 bytes alone is a key stored before keys had ids (id 0).
fn encode_keys(keys: &KeyRing) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * (8 + ContinuationKey::LEN));
    for key in std::iter::once(&keys.current).chain(&keys.previous) {
        out.extend_from_slice(&key.id().to_be_bytes());
        out.extend_from_slice(key.bytes());
    }
    out
}

fn decode_keys(bytes: &[u8]) -> Option<KeyRing> {
    const ONE: usize = 8 + ContinuationKey::LEN;
    let key = |b: &[u8]| {
        let id = KeyId::from_be_bytes(b.get(..8)?.try_into().ok()?);
        ContinuationKey::from_slice(id, b.get(8..)?)
    };
    match bytes.len() {
        ContinuationKey::LEN => Some(KeyRing::of(ContinuationKey::from_slice(0, bytes)?)),
        ONE => Some(KeyRing::of(key(bytes)?)),
        n if n == 2 * ONE => Some(KeyRing {
            current: key(&bytes[..ONE])?,
            previous: Some(key(&bytes[ONE..])?),
        }),
        _ => None,
    }
}

impl EmbeddedStore {
    /// Reads, creates or rotates the continuation keys (see [`KeyOp`]) in one write
    /// transaction: redb serialises them, so two callers cannot create two keys, nor two
    /// rotations lose one.
    async fn keys_op(&self, op: KeyOp) -> Result<Option<KeyRing>, StoreError> {
        self.blocking(move |store| {
            let txn = store
                .db
                .begin_write()
                .map_err(|e| store.err("starting a write transaction", e))?;
            let keys = {
                let mut table = txn
                    .open_table(SECRETS)
                    .map_err(|e| store.err("opening the secrets table", e))?;
                let stored = table
                    .get(CONTINUATION_SECRET)
                    .map_err(|e| store.err("reading the continuation key", e))?
                    .map(|v| v.value().to_vec());
                let stored = stored
                    .map(|bytes| {
                        decode_keys(&bytes).ok_or_else(|| StoreError::Corrupt {
                            key: format!("secrets/{CONTINUATION_SECRET}"),
                            message: format!(
                                "{} bytes: not one or two keys of {} bytes with their ids",
                                bytes.len(),
                                ContinuationKey::LEN
                            ),
                        })
                    })
                    .transpose()?;
                let new = match (op, stored) {
                    (KeyOp::Read, stored) => return Ok(stored),
                    (KeyOp::LoadOrCreate, Some(stored)) => return Ok(Some(stored)),
                    (KeyOp::LoadOrCreate | KeyOp::Rotate, None) => {
                        KeyRing::of(ContinuationKey::new(rand::random()))
                    }
                    (KeyOp::Rotate, Some(stored)) => {
                        stored.rotated(rand::random()).ok_or_else(|| {
                            store.err("rotating the continuation key", "its id cannot grow")
                        })?
                    }
                };
                table
                    .insert(CONTINUATION_SECRET, encode_keys(&new).as_slice())
                    .map_err(|e| store.err("writing the continuation key", e))?;
                new
            };
            txn.commit()
                .map_err(|e| store.err("committing the continuation key", e))?;
            Ok(Some(keys))
        })
        .await
    }
}

impl EmbeddedStore {
    /// Changes the rounds of `key` by `change` in one write transaction (redb serialises them).
    async fn change_rounds<T: Send + 'static>(
        &self,
        key: &crate::ports::RoundKey,
        change: impl FnOnce(&mut crate::domain::traffic::Rounds) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let key = key.to_string();
        self.blocking(move |store| {
            let txn = store
                .db
                .begin_write()
                .map_err(|e| store.err("starting a write transaction", e))?;
            let answer = {
                let mut table = txn
                    .open_table(ROUNDS)
                    .map_err(|e| store.err("opening the rounds table", e))?;
                let stored = table
                    .get(key.as_str())
                    .map_err(|e| store.err(format_args!("reading the rounds of {key}"), e))?
                    .map(|v| v.value().to_string());
                let mut rounds: crate::domain::traffic::Rounds = match stored {
                    Some(json) => serde_json::from_str(&json).map_err(|e| StoreError::Corrupt {
                        key: key.clone(),
                        message: format!("not rounds: {e}"),
                    })?,
                    None => Default::default(),
                };
                let answer = change(&mut rounds);
                let json =
                    serde_json::to_string(&rounds).map_err(|e| store.err("encoding rounds", e))?;
                table
                    .insert(key.as_str(), json.as_str())
                    .map_err(|e| store.err(format_args!("writing the rounds of {key}"), e))?;
                answer
            };
            txn.commit()
                .map_err(|e| store.err(format_args!("committing the rounds of {key}"), e))?;
            Ok(answer)
        })
        .await
    }
}

#[async_trait]
impl crate::ports::TrafficRounds for EmbeddedStore {
    async fn offer(
        &self,
        key: &crate::ports::RoundKey,
        doomed: &[crate::domain::traffic::Doomed],
        _now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let doomed = doomed.to_vec();
        self.change_rounds(key, move |r| r.offer(&doomed)).await
    }

    async fn claim(
        &self,
        key: &crate::ports::RoundKey,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<crate::domain::traffic::Claim, StoreError> {
        self.change_rounds(key, move |r| r.claim(now, lease)).await
    }

    async fn settle(
        &self,
        key: &crate::ports::RoundKey,
        settled: &crate::ports::Settled,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let expires = (now + crate::ports::span(crate::ports::OUTCOME_KEPT)).timestamp_millis();
        let prefix = key.to_string();
        let outcomes = settled.outcomes.clone();
        self.blocking(move |store| {
            let txn = store
                .db
                .begin_write()
                .map_err(|e| store.err("starting a write transaction", e))?;
            {
                let mut table = txn
                    .open_table(OUTCOMES)
                    .map_err(|e| store.err("opening the outcomes table", e))?;
                for (instance, outcome) in &outcomes {
                    let json = serde_json::to_string(outcome)
                        .map_err(|e| store.err("encoding an outcome", e))?;
                    table
                        .insert(
                            format!("{prefix}#{instance}").as_str(),
                            (expires, json.as_str()),
                        )
                        .map_err(|e| store.err(format_args!("writing {instance}'s outcome"), e))?;
                }
            }
            txn.commit()
                .map_err(|e| store.err("committing outcomes", e))
        })
        .await?;
        let (next, quiet_until, groups) =
            (settled.next, settled.quiet_until, settled.groups.clone());
        self.change_rounds(key, move |r| {
            r.settle(now, next, quiet_until, groups.as_deref())
        })
        .await
    }

    async fn outcomes(
        &self,
        key: &crate::ports::RoundKey,
        instances: &[String],
    ) -> Result<std::collections::BTreeMap<String, crate::domain::traffic::Outcome>, StoreError>
    {
        let prefix = key.to_string();
        let instances = instances.to_vec();
        self.blocking(move |store| {
            let txn = store.read_txn()?;
            let table = match txn.open_table(OUTCOMES) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Default::default()),
                Err(e) => return Err(store.err("opening the outcomes table", e)),
            };
            let mut found = std::collections::BTreeMap::new();
            for instance in instances {
                let key = format!("{prefix}#{instance}");
                let Some(entry) = table
                    .get(key.as_str())
                    .map_err(|e| store.err(format_args!("reading {instance}'s outcome"), e))?
                else {
                    continue;
                };
                let (_expires, json) = entry.value();
                let outcome = serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
                    key: key.clone(),
                    message: format!("not an outcome: {e}"),
                })?;
                found.insert(instance, outcome);
            }
            Ok(found)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use crate::domain::pool::{CapacityType, PoolMark};
    use chrono::{Duration, TimeZone};

    fn update(id: &str, recorded_at: DateTime<Utc>) -> PoolUpdate {
        PoolUpdate {
            event_id: id.into(),
            kind: EventKind::SpotInterruption,
            event_time: recorded_at,
            region: None,
            reason: "r".into(),
            marks: vec![PoolMark {
                pool: PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a"),
                instance_id: "i-1".into(),
                unavailable_until: Some(recorded_at + Duration::minutes(10)),
            }],
            recorded_at,
            also_keys: Vec::new(),
        }
    }

    #[tokio::test]
    async fn expired_ledger_entries_do_not_count_and_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let retention = Retention {
            ledger: Duration::hours(1),
            history: Duration::days(1),
        };
        let store = EmbeddedStore::open(dir.path())
            .unwrap()
            .with_retention(retention);
        let long_ago = Utc::now() - Duration::days(3);
        assert_eq!(
            store.apply(&update("e1", long_ago)).await.unwrap(),
            Applied::Applied
        );
        assert!(store.applied(&["e1".into()]).await.unwrap().is_empty());
        // Redelivered after the ledger forgot it: applied again.
        let later = long_ago + Duration::hours(2);
        assert_eq!(
            store.apply(&update("e1", later)).await.unwrap(),
            Applied::Applied
        );
        let purged = store.purge(Utc::now()).await.unwrap();
        assert_eq!(
            purged,
            Purged {
                events: 1,
                pools: 1
            }
        );
        let key = PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a");
        assert!(store.pool(&key).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn traffic_outcomes_are_purged_once_expired() {
        use crate::ports::TrafficRounds;
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let key = crate::ports::RoundKey {
            place: crate::ports::Place::of("123456789012", "us-east-1"),
            cluster: "blue".into(),
        };
        let settled = |at: DateTime<Utc>| crate::ports::Settled {
            outcomes: [(
                "i-1".to_string(),
                crate::domain::traffic::Outcome {
                    at,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let ids = ["i-1".to_string()];
        store
            .settle(&key, &settled(Utc::now()), Utc::now())
            .await
            .unwrap();
        store.purge(Utc::now()).await.unwrap();
        assert_eq!(
            store.outcomes(&key, &ids).await.unwrap().len(),
            1,
            "kept an hour"
        );
        let long_ago = Utc::now() - Duration::hours(2);
        store
            .settle(&key, &settled(long_ago), long_ago)
            .await
            .unwrap();
        store.purge(Utc::now()).await.unwrap();
        assert!(store.outcomes(&key, &ids).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn reopening_keeps_the_data_and_a_corrupt_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.timestamp_opt(Utc::now().timestamp(), 0).unwrap();
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.apply(&update("e1", now)).await.unwrap();
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.path(), dir.path().join("pools.redb"));
        assert!(store.location().contains("pools.redb"));
        assert_eq!(
            store.apply(&update("e1", now)).await.unwrap(),
            Applied::Duplicate
        );
        assert_eq!(
            store.pools(&PoolQuery::default(), now).await.unwrap().len(),
            1
        );
        {
            let txn = store.db.begin_write().unwrap();
            txn.open_table(POOLS)
                .unwrap()
                .insert("spot#c5.large#us-east-1a", "{not json")
                .unwrap();
            txn.commit().unwrap();
        }
        match store.pools(&PoolQuery::default(), now).await {
            Err(StoreError::Corrupt { key, .. }) => assert_eq!(key, "spot#c5.large#us-east-1a"),
            other => panic!("expected a corrupt record error, got {other:?}"),
        }
    }

    #[test]
    fn a_second_open_of_the_same_file_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let _first = EmbeddedStore::open(dir.path()).unwrap();
        match EmbeddedStore::open(dir.path()) {
            Err(e) => assert!(e.to_string().contains("pools.redb"), "{e}"),
            Ok(_) => panic!("opened the same database twice"),
        }
    }
}
