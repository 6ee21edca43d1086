//! The transaction of [`PoolStore::apply`](crate::ports::PoolStore::apply) (which sends it again
//! until its bets hold): the ledger entries, the pools' updates with their bets and the history
//! items; what its cancellation reasons say; what is remembered once it went through.

use aws_sdk_dynamodb::types::builders::PutBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::codec::*;
use super::expr::*;
use super::{DynamoStore, MAX_KNOWN_POOLS};
use crate::adapters::accounts::lock;
use crate::adapters::aws::kind_of_code;
use crate::domain::fold::fold;
use crate::domain::plan::Plan;
use crate::domain::pool::{HistoryEntry, Retention, counter_name};
use crate::ports::{FailureKind, PortError};

impl DynamoStore {
    /// The items of one attempt, and its token: the ledger entries, then each pool's update with
    /// this store's bets on which of its fields the event's values win, then the history items
    /// (last, so that the cancellation reasons of the items above keep their places).
    pub(super) fn transaction(
        &self,
        plan: &Plan,
        at: DateTime<Utc>,
        keys: &[&str],
        pools: &[HistoryEntry],
    ) -> Result<(Vec<TransactWriteItem>, String), PortError> {
        let bets: Vec<Bets> = {
            let known = lock(&self.known);
            pools
                .iter()
                .map(|w| Bets::on(known.get(&w.pool), w))
                .collect()
        };
        let token = request_token(&(&self.table, plan, at, Retention::default(), &bets));
        let ledger = keys.iter().map(|k| self.ledger_put(plan.kind, at, k));
        let updates = (pools.iter().zip(bets)).map(|(w, bets)| self.pool_update(plan, w, bets));
        // No index holds a history item: it has none of their sort keys.
        let history = (pools.iter()).map(|e| self.put("a history item", history_item(e), |p| p));
        let items = ledger.chain(updates).chain(history);
        Ok((items.collect::<Result<_, _>>()?, token))
    }

