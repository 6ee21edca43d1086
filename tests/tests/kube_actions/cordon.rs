//! Cordon and taint (and the drain) of a plain node: the first plan and the same plan again,
//! conflicting cordons, a taint added between read and patch, a node that is gone or turns out
//! to be control-plane, a dry run, and an API that fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use forewarn::adapters::kube::{EventOutcome, NodeOutcome, REPORTING_CONTROLLER, event_name};
use forewarn::domain::config::{Action, LABEL_EXCLUDE_LB};
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::pod_object;
use kube_fake::{Fault, Method};
use serde_json::{Value, json};

use crate::delete::nodeclaim;
use crate::support::{
    ID, NODE, TAINT, World, assert_accepted, assert_nothing_written_again, assert_said, event,
    eviction_path, execute_passes, node, passes, paths, seed_pods, taints, written,
};

#[tokio::test]
async fn spot_interruption_cordons_taints_and_drains_a_plain_node() {
    let w = World::plain().await;
    seed_pods(&w);
    let ev = event(EventKind::SpotInterruption, "ev-spot-1");
    let plan = w.plan(&ev).await;
    assert_eq!(plan.actions[0].action, Action::CordonDrain);
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    let n = assert_cordoned_and_tainted(&w, &out);
    assert_drained_but_what_a_drain_leaves(&w, &out);
    assert_one_patch_and_critical_pods_last(&w);
    assert_events_of_decision_cordon_and_drain(&w, &n, &out);
}

/// The node is cordoned and tainted, its other taint kept and the load-balancer label added; the
/// node as it is now.
fn assert_cordoned_and_tainted(w: &World, out: &NodeOutcome) -> Value {
    assert_said(out, &format!("cordoned node/{NODE}"));
    let n = w.node(NODE).unwrap();
    assert_eq!(n["spec"]["unschedulable"], true);
    assert_eq!(
        taints(&n),
        vec![
            ("dedicated".into(), "batch".into(), "NoSchedule".into()),
            (
                TAINT.into(),
                "spot-interruption".into(),
                "NoSchedule".into()
            ),
        ],
        "the unrelated taint is kept"
    );
    assert_eq!(n["metadata"]["labels"][LABEL_EXCLUDE_LB], "true");
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    n
}

/// Every pod but the ones a drain leaves (DaemonSet, mirror, finished) evicted; the other node's
/// pod left alone.
fn assert_drained_but_what_a_drain_leaves(w: &World, out: &NodeOutcome) {
    let drain = out.drain.clone().unwrap();
    let evicted: BTreeSet<&str> = drain.evicted.iter().map(String::as_str).collect();
    assert_eq!(
        evicted,
        BTreeSet::from(["default/web-1", "default/web-2", "kube-system/coredns-1"])
    );
    assert!(
        drain.left.is_empty() && drain.terminating.is_empty(),
        "{drain:?}"
    );
    let skipped: BTreeMap<&str, &str> = drain
        .skipped
        .iter()
        .map(|s| (s.pod.as_str(), s.why))
        .collect();
    assert_eq!(
        skipped,
        BTreeMap::from([
            ("batch/job-1", "succeeded"),
            ("kube-system/aws-node-abc", "daemonset"),
            ("kube-system/kube-proxy-node", "mirror"),
        ])
    );
    for (ns, name) in [
        ("default", "web-1"),
        ("default", "web-2"),
        ("kube-system", "coredns-1"),
    ] {
        assert!(w.pod(ns, name).is_none(), "{ns}/{name} evicted");
    }
    for (ns, name) in [
        ("default", "web-3"),
        ("kube-system", "aws-node-abc"),
        ("kube-system", "kube-proxy-node"),
        ("batch", "job-1"),
    ] {
        assert!(w.pod(ns, name).is_some(), "{ns}/{name} left alone");
    }
}

