//! forewarn's share of the API server: `infra/k8s/flow-control.yaml` applied to the fake, which
//! models API Priority and Fairness (kube-fake's `flow_control` module), and other clients taking
//! 80 % of the server's capacity in `global-default`. The cordons of a mass interruption, sent
//! by forewarn's executor as its handler group, complete as on an idle server with the manifest,
//! and several times slower without it, when forewarn is one more flow of `global-default`.
//!
//! The fake answers a queued request at once and counts when the real server would have started
//! it: a run's length is when the last of forewarn's requests started, on the world's clock
//! (never the wall clock).

use std::collections::BTreeMap;

use forewarn::adapters::kube::ClusterClient;
use forewarn::domain::event::EventKind;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures;
use forewarn::domain::plan::{Facts, decide};
use forewarn::ports::{Clock, NodeDirectory, Pass};
use kube_fake::{ForeignLoad, KubeFake};
use serde_json::Value;

use crate::support::{World, instance, node};

/// The nodes interrupted at once.
const NODES: usize = 40;
/// The fake server's capacity: requests a second, in all.
const CAPACITY: f64 = 100.0;
const GROUP: &str = "forewarn-handler";

/// The objects of `infra/k8s/flow-control.yaml`.
fn flow_control_manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/k8s/flow-control.yaml"),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// What one run saw: how long the cordons took (until the last request started), the level
/// forewarn's requests went to, and the nodes cordoned.
#[derive(Debug)]
struct Run {
    seconds: f64,
    level: String,
    cordoned: usize,
    waited: f64,
}

/// `NODES` nodes interrupted at once and cordoned by forewarn's executor as the handler's group,
/// on a fake with APF enforced, the manifest applied or not, `global-default` loaded or not.
async fn cordons(manifest: bool, loaded: bool) -> Run {
    let fake = KubeFake::builder().flow_control().start().await;
    let mut w = World::on(fake);
    if manifest {
        for o in flow_control_manifest() {
            w.fake.insert(o);
        }
    }
    let mut config = w.fake.config();
    config.auth_info.impersonate = Some(format!("arn:aws:sts::123456789012:assumed-role/{GROUP}"));
    config.auth_info.impersonate_groups = Some(vec![GROUP.to_string()]);
    w.clients =
        ClusterClient::new(kube::Client::try_from(config).unwrap()).with_clock(w.clock.shared());
    let mut instances = BTreeMap::new();
    for i in 0..NODES {
        let (id, name) = (
            format!("i-0a1b2c3d4e5f6{i:04}"),
            format!("ip-10-0-2-{i}.ec2.internal"),
        );
        w.fake.insert(node(&name, &id));
        instances.insert(id.clone(), instance(&id, &name));
    }
    if loaded {
        w.fake
            .set_foreign_load(ForeignLoad::new("global-default", 0.8).flows(10));
    }
    w.fake.set_server_capacity(Some(CAPACITY));
    let started = w.clock.now();

    let known: Vec<InstanceFacts> = instances.values().cloned().collect();
    let nodes = w
        .clients
        .clone()
        .nodes(&known, Default::default())
        .await
        .unwrap();
    let executor = std::sync::Arc::new(w.executor());
    let plans: Vec<_> = instances
        .keys()
        .map(|id| {
            let ev = fixtures::event(EventKind::SpotInterruption, &format!("ev-{id}"), id)
                .time(w.clock.now())
                .build();
            decide(&ev, Facts::new(&instances, &nodes), &w.config)
        })
        .collect();
    // Every cordon at once, as the executions of a mass interruption send them.
    let mut runs = tokio::task::JoinSet::new();
    for plan in plans {
        let executor = std::sync::Arc::clone(&executor);
        runs.spawn(async move { executor.run(&plan, Pass::Cordon).await });
    }
    while let Some(outcome) = runs.join_next().await {
        outcome.unwrap().unwrap();
    }

    let stats = w.fake.flow_stats();
    assert_eq!(stats.len(), 1, "one level served forewarn: {stats:?}");
    let (level, s) = stats.into_iter().next().unwrap();
    let last = s.last_start.unwrap().max(w.clock.now());
    Run {
        seconds: (last - started).num_milliseconds() as f64 / 1000.0,
        level,
        cordoned: w
            .fake
            .list("v1", "Node")
            .iter()
            .filter(|n| n["spec"]["unschedulable"] == true)
            .count(),
        waited: s.waited.as_secs_f64(),
    }
}

#[tokio::test]
async fn with_its_own_priority_level_forewarns_cordons_ignore_other_clients_load() {
    let own_idle = cordons(true, false).await;
    let own_loaded = cordons(true, true).await;
    let shared_idle = cordons(false, false).await;
    let shared_loaded = cordons(false, true).await;
    for run in [&own_idle, &own_loaded, &shared_idle, &shared_loaded] {
        assert_eq!(run.cordoned, NODES, "{run:?}");
    }
    assert_eq!(own_idle.level, "forewarn");
    assert_eq!(own_loaded.level, "forewarn");
    assert_eq!(shared_loaded.level, "global-default");
    // With the manifest, the load in global-default costs forewarn little: its level keeps its
    // guaranteed quarter and borrows what it may, as on an idle server.
    assert!(
        own_loaded.seconds <= 1.25 * own_idle.seconds,
        "{own_loaded:?} against {own_idle:?}"
    );
    // Without it, forewarn is one flow of eleven in global-default: several times slower than
    // with it, and than on an idle server.
    assert!(
        shared_loaded.seconds >= 2.0 * own_loaded.seconds,
        "{shared_loaded:?} against {own_loaded:?}"
    );
    assert!(
        shared_loaded.seconds >= 3.0 * shared_idle.seconds,
        "{shared_loaded:?} against {shared_idle:?}"
    );
    // The requests waited in their queues longer, added up, without the manifest.
    assert!(
        shared_loaded.waited > 1.5 * own_loaded.waited,
        "{shared_loaded:?} against {own_loaded:?}"
    );
}
