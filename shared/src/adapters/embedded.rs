//! The embedded pool store: one redb file (`pools.redb`) in a per-user state directory (which
//! the settings choose: `crate::app::settings::Settings::state_dir`).
//!
//! Two tables: `ledger` (event id → (recorded_at, expires_at), both Unix milliseconds) is the
//! idempotence ledger, and `pools` (pool key `capacity_type#instance_type#zone` → the
//! [`PoolRecord`] as JSON). [`PoolStore::apply`] is one redb write transaction, so an event's
//! ledger entry and all its pool updates commit together or not at all; redb serialises write
//! transactions, so concurrent applies never lose an increment. Expired ledger entries and pools
//! are dropped when the store is opened; until then they are ignored by every read.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redb::WriteTransaction;
use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;

use crate::adapters::clock::SystemClock;
use crate::domain::clusters::ClusterId;
use crate::domain::fold::{self, fold, validate};
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing};
use crate::domain::plan::Plan;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolKey, PoolQuery, PoolRecord, Retention};
use crate::domain::traffic::{Claim, Doomed, Outcome, Rounds, round_of};
use crate::ports::{
    BoxError, Clock, FailureKind, LIST_KEPT, OUTCOME_KEPT, PAGES_READ, PoolStore, PortError,
    Settled, SharedLists, TrafficRounds, span,
};

/// Event id → (recorded_at, expires_at), Unix milliseconds.
const LEDGER: TableDefinition<&str, (i64, i64)> = TableDefinition::new("ledger");
/// Pool key → [`PoolRecord`] as JSON.
const POOLS: TableDefinition<&str, &str> = TableDefinition::new("pools");
/// The history (`forewarn pools --stats`): `<pool>#<event time, ms>#<event id>#<instance id>`
/// → the entry as JSON.
const HISTORY: TableDefinition<&str, &str> = TableDefinition::new("history");
/// The rounds of traffic first: `TRAFFIC#<account>#<region>#<cluster>` → the [`Rounds`] as
/// JSON.
const ROUNDS: TableDefinition<&str, &str> = TableDefinition::new("rounds");
/// Each instance's outcome: `<rounds key>#<instance id>` → (expires_at ms, the [`Outcome`] as
/// JSON).
const OUTCOMES: TableDefinition<&str, (i64, &str)> = TableDefinition::new("outcomes");
/// The clusters' lists shared between environments: `LIST#<account>#<region>#<cluster>` → when
/// its list was last claimed (Unix milliseconds).
const LIST_CLAIMS: TableDefinition<&str, i64> = TableDefinition::new("list_claims");
/// Their pages: `<list key>#<claimed at, ms>#<n>` → (expires_at ms, the page as signed).
const LIST_PAGES: TableDefinition<&str, (i64, &str)> = TableDefinition::new("list_pages");
/// Secrets by name: the continuation key (`continuation`, 32 bytes).
const SECRETS: TableDefinition<&str, &[u8]> = TableDefinition::new("secrets");
const CONTINUATION_SECRET: &str = "continuation";

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

    /// Opens (creating when missing) the store in `dir`: the directory and `dir/pools.redb`,
    /// with its tables. Drops the expired ledger entries and pools. Fails when another process
    /// holds the file.
    pub fn open(dir: &Path) -> Result<EmbeddedStore, PortError> {
        let path = dir.join(Self::FILE_NAME);
        let creating = format!("creating the directory {}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| backend(&path, creating, e))?;
        let db = Database::create(&path).map_err(|e| backend(&path, "opening the database", e))?;
        let store = EmbeddedStore {
            db: Arc::new(db),
            path,
            retention: Retention::default(),
            keys: Arc::default(),
            clock: SystemClock::shared(),
        };
        // The purge's transaction creates the tables.
        store.purge(store.clock.now())?;
        Ok(store)
    }

    /// The store on `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> EmbeddedStore {
        self.clock = clock;
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the ledger entries, pools, history entries, traffic outcomes and lists' pages
    /// expired at `now`.
    /// Malformed pool records are left in place (reads report them).
    fn purge(&self, now: DateTime<Utc>) -> Result<(), PortError> {
        let now_ms = now.timestamp_millis();
        self.write("purging what expired", |txn| {
            txn.open_table(LEDGER)?
                .retain(|_, (_, expires)| expires > now_ms)?;
            txn.open_table(POOLS)?
                .retain(|key, json| decode(key, json).map_or(true, |r| r.expires_at > now))?;
            txn.open_table(HISTORY)?.retain(|_, json| {
                serde_json::from_str::<HistoryEntry>(json).map_or(true, |e| e.expires_at > now)
            })?;
            txn.open_table(OUTCOMES)?
                .retain(|_, (expires, _)| expires > now_ms)?;
            txn.open_table(LIST_PAGES)?
                .retain(|_, (expires, _)| expires > now_ms)?;
            txn.open_table(LIST_CLAIMS)?;
            Ok(())
        })
    }

    /// Runs `work` in a write transaction, committed when it succeeds; `what` names it in
    /// errors (a corrupt entry is said as it is).
    fn write<T>(
        &self,
        what: impl Display,
        work: impl FnOnce(&WriteTransaction) -> Result<T, BoxError>,
    ) -> Result<T, PortError> {
        let run = || {
            let txn = self.db.begin_write()?;
            let out = work(&txn)?;
            txn.commit()?;
            Ok(out)
        };
        run().map_err(|e: BoxError| self.failed(what, e))
    }

    /// What `error`, met doing `what`, is: a [`PortError`] as it was (a corrupt entry),
    /// anything else a failure of the database.
    fn failed(&self, what: impl Display, error: BoxError) -> PortError {
        match error.downcast::<PortError>() {
            Ok(e) => *e,
            Err(e) => self.err(what, e),
        }
    }

    /// [`Self::write`] off the async executor.
    async fn write_off<T: Send + 'static>(
        &self,
        what: String,
        work: impl FnOnce(&WriteTransaction) -> Result<T, BoxError> + Send + 'static,
    ) -> Result<T, PortError> {
        self.blocking(move |store| store.write(what, work)).await
    }

    /// Runs `work` in a read transaction, off the async executor (see [`Self::write`]).
    async fn read<T: Send + 'static>(
        &self,
        what: String,
        work: impl FnOnce(&ReadTransaction) -> Result<T, BoxError> + Send + 'static,
    ) -> Result<T, PortError> {
        self.blocking(move |store| {
            let run = || work(&store.db.begin_read()?);
            run().map_err(|e: BoxError| store.failed(what, e))
        })
        .await
    }

    /// Runs blocking redb work off the async executor.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&EmbeddedStore) -> Result<T, PortError> + Send + 'static,
    ) -> Result<T, PortError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| self.err("running a database task", e))?
    }

    fn err(&self, what: impl Display, error: impl Into<BoxError>) -> PortError {
        backend(&self.path, what, error)
    }
}