/// The requests: one patch (the full taint list, the resourceVersion read), the critical pod
/// evicted after the others, the pods listed by node.
fn assert_one_patch_and_critical_pods_last(w: &World) {
    let requests = w.fake.requests();
    assert_accepted(&requests);
    // One patch; the critical pod evicted after the others; the pods listed by node.
    assert_eq!(
        paths(&requests, Method::PATCH),
        vec![format!("/api/v1/nodes/{NODE}")]
    );
    let posts = paths(&requests, Method::POST);
    let evictions: Vec<&String> = posts.iter().filter(|p| p.ends_with("/eviction")).collect();
    assert_eq!(evictions.len(), 3);
    assert_eq!(
        evictions[2],
        &eviction_path("kube-system", "coredns-1"),
        "critical pods last: {evictions:?}"
    );
    let pod_list = requests
        .iter()
        .find(|r| r.method == Method::GET && r.path == "/api/v1/pods")
        .unwrap();
    assert_eq!(
        pod_list.query_param("fieldSelector").as_deref(),
        Some(format!("spec.nodeName={NODE}").as_str())
    );
    // The patch: the full taint list and the resourceVersion read.
    let patch = requests
        .iter()
        .find(|r| r.method == Method::PATCH)
        .and_then(|r| r.body.clone())
        .unwrap();
    assert!(patch["metadata"]["resourceVersion"].is_string(), "{patch}");
    assert_eq!(patch["spec"]["taints"].as_array().unwrap().len(), 2);
}

/// The Events of the decision, the cordon and the drain, on the node `n`.
fn assert_events_of_decision_cordon_and_drain(w: &World, n: &Value, out: &NodeOutcome) {
    // Events: the decision, the cordon, the drain.
    let events = w.events();
    assert_eq!(
        events.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["Cordoned", "Drained", "SpotInterrupted"]
    );
    let decision = &events["SpotInterrupted"];
    assert_eq!(decision["type"], "Warning");
    assert_eq!(decision["action"], "CordonDrain");
    assert_eq!(decision["reportingController"], REPORTING_CONTROLLER);
    assert_eq!(decision["reportingInstance"], "forewarn-test");
    assert_eq!(decision["regarding"]["kind"], "Node");
    assert_eq!(decision["regarding"]["name"], NODE);
    assert_eq!(decision["regarding"]["uid"], n["metadata"]["uid"]);
    assert_eq!(decision["metadata"]["namespace"], "default");
    assert_eq!(
        decision["metadata"]["name"],
        event_name(NODE, "ev-spot-1", "SpotInterrupted")
    );
    assert!(
        decision["note"]
            .as_str()
            .unwrap()
            .contains("spot-interruption"),
        "{decision}"
    );
    assert!(decision["eventTime"].is_string());
    // The pass that evicted left the pods terminating; the next one found them gone.
    assert_eq!(out.drain.as_ref().unwrap().evicted.len(), 3, "{out:?}");
    assert_eq!(events["Drained"]["type"], "Normal");
    assert!(
        events["Drained"]["note"]
            .as_str()
            .unwrap()
            .starts_with("Drained: no pod left to evict"),
        "{}",
        events["Drained"]
    );
    assert!(
        out.result.detail.contains("cordoned node/"),
        "{}",
        out.result.detail
    );
}

#[tokio::test]
async fn a_second_identical_plan_writes_nothing() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-spot-2"))
        .await;
    w.run(&plan).await;
    let rv = w.fake.resource_version();
    w.fake.clear_requests();

    let again = w.run(&plan).await;

    assert_eq!(w.fake.writes().len(), again.events.len());
    assert_nothing_written_again(&w.fake);
    assert_eq!(w.fake.resource_version(), rv);
    assert_said(&again, &format!("cordoned node/{NODE}"));
    let drain = again.drain.unwrap();
    assert!(drain.evicted.is_empty() && drain.left.is_empty());
    assert!(
        again.events.iter().all(|(_, o)| *o == EventOutcome::Exists),
        "{:?}",
        again.events
    );
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn events_that_cannot_be_recorded_are_said_and_the_cordon_stands() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-no-events"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Cordon);
    w.fake.inject(
        Fault::new(403)
            .method(Method::POST)
            .path_contains("/events")
            .times(10),
    );

    let out = w.run(&plan).await;

    assert!(w.events().is_empty());
    let detail = &out.result.detail;
    let said = format!("cordoned node/{NODE}; Event not recorded: ");
    assert!(detail.starts_with(&said), "{detail}");
    assert!(
        detail.contains("; Event not recorded: Cordoned: "),
        "{detail}"
    );
}

