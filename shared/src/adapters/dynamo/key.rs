//! The continuation keys: one item of the table (`pk = KEY#continuation`, `sk = KEY`), created by
//! the first process that needs it, rotated by `forewarn key rotate`. The current key's bytes
//! are in `secret` and its id in `key_id` (absent: 0, an item written before keys had ids); the
//! key before the last rotation in `previous_secret` and `previous_key_id`. The item has none of
//! the indexes' key attributes, so no index holds it; the stack's table resource policy lets
//! only forewarn's roles read it (docs/security.md).

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_with::{Bytes, serde_as};

use super::DynamoStore;
use super::codec::*;
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing};
use crate::ports::{FailureKind, StoreError};

impl DynamoStore {
    /// The keys as stored (in their secret, else the table, strongly consistent); `None` when
    /// there are none yet.
    pub(super) async fn read_continuation_keys(&self) -> Result<Option<KeyRing>, StoreError> {
        if let Some(secret) = &self.secret {
            return secret.read().await.map(Some);
        }
        let item = self.get(
            CONTINUATION_KEY_PK,
            SECRET_SK,
            "reading the continuation key",
        );
        item.await?.as_ref().map(decode_keys).transpose()
    }

    /// Reads the keys, or creates the first in the table: a put conditioned on there being
    /// none, so that concurrent first callers (several cold starts at once) end up with the same
    /// key.
    pub(super) async fn load_continuation_keys(&self) -> Result<KeyRing, StoreError> {
        if let Some(keys) = self.read_continuation_keys().await? {
            return Ok(keys);
        }
        let keys = KeyRing::of(ContinuationKey::new(rand::random()));
        match self.write_keys(&keys, None).await {
            Ok(()) => tracing::info!(table = %self.table, "created the continuation key"),
            // Another process created it first: use that one.
            Err(e) if e.kind() == FailureKind::Conflict => {
                let (what, why) = (
                    "reading the continuation key",
                    "gone right after it was created",
                );
                let gone = || self.fail(FailureKind::Unknown, what, why);
                return self.read_continuation_keys().await?.ok_or_else(gone);
            }
            Err(e) => return Err(e),
        }
        Ok(keys)
    }

    /// Rotates the keys (see [`crate::ports::PoolStore::rotate_continuation_key`]).
    pub(super) async fn rotate_keys(&self) -> Result<KeyRing, StoreError> {
        if let Some(secret) = &self.secret {
            return secret.rotate(rand::random()).await;
        }
        let Some(before) = self.read_continuation_keys().await? else {
            return self.load_continuation_keys().await;
        };
        let what = "rotating the continuation key";
        let after = (before.rotated(rand::random()))
            .ok_or_else(|| self.fail(FailureKind::Invalid, what, "its id cannot grow any more"))?;
        match self.write_keys(&after, Some(&before)).await {
            Err(e) if e.kind() == FailureKind::Conflict => {
                let why = "the key changed while it was rotated (another rotation?): nothing was \
                           written; read it again and rotate again if still wanted";
                return Err(self.fail(FailureKind::Conflict, what, why));
            }
            written => written?,
        }
        tracing::info!(table = %self.table, key_id = after.current.id(), "rotated the continuation key");
        Ok(after)
    }

    /// Writes `keys` as the item, on condition that the item is `before` (its current key's
    /// bytes), or that there is none. A failed condition is [`FailureKind::Conflict`].
    async fn write_keys(&self, keys: &KeyRing, before: Option<&KeyRing>) -> Result<(), StoreError> {
        let item = keys_item(keys).map_err(self.invalid("encoding the continuation key"))?;
        let put = (self.client.put_item())
            .table_name(&self.table)
            .set_item(Some(item))
            .expression_attribute_names("#pk", "pk");
        let put = match before {
            None => put.condition_expression("attribute_not_exists(#pk)"),
            Some(before) => put
                .expression_attribute_names("#secret", SECRET)
                .expression_attribute_values(
                    ":secret",
                    AttributeValue::B(Blob::new(before.current.bytes().to_vec())),
                )
                .condition_expression("attribute_exists(#pk) AND #secret = :secret"),
        };
        put.send()
            .await
            .map_err(|e| self.sdk_err("writing the continuation key", e))?;
        Ok(())
    }
}

/// The key item, as written and read (`pk` and `sk` written only).
#[serde_as]
#[derive(Serialize, Deserialize)]
struct KeyItem {
    #[serde(skip_deserializing)]
    pk: &'static str,
    #[serde(skip_deserializing)]
    sk: &'static str,
    /// The current key's bytes.
    #[serde_as(as = "Bytes")]
    secret: Vec<u8>,
    /// Absent: 0, a key stored before keys had ids.
    #[serde(default)]
    key_id: KeyId,
    #[serde_as(as = "Option<Bytes>")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_secret: Option<Vec<u8>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_key_id: Option<KeyId>,
}

