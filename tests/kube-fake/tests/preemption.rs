//! Priority preemption, PriorityClasses and the ReplicaSet model.

mod common;

use std::time::Duration;

use common::sim::{
    Clock, condition, create, node_of, phase, read, running_with, sized_node,
    unschedulable_message, wants,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::EvictParams;
use kube_fake::{KubeFake, SchedulerSettings};
use serde_json::{Value, json};

/// forewarn's placeholder: priority -1, never preempting, quick to go.
fn placeholder(name: &str, cpu: &str) -> Value {
    let mut p = wants(name, cpu, "0");
    p["metadata"]["labels"] = json!({"forewarn.io/placeholder": "true"});
    p["spec"]["priority"] = json!(-1);
    p["spec"]["preemptionPolicy"] = json!("Never");
    p["spec"]["terminationGracePeriodSeconds"] = json!(5);
    p
}

async fn fake_with_replicasets() -> KubeFake {
    KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .replicasets()
        .start()
        .await
}

#[tokio::test]
async fn a_priority_zero_pod_preempts_a_placeholder_and_binds_once_it_is_gone() {
    let fake = KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .start()
        .await;
    let clock = Clock::install(&fake);
    fake.insert(sized_node("n1", "2", "8Gi"));
    create(&fake, placeholder("hold", "2")).await;
    assert_eq!(phase(&read(&fake, "hold").await), "Running");

    create(&fake, wants("real", "2", "1Gi")).await;

    let victim = read(&fake, "hold").await;
    assert_eq!(
        victim
            .metadata
            .deletion_timestamp
            .clone()
            .unwrap()
            .0
            .to_string(),
        "2026-11-24T10:00:05Z",
        "deleted with its own grace period"
    );
    let (status, reason, _) = condition(&victim, "DisruptionTarget").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("True", Some("PreemptionByScheduler"))
    );
    let waiting = read(&fake, "real").await;
    assert_eq!(node_of(&waiting), None);
    assert_eq!(
        waiting
            .status
            .as_ref()
            .unwrap()
            .nominated_node_name
            .as_deref(),
        Some("n1")
    );
    assert_eq!(
        unschedulable_message(&waiting),
        "0/1 nodes are available: 1 Insufficient cpu."
    );

    clock.advance(4);
    assert_eq!(node_of(&read(&fake, "real").await), None);
    clock.advance(1);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    assert!(pods.get_opt("hold").await.unwrap().is_none());
    let real = read(&fake, "real").await;
    assert_eq!(node_of(&real), Some("n1"));
    assert_eq!(phase(&real), "Running");

    let timeline = fake.pod_timeline();
    let hold = timeline.iter().find(|l| l.name == "hold").unwrap();
    assert_eq!(
        (hold.running_at, hold.stopped_at),
        (Some(Clock::at(0)), Some(Clock::at(0)))
    );
    let real = timeline.iter().find(|l| l.name == "real").unwrap();
    assert_eq!(real.running_at, Some(Clock::at(5)));
}

#[tokio::test]
async fn the_victims_are_the_fewest_lowest_priority_pods_that_make_room() {
    let fake = KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .start()
        .await;
    fake.insert(sized_node("a", "4", "8Gi"));
    fake.insert(sized_node("b", "4", "8Gi"));
    // a: two low pods of 2 cpus; b: one pod at priority 5 and one at 1.
    fake.insert(running_with("a-low1", "a", "2", -1));
    fake.insert(running_with("a-low2", "a", "2", -1));
    fake.insert(running_with("b-mid", "b", "2", 5));
    fake.insert(running_with("b-low", "b", "2", 1));

    create(&fake, wants("real", "2", "0")).await;

    // On a, one victim of priority -1 suffices: a-low1 and a-low2 are alike, the name decides
    // which stays (the more important comes back first: a-low1).
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    let left: Vec<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(left, ["a-low1", "b-low", "b-mid", "real"]);
    assert_eq!(node_of(&read(&fake, "real").await), Some("a"));
}

#[tokio::test]
async fn a_never_pod_does_not_preempt_and_says_so() {
    let fake = KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .start()
        .await;
    fake.insert(sized_node("n1", "2", "8Gi"));
    fake.insert(running_with("low", "n1", "2", -5));
    let mut polite = wants("polite", "2", "0");
    polite["spec"]["priority"] = json!(100);
    polite["spec"]["preemptionPolicy"] = json!("Never");

    create(&fake, polite).await;

    assert_eq!(
        unschedulable_message(&read(&fake, "polite").await),
        "0/1 nodes are available: 1 Insufficient cpu. \
         preemption: not eligible due to preemptionPolicy=Never.."
    );
    let low = read(&fake, "low").await;
    assert!(low.metadata.deletion_timestamp.is_none());
    assert_eq!(condition(&low, "DisruptionTarget"), None);
}

#[tokio::test]
async fn priority_and_policy_come_from_priority_classes() {
    let fake = KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .start()
        .await;
    fake.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "forewarn-placeholder"}, "value": -1,
        "preemptionPolicy": "Never"}),
    );
    fake.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "web"}, "value": 1000}),
    );
    fake.insert(sized_node("n1", "2", "8Gi"));
    let mut hold = wants("hold", "2", "0");
    hold["spec"]["priorityClassName"] = json!("forewarn-placeholder");
    hold["spec"]["terminationGracePeriodSeconds"] = json!(0);
    create(&fake, hold).await;
    let mut blocked = wants("blocked", "2", "0");
    blocked["spec"]["priorityClassName"] = json!("forewarn-placeholder");
    create(&fake, blocked).await;

    // The same class: no lower priority to preempt, and Never anyway.
    assert!(
        unschedulable_message(&read(&fake, "blocked").await)
            .ends_with("preemption: not eligible due to preemptionPolicy=Never..")
    );
    let mut web = wants("web", "2", "0");
    web["spec"]["priorityClassName"] = json!("web");
    create(&fake, web).await;

    assert_eq!(node_of(&read(&fake, "web").await), Some("n1"));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    assert!(pods.get_opt("hold").await.unwrap().is_none());
}

