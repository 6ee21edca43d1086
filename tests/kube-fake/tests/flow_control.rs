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
    fake_of(clock, CAPACITY).await
}

/// [`fake`] with a server of `capacity` requests a second.
async fn fake_of(clock: &Arc<Mutex<DateTime<Utc>>>, capacity: f64) -> KubeFake {
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
    fake.set_server_capacity(Some(capacity));
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
    // Borrowing stops at 100 %: 21.8 seats, all taken at once at the start, then each once a
    // second.
    assert!(
        own_idle as f64 <= 21.82 * (seconds + 1.0),
        "borrowing stops at 100 %: {own_idle}"
    );
    assert!(own_refused > 0);
}

/// A default server: 600 seats of 10 requests a second each.
const LARGE: f64 = 6000.0;

/// `n` requests of one client sent at `pace` a second (its clock moving on `1/pace` after each),
/// on a fresh server of [`LARGE`] capacity, loaded or not with 80 % of it in `global-default`:
/// the seconds until the last would have started, the 429s, and the level that answered.
async fn paced(user: &str, groups: &[&str], loaded: bool, n: u32, pace: f64) -> (f64, u64, String) {
    let start: DateTime<Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
    let clock = Arc::new(Mutex::new(start));
    let fake = fake_of(&clock, LARGE).await;
    if loaded {
        fake.set_foreign_load(ForeignLoad::new("global-default", 0.8).flows(10));
    }
    let api = nodes_as(&fake, user, groups);
    let step = Duration::nanoseconds((1e9 / pace) as i64);
    for _ in 0..n {
        match api.list(&ListParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {}
            Err(e) => panic!("{e}"),
        }
        *clock.lock().unwrap() += step;
    }
    let stats = fake.flow_stats();
    assert_eq!(stats.len(), 1, "one level answered: {stats:?}");
    let (level, s) = stats.into_iter().next().unwrap();
    assert_eq!(s.served + s.queued + s.rejected, u64::from(n), "{s:?}");
    let last = s.last_start.unwrap();
    (
        (last - start).num_milliseconds() as f64 / 1000.0,
        s.rejected,
        level,
    )
}

/// At the scale of a default server, a client at forewarn's limit (200 requests a second) is
/// bound by its own pace in a level of its own, loaded or not: its level is guaranteed what it
/// uses of its nominal share (65 seats of 600: 654 a second), far above what it sends. In
/// `global-default`, beside ten flows of other clients taking 80 % of the server, it gets an
/// eleventh of what the level may take (some 340 a second): enough at 200 a second, not at
/// 500, where its queue fills and it is refused. A loaded server is never faster than an idle
/// one.
#[tokio::test]
async fn at_scale_a_level_of_its_own_keeps_a_client_at_its_pace_and_load_never_speeds_it_up() {
    const N: u32 = 3000;
    let run = |user: &'static str, groups: &'static [&'static str], loaded, pace| {
        paced(user, groups, loaded, N, pace)
    };
    for pace in [200.0, 500.0] {
        // The last request is sent (N - 1) / pace seconds in.
        let paced_for = f64::from(N) / pace;
        let (own_idle, refused, level) = run("ops-bot", &["ops"], false, pace).await;
        assert_eq!((level.as_str(), refused), ("ops", 0));
        let (own_loaded, refused, _) = run("ops-bot", &["ops"], true, pace).await;
        assert_eq!(refused, 0);
        let (shared_idle, refused, level) = run("ci-runner", &[], false, pace).await;
        assert_eq!((level.as_str(), refused), ("global-default", 0));
        let (shared_loaded, shared_refused, _) = run("ci-runner", &[], true, pace).await;
        for (what, s) in [
            ("own idle", own_idle),
            ("own loaded", own_loaded),
            ("shared idle", shared_idle),
        ] {
            assert!(
                s <= paced_for,
                "{pace}/s, {what}: {s} s, paced for {paced_for} s"
            );
        }
        assert!(
            own_loaded >= own_idle && own_loaded <= 1.1 * own_idle,
            "{pace}/s: own loaded {own_loaded} s, idle {own_idle} s"
        );
        assert!(
            shared_loaded >= shared_idle,
            "{pace}/s: shared loaded {shared_loaded} s, idle {shared_idle} s"
        );
        if pace < 300.0 {
            assert_eq!(shared_refused, 0, "{pace}/s");
            assert!(shared_loaded <= paced_for, "{pace}/s: {shared_loaded} s");
        } else {
            assert!(shared_refused > 0, "{pace}/s: nothing refused");
        }
    }
}
