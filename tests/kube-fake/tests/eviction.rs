//! The eviction subresource and PodDisruptionBudgets, through `Api::<Pod>::evict`.

mod common;

use std::time::Duration;

use common::{api_status, pdb, pod, running};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, PostParams};
use kube_fake::KubeFake;
use serde_json::json;

fn evict_params() -> EvictParams {
    EvictParams::default()
}

#[tokio::test]
async fn eviction_without_a_budget_deletes_the_pod() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    let status = pods.evict("w1", &evict_params()).await.unwrap();

    assert!(status.is_success());
    assert_eq!(status.code, 201);
    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_none());
    let eviction = fake.writes().pop().unwrap();
    assert_eq!(eviction.path, "/api/v1/namespaces/web/pods/w1/eviction");
    assert_eq!(eviction.status, 201);
    assert_eq!(eviction.body.unwrap()["metadata"]["name"], "w1");
}

#[tokio::test]
async fn eviction_of_a_missing_pod_is_404() {
    let fake = KubeFake::start().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    let status = api_status(pods.evict("ghost", &evict_params()).await);

    assert_eq!(status.code, 404);
    assert_eq!(status.message, "pods \"ghost\" not found");
}

#[tokio::test]
async fn min_available_budget_refuses_then_allows_after_a_new_healthy_pod() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    fake.insert(running("web", "w2", "n2", "web"));
    fake.insert(pdb("web", "web-pdb", "web", json!({"minAvailable": 2})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    let status = api_status(pods.evict("w1", &evict_params()).await);

    assert_eq!(status.code, 429);
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(
        status.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = &status.details.unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(
        cause.message,
        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    );
    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_some());
    assert_eq!(fake.counters().too_many_requests, 1);

    // The budget's status reads like the disruption controller wrote it.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(fake.client(), "web");
    let read = budgets.get("web-pdb").await.unwrap().status.unwrap();
    assert_eq!(
        (
            read.current_healthy,
            read.desired_healthy,
            read.disruptions_allowed
        ),
        (2, 2, 0)
    );

    // A replacement becomes ready elsewhere: now one disruption is allowed.
    fake.insert(running("web", "w3", "n3", "web"));
    let status = pods.evict("w1", &evict_params()).await.unwrap();
    assert!(status.is_success());
    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_none());
    // And then none again.
    assert_eq!(
        api_status(pods.evict("w2", &evict_params()).await).code,
        429
    );
}

#[tokio::test]
async fn max_unavailable_percent_budget_rounds_up() {
    let fake = KubeFake::start().await;
    for (name, node) in [("w1", "n1"), ("w2", "n2"), ("w3", "n3")] {
        fake.insert(running("web", name, node, "web"));
    }
    // 3 expected pods, maxUnavailable 34% of 3 rounds up to 2: desired healthy 1.
    fake.insert(pdb(
        "web",
        "web-pdb",
        "web",
        json!({"maxUnavailable": "34%"}),
    ));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    fake.set_eviction_grace(Duration::from_secs(30));

    pods.evict("w1", &evict_params()).await.unwrap();
    // w1 is terminating (still expected, no longer healthy): 2 healthy, 1 desired.
    let w1 = fake.get("v1", "Pod", Some("web"), "w1").unwrap();
    assert!(w1["metadata"]["deletionTimestamp"].is_string());
    pods.evict("w2", &evict_params()).await.unwrap();

    let status = api_status(pods.evict("w3", &evict_params()).await);
    assert_eq!(status.code, 429);
    assert_eq!(
        status.details.unwrap().causes[0].message,
        "The disruption budget web-pdb needs 1 healthy pods and has 1 currently"
    );
}

