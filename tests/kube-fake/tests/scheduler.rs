//! The scheduler model: fit, filters, the Unschedulable message, the start delay, and the
//! default fake left as it was.

mod common;

use std::time::Duration;

use common::node;
use common::sim::{
    Clock, condition, create, node_of, phase, read, running_with, sized_node,
    unschedulable_message, wants,
};
use kube_fake::{KubeFake, SchedulerSettings};
use serde_json::json;

async fn scheduling_fake() -> KubeFake {
    KubeFake::builder()
        .scheduler(SchedulerSettings::default())
        .start()
        .await
}

#[tokio::test]
async fn without_the_simulation_a_created_pod_stays_pending_and_unbound() {
    let fake = KubeFake::start().await;
    fake.insert(sized_node("n1", "4", "8Gi"));

    create(&fake, wants("w1", "1", "1Gi")).await;
    fake.settle();

    let pod = read(&fake, "w1").await;
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(node_of(&pod), None);
    assert_eq!(condition(&pod, "PodScheduled"), None);
    assert!(fake.pod_timeline().is_empty());
    assert!(fake.launched_nodes().is_empty());
}

#[tokio::test]
async fn a_pod_goes_to_the_node_with_room_for_its_cpu_and_memory() {
    let fake = scheduling_fake().await;
    fake.insert(sized_node("small", "1", "8Gi"));
    fake.insert(sized_node("narrow", "8", "1Gi"));
    fake.insert(sized_node("roomy", "8", "8Gi"));

    create(&fake, wants("w1", "1500m", "2Gi")).await;

    let pod = read(&fake, "w1").await;
    assert_eq!(node_of(&pod), Some("roomy"));
    assert_eq!(phase(&pod), "Running");
    assert_eq!(
        condition(&pod, "Ready").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(
        condition(&pod, "PodScheduled").map(|c| c.0).as_deref(),
        Some("True")
    );

    // roomy now has 6.5 cpu left: 7 cpus fit nowhere (narrow lacks the memory).
    create(&fake, wants("w2", "7", "2Gi")).await;
    let pod = read(&fake, "w2").await;
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(node_of(&pod), None);
    assert_eq!(
        unschedulable_message(&pod),
        "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient cpu. preemption: \
         0/3 nodes are available: 3 No preemption victims found for incoming pod.."
    );
    // Memory in binary and decimal units: 6Gi goes to the least allocated, small; then 7G
    // (6.5Gi) fits nowhere.
    create(&fake, wants("w3", "100m", "6144Mi")).await;
    assert_eq!(node_of(&read(&fake, "w3").await), Some("small"));
    create(&fake, wants("w4", "100m", "7G")).await;
    let pod = read(&fake, "w4").await;
    assert!(
        unschedulable_message(&pod).starts_with("0/3 nodes are available: 3 Insufficient memory."),
        "{}",
        unschedulable_message(&pod)
    );
}

#[tokio::test]
async fn among_fitting_nodes_the_least_allocated_wins_then_the_name() {
    let fake = scheduling_fake().await;
    for name in ["a", "b", "c"] {
        fake.insert(sized_node(name, "4", "8Gi"));
    }
    fake.insert(running_with("busy", "a", "3", 0));

    for name in ["w1", "w2", "w3"] {
        create(&fake, wants(name, "1", "1Gi")).await;
    }

    let nodes: Vec<Option<String>> = [
        read(&fake, "w1").await,
        read(&fake, "w2").await,
        read(&fake, "w3").await,
    ]
    .iter()
    .map(|p| node_of(p).map(str::to_string))
    .collect();
    assert_eq!(
        nodes,
        [Some("b".into()), Some("c".into()), Some("b".into())],
        "b and c tie (then the name), then c is the emptier"
    );
}

#[tokio::test]
async fn node_selector_and_required_affinity_choose_the_nodes() {
    let fake = scheduling_fake().await;
    for (name, zone) in [
        ("a", "us-east-1a"),
        ("b", "us-east-1b"),
        ("c", "us-east-1c"),
    ] {
        let mut n = sized_node(name, "4", "8Gi");
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!(zone);
        fake.insert(n);
    }
    let mut by_selector = wants("sel", "1", "1Gi");
    by_selector["spec"]["nodeSelector"] = json!({"topology.kubernetes.io/zone": "us-east-1b"});
    let mut by_affinity = wants("aff", "1", "1Gi");
    by_affinity["spec"]["affinity"] = json!({"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn",
             "values": ["us-east-1a", "us-east-1b"]}]},
    ]}}});
    let mut by_field = wants("field", "1", "1Gi");
    by_field["spec"]["affinity"] = json!({"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
    ]}}});
    let mut nowhere = wants("nowhere", "1", "1Gi");
    nowhere["spec"]["nodeSelector"] = json!({"gpu": "true"});

    for pod in [by_selector, by_affinity, by_field, nowhere] {
        create(&fake, pod).await;
    }

    assert_eq!(node_of(&read(&fake, "sel").await), Some("b"));
    assert_eq!(node_of(&read(&fake, "aff").await), Some("c"));
    assert_eq!(node_of(&read(&fake, "field").await), Some("a"));
    assert_eq!(
        unschedulable_message(&read(&fake, "nowhere").await),
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
    );
}

