//! `adaptive`: act on a rebalance recommendation as its pool's history says it deserves.
//!
//! Most rebalance recommendations are not followed by an interruption. From the pool history
//! forewarn keeps (every event's mark on its pool, `forewarn pools --stats`), [`followed`]
//! counts, per pool, the recommendations of the last [`Adaptive::days`] and how many of them
//! were followed by a spot interruption of the same instance within [`Adaptive::window`]. A
//! recommendation younger than the window that was not (yet) followed is not counted: its
//! outcome is not known. [`Adaptive::choose`] drains when at least [`Adaptive::threshold`] of a
//! pool's recommendations were followed, over at least [`Adaptive::min_samples`] of them, and
//! otherwise does [`Adaptive::otherwise`] (`cordon-for 30m` by default).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use super::{PolicyAction, short};
use crate::domain::event::EventKind;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::PoolKey;

/// The settings of `adaptive` (`rebalance.adaptive` in a policy).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Adaptive {
    /// An interruption of the same instance within this time after a recommendation follows it.
    #[serde(deserialize_with = "super::parse::window")]
    pub window: Duration,
    /// Drain when at least this share of the pool's recommendations were followed.
    #[serde(deserialize_with = "super::parse::threshold")]
    pub threshold: f64,
    /// Fewer recommendations than this in the pool's history: do `otherwise`.
    #[serde(deserialize_with = "super::parse::min_samples")]
    pub min_samples: u32,
    /// How far back the history is read.
    #[serde(deserialize_with = "super::parse::days")]
    pub days: u32,
    /// What a recommendation does where the history does not say drain.
    #[serde(deserialize_with = "super::parse::otherwise")]
    pub otherwise: PolicyAction,
}

// The threshold is a share from 0 to 1 (the parser refuses anything else, NaN among it).
impl Eq for Adaptive {}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            window: Duration::minutes(30),
            threshold: 0.5,
            min_samples: 5,
            days: 30,
            otherwise: PolicyAction::CordonFor(Duration::minutes(30)),
        }
    }
}

/// A pool's recommendations with a known outcome, and how many an interruption followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Followed {
    pub recommendations: u32,
    pub followed: u32,
}

impl Followed {
    /// The share followed (0 without recommendations).
    pub fn share(&self) -> f64 {
        if self.recommendations == 0 {
            0.0
        } else {
            f64::from(self.followed) / f64::from(self.recommendations)
        }
    }
}

impl Adaptive {
    /// Where the history to read starts, at `now`.
    pub fn since(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now - Duration::days(i64::from(self.days))
    }

    /// What a recommendation does on an instance of `pool` (unknown: `None`), given every
    /// pool's [`followed`] counts: [`PolicyAction::CordonDrain`] or [`Adaptive::otherwise`],
    /// and why (the pool's share and sample count).
    pub fn choose(
        &self,
        pool: Option<&PoolKey>,
        counts: &BTreeMap<PoolKey, Followed>,
    ) -> (PolicyAction, String) {
        let otherwise = self.otherwise;
        let Some(pool) = pool else {
            let why = format!("adaptive: the instance's pool is not known: {otherwise}");
            return (otherwise, why);
        };
        let f = counts.get(pool).copied().unwrap_or_default();
        let percent = |x: f64| format!("{:.0} %", x * 100.0);
        let seen = format!(
            "pool {pool}: {} of {} recommendations of the last {} days followed by an \
             interruption within {} ({})",
            f.followed,
            f.recommendations,
            self.days,
            short(self.window),
            percent(f.share())
        );
        let (min, threshold) = (self.min_samples, percent(self.threshold));
        let (action, why) = if f.recommendations < min {
            (otherwise, format!("fewer than {min} samples"))
        } else if f.share() >= self.threshold {
            (PolicyAction::CordonDrain, format!("at least {threshold}"))
        } else {
            (otherwise, format!("below {threshold}"))
        };
        (action, format!("adaptive: {seen}, {why}: {action}"))
    }
}

