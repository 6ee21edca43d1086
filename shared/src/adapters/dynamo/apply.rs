//! [`PoolStore::apply`](crate::ports::PoolStore::apply): one transaction of the ledger entries,
//! the pools' updates with their bets and the history items, sent again until its bets hold.

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use super::codec::*;
use super::expr::*;
use super::token::request_token;
use super::{BACKOFF, DynamoStore, MAX_CONFLICTS, MAX_KNOWN_POOLS};
use crate::domain::fold::{PoolDelta, pool_deltas, validate};
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolUpdate, counter_name};
use crate::ports::{FailureKind, StoreError};

/// What one transaction of an event's update writes, in the order of its items (and of their
/// cancellation reasons): the ledger keys, then the pools' deltas (with their partition keys).
#[derive(Clone, Copy)]
struct Written<'a> {
    keys: &'a [&'a str],
    deltas: &'a [PoolDelta],
    pks: &'a [String],
}

impl DynamoStore {
    /// Applies one event's update (see the module's documentation).
    pub(super) async fn transact(&self, update: &PoolUpdate) -> Result<Applied, StoreError> {
        let id = &update.event_id;
        let deltas = pool_deltas(update);
        let keys = update.ledger_keys();
        self.check_update(update, &deltas, &keys)?;
        let pks: Vec<String> = deltas.iter().map(|d| pool_pk(&d.pool)).collect();
        let writes: Vec<PoolWrite> = deltas
            .iter()
            .map(|d| PoolWrite::new(update, d, &self.retention))
            .collect();
        let max_lost_bets = 4 * deltas.len() + 1;
        let (mut conflicts, mut lost_bets) = (0, 0);
        let mut waits = BACKOFF.delays();
        while conflicts <= MAX_CONFLICTS && lost_bets <= max_lost_bets {
            let items = self.transaction(update, &keys, &deltas, &pks, &writes)?;
            let token = request_token(id, &items);
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .client_request_token(token)
                .send()
                .await;
            let error = match result {
                Ok(_) => {
                    self.remember(&pks, &writes);
                    return Ok(Applied::Applied);
                }
                Err(e) => e,
            };
            let reasons = match error.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                    c.cancellation_reasons().to_vec()
                }
                // The same transaction (same token) is still being applied: an SDK retry overtook
                // it. Sent again unchanged after a pause, it is answered as that one ended.
                Some(TransactWriteItemsError::TransactionInProgressException(_)) => {
                    conflicts += 1;
                    tracing::debug!(table = %self.table, event = %id, conflicts, "transaction in progress, backing off");
                    self.back_off(&mut waits).await;
                    continue;
                }
                _ => return Err(self.sdk_err(format_args!("applying event {id}"), error)),
            };
            let written = Written {
                keys: &keys,
                deltas: &deltas,
                pks: &pks,
            };
            match self.cancelled(id, &written, &reasons, &error).await? {
                Cancelled::Duplicate => return Ok(Applied::Duplicate),
                Cancelled::Again { conflict, lost } => {
                    lost_bets += lost;
                    if conflict {
                        conflicts += 1;
                        tracing::debug!(table = %self.table, event = %id, conflicts, "transaction conflict, backing off");
                        self.back_off(&mut waits).await;
                    }
                }
            }
        }
        Err(self.err(
            FailureKind::Contention,
            format_args!("applying event {id}"),
            format_args!(
                "gave up after {conflicts} transactions cancelled by conflicts with concurrent \
                 writers and {lost_bets} by pools changing under the update"
            ),
        ))
    }

    fn pool_update(
        &self,
        update: &PoolUpdate,
        delta: &PoolDelta,
        bets: Bets,
    ) -> Result<TransactWriteItem, StoreError> {
        let plan = PoolWrite::new(update, delta, &self.retention);
        let mut e = Expr::default();
        let pool = delta.pool.to_string();
        let mut set = vec![];
        for (attr, value) in [
            ("pool", pool.as_str()),
            ("capacity_type", delta.pool.capacity_type.as_str()),
            ("instance_type", &delta.pool.instance_type),
            ("zone", &delta.pool.zone),
        ]
        .into_iter()
        .chain(update.region.as_deref().map(|r| ("region", r)))
        {
            set.push(format!("{} = {}", e.name(attr), e.value(attr, s(value))));
        }
        // A won field is set, a lost one only where there is none.
        let assign = |name: &str, value: &str, win: bool| match win {
            true => format!("{name} = {value}"),
            false => format!("{name} = if_not_exists({name}, {value})"),
        };
        let mut conditions = Vec::new();
        let mut field = |e: &mut Expr, attr, placeholder, value, win, op: &str| {
            let (name, value) = (e.name(attr), e.value(placeholder, n(value)));
            conditions.push(format!(
                "(attribute_not_exists({name}) OR {name} {op} {value})"
            ));
            set.push(assign(&name, &value, win));
        };
        if let Some(until) = plan.until {
            let op = if bets.until { "<=" } else { ">=" };
            field(&mut e, "unavailable_until", "until", until, bets.until, op);
        }
        let op = if bets.last { "<=" } else { ">" };
        field(&mut e, "last_seen", "t", plan.time, bets.last, op);
        let op = if bets.first { ">=" } else { "<=" };
        field(&mut e, "first_seen", "t", plan.time, bets.first, op);
        let op = if bets.expires { "<=" } else { ">=" };
        field(&mut e, "expires_at", "exp", plan.expires, bets.expires, op);
        for (attr, placeholder, value) in [
            ("last_event_id", "eid", update.event_id.as_str()),
            ("last_reason", "reason", update.reason.as_str()),
            ("last_instance_id", "iid", delta.instance_id.as_str()),
        ] {
            let (name, value) = (e.name(attr), e.value(placeholder, s(value)));
            set.push(assign(&name, &value, bets.last));
        }
        let counter = e.name(counter_name(update.kind));
        let count = e.value("n", AttributeValue::N(delta.count.to_string()));
        let expression = format!("SET {} ADD {counter} {count}", set.join(", "));
        let up = Update::builder()
            .table_name(&self.table)
            .set_key(Some(item_key(&pool_pk(&delta.pool), POOL_SK)))
            .update_expression(expression)
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| {
                self.err_from(
                    FailureKind::Invalid,
                    format_args!("building the update of pool {}", delta.pool),
                    e,
                )
            })?;
        Ok(TransactWriteItem::builder().update(up).build())
    }

    /// What to do about one pool whose condition failed: learn the item as it is.
    async fn observe(
        &self,
        delta: &PoolDelta,
        reason: &CancellationReason,
    ) -> Result<Known, StoreError> {
        let pk = pool_pk(&delta.pool);
        match reason.item() {
            Some(item) => from_item(&pk, item),
            // A service that does not return the item on a failed condition: read it.
            None => match self.get(&pk, POOL_SK, format!("reading item {pk}")).await? {
                Some(item) => from_item(&pk, &item),
                None => Ok(Known::default()),
            },
        }
    }
}

