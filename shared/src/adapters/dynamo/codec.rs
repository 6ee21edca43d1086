//! The pool table's items: keys, the attributes a scan names, and the items as serde types that
//! `serde_dynamo` converts ([`from_item`], [`to_item`]). The tests pin every kind of item as
//! stored: deployed tables hold them.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::serde::{ts_seconds, ts_seconds_option};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_with::{DisplayFromStr, serde_as};

use crate::domain::event::EventKind;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{PoolKey, PoolRecord, counter_name};
use crate::ports::PortError;

/// An item as the SDK holds it.
pub(super) type Item = HashMap<String, AttributeValue>;

/// The `sk` of pool items.
pub(super) const POOL_SK: &str = "POOL";
/// The `sk` of ledger items.
pub(super) const EVENT_SK: &str = "EVENT";
/// The prefix of the `sk` of history items (`HIST#<event time>#<event id>#<instance id>`).
pub(super) const HISTORY_SK_PREFIX: &str = "HIST#";

/// The start of the `sk` of the history items of events at `at`.
pub(super) fn history_sk_at(at: DateTime<Utc>) -> String {
    format!("{HISTORY_SK_PREFIX}{:011}", at.timestamp().max(0))
}

/// The `pk` of a pool's item.
pub(super) fn pool_pk(pool: &PoolKey) -> String {
    format!("POOL#{pool}")
}

/// The `pk` of an event's ledger item.
pub(super) fn event_pk(event_id: &str) -> String {
    format!("EVENT#{event_id}")
}

pub(super) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

pub(super) fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The key of the item `pk`, `sk`.
pub(super) fn item_key(pk: &str, sk: &str) -> Item {
    HashMap::from([("pk".to_string(), s(pk)), ("sk".to_string(), s(sk))])
}

pub(super) fn ceil_secs(t: DateTime<Utc>) -> i64 {
    t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0)
}

/// `t` rounded up to a whole second.
fn ceil(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(ceil_secs(t), 0).unwrap_or(t)
}

/// The string `attr` of `item`, if it is one.
pub(super) fn text<'a>(item: &'a Item, attr: &str) -> Option<&'a str> {
    item.get(attr)?.as_s().ok().map(String::as_str)
}

/// `item` read as a `T`; what is wrong with it is [`PortError::corrupt`] naming `key` and the
/// attribute. As the table is read: `Null` is absent, and a number is whole units (`12.0`,
/// `1.2E1`; a fraction rounded down). Attributes of a type the SDK does not know are left out
/// (`serde_dynamo` would panic on them).
pub(super) fn from_item<T: DeserializeOwned>(key: &str, item: &Item) -> Result<T, PortError> {
    fn known(v: &AttributeValue) -> bool {
        match v {
            AttributeValue::M(m) => m.values().all(known),
            AttributeValue::L(l) => l.iter().all(known),
            v => !v.is_unknown() && !v.is_null(),
        }
    }
    let whole = |v: &AttributeValue| match v {
        AttributeValue::N(t) if t.parse::<i64>().is_err() => t
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.abs() < 9.0e15)
            .map_or_else(|| v.clone(), |f| n(f.floor() as i64)),
        v => v.clone(),
    };
    let read = item.iter().filter(|(_, v)| known(v));
    let read = read.map(|(k, v)| (k.clone(), whole(v))).collect();
    let value = serde_dynamo::AttributeValue::from(AttributeValue::M(read));
    serde_path_to_error::deserialize(serde_dynamo::Deserializer::from_attribute_value(value))
        .map_err(|e| PortError::corrupt(key, e))
}

pub(super) use serde_dynamo::aws_sdk_dynamodb_1::to_item;

/// A pool item as read (its updates write it, see `apply`), straight into a [`PoolRecord`]; the
/// counters apart.
#[serde_as]
#[derive(Deserialize)]
#[serde(remote = "PoolRecord")]
struct PoolItem {
    #[serde_as(as = "DisplayFromStr")]
    pool: PoolKey,
    region: Option<String>,
    #[serde(default, with = "ts_seconds_option")]
    unavailable_until: Option<DateTime<Utc>>,
    #[serde(with = "ts_seconds")]
    expires_at: DateTime<Utc>,
    /// One attribute per event kind (named by [`counter_name`]), read apart.
    #[serde(skip)]
    counters: BTreeMap<String, u64>,
    #[serde(with = "ts_seconds")]
    first_seen: DateTime<Utc>,
    #[serde(with = "ts_seconds")]
    last_seen: DateTime<Utc>,
    last_event_id: String,
    last_reason: String,
    last_instance_id: String,
}

