//! The pool table's item codec: attribute names, keys, and pool items read back as records.

use std::collections::HashMap;
use std::fmt::Display;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

use crate::domain::event::EventKind;
use crate::domain::pool::{PoolKey, PoolRecord, counter_name};
use crate::ports::StoreError;

/// The `sk` of pool items.
pub const POOL_SK: &str = "POOL";
/// The `sk` of ledger items.
pub const EVENT_SK: &str = "EVENT";

// Attribute names.
pub(super) const PK: &str = "pk";
pub(super) const SK: &str = "sk";
pub(super) const POOL: &str = "pool";
pub(super) const CAPACITY_TYPE: &str = "capacity_type";
pub(super) const INSTANCE_TYPE: &str = "instance_type";
pub(super) const ZONE: &str = "zone";
pub(super) const REGION: &str = "region";
pub(super) const UNAVAILABLE_UNTIL: &str = "unavailable_until";
pub(super) const EXPIRES_AT: &str = "expires_at";
pub(super) const FIRST_SEEN: &str = "first_seen";
pub(super) const LAST_SEEN: &str = "last_seen";
pub(super) const LAST_EVENT_ID: &str = "last_event_id";
pub(super) const LAST_REASON: &str = "last_reason";
pub(super) const LAST_INSTANCE_ID: &str = "last_instance_id";
pub(super) const KIND: &str = "kind";
pub(super) const RECORDED_AT: &str = "recorded_at";

/// The `pk` of the continuation key item (see [`crate::domain::continuation`]).
pub const CONTINUATION_KEY_PK: &str = "KEY#continuation";
/// The `sk` of secret items.
pub const SECRET_SK: &str = "KEY";
/// The attribute holding a secret's bytes (the current continuation key).
pub const SECRET: &str = "secret";
/// The current key's id (absent: 0, a key stored before keys had ids).
pub(super) const KEY_ID: &str = "key_id";
/// The key before the last rotation, and its id.
pub const PREVIOUS_SECRET: &str = "previous_secret";
pub(super) const PREVIOUS_KEY_ID: &str = "previous_key_id";

/// The prefix of the `sk` of history items (`HIST#<event time>#<event id>#<instance id>`).
pub const HISTORY_SK_PREFIX: &str = "HIST#";
pub(super) const AT: &str = "at";
pub(super) const UNTIL: &str = "until";
pub(super) const EVENT_ID: &str = "event_id";
pub(super) const INSTANCE_ID: &str = "instance_id";

/// The attributes a `Scan` of pool items reads (and names: the stack's table resource policy
/// refuses, to anyone but forewarn's roles, a `Scan` that does not name its attributes or that
/// names the continuation key's, docs/security.md).
pub fn pool_attributes() -> Vec<&'static str> {
    let mut names = vec![
        PK,
        SK,
        POOL,
        REGION,
        UNAVAILABLE_UNTIL,
        EXPIRES_AT,
        FIRST_SEEN,
        LAST_SEEN,
        LAST_EVENT_ID,
        LAST_REASON,
        LAST_INSTANCE_ID,
    ];
    names.extend(EventKind::ALL.into_iter().map(counter_name));
    names.dedup();
    names
}

/// The attributes a `Scan` of history items reads (see [`pool_attributes`]).
pub fn history_attributes() -> Vec<&'static str> {
    vec![SK, POOL, KIND, EVENT_ID, INSTANCE_ID, AT, UNTIL, EXPIRES_AT]
}

/// The `sk` of a history item: sorts by event time within its pool.
pub fn history_sk(entry: &crate::domain::stats::HistoryEntry) -> String {
    format!(
        "{HISTORY_SK_PREFIX}{:011}#{}#{}",
        entry.at.timestamp().max(0),
        entry.event_id,
        entry.instance_id
    )
}

