//! The `ClientRequestToken` of a transaction: the same for the same transaction only.

use sha2::{Digest, Sha256};

/// The `ClientRequestToken` of a transaction (at most 36 characters, as DynamoDB takes): `fw-`
/// and 128 bits of the SHA-256 of what makes it, `parts` (the table, the update, the retention
/// and the bets), in their `Debug` form (which holds no map of random order). The same
/// transaction gets the same token in this process (the SDK's retry of a request whose answer
/// was lost, the store's own after `TransactionInProgressException`), another transaction
/// (other bets, another event, another `recorded_at`) another one.
pub(super) fn request_token(parts: &impl std::fmt::Debug) -> String {
    let digest = Sha256::digest(format!("{parts:?}"));
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("fw-{hex}")
}

#[cfg(test)]
mod tests {
    use crate::adapters::dynamo::DynamoStore;
    use crate::adapters::dynamo::expr::{Known, PoolWrite};
    use crate::adapters::dynamo::testing::{at, store, update};
    use crate::domain::pool::PoolUpdate;

    #[test]
    fn the_request_token_is_the_same_for_the_same_transaction_only() {
        let store = store();
        let u = update(3);
        let keys = u.ledger_keys();
        let pools = PoolWrite::of(&u, &store.retention);
        let token = |store: &DynamoStore, u: &PoolUpdate| {
            let (items, token) = store.transaction(u, &keys, &pools).unwrap();
            assert_eq!(items.len(), 1 + 3 + 3);
            token
        };
        let first = token(&store, &u);
        // DynamoDB takes 1 to 36 characters.
        assert_eq!(first.len(), 35, "{first}");
        assert!(first.starts_with("fw-") && first[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        // The same transaction built again: the same token, as for the SDK's retry of a request
        // whose answer was lost.
        for _ in 0..5 {
            assert_eq!(token(&store, &u), first);
        }
        // Another event id: another token.
        let other = PoolUpdate {
            event_id: "e-2".into(),
            ..u.clone()
        };
        assert_ne!(token(&store, &other), first);
        // The transaction sent again after a lost bet (another condition): another token.
        let known = Known {
            until: Some(i64::MAX),
            last_seen: Some(i64::MAX),
            first_seen: Some(0),
            expires_at: Some(i64::MAX),
        };
        store.known().insert(pools[0].pk.clone(), known);
        assert_ne!(token(&store, &u), first);
        // The same event recorded at another time (a redelivery): another token.
        let fresh = DynamoStore::new(store.client.clone(), "t");
        assert_eq!(token(&fresh, &u), first);
        let later = PoolUpdate {
            recorded_at: at(2),
            ..u.clone()
        };
        assert_ne!(token(&fresh, &later), first);
        // Another table: another token.
        let other = DynamoStore::new(store.client.clone(), "t2");
        assert_ne!(token(&other, &u), first);
    }
}
