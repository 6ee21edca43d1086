//! Surge: placeholders first, evictions when there is room. A pod held until its placeholder
//! runs, or evicted at its latest safe time; disruption budgets' rounds; the capacity a warning
//! costs with and without surge; placeholder creates that are refused, fail or hang.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use forewarn::adapters::kube::{KubeExecutor, NodeOutcome};
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::{pdb_object, pod_object};
use forewarn::domain::plan::Plan;
use forewarn::ports::{Clock, DrainRole, Pass};
use kube_fake::{Fault, KubeFake, Method};
use serde_json::{Value, json};

use crate::support::{ID, NODE, OTHER_ID, OTHER_NODE, PASS_GAP, World, event, node};

/// A world whose spot drains surge (`FOREWARN_SURGE=spot-interruption,...`), with a ReplicaSet
/// pod, a bare pod and a DaemonSet pod on the node.
pub(crate) async fn surging() -> World {
    let mut w = World::plain().await;
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    let mut web = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    web["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "500m", "memory": "256Mi"}});
    web["spec"]["nodeSelector"] = json!({"pool": "general"});
    w.fake.insert(web);
    let mut bare = pod_object("default", "bare-1", NODE, "bare", "ReplicaSet");
    bare["metadata"]["ownerReferences"] = json!([]);
    w.fake.insert(bare);
    w.fake.insert(pod_object(
        "kube-system",
        "aws-node-1",
        NODE,
        "aws-node",
        "DaemonSet",
    ));
    w
}

/// The placeholders in the fake, by the pod they hold room for.
pub(crate) fn placeholders(w: &World) -> BTreeMap<String, Value> {
    w.fake
        .list("v1", "Pod")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["forewarn.io/placeholder"] == "true")
        .map(|p| {
            (
                p["metadata"]["annotations"]["forewarn.io/pod"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                p,
            )
        })
        .collect()
}

/// `ph` passes the rules of `infra/k8s/placeholders.yaml`'s admission policy (the CEL checked
/// here by hand: the fake has no admission): what forewarn creates, the policy admits.
fn assert_admissible(ph: &Value) {
    use forewarn::domain::surge::{PLACEHOLDER_ANNOTATIONS, PLACEHOLDER_LABELS};
    let meta = &ph["metadata"];
    assert_eq!(meta["namespace"], "forewarn");
    let uid = meta["annotations"]["forewarn.io/pod-uid"].as_str().unwrap();
    assert_eq!(meta["name"], format!("forewarn-placeholder-{uid}"));
    for key in meta["labels"].as_object().unwrap().keys() {
        assert!(PLACEHOLDER_LABELS.contains(&key.as_str()), "label {key}");
    }
    for key in meta["annotations"].as_object().unwrap().keys() {
        assert!(
            PLACEHOLDER_ANNOTATIONS.contains(&key.as_str()),
            "annotation {key}"
        );
    }
    for owner in meta["ownerReferences"].as_array().into_iter().flatten() {
        assert_eq!(
            (&owner["apiVersion"], &owner["kind"]),
            (&json!("v1"), &json!("Node"))
        );
    }
    assert!(meta.get("finalizers").is_none());
    let spec = &ph["spec"];
    assert_eq!(meta["labels"]["forewarn.io/placeholder"], "true");
    assert_eq!(spec["priorityClassName"], "forewarn-placeholder");
    assert_eq!(spec["automountServiceAccountToken"], false);
    // The ServiceAccount plugin names the namespace's default account, and mounts no token.
    assert_eq!(spec["serviceAccountName"], "default");
    // Pod Security `restricted`, which namespace forewarn enforces.
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    for absent in [
        "nodeName",
        "initContainers",
        "ephemeralContainers",
        "volumes",
        "hostNetwork",
        "hostPID",
        "hostIPC",
    ] {
        assert!(spec.get(absent).is_none(), "{absent} in {ph}");
    }
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], "registry.k8s.io/pause:3.10");
    for absent in [
        "command",
        "args",
        "env",
        "envFrom",
        "volumeMounts",
        "volumeDevices",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
    ] {
        assert!(c.get(absent).is_none(), "{absent} in {ph}");
    }
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
               "readOnlyRootFilesystem": true})
    );
}

