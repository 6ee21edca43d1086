//! Every pass verifies live what it acts on: a node name reused by another instance, forewarn's
//! taint removed or the node gone, evictions answered 500 and 409, a NodeClaim of another
//! instance.

use std::collections::BTreeMap;

use forewarn::domain::config::Action;
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::pod_object;
use forewarn::ports::Pass;
use kube_fake::{Fault, KubeFake, RecordedRequest};
use serde_json::json;

use crate::delete::nodeclaim;
use crate::support::{ID, NODE, OTHER_ID, OTHER_NODE, World, drain_pass, event, node};

/// The writes the fake accepted (2xx).
fn accepted_writes(fake: &KubeFake) -> Vec<RecordedRequest> {
    fake.writes()
        .into_iter()
        .filter(|w| (200..300).contains(&w.status))
        .collect()
}

#[tokio::test]
async fn a_pass_on_a_node_name_reused_by_another_instance_is_refused() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-reused"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // The instance is gone and a new one registers under the same name, cordoned by forewarn for
    // another warning, with a pod of its own.
    w.fake.remove("v1", "Node", None, NODE);
    let mut reused = node(NODE, "i-0a1b2c3d4e5f6ffff");
    reused["spec"]["unschedulable"] = json!(true);
    reused["spec"]["taints"] = json!([{"key": "forewarn.io/interruption",
        "value": "rebalance-recommendation", "effect": "NoSchedule"}]);
    w.fake.insert(reused);
    w.fake
        .insert(pod_object("default", "new-1", NODE, "web", "ReplicaSet"));
    w.fake.clear_requests();

    for pass in [drain_pass(true), drain_pass(false)] {
        let out = w.executor().run(&plan, pass).await.unwrap().remove(0);
        let why = out.result.refused.clone().expect("refused");
        assert!(
            why.contains("i-0a1b2c3d4e5f6ffff") && why.contains(ID),
            "{why}"
        );
        assert!(!out.result.pending, "the chain ends");
        assert!(
            out.result.detail.starts_with("refused: "),
            "{}",
            out.result.detail
        );
    }
    assert_eq!(accepted_writes(&w.fake), vec![], "nothing written");
    assert!(w.pod("default", "new-1").is_some(), "its pod is untouched");
}

/// A delete of the node itself deletes the node its pass read and verified, never one that
/// runs another instance or is control-plane.
#[tokio::test]
async fn a_delete_of_a_node_now_another_instances_or_control_plane_is_refused() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::StateChange, "ev-terminated"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Delete);
    assert_eq!(
        plan.actions[0].target.as_ref().unwrap().to_string(),
        format!("node/{NODE}")
    );
    let mut control_plane = node(NODE, ID);
    control_plane["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    for (replaced, said) in [
        (node(NODE, "i-0a1b2c3d4e5f6ffff"), "i-0a1b2c3d4e5f6ffff"),
        (control_plane, "control-plane"),
    ] {
        w.fake.remove("v1", "Node", None, NODE);
        w.fake.insert(replaced);
        w.fake.clear_requests();
        let out = w.run(&plan).await;
        let why = out.result.refused.clone().expect("refused");
        assert!(why.contains(said), "{why}");
        assert_eq!(accepted_writes(&w.fake), vec![], "nothing deleted");
        assert!(w.node(NODE).is_some());
    }
}

#[tokio::test]
async fn a_drain_pass_ends_when_forewarns_taint_was_removed_or_the_node_is_gone() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-untainted"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // An operator uncordons the node and removes forewarn's taint (keeping the others).
    let mut n = w.node(NODE).unwrap();
    n["spec"]["unschedulable"] = json!(false);
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]);
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.insert(n);
    w.fake.clear_requests();
    let out = w
        .executor()
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    let why = out.result.refused.clone().expect("refused");
    assert!(why.contains("taint forewarn.io/interruption"), "{why}");
    assert!(!out.result.pending);
    assert_eq!(
        accepted_writes(&w.fake),
        vec![],
        "no cordon again, no eviction"
    );
    assert!(w.pod("default", "web-1").is_some());

    // Its node deleted between two passes: the chain ends cleanly, without an error.
    w.fake.remove("v1", "Node", None, NODE);
    let out = w
        .executor()
        .run(&plan, drain_pass(false))
        .await
        .unwrap()
        .remove(0);
    assert!(
        out.result.detail == format!("node/{NODE} is gone")
            && out.result.refused.is_none()
            && !out.result.pending,
        "{out:?}"
    );
}

#[tokio::test]
async fn eviction_500_and_409_are_that_pods_and_retried_in_the_next_pass() {
    let w = World::plain().await;
    for name in ["web-1", "web-2"] {
        w.fake
            .insert(pod_object("default", name, NODE, "web", "ReplicaSet"));
    }
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-evict-500"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    // A pod under two budgets answers 500; a conflict answers 409.
    w.fake.inject(
        Fault::new(500)
            .path_contains("/pods/web-1/eviction")
            .times(1),
    );
    w.fake.inject(
        Fault::new(409)
            .path_contains("/pods/web-2/eviction")
            .times(1),
    );
    let first = executor
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    let drain = first.drain.clone().unwrap();
    assert!(drain.pending, "{drain:?}");
    let left: BTreeMap<&str, &str> = drain
        .left
        .iter()
        .map(|l| (l.pod.as_str(), l.reason.as_str()))
        .collect();
    assert!(left["default/web-1"].starts_with("500"), "{left:?}");
    assert!(left["default/web-2"].starts_with("409"), "{left:?}");
    // The next pass evicts them.
    let second = executor
        .run(&plan, drain_pass(false))
        .await
        .unwrap()
        .remove(0);
    let drain = second.drain.unwrap();
    assert_eq!(drain.evicted.len(), 2, "{drain:?}");
}

#[tokio::test]
async fn a_delete_through_a_nodeclaim_of_another_instance_is_refused() {
    let w = World::plain().await;
    let mut n = node(NODE, ID);
    n["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "nc-other", "uid": "u"}]);
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.insert(n);
    // The NodeClaim of that name is another instance's.
    let mut claim = nodeclaim("nc-other");
    claim["status"] = json!({"providerID": format!("aws:///us-east-1a/{OTHER_ID}"),
        "nodeName": OTHER_NODE});
    w.fake.insert(claim);
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-not-owner"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Delete);
    let out = w.run(&plan).await;
    let why = out.result.refused.as_deref().unwrap_or_default();
    assert!(why.contains(OTHER_ID), "refused expected: {out:?}");
    assert!(
        out.result
            .detail
            .starts_with("refused to delete nodeclaim/nc-other: ")
    );
    assert!(
        w.fake
            .get("karpenter.sh/v1", "NodeClaim", None, "nc-other")
            .is_some()
    );
    assert!(
        out.result
            .detail
            .contains("refused to delete nodeclaim/nc-other")
    );
}
