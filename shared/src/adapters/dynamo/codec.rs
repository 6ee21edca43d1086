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

    #[test]
    fn numbers_and_malformed_items() {
        assert_eq!(parse_n("12"), Some(12));
        assert_eq!(parse_n("12.9"), Some(12));
        assert_eq!(parse_n("1.2E1"), Some(12));
        assert_eq!(parse_n("soon"), None);
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
