//! The pool store contract (`forewarn_tests::contract`) against both stores: the embedded store
//! in a temporary directory, and the DynamoDB store on moto with a table created from
//! `infra/pool-table.yaml`. Then what only the DynamoDB store has: the item layout, the round
//! trips, the transaction size limit. One moto server serves the whole binary; each test gets its
//! own table.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Duration;
use forewarn::adapters::dynamo::DynamoStore;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::domain::pool::{Applied, PoolQuery, Retention};
use forewarn::ports::{Corrupt, PoolStore};
use forewarn_tests::contract::{Subject, event, mark, now, recorded, spot};
use forewarn_tests::moto;

fn run_embedded<F, Fut>(case: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path()).expect("opening the embedded store");
    let subject = Subject {
        other: Arc::new(store.clone()),
        store: Arc::new(store),
    };
    moto::runtime().block_on(case(subject));
}

/// A fresh pool table on the shared moto server.
async fn table() -> (aws_sdk_dynamodb::Client, String) {
    let config = moto::shared().sdk_config();
    let table = moto::create_pool_table(&config, &moto::unique_name("pools"))
        .await
        .unwrap_or_else(|e| panic!("creating the pool table on moto: {e:#}"));
    (aws_sdk_dynamodb::Client::new(&config), table)
}

/// Two handles of a fresh table, their continuation keys in its secret (as generated).
fn run_dynamo<F, Fut>(case: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    moto::runtime().block_on(async {
        let config = moto::shared().sdk_config();
        let (_, table) = table().await;
        let subject = Subject {
            store: Arc::new(moto::keyed_store(
                &config,
                &table,
                &moto::key_secret_of(&table),
            )),
            other: Arc::new(moto::keyed_store(
                &config,
                &table,
                &moto::key_secret_of(&table),
            )),
        };
        case(subject).await;
    });
}

macro_rules! contract_cases {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(#[test] fn $case() { super::run_embedded(forewarn_tests::contract::$case) })*
        }
        mod dynamodb {
            $(#[test] fn $case() { super::run_dynamo(forewarn_tests::contract::$case) })*
        }
    };
}

contract_cases!(
    first_write_creates_the_pool,
    duplicate_event_changes_nothing,
    two_events_count_twice_and_the_newer_is_last,
    each_kind_has_its_counter,
    late_event_never_shortens_nor_overwrites,
    concurrent_increments_are_never_lost,
    expiry_filtering,
    queries_by_zone_and_instance_type,
    applied_reports_exactly_the_applied_ids,
    also_keys_make_other_ids_duplicates,
    multi_pool_event_is_atomic,
    history_keeps_one_entry_per_applied_mark,
    updates_of_more_pools_than_the_limit_are_refused_whole,
    the_continuation_key_is_created_once_and_shared,
    traffic_rounds_are_shared_and_never_lose_an_offer,
    cluster_lists_are_claimed_once_and_shared,
);

/// The embedded store creates its first key itself (the DynamoDB store's is the stack's
/// generated secret: [`the_continuation_keys_live_in_their_secret`]).
#[test]
fn embedded_continuation_key_rotates_keeping_the_previous_one() {
    run_embedded(forewarn_tests::contract::the_continuation_key_rotates_keeping_the_previous_one)
}

// ---- DynamoDB only ------------------------------------------------------------------------

async fn get(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
    sk: &str,
) -> HashMap<String, AttributeValue> {
    client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .unwrap_or_else(|| panic!("no item {pk}/{sk}"))
}

fn s(item: &HashMap<String, AttributeValue>, attr: &str) -> String {
    match item.get(attr) {
        Some(AttributeValue::S(v)) => v.clone(),
        other => panic!("`{attr}` is not a string: {other:?} in {item:?}"),
    }
}

fn n(item: &HashMap<String, AttributeValue>, attr: &str) -> i64 {
    match item.get(attr) {
        Some(AttributeValue::N(v)) => v.parse().expect("a whole number"),
        other => panic!("`{attr}` is not a number: {other:?} in {item:?}"),
    }
}

