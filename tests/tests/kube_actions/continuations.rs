//! Drains carried on in queued passes: the continuations the handler queues on SQS (their size,
//! what an oversized one does), quiet passes, the copies of budget-refused passes the execution
//! environment keeps, and a batch of drains waiting for room.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use forewarn::app::pipeline::{Passes, Pipeline};
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::{self, pod_object};
use forewarn::ports::{Clock, DrainRole, Pass};
use serde_json::{Value, json};

use crate::support::{
    Continuations, ID, NODE, OTHER_ID, OTHER_NODE, World, event, evictions, instance, known,
    terminating,
};
use crate::surge::placeholders;

const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:forewarn-events";

/// The SQS event Lambda would pass for messages with these bodies.
pub(crate) fn sqs_event(bodies: &[String]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            json!({"messageId": format!("m-{i}"), "receiptHandle": format!("r-{i}"), "body": body,
                   "attributes": {"ApproximateReceiveCount": "1"},
                   "eventSource": "aws:sqs", "eventSourceARN": QUEUE_ARN, "awsRegion": "us-east-1"})
        })
        .collect();
    json!({ "Records": records })
}

/// The records of the SQS batch Lambda would pass for messages with these bodies.
pub(crate) fn sqs_batch(bodies: &[String]) -> Vec<forewarn::domain::inbound::Record> {
    let input = sqs_event(bodies).to_string();
    forewarn::domain::inbound::decode("sqs", input.as_bytes(), Utc::now()).unwrap()
}

/// A quiet pass (a copy the execution environment kept) records no Event: neither the Events of
/// the decision it would owe nor the drain's end, though it ends the drain; the queued twin,
/// not quiet, records them.
#[tokio::test]
async fn a_quiet_pass_records_no_event_even_when_it_ends_the_drain() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-quiet"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let drain = |role| Pass::Drain {
        started_at: w.clock.now(),
        role,
        heartbeat: false,
    };
    // One pass evicts, the next sees the pod gone and ends the drain.
    executor.run(&plan, drain(DrainRole::Quiet)).await.unwrap();
    let out = executor
        .run(&plan, drain(DrainRole::Quiet))
        .await
        .unwrap()
        .remove(0);
    assert!(w.pod("default", "web-1").is_none(), "evicted: {out:?}");
    assert!(!out.result.pending, "the drain is over: {out:?}");
    assert!(w.events().is_empty(), "{:?}", w.events().keys());
    executor.run(&plan, drain(DrainRole::Owed)).await.unwrap();
    let events = w.events();
    for reason in ["SpotInterrupted", "Cordoned", "Drained"] {
        assert!(events.contains_key(reason), "{reason}: {:?}", events.keys());
    }
}

