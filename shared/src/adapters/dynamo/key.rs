//! The continuation keys: one item of the table (`pk = KEY#continuation`, `sk = KEY`), created by
//! the first process that needs it, rotated by `forewarn key rotate`. The current key's bytes
//! are in `secret` and its id in `key_id` (absent: 0, an item written before keys had ids); the
//! key before the last rotation in `previous_secret` and `previous_key_id`. The item has none of
//! the indexes' key attributes, so no index holds it; the stack's table resource policy lets
//! only forewarn's roles read it (docs/security.md).

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::*;
use super::{DynamoStore, SecretKeys};
use crate::domain::continuation::{ContinuationKey, KeyId, KeyRing};
use crate::ports::{FailureKind, StoreError};

impl DynamoStore {
    /// The keys as stored, strongly consistent; `None` when there are none yet.
    pub(super) async fn read_continuation_keys(&self) -> Result<Option<KeyRing>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(CONTINUATION_KEY_PK))
            .key(SK, s(SECRET_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_err("reading the continuation key", e))?;
        out.item().map(decode_keys).transpose()
    }

    /// Reads the keys, or creates the first: a put conditioned on there being none, so that
    /// concurrent first callers (several cold starts at once) end up with the same key.
    pub(super) async fn load_continuation_keys(&self) -> Result<KeyRing, StoreError> {
        if let Some(keys) = self.read_continuation_keys().await? {
            return Ok(keys);
        }
        let keys = KeyRing::of(ContinuationKey::new(rand::random()));
        match self.write_keys(&keys, None).await {
            Ok(()) => {
                tracing::info!(table = %self.table, "created the continuation key");
                Ok(keys)
            }
            // Another process created it first: use that one.
            Err(e) if e.kind() == FailureKind::Conflict => {
                self.read_continuation_keys().await?.ok_or_else(|| {
                    self.err(
                        FailureKind::Unknown,
                        "reading the continuation key",
                        "gone right after it was created",
                    )
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The keys of `secret`; while it is at the stack's generated version, the table's keys
    /// when it holds some (a table older than the secret), adopted into the secret first when
    /// `adopt` (else only read: a read-only view writes nothing).
    pub(super) async fn secret_keys(
        &self,
        secret: &SecretKeys,
        adopt: bool,
    ) -> Result<KeyRing, StoreError> {
        let read = secret.read().await?;
        if read.generated
            && let Some(legacy) = self.read_continuation_keys().await?
        {
            if !adopt {
                return Ok(legacy);
            }
            let adopted = secret.adopt(&legacy).await?;
            tracing::info!(table = %self.table, key_id = adopted.current.id(), "the pool table's continuation keys adopted into their secret");
            return Ok(adopted);
        }
        Ok(read.ring)
    }

    /// Rotates the keys of `secret` (adopting the table's first, as [`Self::secret_keys`]), then
    /// erases the table's key item, if any: the keys are no longer in the table.
    pub(super) async fn rotate_secret(&self, secret: &SecretKeys) -> Result<KeyRing, StoreError> {
        self.secret_keys(secret, true).await?;
        let keys = secret.rotate(rand::random()).await?;
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(CONTINUATION_KEY_PK))
            .key(SK, s(SECRET_SK))
            .send()
            .await
            .map_err(|e| self.sdk_err("erasing the pool table's old continuation key", e))?;
        tracing::info!(
            key_id = keys.current.id(),
            "rotated the continuation key in its secret"
        );
        Ok(keys)
    }

    /// Rotates the keys (see [`crate::ports::PoolStore::rotate_continuation_key`]).
    pub(super) async fn rotate_keys(&self) -> Result<KeyRing, StoreError> {
        let Some(before) = self.read_continuation_keys().await? else {
            return self.load_continuation_keys().await;
        };
        let after = before.rotated(rand::random()).ok_or_else(|| {
            self.err(
                FailureKind::Invalid,
                "rotating the continuation key",
                "its id cannot grow any more",
            )
        })?;
        self.write_keys(&after, Some(&before)).await.map_err(|e| {
            if e.kind() == FailureKind::Conflict {
                self.err(
                    FailureKind::Conflict,
                    "rotating the continuation key",
                    "the key changed while it was rotated (another rotation?): nothing was \
                     written; read it again and rotate again if still wanted",
                )
            } else {
                e
            }
        })?;
        tracing::info!(table = %self.table, key_id = after.current.id(), "rotated the continuation key");
        Ok(after)
    }

    /// Writes `keys` as the item, on condition that the item is `before` (its current key's
    /// bytes), or that there is none. A failed condition is [`FailureKind::Conflict`].
    async fn write_keys(&self, keys: &KeyRing, before: Option<&KeyRing>) -> Result<(), StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(keys_item(keys)))
            .expression_attribute_names("#pk", PK);
        let put = match before {
            None => put.condition_expression("attribute_not_exists(#pk)"),
            Some(before) => put
                .expression_attribute_names("#secret", SECRET)
                .expression_attribute_values(":secret", blob(&before.current))
                .condition_expression("attribute_exists(#pk) AND #secret = :secret"),
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Err(self.err(
                    FailureKind::Conflict,
                    "writing the continuation key",
                    "the key item changed in between",
                ))
            }
            Err(e) => Err(self.sdk_err("writing the continuation key", e)),
        }
    }
}

