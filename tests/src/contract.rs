//! The pool store contract: one suite, written against [`PoolStore`] alone, that every store
//! must pass (`tests/tests/pool_store_contract.rs` runs it against the embedded store and against
//! DynamoDB on moto).
//!
//! Each case gets a fresh, empty store with the default [`Retention`]. Times are whole seconds
//! (the DynamoDB store keeps epoch seconds) and near the real clock (the ledger's expiry is
//! checked against it).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use forewarn::domain::event::EventKind;
use forewarn::domain::plan::Plan;
use forewarn::domain::pool::{
    Applied, CapacityType, PoolKey, PoolMark, PoolQuery, PoolRecord, Retention,
};
use forewarn::ports::PoolStore;

/// The store under test, twice: `store`, and `other`, a second handle on the same data as
/// another process would open it (sharing no in-process state with `store`).
#[derive(Clone)]
pub struct Subject {
    pub store: Arc<dyn PoolStore>,
    pub other: Arc<dyn PoolStore>,
}

/// Now, in whole seconds.
pub fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(Utc::now().timestamp(), 0)
        .single()
        .unwrap_or_else(Utc::now)
}

pub fn pool(capacity_type: CapacityType, instance_type: &str, zone: &str) -> PoolKey {
    PoolKey::new(capacity_type, instance_type, zone)
}

pub fn spot(instance_type: &str, zone: &str) -> PoolKey {
    pool(CapacityType::Spot, instance_type, zone)
}

pub fn mark(pool: &PoolKey, instance_id: &str, until: Option<DateTime<Utc>>) -> PoolMark {
    PoolMark {
        pool: pool.clone(),
        instance_id: instance_id.to_string(),
        unavailable_until: until,
    }
}

/// A spot interruption `id` at `time`, with `marks`.
pub fn event(id: &str, time: DateTime<Utc>, marks: Vec<PoolMark>) -> Plan {
    Plan {
        event_id: id.to_string(),
        kind: EventKind::SpotInterruption,
        time,
        region: Some("us-east-1".into()),
        summary: format!("spot-interruption (terminate) {id}"),
        pools: marks,
        ..Plan::default()
    }
}

/// When the tests record `update`: a second after its event.
pub fn recorded(update: &Plan) -> DateTime<Utc> {
    update.time + Duration::seconds(1)
}

fn all() -> PoolQuery {
    PoolQuery {
        include_available: true,
        ..PoolQuery::default()
    }
}

async fn apply(store: &dyn PoolStore, update: &Plan) -> Applied {
    store
        .apply(update, recorded(update))
        .await
        .unwrap_or_else(|e| panic!("{}: applying {}: {e}", store.location(), update.event_id))
}

async fn pools(store: &dyn PoolStore, query: &PoolQuery, at: DateTime<Utc>) -> Vec<PoolRecord> {
    store
        .pools(query, at)
        .await
        .unwrap_or_else(|e| panic!("{}: querying {query:?}: {e}", store.location()))
}

/// The one record of `key` (among every pool, at `at`).
async fn record(store: &dyn PoolStore, key: &PoolKey, at: DateTime<Utc>) -> PoolRecord {
    let found: Vec<PoolRecord> = pools(store, &all(), at)
        .await
        .into_iter()
        .filter(|r| r.pool == *key)
        .collect();
    match <[PoolRecord; 1]>::try_from(found) {
        Ok([r]) => r,
        Err(found) => panic!(
            "{}: expected one record of {key}, found {found:?}",
            store.location()
        ),
    }
}

fn keys(records: &[PoolRecord]) -> Vec<String> {
    records.iter().map(|r| r.pool.to_string()).collect()
}

/// The first event on a pool creates its record with every field.
pub async fn first_write_creates_the_pool(s: Subject) {
    let store = &*s.store;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    let until = t + Duration::minutes(10);
    let update = event("e-first", t, vec![mark(&key, "i-0123", Some(until))]);
    assert_eq!(apply(store, &update).await, Applied::Applied);
    let expected = PoolRecord {
        pool: key.clone(),
        region: Some("us-east-1".into()),
        unavailable_until: Some(until),
        expires_at: until + Retention::default().history,
        counters: BTreeMap::from([("interruptions".to_string(), 1)]),
        first_seen: t,
        last_seen: t,
        last_event_id: "e-first".into(),
        last_reason: update.summary.clone(),
        last_instance_id: "i-0123".into(),
    };
    assert_eq!(pools(store, &PoolQuery::default(), t).await, [expected]);
}

/// A redelivered event id is a duplicate, whatever it carries, and changes nothing.
pub async fn duplicate_event_changes_nothing(s: Subject) {
    let store = &*s.store;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    let update = event(
        "e-dup",
        t,
        vec![mark(&key, "i-1", Some(t + Duration::minutes(10)))],
    );
    assert_eq!(apply(store, &update).await, Applied::Applied);
    let before = pools(store, &all(), t).await;
    assert_eq!(apply(store, &update).await, Applied::Duplicate);
    // Same id, other content (a later window, another pool): still the same event.
    let mut changed = event(
        "e-dup",
        t + Duration::minutes(1),
        vec![
            mark(&key, "i-2", Some(t + Duration::hours(5))),
            mark(&spot("c5.large", "us-east-1b"), "i-3", None),
        ],
    );
    changed.kind = EventKind::RebalanceRecommendation;
    assert_eq!(apply(store, &changed).await, Applied::Duplicate);
    assert_eq!(apply(&*s.other, &changed).await, Applied::Duplicate);
    assert_eq!(pools(store, &all(), t).await, before);
}

