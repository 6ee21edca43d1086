//! The update expressions of one event's pool writes: attribute placeholders, the values of one
//! pool, and the bets on which of its fields the event's values win.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::ceil_secs;
use crate::domain::pool::HistoryEntry;

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

/// One pool's write in the table's units: the event time of its history entry `w` rounded
/// down; its window and its expiry
/// ([`crate::domain::pool::Retention::pool_expiry`]) rounded up.
pub(super) fn secs(w: &HistoryEntry) -> (i64, Option<i64>, i64) {
    let until = w.unavailable_until.map(ceil_secs);
    (w.at.timestamp(), until, ceil_secs(w.expires_at))
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
    pub(super) fn bets(known: Option<&Known>, write: &HistoryEntry) -> Bets {
        let (k, (time, until, expires)) = (known.copied().unwrap_or_default(), secs(write));
        Bets {
            until: until.is_some_and(|u| k.until.is_none_or(|v| v <= u)),
            last: k.last_seen.is_none_or(|v| v <= time),
            first: k.first_seen.is_some_and(|v| v > time),
            expires: k.expires_at.is_none_or(|v| v <= expires),
        }
    }

    /// What is known after `write` was applied on top of `self`.
    pub(super) fn after(self, write: &HistoryEntry) -> Known {
        let (time, until, expires) = secs(write);
        Known {
            until: self.until.max(until),
            last_seen: Some(self.last_seen.map_or(time, |v| v.max(time))),
            first_seen: Some(self.first_seen.map_or(time, |v| v.min(time))),
            expires_at: Some(self.expires_at.map_or(expires, |v| v.max(expires))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::codec::{Item, from_item, n, s};
    use crate::adapters::dynamo::testing::{at, update};
    use crate::domain::fold::history;
    use crate::domain::pool::Retention;

    fn write(time: i64, until: Option<i64>, expires: i64) -> HistoryEntry {
        let t = |secs| chrono::DateTime::from_timestamp(secs, 0).unwrap();
        let mut entry = history(&update(1), &Retention::default()).remove(0);
        (entry.at, entry.unavailable_until, entry.expires_at) = (t(time), until.map(t), t(expires));
        entry
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
        let (time, until, expires) = secs(&history(&u, &Retention::default())[0]);
        assert_eq!(time, at(0).timestamp(), "event times round down");
        assert_eq!(until, Some(at(61).timestamp()), "windows round up");
        assert_eq!(expires, (at(61) + Retention::default().history).timestamp());
    }
}
