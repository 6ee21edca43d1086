//! Deletes: a Karpenter node has its NodeClaim deleted, a Cluster API node its Machine, a
//! terminated plain instance its Node; each again writes nothing.

use forewarn::domain::config::Action;
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::pod_object;
use forewarn::domain::plan::Target;
use kube_fake::Method;
use serde_json::{Value, json};

use crate::support::{
    ID, NODE, OTHER_NODE, World, assert_accepted, assert_nothing_written_again, assert_said, event,
    node, paths,
};

pub(crate) fn nodeclaim(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"providerID": format!("aws:///us-east-1a/{ID}"), "nodeName": NODE},
    })
}

pub(crate) fn machine(ns: &str, name: &str, finalizers: bool) -> Value {
    let mut m = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "x"},
                 "providerID": format!("aws:///us-east-1a/{ID}")},
    });
    if finalizers {
        m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    }
    m
}

#[tokio::test]
async fn a_karpenter_node_has_its_nodeclaim_deleted() {
    let w = World::plain().await;
    let mut n = node(NODE, ID);
    n["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "default-abc12", "uid": "uid-nc", "blockOwnerDeletion": true}]);
    w.fake.insert(n);
    w.fake.insert(nodeclaim("default-abc12"));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-karpenter"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Delete);
    assert_eq!(
        plan.actions[0].target,
        Some(Target::NodeClaim {
            name: "default-abc12".into()
        })
    );
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    assert_said(&out, "deleted nodeclaim/default-abc12");
    assert!(
        w.fake
            .get("karpenter.sh/v1", "NodeClaim", None, "default-abc12")
            .is_none()
    );
    assert!(
        w.node(NODE).is_some(),
        "Karpenter drains and removes the node itself"
    );
    assert!(
        w.pod("default", "web-1").is_some(),
        "no eviction: Karpenter drains"
    );
    let requests = w.fake.requests();
    assert_eq!(
        paths(&requests, Method::DELETE),
        vec!["/apis/karpenter.sh/v1/nodeclaims/default-abc12".to_string()]
    );
    assert_eq!(paths(&requests, Method::PATCH), Vec::<String>::new());
    let events = w.events();
    assert!(events.contains_key("SpotInterrupted") && events.contains_key("Deleted"));
    assert_eq!(events["SpotInterrupted"]["action"], "Delete");
    assert_accepted(&requests);

    // Again: nothing to write.
    w.fake.clear_requests();
    let again = w.run(&plan).await;
    assert_said(&again, "nodeclaim/default-abc12 already gone");
    assert_nothing_written_again(&w.fake);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_cluster_api_node_has_its_machine_deleted() {
    let w = World::plain().await;
    let mut n = node(NODE, ID);
    n["metadata"]["annotations"] = json!({
        "cluster.x-k8s.io/machine": "md-0-7f9c",
        "cluster.x-k8s.io/cluster-namespace": "capi-clusters",
        "cluster.x-k8s.io/cluster-name": "demo",
    });
    w.fake.insert(n);
    w.fake.insert(machine("capi-clusters", "md-0-7f9c", true));
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-capi")).await;
    assert_eq!(
        plan.actions[0].target,
        Some(Target::Machine {
            namespace: "capi-clusters".into(),
            name: "md-0-7f9c".into()
        })
    );
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    assert_said(&out, "deleted machine/capi-clusters/md-0-7f9c");
    // Its finalizer keeps it, being deleted, until the CAPI controller is done.
    let m = w
        .fake
        .get(
            "cluster.x-k8s.io/v1beta1",
            "Machine",
            Some("capi-clusters"),
            "md-0-7f9c",
        )
        .unwrap();
    assert!(m["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        paths(&w.fake.requests(), Method::DELETE),
        vec![
            "/apis/cluster.x-k8s.io/v1beta1/namespaces/capi-clusters/machines/md-0-7f9c"
                .to_string()
        ]
    );
    assert_accepted(&w.fake.requests());

    // Redelivered while the Machine is still going: nothing sent.
    w.fake.clear_requests();
    let again = w.run(&plan).await;
    assert_said(
        &again,
        "machine/capi-clusters/md-0-7f9c already being deleted",
    );
    assert_nothing_written_again(&w.fake);
}

#[tokio::test]
async fn a_terminated_plain_instance_has_its_node_deleted() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::StateChange, "ev-terminated"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Delete);
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    assert_said(&out, &format!("deleted node/{NODE}"));
    assert!(w.node(NODE).is_none());
    assert!(w.node(OTHER_NODE).is_some());
    assert_eq!(
        paths(&w.fake.requests(), Method::DELETE),
        vec![format!("/api/v1/nodes/{NODE}")]
    );
    assert_accepted(&w.fake.requests());
    let events = w.events();
    assert!(events.contains_key("InstanceTerminating") && events.contains_key("Deleted"));

    w.fake.clear_requests();
    let again = w.run(&plan).await;
    assert_eq!(again.result.detail, format!("node/{NODE} already gone"));
    assert_eq!(w.fake.writes(), vec![]);
}