/// Two events on one pool count twice; the newer one's details are the last ones.
pub async fn two_events_count_twice_and_the_newer_is_last(s: Subject) {
    let store = &*s.store;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    let first = event(
        "e-1",
        t,
        vec![mark(&key, "i-1", Some(t + Duration::minutes(10)))],
    );
    let second = event(
        "e-2",
        t + Duration::minutes(2),
        vec![mark(&key, "i-2", Some(t + Duration::minutes(12)))],
    );
    assert_eq!(apply(store, &first).await, Applied::Applied);
    assert_eq!(apply(store, &second).await, Applied::Applied);
    let r = record(store, &key, t).await;
    assert_eq!(r.interruptions(), 2);
    assert_eq!(r.counters.len(), 1, "{:?}", r.counters);
    assert_eq!(r.first_seen, t);
    assert_eq!(r.last_seen, t + Duration::minutes(2));
    assert_eq!(r.last_event_id, "e-2");
    assert_eq!(r.last_reason, second.summary);
    assert_eq!(r.last_instance_id, "i-2");
    assert_eq!(r.unavailable_until, Some(t + Duration::minutes(12)));
    assert_eq!(
        r.expires_at,
        t + Duration::minutes(12) + Retention::default().history
    );
}

/// Counters of different kinds are kept apart.
pub async fn each_kind_has_its_counter(s: Subject) {
    let store = &*s.store;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    for (i, &kind) in EventKind::ALL.iter().enumerate() {
        let mut u = event(&format!("e-{i}"), t, vec![mark(&key, "i-1", None)]);
        u.kind = kind;
        assert_eq!(apply(store, &u).await, Applied::Applied);
    }
    let r = record(store, &key, t).await;
    for &kind in EventKind::ALL {
        assert_eq!(r.counter(kind), 1, "{kind}: {:?}", r.counters);
    }
    assert_eq!(r.counters.len(), EventKind::ALL.len());
}

/// A late (older) event counts, but never shortens the window nor replaces the last details,
/// whether the store that applies it saw the newer event or not. A late event with a longer
/// window extends the window (and the expiry) but still is not the last event.
pub async fn late_event_never_shortens_nor_overwrites(s: Subject) {
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    let newer = event(
        "e-new",
        t + Duration::minutes(5),
        vec![mark(&key, "i-new", Some(t + Duration::minutes(30)))],
    );
    let older = event(
        "e-old",
        t,
        vec![mark(&key, "i-old", Some(t + Duration::minutes(10)))],
    );
    assert_eq!(apply(&*s.store, &newer).await, Applied::Applied);
    // Through the other handle (which has not seen the pool), then through the same one.
    assert_eq!(apply(&*s.other, &older).await, Applied::Applied);
    let mut older_again = older.clone();
    older_again.event_id = "e-old-2".into();
    older_again.time = t + Duration::minutes(1);
    assert_eq!(apply(&*s.store, &older_again).await, Applied::Applied);
    let history = Retention::default().history;
    for store in [&*s.store, &*s.other] {
        let r = record(store, &key, t).await;
        assert_eq!(r.interruptions(), 3);
        assert_eq!(r.unavailable_until, Some(t + Duration::minutes(30)));
        assert_eq!(r.last_seen, t + Duration::minutes(5));
        assert_eq!(r.last_event_id, "e-new");
        assert_eq!(r.last_instance_id, "i-new");
        assert_eq!(r.last_reason, newer.summary);
        assert_eq!(r.first_seen, t, "the earliest event time");
        assert_eq!(r.expires_at, t + Duration::minutes(30) + history);
    }

    // Late, but with a longer window.
    let late_long = event(
        "e-late-long",
        t + Duration::minutes(2),
        vec![mark(&key, "i-late", Some(t + Duration::hours(3)))],
    );
    assert_eq!(apply(&*s.other, &late_long).await, Applied::Applied);
    let r = record(&*s.store, &key, t).await;
    assert_eq!(r.unavailable_until, Some(t + Duration::hours(3)));
    assert_eq!(r.expires_at, t + Duration::hours(3) + history);
    assert_eq!(r.last_event_id, "e-new");
    assert_eq!(r.interruptions(), 4);

    // A newer event that only counts: the last details move, the window stays.
    let mut counting = event(
        "e-count",
        t + Duration::minutes(20),
        vec![mark(&key, "i-c", None)],
    );
    counting.kind = EventKind::StateChange;
    counting.summary = "state-change (shutting-down)".into();
    assert_eq!(apply(&*s.other, &counting).await, Applied::Applied);
    let r = record(&*s.store, &key, t).await;
    assert_eq!(r.unavailable_until, Some(t + Duration::hours(3)));
    assert_eq!(r.expires_at, t + Duration::hours(3) + history);
    assert_eq!(r.last_event_id, "e-count");
    assert_eq!(r.last_reason, "state-change (shutting-down)");
    assert_eq!(r.last_instance_id, "i-c");
    assert_eq!(r.last_seen, t + Duration::minutes(20));
    assert_eq!(r.counter(EventKind::StateChange), 1);
    assert_eq!(r.interruptions(), 4);
    assert_eq!(r.first_seen, t);

    // An event older than every other one moves first_seen back.
    let oldest = event(
        "e-oldest",
        t - Duration::hours(1),
        vec![mark(&key, "i-o", None)],
    );
    assert_eq!(apply(&*s.store, &oldest).await, Applied::Applied);
    let r = record(&*s.other, &key, t).await;
    assert_eq!(r.first_seen, t - Duration::hours(1));
    assert_eq!(r.last_event_id, "e-count");
    assert_eq!(r.interruptions(), 5);
}