#[tokio::test]
async fn a_conflicting_cordon_is_read_again_and_retried() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-409"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Cordon);
    w.fake.clear_requests();
    w.fake.inject(
        Fault::new(409)
            .method(Method::PATCH)
            .path_contains("/api/v1/nodes/")
            .times(1),
    );

    let out = w.run(&plan).await;

    assert_said(&out, &format!("cordoned node/{NODE}"));
    let node_requests: Vec<(Method, u16)> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("/api/v1/nodes/{NODE}"))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        node_requests,
        vec![
            (Method::GET, 200),
            (Method::PATCH, 409),
            (Method::GET, 200),
            (Method::PATCH, 200)
        ]
    );
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], true);
    assert_eq!(
        taints(&w.node(NODE).unwrap())[1],
        (
            TAINT.into(),
            "rebalance-recommendation".into(),
            "NoSchedule".into()
        )
    );
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_node_that_keeps_conflicting_is_an_error() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-409s"))
        .await;
    w.fake.inject(
        Fault::new(409)
            .method(Method::PATCH)
            .path_contains("/api/v1/nodes/")
            .times(100),
    );

    let err = execute_passes(&w.executor(), &plan).await.unwrap_err();

    assert_eq!(err.subject, ID);
    assert!(err.to_string().contains(NODE), "{err}");
    assert!(
        err.to_string().contains("conflicting after 5 attempts"),
        "{err}"
    );
}

#[tokio::test]
async fn a_taint_added_between_read_and_patch_is_kept() {
    // A real conflict: another controller adds a taint after forewarn read the node and before
    // its patch arrives. The resourceVersion in the patch makes the server answer 409; forewarn
    // reads the node again and the other taint survives.
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-race"))
        .await;
    w.fake.clear_requests();
    let mut changed = w.fake.get("v1", "Node", None, NODE).unwrap();
    changed["spec"]["taints"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "other-controller", "effect": "NoSchedule"}));
    // The other controller's write lands right after forewarn's read of the node.
    w.fake
        .after_answer(Method::GET, format!("/api/v1/nodes/{NODE}"), changed);

    let out = w.run(&plan).await;

    assert_said(&out, &format!("cordoned node/{NODE}"));
    let keys: Vec<String> = taints(&w.node(NODE).unwrap())
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(keys, vec!["dedicated", "other-controller", TAINT]);
    let patches: Vec<u16> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::PATCH)
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, vec![409, 200]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_node_that_is_gone_is_success() {
    let w = World::plain().await;
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-gone")).await;
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.clear_requests();

    let results = execute_passes(&w.executor(), &plan).await.unwrap();

    assert!(
        results[0].detail.contains("is gone"),
        "{}",
        results[0].detail
    );
    // The cordon pass went by the node the directory had just read: its one patch found no
    // node (404), and nothing else was sent.
    assert_eq!(written(&w.fake), vec![("PATCH".to_string(), 404)]);
    assert_accepted(&w.fake.requests());
}

/// An uncordon (the way back) whose node is gone says so once.
#[tokio::test]
async fn an_uncordon_of_a_node_that_is_gone_says_so_once() {
    let w = World::plain().await;
    let mut plan = w.plan(&event(EventKind::SpotInterruption, "ev-undo")).await;
    plan.actions[0].action = Action::Uncordon;
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.clear_requests();

    let results = execute_passes(&w.executor(), &plan).await.unwrap();

    assert_eq!(results[0].detail, format!("node/{NODE} is gone"));
    assert_eq!(written(&w.fake), vec![]);
}

