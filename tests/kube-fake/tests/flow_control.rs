//! API Priority and Fairness (src/flow_control.rs), through the real kube client on the fake's
//! clock: other clients' load in `global-default` starves a client that shares the level with
//! them, not one that a FlowSchema puts in a level of its own.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use kube::api::{Api, ListParams};
use kube_fake::{ForeignLoad, KubeFake};
use serde_json::json;

/// The server's capacity: requests a second, in all.
const CAPACITY: f64 = 100.0;
/// The simulated window each client sends in, and the step its clock moves by.
const WINDOW: i64 = 20_000;
const STEP: i64 = 100;

/// A fake with the suggested configuration and a level `ops` of its own for group `ops`
/// (forewarn's numbers: 30 shares, 75 % lendable, borrowing up to 100 %), on a manual clock.
async fn fake(clock: &Arc<Mutex<DateTime<Utc>>>) -> KubeFake {
    let fake = KubeFake::builder().flow_control().start().await;
    let now = Arc::clone(clock);
    fake.set_clock(move || *now.lock().unwrap());
    fake.insert(json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "ops"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 30,
            "lendablePercent": 75, "borrowingLimitPercent": 100,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4,
                "queueLengthLimit": 50}}}}
    }));
    fake.insert(json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "ops"},
        "spec": {"priorityLevelConfiguration": {"name": "ops"}, "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "Group", "group": {"name": "ops"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "clusterScope": true, "namespaces": ["*"]}]}]}
    }));
    fake.set_server_capacity(Some(CAPACITY));
    fake
}

fn nodes_as(fake: &KubeFake, user: &str, groups: &[&str]) -> Api<k8s_openapi::api::core::v1::Node> {
    let mut config = fake.config();
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    Api::all(kube::Client::try_from(config).unwrap())
}

/// Requests of a greedy client answered within the window: each step it sends until one is
/// refused (at most 100), then its clock moves on. And the 429s it was answered.
async fn greedy(
    api: &Api<k8s_openapi::api::core::v1::Node>,
    clock: &Arc<Mutex<DateTime<Utc>>>,
) -> (u32, u32) {
    let (mut answered, mut refused) = (0, 0);
    for _ in 0..WINDOW / STEP {
        for _ in 0..100 {
            match api.list(&ListParams::default()).await {
                Ok(_) => answered += 1,
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    refused += 1;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        *clock.lock().unwrap() += Duration::milliseconds(STEP);
    }
    (answered, refused)
}

/// One client alone for the window, on a fresh fake: the requests that started within it (those
/// answered less those still waiting in their queue at its end: the fake answers a queued
/// request at once), the 429s, and the level that answered.
async fn run(user: &str, groups: &[&str], load: Option<ForeignLoad>) -> (u64, u32, String) {
    let clock = Arc::new(Mutex::new("2026-11-24T10:00:00Z".parse().unwrap()));
    let fake = fake(&clock).await;
    if let Some(load) = load {
        fake.set_foreign_load(load);
    }
    let (answered, refused) = greedy(&nodes_as(&fake, user, groups), &clock).await;
    let stats = fake.flow_stats();
    assert_eq!(stats.len(), 1, "one level answered: {stats:?}");
    let (level, s) = stats.into_iter().next().unwrap();
    assert_eq!(u64::from(answered), s.served + s.queued, "{s:?}");
    assert_eq!(u64::from(refused), s.rejected, "{s:?}");
    (u64::from(answered) - s.waiting, refused, level)
}

#[tokio::test]
async fn a_level_of_its_own_keeps_its_share_under_other_clients_load() {
    let busy = || Some(ForeignLoad::new("global-default", 0.8).flows(10));
    let (idle, _, level) = run("ci-runner", &[], None).await;
    assert_eq!(level, "global-default");
    let (shared, shared_refused, level) = run("ci-runner", &[], busy()).await;
    assert_eq!(level, "global-default");
    let (own, own_refused, level) = run("ops-bot", &["ops"], busy()).await;
    assert_eq!(level, "ops");
    let (own_idle, _, _) = run("ops-bot", &["ops"], None).await;
    let seconds = (WINDOW / 1000) as f64;
    let rate = |n: u64| n as f64 / seconds;
    // Alone, global-default borrows what the idle levels lend: over half the capacity (the
    // others keep what they do not lend: 95 of 245 shares).
    assert!(rate(idle) > 0.45 * CAPACITY, "idle {idle}");
    // Beside 80 % of the capacity in ten flows, one flow of eleven in a level that cannot
    // borrow more than the idle levels lend: under a tenth of the capacity.
    assert!(rate(shared) < 0.1 * CAPACITY, "shared {shared}");
    assert!(shared_refused > 0);
    // In a level of its own: what it gets there with the server idle, whatever global-default's
    // load (the level's nominal share, 30 of 275, and as much again borrowed: 21.8 a second),
    // and over three times what it gets sharing global-default.
    assert!(
        own as f64 > 0.9 * own_idle as f64,
        "own {own}, own idle {own_idle}"
    );
    assert!(own > 3 * shared, "own {own}, shared {shared}");
    assert!(
        rate(own_idle) <= 21.9,
        "borrowing stops at 100 %: {own_idle}"
    );
    assert!(own_refused > 0);
}
