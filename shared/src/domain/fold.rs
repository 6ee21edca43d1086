//! The pool fold: what applying one event does to the pools it marks. Both pool store adapters
//! (the embedded store, a redb file for local runs, and the DynamoDB store, one table in AWS)
//! implement these semantics, written down once here as [`fold`], which the embedded store
//! applies literally and the DynamoDB store reproduces with conditional update expressions:
//!
//! * an event marks a pool once ([`validate`] refuses a pool marked twice; the decision marks
//!   each pool through the first of its instances): the pool's counter for the event's kind
//!   grows by one;
//! * counters always count, whatever the order events arrive in;
//! * `unavailable_until` and `expires_at` only ever grow (a late event never shortens a window);
//! * `first_seen` is the earliest event time applied to the pool (the event's own time, not the
//!   time the store recorded it, so a redelivered or late event moves it back to when the pool
//!   was really first hit);
//! * `last_seen`, `last_event_id`, `last_reason` and `last_instance_id` come from the event with
//!   the latest event time; on a tie the event applied last wins;
//! * `region` is set whenever an event carries one;
//! * `expires_at` is `max(previous expires_at, retention.pool_expiry(event time, window))`, i.e.
//!   `retention.history` after the later of the last event and the end of the latest window.

use std::collections::BTreeMap;

use crate::domain::plan::Plan;
use crate::domain::pool::{
    HistoryEntry, MAX_POOLS_PER_UPDATE, PoolKey, PoolMark, PoolRecord, Retention, counter_name,
};

/// An update no store takes (see [`validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUpdate {
    #[error("the event id is empty")]
    NoEventId,
    #[error("it marks {marks} pools, and one update records at most {MAX_POOLS_PER_UPDATE}")]
    TooManyPools { marks: usize },
    #[error(
        "pool `{0}` is not a valid pool key (instance type and zone must be non-empty and free \
         of `#`)"
    )]
    BadPoolKey(PoolKey),
    #[error("pool `{0}` is marked twice (an update marks a pool once)")]
    MarkedTwice(PoolKey),
}

/// Checks what every store needs of an update: an event id, at most [`MAX_POOLS_PER_UPDATE`]
/// marks, each pool marked once (a transaction touches an item once), and pool keys that
/// round-trip through their string form (no empty part, no `#` inside one).
pub fn validate(plan: &Plan) -> Result<(), InvalidUpdate> {
    if plan.event_id.is_empty() {
        return Err(InvalidUpdate::NoEventId);
    }
    if plan.pools.len() > MAX_POOLS_PER_UPDATE {
        return Err(InvalidUpdate::TooManyPools {
            marks: plan.pools.len(),
        });
    }
    for (i, mark) in plan.pools.iter().enumerate() {
        let pool = &mark.pool;
        let bad = |part: &str| part.is_empty() || part.contains('#');
        if bad(&pool.instance_type) || bad(&pool.zone) {
            return Err(InvalidUpdate::BadPoolKey(pool.clone()));
        }
        if plan.pools[..i].iter().any(|m| m.pool == *pool) {
            return Err(InvalidUpdate::MarkedTwice(pool.clone()));
        }
    }
    Ok(())
}

/// Applies one event's mark to a pool record (`None`: the pool is new). This is the reference
/// semantics of every store; see the module documentation.
pub fn fold(
    existing: Option<PoolRecord>,
    plan: &Plan,
    mark: &PoolMark,
    retention: &Retention,
) -> PoolRecord {
    let t = plan.time;
    let expiry = retention.pool_expiry(t, mark.unavailable_until);
    let mut record = existing.unwrap_or_else(|| PoolRecord {
        pool: mark.pool.clone(),
        region: None,
        unavailable_until: None,
        expires_at: expiry,
        counters: BTreeMap::new(),
        first_seen: t,
        last_seen: t,
        last_event_id: plan.event_id.clone(),
        last_reason: plan.summary.clone(),
        last_instance_id: mark.instance_id.clone(),
    });
    let counter = record
        .counters
        .entry(counter_name(plan.kind).to_string())
        .or_default();
    *counter = counter.saturating_add(1);
    record.unavailable_until = record.unavailable_until.max(mark.unavailable_until);
    record.expires_at = record.expires_at.max(expiry);
    record.first_seen = record.first_seen.min(t);
    if t >= record.last_seen {
        record.last_seen = t;
        record.last_event_id.clone_from(&plan.event_id);
        record.last_reason.clone_from(&plan.summary);
        record.last_instance_id.clone_from(&mark.instance_id);
    }
    if plan.region.is_some() {
        record.region.clone_from(&plan.region);
    }
    record
}