/// Many tasks applying distinct events to one hot pool at once, through two handles, in no
/// particular order: no increment is lost, and the result is the same as in order.
pub async fn concurrent_increments_are_never_lost(s: Subject) {
    const TASKS: usize = 32;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    // Event i happens at t + i s, unavailable until t + 10 min + (i mod 7) min: the latest event
    // (31) does not have the latest window (i = 6, 13, 20, 27), so late events win some fields.
    let time = |i: usize| t + Duration::seconds(i as i64);
    let until = |i: usize| t + Duration::minutes(10 + (i % 7) as i64);
    let mut handles = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let store = if i % 2 == 0 {
            s.store.clone()
        } else {
            s.other.clone()
        };
        let update = event(
            &format!("e-hot-{i}"),
            time(i),
            vec![mark(&key, &format!("i-{i}"), Some(until(i)))],
        );
        handles.push(tokio::spawn(async move {
            store.apply(&update, recorded(&update)).await
        }));
    }
    for (i, handle) in handles.into_iter().enumerate() {
        let result = handle
            .await
            .unwrap_or_else(|e| panic!("task {i} failed: {e}"));
        assert!(
            matches!(result, Ok(Applied::Applied)),
            "event e-hot-{i}: {result:?}"
        );
    }
    let r = record(&*s.store, &key, t).await;
    assert_eq!(r.interruptions(), TASKS as u64);
    assert_eq!(r.first_seen, time(0));
    assert_eq!(r.last_seen, time(TASKS - 1));
    assert_eq!(r.last_event_id, format!("e-hot-{}", TASKS - 1));
    assert_eq!(r.last_instance_id, format!("i-{}", TASKS - 1));
    assert_eq!(r.unavailable_until, Some(until(6)));
    assert_eq!(r.expires_at, until(6) + Retention::default().history);
    let ids: Vec<String> = (0..TASKS).map(|i| format!("e-hot-{i}")).collect();
    let applied = s.store.applied(&ids).await.unwrap();
    assert_eq!(applied.len(), TASKS);
}

/// A query at a time past a pool's window hides it unless `include_available`; past its expiry
/// it is hidden always (DynamoDB's TTL deletes late, the store must not show it meanwhile).
pub async fn expiry_filtering(s: Subject) {
    let store = &*s.store;
    let t = now();
    let history = Retention::default().history;
    let marked = spot("m5.large", "us-east-1a");
    let counted = spot("c5.large", "us-east-1a");
    let until = t + Duration::minutes(10);
    let u = event(
        "e-exp",
        t,
        vec![
            mark(&marked, "i-1", Some(until)),
            mark(&counted, "i-2", None),
        ],
    );
    assert_eq!(apply(store, &u).await, Applied::Applied);

    let current = PoolQuery::default();
    assert_eq!(keys(&pools(store, &current, t).await), [marked.to_string()]);
    assert_eq!(
        keys(&pools(store, &current, until - Duration::seconds(1)).await),
        [marked.to_string()]
    );
    assert!(
        pools(store, &current, until).await.is_empty(),
        "the window is over at `until`"
    );
    let after = until + Duration::seconds(1);
    assert!(pools(store, &current, after).await.is_empty());
    let mut both = keys(&pools(store, &all(), after).await);
    both.sort();
    assert_eq!(both, [counted.to_string(), marked.to_string()]);

    // The counted pool expires `history` after the event, the marked one after its window.
    let counted_gone = t + history;
    assert_eq!(
        keys(&pools(store, &all(), counted_gone).await),
        [marked.to_string()]
    );
    assert!(pools(store, &all(), until + history).await.is_empty());
    assert!(
        pools(store, &all(), until + history + Duration::days(1))
            .await
            .is_empty()
    );
}