/// Drain passes (after the cordon pass) until none is pending, each after the pass gap or at
/// the time the drain asked to be looked at again; `between` runs before each pass.
pub(crate) async fn surge_passes(
    w: &World,
    executor: &KubeExecutor,
    plan: &Plan,
    mut between: impl FnMut(&World, usize),
) -> Vec<NodeOutcome> {
    let started_at = w.clock.now();
    let mut outcomes = executor.run(plan, Pass::Cordon).await.unwrap();
    let mut pass = 1;
    while outcomes[0].result.pending {
        let wait = outcomes[0]
            .drain
            .as_ref()
            .and_then(|d| d.wait_until)
            .and_then(|t| (t - w.clock.now()).to_std().ok())
            .unwrap_or_default()
            .max(PASS_GAP);
        w.clock.sleep(wait).await;
        between(w, pass);
        let drain = Pass::Drain {
            started_at,
            role: DrainRole::of_pass(u32::try_from(pass).unwrap()),
            heartbeat: true,
        };
        outcomes = executor.run(plan, drain).await.unwrap();
        pass += 1;
        assert!(pass < 200, "the drain does not end");
    }
    outcomes
}

#[tokio::test]
async fn surge_holds_a_pod_until_its_placeholder_runs_then_evicts_it() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge"))
        .await;
    assert!(plan.actions[0].surge);
    let executor = w.executor();
    let mut evicted_at = None;
    let out = surge_passes(&w, &executor, &plan, |w, pass| {
        let phs = placeholders(w);
        if pass == 2 {
            // After the first drain pass: the bare pod is evicted as without surge, the
            // ReplicaSet's pod waits for its placeholder, which the scheduler binds elsewhere.
            assert!(
                w.pod("default", "bare-1").is_none(),
                "a bare pod goes at once"
            );
            assert!(w.pod("default", "web-1").is_some(), "web-1 waits for room");
            assert!(w.pod("kube-system", "aws-node-1").is_some());
            assert_eq!(phs.keys().collect::<Vec<_>>(), ["default/web-1"]);
            let mut ph = phs["default/web-1"].clone();
            assert_admissible(&ph);
            // In forewarn's namespace, owned by the doomed Node, never keeping a node up.
            let node_uid = w.fake.get("v1", "Node", None, NODE).unwrap()["metadata"]["uid"].clone();
            assert_eq!(
                ph["metadata"]["ownerReferences"],
                json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}])
            );
            assert_eq!(
                ph["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
                "true"
            );
            let spec = &ph["spec"];
            assert_eq!(spec["priorityClassName"], "forewarn-placeholder");
            assert_eq!(spec["nodeSelector"], json!({"pool": "general"}));
            assert_eq!(
                spec["containers"][0]["resources"]["requests"],
                json!({"cpu": "500m", "memory": "268435456"})
            );
            assert_eq!(
                spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
                json!([NODE])
            );
            assert_eq!(
                ph["metadata"]["annotations"]["forewarn.io/event"],
                "ev-surge"
            );
            ph["spec"]["nodeName"] = json!(OTHER_NODE);
            ph["status"] = json!({"phase": "Running"});
            w.fake.insert(ph);
        }
        if evicted_at.is_none() && w.pod("default", "web-1").is_none() {
            evicted_at = Some(w.clock.now());
        }
    })
    .await;
    let drain = out[0].drain.clone().unwrap();
    assert!(drain.complete(), "{drain:?}");
    assert!(w.pod("default", "web-1").is_none());
    let latest = plan.actions[0].deadline.unwrap() - chrono::Duration::seconds(40);
    assert!(
        evicted_at.unwrap() < latest - chrono::Duration::seconds(20),
        "evicted once there was room ({:?}), long before its latest safe time ({latest})",
        evicted_at
    );
    assert!(placeholders(&w).is_empty(), "its placeholder goes with it");
}