#[tokio::test]
async fn max_unavailable_uses_the_owner_scale_when_the_owner_is_seeded() {
    let fake = KubeFake::start().await;
    let rs = fake.insert(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d4", "namespace": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
    }));
    for (name, node) in [("w1", "n1"), ("w2", "n2"), ("w3", "n3")] {
        let mut p = running("web", name, node, "web");
        p["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4",
            "uid": rs["metadata"]["uid"], "controller": true,
        }]);
        fake.insert(p);
    }
    fake.insert(pdb("web", "web-pdb", "web", json!({"maxUnavailable": 1})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    pods.evict("w1", &evict_params()).await.unwrap();
    // The ReplicaSet still wants 3: with 2 healthy and 2 desired, nothing more may go,
    // although only 2 pods are left.
    let status = api_status(pods.evict("w2", &evict_params()).await);
    assert_eq!(status.code, 429);
    assert_eq!(
        status.details.unwrap().causes[0].message,
        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    );
}

#[tokio::test]
async fn more_than_one_budget_is_an_internal_error() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    fake.insert(pdb("web", "a", "web", json!({"minAvailable": 0})));
    fake.insert(pdb("web", "b", "web", json!({"maxUnavailable": 1})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    let status = api_status(pods.evict("w1", &evict_params()).await);

    assert_eq!(status.code, 500);
    assert_eq!(
        status.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_some());
}

#[tokio::test]
async fn pods_that_are_not_running_are_evicted_whatever_the_budget() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    fake.insert(pod("web", "pending", "n1", "web", "Pending", false));
    fake.insert(pod("web", "done", "n1", "web", "Succeeded", false));
    fake.insert(pod("web", "failed", "n1", "web", "Failed", false));
    fake.insert(pdb("web", "strict", "web", json!({"minAvailable": "100%"})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    for name in ["pending", "done", "failed"] {
        pods.evict(name, &evict_params()).await.unwrap();
        assert!(fake.get("v1", "Pod", Some("web"), name).is_none(), "{name}");
    }
    assert_eq!(
        api_status(pods.evict("w1", &evict_params()).await).code,
        429
    );
}

#[tokio::test]
async fn budgets_in_other_namespaces_or_selecting_other_pods_do_not_apply() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    fake.insert(pdb("other", "web-pdb", "web", json!({"minAvailable": 5})));
    fake.insert(pdb("web", "db-pdb", "db", json!({"minAvailable": 5})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    pods.evict("w1", &evict_params()).await.unwrap();

    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_none());
}

#[tokio::test]
async fn graceful_eviction_leaves_a_terminating_pod_for_a_while() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    // The fake on a clock of the test's: the grace period passes when the test says so.
    let t0: chrono::DateTime<chrono::Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
    let now = std::sync::Arc::new(std::sync::Mutex::new(t0));
    let read = now.clone();
    fake.set_clock(move || *read.lock().unwrap());
    fake.set_eviction_grace(Duration::from_secs(30));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    pods.evict("w1", &evict_params()).await.unwrap();

    let terminating = pods.get("w1").await.unwrap();
    let deleted_at = terminating.metadata.deletion_timestamp.clone().unwrap().0;
    assert_eq!(deleted_at.to_string(), "2026-11-24T10:00:30Z");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // Evicting a terminating pod again is accepted.
    pods.evict("w1", &evict_params()).await.unwrap();
    *now.lock().unwrap() = t0 + chrono::Duration::seconds(29);
    assert!(
        pods.get("w1").await.is_ok(),
        "still terminating 1 s before its time"
    );
    *now.lock().unwrap() = t0 + chrono::Duration::seconds(30);
    assert_eq!(api_status(pods.get("w1").await).code, 404);
}

#[tokio::test]
async fn dry_run_eviction_checks_the_budget_without_deleting() {
    let fake = KubeFake::start().await;
    fake.insert(running("web", "w1", "n1", "web"));
    fake.insert(running("web", "w2", "n2", "web"));
    fake.insert(pdb("web", "web-pdb", "web", json!({"minAvailable": 1})));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    let dry = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        ..EvictParams::default()
    };

    pods.evict("w1", &dry).await.unwrap();

    assert!(fake.get("v1", "Pod", Some("web"), "w1").is_some());
    assert_eq!(
        fake.requests()[0].query_param("dryRun").as_deref(),
        Some("All")
    );
}
