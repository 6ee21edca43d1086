//! Through the pipeline and the handler: one action per event, the webhook told and the
//! evictions counted, and every node of a batch cordoned before any eviction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::fixtures::{self, pod_object};
use forewarn::ports::Clock;
use kube_fake::Method;
use serde_json::Value;

use crate::continuations::{spot_body, sqs_batch};
use crate::support::{
    Fleet, ID, Instances, NODE, OTHER_ID, OTHER_NODE, World, instance, known, node, serve,
};

#[tokio::test]
async fn the_pipeline_acts_through_the_adapter_once_per_event() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = known(BTreeMap::from([(ID.to_string(), instance(ID, NODE))]));
    let directory = w.clients.clone();
    let executor = w.executor();
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &w.in_process);
    let raw = fixtures::spot_json("ev-pipeline", ID, &Utc::now().to_rfc3339());
    let records =
        forewarn::domain::inbound::decode("test", raw.to_string().as_bytes(), Utc::now()).unwrap();

    let reports = pipeline.process(&records).await;

    assert_eq!(
        reports[0].outcome,
        forewarn::domain::report::Outcome::Acted,
        "{reports:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(
        result.contains("cordoned") && result.contains("evicted 1 pod"),
        "{result}"
    );
    assert!(w.pod("default", "web-1").is_none());

    // The same event again: a duplicate, and not a request to the cluster beyond the lookup.
    w.fake.clear_requests();
    let reports = pipeline.process(&records).await;
    assert_eq!(
        reports[0].outcome,
        forewarn::domain::report::Outcome::Duplicate
    );
    assert_eq!(w.fake.writes(), vec![]);
}