/// A history item read back.
pub fn decode_history(
    item: &HashMap<String, AttributeValue>,
) -> Result<crate::domain::stats::HistoryEntry, StoreError> {
    let key = item
        .get(SK)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.clone(),
        message,
    };
    let text = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| corrupt(format!("`{name}` is missing or not a string")))
    };
    let time = |name: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        match item.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_n()
                .ok()
                .and_then(|n| n.parse::<i64>().ok())
                .and_then(|t| DateTime::from_timestamp(t, 0))
                .map(Some)
                .ok_or_else(|| corrupt(format!("`{name}` is not a time in epoch seconds"))),
        }
    };
    let pool: PoolKey = text(POOL)?
        .parse()
        .map_err(|e| corrupt(format!("`{POOL}`: {e}")))?;
    let kind: EventKind = serde_json::from_value(serde_json::Value::String(text(KIND)?))
        .map_err(|e| corrupt(format!("`{KIND}`: {e}")))?;
    Ok(crate::domain::stats::HistoryEntry {
        pool,
        kind,
        event_id: text(EVENT_ID)?,
        instance_id: text(INSTANCE_ID)?,
        at: time(AT)?.ok_or_else(|| corrupt(format!("`{AT}` is missing")))?,
        unavailable_until: time(UNTIL)?,
        expires_at: time(EXPIRES_AT)?
            .ok_or_else(|| corrupt(format!("`{EXPIRES_AT}` is missing")))?,
    })
}

/// The `pk` of a pool's item.
pub fn pool_pk(pool: &PoolKey) -> String {
    format!("POOL#{pool}")
}

/// The `pk` of an event's ledger item.
pub fn event_pk(event_id: &str) -> String {
    format!("EVENT#{event_id}")
}

pub(super) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

pub(super) fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn ceil_secs(t: DateTime<Utc>) -> i64 {
    t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0)
}

pub(super) fn corrupt(key: &str, message: impl Display) -> StoreError {
    StoreError::Corrupt {
        key: key.to_string(),
        message: message.to_string(),
    }
}

pub(super) fn req_s<'a>(
    key: &str,
    item: &'a HashMap<String, AttributeValue>,
    attr: &str,
) -> Result<&'a str, StoreError> {
    match item.get(attr) {
        Some(AttributeValue::S(v)) => Ok(v),
        Some(_) => Err(corrupt(key, format_args!("`{attr}` is not a string"))),
        None => Err(corrupt(key, format_args!("`{attr}` is missing"))),
    }
}

pub(super) fn opt_n(
    key: &str,
    item: &HashMap<String, AttributeValue>,
    attr: &str,
) -> Result<Option<i64>, StoreError> {
    match item.get(attr) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(v)) => parse_n(v)
            .map(Some)
            .ok_or_else(|| corrupt(key, format_args!("`{attr}` = {v} is not a whole number"))),
        Some(_) => Err(corrupt(key, format_args!("`{attr}` is not a number"))),
    }
}

pub(super) fn req_n(
    key: &str,
    item: &HashMap<String, AttributeValue>,
    attr: &str,
) -> Result<i64, StoreError> {
    opt_n(key, item, attr)?.ok_or_else(|| corrupt(key, format_args!("`{attr}` is missing")))
}

/// A DynamoDB number as whole units (`12`, `12.0`, `1.2E1`; fractions are rounded down).
pub(super) fn parse_n(v: &str) -> Option<i64> {
    v.parse::<i64>().ok().or_else(|| {
        v.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.abs() < 9.0e15)
            .map(|f| f.floor() as i64)
    })
}

pub(super) fn time(key: &str, attr: &str, secs: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp(secs, 0)
        .ok_or_else(|| corrupt(key, format_args!("`{attr}` = {secs} is out of range")))
}

pub(super) fn req_time(
    key: &str,
    item: &HashMap<String, AttributeValue>,
    attr: &str,
) -> Result<DateTime<Utc>, StoreError> {
    time(key, attr, req_n(key, item, attr)?)
}

