//! Faults of the AWS services behind the fault-injecting proxy: DynamoDB and EC2 throttling
//! (absorbed by retries) or unreachable (events to the DLQ, a redrive applies them once), and
//! SQS failing: a continuation that cannot be queued, a visibility that cannot be changed.

use std::time::Duration;

use forewarn_tests::moto::runtime;
use forewarn_tests::proxy::{AwsFault, FaultKind};
use forewarn_tests::sqs::in_flight;
use kube_fake::{Fault, Method};

use crate::support::{
    BATCH, MAX_RECEIVES, Options, World, assert_pools_counted_once, first_deliveries, spot_warnings,
};

#[test]
fn dynamodb_throttling_is_absorbed_by_retries() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world
            .proxy
            .inject(AwsFault::service("dynamodb", FaultKind::Throttle, 3));
        let drained = world.drain(BATCH, None).await;
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        let throttled: Vec<u16> = world
            .proxy
            .calls()
            .iter()
            .filter(|c| c.service == "dynamodb" && c.faulted)
            .map(|c| c.status)
            .collect();
        assert_eq!(throttled, vec![400, 400, 400]);
        world
            .assert_applied_once(&drained.reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
    });
}

#[test]
fn dynamodb_unreachable_sends_events_to_the_dlq_and_redrive_applies_them_once() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world.proxy.inject(AwsFault::service(
            "dynamodb",
            FaultKind::Unreachable,
            10_000,
        ));
        let failing = world.drain(BATCH, None).await;
        let n = bodies.len();
        assert_eq!(failing.deleted, 0);
        assert_eq!(failing.returned, n * MAX_RECEIVES, "{:#?}", failing.reports);
        assert!(world.ledger().await.is_empty());
        assert!(world.cordons().is_empty(), "nothing done to the cluster");
        assert!(
            world
                .proxy
                .calls()
                .iter()
                .all(|c| c.service != "dynamodb" || c.faulted),
            "DynamoDB never answered"
        );

        world.proxy.clear_faults();
        assert_eq!(world.redrive().await, n, "every event in the DLQ");
        let redriven = world.drain(BATCH, None).await;
        assert_eq!(redriven.returned, 0);
        world
            .assert_applied_once(&redriven.reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
    });
}

#[test]
fn dynamodb_unreachable_after_the_cluster_action_reapplies_nothing_twice() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        // The lookups pass; the pool update after the cordon and drain does not (its attempts
        // all fail), once per event.
        world.proxy.inject(AwsFault::operation(
            "dynamodb",
            "TransactWriteItems",
            FaultKind::Unreachable,
            4 * bodies.len(),
        ));
        let drained = world.drain(BATCH, None).await;
        // Every attempt (four) of each event's pool update failed: both events came back once.
        assert_eq!(drained.returned, bodies.len(), "{:#?}", drained.reports);
        let faulted: Vec<String> = world
            .proxy
            .calls()
            .iter()
            .filter(|c| c.faulted)
            .map(|c| c.operation.clone())
            .collect();
        assert_eq!(faulted.len(), 4 * bodies.len(), "{faulted:?}");
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

fn describe_calls(world: &World) -> (usize, usize) {
    let calls = world.proxy.calls();
    let ok = calls
        .iter()
        .filter(|c| c.operation == "DescribeInstances" && !c.faulted)
        .count();
    let faulted = calls
        .iter()
        .filter(|c| c.operation == "DescribeInstances" && c.faulted)
        .count();
    (ok, faulted)
}

#[test]
fn ec2_throttling_is_absorbed_by_retries() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world
            .proxy
            .inject(AwsFault::service("ec2", FaultKind::Throttle, 2));
        let drained = world.drain(BATCH, None).await;
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        assert_eq!(
            first_deliveries(&drained.reports),
            bodies.len(),
            "each delivered once"
        );
        assert_eq!(
            describe_calls(&world),
            (1, 2),
            "one DescribeInstances for the batch (the drains' later passes carry their plan)"
        );
        assert!(
            world
                .proxy
                .calls()
                .iter()
                .filter(|c| c.faulted)
                .all(|c| c.status == 503)
        );
        world
            .assert_applied_once(&drained.reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
    });
}

#[test]
fn ec2_unreachable_sends_events_to_the_dlq_and_redrive_applies_them_once() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world
            .proxy
            .inject(AwsFault::service("ec2", FaultKind::Unreachable, 10_000));
        let failing = world.drain(BATCH, None).await;
        let n = bodies.len();
        assert_eq!(failing.deleted, 0);
        assert_eq!(failing.returned, n * MAX_RECEIVES, "{:#?}", failing.reports);
        assert_eq!(describe_calls(&world).0, 0);
        assert!(world.ledger().await.is_empty());
        assert!(world.cordons().is_empty(), "nothing done to the cluster");

        world.proxy.clear_faults();
        world.proxy.reset();
        assert_eq!(world.redrive().await, n);
        let redriven = world.drain(BATCH, None).await;
        assert_eq!(redriven.returned, 0);
        assert_eq!(
            describe_calls(&world),
            (1, 0),
            "one DescribeInstances for the batch (the drains' later passes carry their plan)"
        );
        world
            .assert_applied_once(&redriven.reports, &bodies.iter().collect::<Vec<_>>())
            .await;
        assert_pools_counted_once(&world).await;
    });
}

#[test]
fn a_continuation_that_cannot_be_queued_returns_its_event_and_nothing_is_lost() {
    runtime().block_on(async {
        let world = World::one().await;
        let bodies = spot_warnings(&world).await;
        // Every attempt of the first SendMessage (the SDK tries 4 times).
        world.proxy.inject(AwsFault::operation(
            "sqs",
            "SendMessage",
            FaultKind::Status(500),
            4,
        ));
        let drained = world.drain(BATCH, None).await;
        assert!(drained.returned >= 1, "{:#?}", drained.reports);
        assert!(
            drained.reports[0]
                .reason
                .as_deref()
                .unwrap_or_default()
                .contains("queueing the drain's continuation"),
            "{:#?}",
            drained.reports[0]
        );
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn a_failed_visibility_change_leaves_the_message_to_its_visibility_timeout() {
    runtime().block_on(async {
        let world = World::one().await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(500)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(1),
        );
        // Every visibility change fails: the batch's lease as well as the failed message's.
        world.proxy.inject(AwsFault::operation(
            "sqs",
            "ChangeMessageVisibilityBatch",
            FaultKind::Unreachable,
            100,
        ));
        let drained = world.drain_briefly(Duration::from_secs(8)).await;
        // The event failed; its message could not be brought back sooner, so it waits out the
        // visibility timeout: still on the queue (in flight), not dropped, not in the DLQ.
        assert_eq!(drained.returned, 1, "{:#?}", drained.reports);
        assert_eq!(in_flight(&world.sqs, &world.queue_url).await.unwrap(), 1);
        assert!(!world.ledger().await.contains(&bodies[0].id));
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}