/// The key item of `keys`.
fn keys_item(keys: &KeyRing) -> Result<Item, serde_dynamo::Error> {
    to_item(KeyItem {
        pk: CONTINUATION_KEY_PK,
        sk: SECRET_SK,
        secret: keys.current.bytes().to_vec(),
        key_id: keys.current.id(),
        previous_secret: keys.previous.as_ref().map(|k| k.bytes().to_vec()),
        previous_key_id: keys.previous.as_ref().map(ContinuationKey::id),
    })
}

/// The keys of the key item, or what is wrong with it.
fn decode_keys(item: &Item) -> Result<KeyRing, StoreError> {
    let read: KeyItem = from_item(CONTINUATION_KEY_PK, item)?;
    let key = |name: &str, id: KeyId, bytes: &[u8]| {
        let (len, want) = (bytes.len(), ContinuationKey::LEN);
        let why = format!("`{name}` has {len} bytes instead of {want}");
        ContinuationKey::from_slice(id, bytes)
            .ok_or_else(|| StoreError::corrupt(CONTINUATION_KEY_PK, why))
    };
    let previous = match (read.previous_secret, read.previous_key_id) {
        (None, _) => None,
        (Some(bytes), Some(id)) => Some(key(PREVIOUS_SECRET, id, &bytes)?),
        (Some(_), None) => {
            let why = format_args!("`{PREVIOUS_SECRET}` without `previous_key_id`");
            return Err(StoreError::corrupt(CONTINUATION_KEY_PK, why));
        }
    };
    Ok(KeyRing {
        current: key(SECRET, read.key_id, &read.secret)?,
        previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn b(byte: u8) -> AttributeValue {
        AttributeValue::B(Blob::new(vec![byte; 32]))
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.into())
    }

    /// The key item exactly as stored: the pool tables of earlier releases hold it.
    #[test]
    fn the_key_item_is_stored_as_it_always_was() {
        let ring = KeyRing {
            current: ContinuationKey::with_id(7, [2; 32]),
            previous: Some(ContinuationKey::with_id(6, [1; 32])),
        };
        let item = HashMap::from([
            (
                "pk".to_string(),
                AttributeValue::S("KEY#continuation".into()),
            ),
            ("sk".to_string(), AttributeValue::S("KEY".into())),
            ("secret".to_string(), b(2)),
            ("key_id".to_string(), n("7")),
            ("previous_secret".to_string(), b(1)),
            ("previous_key_id".to_string(), n("6")),
        ]);
        assert_eq!(keys_item(&ring).unwrap(), item);
        assert_eq!(decode_keys(&item).unwrap(), ring);

        let first = KeyRing::of(ContinuationKey::with_id(1, [2; 32]));
        let mut item = HashMap::from([
            (
                "pk".to_string(),
                AttributeValue::S("KEY#continuation".into()),
            ),
            ("sk".to_string(), AttributeValue::S("KEY".into())),
            ("secret".to_string(), b(2)),
            ("key_id".to_string(), n("1")),
        ]);
        assert_eq!(keys_item(&first).unwrap(), item);
        assert_eq!(decode_keys(&item).unwrap(), first);
        // Written before keys had ids: id 0.
        item.remove("key_id");
        assert_eq!(decode_keys(&item).unwrap().current.id(), 0);
    }

    #[test]
    fn a_malformed_key_item_is_corrupt() {
        let item = |pairs: Vec<(&str, AttributeValue)>| -> HashMap<String, AttributeValue> {
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
        };
        let corrupt = |item: HashMap<String, AttributeValue>, says: &str| match decode_keys(&item) {
            Err(StoreError::Corrupt { key, message }) => {
                assert_eq!(key, "KEY#continuation");
                assert!(message.contains(says), "{message}");
            }
            other => panic!("{other:?}"),
        };
        corrupt(item(vec![("key_id", n("1"))]), "secret");
        corrupt(item(vec![("secret", n("1"))]), "secret");
        let short = AttributeValue::B(Blob::new(vec![1; 16]));
        corrupt(item(vec![("secret", short)]), "16 bytes");
        corrupt(item(vec![("secret", b(1)), ("key_id", n("x"))]), "key_id");
        corrupt(
            item(vec![("secret", b(1)), ("previous_secret", b(2))]),
            "previous_key_id",
        );
    }
}