/// A pass that leaves a pod its disruption budget refused keeps a copy of its queued
/// continuation in the execution environment: the environment's next invocation after the
/// budget's wait runs it beside its own batch — before the queued pass, which in a mass
/// interruption waits behind thousands of other messages — and the pod is evicted. The copy
/// records no Event and queues nothing (its queued twin does both).
#[tokio::test]
async fn a_budget_refusal_is_tried_again_by_the_environment_before_its_queued_pass() {
    use forewarn::domain::report::Outcome;
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    // One of two `pair` pods may be away at a time; the one on the other node is already going
    // (another drain evicted it): the budget has no room until it is gone, 30 s from now.
    w.fake
        .insert(pod_object("default", "pair-1", NODE, "pair", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "pair-2",
        OTHER_NODE,
        "pair",
        "ReplicaSet",
    ));
    w.fake.insert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pair", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "pair"}}},
    }));
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(w.fake.client(), "default");
    pods.evict("pair-2", &Default::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, true);
    let next = || queue.sent.lock().unwrap().pop().map(|(_, body, _)| body);
    let going = |w: &World, pod: &str| {
        w.pod("default", pod)
            .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some())
    };
    let warning = spot_body("ev-kept", ID);
    handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    // The first pass: web-1 evicted, pair-1 refused by its budget; the next pass is queued.
    let first = next().expect("the first pass is queued");
    handler.invoke(sqs_event(&[first]), None).await.unwrap();
    assert!(going(&w, "web-1"));
    assert!(!going(&w, "pair-1"), "refused by its budget");
    assert!(next().is_some(), "the next pass is queued as always");
    let events = w.events().len();

    // 31 s on, pair-2 is gone. The environment's next invocation (any batch: here the
    // warning again) runs the kept copy: pair-1 is evicted before its queued pass comes.
    w.clock.advance(Duration::from_secs(31));
    assert!(w.pod("default", "pair-2").is_none());
    let out = handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    assert!(going(&w, "pair-1"), "evicted by the kept copy");
    assert_eq!(out.reports.len(), 1, "the answer is about the batch only");
    assert_eq!(out.reports[0].outcome, Outcome::Duplicate);
    assert_eq!(out.response["batchItemFailures"], json!([]));
    assert!(next().is_none(), "the copy queues nothing");
    assert_eq!(w.events().len(), events, "the copy records no Event");
    // Kept once: a later invocation runs nothing more.
    w.fake.clear_requests();
    handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    assert!(
        !w.fake
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/eviction")),
        "no copy is left"
    );
}

/// A node of 737 pods with 253-character names (the longest a pod name may be), every eviction
/// refused by its budget: each continuation of its drain stays within SQS's 256 KiB and does not
/// grow with the pods or the passes (it carries no pod: the plan is per instance).
#[tokio::test]
async fn a_continuation_of_a_node_of_737_long_named_pods_fits_in_an_sqs_message() {
    use forewarn::domain::inbound::continuation::MAX_MESSAGE_BYTES;
    let w = World::plain().await;
    for i in 0..737 {
        // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters, a valid DNS subdomain.
        let name = format!(
            "p{i:04}{}.{}.{}.{}",
            "a".repeat(58),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(name.len(), 253);
        w.fake
            .insert(pod_object("default", &name, NODE, "held", "ReplicaSet"));
    }
    w.fake.insert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "held", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "held"}}},
    }));
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, false);
    let next = || queue.sent.lock().unwrap().pop().map(|(_, body, _)| body);
    let out = handler
        .invoke(sqs_event(&[spot_body("ev-737", ID)]), None)
        .await
        .unwrap();
    assert_eq!(out.response["batchItemFailures"], json!([]));
    let mut sizes = Vec::new();
    let mut body = next().expect("the first pass queues the drain");
    for _ in 0..2 {
        sizes.push(body.len());
        let out = handler.invoke(sqs_event(&[body]), None).await.unwrap();
        assert_eq!(
            out.response["batchItemFailures"],
            json!([]),
            "{:#?}",
            out.reports
        );
        body = next().expect("the refused pods keep the drain going");
    }
    sizes.push(body.len());
    assert!(
        w.fake
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/eviction"))
            .count()
            >= 737,
        "every pod was tried"
    );
    for size in &sizes {
        assert!(*size <= MAX_MESSAGE_BYTES, "{sizes:?}");
    }
    // The passes' counters change a few digits, nothing per pod.
    assert!(
        sizes.iter().max().unwrap() - sizes.iter().min().unwrap() < 100,
        "{sizes:?}"
    );
    assert!(sizes[0] < 16 * 1024, "{sizes:?}");
}