/// A failure of the local database (a file, redb): nothing tells whether it passes.
fn backend(path: &Path, what: impl Display, error: impl Into<BoxError>) -> PortError {
    PortError::store(path.display(), FailureKind::Unknown, error).doing(what)
}

/// `json`, the value of `key`, as `what` it should be, or what is wrong with it.
fn parse<T: DeserializeOwned>(key: &str, json: &str, what: &str) -> Result<T, PortError> {
    serde_json::from_str(json).map_err(|e| PortError::corrupt(key, format!("not {what}: {e}")))
}

fn decode(key: &str, json: &str) -> Result<PoolRecord, PortError> {
    let record: PoolRecord = parse(key, json, "a pool record")?;
    if record.pool.to_string() != key {
        let message = format!("holds the record of pool {} instead", record.pool);
        return Err(PortError::corrupt(key, message));
    }
    Ok(record)
}

#[async_trait]
impl PoolStore for EmbeddedStore {
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, PortError> {
        let ids = event_ids.to_vec();
        let now_ms = self.clock.now().timestamp_millis();
        self.read("reading the ledger".into(), move |txn| {
            let ledger = txn.open_table(LEDGER)?;
            let mut applied = HashSet::new();
            for id in ids {
                if ledger
                    .get(id.as_str())?
                    .is_some_and(|v| v.value().1 > now_ms)
                {
                    applied.insert(id);
                }
            }
            Ok(applied)
        })
        .await
    }

