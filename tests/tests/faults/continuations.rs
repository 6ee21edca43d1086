//! Trust no continuation that arrives: forged ones (another node, another event id, another key,
//! a drain never started), a stale one after the node's name was reused, one redelivered after
//! its node was deleted; and a key rotation in the middle of a drain, which loses nothing. Each
//! checks that nothing legitimate is lost and nothing illegitimate is done.

use forewarn::domain::fixtures::{app_pod, ec2_node};
use forewarn::domain::inbound::continuation::Continuation;
use forewarn::domain::inbound::decode;
use forewarn::domain::keys::ContinuationKey;
use forewarn::domain::plan::{Facts, decide};
use forewarn::domain::report::{Outcome, Report};
use forewarn::ports::PoolStore;
use forewarn_tests::moto::runtime;
use forewarn_tests::sqs::drain_within;
use serde_json::{Value, json};

use crate::support::{BATCH, Body, Options, World, spot, spot_warnings, writes_to_node};

/// A continuation of `body`'s drain as forewarn writes it: the plan decided from the live
/// instance and node, `edit`ed (a forger's change), signed with `key` (the table's key when
/// `None`: a forger who could read the table).
async fn continuation(
    world: &World,
    body: &Body,
    edit: impl FnOnce(&mut Value),
    key: Option<ContinuationKey>,
) -> String {
    let now = chrono::Utc::now();
    let records = decode("test", body.text.as_bytes(), now).unwrap();
    let event = records[0].event.clone().unwrap();
    let instances = world
        .handler
        .instances
        .describe(&Default::default(), &event.instance_ids)
        .await
        .unwrap();
    let known: Vec<_> = instances.values().cloned().collect();
    let cluster = world.handler.fleet.cluster(None).await.unwrap();
    let nodes = cluster
        .nodes
        .nodes(&known, Default::default())
        .await
        .unwrap();
    let facts = Facts::new(&instances, &nodes);
    let mut plan = serde_json::to_value(decide(&event, facts, &world.handler.config)).unwrap();
    edit(&mut plan);
    let plan = serde_json::from_value(plan).expect("an edited plan is still a plan");
    let key = match key {
        Some(key) => key,
        None => world.store.continuation_keys().await.unwrap().current,
    };
    Continuation::first(now, now, plan, &body.text).body(&key)
}

/// The first instance's spot warning handled to the end of its drain, applied once; and a
/// continuation of that drain as it was queued during it: what a DLQ redrive or a late duplicate
/// brings back afterwards.
async fn drained_with_a_continuation(world: &World) -> String {
    let bodies = spot_warnings(world).await;
    let queued = continuation(world, &bodies[0], |_| {}, None).await;
    let drained = world.drain(BATCH, None).await;
    world
        .assert_all_applied_once(&drained.reports, &bodies)
        .await;
    queued
}

/// Reports refused, with their reasons.
fn refusals(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .filter_map(|r| r.reason.clone())
        .filter(|r| r.starts_with("refused: ") || r.contains("; refused: "))
        .collect()
}

/// `forewarn key rotate` in the middle of a drain loses nothing: the drain's first pass queues
/// its continuation signed with key 1, the key is rotated by another process (the CLI), and the
/// drain goes on to its end with what key 1 signed, applied once. A continuation signed with a
/// key newer than the handler read (3, after a second rotation) is verified after one read of
/// the keys again; one signed with key 1, two rotations old, is refused and touches nothing.
#[test]
fn a_key_rotation_in_the_middle_of_a_drain_loses_nothing() {
    runtime().block_on(async {
        let world = World::one().await;
        let a = &world.instances[0];
        let warning = spot(a);
        let first = world.store.continuation_keys().await.unwrap();
        assert_eq!(first.current.id(), 1);
        // What a late duplicate of this drain would bring back, signed with key 1.
        let old = continuation(&world, &warning, |_| {}, None).await;
        world.send(std::slice::from_ref(&warning.text)).await;
        // The first pass only: cordoned, its continuation queued (signed with key 1).
        let started = drain_within(world.mapping(), BATCH, 1, None).await.unwrap();
        assert_eq!(started.reports.len(), 1, "{started:#?}");
        assert_eq!(world.cordons().len(), 1);
        assert!(
            world.evictions().is_empty(),
            "the drain goes on in its continuations"
        );
        // Another process (`forewarn key rotate --execute`) rotates the key.
        let rotator = forewarn_tests::moto::keyed_store(
            &world.sdk,
            &world.table,
            &forewarn_tests::moto::key_secret_of(&world.table),
        );
        let once = rotator.rotate_continuation_key().await.unwrap();
        assert_eq!(
            (once.current.id(), once.previous.as_ref().map(|k| k.id())),
            (2, Some(1))
        );
        let drained = world.drain(BATCH, None).await;
        assert!(
            refusals(&drained.reports).is_empty(),
            "{:#?}",
            drained.reports
        );
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        assert_eq!(
            world.evictions().len(),
            2,
            "both pods evicted: the drain went on"
        );
        let reports: Vec<Report> = started.reports.into_iter().chain(drained.reports).collect();
        world
            .assert_all_applied_once(&reports, std::slice::from_ref(&warning))
            .await;

        // A second rotation: key 3 signs, key 2 is kept, key 1 is no longer accepted.
        let twice = rotator.rotate_continuation_key().await.unwrap();
        let newer = continuation(&world, &warning, |_| {}, Some(twice.current.clone())).await;
        world.send(&[newer]).await;
        let drained = world.drain(BATCH, None).await;
        assert!(
            refusals(&drained.reports).is_empty(),
            "a key newer than the handler's is read again: {:#?}",
            drained.reports
        );
        let writes = world.fake.writes().len();
        world.send(&[old]).await;
        let drained = world.drain(BATCH, None).await;
        let refused = refusals(&drained.reports);
        assert_eq!(refused.len(), 1, "{:#?}", drained.reports);
        assert!(
            refused[0].contains("signed with key 1, which is not accepted"),
            "{refused:?}"
        );
        assert_eq!(drained.returned, 0);
        assert_eq!(
            world.fake.writes().len(),
            writes,
            "the refused pass wrote nothing"
        );
    })
}

