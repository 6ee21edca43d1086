//! Drains: grace periods cut to the spot notice, disruption budgets (a replacement ready, a pod
//! still blocked at the deadline), passes that evict and return instead of waiting, critical pods
//! last, refused and rate-limited evictions, a first pass after the deadline.

use std::sync::Arc;
use std::time::Duration;

use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::{pdb_object, pod_object};
use forewarn::ports::{Clock, DrainRole, Pass};
use kube_fake::{Fault, KubeFake};
use serde_json::{Value, json};

use crate::lifecycle::RecordingLifecycle;
use crate::support::{
    NODE, OTHER_NODE, World, assert_accepted, drain_pass, event, eviction_path, evictions,
    terminating,
};

/// The grace period each eviction of `pod` asked for (`deleteOptions.gracePeriodSeconds`).
fn asked_grace(fake: &KubeFake, pod: &str) -> Vec<Option<i64>> {
    fake.requests()
        .iter()
        .filter(|r| r.path == eviction_path("default", pod))
        .map(|r| {
            r.body
                .as_ref()
                .and_then(|b| b.pointer("/deleteOptions/gracePeriodSeconds"))
                .and_then(Value::as_i64)
        })
        .collect()
}

#[tokio::test]
async fn a_pod_whose_grace_would_outlast_the_spot_notice_gets_what_is_left() {
    let w = World::plain().await;
    let mut slow = pod_object("default", "db-0", NODE, "db", "StatefulSet");
    slow["spec"]["terminationGracePeriodSeconds"] = json!(600);
    w.fake.insert(slow.clone());
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-grace"))
        .await;
    assert!(plan.actions[0].grace_to_deadline);
    let deadline = plan.actions[0].deadline.unwrap();
    let out = w.run(&plan).await;
    let asked = asked_grace(&w.fake, "db-0");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let grace = asked[0].expect("a grace period is asked for");
    assert!(
        (100..=105).contains(&grace),
        "{grace}: what is left of the 105 s"
    );
    assert!(out.drain.unwrap().complete(), "gone by the deadline");
    assert!(w.pod("default", "db-0").is_none());
    assert!(w.clock.now() <= deadline + chrono::Duration::seconds(1));

    // A drain whose deadline is not the instance's end (an ASG termination: the hook holds the
    // instance) leaves the pod its own grace period.
    let w = World::plain().await;
    w.fake.insert(slow);
    let plan = w
        .plan(&event(EventKind::AsgTermination, "ev-grace-asg"))
        .await;
    assert!(!plan.actions[0].grace_to_deadline);
    w.run(&plan).await;
    assert_eq!(asked_grace(&w.fake, "db-0"), vec![None]);
}

#[tokio::test]
async fn a_budget_blocked_pod_is_evicted_once_a_replacement_is_ready() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "web-2",
        OTHER_NODE,
        "web",
        "ReplicaSet",
    ));
    w.fake.insert(pdb_object("default", "web-pdb", "web", 2));
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-pdb")).await;
    w.fake.clear_requests();

    // The replacement becomes ready on another node while the drain retries.
    let replacement = pod_object("default", "web-3", OTHER_NODE, "web", "ReplicaSet");
    let fake_handle = &w.fake;
    let ready_at = w.clock.now() + chrono::Duration::milliseconds(300);
    let clock = &w.clock;
    let (out, ()) = tokio::join!(w.run(&plan), async move {
        clock.alarm(ready_at).await;
        fake_handle.insert(replacement);
    });

    let drain = out.drain.unwrap();
    assert_eq!(drain.evicted, vec!["default/web-1".to_string()]);
    assert!(drain.left.is_empty());
    assert!(w.pod("default", "web-1").is_none());
    let requests = w.fake.requests();
    let attempts: Vec<u16> = requests
        .iter()
        .filter(|r| r.path == eviction_path("default", "web-1"))
        .map(|r| r.status)
        .collect();
    assert!(attempts.len() >= 2, "{attempts:?}");
    assert!(
        attempts[..attempts.len() - 1].iter().all(|s| *s == 429),
        "{attempts:?}"
    );
    assert_eq!(attempts.last(), Some(&201));
    assert_accepted(&requests);
    assert!(w.events().contains_key("Drained"));
}