#[tokio::test]
async fn without_room_a_pod_is_evicted_at_its_latest_safe_time_and_no_placeholder_is_left() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-late"))
        .await;
    let deadline = plan.actions[0].deadline.unwrap();
    let executor = w.executor();
    let mut evicted_at = None;
    let out = surge_passes(&w, &executor, &plan, |w, pass| {
        if evicted_at.is_none() && w.pod("default", "web-1").is_none() {
            evicted_at = Some(w.clock.now());
        }
        if evicted_at.is_none() && pass > 1 {
            assert_eq!(placeholders(w).len(), 1, "held while web-1 waits");
        }
    })
    .await;
    assert!(out[0].drain.as_ref().unwrap().complete(), "{:?}", out[0]);
    // Its latest safe time: the deadline less its 30 s grace less the 10 s margin; the passes
    // look again at most every 10 s while it waits.
    let latest = deadline - chrono::Duration::seconds(40);
    let at = evicted_at.unwrap();
    assert!(
        at >= latest && at <= latest + chrono::Duration::seconds(11),
        "evicted at {at}, latest safe {latest}"
    );
    assert!(
        at + chrono::Duration::seconds(30) <= deadline,
        "gone by the deadline"
    );
    assert!(placeholders(&w).is_empty(), "no leftover");
    let passes = w
        .fake
        .requests()
        .iter()
        .filter(|r| {
            r.method == Method::GET && r.path == "/api/v1/pods" && r.query.contains("fieldSelector")
        })
        .count();
    assert!(
        passes <= 12,
        "waiting costs a look every 10 s, not every pass gap: {passes}"
    );
}

/// web-1's budget lets one of its two pods go at a time (the other is on another node), the
/// budget list answered `list_answer` (`None`: as it is); web-1 drained with surge. Answers how
/// long before the drain's deadline web-1 was evicted, and how many times budgets were listed.
async fn evicted_before_deadline(list_answer: Option<u16>) -> (chrono::Duration, usize) {
    let w = surging().await;
    w.fake.insert(pod_object(
        "default",
        "web-2",
        OTHER_NODE,
        "web",
        "ReplicaSet",
    ));
    w.fake.insert(pdb_object("default", "web-pdb", "web", 1));
    if let Some(status) = list_answer {
        w.fake.inject(
            Fault::new(status)
                .method(Method::GET)
                .path_contains("/poddisruptionbudgets"),
        );
    }
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-budget"))
        .await;
    let deadline = plan.actions[0].deadline.unwrap();
    let executor = w.executor();
    let mut evicted_at = None;
    surge_passes(&w, &executor, &plan, |w, _| {
        if evicted_at.is_none() && w.pod("default", "web-1").is_none() {
            evicted_at = Some(w.clock.now());
        }
    })
    .await;
    let budgets_listed = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/poddisruptionbudgets"))
        .count();
    (deadline - evicted_at.unwrap(), budgets_listed)
}

#[tokio::test]
async fn a_pod_whose_budget_lets_its_pods_go_in_rounds_is_due_a_round_earlier() {
    let (before, listed) = evicted_before_deadline(None).await;
    // Its grace (30 s), one round of its budget (15 s) and the margin (10 s) before the deadline.
    assert!(
        before <= chrono::Duration::seconds(55) && before >= chrono::Duration::seconds(44),
        "evicted {before} before the deadline"
    );
    assert_eq!(listed, 1, "read once, when the placeholders are made");
}

#[tokio::test]
async fn a_budget_list_that_fails_costs_the_rounds_not_the_drain() {
    // The API server answers the list 500: the surge pass goes on (placeholders made, the pod
    // held) without the budget's round, instead of failing the pass and leaving every pod
    // where it is until the message comes back.
    let (before, listed) = evicted_before_deadline(Some(500)).await;
    // Its grace (30 s) and the margin (10 s): no round.
    assert!(
        before <= chrono::Duration::seconds(40) && before >= chrono::Duration::seconds(29),
        "evicted {before} before the deadline"
    );
    assert_eq!(listed, 1, "tried once in the first pass");
}

/// A node of `cpu` allocatable cpus in pool `general`, Ready, running instance `id`.
pub(crate) fn sized(name: &str, id: &str, cpu: &str) -> Value {
    let mut n = node(name, id);
    n["metadata"]["labels"]["pool"] = json!("general");
    n["status"]["allocatable"] = json!({"cpu": cpu, "memory": "8Gi", "pods": "110"});
    n
}