/// Queries by zone, by instance type and by both; newest first.
pub async fn queries_by_zone_and_instance_type(s: Subject) {
    let store = &*s.store;
    let t = now();
    let window = |m: i64| Some(t + Duration::minutes(m));
    let m5_a = spot("m5.large", "us-east-1a");
    let m5_b = spot("m5.large", "us-east-1b");
    let c5_a = spot("c5.large", "us-east-1a");
    let od_m5_a = pool(CapacityType::OnDemand, "m5.large", "us-east-1a");
    let r5_c = spot("r5.large", "us-east-1c");
    let events = [
        event("e-m5-a", t, vec![mark(&m5_a, "i-1", window(30))]),
        event(
            "e-m5-b",
            t + Duration::seconds(10),
            vec![mark(&m5_b, "i-2", window(30))],
        ),
        event(
            "e-c5-a",
            t + Duration::seconds(20),
            vec![mark(&c5_a, "i-3", window(30))],
        ),
        event(
            "e-od",
            t + Duration::seconds(30),
            vec![mark(&od_m5_a, "i-4", None)],
        ),
        event(
            "e-r5-c",
            t - Duration::hours(2),
            vec![mark(&r5_c, "i-5", window(-60))],
        ),
    ];
    for e in &events {
        assert_eq!(apply(store, e).await, Applied::Applied);
    }
    let q = |zone: Option<&str>, instance_type: Option<&str>, include_available| PoolQuery {
        include_available,
        zone: zone.map(str::to_string),
        instance_type: instance_type.map(str::to_string),
    };
    let cases: [(PoolQuery, Vec<&PoolKey>); 9] = [
        (q(None, None, false), vec![&c5_a, &m5_b, &m5_a]),
        (
            q(None, None, true),
            vec![&od_m5_a, &c5_a, &m5_b, &m5_a, &r5_c],
        ),
        (q(Some("us-east-1a"), None, false), vec![&c5_a, &m5_a]),
        (
            q(Some("us-east-1a"), None, true),
            vec![&od_m5_a, &c5_a, &m5_a],
        ),
        (q(None, Some("m5.large"), false), vec![&m5_b, &m5_a]),
        (
            q(None, Some("m5.large"), true),
            vec![&od_m5_a, &m5_b, &m5_a],
        ),
        (
            q(Some("us-east-1a"), Some("m5.large"), true),
            vec![&od_m5_a, &m5_a],
        ),
        (q(Some("us-east-1c"), None, false), vec![]),
        (q(Some("us-east-1c"), Some("r5.large"), true), vec![&r5_c]),
    ];
    for (query, expected) in cases {
        let expected: Vec<String> = expected.iter().map(|k| k.to_string()).collect();
        assert_eq!(keys(&pools(store, &query, t).await), expected, "{query:?}");
    }
}

/// `applied` answers exactly the ids applied, whatever else it is asked (duplicates, unknown
/// ids, more than one batch).
pub async fn applied_reports_exactly_the_applied_ids(s: Subject) {
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    for id in ["e-a", "e-b", "e-c"] {
        assert_eq!(
            apply(&*s.store, &event(id, t, vec![mark(&key, "i-1", None)])).await,
            Applied::Applied
        );
    }
    // An event without marks is still recorded as applied.
    assert_eq!(
        apply(&*s.store, &event("e-empty", t, vec![])).await,
        Applied::Applied
    );
    let none: &[String] = &[];
    assert!(s.store.applied(none).await.unwrap().is_empty());
    let mut asked: Vec<String> = (0..250).map(|i| format!("e-unknown-{i}")).collect();
    asked.insert(17, "e-a".into());
    asked.insert(140, "e-c".into());
    asked.push("e-a".into());
    asked.push("e-empty".into());
    let want: HashSet<String> = ["e-a", "e-c", "e-empty"].map(String::from).into();
    assert_eq!(s.store.applied(&asked).await.unwrap(), want);
    assert_eq!(s.other.applied(&asked).await.unwrap(), want);
    assert_eq!(
        s.store
            .applied(&["e-b".to_string(), "e-x".to_string()])
            .await
            .unwrap(),
        HashSet::from(["e-b".to_string()])
    );
}

/// An event marking several pools updates all of them together; one that cannot be applied (a
/// bad pool key, a pool marked twice) changes none of them and is not recorded as applied.
pub async fn multi_pool_event_is_atomic(s: Subject) {
    let store = &*s.store;
    let t = now();
    let a = spot("m5.large", "us-east-1a");
    let b = spot("m5.large", "us-east-1b");
    let c = pool(CapacityType::OnDemand, "c5.large", "us-east-1c");
    let u = event(
        "e-multi",
        t,
        vec![
            mark(&a, "i-1", Some(t + Duration::minutes(15))),
            mark(&b, "i-2", Some(t + Duration::minutes(20))),
            mark(&c, "i-4", None),
        ],
    );
    assert_eq!(apply(store, &u).await, Applied::Applied);
    let ra = record(store, &a, t).await;
    assert_eq!(ra.interruptions(), 1);
    assert_eq!(ra.unavailable_until, Some(t + Duration::minutes(15)));
    assert_eq!(ra.last_instance_id, "i-1");
    let rb = record(store, &b, t).await;
    assert_eq!(rb.interruptions(), 1);
    assert_eq!(rb.unavailable_until, Some(t + Duration::minutes(20)));
    let rc = record(store, &c, t).await;
    assert_eq!(rc.interruptions(), 1);
    assert_eq!(rc.unavailable_until, None);
    for r in [&ra, &rb, &rc] {
        assert_eq!(r.last_event_id, "e-multi");
    }

    // One bad pool key spoils the whole event, and so does a pool marked twice (a transaction
    // touches an item once: the decision marks a pool once).
    let before = pools(store, &all(), t).await;
    let later = t + Duration::minutes(1);
    let bad = event(
        "e-bad",
        later,
        vec![
            mark(&a, "i-5", Some(t + Duration::hours(1))),
            mark(&spot("m5.large", ""), "i-6", None),
        ],
    );
    let err = store
        .apply(&bad, recorded(&bad))
        .await
        .expect_err("a pool without a zone");
    assert!(err.to_string().contains("e-bad"), "{err}");
    let twice = event(
        "e-twice",
        later,
        vec![mark(&a, "i-5", None), mark(&a, "i-3", None)],
    );
    let err = store
        .apply(&twice, recorded(&twice))
        .await
        .expect_err("a pool marked twice");
    assert!(err.to_string().contains("marked twice"), "{err}");
    assert_eq!(pools(store, &all(), t).await, before);
    let ids = ["e-bad".to_string(), "e-twice".to_string()];
    assert!(store.applied(&ids).await.unwrap().is_empty());
}