#[tokio::test]
async fn a_pod_still_blocked_at_the_deadline_is_reported_as_left() {
    let mut w = World::plain().await;
    // Deadline: the event time + 3 s notice - 1 s margin.
    w.config.interruption_notice = chrono::Duration::seconds(3);
    w.config.deadline_margin = chrono::Duration::seconds(1);
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(pod_object("default", "web-2", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(pod_object("default", "api-1", NODE, "api", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "web-9",
        OTHER_NODE,
        "web",
        "ReplicaSet",
    ));
    w.fake.insert(pdb_object("default", "web-pdb", "web", 3));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-deadline"))
        .await;
    let deadline = plan.actions[0].deadline.unwrap();
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    // Passes until the deadline, and one past it (the time is the world's clock's: nothing
    // slept).
    let now = w.clock.now();
    assert!(now >= deadline, "retried until the deadline");
    assert!(
        now < deadline + chrono::Duration::seconds(1),
        "{now} {deadline}"
    );
    let drain = out.drain.clone().unwrap();
    assert_eq!(drain.evicted, vec!["default/api-1".to_string()]);
    let left: Vec<&str> = drain.left.iter().map(|l| l.pod.as_str()).collect();
    assert_eq!(left.len(), 2);
    assert!(left.contains(&"default/web-1") && left.contains(&"default/web-2"));
    assert!(
        drain.left[0].reason.contains("disruption budget"),
        "{}",
        drain.left[0].reason
    );
    assert!(w.pod("default", "web-1").is_some());
    let events = w.events();
    let incomplete = &events["DrainIncomplete"];
    assert_eq!(incomplete["type"], "Warning");
    let note = incomplete["note"].as_str().unwrap();
    assert!(
        note.contains("default/web-1") && note.contains("web-pdb"),
        "{note}"
    );
    assert!(!events.contains_key("Drained"));
    let detail = out.result.detail;
    assert!(detail.contains("2 pods left"), "{detail}");
    let requests = w.fake.requests();
    assert!(
        requests
            .iter()
            .filter(|r| r.path == eviction_path("default", "web-1"))
            .count()
            > 2,
        "retried with backoff"
    );
    assert_accepted(&requests);
}

fn critical(mut pod: Value) -> Value {
    pod["spec"]["priorityClassName"] = json!("system-cluster-critical");
    pod
}

#[tokio::test]
async fn a_first_pass_evicts_and_returns_and_a_later_pass_ends_the_drain_once_the_pods_are_gone() {
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_millis(700));
    for name in ["web-1", "web-2"] {
        w.fake
            .insert(pod_object("default", name, NODE, "web", "ReplicaSet"));
    }
    let plan = w.plan(&event(EventKind::AsgTermination, "ev-passes")).await;
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());
    let started = w.clock.now();

    // The event's first delivery cordons and taints the node; the drain passes follow.
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let first = executor
        .run(
            &plan,
            Pass::Drain {
                started_at: w.clock.now(),
                role: DrainRole::First,
                heartbeat: true,
            },
        )
        .await
        .unwrap()
        .remove(0);
    let drain = first.drain.clone().unwrap();
    assert!(drain.pending, "{drain:?}");
    assert_eq!(drain.evicted.len(), 2);
    assert!(terminating(&w, "web-1") && terminating(&w, "web-2"));
    assert!(
        lifecycle.calls.lock().unwrap().is_empty(),
        "the lifecycle action is not completed while the drain goes on"
    );
    assert_eq!(lifecycle.heartbeats.lock().unwrap().len(), 1);
    assert!(first.result.heartbeat_at.is_some());
    // The drain goes on: its first pass leaves the Events of the decision to the next one
    // (nothing between the node's read and its evictions but its pods' list).
    assert!(w.events().is_empty(), "{:?}", w.events());

    // While the pods terminate: nothing evicted again, still pending, no heartbeat not due; the
    // Events the first pass left are recorded.
    let later = Pass::Drain {
        started_at: started,
        role: DrainRole::Later,
        heartbeat: false,
    };
    let owed = Pass::Drain {
        started_at: started,
        role: DrainRole::Owed,
        heartbeat: false,
    };
    let second = executor.run(&plan, owed).await.unwrap().remove(0);
    let drain = second.drain.clone().unwrap();
    assert!(drain.pending && drain.evicted.is_empty(), "{drain:?}");
    assert_eq!(drain.terminating.len(), 2);
    assert_eq!(evictions(&w), 2);
    assert_eq!(lifecycle.heartbeats.lock().unwrap().len(), 1);
    let events = w.events();
    assert!(events.contains_key("Cordoned"), "{events:?}");
    assert!(events.contains_key(&plan.event_reason), "{events:?}");
    assert!(!events.contains_key("Drained"));

    w.clock.advance(Duration::from_millis(1200));
    let last = executor.run(&plan, later).await.unwrap().remove(0);
    let drain = last.drain.clone().unwrap();
    assert!(!drain.pending && drain.complete(), "{drain:?}");
    assert_eq!(lifecycle.calls.lock().unwrap().len(), 1);
    assert!(w.events().contains_key("Drained"));

    // A duplicated continuation after the end: no eviction, the same one Drained Event.
    let again = executor.run(&plan, later).await.unwrap().remove(0);
    assert!(!again.drain.unwrap().pending);
    assert_eq!(evictions(&w), 2);
    let drained = w
        .fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == "Drained")
        .count();
    assert_eq!(drained, 1);
}

