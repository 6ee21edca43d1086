//! Faults of the Kubernetes API: answers 500, 403 and 429, requests never answered, a 30 s
//! outage at a warning, evictions answered 500 and 409. Each event fails and comes back, or is
//! ridden out inside the invocation, and is applied once.

use std::time::Duration;

use aws_sdk_ec2::types::InstanceType;
use forewarn::domain::report::{Outcome, Report};
use forewarn_tests::moto::runtime;
use forewarn_tests::sqs::in_flight;
use kube_fake::{Fault, Method};

use crate::support::{BATCH, Options, World, count, first_deliveries, spot_warnings};

#[test]
fn kubernetes_500_fails_the_event_and_redelivery_applies_it_once() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(500)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(3),
        );
        let drained = world.drain(BATCH, None).await;
        assert_eq!(
            world.fake.counters().faults_injected,
            3,
            "the fault was used up"
        );
        assert!(drained.returned >= 1, "{:#?}", drained.reports);
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

/// The harness is honest: without the handler shortening it, a failed message waits out the
/// queue's 900 s visibility timeout, so a test would not see it again — the scenario above
/// passes because the handler brings it back within seconds.
#[test]
fn without_the_handler_shortening_it_a_failed_message_waits_out_the_visibility_timeout() {
    runtime().block_on(async {
        let world = World::new(Options {
            types: vec![InstanceType::M5Large],
            redelivery: false,
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(500)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(1),
        );
        let drained = world.drain_briefly(Duration::from_secs(8)).await;
        assert_eq!(drained.returned, 1, "{:#?}", drained.reports);
        assert_eq!(drained.batches, 1, "never received again");
        assert_eq!(count(&drained.reports, Outcome::Acted), 0);
        assert!(!world.ledger().await.contains(&bodies[0].id));
        assert_eq!(in_flight(&world.sqs, &world.queue_url).await.unwrap(), 1);
    });
}

/// A refusal (RBAC's 403 on the cordon) is not a fault that passes by itself: the handler
/// returns the message and brings it back at the slow pace (300 s) from the first receive, not
/// within seconds as it does a 500 (the scenarios above), so its receives are not spent before
/// someone fixes the role.
#[test]
fn a_kubernetes_403_is_returned_and_comes_back_slowly() {
    runtime().block_on(async {
        let world = World::new(Options {
            types: vec![InstanceType::M5Large],
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(403)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(1),
        );
        // A retryable failure would come back after 2 s.
        let drained = world.drain_briefly(Duration::from_secs(5)).await;
        assert_eq!(drained.returned, 1, "{:#?}", drained.reports);
        assert_eq!(drained.batches, 1, "not received again within seconds");
        let failed: Vec<&Report> = drained
            .reports
            .iter()
            .filter(|r| r.outcome == Outcome::Failed)
            .collect();
        assert_eq!(failed.len(), 1);
        assert!(failed[0].permanent, "{:#?}", failed[0]);
        assert!(!world.ledger().await.contains(&bodies[0].id));
        assert_eq!(in_flight(&world.sqs, &world.queue_url).await.unwrap(), 1);
    });
}

#[test]
fn kubernetes_429_is_retried_or_returned_and_applied_once() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(429)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(2),
        );
        world.fake.inject(
            Fault::new(429)
                .method(Method::POST)
                .path_contains("/eviction")
                .times(2),
        );
        let drained = world.drain(BATCH, None).await;
        assert_eq!(world.fake.counters().faults_injected, 4);
        assert_eq!(world.fake.counters().too_many_requests, 4);
        // Each call is tried three times, honouring Retry-After; evictions retry until the
        // drain deadline: every 429 is absorbed.
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        assert_eq!(
            first_deliveries(&drained.reports),
            bodies.len(),
            "each delivered once"
        );
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn kubernetes_429_beyond_the_call_retries_returns_the_event_and_redelivery_applies_it_once() {
    runtime().block_on(async {
        // One event at a time, so the first event's cordon meets all three 429s.
        let world = World::new(Options {
            concurrency: 1,
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        world.fake.inject(
            Fault::new(429)
                .method(Method::PATCH)
                .path_contains("/api/v1/nodes/")
                .times(3),
        );
        let drained = world.drain(BATCH, None).await;
        assert_eq!(world.fake.counters().faults_injected, 3);
        assert_eq!(drained.returned, 1, "{:#?}", drained.reports);
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn kubernetes_timeout_is_retried_inside_the_invocation_and_applied_once() {
    runtime().block_on(async {
        let world = World::new(Options {
            kube_read_timeout: Duration::from_secs(3),
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        let first = &world.instances[0];
        world.fake.hang(format!("/api/v1/nodes/{}", first.dns), 1);
        let drained = world.drain(BATCH, Some(Duration::from_secs(20))).await;
        assert_eq!(world.fake.counters().hung, 1);
        // The hung request is the lookup of the first node, which every event of the batch
        // needs: it times out after 3 s and, the invocation having time left, is tried again at
        // once. Nothing comes back to the queue.
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        assert_eq!(first_deliveries(&drained.reports), bodies.len());
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn kubernetes_timeout_of_an_eviction_applies_the_event_once() {
    runtime().block_on(async {
        let world = World::new(Options {
            kube_read_timeout: Duration::from_secs(3),
            ..Options::default()
        })
        .await;
        let bodies = spot_warnings(&world).await;
        world.fake.hang("/eviction", 1);
        let drained = world.drain(BATCH, Some(Duration::from_secs(20))).await;
        assert_eq!(world.fake.counters().hung, 1);
        // One pod's eviction timed out: that pod's refusal, not the event's failure. The next
        // pass of the drain evicts it; the pod evicted before is not evicted again.
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}

#[test]
fn a_30_second_api_outage_at_a_warning_is_ridden_out_inside_the_invocation() {
    runtime().block_on(async {
        // The stack's: 15 receives before the dead-letter queue, a 150 s function timeout.
        let world = World::new(Options {
            max_receives: 15,
            ..Options::default()
        })
        .await;
        // Every request fails, as when the API server restarts (an EKS control-plane upgrade).
        world
            .fake
            .inject(Fault::new(503).path_contains("/").times(usize::MAX));
        let bodies = spot_warnings(&world).await;
        // The instances go two minutes after their warnings' time: the first at `deadline`.
        let deadline = bodies
            .iter()
            .map(|b| {
                let event: serde_json::Value = serde_json::from_str(&b.text).unwrap();
                let time = event["time"].as_str().unwrap();
                chrono::DateTime::parse_from_rfc3339(time).unwrap()
            })
            .min()
            .unwrap()
            + chrono::Duration::minutes(2);
        let outage = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            let back = chrono::Utc::now();
            world.fake.clear_faults();
            back
        };
        let (drained, back) =
            tokio::join!(world.drain(BATCH, Some(Duration::from_secs(150))), outage);
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
        // The outcome, not how long it took: each node cordoned once the outage was over, each
        // eviction accepted before the instances go.
        for w in world.fake.writes() {
            if !(200..300).contains(&w.status) {
                continue;
            }
            if w.path.starts_with("/api/v1/nodes/") {
                assert!(w.at >= back, "{} written during the outage", w.path);
            }
            if w.path.ends_with("/eviction") {
                assert!(w.at < deadline, "{} after its instance went", w.path);
            }
        }
        assert!(world.take_all(&world.dlq_url).await.is_empty());
    });
}

#[test]
fn eviction_500_and_409_are_retried_in_later_passes_not_returned() {
    runtime().block_on(async {
        let world = World::new(Options::default()).await;
        let bodies = spot_warnings(&world).await;
        world
            .fake
            .inject(Fault::new(500).path_contains("/eviction").times(2));
        world
            .fake
            .inject(Fault::new(409).path_contains("/eviction").times(1));
        let drained = world.drain(BATCH, None).await;
        assert_eq!(world.fake.counters().faults_injected, 3);
        assert_eq!(drained.returned, 0, "{:#?}", drained.reports);
        world
            .assert_all_applied_once(&drained.reports, &bodies)
            .await;
    });
}
