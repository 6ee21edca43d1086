//! Fault injection, latency, rate limiting, hangs and the request log.

mod common;

use std::time::Duration;

use common::{api_status, node};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube_fake::{Fault, KubeFake, Method};
use serde_json::json;
use tokio::time::Instant;

#[tokio::test]
async fn injected_faults_fail_the_matching_requests_then_service_resumes() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    fake.inject(Fault {
        method: Some(Method::PATCH),
        path_contains: Some("/nodes/n1".into()),
        status: 503,
        times: 2,
    });
    let nodes: Api<Node> = Api::all(fake.client());
    let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));

    // Reads are not affected.
    nodes.get("n1").await.unwrap();
    for _ in 0..2 {
        let status = api_status(nodes.patch("n1", &PatchParams::default(), &cordon).await);
        assert_eq!(status.code, 503);
        assert_eq!(status.reason, "ServiceUnavailable");
    }
    let patched = nodes
        .patch("n1", &PatchParams::default(), &cordon)
        .await
        .unwrap();

    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
    assert_eq!(fake.counters().faults_injected, 2);
    let statuses: Vec<u16> = fake.writes().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 200]);
}

#[tokio::test]
async fn injected_500_is_an_internal_error_status() {
    let fake = KubeFake::start().await;
    fake.inject(Fault::new(500).path_contains("/api/v1/nodes"));
    let nodes: Api<Node> = Api::all(fake.client());

    let status = api_status(nodes.list(&ListParams::default()).await);

    assert_eq!(status.code, 500);
    assert_eq!(status.reason, "InternalError");
    assert!(nodes.list(&ListParams::default()).await.is_ok());
}

/// On tokio's paused clock, which moves only when every task waits on a timer: the figures are
/// the fake's sleeps, whatever the machine.
#[tokio::test(start_paused = true)]
async fn latency_is_added_to_every_answer() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());
    fake.set_latency(Duration::from_millis(400));

    let started = Instant::now();
    nodes.get("n1").await.unwrap();
    nodes.get("n1").await.unwrap();

    assert!(started.elapsed() >= Duration::from_millis(800));
    fake.set_latency(Duration::ZERO);
    let started = Instant::now();
    nodes.get("n1").await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(400));
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    fake.set_rate_limit(0.5, 3);
    let client = fake.client();
    let nodes: Api<Node> = Api::all(client.clone());

    for _ in 0..3 {
        nodes.get("n1").await.unwrap();
    }
    let status = api_status(nodes.get("n1").await);
    assert_eq!(status.code, 429);
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(status.details.unwrap().retry_after_seconds, 1);

    // The header is there for clients that honour it.
    let request = axum::http::Request::get("/api/v1/nodes/n1")
        .body(Vec::new())
        .unwrap();
    let response = client.send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");

    let counters = fake.counters();
    assert_eq!(counters.rate_limited, 2);
    assert_eq!(counters.too_many_requests, 2);
    assert_eq!(counters.requests, 5);
    fake.clear_rate_limit();
    nodes.get("n1").await.unwrap();
}

/// On tokio's paused clock, which the fake's clock (and so its rate limit) follows.
#[tokio::test(start_paused = true)]
async fn kube_default_retry_layer_rides_out_the_rate_limit() {
    let fake = KubeFake::start().await;
    let (wall, paused) = (chrono::Utc::now(), Instant::now());
    fake.set_clock(move || wall + chrono::Duration::from_std(paused.elapsed()).unwrap());
    fake.insert(node("n1"));
    fake.set_rate_limit(1.0, 1);
    let mut config = fake.config();
    config.default_retry = true;
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());

    nodes.get("n1").await.unwrap();
    let started = Instant::now();
    nodes.get("n1").await.unwrap();

    // The second get was refused at least once, then retried after `Retry-After: 1`.
    assert!(fake.counters().rate_limited >= 1);
    assert!(started.elapsed() >= Duration::from_millis(900));
}

/// On tokio's paused clock: the client's read timeout, not the machine, ends the wait.
#[tokio::test(start_paused = true)]
async fn a_hung_request_times_out_on_the_client() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    fake.hang("/api/v1/nodes/n1", 1);
    let mut config = fake.config();
    config.read_timeout = Some(Duration::from_millis(300));
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());

    let started = Instant::now();
    let result = nodes.get("n1").await;

    assert!(result.is_err(), "{result:?}");
    assert!(!matches!(result, Err(kube::Error::Api(_))));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.counters().hung, 1);
    assert_eq!(fake.requests()[0].status, 0);
    // Only once.
    nodes.get("n1").await.unwrap();
}

#[tokio::test]
async fn the_request_log_records_writes_with_content_types_and_bodies() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());

    nodes.get("n1").await.unwrap();
    nodes
        .list(&ListParams::default().labels("a=b"))
        .await
        .unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();

    let all = fake.requests();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1].query_param("labelSelector").as_deref(), Some("a=b"));
    let writes = fake.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].method, Method::PATCH);
    assert_eq!(writes[0].path, "/api/v1/nodes/n1");
    assert_eq!(
        writes[0].content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(
        writes[0].body.as_ref().unwrap(),
        &json!({"spec": {"unschedulable": true}})
    );
    assert_eq!(writes[0].status, 200);

    fake.clear_requests();
    assert!(fake.requests().is_empty());
    assert_eq!(fake.counters().requests, 3);
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let fake = KubeFake::start().await;
    let mut config = fake.config();
    config.connect_timeout = Some(Duration::from_millis(500));
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    nodes.list(&ListParams::default()).await.unwrap();

    fake.shutdown().await;

    let result = nodes.list(&ListParams::default()).await;
    assert!(result.is_err(), "{result:?}");
}