#[test]
fn forged_continuations_are_refused_and_touch_nothing() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let (a, b) = (&world.instances[0], &world.instances[1]);
        let warning = spot(a);
        let b_warning = spot(b);
        let b_node = b.dns.clone();
        let b_id = b.id.clone();
        let forged = vec![
            // A's drain with the node and instance swapped for B's, signed by a forger who holds
            // the key: the plan names an instance the event does not.
            continuation(
                &world,
                &warning,
                |plan| {
                    plan["actions"][0]["node"] = json!(b_node);
                    plan["actions"][0]["instance_id"] = json!(b_id);
                    plan["instance_ids"] = json!([b_id]);
                },
                None,
            )
            .await,
            // A's drain under another event id.
            continuation(
                &world,
                &warning,
                |plan| plan["event_id"] = json!("someone-elses"),
                None,
            )
            .await,
            // A drain of B that forewarn never started (B was never cordoned): signed and
            // consistent, but the node does not carry forewarn's taint.
            continuation(&world, &b_warning, |_| {}, None).await,
            // A's drain signed with another key.
            continuation(
                &world,
                &warning,
                |_| {},
                Some(ContinuationKey::new([7; 32])),
            )
            .await,
        ];
        world.send(&forged).await;
        let drained = world.drain(BATCH, None).await;
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        let refused = refusals(&drained.reports);
        assert_eq!(refused.len(), 4, "{:#?}", drained.reports);
        assert!(
            refused[0].contains(&format!("names instance {}", b.id)),
            "{refused:?}"
        );
        assert!(refused[1].contains("someone-elses"), "{refused:?}");
        assert!(refused[2].contains("taint"), "{refused:?}");
        assert!(
            refused[3].contains("signature does not match"),
            "{refused:?}"
        );
        // Nothing was done to either node or their pods, nothing went to the DLQ.
        assert!(world.cordons().is_empty(), "{:#?}", world.fake.writes());
        assert!(world.evictions().is_empty());
        assert_eq!(
            writes_to_node(&world, &b.dns) + writes_to_node(&world, &a.dns),
            0
        );
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn a_stale_continuation_after_the_node_name_was_reused_is_refused() {
    runtime().block_on(async {
        let world = World::one().await;
        let a = &world.instances[0];
        let stale = drained_with_a_continuation(&world).await;
        // The instance is gone; a new one registers under the same name (the same private IP),
        // cordoned by forewarn for a rebalance recommendation, with a pod of its own.
        world.fake.remove("v1", "Node", None, &a.dns);
        let mut reused = ec2_node(&a.dns, "i-0ffffffffffff0001", &a.zone);
        reused["spec"]["unschedulable"] = json!(true);
        reused["spec"]["taints"] = json!([{"key": "forewarn.io/interruption",
            "value": "rebalance-recommendation", "effect": "NoSchedule"}]);
        world.fake.insert(reused);
        world.fake.insert(app_pod("newcomer", &a.dns, "ReplicaSet"));
        world.fake.clear_requests();

        world.send(&[stale]).await;
        let again = world.drain(BATCH, None).await;
        assert_eq!(again.returned, 0);
        let refused = refusals(&again.reports);
        assert_eq!(refused.len(), 1, "{:#?}", again.reports);
        assert!(refused[0].contains("i-0ffffffffffff0001"), "{refused:?}");
        assert!(
            world
                .fake
                .writes()
                .iter()
                .all(|w| !(200..300).contains(&w.status)),
            "nothing written: {:#?}",
            world.fake.writes()
        );
        assert!(
            world
                .fake
                .get("v1", "Pod", Some("shop"), "newcomer")
                .is_some()
        );
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn a_continuation_redelivered_after_its_node_was_deleted_ends_cleanly() {
    runtime().block_on(async {
        let world = World::one().await;
        let a = &world.instances[0];
        let late = drained_with_a_continuation(&world).await;
        // The instance went and its node was deleted; the continuation comes back.
        world.fake.remove("v1", "Node", None, &a.dns);
        world.send(&[late]).await;
        let again = world.drain(BATCH, None).await;
        assert_eq!(again.returned, 0, "{:#?}", again.reports);
        assert_eq!(again.reports.len(), 1, "one pass, no further continuation");
        let report = &again.reports[0];
        assert_eq!(report.outcome, Outcome::Acted, "{report:#?}");
        let result = report.actions[0].result.as_deref().unwrap_or_default();
        assert!(result.contains("is gone"), "{result}");
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}