/// A pool item as a record. Any missing or mistyped attribute is [`StoreError::Corrupt`] naming
/// the item's `pk`.
pub(super) fn decode_pool(
    item: &HashMap<String, AttributeValue>,
) -> Result<PoolRecord, StoreError> {
    let key = match item.get(PK) {
        Some(AttributeValue::S(pk)) => pk.as_str(),
        _ => "(item without a pk)",
    };
    let pool: PoolKey = req_s(key, item, POOL)?
        .parse()
        .map_err(|e| corrupt(key, e))?;
    if pool_pk(&pool) != key {
        return Err(corrupt(
            key,
            format_args!("`pool` = {pool} does not match the key"),
        ));
    }
    let region = match item.get(REGION) {
        None | Some(AttributeValue::Null(_)) => None,
        Some(_) => Some(req_s(key, item, REGION)?.to_string()),
    };
    let unavailable_until = opt_n(key, item, UNAVAILABLE_UNTIL)?
        .map(|secs| time(key, UNAVAILABLE_UNTIL, secs))
        .transpose()?;
    let mut counters = std::collections::BTreeMap::new();
    for kind in EventKind::ALL {
        let name = counter_name(kind);
        if let Some(count) = opt_n(key, item, name)? {
            let count = u64::try_from(count)
                .map_err(|_| corrupt(key, format_args!("`{name}` = {count} is negative")))?;
            counters.insert(name.to_string(), count);
        }
    }
    Ok(PoolRecord {
        pool,
        region,
        unavailable_until,
        expires_at: req_time(key, item, EXPIRES_AT)?,
        counters,
        first_seen: req_time(key, item, FIRST_SEEN)?,
        last_seen: req_time(key, item, LAST_SEEN)?,
        last_event_id: req_s(key, item, LAST_EVENT_ID)?.to_string(),
        last_reason: req_s(key, item, LAST_REASON)?.to_string(),
        last_instance_id: req_s(key, item, LAST_INSTANCE_ID)?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::expr::Known;
    use crate::adapters::dynamo::testing::{store, update};
    use crate::domain::pool::{CapacityType, Retention};
    use crate::domain::stats::HistoryEntry;

    fn item(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn secs(t: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(t, 0).unwrap()
    }

    /// The items below exactly as stored: the pool tables of earlier releases hold them.
    #[test]
    fn the_ledger_item_is_stored_as_it_always_was() {
        let put = store().ledger_put(&update(1), "e-1").unwrap();
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
        let entry = &HistoryEntry::of(&update(1), &retention)[0];
        let put = store().history_put(entry).unwrap();
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
            store().history_put(&count).unwrap().put().unwrap().item(),
            &stored
        );
        assert_eq!(decode_history(&stored).unwrap(), count);
        // The scan's projection leaves out `pk`.
        stored.remove("pk");
        assert_eq!(decode_history(&stored).unwrap(), count);
        stored.insert("at".into(), s("soon"));
        match decode_history(&stored) {
            Err(StoreError::Corrupt { key, message }) => {
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
        assert_eq!(
            Known::from_item("POOL#spot#m5.large#use1-az1", &stored).unwrap(),
            Known {
                until: Some(1_700_000_061),
                last_seen: Some(1_700_000_000),
                first_seen: Some(1_699_000_000),
                expires_at: Some(1_702_592_061),
            }
        );
        // Null is absent.
        stored.insert("region".into(), AttributeValue::Null(true));
        stored.insert("unavailable_until".into(), AttributeValue::Null(true));
        let read = decode_pool(&stored).unwrap();
        assert_eq!((read.region, read.unavailable_until), (None, None));
        assert_eq!(
            Known::from_item("POOL#spot#m5.large#use1-az1", &stored)
                .unwrap()
                .until,
            None
        );
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
            match decode_pool(&item) {
                Err(StoreError::Corrupt { message, .. }) => {
                    assert!(message.contains("interruptions"), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        item.insert("interruptions".into(), n(3));
        item.insert("first_seen".into(), n(1));
        item.insert("pool".into(), s("spot#c5.large#us-east-1a"));
        match decode_pool(&item) {
            Err(StoreError::Corrupt { key, message }) => {
                assert_eq!(key, "POOL#spot#m5.large#us-east-1a");
                assert!(message.contains("does not match"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        item.insert("pool".into(), s("spot#m5.large#us-east-1a"));
        item.insert("interruptions".into(), n(-1));
        assert!(matches!(
            decode_pool(&item),
            Err(StoreError::Corrupt { .. })
        ));
        item.insert("interruptions".into(), n(1));
        item.remove("last_seen");
        match decode_pool(&item) {
            Err(StoreError::Corrupt { message, .. }) => assert!(message.contains("last_seen")),
            other => panic!("{other:?}"),
        }
    }
}