/// The handler with the webhook configured: one message per action, the drain's numbers in the
/// report and its metrics, and a webhook that fails never fails the event.
#[tokio::test]
async fn the_handler_tells_the_webhook_and_counts_evictions() {
    use forewarn::domain::report::Outcome;
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let answer = Arc::new(std::sync::atomic::AtomicU16::new(200));
    let app = axum::Router::new().route(
        "/hooks/forewarn",
        axum::routing::post({
            let (received, answer) = (received.clone(), answer.clone());
            move |axum::Json(body): axum::Json<Value>| async move {
                received.lock().unwrap().push(body);
                axum::http::StatusCode::from_u16(answer.load(std::sync::atomic::Ordering::SeqCst))
                    .unwrap()
            }
        }),
    );
    let url = format!("{}/hooks/forewarn", serve(app).await);
    let mut w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(pod_object("default", "web-2", NODE, "web", "ReplicaSet"));
    let template = r#"{"text": "{{action}} {{node}}: {{result}}", "event": "{{event_id}}", "pool": "{{pool}}", "cluster": "{{cluster}}"}"#;
    let settings = forewarn::app::settings::Settings::from_vars([
        ("FOREWARN_CLUSTERS", "demo"),
        // The test's receiver is plain HTTP on loopback: taken without more.
        ("FOREWARN_WEBHOOK_URL", &url),
        ("FOREWARN_WEBHOOK_TEMPLATE", template),
    ])
    .unwrap();
    // Evictions at once (this test counts them in one message): no surge; and the cluster's
    // name, as the fleet gives it.
    let mut config = settings.config.clone();
    config.surge_kinds.clear();
    config.cluster = Some(ClusterId::at(&Place::default(), "demo"));
    w.config = config.clone();
    let webhook = forewarn::adapters::webhook::Webhook::new(
        settings.webhook.clone().unwrap(),
        Some("demo".into()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        notifier: Some(Arc::new(webhook)),
        instances: Arc::new(Instances(BTreeMap::from([
            (ID.to_string(), instance(ID, NODE)),
            (OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE)),
        ]))),
        fleet: Fleet::one(w.cluster()),
        concurrency: 4,
        ..w.handler(dir.path())
    };
    let spot =
        |id: &str, instance: &str| fixtures::spot_json(id, instance, &w.clock.now().to_rfc3339());

    let inv = handler.invoke(spot("ev-hook", ID), None).await.unwrap();

    let report = &inv.reports[0];
    assert_eq!(report.outcome, Outcome::Acted, "{report:?}");
    let action = &report.actions[0];
    assert_eq!(
        action.drain,
        Some(forewarn::domain::report::DrainSummary {
            evicted: 2,
            left: 0,
            complete: true,
            pending: false,
            pod_events: 2,
            pod_events_given_up: 0,
            placeholders_refused: 0,
        })
    );
    let cordoned_at = action.cordoned_at.expect("the cordon's time");
    assert!(report.time.unwrap() <= cordoned_at && cordoned_at <= w.clock.now());
    let received_now = received.lock().unwrap().clone();
    assert_eq!(received_now.len(), 1, "{received_now:?}");
    let message = &received_now[0];
    assert_eq!(message["event"], "ev-hook");
    assert_eq!(message["pool"], "spot/m5.large/us-east-1a");
    assert_eq!(message["cluster"], "demo");
    let text = message["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("cordon-drain {NODE}: cordoned node/{NODE}"))
            && text.contains("evicted 2 pods"),
        "{text}"
    );
    let docs = forewarn::app::telemetry::emf_documents(report, Utc::now());
    let evictions = docs.iter().find(|d| d.get("Evictions").is_some()).unwrap();
    assert_eq!(evictions["Evictions"], 2);
    let drains = docs.iter().find(|d| d.get("Drains").is_some()).unwrap();
    assert_eq!(drains["Result"], "complete");

    // The webhook fails: the event is applied all the same; a duplicate tells nothing.
    answer.store(500, std::sync::atomic::Ordering::SeqCst);
    let inv = handler
        .invoke(spot("ev-hook-2", OTHER_ID), None)
        .await
        .unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Acted, "{:?}", inv.reports);
    assert_eq!(received.lock().unwrap().len(), 2);
    let inv = handler
        .invoke(spot("ev-hook-2", OTHER_ID), None)
        .await
        .unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Duplicate);
    assert_eq!(received.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn every_node_of_a_batch_is_cordoned_before_any_eviction() {
    use forewarn::app::pipeline::Pipeline;
    let w = World::plain().await;
    let ids = [
        "i-0a1b2c3d4e5f60001",
        "i-0a1b2c3d4e5f60002",
        "i-0a1b2c3d4e5f60003",
    ];
    let names = [
        "ip-10-0-1-11.ec2.internal",
        "ip-10-0-1-21.ec2.internal",
        "ip-10-0-1-31.ec2.internal",
    ];
    for (id, name) in ids.iter().zip(names).skip(1) {
        w.fake.insert(node(name, id));
    }
    for name in names {
        w.fake.insert(pod_object(
            "default",
            &format!("web-{name}"),
            name,
            "web",
            "ReplicaSet",
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = known(
        ids.iter()
            .zip(names)
            .map(|(id, name)| (id.to_string(), instance(id, name)))
            .collect(),
    );
    let directory = w.clients.clone();
    let executor = w.executor();
    // One event at a time: without the cordon pass, the last node would be cordoned after the
    // first ones' evictions.
    let pipeline = Pipeline {
        concurrency: 1,
        ..w.pipeline(&store, &instances, &directory, &executor, &w.in_process)
    };
    let bodies: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| spot_body(&format!("ev-batch-{i}"), id))
        .collect();
    w.fake.clear_requests();
    let reports = pipeline.process(&sqs_batch(&bodies)).await;
    assert!(
        reports
            .iter()
            .all(|r| r.outcome == forewarn::domain::report::Outcome::Acted),
        "{reports:?}"
    );
    let log = w.fake.requests();
    let last_cordon = log
        .iter()
        .rposition(|r| r.method == Method::PATCH && r.path.starts_with("/api/v1/nodes/"))
        .unwrap();
    let first_eviction = log
        .iter()
        .position(|r| r.path.ends_with("/eviction"))
        .unwrap();
    assert!(last_cordon < first_eviction, "{log:#?}");
    for name in names {
        let node = w.node(name).unwrap();
        assert_eq!(node["spec"]["unschedulable"], true);
    }
}