/// A continuation SQS would not take (an event near SQS's limit whose body, quoted inside the
/// continuation, escapes past it) is never sent: the event fails, saying how large it would be.
#[tokio::test]
async fn an_oversized_continuation_is_not_sent_and_its_event_fails_saying_why() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, false);
    // A spot warning of 200 KB (SQS takes it) whose detail holds quotes: escaped once more in
    // the continuation, they double.
    let mut warning: Value = serde_json::from_str(&spot_body("ev-big", ID)).unwrap();
    warning["detail"]["note"] = json!("\"".repeat(100_000));
    let warning = warning.to_string();
    assert!(warning.len() < 256 * 1024);
    let out = handler.invoke(sqs_event(&[warning]), None).await.unwrap();
    assert_eq!(
        out.response["batchItemFailures"],
        json!([{"itemIdentifier": "m-0"}])
    );
    let reason = out.reports[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("more than the 262144 an SQS message holds: it is not sent"),
        "{reason}"
    );
    assert!(queue.sent.lock().unwrap().is_empty(), "nothing was sent");
}

pub(crate) fn spot_body(id: &str, instance_id: &str) -> String {
    fixtures::spot_json(id, instance_id, &Utc::now().to_rfc3339()).to_string()
}

#[tokio::test]
async fn through_the_pipeline_a_drain_continues_in_queued_passes_and_the_event_is_recorded_once() {
    use forewarn::domain::report::Outcome;
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(3));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = known(BTreeMap::from([(ID.to_string(), instance(ID, NODE))]));
    let directory = w.clients.clone();
    let executor = w.executor();
    let queue = Arc::new(Continuations::default());
    let queued = Passes {
        interval: Duration::from_secs(1),
        queue: Some(queue.clone()),
        kept: None,
        tenant: Default::default(),
    };
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &queued);
    let original = spot_body("ev-queued", ID);

    // The queue refuses the continuation: the event fails (it comes back) and is not recorded.
    queue
        .refuse
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Failed, "{reports:?}");
    assert!(
        reports[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("continuation")
    );
    use forewarn::ports::PoolStore;
    assert!(
        store
            .applied(&["ev-queued".into()])
            .await
            .unwrap()
            .is_empty()
    );

    // Delivered again: cordoned (nothing else), recorded, the drain's first pass queued at once.
    queue
        .refuse
        .store(false, std::sync::atomic::Ordering::SeqCst);
    w.fake.clear_requests();
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Acted, "{reports:?}");
    // One request: the directory's read of the node, which the cordon pass uses (the node was
    // cordoned by the failed delivery: no patch).
    let sent: Vec<(String, String)> = w
        .fake
        .requests()
        .iter()
        .map(|r| (r.method.to_string(), r.path.clone()))
        .collect();
    assert_eq!(
        sent,
        [("GET".to_string(), format!("/api/v1/nodes/{NODE}"))],
        "{sent:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(result.contains("drain in the next pass"), "{result}");
    assert!(reports[0].actions[0].cordoned_at.is_some());
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], true);
    assert!(!terminating(&w, "web-1"), "the cordon pass evicts nothing");
    assert_eq!(evictions(&w), 0);
    assert_eq!(store.applied(&["ev-queued".into()]).await.unwrap().len(), 1);
    let (arn, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert_eq!((arn.as_str(), delay), (QUEUE_ARN, Duration::ZERO));
    // In its cluster's message group: one tenant of the fair queue per cluster.
    let group = queue.groups.lock().unwrap().pop().unwrap();
    let message: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cluster = &message["forewarnContinuation"]["plan"]["cluster"];
    assert!(cluster.is_string(), "{body}");
    assert_eq!(group, cluster.as_str().unwrap(), "{body}");

    // The original again (at least once): a duplicate, no second chain.
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Duplicate);
    assert!(queue.sent.lock().unwrap().is_empty());

    assert_queued_passes_drain_and_record_once(&w, &pipeline, &queue, &store, body).await;
}

