//! The update expressions of one event's pool writes: attribute placeholders, the values of one
//! pool, and the bets on which of its fields the event's values win.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::ceil_secs;
use crate::domain::pool::{HistoryEntry, PoolRecord};

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

impl Bets {
    /// The bets for `write` on a pool as this store last saw it, `seen` (read, or folded from
    /// what it wrote: `unavailable_until`, `last_seen` and `expires_at` only grow, `first_seen`
    /// only shrinks, so its values bound what is stored), compared in the table's units: "wins"
    /// unless `seen` says otherwise (a bet known lost is certainly lost; a bet placed to win may
    /// lose, and the condition tells).
    pub(super) fn on(seen: Option<&PoolRecord>, write: &HistoryEntry) -> Bets {
        let (time, until, expires) = secs(write);
        let seen_until = seen.and_then(|s| s.unavailable_until);
        Bets {
            until: until.is_some_and(|u| seen_until.is_none_or(|v| ceil_secs(v) <= u)),
            last: seen.is_none_or(|s| s.last_seen.timestamp() <= time),
            first: seen.is_some_and(|s| s.first_seen.timestamp() > time),
            expires: seen.is_none_or(|s| ceil_secs(s.expires_at) <= expires),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::testing::{at, update};
    use crate::domain::fold::{fold, history};
    use crate::domain::pool::Retention;
    use chrono::DateTime;

    fn t(secs: i64) -> DateTime<chrono::Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    fn write(time: i64, until: Option<i64>, expires: i64) -> HistoryEntry {
        let mut entry = history(&update(1), &Retention::default()).remove(0);
        (entry.at, entry.unavailable_until, entry.expires_at) = (t(time), until.map(t), t(expires));
        entry
    }

    #[test]
    fn bets_default_to_this_event_being_the_latest() {
        let b = Bets::on(None, &write(100, Some(200), 300));
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
        assert!(!Bets::on(None, &write(100, None, 300)).until);
    }

    #[test]
    fn what_was_seen_makes_losing_bets_certain() {
        let u = update(1);
        let mut seen = fold(None, &u, &u.pools[0], &Retention::default());
        (seen.unavailable_until, seen.last_seen) = (Some(t(500)), t(150));
        (seen.first_seen, seen.expires_at) = (t(120), t(900));
        // A late event with a shorter window, inside the window seen.
        let b = Bets::on(Some(&seen), &write(100, Some(200), 300));
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
        assert!(Bets::on(Some(&seen), &write(150, None, 300)).last);
        // What this store wrote itself is compared as the table holds it: a window and an
        // expiry rounded up, so that the same second does not win them.
        let ms = chrono::Duration::milliseconds(1);
        (seen.unavailable_until, seen.expires_at) = (Some(t(200) + ms), t(300) + ms);
        let b = Bets::on(Some(&seen), &write(100, Some(200), 300));
        assert!(!b.until && !b.expires, "{b:?}");
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