/// The further idempotence keys (`also_keys`): recorded with the event id in the same write, so
/// that an event under another id carrying one of them (a sweep's finding after the handled
/// event, or the event after a sweep) is a duplicate and changes nothing.
pub async fn also_keys_make_other_ids_duplicates(s: Subject) {
    let store = &*s.store;
    let t = now();
    let key = spot("m5.large", "us-east-1a");
    let mut handled = event(
        "e-handled",
        t,
        vec![mark(&key, "i-1", Some(t + Duration::minutes(10)))],
    );
    handled.also_keys = vec!["sweep:spot-interruption:i-1".into()];
    assert_eq!(apply(store, &handled).await, Applied::Applied);
    let before = pools(store, &all(), t).await;
    let mut sweep = event(
        "sweep:spot-interruption:i-1",
        t + Duration::minutes(5),
        vec![mark(&key, "i-1", Some(t + Duration::minutes(65)))],
    );
    sweep.also_keys = Vec::new();
    assert_eq!(apply(store, &sweep).await, Applied::Duplicate);
    assert_eq!(apply(&*s.other, &sweep).await, Applied::Duplicate);
    assert_eq!(
        pools(store, &all(), t).await,
        before,
        "the sweep changed the pool"
    );
    let ids = [
        "e-handled".to_string(),
        "sweep:spot-interruption:i-1".to_string(),
    ];
    assert_eq!(
        s.store.applied(&ids).await.unwrap().len(),
        2,
        "both keys are in the ledger"
    );

    // The other way round: the sweep came first, then the real event.
    let mut first = event("sweep:state-change:i-9", t, vec![mark(&key, "i-9", None)]);
    first.kind = EventKind::StateChange;
    assert_eq!(apply(store, &first).await, Applied::Applied);
    let counted = record(store, &key, t).await.counter(EventKind::StateChange);
    let mut real = event(
        "e-real",
        t + Duration::minutes(1),
        vec![mark(&key, "i-9", None)],
    );
    real.kind = EventKind::StateChange;
    real.also_keys = vec!["sweep:state-change:i-9".into()];
    assert_eq!(apply(store, &real).await, Applied::Duplicate);
    assert_eq!(
        record(store, &key, t).await.counter(EventKind::StateChange),
        counted
    );
}

/// The history behind `forewarn pools --stats`: one entry per mark of an applied event, none
/// for a duplicate, kept until its expiry, filtered to the period asked.
pub async fn history_keeps_one_entry_per_applied_mark(s: Subject) {
    let store = &*s.store;
    let t = now();
    let hot = spot("m5.large", "us-east-1a");
    let other = spot("c5.large", "us-east-1b");
    let first = event(
        "e-h1",
        t - Duration::hours(2),
        vec![
            mark(&hot, "i-1", Some(t - Duration::hours(1))),
            mark(&other, "i-2", None),
        ],
    );
    assert_eq!(apply(store, &first).await, Applied::Applied);
    assert_eq!(apply(&*s.other, &first).await, Applied::Duplicate);
    let mut rebalance = event(
        "e-h2",
        t - Duration::minutes(10),
        vec![mark(&hot, "i-3", None)],
    );
    rebalance.kind = EventKind::RebalanceRecommendation;
    assert_eq!(apply(store, &rebalance).await, Applied::Applied);
    // Long ago: outside the period, and its window too.
    let old = event(
        "e-h0",
        t - Duration::days(20),
        vec![mark(
            &hot,
            "i-0",
            Some(t - Duration::days(20) + Duration::hours(1)),
        )],
    );
    assert_eq!(apply(store, &old).await, Applied::Applied);

    let mut entries = store
        .history(t - Duration::days(7), t)
        .await
        .expect("reading the history");
    entries.sort_by(|a, b| (a.at, &a.instance_id).cmp(&(b.at, &b.instance_id)));
    let seen: Vec<(&str, &str, EventKind)> = entries
        .iter()
        .map(|e| (e.event_id.as_str(), e.instance_id.as_str(), e.kind))
        .collect();
    assert_eq!(
        seen,
        [
            ("e-h1", "i-1", EventKind::SpotInterruption),
            ("e-h1", "i-2", EventKind::SpotInterruption),
            ("e-h2", "i-3", EventKind::RebalanceRecommendation),
        ]
    );
    assert_eq!(entries[0].pool, hot);
    assert_eq!(entries[0].at, t - Duration::hours(2));
    assert_eq!(entries[0].unavailable_until, Some(t - Duration::hours(1)));
    assert_eq!(
        entries[0].expires_at,
        t - Duration::hours(1) + Retention::default().history
    );
    assert_eq!(entries[1].unavailable_until, None);
    // One pool's history, by event time (what `adaptive` reads): only that pool's entries whose
    // event is in the period; the old event's window overlapping it does not bring it in.
    let mut of_hot = store
        .history_of(std::slice::from_ref(&hot), t - Duration::days(7), t)
        .await
        .expect("reading a pool's history");
    of_hot.sort_by_key(|e| e.at);
    let ids: Vec<&str> = of_hot.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["e-h1", "e-h2"]);
    assert!(of_hot.iter().all(|e| e.pool == hot));
    assert_eq!(
        store
            .history_of(&[hot.clone(), other.clone()], t - Duration::days(30), t)
            .await
            .unwrap()
            .len(),
        4
    );
    assert!(
        store
            .history_of(&[], t - Duration::days(30), t)
            .await
            .unwrap()
            .is_empty()
    );
    // The other store sees the same history; a longer period brings the old one in.
    assert_eq!(
        s.other
            .history(t - Duration::days(30), t)
            .await
            .unwrap()
            .len(),
        4
    );
    // After their expiry, entries are gone from every read.
    let later = t - Duration::hours(1) + Retention::default().history + Duration::seconds(1);
    let left = store
        .history(later - Duration::days(60), later)
        .await
        .unwrap();
    assert!(
        left.iter().all(|e| e.event_id == "e-h2"),
        "only the rebalance, recorded later, is left: {left:?}"
    );
}