/// The queued passes of the drain `body` continues, to its end: pass 1 evicts (the Events of the
/// decision left to the next), pass 2 records them while the pod terminates and comes back when
/// it is due to be gone, pass 3 ends the drain; nothing is queued after it, nothing recorded
/// twice, the pool counts one interruption.
async fn assert_queued_passes_drain_and_record_once(
    w: &World,
    pipeline: &Pipeline<'_>,
    queue: &Continuations,
    store: &forewarn::adapters::embedded::EmbeddedStore,
    body: String,
) {
    use forewarn::domain::report::Outcome;
    use forewarn::ports::PoolStore;
    // Pass 1: the evictions (the Events of the decision are left to the next pass, the drain
    // going on); the next pass after the interval.
    let reports = pipeline.process(&sqs_batch(&[body])).await;
    assert_eq!(reports[0].pass, Some(1), "{reports:?}");
    assert_eq!(reports[0].outcome, Outcome::Acted);
    assert!(reports[0].actions[0].drain.unwrap().pending);
    assert!(terminating(w, "web-1"));
    assert!(w.events().is_empty(), "{:?}", w.events());
    let (_, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert_eq!(delay, Duration::from_secs(1));

    // Pass 2 while the pod terminates: the Events of the decision; the next pass when the pod
    // is due to be gone, not sooner.
    let reports = pipeline.process(&sqs_batch(&[body])).await;
    assert_eq!(reports[0].pass, Some(2));
    assert!(reports[0].actions[0].drain.unwrap().pending);
    assert!(w.events().contains_key("Cordoned"));
    assert!(
        w.events().contains_key("SpotInterrupted"),
        "{:?}",
        w.events()
    );
    let (_, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert!(
        delay > Duration::from_secs(1) && delay <= Duration::from_secs(3),
        "{delay:?}"
    );

    // After the grace period: pass 3 ends the drain; nothing more is queued, nothing recorded
    // twice.
    w.clock.advance(Duration::from_millis(3200));
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&body)))
        .await;
    assert_eq!(reports[0].pass, Some(3));
    let drain = reports[0].actions[0].drain.unwrap();
    assert!(!drain.pending && drain.complete, "{reports:?}");
    assert!(queue.sent.lock().unwrap().is_empty());
    assert!(w.pod("default", "web-1").is_none());
    assert!(w.events().contains_key("Drained"));
    let pools = store.pools(&Default::default(), Utc::now()).await.unwrap();
    assert_eq!(pools[0].interruptions(), 1, "{pools:?}");
}

/// The continuations `queue` was given since last asked, their bodies and delays.
fn take_sent(queue: &Continuations) -> Vec<(String, Duration)> {
    std::mem::take(&mut *queue.sent.lock().unwrap())
        .into_iter()
        .map(|(_, body, delay)| (body, delay))
        .collect()
}

/// The records of the SQS batch of the continuations `sent`.
fn batch(sent: Vec<(String, Duration)>) -> Vec<forewarn::domain::inbound::Record> {
    let bodies: Vec<String> = sent.into_iter().map(|(b, _)| b).collect();
    sqs_batch(&bodies)
}

