//! Pool statistics (`forewarn pools --stats`) from the pool table's history: one
//! [`HistoryEntry`] per pool an applied event marked or counted, kept for the history retention
//! (30 days) after the later of the event and the end of its window.
//!
//! Per pool, over the period `[since, now]`: the interruptions by kind (events whose time is in
//! the period), the time since the last one, and the share of the period the pool was
//! unavailable (the union of its entries' windows `[event time, unavailable until]`, overlapping
//! windows merged, cut to the period). Per zone and per instance type: the counts summed, the
//! latest event, and the share of pool-time unavailable (the mean of its pools' shares).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::event::EventKind;
use super::pool::HistoryEntry;

/// One pool's statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStats {
    pub pool: String,
    pub capacity_type: String,
    pub instance_type: String,
    pub zone: String,
    /// Events in the period, by kind (`spot-interruption`, ...).
    pub events: BTreeMap<String, u64>,
    /// Spot and capacity-reservation interruptions in the period.
    pub interruptions: u64,
    pub last_event: Option<DateTime<Utc>>,
    /// Seconds from the last event to `now`.
    pub seconds_since_last: Option<i64>,
    /// The share of the period the pool was unavailable, 0 to 1.
    pub unavailable_share: f64,
}

/// Totals of a group of pools (a zone, an instance type).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupStats {
    pub name: String,
    pub pools: usize,
    pub events: BTreeMap<String, u64>,
    pub interruptions: u64,
    pub last_event: Option<DateTime<Utc>>,
    /// The mean of its pools' unavailable shares.
    pub unavailable_share: f64,
}

/// Everything `forewarn pools --stats` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub since: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// Pools by interruptions, then unavailable share, then name.
    pub pools: Vec<PoolStats>,
    pub zones: Vec<GroupStats>,
    pub instance_types: Vec<GroupStats>,
}

/// Whether events of `kind` are interruptions (the instance is taken back).
fn is_interruption(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::SpotInterruption
            | EventKind::CapacityReservationInterruption
            | EventKind::CapacityBlockExpiration
    )
}

/// The share of `[since, now]` covered by the union of `windows`.
pub fn covered_share(
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> f64 {
    let period = now - since;
    if period <= Duration::zero() {
        return 0.0;
    }
    let mut cut: Vec<(DateTime<Utc>, DateTime<Utc>)> = windows
        .iter()
        .map(|&(a, b)| (a.max(since), b.min(now)))
        .filter(|(a, b)| a < b)
        .collect();
    cut.sort();
    // By start: each window adds what it covers past the end of those before it.
    let (mut covered, mut reached) = (Duration::zero(), since);
    for (a, b) in cut {
        covered += (b - a.max(reached)).max(Duration::zero());
        reached = reached.max(b);
    }
    let share = covered.num_milliseconds() as f64 / period.num_milliseconds() as f64;
    share.clamp(0.0, 1.0)
}

/// The statistics of `entries` over `[since, now]`.
pub fn stats(entries: &[HistoryEntry], since: DateTime<Utc>, now: DateTime<Utc>) -> Stats {
    let mut by_pool: BTreeMap<String, Vec<&HistoryEntry>> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.in_period(since, now)) {
        by_pool.entry(e.pool.to_string()).or_default().push(e);
    }
    let mut pools: Vec<PoolStats> = by_pool
        .into_iter()
        .map(|(name, entries)| {
            let key = &entries[0].pool;
            let mut events: BTreeMap<String, u64> = BTreeMap::new();
            let mut interruptions = 0;
            for e in entries.iter().filter(|e| e.at >= since) {
                *events.entry(e.kind.as_str().to_string()).or_default() += 1;
                interruptions += u64::from(is_interruption(e.kind));
            }
            let last_event = entries.iter().map(|e| e.at).max();
            let windows: Vec<_> = entries
                .iter()
                .filter_map(|e| e.unavailable_until.map(|u| (e.at, u)))
                .collect();
            PoolStats {
                pool: name,
                capacity_type: key.capacity_type.to_string(),
                instance_type: key.instance_type.clone(),
                zone: key.zone.clone(),
                events,
                interruptions,
                last_event,
                seconds_since_last: last_event.map(|t| (now - t).num_seconds().max(0)),
                unavailable_share: covered_share(&windows, since, now),
            }
        })
        .collect();
    pools.sort_by(|a, b| {
        b.interruptions
            .cmp(&a.interruptions)
            .then(b.unavailable_share.total_cmp(&a.unavailable_share))
            .then(a.pool.cmp(&b.pool))
    });
    let zones = group(&pools, |p| p.zone.clone());
    let instance_types = group(&pools, |p| p.instance_type.clone());
    Stats {
        since,
        now,
        pools,
        zones,
        instance_types,
    }
}