#[tokio::test]
async fn taints_cordons_and_unready_nodes_exclude_with_the_real_message() {
    let fake = scheduling_fake().await;
    let mut tainted = sized_node("tainted", "4", "8Gi");
    tainted["spec"]["taints"] =
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    fake.insert(tainted);
    let mut cordoned = sized_node("cordoned", "4", "8Gi");
    cordoned["spec"]["unschedulable"] = json!(true);
    fake.insert(cordoned);
    let mut unready = sized_node("unready", "4", "8Gi");
    unready["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    fake.insert(unready);
    fake.insert(sized_node("full", "1", "8Gi"));
    let mut soft = sized_node("soft", "4", "8Gi");
    soft["spec"]["taints"] = json!([{"key": "x", "effect": "PreferNoSchedule"}]);
    soft["spec"]["unschedulable"] = json!(true);
    fake.insert(soft);

    create(&fake, wants("plain", "2", "1Gi")).await;
    assert_eq!(
        unschedulable_message(&read(&fake, "plain").await),
        "0/5 nodes are available: 1 Insufficient cpu, \
         1 node(s) had untolerated taint {dedicated: gpu}, \
         1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         2 node(s) were unschedulable. preemption: 0/5 nodes are available: \
         1 No preemption victims found for incoming pod, \
         4 Preemption is not helpful for scheduling.."
    );

    // Tolerating the taint opens the tainted node; tolerating the cordon's taint the cordoned
    // ones (a PreferNoSchedule taint never keeps a pod out).
    let mut tolerant = wants("tolerant", "2", "1Gi");
    tolerant["spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    create(&fake, tolerant).await;
    assert_eq!(node_of(&read(&fake, "tolerant").await), Some("tainted"));
    let mut cordon_ok = wants("cordon-ok", "3", "1Gi");
    cordon_ok["spec"]["tolerations"] =
        json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]);
    create(&fake, cordon_ok).await;
    assert_eq!(node_of(&read(&fake, "cordon-ok").await), Some("cordoned"));
    let mut anything = wants("anything", "3500m", "1Gi");
    anything["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    create(&fake, anything).await;
    let placed = read(&fake, "anything").await;
    assert!(
        matches!(node_of(&placed), Some("soft" | "unready")),
        "{:?}",
        node_of(&placed)
    );
}

#[tokio::test]
async fn uncordoning_a_node_lets_a_waiting_pod_in() {
    let fake = scheduling_fake().await;
    let mut cordoned = sized_node("n1", "4", "8Gi");
    cordoned["spec"]["unschedulable"] = json!(true);
    fake.insert(cordoned);
    create(&fake, wants("w1", "1", "1Gi")).await;
    assert!(
        unschedulable_message(&read(&fake, "w1").await)
            .starts_with("0/1 nodes are available: 1 node(s) were unschedulable.")
    );

    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(fake.client());
    nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();

    assert_eq!(node_of(&read(&fake, "w1").await), Some("n1"));
}

#[tokio::test]
async fn a_bound_pod_runs_after_the_start_delay() {
    let fake = KubeFake::builder()
        .scheduler(SchedulerSettings::default().start_delay(Duration::from_secs(10)))
        .start()
        .await;
    let clock = Clock::install(&fake);
    let mut n1 = sized_node("n1", "4", "8Gi");
    n1["status"]["addresses"] = json!([{"type": "InternalIP", "address": "192.168.0.7"}]);
    fake.insert(n1);

    create(&fake, wants("w1", "1", "1Gi")).await;

    let bound = read(&fake, "w1").await;
    assert_eq!(node_of(&bound), Some("n1"));
    assert_eq!(phase(&bound), "Pending", "bound, not started");
    assert_eq!(
        condition(&bound, "PodScheduled").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(condition(&bound, "Ready"), None);
    clock.advance(9);
    assert_eq!(phase(&read(&fake, "w1").await), "Pending");
    clock.advance(1);
    let started = read(&fake, "w1").await;
    assert_eq!(phase(&started), "Running");
    assert_eq!(
        condition(&started, "Ready").map(|c| c.0).as_deref(),
        Some("True")
    );
    let status = started.status.unwrap();
    assert_eq!(status.host_ip.as_deref(), Some("192.168.0.7"));
    assert_eq!(
        status.start_time.unwrap().0.to_string(),
        "2026-11-24T10:00:10Z"
    );
    let line = &fake.pod_timeline()[0];
    assert_eq!(line.running_at, Some(Clock::at(10)));
    assert_eq!(line.node.as_deref(), Some("n1"));
}

#[tokio::test]
async fn init_containers_count_by_the_largest_and_limits_stand_for_requests() {
    let fake = scheduling_fake().await;
    fake.insert(sized_node("n1", "2", "8Gi"));
    let mut init = wants("init", "500m", "1Gi");
    init["spec"]["initContainers"] = json!([{"name": "setup", "image": "busybox",
        "resources": {"requests": {"cpu": "3"}}}]);
    let mut limited = wants("limited", "0", "0");
    limited["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "3"}});
    let mut gpu = wants("gpu", "100m", "1Gi");
    // A GPU as a limit alone: the API defaults the request to it (a request without an equal
    // limit is refused).
    gpu["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});

    for pod in [init, limited, gpu] {
        create(&fake, pod).await;
    }

    for name in ["init", "limited"] {
        assert!(
            unschedulable_message(&read(&fake, name).await)
                .starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{name}"
        );
    }
    assert!(
        unschedulable_message(&read(&fake, "gpu").await)
            .starts_with("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    );
}

#[tokio::test]
async fn seeded_pods_and_pods_of_other_schedulers_are_left_alone() {
    let fake = scheduling_fake().await;
    fake.insert(node("n1"));
    let mut other = wants("other", "1", "1Gi");
    other["spec"]["schedulerName"] = json!("my-scheduler");
    create(&fake, other).await;
    // A node without allocatable has room for nothing, not even a pod.
    create(&fake, wants("tiny", "0", "0")).await;

    let other = read(&fake, "other").await;
    assert_eq!(node_of(&other), None);
    assert_eq!(condition(&other, "PodScheduled"), None);
    assert!(
        unschedulable_message(&read(&fake, "tiny").await)
            .starts_with("0/1 nodes are available: 1 Too many pods.")
    );
}