#[tokio::test]
async fn critical_pods_are_evicted_in_a_later_pass_once_the_others_are_gone() {
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_millis(300));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake.insert(critical(pod_object(
        "default",
        "dns-1",
        NODE,
        "dns",
        "ReplicaSet",
    )));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-critical"))
        .await;
    let executor = w.executor();
    let started = w.clock.now();
    // The event's first delivery cordons and taints the node; the drain passes follow.
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let first = executor
        .run(
            &plan,
            Pass::Drain {
                started_at: w.clock.now(),
                role: DrainRole::First,
                heartbeat: false,
            },
        )
        .await
        .unwrap()
        .remove(0);
    assert_eq!(first.drain.unwrap().evicted, vec!["default/web-1"]);
    assert!(!terminating(&w, "dns-1"));

    w.clock.advance(Duration::from_millis(600));
    let later = Pass::Drain {
        started_at: started,
        role: DrainRole::Later,
        heartbeat: false,
    };
    let second = executor.run(&plan, later).await.unwrap().remove(0);
    let drain = second.drain.unwrap();
    assert_eq!(drain.evicted, vec!["default/dns-1"]);
    assert!(drain.pending);

    w.clock.advance(Duration::from_millis(600));
    let third = executor.run(&plan, later).await.unwrap().remove(0);
    assert!(third.drain.unwrap().complete());
    assert!(w.pod("default", "dns-1").is_none());
}

#[tokio::test]
async fn a_refused_eviction_is_tried_again_in_later_passes_until_the_deadline() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "db-1", NODE, "db", "ReplicaSet"));
    w.fake.insert(pdb_object("default", "db", "db", 1));
    let mut plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-budget"))
        .await;
    let executor = w.executor();
    let started = w.clock.now();
    // The event's first delivery cordons and taints the node; the drain passes follow.
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let first = executor
        .run(
            &plan,
            Pass::Drain {
                started_at: w.clock.now(),
                role: DrainRole::First,
                heartbeat: false,
            },
        )
        .await
        .unwrap()
        .remove(0);
    let drain = first.drain.unwrap();
    assert!(drain.pending, "{drain:?}");
    assert_eq!(drain.left.len(), 1);
    assert!(drain.left[0].reason.contains("429"), "{drain:?}");
    assert!(!w.events().contains_key("DrainIncomplete"));

    // The deadline has passed: one last attempt (still refused), then the drain ends,
    // incomplete, and says what was left and why.
    let before = evictions(&w);
    plan.actions[0].deadline = Some(w.clock.now() - chrono::Duration::seconds(1));
    let later = Pass::Drain {
        started_at: started,
        role: DrainRole::Later,
        heartbeat: false,
    };
    let last = executor.run(&plan, later).await.unwrap().remove(0);
    let drain = last.drain.unwrap();
    assert!(!drain.pending && !drain.complete(), "{drain:?}");
    assert!(drain.left[0].reason.contains("429"), "{drain:?}");
    assert_eq!(evictions(&w), before + 1, "one attempt past the deadline");
    assert!(w.events().contains_key("DrainIncomplete"));
    assert!(w.pod("default", "db-1").is_some());
}

/// A spot drain whose first pass comes after its deadline (a mass interruption's later nodes):
/// what is on the node is evicted at once, and the pass records no Event; the drain stays
/// pending until the instance's end, when its next pass (refused as late) records the Events
/// of the decision alone.
#[tokio::test]
async fn a_first_pass_after_the_deadline_evicts_at_once_and_leaves_its_events_to_the_instances_end()
{
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let mut plan = w.plan(&event(EventKind::SpotInterruption, "ev-late")).await;
    assert!(plan.actions[0].grace_to_deadline);
    let deadline = w.clock.now() - chrono::Duration::seconds(2);
    plan.actions[0].deadline = Some(deadline);
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let first = executor
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    assert!(terminating(&w, "web-1"), "evicted at once");
    let drain = first.drain.clone().unwrap();
    assert!(drain.pending, "{drain:?}");
    assert_eq!(
        drain.wait_until,
        Some(deadline + chrono::Duration::seconds(16)),
        "the instance's end (the deadline and its 15 s margin), and a second"
    );
    assert!(w.events().is_empty(), "{:?}", w.events());
    // That next pass, refused as late, records them alone.
    executor.run(&plan, Pass::Announce).await.unwrap();
    let events = w.events();
    assert!(events.contains_key("Cordoned"), "{events:?}");
    assert!(events.contains_key(&plan.event_reason), "{events:?}");
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(evictions(&w), 1);
}

/// An eviction answered 429 with `Retry-After` (the API server's rate limit, not a budget) is
/// tried again after it in the same pass, even a pass with no time for retries (the default):
/// the node is not left to a later pass for a second's wait. A budget's 429 (no `Retry-After`)
/// is left to the next pass as before (`a_refused_eviction_is_tried_again_in_later_passes_until_the_deadline`).
#[tokio::test]
async fn a_rate_limited_eviction_is_tried_again_after_its_retry_after_in_the_same_pass() {
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-apf")).await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    w.fake.clear_requests();
    w.fake
        .inject(Fault::new(429).path_contains("/eviction").times(1));
    let before = w.clock.now();
    let first = executor
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    let drain = first.drain.unwrap();
    assert_eq!(drain.evicted, ["default/web-1"], "{drain:?}");
    assert!(drain.left.is_empty(), "{drain:?}");
    let attempts: Vec<u16> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.path == eviction_path("default", "web-1"))
        .map(|r| r.status)
        .collect();
    assert_eq!(attempts, [429, 201]);
    assert!(
        w.clock.now() - before >= chrono::Duration::seconds(1),
        "waited its Retry-After"
    );
}