fn replicaset(name: &str, replicas: Option<i64>) -> Value {
    let mut rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "pod-template-hash": "7d4"}},
                "spec": {"containers": [{"name": "main", "image": "nginx",
                    "resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    });
    if let Some(r) = replicas {
        rs["spec"]["replicas"] = json!(r);
    }
    rs
}

fn owned(mut pod: Value, rs: &Value) -> Value {
    pod["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
        "uid": rs["metadata"]["uid"], "controller": true}]);
    pod
}

#[tokio::test]
async fn an_evicted_replicaset_pod_is_replaced_at_once() {
    let fake = fake_with_replicasets().await;
    let clock = Clock::install(&fake);
    fake.set_eviction_grace(Duration::from_secs(30));
    fake.insert(sized_node("doomed", "4", "8Gi"));
    fake.insert(sized_node("spare", "4", "8Gi"));
    let rs = fake.insert(replicaset("web-7d4", Some(2)));
    for name in ["web-7d4-aaaaa", "web-7d4-bbbbb"] {
        fake.insert(owned(running_with(name, "doomed", "1", 0), &rs));
    }
    // A pod whose ReplicaSet is not stored is not replaced.
    let ghost = json!({"metadata": {"name": "gone", "uid": "0000"}});
    fake.insert(owned(running_with("orphan", "doomed", "1", 0), &ghost));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    clock.advance(10);
    pods.evict("web-7d4-aaaaa", &EvictParams::default())
        .await
        .unwrap();
    pods.evict("orphan", &EvictParams::default()).await.unwrap();

    let all = pods.list(&Default::default()).await.unwrap().items;
    let replacement = all
        .iter()
        .find(|p| {
            let name = p.metadata.name.as_deref().unwrap();
            name.starts_with("web-7d4-") && !name.ends_with("aaaaa") && !name.ends_with("bbbbb")
        })
        .expect("a replacement");
    assert_eq!(all.len(), 4, "2 terminating, the survivor, the replacement");
    let name = replacement.metadata.name.clone().unwrap();
    assert_eq!(name.len(), "web-7d4-".len() + 5);
    assert_eq!(
        replacement.metadata.labels.as_ref().unwrap()["pod-template-hash"],
        "7d4"
    );
    let owner = &replacement.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("ReplicaSet", "web-7d4", Some(true))
    );
    assert_eq!(owner.uid, rs["metadata"]["uid"].as_str().unwrap());
    // Scheduled at once too: the doomed node still holds the terminating pods' requests.
    assert_eq!(node_of(replacement), Some("spare"));
    assert_eq!(phase(replacement), "Running");

    let timeline = fake.pod_timeline();
    let evicted = timeline.iter().find(|l| l.name == "web-7d4-aaaaa").unwrap();
    assert_eq!(evicted.owner.as_deref(), Some("ReplicaSet/web-7d4"));
    assert_eq!(
        (evicted.running_at, evicted.stopped_at),
        (Some(Clock::at(0)), Some(Clock::at(10)))
    );
    let new = timeline.iter().find(|l| l.name == name).unwrap();
    assert_eq!(
        (new.created_at, new.running_at, new.node.as_deref()),
        (Clock::at(10), Some(Clock::at(10)), Some("spare"))
    );
}

#[tokio::test]
async fn a_replicaset_at_its_replicas_replaces_nothing_more() {
    let fake = fake_with_replicasets().await;
    fake.insert(sized_node("n1", "8", "8Gi"));
    let full = fake.insert(replicaset("full", Some(1)));
    let open = fake.insert(replicaset("unsized", None));
    fake.insert(owned(running_with("full-1", "n1", "1", 0), &full));
    fake.insert(owned(running_with("full-2", "n1", "1", 0), &full));
    fake.insert(owned(running_with("unsized-1", "n1", "1", 0), &open));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");

    // full still has one active pod, its whole scale: nothing to add.
    pods.delete("full-1", &Default::default()).await.unwrap();
    // Without spec.replicas, every pod that goes is replaced.
    pods.delete("unsized-1", &Default::default()).await.unwrap();

    let names: Vec<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"full-2".to_string()));
    assert!(names.iter().any(|n| n.starts_with("unsized-")));
}

#[tokio::test]
async fn deleting_a_node_deletes_its_pods_and_their_replicasets_replace_them() {
    let fake = fake_with_replicasets().await;
    fake.set_eviction_grace(Duration::from_secs(30));
    fake.insert(sized_node("gone", "4", "8Gi"));
    fake.insert(sized_node("left", "4", "8Gi"));
    let rs = fake.insert(replicaset("web-7d4", Some(1)));
    fake.insert(owned(running_with("web-7d4-aaaaa", "gone", "1", 0), &rs));
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(fake.client());

    nodes.delete("gone", &Default::default()).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    let all = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        1,
        "the orphan went at once, its replacement came"
    );
    assert_ne!(all[0].metadata.name.as_deref(), Some("web-7d4-aaaaa"));
    assert_eq!(node_of(&all[0]), Some("left"));
}
