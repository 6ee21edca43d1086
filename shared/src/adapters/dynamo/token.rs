//! The `ClientRequestToken` of a transaction: the same for the same transaction only.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::TransactWriteItem;
use sha2::{Digest, Sha256};

/// The `ClientRequestToken` of a transaction of event `event_id` (at most 36 characters, as
/// DynamoDB takes): `fw-` and 128 bits of the SHA-256 of the event id and the items in a
/// canonical form (every map in key order). The same transaction gets the same token, another
/// transaction (other bets, another event, another `recorded_at`) another one.
pub fn request_token(event_id: &str, items: &[TransactWriteItem]) -> String {
    let mut canonical = String::new();
    canonical.push_str(&format!("{event_id:?}\n"));
    for item in items {
        canonical.push_str(&canonical_item(item));
        canonical.push('\n');
    }
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("fw-{hex}")
}

/// One item of a transaction as text, with its maps sorted (a `HashMap`'s order is random).
fn canonical_item(item: &TransactWriteItem) -> String {
    fn map<V: std::fmt::Debug>(m: Option<&HashMap<String, V>>) -> String {
        let mut entries: Vec<String> = m
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k:?}:{v:?}"))
            .collect();
        entries.sort();
        format!("{{{}}}", entries.join(","))
    }
    if let Some(p) = item.put() {
        format!(
            "put {:?} {} {:?} {} {} {:?}",
            p.table_name(),
            map(Some(p.item())),
            p.condition_expression(),
            map(p.expression_attribute_names()),
            map(p.expression_attribute_values()),
            p.return_values_on_condition_check_failure(),
        )
    } else if let Some(u) = item.update() {
        format!(
            "update {:?} {} {:?} {:?} {} {} {:?}",
            u.table_name(),
            map(Some(u.key())),
            u.update_expression(),
            u.condition_expression(),
            map(u.expression_attribute_names()),
            map(u.expression_attribute_values()),
            u.return_values_on_condition_check_failure(),
        )
    } else {
        // This store writes puts and updates only; anything else in its plain form.
        format!("{item:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::dynamo::DynamoStore;
    use crate::adapters::dynamo::codec::pool_pk;
    use crate::adapters::dynamo::expr::{Known, PoolWrite};
    use crate::adapters::dynamo::testing::{at, store, update};
    use crate::domain::fold::pool_deltas;

    #[test]
    fn the_request_token_is_the_same_for_the_same_transaction_only() {
        let store = store();
        let u = update(3);
        let keys = u.ledger_keys();
        let deltas = pool_deltas(&u);
        let pks: Vec<String> = deltas.iter().map(|d| pool_pk(&d.pool)).collect();
        let writes: Vec<PoolWrite> = deltas
            .iter()
            .map(|d| PoolWrite::new(&u, d, &store.retention))
            .collect();
        let items = |store: &DynamoStore| {
            store
                .transaction(&u, &keys, &deltas, &pks, &writes)
                .unwrap()
        };
        let token = request_token(&u.event_id, &items(&store));
        // DynamoDB takes 1 to 36 characters.
        assert_eq!(token.len(), 35, "{token}");
        assert!(token.starts_with("fw-") && token[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        // The same transaction built again (every map a new `HashMap`, in another order): the
        // same token, as for the SDK's retry of a request whose answer was lost.
        for _ in 0..5 {
            assert_eq!(request_token(&u.event_id, &items(&store)), token);
        }
        // Another event id: another token.
        assert_ne!(request_token("e-2", &items(&store)), token);
        // The transaction sent again after a lost bet (another condition): another token.
        store.known().insert(
            pks[0].clone(),
            Known {
                until: Some(i64::MAX),
                last_seen: Some(i64::MAX),
                first_seen: Some(0),
                expires_at: Some(i64::MAX),
            },
        );
        let changed = items(&store);
        assert_ne!(request_token(&u.event_id, &changed), token);
        // The same event recorded at another time (a redelivery): another token.
        let mut later = u.clone();
        later.recorded_at = at(2);
        let later_items = DynamoStore::new(store.client.clone(), "t")
            .transaction(&later, &keys, &deltas, &pks, &writes)
            .unwrap();
        assert_ne!(request_token(&u.event_id, &later_items), token);
        // Another table: another token.
        let other = DynamoStore::new(store.client.clone(), "t2");
        assert_ne!(request_token(&u.event_id, &items(&other)), token);
    }
}