    async fn apply(&self, plan: &Plan, at: DateTime<Utc>) -> Result<Applied, PortError> {
        let what = format!("applying event {}", plan.event_id);
        let invalid = |m| PortError::store(self.path.display(), FailureKind::Invalid, m);
        validate(plan).map_err(|m| invalid(m).doing(&what))?;
        let (plan, retention) = (plan.clone(), self.retention);
        let recorded_ms = at.timestamp_millis();
        self.write_off(what, move |txn| {
            let mut ledger = txn.open_table(LEDGER)?;
            for key in plan.ledger_keys() {
                if ledger.get(key)?.is_some_and(|v| v.value().1 > recorded_ms) {
                    return Ok(Applied::Duplicate);
                }
            }
            let expires = (at + retention.ledger).timestamp_millis();
            for key in plan.ledger_keys() {
                ledger.insert(key, (recorded_ms, expires))?;
            }
            let mut pools = txn.open_table(POOLS)?;
            for mark in &plan.pools {
                let key = mark.pool.to_string();
                let existing = pools.get(key.as_str())?.map(|v| decode(&key, v.value()));
                let record = fold(existing.transpose()?, &plan, mark, &retention);
                pools.insert(key.as_str(), serde_json::to_string(&record)?.as_str())?;
            }
            let mut history = txn.open_table(HISTORY)?;
            for entry in fold::history(&plan, &retention) {
                let key = format!(
                    "{}#{:013}#{}#{}",
                    entry.pool,
                    entry.at.timestamp_millis().max(0),
                    entry.event_id,
                    entry.instance_id
                );
                history.insert(key.as_str(), serde_json::to_string(&entry)?.as_str())?;
            }
            Ok(Applied::Applied)
        })
        .await
    }

    async fn history_of(
        &self,
        pools: &[PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut entries = self.history(since, now).await?;
        entries.retain(|e| pools.contains(&e.pool) && e.at >= since && e.at <= now);
        Ok(entries)
    }

    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        let mut entries = self
            .read("listing the history".into(), move |txn| {
                let mut entries: Vec<HistoryEntry> = Vec::new();
                for row in txn.open_table(HISTORY)?.iter()? {
                    let (key, json) = row?;
                    entries.push(parse(key.value(), json.value(), "a history entry")?);
                }
                Ok(entries)
            })
            .await?;
        entries.retain(|e| e.in_period(since, now));
        Ok(entries)
    }

    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError> {
        let records = self
            .read("listing the pools".into(), move |txn| {
                let mut records = Vec::new();
                for row in txn.open_table(POOLS)?.iter()? {
                    let (key, json) = row?;
                    records.push(decode(key.value(), json.value())?);
                }
                Ok(records)
            })
            .await?;
        Ok(query.select(records, now))
    }

    async fn continuation_keys(&self) -> Result<KeyRing, PortError> {
        let read = async {
            let keys = self.keys_op(KeyOp::LoadOrCreate).await?;
            keys.ok_or_else(|| {
                self.err("reading the continuation key", "none after it was created")
            })
        };
        self.keys.or_read(self.clock.now(), read).await
    }

    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, PortError> {
        self.keys
            .kept(self.clock.now(), self.keys_op(KeyOp::Read))
            .await
    }

    async fn rotate_continuation_key(&self) -> Result<KeyRing, PortError> {
        let keys = self
            .keys
            .kept(self.clock.now(), self.keys_op(KeyOp::Rotate));
        let none = || self.err("rotating the continuation key", "no key after it");
        keys.await?.ok_or_else(none)
    }

    fn traffic_rounds(&self) -> Option<&dyn TrafficRounds> {
        Some(self)
    }

    fn shared_lists(&self) -> Option<&dyn SharedLists> {
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
/// previous key's, if any.
fn encode_keys(keys: &KeyRing) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * (8 + ContinuationKey::LEN));
    for key in std::iter::once(&keys.current).chain(&keys.previous) {
        out.extend_from_slice(&key.id().to_be_bytes());
        out.extend_from_slice(key.bytes());
    }
    out
}

fn decode_keys(bytes: &[u8]) -> Result<KeyRing, PortError> {
    const ONE: usize = 8 + ContinuationKey::LEN;
    let key = |b: &[u8]| {
        let id = KeyId::from_be_bytes(b.get(..8)?.try_into().ok()?);
        ContinuationKey::from_slice(id, b.get(8..)?)
    };
    let ring = match bytes.len() {
        ONE => key(bytes).map(KeyRing::of),
        n if n == 2 * ONE => {
            (key(&bytes[..ONE]).zip(key(&bytes[ONE..]))).map(|(current, previous)| KeyRing {
                current,
                previous: Some(previous),
            })
        }
        _ => None,
    };
    let (len, want) = (bytes.len(), ContinuationKey::LEN);
    let why = format!("{len} bytes: not one or two keys of {want} bytes with their ids");
    ring.ok_or_else(|| PortError::corrupt(format!("secrets/{CONTINUATION_SECRET}"), why))
}

