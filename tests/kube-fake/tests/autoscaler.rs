//! The Cluster Autoscaler model, on a manual clock, and forewarn's placeholder flow end to end.

mod common;

use std::time::Duration;

use common::sim::{
    Clock, create, node_of, phase, read, running_with, sized_node, unschedulable_message, wants,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::EvictParams;
use kube_fake::{AutoscalerSettings, KubeFake, NodeGroup};
use serde_json::json;

async fn autoscaling_fake(group: NodeGroup) -> (KubeFake, Clock) {
    let fake = KubeFake::builder()
        .replicasets()
        .autoscaler(AutoscalerSettings::default().group(group))
        .start()
        .await;
    let clock = Clock::install(&fake);
    (fake, clock)
}

fn spot_group() -> NodeGroup {
    NodeGroup::new("spot")
        .label("topology.kubernetes.io/zone", "us-east-1b")
        .label("karpenter.sh/capacity-type", "spot")
        .allocatable("cpu", "4")
}

async fn node_names(fake: &KubeFake) -> Vec<String> {
    let nodes: Api<Node> = Api::all(fake.client());
    nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

#[tokio::test]
async fn unschedulable_pods_bring_enough_nodes_after_the_launch_delay() {
    let (fake, clock) = autoscaling_fake(spot_group()).await;
    fake.insert(sized_node("full", "1", "8Gi"));

    for name in ["w1", "w2", "w3"] {
        create(&fake, wants(name, "2", "1Gi")).await;
    }

    // 6 cpus in 4-cpu nodes: two nodes, decided now, Ready in 60 s.
    let launched = fake.launched_nodes();
    assert_eq!(launched.len(), 2, "{launched:?}");
    assert_eq!(
        launched.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["spot-1", "spot-2"]
    );
    for l in &launched {
        assert_eq!(l.group, "spot");
        assert_eq!((l.requested_at, l.ready_at), (Clock::at(0), Clock::at(60)));
        let id = l.provider_id.strip_prefix("aws:///us-east-1b/i-").unwrap();
        assert_eq!(id.len(), 17);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    assert!(
        unschedulable_message(&read(&fake, "w1").await)
            .starts_with("0/1 nodes are available: 1 Insufficient cpu.")
    );
    clock.advance(59);
    fake.settle();
    assert_eq!(node_names(&fake).await, ["full"]);
    assert_eq!(
        fake.launched_nodes().len(),
        2,
        "waiting pods launch no more"
    );

    clock.advance(1);

    assert_eq!(node_names(&fake).await, ["full", "spot-1", "spot-2"]);
    let nodes: Api<Node> = Api::all(fake.client());
    let spot1 = nodes.get("spot-1").await.unwrap();
    let labels = spot1.metadata.labels.unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "spot-1");
    assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(
        spot1.spec.unwrap().provider_id.as_deref(),
        Some(launched[0].provider_id.as_str())
    );
    let ready = &spot1.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "True")
    );
    for name in ["w1", "w2", "w3"] {
        let pod = read(&fake, name).await;
        assert_eq!(phase(&pod), "Running", "{name}");
        assert!(node_of(&pod).unwrap().starts_with("spot-"));
    }
    let timeline = fake.pod_timeline();
    assert!(timeline.iter().all(|l| l.running_at == Some(Clock::at(60))));
}

#[tokio::test]
async fn a_pod_that_fits_a_launching_node_launches_no_other() {
    let (fake, clock) = autoscaling_fake(spot_group()).await;

    create(&fake, wants("w1", "2", "0")).await;
    assert_eq!(fake.launched_nodes().len(), 1);
    clock.advance(30);
    create(&fake, wants("w2", "2", "0")).await;
    assert_eq!(fake.launched_nodes().len(), 1, "w2 fits beside w1");
    create(&fake, wants("w3", "1", "0")).await;

    let launched = fake.launched_nodes();
    assert_eq!(launched.len(), 2);
    assert_eq!(launched[1].ready_at, Clock::at(90));
    clock.advance(30);
    assert_eq!(node_of(&read(&fake, "w2").await), Some("spot-1"));
    assert_eq!(node_of(&read(&fake, "w3").await), None);
    clock.advance(30);
    assert_eq!(node_of(&read(&fake, "w3").await), Some("spot-2"));
}

