//! The idempotence ledger: which events were applied already, and the put that records one.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{KeysAndAttributes, Put, TransactWriteItem};

use super::codec::*;
use super::{BACKOFF, DynamoStore, MAX_BATCH_ROUNDS};
use crate::domain::pool::PoolUpdate;
use crate::ports::{FailureKind, StoreError};

impl DynamoStore {
    /// The event ids among `event_ids` whose ledger item is there and has not expired.
    pub(super) async fn read_ledger(
        &self,
        event_ids: &[String],
    ) -> Result<HashSet<String>, StoreError> {
        let now = self.clock.now().timestamp();
        let mut unique: Vec<&String> = Vec::with_capacity(event_ids.len());
        let mut seen = HashSet::new();
        for id in event_ids {
            if seen.insert(id) {
                unique.push(id);
            }
        }
        let mut applied = HashSet::new();
        for chunk in unique.chunks(100) {
            let keys = chunk
                .iter()
                .map(|id| {
                    HashMap::from([
                        (PK.to_string(), s(&event_pk(id))),
                        (SK.to_string(), s(EVENT_SK)),
                    ])
                })
                .collect();
            let mut request = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .projection_expression("#pk, #exp")
                    .expression_attribute_names("#pk", PK)
                    .expression_attribute_names("#exp", EXPIRES_AT)
                    .build()
                    .map_err(|e| {
                        self.err_from(FailureKind::Invalid, "building a ledger read", e)
                    })?,
            );
            let mut round = 0;
            let mut waits = BACKOFF.delays();
            while let Some(keys) = request.take() {
                if round == MAX_BATCH_ROUNDS {
                    return Err(self.err(
                        FailureKind::Throttled,
                        "reading the ledger",
                        format_args!("keys still unprocessed after {MAX_BATCH_ROUNDS} rounds"),
                    ));
                }
                if round > 0 {
                    self.back_off(&mut waits).await;
                }
                round += 1;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, keys)
                    .send()
                    .await
                    .map_err(|e| self.sdk_err("reading the ledger", e))?;
                let items = out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default();
                for item in items {
                    let pk = req_s("(ledger item)", &item, PK)?;
                    let id = pk
                        .strip_prefix("EVENT#")
                        .ok_or_else(|| StoreError::Corrupt {
                            key: pk.to_string(),
                            message: "a ledger key without the EVENT# prefix".into(),
                        })?;
                    if req_n(pk, &item, EXPIRES_AT)? > now {
                        applied.insert(id.to_string());
                    }
                }
                request = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys().is_empty());
            }
        }
        Ok(applied)
    }

    pub(super) fn ledger_put(
        &self,
        update: &PoolUpdate,
        key: &str,
    ) -> Result<TransactWriteItem, StoreError> {
        let recorded = update.recorded_at.timestamp();
        let expires = ceil_secs(update.recorded_at + self.retention.ledger);
        let put = Put::builder()
            .table_name(&self.table)
            .item(PK, s(&event_pk(key)))
            .item(SK, s(EVENT_SK))
            .item(KIND, s(update.kind.as_str()))
            .item(RECORDED_AT, n(recorded))
            .item(EXPIRES_AT, n(expires))
            // An expired entry (not yet deleted by the TTL) no longer counts as applied.
            .condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":now", n(recorded))
            .build()
            .map_err(|e| self.err_from(FailureKind::Invalid, "building the ledger put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}