    /// The update of one pool: its counter by an atomic `ADD`; each other field `SET` where
    /// `bets` say the event's value wins, else only where there is none; the bets its condition.
    fn pool_update(
        &self,
        plan: &Plan,
        w: &HistoryEntry,
        bets: Bets,
    ) -> Result<TransactWriteItem, PortError> {
        let (mut e, pool, (time, until, expires)) = (Expr::default(), &w.pool, secs(w));
        let name = pool.to_string();
        let texts = [
            ("pool", name.as_str()),
            ("capacity_type", pool.capacity_type.as_str()),
            ("instance_type", &pool.instance_type),
            ("zone", &pool.zone),
        ];
        let region = plan.region.as_deref().map(|r| ("region", r));
        let texts = texts.into_iter().chain(region);
        let mut set: Vec<String> = texts.map(|(attr, v)| e.is(attr, s(v))).collect();
        let assign = |name: &str, value: &str, win: bool| match win {
            true => format!("{name} = {value}"),
            false => format!("{name} = if_not_exists({name}, {value})"),
        };
        let t = e.value("t", n(time));
        let until = until.map(|u| e.value("until", n(u)));
        let exp = e.value("exp", n(expires));
        // Each number, its value, its bet, and the comparison that holds when the bet is won
        // and when it is lost.
        let numbers = [
            ("unavailable_until", until, bets.until, "<=", ">="),
            ("last_seen", Some(t.clone()), bets.last, "<=", ">"),
            ("first_seen", Some(t), bets.first, ">=", "<="),
            ("expires_at", Some(exp), bets.expires, "<=", ">="),
        ];
        let mut conditions = Vec::new();
        for (attr, value, win, won, lost) in numbers {
            let Some(value) = value else { continue };
            let name = e.name(attr);
            let op = if win { won } else { lost };
            conditions.push(format!(
                "(attribute_not_exists({name}) OR {name} {op} {value})"
            ));
            set.push(assign(&name, &value, win));
        }
        for (attr, placeholder, value) in [
            ("last_event_id", "eid", plan.event_id.as_str()),
            ("last_reason", "reason", &plan.summary),
            ("last_instance_id", "iid", &w.instance_id),
        ] {
            let (name, value) = (e.name(attr), e.value(placeholder, s(value)));
            set.push(assign(&name, &value, bets.last));
        }
        let counter = e.name(counter_name(plan.kind));
        let count = e.value("n", AttributeValue::N("1".into()));
        let what = format!("building the update of pool {pool}");
        let up = Update::builder()
            .table_name(&self.table)
            .set_key(Some(item_key(&pool_pk(pool), POOL_SK)))
            .update_expression(format!("SET {} ADD {counter} {count}", set.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(self.invalid(&what))?;
        Ok(TransactWriteItem::builder().update(up).build())
    }

    /// A transaction's put of the item of key `key` and attributes `item` (`what` names it in
    /// errors), set further by `put`.
    pub(super) fn put(
        &self,
        what: &str,
        (key, item): (Item, impl Serialize),
        put: impl FnOnce(PutBuilder) -> PutBuilder,
    ) -> Result<TransactWriteItem, PortError> {
        let mut item = to_item(item).map_err(self.invalid(what))?;
        item.extend(key);
        let put = put(Put::builder().table_name(&self.table).set_item(Some(item)));
        let put = put.build().map_err(self.invalid(what))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Remembers what an applied transaction wrote, folded into what was seen before, to place
    /// the next bets.
    pub(super) fn remember(&self, plan: &Plan) {
        let mut known = lock(&self.known);
        if known.len() + plan.pools.len() > MAX_KNOWN_POOLS {
            known.clear();
        }
        for mark in &plan.pools {
            let seen = fold(known.remove(&mark.pool), plan, mark, &Retention::default());
            known.insert(mark.pool.clone(), seen);
        }
    }

    /// Reads the cancellation reasons of one attempt, item by item (the ledger entries first,
    /// then the pools): `None` when a ledger key was there already (the event was applied
    /// before); else whether a writer conflicted (or throttled: worth another transaction after
    /// a pause) and how many bets were lost (each pool whose condition failed is learnt again
    /// from its item). Any other refusal is an error.
    pub(super) async fn cancelled(
        &self,
        keys: &[&str],
        pools: &[HistoryEntry],
        reasons: &[CancellationReason],
        what: &str,
    ) -> Result<Option<(bool, usize)>, PortError> {
        let ledger = keys
            .iter()
            .map(|k| (format!("the ledger put of {k}"), None));
        let pool = pools
            .iter()
            .map(|w| (format!("the update of pool {}", w.pool), Some(w)));
        let written = ledger.chain(pool);
        let (mut conflict, mut lost) = (false, 0);
        for (reason, (name, pool)) in reasons.iter().zip(written) {
            match (reason.code().unwrap_or("None"), pool) {
                ("None", _) => {}
                ("ConditionalCheckFailed", None) => return Ok(None),
                ("ConditionalCheckFailed", Some(w)) => {
                    let (pk, pool) = (pool_pk(&w.pool), &w.pool);
                    lost += 1;
                    // The pool as it is; a service that does not return it: read.
                    let item = match reason.item() {
                        Some(item) => Some(item.clone()),
                        None => self.get(&pk, POOL_SK, format!("reading item {pk}")).await?,
                    };
                    if let Some(item) = item {
                        lock(&self.known).insert(pool.clone(), decode_pool(&item)?);
                    }
                    tracing::debug!(table = %self.table, pool = %pool, "{what}: pool changed under the bet, sending the event again");
                }
                // Worth another transaction after a pause.
                (
                    "TransactionConflict"
                    | "ThrottlingError"
                    | "ProvisionedThroughputExceeded"
                    | "RequestLimitExceeded",
                    _,
                ) => conflict = true,
                // Not worth another (`ValidationError`, `ItemCollectionSizeLimitExceeded`, ...):
                // of the kind its code says, else invalid.
                (c, _) => {
                    let said = reason.message().unwrap_or("no message");
                    let why = format!("{name} was refused: {c}: {said}");
                    let kind = kind_of_code(c).unwrap_or(FailureKind::Invalid);
                    return Err(self.fail(kind, what, why));
                }
            }
        }
        Ok(Some((conflict, lost)))
    }
}

/// The `ClientRequestToken` of a transaction (at most 36 characters, as DynamoDB takes): `fw-`
/// and 128 bits of the SHA-256 of what makes it, `parts` (the table, the update, the retention
/// and the bets), in their `Debug` form (which holds no map of random order). The same
/// transaction gets the same token in this process (the SDK's retry of a request whose answer
/// was lost, the store's own after `TransactionInProgressException`), another transaction
/// (other bets, another event, another `recorded_at`) another one.
fn request_token(parts: &impl std::fmt::Debug) -> String {
    let digest = Sha256::digest(format!("{parts:?}"));
    format!("fw-{}", hex::encode(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::testing::{at, store, update};
    use crate::domain::fold::history;
    use crate::ports::PoolStore;

    #[test]
    fn the_update_of_a_pool_counts_atomically_and_bets_in_its_condition() {
        let store = store();
        let u = update(1);
        let write = &history(&u, &Retention::default())[0];
        let win = Bets::on(None, write);
        let item = store.pool_update(&u, write, win).unwrap();
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
        let item = store.pool_update(&u, write, lose).unwrap();
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
        let err = store().apply(&update(100), at(1)).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("100 pools") && msg.contains("dynamodb table t"),
            "{msg}"
        );
    }

    #[test]
    fn the_request_token_is_the_same_for_the_same_transaction_only() {
        let store = store();
        let u = update(3);
        let keys = u.ledger_keys();
        let pools = history(&u, &Retention::default());
        let token = |store: &DynamoStore, u: &Plan, recorded_at| {
            let (items, token) = store.transaction(u, recorded_at, &keys, &pools).unwrap();
            assert_eq!(items.len(), 1 + 3 + 3);
            token
        };
        let first = token(&store, &u, at(1));
        // DynamoDB takes 1 to 36 characters.
        assert_eq!(first.len(), 35, "{first}");
        assert!(first.starts_with("fw-") && first[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        // The same transaction built again: the same token, as for the SDK's retry of a request
        // whose answer was lost.
        for _ in 0..5 {
            assert_eq!(token(&store, &u, at(1)), first);
        }
        // Another event id: another token.
        let other = Plan {
            event_id: "e-2".into(),
            ..u.clone()
        };
        assert_ne!(token(&store, &other, at(1)), first);
        // The transaction sent again after a lost bet (another condition): another token.
        // (What a later event on the first pool wrote, remembered: this one loses its last.)
        let later = Plan {
            time: u.time + chrono::Duration::hours(1),
            ..u.clone()
        };
        store.remember(&later);
        let lost = Bets {
            until: true,
            last: false,
            first: true,
            expires: false,
        };
        assert_eq!(
            Bets::on(lock(&store.known).get(&pools[0].pool), &pools[0]),
            lost
        );
        assert_ne!(token(&store, &u, at(1)), first);
        // The same event recorded at another time (a redelivery): another token.
        let fresh = DynamoStore::new(store.client.clone(), "t");
        assert_eq!(token(&fresh, &u, at(1)), first);
        assert_ne!(token(&fresh, &u, at(2)), first);
        // Another table: another token.
        let other = DynamoStore::new(store.client.clone(), "t2");
        assert_ne!(token(&other, &u, at(1)), first);
    }
}
