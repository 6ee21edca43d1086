//! The update expressions of one event's pool writes: attribute placeholders, the values of one
//! pool, and the bets on which of its fields the event's values win.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::{ceil_secs, pool_pk};
use crate::domain::plan::Plan;
use crate::domain::pool::{PoolMark, Retention};

/// Expression attribute names and values, registered as they are used (DynamoDB rejects unused
/// ones).
#[derive(Default, Clone)]
pub(super) struct Expr {
    pub(super) names: HashMap<String, String>,
    pub(super) values: HashMap<String, AttributeValue>,
}

impl Expr {
    pub(super) fn name(&mut self, attr: &str) -> String {
        let placeholder = format!("#{attr}");
        self.names.insert(placeholder.clone(), attr.to_string());
        placeholder
    }

    /// `#attr = :attr`, `value` registered as `:attr`.
    pub(super) fn is(&mut self, attr: &str, value: AttributeValue) -> String {
        format!("{} = {}", self.name(attr), self.value(attr, value))
    }

    pub(super) fn value(&mut self, placeholder: &str, value: AttributeValue) -> String {
        let placeholder = format!(":{placeholder}");
        self.values.insert(placeholder.clone(), value);
        placeholder
    }
}

/// One pool of one event's update: what the event does to it, its item's key, and its values in
/// the table's units.
pub(super) struct PoolWrite {
    pub(super) mark: PoolMark,
    pub(super) pk: String,
    /// `event_time`, rounded down.
    pub(super) time: i64,
    /// The window, rounded up.
    pub(super) until: Option<i64>,
    /// `retention.pool_expiry(event_time, window)`, rounded up.
    pub(super) expires: i64,
}

impl PoolWrite {
    /// The writes of `plan`, one per pool it marks.
    pub(super) fn of(plan: &Plan, retention: &Retention) -> Vec<PoolWrite> {
        let write = |mark: &PoolMark| PoolWrite {
            pk: pool_pk(&mark.pool),
            time: plan.time.timestamp(),
            until: mark.unavailable_until.map(ceil_secs),
            expires: ceil_secs(retention.pool_expiry(plan.time, mark.unavailable_until)),
            mark: mark.clone(),
        };
        plan.pools.iter().map(write).collect()
    }
}

/// For each field of a pool, whether this event's value replaces the stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bets {
    pub(super) until: bool,
    pub(super) last: bool,
    pub(super) first: bool,
    pub(super) expires: bool,
}

/// Bounds on a pool's fields as this store last saw them: `until`, `last_seen` and `expires_at`
/// only grow (lower bounds), `first_seen` only shrinks (an upper bound). `None`: unknown. Read
/// from a pool item (`codec::from_item`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct Known {
    #[serde(rename = "unavailable_until")]
    pub(super) until: Option<i64>,
    pub(super) last_seen: Option<i64>,
    pub(super) first_seen: Option<i64>,
    pub(super) expires_at: Option<i64>,
}

impl Known {
    /// The bets for `write`: "wins" unless what is known says otherwise (a bet known lost is
    /// certainly lost; a bet placed to win may lose, and the condition tells).
    pub(super) fn bets(known: Option<&Known>, write: &PoolWrite) -> Bets {
        let k = known.copied().unwrap_or_default();
        Bets {
            until: write.until.is_some_and(|u| k.until.is_none_or(|v| v <= u)),
            last: k.last_seen.is_none_or(|v| v <= write.time),
            first: k.first_seen.is_some_and(|v| v > write.time),
            expires: k.expires_at.is_none_or(|v| v <= write.expires),
        }
    }

    /// What is known after `write` was applied on top of `self`.
    pub(super) fn after(self, write: &PoolWrite) -> Known {
        Known {
            until: self.until.max(write.until),
            last_seen: Some(self.last_seen.map_or(write.time, |v| v.max(write.time))),
            first_seen: Some(self.first_seen.map_or(write.time, |v| v.min(write.time))),
            expires_at: Some(
                self.expires_at
                    .map_or(write.expires, |v| v.max(write.expires)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::codec::{Item, from_item, n, s};
    use crate::adapters::dynamo::testing::{at, update};

    fn write(time: i64, until: Option<i64>, expires: i64) -> PoolWrite {
        let u = update(1);
        PoolWrite {
            mark: u.pools[0].clone(),
            pk: "POOL#p".into(),
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

    /// What is known of a pool, read from its item as stored (see `codec`'s tests).
    #[test]
    fn known_is_read_from_a_pool_item() {
        let pk = "POOL#spot#m5.large#use1-az1";
        let mut stored: Item = [
            ("pk", s(pk)),
            ("unavailable_until", n(1_700_000_061)),
            ("expires_at", n(1_702_592_061)),
            ("first_seen", n(1_699_000_000)),
            ("last_seen", n(1_700_000_000)),
            ("last_event_id", s("e-1")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let known = Known {
            until: Some(1_700_000_061),
            last_seen: Some(1_700_000_000),
            first_seen: Some(1_699_000_000),
            expires_at: Some(1_702_592_061),
        };
        assert_eq!(from_item::<Known>(pk, &stored).unwrap(), known);
        // Null is absent.
        stored.insert("unavailable_until".into(), AttributeValue::Null(true));
        assert_eq!(from_item::<Known>(pk, &stored).unwrap().until, None);
    }

    #[test]
    fn times_round_outwards() {
        let u = update(1);
        let w = PoolWrite::of(&u, &Retention::default()).remove(0);
        assert_eq!(w.time, at(0).timestamp(), "event times round down");
        assert_eq!(w.until, Some(at(61).timestamp()), "windows round up");
        assert_eq!(
            w.expires,
            (at(61) + Retention::default().history).timestamp()
        );
    }
}