/// A record read as [`PoolItem`] says.
#[derive(Deserialize)]
struct Pool(#[serde(with = "PoolItem")] PoolRecord);

/// A pool item as a record. Any missing or mistyped attribute is [`PortError::corrupt`] naming
/// the item's `pk` and the attribute.
pub(super) fn decode_pool(item: &Item) -> Result<PoolRecord, PortError> {
    let key = text(item, "pk").unwrap_or("(item without a pk)");
    let names = EventKind::ALL.iter().copied().map(counter_name);
    let counts: Item = names
        .filter_map(|name| Some((name.to_string(), item.get(name)?.clone())))
        .collect();
    let counters = from_item(key, &counts)?;
    let Pool(record) = from_item(key, item)?;
    if pool_pk(&record.pool) != key {
        let why = format_args!("`pool` = {} does not match the key", record.pool);
        return Err(PortError::corrupt(key, why));
    }
    Ok(PoolRecord { counters, ..record })
}

/// A history item's attributes as written and read, straight from and into a [`HistoryEntry`]
/// (its key apart: see [`history_item`]).
#[serde_as]
#[derive(Serialize, Deserialize)]
#[serde(remote = "HistoryEntry")]
struct HistoryItem {
    #[serde_as(as = "DisplayFromStr")]
    pool: PoolKey,
    kind: EventKind,
    event_id: String,
    instance_id: String,
    /// The event's time, rounded down.
    #[serde(with = "ts_seconds")]
    at: DateTime<Utc>,
    /// The window, rounded up.
    #[serde(rename = "until", default, with = "ts_seconds_option")]
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable_until: Option<DateTime<Utc>>,
    /// Rounded up.
    #[serde(with = "ts_seconds")]
    expires_at: DateTime<Utc>,
}

/// A history entry as [`HistoryItem`] says.
#[derive(Serialize, Deserialize)]
struct History(#[serde(with = "HistoryItem")] HistoryEntry);

/// The key of `entry`'s history item, and its attributes.
pub(super) fn history_item(entry: &HistoryEntry) -> (Item, impl Serialize) {
    let (at, id, instance) = (entry.at, &entry.event_id, &entry.instance_id);
    // Sorts by event time within its pool.
    let sk = format!("{}#{id}#{instance}", history_sk_at(at));
    let key = item_key(&pool_pk(&entry.pool), &sk);
    let entry = HistoryEntry {
        unavailable_until: entry.unavailable_until.map(ceil),
        expires_at: ceil(entry.expires_at),
        ..entry.clone()
    };
    (key, History(entry))
}

/// A history item read back.
pub(super) fn decode_history(item: &Item) -> Result<HistoryEntry, PortError> {
    let History(entry) = from_item(text(item, "sk").unwrap_or_default(), item)?;
    Ok(entry)
}

/// A ledger item's attributes (its key apart): an applied event.
#[derive(Serialize, Deserialize)]
pub(super) struct LedgerItem {
    #[serde(skip_deserializing)]
    pub(super) kind: &'static str,
    #[serde(skip_deserializing)]
    pub(super) recorded_at: i64,
    pub(super) expires_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::testing::{at, store, update};
    use crate::domain::event::EventKind;
    use crate::domain::pool::HistoryEntry;
    use crate::domain::pool::{CapacityType, Retention};
    use crate::ports::Corrupt;

    fn item(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn secs(t: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(t, 0).unwrap()
    }

    /// The items below exactly as stored: the pool tables of earlier releases hold them.
    #[test]
    fn the_ledger_item_is_stored_as_it_always_was() {
        let put = store()
            .ledger_put(EventKind::SpotInterruption, at(1), "e-1")
            .unwrap();
        let stored = item(vec![
            ("pk", s("EVENT#e-1")),
            ("sk", s("EVENT")),
            ("kind", s("spot-interruption")),
            ("recorded_at", n(1_700_000_001)),
            ("expires_at", n(1_701_209_601)),
        ]);
        assert_eq!(put.put().unwrap().item(), &stored);
    }

    #[test]
    fn the_history_item_is_stored_as_it_always_was() {
        let retention = Retention::default();
        let entry = &crate::domain::fold::history(&update(1), &retention)[0];
        let put = store().put("h", history_item(entry), |p| p).unwrap();
        let mut stored = item(vec![
            ("pk", s("POOL#spot#m0.large#us-east-1a")),
            ("sk", s("HIST#01700000000#e-1#i-0")),
            ("pool", s("spot#m0.large#us-east-1a")),
            ("kind", s("spot-interruption")),
            ("event_id", s("e-1")),
            ("instance_id", s("i-0")),
            // The event time rounded down, the window and the expiry up.
            ("at", n(1_700_000_000)),
            ("until", n(1_700_000_061)),
            ("expires_at", n(1_702_592_061)),
        ]);
        assert_eq!(put.put().unwrap().item(), &stored);
        let read = HistoryEntry {
            pool: PoolKey::new(CapacityType::Spot, "m0.large", "us-east-1a"),
            kind: EventKind::SpotInterruption,
            event_id: "e-1".into(),
            instance_id: "i-0".into(),
            at: secs(1_700_000_000),
            unavailable_until: Some(secs(1_700_000_061)),
            expires_at: secs(1_702_592_061),
        };
        assert_eq!(decode_history(&stored).unwrap(), read);
        // A count without a window has no `until`.
        let count = HistoryEntry {
            unavailable_until: None,
            ..read.clone()
        };
        stored.remove("until");
        assert_eq!(
            store()
                .put("h", history_item(&count), |p| p)
                .unwrap()
                .put()
                .unwrap()
                .item(),
            &stored
        );
        assert_eq!(decode_history(&stored).unwrap(), count);
        stored.insert("at".into(), s("soon"));
        match decode_history(&stored).map_err(|e| e.cause::<Corrupt>().cloned()) {
            Err(Some(Corrupt { key, message })) => {
                assert_eq!(key, "HIST#01700000000#e-1#i-0");
                assert!(message.contains("at"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A pool item as its updates write it (see `apply`), read back.
    #[test]
    fn a_pool_item_is_read_as_it_is_stored() {
        let mut stored = item(vec![
            ("pk", s("POOL#spot#m5.large#use1-az1")),
            ("sk", s("POOL")),
            ("pool", s("spot#m5.large#use1-az1")),
            ("capacity_type", s("spot")),
            ("instance_type", s("m5.large")),
            ("zone", s("use1-az1")),
            ("region", s("us-east-1")),
            ("unavailable_until", n(1_700_000_061)),
            ("expires_at", n(1_702_592_061)),
            ("first_seen", n(1_699_000_000)),
            ("last_seen", n(1_700_000_000)),
            ("last_event_id", s("e-1")),
            ("last_reason", s("r")),
            ("last_instance_id", s("i-0")),
            ("interruptions", n(3)),
            ("rebalances", n(1)),
        ]);
        let record = PoolRecord {
            pool: PoolKey::new(CapacityType::Spot, "m5.large", "use1-az1"),
            region: Some("us-east-1".into()),
            unavailable_until: Some(secs(1_700_000_061)),
            expires_at: secs(1_702_592_061),
            counters: [
                ("interruptions".to_string(), 3),
                ("rebalances".to_string(), 1),
            ]
            .into(),
            first_seen: secs(1_699_000_000),
            last_seen: secs(1_700_000_000),
            last_event_id: "e-1".into(),
            last_reason: "r".into(),
            last_instance_id: "i-0".into(),
        };
        assert_eq!(decode_pool(&stored).unwrap(), record);
        // Null is absent.
        stored.insert("region".into(), AttributeValue::Null(true));
        stored.insert("unavailable_until".into(), AttributeValue::Null(true));
        let read = decode_pool(&stored).unwrap();
        assert_eq!((read.region, read.unavailable_until), (None, None));
    }

    #[test]
    fn numbers_and_malformed_items() {
        let mut item: HashMap<String, AttributeValue> = [
            ("pk", s("POOL#spot#m5.large#us-east-1a")),
            ("sk", s("POOL")),
            ("pool", s("spot#m5.large#us-east-1a")),
            ("expires_at", n(100)),
            ("first_seen", n(1)),
            ("last_seen", n(2)),
            ("last_event_id", s("e")),
            ("last_reason", s("r")),
            ("last_instance_id", s("i")),
            ("interruptions", n(3)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let r = decode_pool(&item).unwrap();
        assert_eq!(r.interruptions(), 3);
        assert_eq!(r.unavailable_until, None);
        assert_eq!(r.region, None);
        // Whole units: `12`, `12.0`, `1.2E1`; fractions rounded down.
        for (stored, read) in [("12", 12), ("12.0", 12), ("1.2E1", 12), ("12.9", 12)] {
            item.insert("interruptions".into(), AttributeValue::N(stored.into()));
            item.insert("first_seen".into(), AttributeValue::N(stored.into()));
            let r = decode_pool(&item).unwrap();
            assert_eq!(r.interruptions(), read);
            assert_eq!(r.first_seen.timestamp(), 12);
        }
        for garbage in ["soon", "1e300"] {
            item.insert("interruptions".into(), AttributeValue::N(garbage.into()));
            match decode_pool(&item).map_err(|e| e.cause::<Corrupt>().cloned()) {
                Err(Some(Corrupt { message, .. })) => {
                    assert!(message.contains("interruptions"), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        item.insert("interruptions".into(), n(3));
        item.insert("first_seen".into(), n(1));
        item.insert("pool".into(), s("spot#c5.large#us-east-1a"));
        match decode_pool(&item).map_err(|e| e.cause::<Corrupt>().cloned()) {
            Err(Some(Corrupt { key, message })) => {
                assert_eq!(key, "POOL#spot#m5.large#us-east-1a");
                assert!(message.contains("does not match"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        item.insert("pool".into(), s("spot#m5.large#us-east-1a"));
        item.insert("interruptions".into(), n(-1));
        assert!(matches!(
            decode_pool(&item),
            Err(e) if e.cause::<Corrupt>().is_some()
        ));
        item.insert("interruptions".into(), n(1));
        item.remove("last_seen");
        match decode_pool(&item).map_err(|e| e.cause::<Corrupt>().cloned()) {
            Err(Some(Corrupt { message, .. })) => assert!(message.contains("last_seen")),
            other => panic!("{other:?}"),
        }
    }
}