#[test]
fn dynamodb_items_are_readable() {
    moto::runtime().block_on(async {
        let (client, table) = table().await;
        let store = DynamoStore::new(client.clone(), &table);
        assert_eq!(store.location(), format!("dynamodb table {table}"));
        let t = now();
        let key = spot("m5.large", "us-east-1a");
        let until = t + Duration::minutes(10);
        let update = event("e-raw", t, vec![mark(&key, "i-0123", Some(until))]);
        assert_eq!(
            store.apply(&update, recorded(&update)).await.unwrap(),
            Applied::Applied
        );

        let item = get(&client, &table, "POOL#spot#m5.large#us-east-1a", "POOL").await;
        assert_eq!(s(&item, "pool"), "spot#m5.large#us-east-1a");
        assert_eq!(s(&item, "capacity_type"), "spot");
        assert_eq!(s(&item, "instance_type"), "m5.large");
        assert_eq!(s(&item, "zone"), "us-east-1a");
        assert_eq!(s(&item, "region"), "us-east-1");
        assert_eq!(n(&item, "unavailable_until"), until.timestamp());
        let expires = (until + Retention::default().history).timestamp();
        assert_eq!(n(&item, "expires_at"), expires);
        assert_eq!(n(&item, "interruptions"), 1);
        assert_eq!(n(&item, "first_seen"), t.timestamp());
        assert_eq!(n(&item, "last_seen"), t.timestamp());
        assert_eq!(s(&item, "last_event_id"), "e-raw");
        assert_eq!(s(&item, "last_reason"), update.summary);
        assert_eq!(s(&item, "last_instance_id"), "i-0123");
        let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "capacity_type",
                "expires_at",
                "first_seen",
                "instance_type",
                "interruptions",
                "last_event_id",
                "last_instance_id",
                "last_reason",
                "last_seen",
                "pk",
                "pool",
                "region",
                "sk",
                "unavailable_until",
                "zone",
            ]
        );

        let ledger = get(&client, &table, "EVENT#e-raw", "EVENT").await;
        assert_eq!(s(&ledger, "kind"), "spot-interruption");
        assert_eq!(n(&ledger, "recorded_at"), recorded(&update).timestamp());
        assert_eq!(
            n(&ledger, "expires_at"),
            (recorded(&update) + Retention::default().ledger).timestamp()
        );
        assert!(!ledger.contains_key("zone") && !ledger.contains_key("unavailable_until"));
    });
}

/// Counts the `TransactWriteItems` requests a client sends.
#[derive(Debug, Default)]
struct CountTransactions(Arc<AtomicUsize>);

impl Intercept for CountTransactions {
    fn name(&self) -> &'static str {
        "CountTransactions"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get("x-amz-target");
        if target.is_some_and(|t| t.ends_with(".TransactWriteItems")) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[test]
fn dynamodb_round_trips() {
    moto::runtime().block_on(async {
        let (client, table) = table().await;
        let counted = |count: &Arc<AtomicUsize>| {
            let config = client
                .config()
                .to_builder()
                .interceptor(CountTransactions(count.clone()))
                .build();
            DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), &table)
        };
        let (a_count, b_count) = (Arc::default(), Arc::default());
        let (a, b) = (counted(&a_count), counted(&b_count));
        let trips = |c: &Arc<AtomicUsize>| c.swap(0, Ordering::SeqCst);
        let t = now();
        let key = spot("m5.large", "us-east-1a");
        let window = |m| Some(t + Duration::minutes(m));

        // In order: one transaction per event, also for a count-only event inside a window.
        a.apply(&event("e-1", t, vec![mark(&key, "i-1", window(10))]), t)
            .await
            .unwrap();
        assert_eq!(trips(&a_count), 1);
        let e2 = event(
            "e-2",
            t + Duration::minutes(1),
            vec![mark(&key, "i-2", window(11))],
        );
        a.apply(&e2, recorded(&e2)).await.unwrap();
        assert_eq!(trips(&a_count), 1);
        let e3 = event(
            "e-3",
            t + Duration::minutes(2),
            vec![mark(&key, "i-3", None)],
        );
        a.apply(&e3, recorded(&e3)).await.unwrap();
        assert_eq!(trips(&a_count), 1);
        // A duplicate: one cancelled transaction.
        assert_eq!(
            a.apply(&e3, recorded(&e3)).await.unwrap(),
            Applied::Duplicate
        );
        assert_eq!(trips(&a_count), 1);
        // A late event on a store that has not seen the pool: the bet is lost once.
        b.apply(&event("e-late", t, vec![mark(&key, "i-0", window(5))]), t)
            .await
            .unwrap();
        assert_eq!(trips(&b_count), 2);
        // ... and not again.
        b.apply(&event("e-late-2", t, vec![mark(&key, "i-0", window(5))]), t)
            .await
            .unwrap();
        assert_eq!(trips(&b_count), 1);

        let everything = PoolQuery {
            include_available: true,
            ..PoolQuery::default()
        };
        let [r] = <[_; 1]>::try_from(a.pools(&everything, now()).await.unwrap()).unwrap();
        assert_eq!(r.interruptions(), 5);
        assert_eq!(r.last_event_id, "e-3");
        assert_eq!(r.unavailable_until, window(11));
    });
}

#[test]
fn dynamodb_rejects_more_pools_than_a_transaction_holds() {
    moto::runtime().block_on(async {
        let (client, table) = table().await;
        let store = DynamoStore::new(client, &table);
        let t = now();
        let marks = (0..150)
            .map(|i| mark(&spot(&format!("m{i}.large"), "us-east-1a"), "i-1", None))
            .collect();
        let err = store
            .apply(&event("e-big", t, marks), t)
            .await
            .expect_err("150 pools do not fit in one transaction");
        let msg = err.to_string();
        assert!(msg.contains("150 pools") && msg.contains(&table), "{msg}");
        // 49 pools do (each with its history item: 1 + 49 + 49 items).
        let marks = (0..49)
            .map(|i| mark(&spot(&format!("m{i}.large"), "us-east-1a"), "i-1", None))
            .collect();
        assert_eq!(
            store.apply(&event("e-49", t, marks), t).await.unwrap(),
            Applied::Applied
        );
        let all = PoolQuery {
            include_available: true,
            ..PoolQuery::default()
        };
        assert_eq!(store.pools(&all, t).await.unwrap().len(), 49);
    });
}

