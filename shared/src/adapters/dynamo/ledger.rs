//! The idempotence ledger: the batch reads of its items, and the put that records one.

use aws_sdk_dynamodb::types::{KeysAndAttributes, TransactWriteItem};
use backon::BackoffBuilder;
use chrono::{DateTime, Utc};

use super::codec::*;
use super::{BACKOFF, DynamoStore, MAX_BATCH_ROUNDS};
use crate::domain::event::EventKind;
use crate::domain::pool::Retention;
use crate::ports::{FailureKind, PortError};

impl DynamoStore {
    /// The items of `keys` that are there: strongly consistent `BatchGetItem`s of 100 keys,
    /// their unprocessed keys asked again (at most [`MAX_BATCH_ROUNDS`] rounds a call); `what`
    /// names the read in errors.
    pub(super) async fn batch_get(
        &self,
        keys: Vec<Item>,
        what: &str,
    ) -> Result<Vec<Item>, PortError> {
        let mut found: Vec<Vec<Item>> = Vec::new();
        for chunk in keys.chunks(100) {
            let (mut left, mut waits) = (chunk.to_vec(), BACKOFF.build());
            for round in 1.. {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(left))
                    .consistent_read(true)
                    .build()
                    .map_err(self.invalid(what))?;
                let read = self.client.batch_get_item();
                let out = read.request_items(&self.table, request).send().await;
                let out = out.map_err(|e| self.sdk_err(what, e))?;
                found.extend(out.responses.and_then(|mut r| r.remove(&self.table)));
                let unprocessed = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table));
                left = unprocessed.map(|k| k.keys).unwrap_or_default();
                if left.is_empty() {
                    break;
                }
                if round == MAX_BATCH_ROUNDS {
                    let why = format!("keys still unprocessed after {MAX_BATCH_ROUNDS} rounds");
                    return Err(self.fail(FailureKind::Throttled, what, why));
                }
                self.back_off(&mut waits).await;
            }
        }
        Ok(found.concat())
    }

    pub(super) fn ledger_put(
        &self,
        kind: EventKind,
        at: DateTime<Utc>,
        key: &str,
    ) -> Result<TransactWriteItem, PortError> {
        let recorded = at.timestamp();
        let attributes = LedgerItem {
            kind: kind.as_str(),
            recorded_at: recorded,
            expires_at: ceil_secs(at + Retention::default().ledger),
        };
        let item = (item_key(&event_pk(key), EVENT_SK), attributes);
        // An expired entry (not yet deleted by the TTL) no longer counts as applied.
        self.put("the ledger put", item, |put| {
            put.condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_names("#exp", "expires_at")
                .expression_attribute_values(":now", n(recorded))
        })
    }
}