/// The entries `plan` adds to the history: one per pool it marks.
pub fn history(plan: &Plan, retention: &Retention) -> Vec<HistoryEntry> {
    let entry = |m: &PoolMark| HistoryEntry {
        pool: m.pool.clone(),
        kind: plan.kind,
        event_id: plan.event_id.clone(),
        instance_id: m.instance_id.clone(),
        at: plan.time,
        unavailable_until: m.unavailable_until,
        expires_at: retention.pool_expiry(plan.time, m.unavailable_until),
    };
    plan.pools.iter().map(entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use crate::domain::pool::CapacityType;
    use chrono::{DateTime, Duration, TimeZone, Utc};
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn key(t: &str) -> PoolKey {
        PoolKey::new(CapacityType::Spot, t, "us-east-1a")
    }

    fn update(id: &str, time: i64, marks: Vec<PoolMark>) -> Plan {
        Plan {
            event_id: id.into(),
            kind: EventKind::SpotInterruption,
            time: at(time),
            region: Some("us-east-1".into()),
            summary: format!("reason {id}"),
            pools: marks,
            ..Plan::default()
        }
    }

    fn mark(t: &str, instance: &str, until: Option<i64>) -> PoolMark {
        PoolMark {
            pool: key(t),
            instance_id: instance.into(),
            unavailable_until: until.map(at),
        }
    }

    #[test]
    fn a_pool_marked_twice_is_refused() {
        let u = update(
            "e",
            0,
            vec![
                mark("m5.large", "i-1", Some(100)),
                mark("c5.large", "i-2", None),
                mark("m5.large", "i-3", Some(50)),
            ],
        );
        let err = validate(&u).unwrap_err();
        assert_eq!(err, InvalidUpdate::MarkedTwice(key("m5.large")));
        assert_eq!(
            err.to_string(),
            "pool `spot#m5.large#us-east-1a` is marked twice (an update marks a pool once)"
        );
        assert_eq!(validate(&update("e", 0, u.pools[..2].to_vec())), Ok(()));
    }

    #[test]
    fn fold_keeps_the_newest_last_fields_and_the_longest_window() {
        let r = Retention::default();
        let newer = update("new", 100, vec![mark("m5.large", "i-new", Some(200))]);
        let older = update("old", 50, vec![mark("m5.large", "i-old", Some(150))]);
        let rec = fold(None, &newer, &newer.pools[0], &r);
        let rec = fold(Some(rec), &older, &older.pools[0], &r);
        assert_eq!(rec.interruptions(), 2);
        assert_eq!(rec.last_event_id, "new");
        assert_eq!(rec.last_instance_id, "i-new");
        assert_eq!(rec.last_seen, at(100));
        assert_eq!(rec.first_seen, at(50));
        assert_eq!(rec.unavailable_until, Some(at(200)));
        assert_eq!(rec.expires_at, at(200) + r.history);
    }

    #[test]
    fn count_only_event_keeps_the_window_and_its_expiry() {
        let r = Retention::default();
        let marking = update("m", 0, vec![mark("m5.large", "i-1", Some(3600))]);
        let counting = update("c", 60, vec![mark("m5.large", "i-1", None)]);
        let rec = fold(None, &marking, &marking.pools[0], &r);
        let rec = fold(Some(rec), &counting, &counting.pools[0], &r);
        assert_eq!(rec.unavailable_until, Some(at(3600)));
        assert_eq!(rec.expires_at, at(3600) + r.history);
        assert_eq!(rec.last_event_id, "c");
        assert_eq!(rec.interruptions(), 2);
    }

    proptest! {
        /// Applying the same events in any order gives the same record (distinct event times).
        #[test]
        fn fold_is_order_independent(
            events in proptest::collection::btree_map(0i64..10_000, proptest::option::of(0i64..20_000), 1..12),
            seed in any::<u64>(),
        ) {
            let r = Retention { ledger: Duration::days(1), history: Duration::days(2) };
            let updates: Vec<Plan> = events
                .iter()
                .map(|(t, until)| update(&format!("e{t}"), *t, vec![mark("m5.large", &format!("i-{t}"), *until)]))
                .collect();
            let mut shuffled = updates.clone();
            // A deterministic shuffle from the seed.
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let apply_all = |us: &[Plan]| {
                us.iter().fold(None, |rec, u| Some(fold(rec, u, &u.pools[0], &r)))
            };
            let (a, b) = (apply_all(&updates), apply_all(&shuffled));
            prop_assert_eq!(&a, &b);
            let rec = a.unwrap();
            let (first, _) = events.first_key_value().unwrap();
            let (last, _) = events.last_key_value().unwrap();
            prop_assert_eq!(rec.first_seen, at(*first));
            prop_assert_eq!(rec.last_seen, at(*last));
            prop_assert_eq!(&rec.last_event_id, &format!("e{last}"));
            prop_assert_eq!(rec.interruptions(), events.len() as u64);
            prop_assert_eq!(rec.unavailable_until, events.values().flatten().max().map(|u| at(*u)));
            prop_assert_eq!(rec.expires_at, r.pool_expiry(rec.last_seen, rec.unavailable_until));
        }
    }
}