/// The capacity a spot warning costs its workload, on a cluster with the Kubernetes fake's
/// scheduler, ReplicaSets and autoscaler (new nodes Ready 60 s after a pod finds no room): two
/// `web` pods of 500m on the doomed node, no room anywhere else. Answers, per original pod, the
/// seconds between it stopping to serve and its replacement Running, and when the last
/// eviction was accepted.
async fn capacity_lost(surge: bool) -> (Vec<i64>, chrono::DateTime<Utc>, chrono::DateTime<Utc>) {
    use kube_fake::{AutoscalerSettings, NodeGroup};
    let fake = KubeFake::builder()
        .replicasets()
        .autoscaler(
            AutoscalerSettings::default().group(NodeGroup::new("general").label("pool", "general")),
        )
        .start()
        .await;
    let mut w = World::on(fake);
    if surge {
        w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    }
    w.fake.insert(sized(NODE, ID, "1"));
    w.fake.insert(sized(OTHER_NODE, OTHER_ID, "500m"));
    // The placeholders' PriorityClass, from the manifest `forewarn deploy` applies.
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/k8s/placeholders.yaml"),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest).unwrap();
    w.fake.insert(
        docs.into_iter()
            .find(|d| d["kind"] == "PriorityClass")
            .unwrap(),
    );
    let template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"nodeSelector": {"pool": "general"},
                 "containers": [{"name": "main", "image": "web",
                                 "resources": {"requests": {"cpu": "500m"}}}]}
    });
    w.fake
        .insert(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": "default", "uid": "uid-web-rs"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": template}}));
    for (name, node) in [("web-1", NODE), ("web-2", NODE), ("web-3", OTHER_NODE)] {
        let mut pod = pod_object("default", name, node, "web", "ReplicaSet");
        pod["spec"]["nodeSelector"] = json!({"pool": "general"});
        pod["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500m"}});
        w.fake.insert(pod);
    }
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-capacity"))
        .await;
    let deadline = plan.actions[0].deadline.unwrap();
    let mut last_eviction = w.clock.now();
    let executor = w.executor();
    surge_passes(&w, &executor, &plan, |w, _| {
        let left = ["web-1", "web-2"].iter().any(|p| {
            w.pod("default", p)
                .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_null())
        });
        if left {
            last_eviction = w.clock.now();
        }
    })
    .await;
    // The instance goes at the warning's end: whatever still runs there stops then.
    let instance_gone = deadline + chrono::Duration::seconds(15);
    w.clock
        .sleep((instance_gone - w.clock.now()).to_std().unwrap_or_default())
        .await;
    w.fake.settle();
    let timeline = w.fake.pod_timeline();
    let replacements: Vec<_> = timeline
        .iter()
        .filter(|t| {
            !["web-1", "web-2", "web-3"].contains(&t.name.as_str())
                && t.owner.as_deref() == Some("ReplicaSet/web-rs")
        })
        .collect();
    assert_eq!(
        replacements.len(),
        2,
        "one replacement per evicted pod: {timeline:#?}"
    );
    let lost = ["web-1", "web-2"]
        .iter()
        .zip(&replacements)
        .map(|(name, replacement)| {
            let gone = timeline.iter().find(|t| t.name == *name).unwrap();
            let stopped = gone.stopped_at.unwrap_or(instance_gone).min(instance_gone);
            let running = replacement.running_at.expect("the replacement runs");
            (running - stopped).num_seconds().max(0)
        })
        .collect();
    (lost, last_eviction, deadline)
}

#[tokio::test]
async fn with_surge_a_warning_costs_seconds_of_capacity_not_the_autoscalers_minute() {
    let (at_once, at_once_last, deadline) = capacity_lost(false).await;
    let (surged, surge_last, _) = capacity_lost(true).await;
    // Evicted at once: each replacement waits for the node the autoscaler brings.
    assert!(at_once.iter().all(|s| *s >= 55), "{at_once:?}");
    // With surge the new node was asked for by the placeholders at once, and the pods stopped
    // once it was there — or, for web-2 (a second round of its controller's budget), at its
    // latest safe time, 10 s before the node came: each replacement runs within seconds.
    assert!(surged.iter().all(|s| *s <= 15), "{surged:?}");
    let (a, b): (i64, i64) = (at_once.iter().sum(), surged.iter().sum());
    assert!(
        b * 5 <= a,
        "surge loses at most a fifth: {b} against {a} pod-seconds"
    );
    // And the node is still fully handled before its deadline.
    assert!(surge_last < deadline, "{surge_last} < {deadline}");
    assert!(at_once_last < surge_last);
}

