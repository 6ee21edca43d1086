//! The Event on each pod a drain evicts: in the pod's namespace, `regarding` the pod, with the
//! reason of the event's kind and a note naming the instance, the node and when the instance
//! goes; none on a pod not evicted, none twice for a redelivered event, none in a dry run; sent
//! after the pass's evictions, and given up (counted) past the pass's budget or when the rate
//! limit is loaded, the drain's outcome unaffected.

use forewarn::adapters::kube::{ExecutorSettings, KubeExecutor};
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::{pdb_object, pod_object};
use kube_fake::RecordedRequest;
use serde_json::{Value, json};

use crate::support::{ID, NODE, OTHER_NODE, World, assert_accepted, event, fast, passes};

/// A pod of `app` on `node`, with a uid of its own.
fn pod(ns: &str, name: &str, node: &str, app: &str) -> Value {
    let mut p = pod_object(ns, name, node, app, "ReplicaSet");
    p["metadata"]["uid"] = json!(format!("uid-{ns}-{name}"));
    p
}

/// The pods of the plain node in two namespaces, a DaemonSet pod beside them, and a pod on
/// the other node.
fn seed(w: &World) {
    w.fake.insert(pod("shop", "web-1", NODE, "web"));
    w.fake.insert(pod("shop", "web-2", NODE, "web"));
    w.fake.insert(pod("billing", "api-1", NODE, "api"));
    let mut ds = pod("kube-system", "aws-node-abc", NODE, "aws-node");
    ds["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "aws-node", "uid": "uid-ds", "controller": true}]);
    w.fake.insert(ds);
    w.fake.insert(pod("shop", "web-9", OTHER_NODE, "web"));
}

/// forewarn's Events about pods.
fn pod_events(w: &World) -> Vec<Value> {
    w.fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["regarding"]["kind"] == "Pod")
        .collect()
}

/// `namespace/name` of the pods the Events regard, sorted.
fn regarded(events: &[Value]) -> Vec<String> {
    let mut pods: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["regarding"]["namespace"].as_str().unwrap(),
                e["regarding"]["name"].as_str().unwrap()
            )
        })
        .collect();
    pods.sort();
    pods
}

fn is_eviction(r: &RecordedRequest) -> bool {
    r.method == "POST" && r.path.ends_with("/eviction")
}

/// An Event create in a namespace other than `default` (where the node's Events are).
fn is_pod_event(r: &RecordedRequest) -> bool {
    r.method == "POST"
        && r.path.starts_with("/apis/events.k8s.io/v1/namespaces/")
        && !r
            .path
            .starts_with("/apis/events.k8s.io/v1/namespaces/default/")
}

fn is_pod_list(r: &RecordedRequest) -> bool {
    r.method == "GET" && r.path == "/api/v1/pods"
}

/// In each drain pass of the request log (from one `list` of pods to the next), no pod Event is
/// asked before the pass's last eviction.
fn assert_events_after_evictions(requests: &[RecordedRequest]) {
    let starts: Vec<usize> = (0..requests.len())
        .filter(|&i| is_pod_list(&requests[i]))
        .chain([requests.len()])
        .collect();
    assert!(starts.len() > 1, "no drain pass");
    for pass in starts.windows(2) {
        let pass = &requests[pass[0]..pass[1]];
        let last_eviction = pass.iter().rposition(is_eviction);
        let first_event = pass.iter().position(is_pod_event);
        if let (Some(e), Some(ev)) = (last_eviction, first_event) {
            assert!(
                ev > e,
                "a pod Event before the pass's last eviction: {pass:#?}"
            );
        }
    }
}

