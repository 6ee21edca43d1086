//! What arrives: the Lambda's time running out mid-batch, an invocation killed mid-batch,
//! malformed and oversized messages
//! (poison pills), one event delivered ten times, the three events of one instance in every
//! order, the lifecycle hook of another team's group, a state change older than the instance's
//! launch, a far-future time beside a good record. Nothing legitimate is lost, nothing
//! illegitimate is done.

use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use aws_sdk_ec2::types::InstanceType;
use forewarn::domain::event::EventKind;
use forewarn::domain::report::{Outcome, Report, Tally};
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::moto::{runtime, unique_name};
use forewarn_tests::sqs::{drain_within, in_flight, lambda_message};
use serde_json::{Value, json};

use crate::support::{
    BATCH, Body, MAX_RECEIVES, Options, World, assert_pools_counted_once, count, first_deliveries,
    rebalance, spot, spot_warnings, state_change, texts, writes_to_node,
};

#[test]
fn lambda_time_running_out_mid_batch_returns_the_rest_applied_once_later() {
    runtime().block_on(async {
        let world = World::new(Options {
            types: vec![
                InstanceType::M5Large,
                InstanceType::C5Large,
                InstanceType::R5Large,
                InstanceType::M5Xlarge,
            ],
            concurrency: 1,
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        // Every Kubernetes request takes 600 ms; a first delivery (the node read, the cordon)
        // takes two after the batch's lookup, so four events one at a time cannot finish within
        // 1.5 s.
        world.fake.set_latency(Duration::from_millis(600));
        let cut = drain_within(world.mapping(), BATCH, 1, Some(Duration::from_millis(1500)))
            .await
            .unwrap();
        assert_eq!(cut.batches, 1);
        assert_eq!(cut.reports.len(), bodies.len());
        assert!(cut.returned >= 1, "{:#?}", cut.reports);
        assert_eq!(cut.returned, Tally::of(&cut.reports).failed);
        assert!(
            cut.reports
                .iter()
                .filter(|r| r.outcome == Outcome::Failed)
                .all(|r| r.reason.as_deref().unwrap_or_default().contains("ran out")),
            "{:#?}",
            cut.reports
        );

        world.fake.set_latency(Duration::ZERO);
        let rest = world.drain(BATCH, None).await;
        let mut reports = cut.reports.clone();
        reports.extend(rest.reports.clone());
        assert_eq!(rest.returned, 0, "{:#?}", rest.reports);
        world
            .assert_applied_once(&reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
    });
}

/// Issue 57, item 2: an invocation that dies mid-batch (out of memory, a panic, the deadline:
/// here its future is dropped while the API server hangs) gives its messages back within 30 s,
/// not after the queue's 900 s visibility timeout: the handler held them a lease at a time.
/// They are not visible while it works (the lease holds them), and another invocation then
/// handles them as usual.
#[test]
fn an_invocation_killed_mid_batch_gives_its_messages_back_within_30_s() {
    runtime().block_on(async {
        let world = World::one().await;
        let bodies = spot_warnings(&world).await;
        world.fake.set_latency(Duration::from_secs(600));
        let received = world
            .sqs
            .receive_message()
            .queue_url(&world.queue_url)
            .max_number_of_messages(BATCH)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let mut batch = SqsEvent::default();
        batch.records = received
            .messages()
            .iter()
            .map(|m| lambda_message(m, &world.queue_arn))
            .collect();
        assert_eq!(batch.records.len(), bodies.len());
        let held = async {
            while !world
                .proxy
                .calls()
                .iter()
                .any(|c| c.operation == "ChangeMessageVisibilityBatch" && c.status == 200)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::select! {
            _ = world.handler.invoke(serde_json::to_value(&batch).unwrap(), None) => panic!("the API server hangs: the batch cannot end"),
            () = held => {}
        }
        // The invocation is gone (its future dropped), its messages neither answered nor
        // deleted.
        let killed = Instant::now();
        world.fake.set_latency(Duration::ZERO);
        assert_eq!(
            in_flight(&world.sqs, &world.queue_url).await.unwrap(),
            bodies.len(),
            "held, not visible"
        );
        let mut back = Vec::new();
        while back.len() < bodies.len() && killed.elapsed() < Duration::from_secs(30) {
            let received = world
                .sqs
                .receive_message()
                .queue_url(&world.queue_url)
                .max_number_of_messages(BATCH)
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
            back.extend(received.messages().iter().filter_map(|m| m.body().map(str::to_string)));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(back, texts(&bodies.iter().collect::<Vec<_>>()), "visible again within 30 s");
        // The next invocation handles them.
        let drained = world.drain(BATCH, None).await;
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn malformed_and_oversized_messages_go_to_the_dlq_without_blocking_good_ones() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let good = spot_warnings(&world).await;
        let oversized = "x".repeat(250 * 1024);
        let bad = vec![
            oversized.clone(),
            "{\"version\": \"0\", \"id\": ".to_string(),
            json!({"hello": ["world"], "id": 7}).to_string(),
        ];
        world.send(&bad).await;
        let drained = world.drain(BATCH, None).await;
        // The good events were applied in the first batch, which held the bad ones too.
        let first_batch = &drained.reports[..good.len() + bad.len()];
        assert_eq!(
            count(first_batch, Outcome::Acted),
            good.len(),
            "{first_batch:#?}"
        );
        assert_eq!(count(first_batch, Outcome::Failed), bad.len());
        assert_eq!(drained.returned, bad.len() * MAX_RECEIVES);
        world
            .assert_applied_once(&drained.reports, &good.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
        let mut dead = world.take_all(&world.dlq_url).await;
        dead.sort();
        let mut expected = bad.clone();
        expected.sort();
        assert_eq!(dead.len(), 3);
        assert!(dead == expected, "the bad messages, whole, in the DLQ");
    });
}

#[test]
fn the_same_event_ten_times_is_applied_once() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        // In one batch.
        let once = spot(&world.instances[0]);
        world.send(&vec![once.text.clone(); 10]).await;
        let together = world.drain(BATCH, None).await;
        assert_eq!(first_deliveries(&together.reports), 10);
        assert_eq!(count(&together.reports, Outcome::Acted), 1);
        assert_eq!(count(&together.reports, Outcome::Duplicate), 9);
        assert_eq!(together.deleted, together.reports.len());

        // Across ten batches.
        let again = spot(&world.instances[1]);
        world.send(&vec![again.text.clone(); 10]).await;
        let apart = world.drain(1, None).await;
        let passes = apart.reports.len() - first_deliveries(&apart.reports);
        assert_eq!(
            apart.batches,
            10 + passes,
            "a batch each, and the drain's passes"
        );
        assert_eq!(count(&apart.reports, Outcome::Acted), 1);
        assert_eq!(count(&apart.reports, Outcome::Duplicate), 9);
        assert_eq!(apart.deleted, 10 + passes);

        let mut reports = together.reports.clone();
        reports.extend(apart.reports.clone());
        world.assert_applied_once(&reports, &[&once, &again]).await;
        assert_pools_counted_once(&world).await;
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn warning_rebalance_and_state_change_in_every_order_end_the_same() {
    runtime().block_on(async {
        let world = World::new(Options {
            types: vec![
                InstanceType::M5Large,
                InstanceType::C5Large,
                InstanceType::R5Large,
                InstanceType::M5Xlarge,
                InstanceType::C5Xlarge,
                InstanceType::R5Xlarge,
            ],
            ..Options::default()
        })
        .await;
        // Instance n gets its three events in the n-th order, one per round (batch).
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let events: Vec<[Body; 3]> = world
            .instances
            .iter()
            .map(|i| [spot(i), rebalance(i), state_change(i, "shutting-down")])
            .collect();
        let mut reports = Vec::new();
        for round in 0..3 {
            let bodies: Vec<&Body> = orders
                .iter()
                .zip(&events)
                .map(|(order, three)| &three[order[round]])
                .collect();
            world.send(&texts(&bodies)).await;
            let drained = world.drain(BATCH, None).await;
            assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
            reports.extend(drained.reports.into_iter().filter(|r| r.pass.is_none()));
        }
        assert_eq!(reports.len(), 18);

        // Each event is applied once, whatever came before it.
        let ledger = world.ledger().await;
        for three in &events {
            for body in three {
                let mine: Vec<&Report> = reports
                    .iter()
                    .filter(|r| r.event_id.as_deref() == Some(&body.id))
                    .collect();
                assert_eq!(mine.len(), 1);
                assert_eq!(mine[0].outcome, Outcome::Acted, "{mine:#?}");
                assert!(ledger.contains(&body.id));
            }
        }

        // The final state is the same whatever the order.
        let pools = world.pools().await;
        let now = chrono::Utc::now();
        let finals: Vec<(u64, u64, u64, bool, bool)> = world
            .instances
            .iter()
            .map(|i| {
                let pool = &pools[&world.pool_key(i)];
                (
                    pool.counter(EventKind::SpotInterruption),
                    pool.counter(EventKind::RebalanceRecommendation),
                    pool.counter(EventKind::StateChange),
                    pool.is_unavailable(now),
                    world.fake.get("v1", "Node", None, &i.dns).is_some(),
                )
            })
            .collect();
        assert!(
            finals.iter().all(|f| *f == finals[0]),
            "the same end in every order: {finals:?}\n{reports:#?}"
        );
        // Each kind counted once, the pool unavailable (the warning), the node drained and kept:
        // the instance is shutting down, its containers may still run, and the Node is deleted
        // only once EC2 says terminated.
        assert_eq!(finals[0], (1, 1, 1, true, true));
        // A rebalance cordons with its taint; a spot warning after it changes the taint: one
        // write per node and reason at most.
        for ((node, reason), n) in world.cordons_by_reason() {
            assert_eq!(n, 1, "node {node} cordoned for {reason} once");
        }
        for (pod, n) in world.evictions() {
            assert_eq!(n, 1, "pod {pod} evicted once");
        }
    });
}

#[test]
fn a_lifecycle_hook_of_an_untagged_group_is_left_to_its_owner() {
    runtime().block_on(async {
        let world = World::one().await;
        // An instance of another team's group: no cluster tag, no node.
        let ec2 = aws_sdk_ec2::Client::new(&world.sdk);
        let image = any_image(&ec2).await.unwrap();
        let theirs = launch(&ec2, &image, &Launch::spot("x").tag("team", "batch"))
            .await
            .unwrap();
        let id = unique_name("ev-hook");
        let hook = json!({
            "version": "0", "id": id, "detail-type": "EC2 Instance-terminate Lifecycle Action",
            "source": "aws.autoscaling", "account": "123456789012",
            "time": (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339(),
            "region": "us-east-1", "resources": [],
            "detail": {"LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
                "AutoScalingGroupName": "their-group", "LifecycleHookName": "their-hook",
                "EC2InstanceId": theirs.id,
                "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"}
        });
        world.send(&[hook.to_string()]).await;
        let drained = world.drain(BATCH, None).await;
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        let action = &drained.reports[0].actions[0];
        assert_eq!(action.complete_lifecycle, None, "{action:#?}");
        assert!(
            action.reason.contains("not tagged for this cluster"),
            "{action:#?}"
        );
        let completions = world
            .proxy
            .calls()
            .iter()
            .filter(|c| c.service == "autoscaling")
            .count();
        assert_eq!(completions, 0, "no Auto Scaling call at all");
        assert!(world.cordons().is_empty());
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn a_state_change_older_than_the_instances_launch_does_nothing() {
    runtime().block_on(async {
        let world = World::one().await;
        let a = &world.instances[0];
        // A `stopped` from before the instance's current launch (it was started again since).
        let mut stale = state_change(a, "stopped");
        let mut value: Value = serde_json::from_str(&stale.text).unwrap();
        value["time"] = json!((chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339());
        stale.text = value.to_string();
        world.send(&[stale.text.clone()]).await;
        let drained = world.drain(BATCH, None).await;
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        let action = &drained.reports[0].actions[0];
        assert_eq!(action.action.as_str(), "none", "{action:#?}");
        assert!(action.reason.starts_with("stale:"), "{action:#?}");
        assert!(
            world.fake.get("v1", "Node", None, &a.dns).is_some(),
            "not deleted"
        );
        assert!(world.fake.writes().is_empty(), "{:#?}", world.fake.writes());
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn a_far_future_time_fails_its_record_alone() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let (a, b) = (&world.instances[0], &world.instances[1]);
        let good = spot(a);
        let mut poison = spot(b);
        let mut value: Value = serde_json::from_str(&poison.text).unwrap();
        value["time"] = json!("2999-01-01T00:00:00Z");
        poison.text = value.to_string();
        world.send(&texts(&[&good, &poison])).await;
        let drained = world.drain(BATCH, None).await;
        // The poison fails alone, at once, every time, and ends in the DLQ; the good one is
        // applied once; B's node is never touched.
        let failed: Vec<&Report> = drained
            .reports
            .iter()
            .filter(|r| r.outcome == Outcome::Failed)
            .collect();
        assert_eq!(failed.len(), MAX_RECEIVES, "{:#?}", drained.reports);
        assert!(
            failed
                .iter()
                .all(|r| r.reason.as_deref().unwrap_or_default().contains("time")),
            "{failed:#?}"
        );
        world.assert_applied_once(&drained.reports, &[&good]).await;
        assert_eq!(writes_to_node(&world, &b.dns), 0);
        assert_eq!(world.take_all(&world.dlq_url).await, vec![poison.text]);
    });
}