/// What the fake was asked: method and path with its query.
pub(crate) fn asked(w: &World) -> Vec<String> {
    w.fake
        .requests()
        .iter()
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

#[tokio::test]
async fn drains_waiting_for_room_look_at_their_placeholders_alone_in_one_list_a_batch() {
    use forewarn::domain::report::Outcome;
    let mut w = World::plain().await;
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "api-1",
        OTHER_NODE,
        "api",
        "ReplicaSet",
    ));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = known(BTreeMap::from([
        (ID.to_string(), instance(ID, NODE)),
        (OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE)),
    ]));
    let directory = w.clients.clone();
    let executor = w.executor();
    let queue = Arc::new(Continuations::default());
    let queued = Passes {
        interval: Duration::from_secs(1),
        queue: Some(queue.clone()),
        kept: None,
        tenant: Default::default(),
    };
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &queued);

    // Both warnings in one batch: cordons. Then the drains' first passes: a placeholder for
    // each pod, nothing evicted (no room anywhere), the next look in 10 s, waiting for room.
    let reports = pipeline
        .process(&sqs_batch(&[
            spot_body("ev-a", ID),
            spot_body("ev-b", OTHER_ID),
        ]))
        .await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    let reports = pipeline.process(&batch(take_sent(&queue))).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert_eq!(placeholders(&w).len(), 2);
    assert_eq!(evictions(&w), 0);
    let sent = take_sent(&queue);
    assert_eq!(sent.len(), 2);
    for (body, delay) in &sent {
        assert_eq!(*delay, Duration::from_secs(10));
        assert!(body.contains(r#""room":{"#), "{body}");
    }
    assert!(
        w.events().is_empty(),
        "the first passes leave their Events to the next"
    );

    // 10 s later, still no room: the passes after the first are full passes, which record the
    // Events the first passes left; nothing is evicted.
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert!(asked(&w).contains(&format!("GET /api/v1/nodes/{NODE}?")));
    assert_eq!(
        w.fake
            .list("events.k8s.io/v1", "Event")
            .iter()
            .filter(|e| e["reason"] == "Cordoned")
            .count(),
        2
    );
    assert_eq!(evictions(&w), 0);
    let sent = take_sent(&queue);
    assert_eq!(sent.len(), 2);

    let sent =
        assert_waiting_drains_list_their_placeholders_in_one_request(&w, &pipeline, &queue, sent)
            .await;

    assert_room_evicts_and_a_preempted_placeholder_is_made_again(&w, &pipeline, sent).await;
}

/// Drains still waiting for room (the continuations `sent`, 10 s on): the batch makes one
/// request, a list of both nodes' placeholders; no node, no pod is read; both looks are queued
/// again, and returned.
async fn assert_waiting_drains_list_their_placeholders_in_one_request(
    w: &World,
    pipeline: &Pipeline<'_>,
    queue: &Continuations,
    sent: Vec<(String, Duration)>,
) -> Vec<(String, Duration)> {
    use forewarn::domain::report::Outcome;
    // 10 s later, still no room: the batch makes one request, a list of both nodes'
    // placeholders; no node, no pod is read; both looks queued again.
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(
        result.starts_with("waiting for room: 1 placeholders"),
        "{result}"
    );
    let requests = asked(w);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /api/v1/namespaces/forewarn/pods?")
            && requests[0].contains("forewarn.io%2Fplaceholder-node+in+%28"),
        "{requests:?}"
    );
    let sent = take_sent(queue);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(_, d)| *d == Duration::from_secs(10)));
    sent
}

/// web-1's placeholder runs elsewhere, api-1's was preempted: with the continuations `sent`, both
/// drains make a full pass (each reads its node first); web-1 is evicted, api-1's placeholder is
/// made again and api-1 waits.
async fn assert_room_evicts_and_a_preempted_placeholder_is_made_again(
    w: &World,
    pipeline: &Pipeline<'_>,
    sent: Vec<(String, Duration)>,
) {
    use forewarn::domain::report::Outcome;
    // web-1's placeholder runs elsewhere, api-1's was preempted: both drains make a full pass;
    // web-1 is evicted (there is room), api-1's placeholder is made again and api-1 waits.
    let mut ph = placeholders(w).remove("default/web-1").unwrap();
    ph["spec"]["nodeName"] = json!("ip-10-0-9-9.ec2.internal");
    ph["status"] = json!({"phase": "Running"});
    w.fake.insert(ph);
    let gone = placeholders(w).remove("default/api-1").unwrap();
    w.fake.remove(
        "v1",
        "Pod",
        Some("forewarn"),
        gone["metadata"]["name"].as_str().unwrap(),
    );
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert!(terminating(w, "web-1"), "evicted once there was room");
    assert!(!terminating(w, "api-1"), "api-1 still waits for room");
    assert!(placeholders(w).contains_key("default/api-1"), "made again");
    let requests = asked(w);
    for node in [NODE, OTHER_NODE] {
        assert!(
            requests
                .iter()
                .any(|r| r == &format!("GET /api/v1/nodes/{node}?")),
            "a full pass reads its node first: {requests:?}"
        );
    }
}