/// One update records at most `MAX_POOLS_PER_UPDATE` (49) pools, with two ledger keys (a spot
/// warning's event id and sweep key): that fits one DynamoDB transaction exactly (2 + 49 pool
/// updates + 49 history items = 100). One more pool is refused, naming the count, and nothing is
/// written (the decision never hands a store more: `plan::decide`).
pub async fn updates_of_more_pools_than_the_limit_are_refused_whole(s: Subject) {
    use forewarn::domain::pool::MAX_POOLS_PER_UPDATE;
    let store = &*s.store;
    let t = now();
    let marks = |n: usize| -> Vec<PoolMark> {
        (0..n)
            .map(|i| {
                let key = spot(&format!("m{i}.large"), "us-east-1a");
                mark(&key, &format!("i-{i}"), Some(t + Duration::minutes(10)))
            })
            .collect()
    };
    let mut over = event("e-over", t, marks(MAX_POOLS_PER_UPDATE + 1));
    over.also_keys = vec!["sweep:spot-interruption:i-0".into()];
    let err = store
        .apply(&over, recorded(&over))
        .await
        .expect_err("one pool more than the limit")
        .to_string();
    assert!(err.contains("50 pools"), "{}: {err}", store.location());
    assert!(pools(store, &all(), t).await.is_empty(), "nothing written");
    let ids = [
        "e-over".to_string(),
        "sweep:spot-interruption:i-0".to_string(),
    ];
    assert!(store.applied(&ids).await.unwrap().is_empty());

    let mut full = event("e-full", t, marks(MAX_POOLS_PER_UPDATE));
    full.also_keys = vec!["sweep:spot-interruption:i-0".into()];
    assert_eq!(apply(store, &full).await, Applied::Applied);
    assert_eq!(pools(store, &all(), t).await.len(), MAX_POOLS_PER_UPDATE);
    assert_eq!(store.applied(&ids).await.unwrap().len(), 1);
    // Sent again (the same transaction, the same request token): a duplicate, nothing changed.
    assert_eq!(apply(&*s.other, &full).await, Applied::Duplicate);
    assert_eq!(
        record(store, &spot("m0.large", "us-east-1a"), t)
            .await
            .interruptions(),
        1
    );
}

/// The continuation key rotates: a new current key of the next id, the current one kept as the
/// previous, the one before dropped; another process that read the keys before sees the
/// rotation when it reads them again; a read-only view reads the keys but never creates them.
pub async fn the_continuation_key_rotates_keeping_the_previous_one(s: Subject) {
    use forewarn::adapters::read_only::ReadOnlyStore;
    use forewarn::ports::FailureKind;
    let read_only = ReadOnlyStore(s.store.clone());
    let none = read_only.continuation_keys().await.unwrap_err();
    assert_eq!(none.kind, FailureKind::NotFound, "{none}");
    assert_eq!(
        s.store.reread_continuation_keys().await.unwrap(),
        None,
        "never created by a read"
    );
    assert!(read_only.rotate_continuation_key().await.is_err());
    let first = s.store.continuation_keys().await.unwrap();
    assert_eq!(read_only.continuation_keys().await.unwrap(), first);
    let once = s.store.rotate_continuation_key().await.unwrap();
    assert_eq!(once.current.id(), 2);
    assert_ne!(once.current.bytes(), first.current.bytes());
    assert_eq!(once.previous.as_ref(), Some(&first.current));
    assert_eq!(
        s.store.continuation_keys().await.unwrap(),
        once,
        "the rotator's cache"
    );
    assert_eq!(
        s.other.reread_continuation_keys().await.unwrap(),
        Some(once.clone())
    );
    assert_eq!(
        s.other.continuation_keys().await.unwrap(),
        once,
        "read again: cached"
    );
    let twice = s.other.rotate_continuation_key().await.unwrap();
    assert_eq!(twice.current.id(), 3);
    assert_eq!(twice.previous.as_ref(), Some(&once.current));
    assert!(
        twice.get(1).is_none(),
        "the key two rotations old is dropped"
    );
    assert_eq!(
        s.store.reread_continuation_keys().await.unwrap(),
        Some(twice)
    );
}