/// What a cancelled transaction of [`DynamoStore::apply`] says to do next.
enum Cancelled {
    /// A ledger key was there already: the event was applied before.
    Duplicate,
    /// Send it again: after a backoff when a writer conflicted, at once when only bets were
    /// lost (`lost` of them, each now corrected from the pool's current item).
    Again { conflict: bool, lost: usize },
}

impl DynamoStore {
    /// One transaction holds at most 100 items, and the update must be well formed.
    fn check_update(
        &self,
        update: &PoolUpdate,
        deltas: &[PoolDelta],
        keys: &[&str],
    ) -> Result<(), StoreError> {
        let id = &update.event_id;
        if deltas.len() + keys.len() + update.marks.len() > 100 {
            return Err(self.err(
                FailureKind::Invalid,
                format_args!("applying event {id}"),
                format_args!(
                    "it marks {} pools ({} marks) with {} ledger keys, but one transaction holds \
                     at most 100 items: the ledger entries, the pools and their history entries",
                    deltas.len(),
                    update.marks.len(),
                    keys.len()
                ),
            ));
        }
        validate(update).map_err(|m| {
            self.err_from(FailureKind::Invalid, format_args!("applying event {id}"), m)
        })
    }

    /// The items of one attempt: the ledger entries, then each pool's update with this store's
    /// bets on which of its fields the event's values win.
    pub(super) fn transaction(
        &self,
        update: &PoolUpdate,
        keys: &[&str],
        deltas: &[PoolDelta],
        pks: &[String],
        writes: &[PoolWrite],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let bets: Vec<Bets> = {
            let known = self.known();
            pks.iter()
                .zip(writes)
                .map(|(pk, w)| Known::bets(known.get(pk), w))
                .collect()
        };
        let mut items = keys
            .iter()
            .map(|k| self.ledger_put(update, k))
            .collect::<Result<Vec<_>, _>>()?;
        for (delta, bets) in deltas.iter().zip(&bets) {
            items.push(self.pool_update(update, delta, *bets)?);
        }
        // Last, so the cancellation reasons of the items above keep their places.
        for entry in HistoryEntry::of(update, &self.retention) {
            items.push(self.history_put(&entry)?);
        }
        Ok(items)
    }

