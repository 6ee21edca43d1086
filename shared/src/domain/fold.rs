//! The pool fold: what applying one event does to the pools it marks. Both pool store adapters
//! (the embedded store, a redb file for local runs, and the DynamoDB store, one table in AWS)
//! implement these semantics, written down once here as [`fold`], which the embedded store
//! applies literally and the DynamoDB store reproduces with conditional update expressions:
//!
//! * an event's marks on one pool are merged ([`pool_deltas`]): the pool's counter for the event's
//!   kind grows by the number of marks (instances) on that pool, the window is the latest of the
//!   marks' windows and `last_instance_id` is the instance of the pool's last mark;
//! * counters always count, whatever the order events arrive in;
//! * `unavailable_until` and `expires_at` only ever grow (a late event never shortens a window);
//! * `first_seen` is the earliest `event_time` applied to the pool (the event's own time, not the
//!   time the store recorded it, so a redelivered or late event moves it back to when the pool
//!   was really first hit);
//! * `last_seen`, `last_event_id`, `last_reason` and `last_instance_id` come from the event with
//!   the latest `event_time`; on a tie the event applied last wins;
//! * `region` is set whenever an event carries one;
//! * `expires_at` is `max(previous expires_at, retention.pool_expiry(event_time, window))`, i.e.
//!   `retention.history` after the later of the last event and the end of the latest window.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::pool::{
    MAX_POOLS_PER_UPDATE, PoolKey, PoolRecord, PoolUpdate, Retention, counter_name,
};

/// What one event does to one pool: the event's marks on that pool, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDelta {
    pub pool: PoolKey,
    /// How many marks (instances) of the event are in this pool: the counter grows by this much.
    pub count: u64,
    /// The latest window of those marks (`None` when every mark only counts).
    pub unavailable_until: Option<DateTime<Utc>>,
    /// The instance of the last of those marks.
    pub instance_id: String,
}

/// Merges an update's marks per pool, in the order each pool first appears.
pub fn pool_deltas(update: &PoolUpdate) -> Vec<PoolDelta> {
    let mut deltas: Vec<PoolDelta> = Vec::with_capacity(update.marks.len());
    for mark in &update.marks {
        match deltas.iter_mut().find(|d| d.pool == mark.pool) {
            Some(delta) => {
                delta.count += 1;
                delta.unavailable_until = delta.unavailable_until.max(mark.unavailable_until);
                delta.instance_id.clone_from(&mark.instance_id);
            }
            None => deltas.push(PoolDelta {
                pool: mark.pool.clone(),
                count: 1,
                unavailable_until: mark.unavailable_until,
                instance_id: mark.instance_id.clone(),
            }),
        }
    }
    deltas
}

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
}

/// Checks what every store needs of an update: an event id, at most [`MAX_POOLS_PER_UPDATE`]
/// marks, and pool keys that round-trip through their string form (no empty part, no `#` inside
/// one).
pub fn validate(update: &PoolUpdate) -> Result<(), InvalidUpdate> {
    if update.event_id.is_empty() {
        return Err(InvalidUpdate::NoEventId);
    }
    if update.marks.len() > MAX_POOLS_PER_UPDATE {
        return Err(InvalidUpdate::TooManyPools {
            marks: update.marks.len(),
        });
    }
    for mark in &update.marks {
        let pool = &mark.pool;
        let bad = |part: &str| part.is_empty() || part.contains('#');
        if bad(&pool.instance_type) || bad(&pool.zone) {
            return Err(InvalidUpdate::BadPoolKey(pool.clone()));
        }
    }
    Ok(())
}

/// Applies one event's delta to a pool record (`None`: the pool is new). This is the reference
/// semantics of every store; see the module documentation.
pub fn fold(
    existing: Option<PoolRecord>,
    update: &PoolUpdate,
    delta: &PoolDelta,
    retention: &Retention,
) -> PoolRecord {
    let t = update.event_time;
    let expiry = retention.pool_expiry(t, delta.unavailable_until);
    let mut record = existing.unwrap_or_else(|| PoolRecord {
        pool: delta.pool.clone(),
        region: None,
        unavailable_until: None,
        expires_at: expiry,
        counters: BTreeMap::new(),
        first_seen: t,
        last_seen: t,
        last_event_id: update.event_id.clone(),
        last_reason: update.reason.clone(),
        last_instance_id: delta.instance_id.clone(),
    });
    let counter = record
        .counters
        .entry(counter_name(update.kind).to_string())
        .or_default();
    *counter = counter.saturating_add(delta.count);
    record.unavailable_until = record.unavailable_until.max(delta.unavailable_until);
    record.expires_at = record.expires_at.max(expiry);
    record.first_seen = record.first_seen.min(t);
    if t >= record.last_seen {
        record.last_seen = t;
        record.last_event_id.clone_from(&update.event_id);
        record.last_reason.clone_from(&update.reason);
        record.last_instance_id.clone_from(&delta.instance_id);
    }
    if update.region.is_some() {
        record.region.clone_from(&update.region);
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::EventKind;
    use crate::domain::pool::{CapacityType, PoolMark};
    use chrono::{Duration, TimeZone};
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn key(t: &str) -> PoolKey {
        PoolKey::new(CapacityType::Spot, t, "us-east-1a")
    }

    fn update(id: &str, time: i64, marks: Vec<PoolMark>) -> PoolUpdate {
        PoolUpdate {
            event_id: id.into(),
            kind: EventKind::SpotInterruption,
            event_time: at(time),
            region: Some("us-east-1".into()),
            reason: format!("reason {id}"),
            marks,
            recorded_at: at(time + 1),
            also_keys: Vec::new(),
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
    fn deltas_merge_marks_per_pool() {
        let u = update(
            "e",
            0,
            vec![
                mark("m5.large", "i-1", Some(100)),
                mark("c5.large", "i-2", None),
                mark("m5.large", "i-3", Some(50)),
                mark("m5.large", "i-4", None),
            ],
        );
        let d = pool_deltas(&u);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].pool, key("m5.large"));
        assert_eq!(d[0].count, 3);
        assert_eq!(d[0].unavailable_until, Some(at(100)));
        assert_eq!(d[0].instance_id, "i-4");
        assert_eq!(d[1].pool, key("c5.large"));
        assert_eq!(d[1].count, 1);
        assert_eq!(d[1].unavailable_until, None);
    }

    #[test]
    fn fold_keeps_the_newest_last_fields_and_the_longest_window() {
        let r = Retention::default();
        let newer = update("new", 100, vec![mark("m5.large", "i-new", Some(200))]);
        let older = update("old", 50, vec![mark("m5.large", "i-old", Some(150))]);
        let rec = fold(None, &newer, &pool_deltas(&newer)[0], &r);
        let rec = fold(Some(rec), &older, &pool_deltas(&older)[0], &r);
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
        let rec = fold(None, &marking, &pool_deltas(&marking)[0], &r);
        let rec = fold(Some(rec), &counting, &pool_deltas(&counting)[0], &r);
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
            let updates: Vec<PoolUpdate> = events
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
            let apply_all = |us: &[PoolUpdate]| {
                us.iter().fold(None, |rec, u| Some(fold(rec, u, &pool_deltas(u)[0], &r)))
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
