//! The simulation at a benchmark's size: every evicted pod rescheduled, on room or on the nodes
//! the autoscaler launches. The small runs are part of the suite and assert no time (how fast
//! the fake is belongs to the benchmarks); `cargo test -p kube-fake --test scale -- --ignored`
//! runs the benchmark's size (1,000 nodes, 10,000 pods) and prints how long its drains took.

mod common;

use std::time::{Duration, Instant};

use common::sim::{Clock, running_with, sized_node};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{EvictParams, Patch, PatchParams};
use kube_fake::{AutoscalerSettings, KubeFake, NodeGroup};
use serde_json::json;

/// `nodes` nodes of 4 cpus holding `per_node` pods of 300m each (100 ReplicaSets), then
/// `drained` nodes cordoned and their pods evicted through the API: each replacement is
/// scheduled elsewhere at once when there is room (10 a node), else waits for the nodes the
/// autoscaler launches (13 a node). Answers how long the drain took.
async fn drain(nodes: usize, drained: usize, per_node: usize) -> Duration {
    let fake = KubeFake::builder()
        .replicasets()
        .autoscaler(AutoscalerSettings::default().group(NodeGroup::new("spot")))
        .start()
        .await;
    let clock = Clock::install(&fake);
    fake.set_eviction_grace(Duration::from_secs(30));
    let mut rs_uids = Vec::new();
    for r in 0..100 {
        let rs = fake.insert(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("rs{r}"), "namespace": "web"},
            "spec": {"replicas": nodes * per_node / 100, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "nginx",
                    "resources": {"requests": {"cpu": "300m"}}}]}}},
        }));
        rs_uids.push(rs["metadata"]["uid"].clone());
    }
    for n in 0..nodes {
        fake.insert(sized_node(&format!("n{n:04}"), "4", "16Gi"));
        for p in 0..per_node {
            let r = (n * per_node + p) % 100;
            let mut pod = running_with(&format!("p{n:04}-{p}"), &format!("n{n:04}"), "300m", 0);
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": format!("rs{r}"), "uid": rs_uids[r],
                "controller": true}]);
            fake.insert(pod);
        }
    }
    let started = Instant::now();
    let node_api: Api<Node> = Api::all(fake.client());
    let pods: Api<Pod> = Api::namespaced(fake.client(), "web");
    for n in 0..drained {
        clock.advance(1);
        let name = format!("n{n:04}");
        let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
        node_api
            .patch(&name, &PatchParams::default(), &cordon)
            .await
            .unwrap();
        for p in 0..per_node {
            pods.evict(&format!("p{n:04}-{p}"), &EvictParams::default())
                .await
                .unwrap();
        }
    }
    let took = started.elapsed();
    clock.advance(60);
    fake.settle();
    let timeline = fake.pod_timeline();
    let replacements = timeline
        .iter()
        .filter(|l| !l.name.starts_with('p'))
        .collect::<Vec<_>>();
    assert_eq!(replacements.len(), drained * per_node);
    assert!(replacements.iter().all(|l| l.running_at.is_some()));
    let launched = fake.launched_nodes().len();
    if per_node <= 10 {
        assert_eq!(launched, 0, "there was room");
    } else {
        // 13 pods of 300m a node make 3.9 cpus: a 4-cpu node takes 13 of them.
        assert_eq!(launched, drained, "one new node a drained node");
    }
    took
}

#[tokio::test]
async fn a_drain_of_a_hundred_node_cluster_reschedules_every_pod() {
    drain(100, 10, 10).await;
}

#[tokio::test]
async fn a_drain_of_a_full_hundred_node_cluster_brings_new_nodes() {
    drain(100, 10, 13).await;
}

#[tokio::test]
#[ignore = "the benchmark's size: run with --ignored"]
async fn a_drain_of_a_thousand_node_cluster() {
    let took = drain(1000, 100, 10).await;
    eprintln!("1,000 nodes, 10,000 pods: 100 nodes drained in {took:?}");
    let took = drain(1000, 100, 13).await;
    eprintln!("1,000 full nodes, 13,000 pods: 100 nodes drained in {took:?}");
}