impl EmbeddedStore {
    /// Reads, creates or rotates the continuation keys (see [`KeyOp`]) in one write
    /// transaction: redb serialises them, so two callers cannot create two keys, nor two
    /// rotations lose one.
    async fn keys_op(&self, op: KeyOp) -> Result<Option<KeyRing>, PortError> {
        let path = self.path.clone();
        self.write_off("writing the continuation key".into(), move |txn| {
            let mut table = txn.open_table(SECRETS)?;
            let stored = table
                .get(CONTINUATION_SECRET)?
                .map(|v| decode_keys(v.value()));
            let new = match (op, stored.transpose()?) {
                (KeyOp::Read, stored) => return Ok(stored),
                (KeyOp::LoadOrCreate, Some(stored)) => return Ok(Some(stored)),
                (KeyOp::LoadOrCreate | KeyOp::Rotate, None) => {
                    KeyRing::of(ContinuationKey::new(rand::random()))
                }
                (KeyOp::Rotate, Some(stored)) => {
                    stored.rotated(rand::random()).ok_or_else(|| {
                        let what = "rotating the continuation key";
                        Box::new(backend(&path, what, "its id cannot grow")) as BoxError
                    })?
                }
            };
            table.insert(CONTINUATION_SECRET, encode_keys(&new).as_slice())?;
            Ok(Some(new))
        })
        .await
    }

    /// Changes the rounds of `key` by `change` in one write transaction (redb serialises them).
    async fn change_rounds<T: Send + 'static>(
        &self,
        key: &ClusterId,
        change: impl FnOnce(&mut Rounds) -> T + Send + 'static,
    ) -> Result<T, PortError> {
        let key = round_of(key);
        self.write_off(format!("writing the rounds of {key}"), move |txn| {
            let mut table = txn.open_table(ROUNDS)?;
            let stored = table
                .get(key.as_str())?
                .map(|v| parse(&key, v.value(), "rounds"));
            let mut rounds: Rounds = stored.transpose()?.unwrap_or_default();
            let answer = change(&mut rounds);
            table.insert(key.as_str(), serde_json::to_string(&rounds)?.as_str())?;
            Ok(answer)
        })
        .await
    }
}

#[async_trait]
impl TrafficRounds for EmbeddedStore {
    async fn offer(
        &self,
        key: &ClusterId,
        doomed: &[Doomed],
        _now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let doomed = doomed.to_vec();
        self.change_rounds(key, move |r| r.offer(&doomed)).await
    }

    async fn claim(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Claim, PortError> {
        self.change_rounds(key, move |r| r.claim(now, lease)).await
    }

    async fn settle(
        &self,
        key: &ClusterId,
        settled: &Settled,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let expires = (now + span(OUTCOME_KEPT)).timestamp_millis();
        let prefix = round_of(key);
        let outcomes = settled.outcomes.clone();
        self.write_off(format!("writing the outcomes of {prefix}"), move |txn| {
            let mut table = txn.open_table(OUTCOMES)?;
            for (instance, outcome) in &outcomes {
                let json = serde_json::to_string(outcome)?;
                table.insert(
                    format!("{prefix}#{instance}").as_str(),
                    (expires, json.as_str()),
                )?;
            }
            Ok(())
        })
        .await?;
        let settled = settled.clone();
        self.change_rounds(key, move |r| r.settle(now, &settled))
            .await
    }

    async fn outcomes(
        &self,
        key: &ClusterId,
        instances: &[String],
    ) -> Result<BTreeMap<String, Outcome>, PortError> {
        let prefix = round_of(key);
        let instances = instances.to_vec();
        self.read(format!("reading the outcomes of {prefix}"), move |txn| {
            let table = txn.open_table(OUTCOMES)?;
            let mut found = BTreeMap::new();
            for instance in instances {
                let key = format!("{prefix}#{instance}");
                if let Some(entry) = table.get(key.as_str())? {
                    let outcome = parse(&key, entry.value().1, "an outcome")?;
                    found.insert(instance, outcome);
                }
            }
            Ok(found)
        })
        .await
    }
}

/// The key of `cluster`'s list (its claim; its pages start with it).
fn list_key(cluster: &ClusterId) -> String {
    cluster.key("LIST")
}

#[async_trait]
impl SharedLists for EmbeddedStore {
    async fn claim_list(
        &self,
        key: &ClusterId,
        now: DateTime<Utc>,
        lease: std::time::Duration,
    ) -> Result<Option<DateTime<Utc>>, PortError> {
        let (key, at) = (list_key(key), now.timestamp_millis());
        let lease = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        self.write_off(format!("claiming the list of {key}"), move |txn| {
            let mut table = txn.open_table(LIST_CLAIMS)?;
            let claimed = table.get(key.as_str())?.map(|v| v.value());
            if let Some(claimed) = claimed.filter(|c| at.saturating_sub(*c) < lease) {
                return Ok(DateTime::from_timestamp_millis(claimed));
            }
            table.insert(key.as_str(), at)?;
            Ok(None)
        })
        .await
    }

