//! The idempotence ledger: which events were applied already, and the put that records one.

use std::collections::HashSet;

use aws_sdk_dynamodb::types::{KeysAndAttributes, Put, TransactWriteItem};

use super::codec::*;
use super::expr::Expr;
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
        let keys = unique
            .iter()
            .map(|id| item_key(&event_pk(id), EVENT_SK))
            .collect();
        let mut applied = HashSet::new();
        let read = self.batch_get(keys, &["pk", "expires_at"], "reading the ledger");
        for item in read.await? {
            let entry: LedgerItem = from_item(text(&item, "pk").unwrap_or("(ledger item)"), &item)?;
            let id = (entry.pk.strip_prefix("EVENT#"))
                .ok_or_else(|| corrupt(&entry.pk, "a ledger key without the EVENT# prefix"))?;
            if entry.expires_at > now {
                applied.insert(id.to_string());
            }
        }
        Ok(applied)
    }

    /// The items of `keys` that are there: strongly consistent `BatchGetItem`s of 100 keys,
    /// their unprocessed keys asked again (at most [`MAX_BATCH_ROUNDS`] rounds a call), only the
    /// attributes `project` names (every one when empty); `what` names the read in errors.
    pub(super) async fn batch_get(
        &self,
        keys: Vec<Item>,
        project: &[&str],
        what: &str,
    ) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(100) {
            let mut request = KeysAndAttributes::builder()
                .set_keys(Some(chunk.to_vec()))
                .consistent_read(true);
            if !project.is_empty() {
                let mut e = Expr::default();
                request = request.projection_expression(e.projection(project));
                request = request.set_expression_attribute_names(Some(e.names));
            }
            let mut request = Some(request.build().map_err(|e| {
                self.err_from(
                    FailureKind::Invalid,
                    format_args!("building a read ({what})"),
                    e,
                )
            })?);
            let mut round = 0;
            let mut waits = BACKOFF.delays();
            while let Some(keys) = request.take() {
                if round == MAX_BATCH_ROUNDS {
                    return Err(self.err(
                        FailureKind::Throttled,
                        what,
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
                    .map_err(|e| self.sdk_err(what, e))?;
                found.extend(
                    out.responses
                        .and_then(|mut r| r.remove(&self.table))
                        .unwrap_or_default(),
                );
                request = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys().is_empty());
            }
        }
        Ok(found)
    }

    pub(super) fn ledger_put(
        &self,
        update: &PoolUpdate,
        key: &str,
    ) -> Result<TransactWriteItem, StoreError> {
        let recorded = update.recorded_at.timestamp();
        let item = to_item(LedgerItem {
            pk: event_pk(key),
            sk: EVENT_SK,
            kind: update.kind.as_str(),
            recorded_at: recorded,
            expires_at: ceil_secs(update.recorded_at + self.retention.ledger),
        });
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item.map_err(|e| {
                self.err_from(FailureKind::Invalid, "encoding a ledger item", e)
            })?))
            // An expired entry (not yet deleted by the TTL) no longer counts as applied.
            .condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#exp", "expires_at")
            .expression_attribute_values(":now", n(recorded))
            .build()
            .map_err(|e| self.err_from(FailureKind::Invalid, "building the ledger put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}