    /// The history item of `entry` (no index holds it: it has none of their sort keys).
    pub(super) fn history_put(
        &self,
        entry: &HistoryEntry,
    ) -> Result<TransactWriteItem, StoreError> {
        let item = history_item(entry)
            .map_err(|e| self.err_from(FailureKind::Invalid, "encoding a history item", e))?;
        let put = (Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .build())
        .map_err(|e| self.err_from(FailureKind::Invalid, "building a history put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Remembers what an applied transaction wrote, to place the next bets.
    fn remember(&self, pks: &[String], writes: &[PoolWrite]) {
        let mut known = self.known();
        if known.len() + pks.len() > MAX_KNOWN_POOLS {
            known.clear();
        }
        for (pk, w) in pks.iter().zip(writes) {
            let k = known.get(pk).copied().unwrap_or_default().after(w);
            known.insert(pk.clone(), k);
        }
    }

    /// Reads the cancellation reasons of one attempt, item by item (the ledger entries first,
    /// then the pools): a ledger key already there is a duplicate; a pool whose condition
    /// failed lost a bet (what is known of it is read again); a conflict or throttling is
    /// retried; anything else is an error, and so is a cancellation with no reason to retry.
    async fn cancelled(
        &self,
        id: &str,
        written: &Written<'_>,
        reasons: &[CancellationReason],
        error: &(dyn std::error::Error + Send + Sync + 'static),
    ) -> Result<Cancelled, StoreError> {
        let Written { keys, deltas, pks } = *written;
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        let refusal = |c: &str, what: String, i: usize| {
            let why = format!("{what} was refused: {c}: {}", message(reasons, i));
            self.err(refused(c), format_args!("applying event {id}"), why)
        };
        let ledger = keys.len();
        let mut conflict = false;
        for (k, key) in keys.iter().enumerate() {
            match code(k) {
                "ConditionalCheckFailed" => return Ok(Cancelled::Duplicate),
                "None" => {}
                c if retryable(c) => conflict = true,
                c => return Err(refusal(c, format!("the ledger put of {key}"), k)),
            }
        }
        let mut lost = 0;
        for (i, delta) in deltas.iter().enumerate() {
            match code(ledger + i) {
                "None" => {}
                "ConditionalCheckFailed" => {
                    let Some(reason) = reasons.get(ledger + i) else {
                        continue;
                    };
                    lost += 1;
                    let seen = self.observe(delta, reason).await?;
                    tracing::debug!(
                        table = %self.table, event = %id, pool = %delta.pool,
                        "pool changed under the bet, sending the event again"
                    );
                    self.known().insert(pks[i].clone(), seen);
                }
                c if retryable(c) => conflict = true,
                c => {
                    let what = format!("the update of pool {}", delta.pool);
                    return Err(refusal(c, what, ledger + i));
                }
            }
        }
        if !conflict && lost == 0 {
            return Err(self.err(
                FailureKind::Unknown,
                format_args!("applying event {id}"),
                format_args!(
                    "the transaction was cancelled without a reason to retry it: {}",
                    DisplayErrorContext(error)
                ),
            ));
        }
        Ok(Cancelled::Again { conflict, lost })
    }
}

/// The kind of a cancellation code not worth another transaction (`ValidationError`,
/// `ItemCollectionSizeLimitExceeded`, ...): what its code says, else invalid.
fn refused(code: &str) -> FailureKind {
    crate::adapters::aws::kind_of_code(code).unwrap_or(FailureKind::Invalid)
}

/// Cancellation codes worth another transaction after a pause.
fn retryable(code: &str) -> bool {
    matches!(
        code,
        "TransactionConflict"
            | "ThrottlingError"
            | "ProvisionedThroughputExceeded"
            | "RequestLimitExceeded"
    )
}

fn message(reasons: &[CancellationReason], i: usize) -> &str {
    reasons
        .get(i)
        .and_then(|r| r.message())
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::testing::{store, update};
    use crate::ports::PoolStore;

    #[test]
    fn the_update_of_a_pool_counts_atomically_and_bets_in_its_condition() {
        let store = store();
        let u = update(1);
        let delta = &pool_deltas(&u)[0];
        let win = Known::bets(None, &PoolWrite::new(&u, delta, &store.retention));
        let item = store.pool_update(&u, delta, win).unwrap();
        let up = item.update().unwrap();
        let expr = up.update_expression();
        assert!(expr.ends_with("ADD #interruptions :n"), "{expr}");
        assert!(expr.contains("#unavailable_until = :until"), "{expr}");
        assert!(expr.contains("#last_event_id = :eid"), "{expr}");
        assert!(
            expr.contains("#first_seen = if_not_exists(#first_seen, :t)"),
            "{expr}"
        );
        let cond = up.condition_expression().unwrap();
        assert!(
            cond.contains("(attribute_not_exists(#last_seen) OR #last_seen <= :t)"),
            "{cond}"
        );
        assert!(
            cond.contains(
                "(attribute_not_exists(#unavailable_until) OR #unavailable_until <= :until)"
            ),
            "{cond}"
        );
        // Every placeholder is used (DynamoDB rejects unused ones) and vice versa.
        let text = format!("{expr} {cond}");
        for name in up.expression_attribute_names().unwrap().keys() {
            assert!(text.contains(name.as_str()), "{name} unused");
        }
        for value in up.expression_attribute_values().unwrap().keys() {
            assert!(text.contains(value.as_str()), "{value} unused");
        }
        assert_eq!(
            up.return_values_on_condition_check_failure(),
            Some(&ReturnValuesOnConditionCheckFailure::AllOld)
        );

        let lose = Bets {
            until: false,
            last: false,
            first: true,
            expires: false,
        };
        let item = store.pool_update(&u, delta, lose).unwrap();
        let up = item.update().unwrap();
        let expr = up.update_expression();
        assert!(
            expr.contains("#last_event_id = if_not_exists(#last_event_id, :eid)"),
            "{expr}"
        );
        assert!(expr.contains("#first_seen = :t"), "{expr}");
        let cond = up.condition_expression().unwrap();
        assert!(
            cond.contains("(attribute_not_exists(#last_seen) OR #last_seen > :t)"),
            "{cond}"
        );
    }

    #[tokio::test]
    async fn more_pools_than_a_transaction_holds_is_an_error_naming_the_count() {
        let err = store().apply(&update(100)).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("100 pools") && msg.contains("dynamodb table t"),
            "{msg}"
        );
    }
}