/// A first drain pass (after its cordon) of `plan`, now.
pub(crate) async fn first_drain_pass(
    w: &World,
    executor: &KubeExecutor,
    plan: &Plan,
) -> NodeOutcome {
    let drain = Pass::Drain {
        started_at: w.clock.now(),
        role: DrainRole::First,
        heartbeat: false,
    };
    executor.run(plan, drain).await.unwrap().remove(0)
}

/// The placeholder creates the fake was asked for.
fn creates(w: &World) -> usize {
    w.fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v1/namespaces/forewarn/pods")
        .count()
}

/// A placeholder create that fails for any reason but AlreadyExists — `status`: a refusal (a
/// Pod Security level, an admission policy: 403, 422), an admission webhook that is down (500)
/// — leaves its pod evicted at once, as without surge; its namespace's pods get no placeholder
/// asked for a minute, then are asked again.
async fn a_failed_placeholder_leaves_its_pod_drained_as_without_surge(status: u16) {
    let w = surging().await;
    // A second pod of a controller in the same namespace.
    let mut api = pod_object("default", "api-1", NODE, "api", "ReplicaSet");
    api["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "250m"}});
    w.fake.insert(api);
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-refused"))
        .await;
    w.fake.inject(
        Fault::new(status)
            .method(Method::POST)
            .path_contains("/api/v1/namespaces/forewarn/pods")
            .times(usize::MAX),
    );
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let out = first_drain_pass(&w, &executor, &plan).await;
    for pod in ["web-1", "api-1"] {
        assert!(
            w.pod("default", pod).is_none(),
            "{status}: {pod} evicted at once: {out:?}"
        );
    }
    assert!(placeholders(&w).is_empty());
    assert!(out.drain.unwrap().waiting.is_empty());
    // Asked once each (at once, with the drain's parallelism), never retried.
    assert_eq!(creates(&w), 2, "{status}");
    // Within the minute, another drain's pod of the namespace is not asked for.
    w.fake
        .insert(pod_object("default", "web-3", NODE, "web", "ReplicaSet"));
    w.clock.sleep(Duration::from_secs(30)).await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-refused-2"))
        .await;
    first_drain_pass(&w, &executor, &plan).await;
    assert!(w.pod("default", "web-3").is_none(), "evicted at once");
    assert_eq!(
        creates(&w),
        2,
        "{status}: not asked again within the minute"
    );
    // A minute after the failure the namespace is asked again.
    w.fake
        .insert(pod_object("default", "web-4", NODE, "web", "ReplicaSet"));
    w.clock.sleep(Duration::from_secs(31)).await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-refused-3"))
        .await;
    first_drain_pass(&w, &executor, &plan).await;
    assert_eq!(creates(&w), 3, "{status}");
}

#[tokio::test]
async fn a_refused_placeholder_leaves_its_pod_drained_as_without_surge() {
    a_failed_placeholder_leaves_its_pod_drained_as_without_surge(403).await;
}

#[tokio::test]
async fn a_placeholder_webhook_that_is_down_leaves_its_pod_drained_as_without_surge() {
    a_failed_placeholder_leaves_its_pod_drained_as_without_surge(500).await;
}

/// A placeholder create the server throttles (429) reached no admission: its pod is not
/// evicted at once but waits, its namespace is not held back, and the next pass asks again.
#[tokio::test]
async fn a_throttled_placeholder_is_asked_again_and_its_pod_waits() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-429"))
        .await;
    w.fake.inject(
        Fault::new(429)
            .method(Method::POST)
            .path_contains("/api/v1/namespaces/forewarn/pods")
            .times(1),
    );
    let executor = w.executor();
    let out = surge_passes(&w, &executor, &plan, |w, pass| {
        if pass == 2 {
            assert_eq!(creates(w), 1, "asked once in the first drain pass");
            assert!(w.pod("default", "web-1").is_some(), "web-1 waits for room");
            assert!(placeholders(w).is_empty(), "throttled: not made");
        }
        if pass == 3 {
            assert_eq!(creates(w), 2, "asked again by the next pass");
            assert!(w.pod("default", "web-1").is_some(), "web-1 still waits");
            assert_eq!(
                placeholders(w).keys().collect::<Vec<_>>(),
                ["default/web-1"]
            );
        }
    })
    .await;
    assert!(out[0].drain.as_ref().unwrap().complete(), "{out:?}");
    assert!(
        w.pod("default", "web-1").is_none(),
        "drained by its latest safe time"
    );
}