#[test]
fn dynamodb_malformed_item_is_corrupt_naming_its_key() {
    moto::runtime().block_on(async {
        let (client, table) = table().await;
        let store = DynamoStore::new(client.clone(), &table);
        let t = now();
        client
            .put_item()
            .table_name(&table)
            .item(
                "pk",
                AttributeValue::S("POOL#spot#m5.large#us-east-1a".into()),
            )
            .item("sk", AttributeValue::S("POOL".into()))
            .item("pool", AttributeValue::S("spot#m5.large#us-east-1a".into()))
            .item("zone", AttributeValue::S("us-east-1a".into()))
            .item("last_seen", AttributeValue::N(t.timestamp().to_string()))
            .item(
                "expires_at",
                AttributeValue::N((t.timestamp() + 60).to_string()),
            )
            .item("interruptions", AttributeValue::S("many".into()))
            .send()
            .await
            .expect("PutItem");
        let query = PoolQuery {
            include_available: true,
            zone: Some("us-east-1a".into()),
            ..PoolQuery::default()
        };
        match store
            .pools(&query, t)
            .await
            .map_err(|e| e.cause::<Corrupt>().cloned())
        {
            Err(Some(Corrupt { key, message })) => {
                assert_eq!(key, "POOL#spot#m5.large#us-east-1a");
                assert!(message.contains("interruptions"), "{message}");
            }
            other => panic!("expected a corrupt item, got {other:?}"),
        }
    });
}

#[test]
fn dynamodb_missing_table_is_an_error_naming_it() {
    moto::runtime().block_on(async {
        let client = aws_sdk_dynamodb::Client::new(&moto::shared().sdk_config());
        let store = DynamoStore::new(client, "no-such-table");
        let err = store
            .apply(&event("e", now(), vec![]), now())
            .await
            .expect_err("no table");
        assert!(err.to_string().contains("no-such-table"), "{err}");
        let err = store.applied(&["e".into()]).await.expect_err("no table");
        assert!(err.to_string().contains("no-such-table"), "{err}");
    });
}

/// Issue 46: the continuation keys are their secret's alone. Every store reads the stack's
/// generated key the same; a rotation goes on in the secret (the generated key its previous),
/// which every store then reads, and a second drops the generated key. A store given no secret
/// (`forewarn pools --table`) refuses every key request, naming the setting.
#[test]
fn the_continuation_keys_live_in_their_secret() {
    moto::runtime().block_on(async {
        let config = moto::shared().sdk_config();
        let (client, fresh_table) = table().await;
        let store = || moto::keyed_store(&config, &fresh_table, &moto::key_secret_of(&fresh_table));
        let first = store().continuation_keys().await.unwrap();
        assert_eq!(first.current.id(), 1);
        assert_eq!(first.previous, None);
        assert_eq!(store().continuation_keys().await.unwrap(), first);
        let rotated = store().rotate_continuation_key().await.unwrap();
        assert_eq!(rotated.current.id(), 2);
        assert_eq!(rotated.previous.as_ref(), Some(&first.current));
        assert_eq!(store().continuation_keys().await.unwrap(), rotated);
        assert_eq!(
            store().reread_continuation_keys().await.unwrap(),
            Some(rotated.clone())
        );
        let twice = store().rotate_continuation_key().await.unwrap();
        assert_eq!(twice.current.id(), 3);
        assert_eq!(twice.previous.as_ref(), Some(&rotated.current));
        assert!(twice.get(1).is_none(), "the generated key is dropped");

        // A version that is not one of the key's is refused, named.
        let secrets = aws_sdk_secretsmanager::Client::new(&config);
        for (text, says) in [
            (
                r#"{"key_id": 4, "secret": "short"}"#,
                "fewer than 32 characters",
            ),
            ("not json", "key_id"),
        ] {
            let put = secrets
                .put_secret_value()
                .secret_id(moto::key_secret_of(&fresh_table));
            put.secret_string(text)
                .send()
                .await
                .expect("PutSecretValue");
            match store()
                .continuation_keys()
                .await
                .map_err(|e| e.cause::<Corrupt>().cloned())
            {
                Err(Some(Corrupt { key, message })) => {
                    assert!(key.contains("AWSCURRENT"), "{key}");
                    assert!(message.contains(says), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }

        let keyless = DynamoStore::new(client, &fresh_table);
        for e in [
            keyless.continuation_keys().await.unwrap_err(),
            keyless.rotate_continuation_key().await.unwrap_err(),
        ] {
            assert!(e.to_string().contains("FOREWARN_KEY_SECRET"), "{e}");
        }
    });
}