/// The continuation key: 32 bytes, the same for every caller — among concurrent first callers
/// too (several cold starts at once), and in another process — and invisible to the pools and
/// the history. The embedded store creates it at its first caller; the DynamoDB store reads the
/// stack's generated secret.
pub async fn the_continuation_key_is_created_once_and_shared(s: Subject) {
    let (a, b) = tokio::join!(s.store.continuation_keys(), s.other.continuation_keys());
    let (a, b) = (a.expect("a key"), b.expect("a key"));
    assert_eq!(a, b, "concurrent first callers agree on one key");
    assert_eq!(s.store.continuation_keys().await.unwrap(), a);
    assert_eq!(s.other.continuation_keys().await.unwrap(), a);
    assert_eq!(a.current.id(), 1, "the first key");
    assert_eq!(a.previous, None);
    let a = a.current;
    assert_ne!(a.bytes(), &[0u8; 32], "random bytes");
    let everything = PoolQuery {
        include_available: true,
        ..PoolQuery::default()
    };
    assert!(s.store.pools(&everything, now()).await.unwrap().is_empty());
    let t = now();
    assert!(
        s.store
            .history(t - Duration::days(30), t)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The rounds of traffic first, shared by two handles (two execution environments): what one
/// offers, the other's claim takes, once; a round's spacing and a quiet time hold for both; the
/// outcomes one settles, the other reads; another cluster's rounds are apart; many concurrent
/// offers are never lost.
pub async fn traffic_rounds_are_shared_and_never_lose_an_offer(s: Subject) {
    use forewarn::domain::clusters::ClusterId;
    use forewarn::domain::traffic::{Claim, Doomed, Outcome};
    use forewarn::ports::Settled;
    let t = now();
    let lease = std::time::Duration::from_secs(3);
    let (one, other) = (
        s.store.traffic_rounds().expect("rounds"),
        s.other.traffic_rounds().expect("rounds"),
    );
    let key = ClusterId::at(
        &forewarn::ports::Place::of("123456789012", "us-east-1"),
        "blue",
    );
    let doomed = |id: &str| Doomed::new(id, vec!["10.0.0.1".into()]);
    assert_eq!(one.claim(&key, t, lease).await.unwrap(), Claim::Nothing);
    one.offer(&key, &[doomed("i-1")], t).await.unwrap();
    other.offer(&key, &[doomed("i-2")], t).await.unwrap();
    let Claim::Taken(taken, _) = other.claim(&key, t, lease).await.unwrap() else {
        panic!("the round was due")
    };
    let mut ids: Vec<_> = taken.iter().map(|d| d.instance_id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["i-1", "i-2"]);
    assert_eq!(taken[0].addresses, ["10.0.0.1"]);
    // Held for the lease by its maker.
    assert_eq!(
        one.claim(&key, t, lease).await.unwrap(),
        Claim::Making(t + Duration::seconds(3))
    );
    let outcome = Outcome {
        at: t,
        pods: true,
        groups: 2,
        left: 2,
        failed: Vec::new(),
    };
    let settled = Settled {
        outcomes: [("i-1".to_string(), outcome.clone())].into(),
        next: Some(t + Duration::seconds(1)),
        quiet_until: Some(t + Duration::seconds(30)),
        groups: Some(vec!["arn:tg-1".into()]),
    };
    other.settle(&key, &settled, t).await.unwrap();
    let read = one
        .outcomes(&key, &["i-1".into(), "i-2".into()])
        .await
        .unwrap();
    assert_eq!(read, BTreeMap::from([("i-1".to_string(), outcome)]));
    one.offer(&key, &[doomed("i-3")], t).await.unwrap();
    // Quiet since the round that throttled, until its quiet time ends.
    for secs in [5, 29] {
        let claim = one.claim(&key, t + Duration::seconds(secs), lease).await;
        assert_eq!(claim.unwrap(), Claim::Quiet(t), "{secs} s on");
    }
    // After the quiet time, the next round takes what was offered, and the groups the last
    // round knew.
    let Claim::Taken(taken, groups) = one
        .claim(&key, t + Duration::seconds(30), lease)
        .await
        .unwrap()
    else {
        panic!("the round was due")
    };
    assert_eq!(taken.len(), 1);
    assert_eq!(groups, ["arn:tg-1"]);
    // Another cluster of the same place is not quiet, and has its own outcomes.
    let green = ClusterId::at(&key.place, "green");
    assert_eq!(one.claim(&green, t, lease).await.unwrap(), Claim::Nothing);
    assert!(
        one.outcomes(&green, &["i-1".into()])
            .await
            .unwrap()
            .is_empty()
    );
    concurrent_offers_are_all_taken(&s, &green, t).await;
    a_round_takes_its_share_and_leaves_the_rest(&s, t).await;
}

/// A cluster's list, shared by two handles (two execution environments): the first claim is
/// the caller's to make, a claim within the lease answers when the list was claimed, one after
/// it is the caller's again; its pages are read in order up to the first not written, each
/// list's and each cluster's apart.
pub async fn cluster_lists_are_claimed_once_and_shared(s: Subject) {
    use forewarn::domain::clusters::ClusterId;
    let t = Utc
        .timestamp_millis_opt(now().timestamp_millis() + 250)
        .unwrap();
    let lease = std::time::Duration::from_secs(60);
    let (one, other) = (
        s.store.shared_lists().expect("lists"),
        s.other.shared_lists().expect("lists"),
    );
    let place = forewarn::ports::Place::of("123456789012", "us-east-1");
    let (blue, green) = (
        ClusterId::at(&place, "blue"),
        ClusterId::at(&place, "green"),
    );
    assert_eq!(one.claim_list(&blue, t, lease).await.unwrap(), None);
    let later = t + Duration::seconds(59);
    assert_eq!(
        other.claim_list(&blue, later, lease).await.unwrap(),
        Some(t)
    );
    assert_eq!(other.claim_list(&green, later, lease).await.unwrap(), None);
    for (n, page) in [(0, "zero"), (1, "one"), (3, "three")] {
        one.put_page(&blue, t, n, page).await.unwrap();
    }
    assert_eq!(other.pages(&blue, t, 0).await.unwrap(), ["zero", "one"]);
    assert_eq!(other.pages(&blue, t, 1).await.unwrap(), ["one"]);
    assert!(other.pages(&blue, t, 2).await.unwrap().is_empty());
    assert!(other.pages(&green, later, 0).await.unwrap().is_empty());
    let pages: Vec<String> = (0..forewarn::ports::PAGES_READ + 2)
        .map(|n| format!("page {n}"))
        .collect();
    for (n, page) in pages.iter().enumerate() {
        other.put_page(&green, later, n, page).await.unwrap();
    }
    let first = one.pages(&green, later, 0).await.unwrap();
    assert_eq!(first, pages[..forewarn::ports::PAGES_READ]);
    // After the lease, the next claim is the caller's: a list of its own, apart.
    let next = t + Duration::seconds(60);
    assert_eq!(other.claim_list(&blue, next, lease).await.unwrap(), None);
    assert_eq!(
        one.claim_list(&blue, next, lease).await.unwrap(),
        Some(next)
    );
    assert!(one.pages(&blue, next, 0).await.unwrap().is_empty());
}

/// More instances offered than a round takes: the first [`ROUND_TAKES`] go in one round, the
/// rest in the next, none lost.
///
/// [`ROUND_TAKES`]: forewarn::domain::traffic::ROUND_TAKES
async fn a_round_takes_its_share_and_leaves_the_rest(s: &Subject, t: DateTime<Utc>) {
    use forewarn::domain::clusters::ClusterId;
    use forewarn::domain::traffic::{Claim, Doomed, ROUND_TAKES};
    use forewarn::ports::Settled;
    let rounds = s.store.traffic_rounds().expect("rounds");
    let key = ClusterId::at(
        &forewarn::ports::Place::of("123456789012", "us-east-1"),
        "many",
    );
    let many: Vec<Doomed> = (0..ROUND_TAKES + 5)
        .map(|i| Doomed::new(format!("i-m{i:03}"), Vec::new()))
        .collect();
    rounds.offer(&key, &many, t).await.unwrap();
    let lease = std::time::Duration::from_secs(3);
    let Claim::Taken(first, _) = rounds.claim(&key, t, lease).await.unwrap() else {
        panic!("the round was due")
    };
    assert_eq!(first.len(), ROUND_TAKES);
    rounds.settle(&key, &Settled::default(), t).await.unwrap();
    let Claim::Taken(rest, _) = rounds.claim(&key, t, lease).await.unwrap() else {
        panic!("the rest waits for the next round")
    };
    assert_eq!(rest.len(), 5);
    let mut all: Vec<String> = first
        .iter()
        .chain(&rest)
        .map(|d| d.instance_id.clone())
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), ROUND_TAKES + 5, "none lost, none twice");
}

/// Concurrent offers from both handles of `s`: every one is taken by the next round of `key`.
async fn concurrent_offers_are_all_taken(
    s: &Subject,
    key: &forewarn::domain::clusters::ClusterId,
    t: DateTime<Utc>,
) {
    use forewarn::domain::traffic::{Claim, Doomed};
    let lease = std::time::Duration::from_secs(3);
    let doomed = |id: &str| Doomed::new(id, vec!["10.0.0.1".into()]);
    let green = key.clone();
    let mut handles = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 {
            s.store.clone()
        } else {
            s.other.clone()
        };
        let green = green.clone();
        handles.push(tokio::spawn(async move {
            let rounds = store.traffic_rounds().expect("rounds");
            rounds.offer(&green, &[doomed(&format!("i-c{i}"))], t).await
        }));
    }
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let Claim::Taken(taken, groups) = s
        .other
        .traffic_rounds()
        .expect("rounds")
        .claim(&green, t, lease)
        .await
        .unwrap()
    else {
        panic!("the round was due")
    };
    assert_eq!(taken.len(), 16, "{taken:?}");
    assert!(groups.is_empty(), "no round of green settled");
}