/// A placeholder create the server throttles with a `Retry-After` (the fake's 1 s) holds back
/// every request of the client's rate limit that long, as any other call's 429 does: the pass's
/// next request (the bare pod's eviction) waits the server's second.
#[tokio::test]
async fn a_throttled_placeholder_pauses_the_clients_rate_limit_for_its_retry_after() {
    let mut w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-429-pause"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // A limit that holds nothing back by itself.
    w.clients = w.clients.clone().with_rate_limit(Some((1000.0, 100)));
    w.fake.inject(
        Fault::new(429)
            .method(Method::POST)
            .path_contains("/api/v1/namespaces/forewarn/pods")
            .times(1),
    );
    let before = w.clock.slept().len();
    let out = first_drain_pass(&w, &w.executor(), &plan).await;
    assert_eq!(creates(&w), 1);
    assert!(w.pod("default", "web-1").is_some(), "web-1 waits: {out:?}");
    assert!(w.pod("default", "bare-1").is_none(), "bare-1 evicted");
    let waits = w.clock.slept()[before..].to_vec();
    assert!(
        waits.iter().any(|d| *d >= Duration::from_millis(900)),
        "the eviction waited for the Retry-After: {waits:?}"
    );
}

/// A placeholder create that forewarn's own rate limit still holds when the step's 2 s are up
/// never reached the server: its pod waits instead of being evicted at once.
#[tokio::test]
async fn a_placeholder_held_by_the_rate_limit_past_the_step_leaves_its_pod_waiting() {
    let mut w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-held"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // One request every 5 s: the step's budget list takes its 2 s, the create waits past them.
    w.clients = w.clients.clone().with_rate_limit(Some((0.2, 1)));
    let out = first_drain_pass(&w, &w.executor(), &plan).await;
    assert_eq!(creates(&w), 0, "not sent within the step");
    assert!(w.pod("default", "web-1").is_some(), "web-1 waits: {out:?}");
    assert!(!out.drain.unwrap().waiting.is_empty());
}

/// A placeholder create that is never answered (an admission webhook that hangs) holds the
/// pass no longer than the step's budget (2 s): its pod is then evicted as without surge.
#[tokio::test]
async fn a_placeholder_create_that_hangs_costs_the_pass_its_budget_not_the_drain() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-hang"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    w.fake.hang("/api/v1/namespaces/forewarn/pods", 1);
    let started = w.clock.now();
    let pass = {
        let executor = w.executor();
        let plan = plan.clone();
        let clock = w.clock.clone();
        tokio::spawn(async move {
            let drain = Pass::Drain {
                started_at: clock.now(),
                role: DrainRole::First,
                heartbeat: false,
            };
            executor.run(&plan, drain).await.unwrap().remove(0)
        })
    };
    // Once the create is in (and hangs), the clock moves past the step's budget.
    for _ in 0..500 {
        if creates(&w) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(creates(&w), 1, "the placeholder was asked for");
    assert!(!pass.is_finished(), "the create hangs");
    w.clock.advance(Duration::from_millis(2_001));
    let out = tokio::time::timeout(Duration::from_secs(30), pass)
        .await
        .expect("the pass ends once its budget is spent")
        .unwrap();
    assert!(
        w.pod("default", "web-1").is_none(),
        "web-1 evicted as without surge: {out:?}"
    );
    assert!(out.drain.unwrap().waiting.is_empty());
    assert!(w.clock.now() - started < chrono::Duration::seconds(3));
}