#[tokio::test]
async fn each_evicted_pod_gets_one_event_in_its_namespace_about_it() {
    let mut w = World::plain().await;
    // A short notice: the pod behind a budget is left at the deadline.
    w.config.interruption_notice = chrono::Duration::seconds(3);
    w.config.deadline_margin = chrono::Duration::seconds(1);
    seed(&w);
    w.fake.insert(pod("billing", "locked-1", NODE, "locked"));
    w.fake
        .insert(pdb_object("billing", "locked-pdb", "locked", 1));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-pod-events"))
        .await;
    let deadline = plan.actions[0].deadline.unwrap();
    let out = w.run(&plan).await;

    let drain = out.drain.unwrap();
    assert_eq!(drain.left.len(), 1, "{drain:?}");
    assert_eq!(drain.pod_events.recorded, 3, "{drain:?}");
    assert_eq!(drain.pod_events.given_up, 0, "{drain:?}");
    let events = pod_events(&w);
    // One per evicted pod; none on the DaemonSet's, the one left, the other node's.
    assert_eq!(
        regarded(&events),
        ["billing/api-1", "shop/web-1", "shop/web-2"]
    );
    let goes_at = (deadline + chrono::Duration::seconds(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for e in &events {
        let r = &e["regarding"];
        assert_eq!(e["metadata"]["namespace"], r["namespace"], "{e}");
        assert_eq!(r["apiVersion"], "v1");
        assert_eq!(
            r["uid"],
            format!(
                "uid-{}-{}",
                r["namespace"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        );
        assert_eq!(e["related"]["kind"], "Node");
        assert_eq!(e["related"]["name"], NODE);
        assert_eq!(e["reason"], "SpotInterruption");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["reportingController"], "forewarn");
        let note = e["note"].as_str().unwrap();
        assert!(note.contains(ID) && note.contains(NODE), "{note}");
        assert!(
            note.ends_with(&format!("the instance goes at {goes_at}.")),
            "{note}"
        );
    }
    let requests = w.fake.requests();
    assert_events_after_evictions(&requests);
    assert_accepted(&requests);
}

#[tokio::test]
async fn a_redelivered_event_records_no_second_pod_event() {
    let w = World::plain().await;
    w.fake.insert(pod("shop", "web-1", NODE, "web"));
    w.fake.insert(pod("shop", "web-2", NODE, "web"));
    let plan = w.plan(&event(EventKind::Impaired, "ev-again")).await;
    let out = w.run(&plan).await;
    assert_eq!(out.drain.unwrap().pod_events.recorded, 2);
    // The same event again, a pod of the same name back on the node (its eviction accepted
    // again): its Event is there (409), not made twice.
    w.fake.insert(pod("shop", "web-1", NODE, "web"));
    w.fake.clear_requests();
    let out = w.run(&plan).await;
    let drain = out.drain.unwrap();
    assert_eq!(drain.evicted, ["shop/web-1"]);
    assert_eq!(
        (drain.pod_events.recorded, drain.pod_events.existed),
        (0, 1)
    );
    let events = pod_events(&w);
    assert_eq!(regarded(&events), ["shop/web-1", "shop/web-2"]);
    assert!(events.iter().all(|e| e["reason"] == "InstanceImpaired"));
    // No drain deadline is the instance's end: the note says so.
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.contains("when the instance goes is not known"),
        "{note}"
    );
    let creates: Vec<u16> = w
        .fake
        .requests()
        .iter()
        .filter(|r| is_pod_event(r))
        .map(|r| r.status)
        .collect();
    assert_eq!(creates, [409]);
}

#[tokio::test]
async fn a_dry_run_says_what_it_would_record_and_sends_no_event() {
    let w = World::plain().await;
    seed(&w);
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-dry")).await;
    let executor = w.executor().dry_run(true);
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    assert_eq!(out.drain.as_ref().unwrap().would_evict.len(), 3);
    assert!(
        out.result
            .detail
            .contains("would record an Event on each pod evicted (3)"),
        "{}",
        out.result.detail
    );
    assert!(
        !w.fake
            .requests()
            .iter()
            .any(|r| r.method == "POST" && r.path.contains("events")),
        "a dry run sent an Event"
    );
    assert!(pod_events(&w).is_empty());
}

/// Pod Events past the pass's count, or past its time budget, or with the client's rate limit
/// loaded, are given up and counted; every eviction still goes, before any pod Event.
#[tokio::test]
async fn pod_events_past_the_budget_or_a_loaded_limit_are_given_up() {
    let one = ExecutorSettings {
        pod_events_per_pass: 1,
        ..fast()
    };
    let no_time = ExecutorSettings {
        pod_event_budget: std::time::Duration::ZERO,
        ..fast()
    };
    // (settings, a client-side limit, pod Events recorded)
    let cases = [
        (one, None, 1),
        (no_time, None, 0),
        // One request a second, one at once: the drain's requests keep it short of tokens for
        // over a second.
        (fast(), Some((1.0, 1)), 0),
    ];
    for (settings, limit, recorded) in cases {
        let w = World::plain().await;
        seed(&w);
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-budget"))
            .await;
        let clients = w.clients.clone().with_rate_limit(limit);
        let executor = KubeExecutor::new(clients, &w.config).with_settings(settings);
        let out = passes(&executor, &plan).await.unwrap().remove(0);
        let drain = out.drain.unwrap();
        // The drain is not affected: every pod evicted, the drain complete.
        assert_eq!(drain.evicted.len(), 3, "{limit:?}: {drain:?}");
        assert!(drain.complete(), "{limit:?}: {drain:?}");
        assert_eq!(
            (drain.pod_events.recorded, drain.pod_events.given_up),
            (recorded, 3 - recorded),
            "{limit:?}"
        );
        assert_eq!(pod_events(&w).len(), recorded, "{limit:?}");
        let requests = w.fake.requests();
        assert_eq!(
            requests.iter().filter(|r| is_eviction(r)).count(),
            3,
            "{limit:?}"
        );
        assert_events_after_evictions(&requests);
    }
}