    async fn put_page(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        n: usize,
        page: &str,
    ) -> Result<(), PortError> {
        let key = format!("{}#{}#{n}", list_key(key), at.timestamp_millis());
        let (expires, page) = ((at + span(LIST_KEPT)).timestamp_millis(), page.to_string());
        self.write_off(format!("writing {key}"), move |txn| {
            let mut table = txn.open_table(LIST_PAGES)?;
            table.insert(key.as_str(), (expires, page.as_str()))?;
            Ok(())
        })
        .await
    }

    async fn pages(
        &self,
        key: &ClusterId,
        at: DateTime<Utc>,
        from: usize,
    ) -> Result<Vec<String>, PortError> {
        let prefix = format!("{}#{}", list_key(key), at.timestamp_millis());
        self.read(format!("reading the list of {prefix}"), move |txn| {
            let table = txn.open_table(LIST_PAGES)?;
            let mut pages = Vec::new();
            for n in from..from + PAGES_READ {
                match table.get(format!("{prefix}#{n}").as_str())? {
                    Some(page) => pages.push(page.value().1.to_string()),
                    None => break,
                }
            }
            Ok(pages)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use crate::domain::pool::{CapacityType, PoolMark};
    use crate::ports::Corrupt;
    use chrono::{Duration, TimeZone};
    use redb::ReadableTableMetadata;

    fn update(id: &str, recorded_at: DateTime<Utc>) -> Plan {
        Plan {
            event_id: id.into(),
            kind: EventKind::SpotInterruption,
            time: recorded_at,
            summary: "r".into(),
            pools: vec![PoolMark {
                pool: PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a"),
                instance_id: "i-1".into(),
                unavailable_until: Some(recorded_at + Duration::minutes(10)),
            }],
            ..Plan::default()
        }
    }

    #[tokio::test]
    async fn expired_ledger_entries_do_not_count_and_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let retention = Retention {
            ledger: Duration::hours(1),
            history: Duration::days(1),
        };
        let mut store = EmbeddedStore::open(dir.path()).unwrap();
        store.retention = retention;
        let long_ago = Utc::now() - Duration::days(3);
        assert_eq!(
            store
                .apply(&update("e1", long_ago), long_ago)
                .await
                .unwrap(),
            Applied::Applied
        );
        assert!(store.applied(&["e1".into()]).await.unwrap().is_empty());
        // Redelivered after the ledger forgot it: applied again.
        let later = long_ago + Duration::hours(2);
        assert_eq!(
            store.apply(&update("e1", later), later).await.unwrap(),
            Applied::Applied
        );
        let txn = store.db.begin_read().unwrap();
        assert_eq!(txn.open_table(LEDGER).unwrap().len().unwrap(), 1);
        assert_eq!(txn.open_table(POOLS).unwrap().len().unwrap(), 1);
        store.purge(Utc::now()).unwrap();
        let txn = store.db.begin_read().unwrap();
        assert!(txn.open_table(LEDGER).unwrap().is_empty().unwrap());
        assert!(txn.open_table(POOLS).unwrap().is_empty().unwrap());
    }

    #[tokio::test]
    async fn traffic_outcomes_are_purged_once_expired() {
        use crate::ports::TrafficRounds;
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let place = crate::ports::Place::of("123456789012", "us-east-1");
        let key = ClusterId::at(&place, "blue");
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
        store.purge(Utc::now()).unwrap();
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
        store.purge(Utc::now()).unwrap();
        assert!(store.outcomes(&key, &ids).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn reopening_keeps_the_data_and_a_corrupt_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.timestamp_opt(Utc::now().timestamp(), 0).unwrap();
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.apply(&update("e1", now), now).await.unwrap();
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.path(), dir.path().join("pools.redb"));
        assert!(store.location().contains("pools.redb"));
        assert_eq!(
            store.apply(&update("e1", now), now).await.unwrap(),
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
        match store
            .pools(&PoolQuery::default(), now)
            .await
            .map_err(|e| e.cause::<Corrupt>().cloned())
        {
            Err(Some(Corrupt { key, .. })) => assert_eq!(key, "spot#c5.large#us-east-1a"),
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