/// Per pool, the recommendations in `[since, now]` whose outcome is known and how many a spot
/// interruption of the same instance followed within `window`. A recommendation repeated for
/// an instance within the window of its first counts once (a recommendation recorded twice,
/// at its one time, among them).
pub fn followed(
    history: &[HistoryEntry],
    window: Duration,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> BTreeMap<PoolKey, Followed> {
    let mut interruptions: BTreeMap<&str, Vec<DateTime<Utc>>> = BTreeMap::new();
    for e in history {
        if e.kind == EventKind::SpotInterruption {
            interruptions.entry(&e.instance_id).or_default().push(e.at);
        }
    }
    let mut recommendations: Vec<&HistoryEntry> = (history.iter())
        .filter(|e| e.kind == EventKind::RebalanceRecommendation && (since..=now).contains(&e.at))
        .collect();
    recommendations.sort_by_key(|e| (e.instance_id.as_str(), e.at));
    // The instance of the last recommendation counted, and the end of its window.
    let mut counted: Option<(&str, DateTime<Utc>)> = None;
    let mut out: BTreeMap<PoolKey, Followed> = BTreeMap::new();
    for r in recommendations {
        let (instance, until) = (r.instance_id.as_str(), r.at + window);
        let was_followed = (interruptions.get(instance))
            .is_some_and(|ts| ts.iter().any(|t| (r.at..=until).contains(t)));
        let repeat = counted.is_some_and(|(i, end)| i == instance && r.at <= end);
        // Not counted: a repeat within the window of the one counted before it, or one not
        // followed whose window is still open (its outcome is not known yet).
        if repeat || (!was_followed && now < until) {
            continue;
        }
        counted = Some((instance, until));
        let f = out.entry(r.pool.clone()).or_default();
        f.recommendations += 1;
        f.followed += u32::from(was_followed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::pool::CapacityType;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn pool(t: &str) -> PoolKey {
        PoolKey::new(CapacityType::Spot, t, "us-east-1a")
    }

    fn entry(kind: EventKind, id: &str, instance: &str, t: &str, p: &str) -> HistoryEntry {
        HistoryEntry {
            pool: pool(p),
            kind,
            event_id: id.into(),
            instance_id: instance.into(),
            at: at(t),
            unavailable_until: None,
            expires_at: at("2027-01-01T00:00:00Z"),
        }
    }

    const R: EventKind = EventKind::RebalanceRecommendation;
    const S: EventKind = EventKind::SpotInterruption;

    #[test]
    fn followed_counts_recommendations_an_interruption_of_the_same_instance_followed() {
        let history = vec![
            // Followed after 10 minutes.
            entry(R, "r1", "i-1", "2026-11-01T10:00:00Z", "m5.large"),
            entry(S, "s1", "i-1", "2026-11-01T10:10:00Z", "m5.large"),
            // Not followed: the interruption comes after the window.
            entry(R, "r2", "i-2", "2026-11-02T10:00:00Z", "m5.large"),
            entry(S, "s2", "i-2", "2026-11-02T11:00:00Z", "m5.large"),
            // Recorded twice (one event in two reads of the history): counted once.
            entry(R, "r2", "i-2", "2026-11-02T10:00:00Z", "m5.large"),
            // Another instance's interruption does not follow it.
            entry(R, "r3", "i-3", "2026-11-03T10:00:00Z", "m5.large"),
            entry(S, "s3", "i-9", "2026-11-03T10:05:00Z", "m5.large"),
            // A repeat of i-1's... on another day: counted again (followed).
            entry(R, "r4", "i-1", "2026-11-04T10:00:00Z", "m5.large"),
            entry(R, "r4b", "i-1", "2026-11-04T10:05:00Z", "m5.large"),
            entry(S, "s4", "i-1", "2026-11-04T10:20:00Z", "m5.large"),
            // Another pool.
            entry(R, "r5", "i-5", "2026-11-05T10:00:00Z", "c5.large"),
            // Before the period: not read.
            entry(R, "r0", "i-0", "2026-09-01T10:00:00Z", "m5.large"),
            // Too recent to know, not followed yet: not counted.
            entry(R, "r6", "i-6", "2026-11-24T09:50:00Z", "m5.large"),
            // Recent but already followed: counted.
            entry(R, "r7", "i-7", "2026-11-24T09:40:00Z", "m5.large"),
            entry(S, "s7", "i-7", "2026-11-24T09:45:00Z", "m5.large"),
        ];
        let now = at("2026-11-24T10:00:00Z");
        let counts = followed(
            &history,
            Duration::minutes(30),
            now - Duration::days(30),
            now,
        );
        assert_eq!(
            counts[&pool("m5.large")],
            Followed {
                recommendations: 5,
                followed: 3
            }
        );
        assert_eq!(
            counts[&pool("c5.large")],
            Followed {
                recommendations: 1,
                followed: 0
            }
        );
    }

    #[test]
    fn adaptive_drains_hot_pools_and_does_otherwise_elsewhere() {
        let a = Adaptive::default();
        let counts = BTreeMap::from([
            (
                pool("hot"),
                Followed {
                    recommendations: 10,
                    followed: 5,
                },
            ),
            (
                pool("cold"),
                Followed {
                    recommendations: 10,
                    followed: 4,
                },
            ),
            (
                pool("new"),
                Followed {
                    recommendations: 4,
                    followed: 4,
                },
            ),
        ]);
        let (action, why) = a.choose(Some(&pool("hot")), &counts);
        assert_eq!(action, PolicyAction::CordonDrain);
        assert!(
            why.contains("5 of 10 recommendations") && why.contains("(50 %)"),
            "{why}"
        );
        let (action, why) = a.choose(Some(&pool("cold")), &counts);
        assert_eq!(action, PolicyAction::CordonFor(Duration::minutes(30)));
        assert!(why.ends_with("below 50 %: cordon-for 30m"), "{why}");
        let (action, why) = a.choose(Some(&pool("new")), &counts);
        assert_eq!(action, a.otherwise);
        assert!(why.contains("fewer than 5 samples"), "{why}");
        // A pool never seen has no samples.
        assert_eq!(a.choose(Some(&pool("unseen")), &counts).0, a.otherwise);
        assert_eq!(a.choose(None, &counts).0, a.otherwise);
    }
}
