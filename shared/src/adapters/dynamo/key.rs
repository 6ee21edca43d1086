//! The continuation key: one item of the table, created by the first process that needs it.

use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::*;
use crate::domain::continuation::ContinuationKey;
use crate::ports::{FailureKind, StoreError};

impl DynamoStore {
    /// The continuation key item (`pk = KEY#continuation`, `sk = KEY`, the 32 bytes in `secret`),
    /// strongly consistent; `None` when there is none yet.
    async fn read_continuation_key(&self) -> Result<Option<ContinuationKey>, StoreError> {
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
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let corrupt = |message: String| StoreError::Corrupt {
            key: CONTINUATION_KEY_PK.to_string(),
            message,
        };
        let bytes = item
            .get(SECRET)
            .and_then(|v| v.as_b().ok())
            .ok_or_else(|| corrupt(format!("no binary attribute `{SECRET}`")))?;
        ContinuationKey::from_slice(bytes.as_ref())
            .map(Some)
            .ok_or_else(|| {
                corrupt(format!(
                    "{} bytes instead of {}",
                    bytes.as_ref().len(),
                    ContinuationKey::LEN
                ))
            })
    }

    /// Reads the continuation key, or creates it: a put conditioned on there being none, so that
    /// concurrent first callers (several cold starts at once) end up with the same key.
    pub(super) async fn load_continuation_key(&self) -> Result<ContinuationKey, StoreError> {
        if let Some(key) = self.read_continuation_key().await? {
            return Ok(key);
        }
        let key = ContinuationKey::new(rand::random());
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PK, s(CONTINUATION_KEY_PK))
            .item(SK, s(SECRET_SK))
            .item(
                SECRET,
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
                    key.bytes().to_vec(),
                )),
            )
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await;
        match put {
            Ok(_) => {
                tracing::info!(table = %self.table, "created the continuation key");
                Ok(key)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                // Another process created it first: use that one.
                self.read_continuation_key().await?.ok_or_else(|| {
                    self.err(
                        FailureKind::Unknown,
                        "reading the continuation key",
                        "gone right after it was created",
                    )
                })
            }
            Err(e) => Err(self.sdk_err("creating the continuation key", e)),
        }
    }
}