fn group(pools: &[PoolStats], key: impl Fn(&PoolStats) -> String) -> Vec<GroupStats> {
    let mut groups: BTreeMap<String, GroupStats> = BTreeMap::new();
    for p in pools {
        let g = groups.entry(key(p)).or_insert_with(|| GroupStats {
            name: key(p),
            ..GroupStats::default()
        });
        g.pools += 1;
        for (k, n) in &p.events {
            *g.events.entry(k.clone()).or_default() += n;
        }
        g.interruptions += p.interruptions;
        g.last_event = g.last_event.max(p.last_event);
        g.unavailable_share += p.unavailable_share;
    }
    groups
        .into_values()
        .map(|mut g| {
            g.unavailable_share /= g.pools.max(1) as f64;
            g
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::plan::Plan;
    use crate::domain::pool::{CapacityType, PoolKey, Retention};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(h: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_795_000_000 + h * 3600, 0).unwrap()
    }

    fn entry(pool: &str, kind: EventKind, at: i64, until: Option<i64>) -> HistoryEntry {
        HistoryEntry {
            pool: pool.parse().unwrap(),
            kind,
            event_id: format!("e-{pool}-{at}"),
            instance_id: "i-1".into(),
            at: t(at),
            unavailable_until: until.map(t),
            expires_at: t(1000),
        }
    }

    #[test]
    fn overlapping_windows_are_merged_and_cut_to_the_period() {
        // [0, 2] and [1, 3] merge to [0, 3]; [5, 6]; all within [0, 10]: 4 of 10 hours.
        let w = [(t(0), t(2)), (t(1), t(3)), (t(5), t(6))];
        assert!((covered_share(&w, t(0), t(10)) - 0.4).abs() < 1e-9);
        // A window starting before the period and one ending after it are cut.
        let w = [(t(-5), t(1)), (t(9), t(20))];
        assert!((covered_share(&w, t(0), t(10)) - 0.2).abs() < 1e-9);
        assert_eq!(covered_share(&[], t(0), t(10)), 0.0);
        assert_eq!(covered_share(&w, t(10), t(10)), 0.0);
    }

    #[test]
    fn pools_zones_and_types() {
        let spot = "spot#m5.large#us-east-1a";
        let other = "spot#c5.large#us-east-1a";
        let entries = vec![
            entry(spot, EventKind::SpotInterruption, 1, Some(2)),
            entry(spot, EventKind::SpotInterruption, 3, Some(4)),
            entry(spot, EventKind::RebalanceRecommendation, 5, None),
            entry(other, EventKind::SpotInterruption, 8, Some(9)),
            // Before the period, its window inside it: counted for the share only.
            entry(other, EventKind::SpotInterruption, -1, Some(1)),
            // Long before: not at all.
            entry(
                "spot#r5.large#us-east-1b",
                EventKind::SpotInterruption,
                -50,
                Some(-49),
            ),
        ];
        let s = stats(&entries, t(0), t(10));
        assert_eq!(s.pools.len(), 2);
        let first = &s.pools[0];
        assert_eq!(first.pool, spot);
        assert_eq!(first.interruptions, 2);
        assert_eq!(first.events["rebalance-recommendation"], 1);
        assert_eq!(first.seconds_since_last, Some(5 * 3600));
        assert!((first.unavailable_share - 0.2).abs() < 1e-9);
        let second = &s.pools[1];
        assert_eq!(second.interruptions, 1);
        assert!((second.unavailable_share - 0.2).abs() < 1e-9);
        assert_eq!(s.zones.len(), 1);
        assert_eq!(s.zones[0].interruptions, 3);
        assert_eq!(s.zones[0].pools, 2);
        assert!((s.zones[0].unavailable_share - 0.2).abs() < 1e-9);
        assert_eq!(s.instance_types.len(), 2);
        assert_eq!(s.zones[0].last_event, Some(t(8)));
    }

    #[test]
    fn expired_entries_are_left_out() {
        let mut e = entry(
            "spot#m5.large#us-east-1a",
            EventKind::SpotInterruption,
            1,
            Some(2),
        );
        e.expires_at = t(5);
        assert!(stats(&[e], t(0), t(10)).pools.is_empty());
    }

    #[test]
    fn an_update_makes_one_entry_per_mark_with_the_history_ttl() {
        let update = Plan {
            event_id: "e1".into(),
            kind: EventKind::SpotInterruption,
            time: t(0),
            summary: "r".into(),
            pools: vec![crate::domain::pool::PoolMark {
                pool: PoolKey::new(CapacityType::Spot, "m5.large", "us-east-1a"),
                instance_id: "i-1".into(),
                unavailable_until: Some(t(1)),
            }],
            ..Plan::default()
        };
        let entries = crate::domain::fold::history(&update, &Retention::default());
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].expires_at, t(1) + Duration::days(30));
    }

    proptest! {
        #[test]
        fn the_share_is_always_between_0_and_1(
            windows in proptest::collection::vec((-100i64..100, 0i64..100), 0..20),
            since in -50i64..50,
            len in 0i64..100,
        ) {
            let w: Vec<_> = windows.iter().map(|&(a, d)| (t(a), t(a + d))).collect();
            let share = covered_share(&w, t(since), t(since + len));
            prop_assert!((0.0..=1.0).contains(&share));
        }
    }
}