#[tokio::test]
async fn a_control_plane_node_gets_no_write() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-cp")).await;
    assert_eq!(plan.actions[0].action, Action::CordonDrain);
    // The node turned out to be control-plane (live labels): the executor checks again.
    let mut cp = w.node(NODE).unwrap();
    cp["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(cp);
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    // The cordon pass went by the node the directory had just read; its patch, conditional on
    // that read's resourceVersion, was refused (409), and the node read again is verified
    // again: refused, nothing written.
    assert!(
        out.result
            .refused
            .as_deref()
            .unwrap()
            .contains("control-plane"),
        "{out:?}"
    );
    assert_eq!(written(&w.fake), vec![("PATCH".to_string(), 409)]);
    assert_eq!(w.node(NODE).unwrap()["spec"].get("unschedulable"), None);
    // Read afresh (the directory's read too old to stand in), it is refused before any write.
    w.clock.advance(Duration::from_secs(11));
    w.fake.clear_requests();
    let out = w.run(&plan).await;
    assert!(
        out.result
            .refused
            .as_deref()
            .unwrap()
            .contains("control-plane"),
        "{out:?}"
    );
    assert_eq!(w.fake.writes(), vec![]);

    // By taint alone, too; and the decision core never plans anything for one.
    let mut tainted = node(NODE, ID);
    tainted["spec"]["taints"] =
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    w.fake.insert(tainted);
    let out = w.run(&plan).await;
    assert!(out.result.refused.is_some());
    let planned = w.plan(&event(EventKind::SpotInterruption, "ev-cp-2")).await;
    assert_eq!(planned.actions[0].action, Action::None);
    assert_eq!(w.fake.writes(), vec![]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_says_what_it_would_do() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-dry")).await;
    w.fake.clear_requests();
    let executor = w.executor().dry_run(true);

    let out = passes(&executor, &plan).await.unwrap().remove(0);

    assert_eq!(w.fake.writes(), vec![]);
    let drain = out.drain.as_ref().unwrap();
    assert_eq!(
        drain
            .would_evict
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["default/web-1", "default/web-2", "kube-system/coredns-1"]
    );
    assert!(drain.evicted.is_empty());
    let detail = out.result.detail;
    assert!(detail.starts_with("dry run"), "{detail}");
    assert!(
        detail.contains(&format!("; would cordon and taint node/{NODE}; ")),
        "{detail}"
    );
    assert!(detail.contains("would evict 3 pods"), "{detail}");
    assert!(
        detail.contains("would record Events SpotInterrupted"),
        "{detail}"
    );

    // A delete, too.
    let owned = w.node(NODE).unwrap();
    let mut owned = owned;
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "default-x1", "uid": "uid-nc"}]);
    w.fake.insert(owned);
    w.fake.insert(nodeclaim("default-x1"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-dry-2"))
        .await;
    w.fake.clear_requests();
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    assert_said(&out, "would delete nodeclaim/default-x1");
    assert_eq!(w.fake.writes(), vec![]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_failing_api_is_an_error_so_the_event_comes_back() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-500")).await;
    // The pods of the node cannot be listed: nothing of the drain can be done.
    w.fake.inject(
        Fault::new(500)
            .method(Method::GET)
            .path_contains("/api/v1/pods")
            .times(100),
    );

    let err = execute_passes(&w.executor(), &plan).await.unwrap_err();

    assert_eq!(err.subject, ID);
    assert!(err.to_string().contains("list pods on node/"), "{err}");
    assert!(err.to_string().contains(": 500"), "{err}");

    // A 503 that clears up is retried in place.
    w.fake.clear_faults();
    w.fake
        .inject(Fault::new(503).path_contains("/eviction").times(1));
    let out = w.run(&plan).await;
    assert_eq!(
        out.drain.unwrap().evicted,
        vec!["default/web-1".to_string()]
    );
}