fn id_value(id: KeyId) -> AttributeValue {
    AttributeValue::N(id.to_string())
}

fn blob(k: &ContinuationKey) -> AttributeValue {
    AttributeValue::B(Blob::new(k.bytes().to_vec()))
}

/// The key item of `keys`.
fn keys_item(keys: &KeyRing) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (PK.to_string(), s(CONTINUATION_KEY_PK)),
        (SK.to_string(), s(SECRET_SK)),
        (SECRET.to_string(), blob(&keys.current)),
        (KEY_ID.to_string(), id_value(keys.current.id())),
    ]);
    if let Some(previous) = &keys.previous {
        item.insert(PREVIOUS_SECRET.to_string(), blob(previous));
        item.insert(PREVIOUS_KEY_ID.to_string(), id_value(previous.id()));
    }
    item
}

/// The keys of the key item, or what is wrong with it.
fn decode_keys(item: &HashMap<String, AttributeValue>) -> Result<KeyRing, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: CONTINUATION_KEY_PK.to_string(),
        message,
    };
    let id = |name: &str| -> Result<Option<KeyId>, StoreError> {
        item.get(name)
            .map(|v| {
                v.as_n()
                    .ok()
                    .and_then(|n| n.parse::<KeyId>().ok())
                    .ok_or_else(|| corrupt(format!("`{name}` is not a key id")))
            })
            .transpose()
    };
    let key = |name: &str, id: KeyId| -> Result<Option<ContinuationKey>, StoreError> {
        item.get(name)
            .map(|v| {
                let bytes = v
                    .as_b()
                    .map_err(|_| corrupt(format!("`{name}` is not binary")))?;
                ContinuationKey::from_slice(id, bytes.as_ref()).ok_or_else(|| {
                    corrupt(format!(
                        "`{name}` has {} bytes instead of {}",
                        bytes.as_ref().len(),
                        ContinuationKey::LEN
                    ))
                })
            })
            .transpose()
    };
    let current = key(SECRET, id(KEY_ID)?.unwrap_or(0))?
        .ok_or_else(|| corrupt(format!("no binary attribute `{SECRET}`")))?;
    let previous = match (item.contains_key(PREVIOUS_SECRET), id(PREVIOUS_KEY_ID)?) {
        (false, _) => None,
        (true, Some(id)) => key(PREVIOUS_SECRET, id)?,
        (true, None) => {
            return Err(corrupt(format!(
                "`{PREVIOUS_SECRET}` without `{PREVIOUS_KEY_ID}`"
            )));
        }
    };
    Ok(KeyRing { current, previous })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(keys_item(&ring), item);
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
        assert_eq!(keys_item(&first), item);
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