#[tokio::test]
async fn expendable_pods_and_pods_no_template_fits_trigger_nothing() {
    let (fake, _clock) =
        autoscaling_fake(spot_group().taint("spot", "true", "NoSchedule").max_size(1)).await;
    let mut expendable = wants("expendable", "1", "0");
    expendable["spec"]["priority"] = json!(-11);
    expendable["spec"]["tolerations"] = json!([{"key": "spot", "operator": "Exists"}]);
    let huge = wants("huge", "16", "0");
    let intolerant = wants("intolerant", "1", "0");

    for pod in [expendable, huge, intolerant] {
        create(&fake, pod).await;
    }
    assert!(fake.launched_nodes().is_empty());

    // At the cutoff a pod counts; the group's max size then holds.
    for name in ["at-cutoff", "another"] {
        let mut pod = wants(name, "3", "0");
        pod["spec"]["priority"] = json!(-10);
        pod["spec"]["tolerations"] = json!([{"key": "spot", "operator": "Exists"}]);
        create(&fake, pod).await;
    }
    assert_eq!(fake.launched_nodes().len(), 1);
}

/// What forewarn does before a spot node goes: placeholders bring a node, then each evicted
/// pod's replacement preempts a placeholder there.
#[tokio::test]
async fn placeholders_bring_a_node_whose_room_the_replacements_take() {
    let (fake, clock) = autoscaling_fake(spot_group()).await;
    fake.set_eviction_grace(Duration::from_secs(30));
    fake.insert(sized_node("doomed", "4", "8Gi"));
    let rs = fake.insert(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d4", "namespace": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "nginx",
                    "resources": {"requests": {"cpu": "2"}}}]}}},
    }));
    for name in ["web-7d4-aaaaa", "web-7d4-bbbbb"] {
        let mut pod = running_with(name, "doomed", "2", 0);
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "web-7d4", "uid": rs["metadata"]["uid"],
            "controller": true}]);
        fake.insert(pod);
    }
    for name in ["hold-1", "hold-2"] {
        let mut hold = wants(name, "2", "0");
        hold["spec"]["priority"] = json!(-1);
        hold["spec"]["preemptionPolicy"] = json!("Never");
        hold["spec"]["terminationGracePeriodSeconds"] = json!(0);
        create(&fake, hold).await;
    }
    assert_eq!(fake.launched_nodes().len(), 1);
    clock.advance(60);
    assert_eq!(phase(&read(&fake, "hold-1").await), "Running");
    assert_eq!(phase(&read(&fake, "hold-2").await), "Running");

    clock.advance(5);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    pods.evict("web-7d4-aaaaa", &EvictParams::default())
        .await
        .unwrap();

    let timeline = fake.pod_timeline();
    let replacement = timeline
        .iter()
        .find(|l| l.owner.is_some() && l.created_at == Clock::at(65))
        .expect("a replacement");
    assert_eq!(replacement.node.as_deref(), Some("spot-1"));
    assert_eq!(replacement.running_at, Some(Clock::at(65)));
    let evicted = timeline.iter().find(|l| l.name == "web-7d4-aaaaa").unwrap();
    assert_eq!(evicted.stopped_at, Some(Clock::at(65)));
    let holds: Vec<_> = timeline
        .iter()
        .filter(|l| l.name.starts_with("hold-"))
        .collect();
    assert_eq!(
        holds.iter().filter(|l| l.stopped_at.is_some()).count(),
        1,
        "one placeholder made room"
    );
    assert_eq!(fake.launched_nodes().len(), 1);
}
