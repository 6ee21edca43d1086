//! Cluster actions through the Kubernetes API: the real `kube` client of forewarn's adapter
//! (`forewarn::adapters::kube`) against the HTTP fake of the API server (`kube-fake`).
//!
//! Plans are made by the decision core from node facts the adapter's node directory read from
//! the fake, then carried out by the adapter's executor. Every test ends by checking the request
//! log: no answer in the 4xx range but the ones the adapter expects (404, 409, 429), patches as
//! `application/merge-patch+json`, creates as `application/json`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::kube::{
    ClusterClient, CordonOutcome, DeleteOutcome, EventOutcome, ExecutorSettings, Joining,
    KubeExecutor, KubeNodeDirectory, NodeOutcome, REPORTING_CONTROLLER, event_name,
};
use forewarn::app::pipeline::{Passes, Pipeline};
use forewarn::domain::config::{Action, Config, LABEL_EXCLUDE_LB};
use forewarn::domain::event::{Detail, Event, EventKind, LifecycleAction};
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures::{self, node_object, pdb_object, pod_object};
use forewarn::domain::plan::{Facts, Plan, Target, decide};
use forewarn::ports::{ActionResult, DrainRole, ExecuteError, Executor, Pass};
use forewarn::ports::{Clock, NodeDirectory};
use forewarn::ports::{LifecycleCompleter, LifecycleError, LifecycleOutcome};
use kube_fake::{Fault, KubeFake, Method, RecordedRequest};
use serde_json::{Value, json};

const NODE: &str = "ip-10-0-1-11.ec2.internal";
const ID: &str = "i-0a1b2c3d4e5f60001";
const OTHER_NODE: &str = "ip-10-0-1-12.ec2.internal";
const OTHER_ID: &str = "i-0a1b2c3d4e5f69999";
const TAINT: &str = "forewarn.io/interruption";

// ---------------------------------------------------------------------------------------------
// The world

/// A node of this world: as a kubelet on EC2 registers it, with its InternalIP and Hostname
/// addresses, an instance-type label and a `dedicated=batch` taint (which forewarn must keep).
fn node(name: &str, instance_id: &str) -> Value {
    node_object(name, instance_id)
        .kubelet()
        .label("node.kubernetes.io/instance-type", "m5.large")
        .taint("dedicated", "batch", "NoSchedule")
        .ready()
        .address("InternalIP", "10.0.1.11")
        .address("Hostname", name)
        .build()
}

/// A running instance of this world's cluster, named by its private DNS name `dns`.
fn instance(id: &str, dns: &str) -> InstanceFacts {
    fixtures::instance(id)
        .typed("m5.large", "us-east-1a")
        .dns(dns)
        .state("running")
        .cluster("demo")
        .build()
}

/// This world's configuration: drains without surge (the default; surge has tests of its own
/// below).
fn config() -> Config {
    Config {
        cluster_name: Some("demo".into()),
        surge_kinds: BTreeSet::new(),
        ..Config::default()
    }
}

/// An event of `kind` about this world's instance, happening now.
fn event(kind: EventKind, id: &str) -> Event {
    let event = fixtures::event(kind, id, ID)
        .time(Utc::now())
        .account("123456789012");
    match kind {
        EventKind::AsgTermination => event.detail(Detail::AsgTermination(fixtures::lifecycle(
            "eks-demo-ng-1",
            "forewarn-drain",
        ))),
        EventKind::AsgLaunch => event.detail(Detail::AsgLaunch(fixtures::launch(
            "eks-demo-ng-1",
            "forewarn-joined",
        ))),
        _ => event,
    }
    .build()
}

/// Retries and polls fast, so the tests are.
fn fast() -> ExecutorSettings {
    ExecutorSettings {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        reporting_instance: "forewarn-test".into(),
        ..ExecutorSettings::default()
    }
}

/// The time between two drain passes in these tests (the fake's pods go at once, or after the
/// grace period a test sets).
const PASS_GAP: Duration = Duration::from_millis(100);

/// An event's passes as the pipeline's in-process driver runs them: the first pass, then drain
/// passes [`PASS_GAP`] apart until none is pending; each action's outcomes merged into one (the
/// first cordon, every eviction and Event, the last of the rest).
async fn passes(executor: &KubeExecutor, plan: &Plan) -> Result<Vec<NodeOutcome>, ExecuteError> {
    let clock = executor.clock();
    let started_at = clock.now();
    let mut merged = executor.run(plan, Pass::Cordon).await?;
    let mut pass = 1;
    while merged.iter().any(|o| o.pending()) {
        clock.sleep(PASS_GAP).await;
        let drain = Pass::Drain {
            started_at,
            role: DrainRole::of_pass(pass),
            heartbeat: true,
        };
        let outcomes = executor.run(plan, drain).await?;
        for (m, o) in merged.iter_mut().zip(outcomes) {
            m.events.extend(o.events.clone());
            m.event_failures.extend(o.event_failures.clone());
            let drain = match (m.drain.take(), o.drain) {
                (Some(before), Some(mut now)) => {
                    let mut evicted = before.evicted;
                    evicted.extend(now.evicted);
                    now.evicted = evicted;
                    let mut gone = before.already_gone;
                    gone.extend(now.already_gone);
                    now.already_gone = gone;
                    Some(now)
                }
                (before, now) => now.or(before),
            };
            *m = NodeOutcome {
                cordon: m.cordon.take().or(o.cordon),
                cordoned_at: m.cordoned_at.or(o.cordoned_at),
                events: std::mem::take(&mut m.events),
                event_failures: std::mem::take(&mut m.event_failures),
                drain,
                ..o
            };
        }
        pass += 1;
    }
    Ok(merged)
}

/// [`passes`] through the [`Executor`] port: the last pass's results.
async fn execute_passes(
    executor: &KubeExecutor,
    plan: &Plan,
) -> Result<Vec<ActionResult>, ExecuteError> {
    let clock = executor.clock();
    let started_at = clock.now();
    let mut results = executor.execute(plan, Pass::Cordon).await?;
    let mut pass = 1;
    while results.iter().any(|r| r.pending) {
        clock.sleep(PASS_GAP).await;
        let drain = Pass::Drain {
            started_at,
            role: DrainRole::of_pass(pass),
            heartbeat: true,
        };
        results = executor.execute(plan, drain).await?;
        pass += 1;
    }
    Ok(results)
}

struct World {
    fake: KubeFake,
    clients: ClusterClient,
    config: Config,
    /// The one clock of the world: forewarn's adapter and the fake go by it; tests move it on
    /// (a sleep of forewarn's moves it at once) instead of sleeping.
    clock: ManualClock,
    /// A drain's passes carried on in process, [`PASS_GAP`] apart.
    in_process: Passes,
}

impl World {
    async fn new() -> World {
        World::on(KubeFake::start().await)
    }

    /// A world on `fake` (a fake built with the cluster simulation, say).
    fn on(fake: KubeFake) -> World {
        let clock = ManualClock::at(Utc::now());
        let fakes = clock.clone();
        fake.set_clock(move || fakes.now());
        let clients = ClusterClient::new(fake.client()).with_clock(clock.shared());
        World {
            fake,
            clients,
            config: config(),
            clock,
            in_process: Passes::in_process(PASS_GAP),
        }
    }

    /// The handler over this world (its clock, drains carried on in process), recording in an
    /// embedded store in `dir`; tests set the fields they need.
    fn handler(&self, dir: &std::path::Path) -> forewarn::app::handler::Handler {
        let store = forewarn::adapters::embedded::EmbeddedStore::open(dir).unwrap();
        forewarn::app::handler::Handler {
            clock: self.clock.shared(),
            passes: self.in_process.clone(),
            ..forewarn::app::handler::Handler::new(self.config.clone(), Arc::new(store))
        }
    }

    /// The handler over this world (see [`World::handler`]) for the instance `ID` on `NODE`,
    /// its drains' passes queued on `queue` 1 s apart; `kept`: with the environment's kept
    /// copies of budget-refused passes.
    fn queued_handler(
        &self,
        dir: &std::path::Path,
        queue: &Arc<Continuations>,
        kept: bool,
    ) -> forewarn::app::handler::Handler {
        forewarn::app::handler::Handler {
            instances: Arc::new(Instances(BTreeMap::from([(
                ID.to_string(),
                instance(ID, NODE),
            )]))),
            nodes: Arc::new(KubeNodeDirectory::new(self.clients.clone())),
            executor: Some(Arc::new(self.executor())),
            passes: Passes {
                interval: Duration::from_secs(1),
                queue: Some(queue.clone()),
                kept: kept.then(Arc::default),
            },
            ..self.handler(dir)
        }
    }

    /// The pipeline over this world's cluster, with drains carried on by `passes`.
    fn pipeline<'a>(
        &'a self,
        store: &'a dyn forewarn::ports::PoolStore,
        instances: &'a dyn forewarn::ports::InstanceDirectory,
        nodes: &'a dyn NodeDirectory,
        executor: &'a dyn Executor,
        passes: &'a Passes,
    ) -> Pipeline<'a> {
        Pipeline {
            mode: forewarn::domain::config::Mode::Act,
            config: &self.config,
            store,
            instances,
            nodes,
            executor: Some(executor),
            passes,
            clock: &self.clock,
        }
    }

    /// A plain node with the instance `ID`, an unrelated node beside it.
    async fn plain() -> World {
        let w = World::new().await;
        w.fake.insert(node(NODE, ID));
        w.fake.insert(node(OTHER_NODE, OTHER_ID));
        w
    }

    /// The cluster's policy ConfigMap, read through the adapter.
    fn policies(&self) -> Arc<forewarn::app::policy::PolicyCache> {
        Arc::new(forewarn::app::policy::PolicyCache::new(
            Arc::new(forewarn::adapters::kube::KubePolicy::new(
                self.clients.clone(),
                "forewarn-test",
            )),
            self.config.policy.clone(),
        ))
    }

    fn executor(&self) -> KubeExecutor {
        KubeExecutor::new(self.clients.clone(), &self.config).with_settings(fast())
    }

    /// The plan for `event`, from node facts read through the adapter's directory.
    async fn plan(&self, event: &Event) -> Plan {
        let instances = BTreeMap::from([(ID.to_string(), instance(ID, NODE))]);
        let known: Vec<InstanceFacts> = instances.values().cloned().collect();
        let nodes = KubeNodeDirectory::new(self.clients.clone())
            .nodes(&known)
            .await
            .unwrap();
        decide(event, Facts::new(&instances, &nodes), &self.config)
    }

    async fn run(&self, plan: &Plan) -> NodeOutcome {
        let mut outcomes = passes(&self.executor(), plan).await.unwrap();
        assert_eq!(outcomes.len(), 1);
        outcomes.remove(0)
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.fake.get("v1", "Node", None, name)
    }

    fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.fake.get("v1", "Pod", Some(ns), name)
    }

    /// forewarn's Events, by reason.
    fn events(&self) -> BTreeMap<String, Value> {
        self.fake
            .list("events.k8s.io/v1", "Event")
            .into_iter()
            .map(|e| (e["reason"].as_str().unwrap_or_default().to_string(), e))
            .collect()
    }
}

/// Every answer is one the adapter expects, every body of the right type.
fn assert_accepted(requests: &[RecordedRequest]) {
    for r in requests {
        assert!(
            r.status < 400 || matches!(r.status, 404 | 409 | 429),
            "{} {}?{} answered {}: {:?}",
            r.method,
            r.path,
            r.query,
            r.status,
            r.body
        );
        if r.method == Method::PATCH {
            assert_eq!(
                r.content_type.as_deref(),
                Some("application/merge-patch+json"),
                "{}",
                r.path
            );
        }
        if r.method == Method::POST {
            assert_eq!(
                r.content_type.as_deref(),
                Some("application/json"),
                "{}",
                r.path
            );
        }
    }
}

/// A plan carried out again writes nothing: its only writes are the creates of the Events it
/// recorded the first time, each answered 409 AlreadyExists (there is no read before them).
fn assert_nothing_written_again(fake: &KubeFake) {
    for write in fake.writes() {
        assert!(
            write.method == Method::POST && write.path.contains("/events") && write.status == 409,
            "{write:?}"
        );
    }
}

fn paths(requests: &[RecordedRequest], method: Method) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method == method)
        .map(|r| r.path.clone())
        .collect()
}

fn taints(node: &Value) -> Vec<(String, String, String)> {
    node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or_default().to_string(),
                t["value"].as_str().unwrap_or_default().to_string(),
                t["effect"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn eviction_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}/eviction")
}

// ---------------------------------------------------------------------------------------------
// Cordon and drain

/// The pods of the plain node: two web pods, a critical DNS pod, and the ones a drain leaves:
/// a DaemonSet pod, a mirror pod, a finished Job pod. A web pod on the other node.
fn seed_pods(w: &World) {
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(pod_object("default", "web-2", NODE, "web", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "web-3",
        OTHER_NODE,
        "web",
        "ReplicaSet",
    ));
    w.fake.insert(pdb_object("default", "web-pdb", "web", 1));
    let mut dns = pod_object("kube-system", "coredns-1", NODE, "dns", "ReplicaSet");
    dns["spec"]["priorityClassName"] = json!("system-cluster-critical");
    w.fake.insert(dns);
    let mut ds = pod_object(
        "kube-system",
        "aws-node-abc",
        NODE,
        "aws-node",
        "ReplicaSet",
    );
    ds["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "aws-node", "uid": "uid-ds", "controller": true}]);
    w.fake.insert(ds);
    let mut mirror = pod_object(
        "kube-system",
        "kube-proxy-node",
        NODE,
        "kube-proxy",
        "ReplicaSet",
    );
    mirror["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node",
        "name": NODE, "uid": "uid-node", "controller": true}]);
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "0123abcd"});
    w.fake.insert(mirror);
    let mut done = pod_object("batch", "job-1", NODE, "job", "ReplicaSet");
    done["status"]["phase"] = json!("Succeeded");
    w.fake.insert(done);
}

#[tokio::test]
async fn spot_interruption_cordons_taints_and_drains_a_plain_node() {
    let w = World::plain().await;
    seed_pods(&w);
    let ev = event(EventKind::SpotInterruption, "ev-spot-1");
    let plan = w.plan(&ev).await;
    assert_eq!(plan.actions[0].action, Action::CordonDrain);
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    assert_eq!(out.cordon, Some(CordonOutcome::Cordoned { attempts: 1 }));
    let n = w.node(NODE).unwrap();
    assert_eq!(n["spec"]["unschedulable"], true);
    assert_eq!(
        taints(&n),
        vec![
            ("dedicated".into(), "batch".into(), "NoSchedule".into()),
            (
                TAINT.into(),
                "spot-interruption".into(),
                "NoSchedule".into()
            ),
        ],
        "the unrelated taint is kept"
    );
    assert_eq!(n["metadata"]["labels"][LABEL_EXCLUDE_LB], "true");
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], NODE);

    let drain = out.drain.clone().unwrap();
    let evicted: BTreeSet<&str> = drain.evicted.iter().map(String::as_str).collect();
    assert_eq!(
        evicted,
        BTreeSet::from(["default/web-1", "default/web-2", "kube-system/coredns-1"])
    );
    assert!(
        drain.left.is_empty() && drain.terminating.is_empty(),
        "{drain:?}"
    );
    let skipped: BTreeMap<&str, &str> = drain
        .skipped
        .iter()
        .map(|s| (s.pod.as_str(), s.why))
        .collect();
    assert_eq!(
        skipped,
        BTreeMap::from([
            ("batch/job-1", "succeeded"),
            ("kube-system/aws-node-abc", "daemonset"),
            ("kube-system/kube-proxy-node", "mirror"),
        ])
    );
    for (ns, name) in [
        ("default", "web-1"),
        ("default", "web-2"),
        ("kube-system", "coredns-1"),
    ] {
        assert!(w.pod(ns, name).is_none(), "{ns}/{name} evicted");
    }
    for (ns, name) in [
        ("default", "web-3"),
        ("kube-system", "aws-node-abc"),
        ("kube-system", "kube-proxy-node"),
        ("batch", "job-1"),
    ] {
        assert!(w.pod(ns, name).is_some(), "{ns}/{name} left alone");
    }

    let requests = w.fake.requests();
    assert_accepted(&requests);
    // One patch; the critical pod evicted after the others; the pods listed by node.
    assert_eq!(
        paths(&requests, Method::PATCH),
        vec![format!("/api/v1/nodes/{NODE}")]
    );
    let posts = paths(&requests, Method::POST);
    let evictions: Vec<&String> = posts.iter().filter(|p| p.ends_with("/eviction")).collect();
    assert_eq!(evictions.len(), 3);
    assert_eq!(
        evictions[2],
        &eviction_path("kube-system", "coredns-1"),
        "critical pods last: {evictions:?}"
    );
    let pod_list = requests
        .iter()
        .find(|r| r.method == Method::GET && r.path == "/api/v1/pods")
        .unwrap();
    assert_eq!(
        pod_list.query_param("fieldSelector").as_deref(),
        Some(format!("spec.nodeName={NODE}").as_str())
    );
    // The patch: the full taint list and the resourceVersion read.
    let patch = requests
        .iter()
        .find(|r| r.method == Method::PATCH)
        .and_then(|r| r.body.clone())
        .unwrap();
    assert!(patch["metadata"]["resourceVersion"].is_string(), "{patch}");
    assert_eq!(patch["spec"]["taints"].as_array().unwrap().len(), 2);

    // Events: the decision, the cordon, the drain.
    let events = w.events();
    assert_eq!(
        events.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["Cordoned", "Drained", "SpotInterrupted"]
    );
    let decision = &events["SpotInterrupted"];
    assert_eq!(decision["type"], "Warning");
    assert_eq!(decision["action"], "CordonDrain");
    assert_eq!(decision["reportingController"], REPORTING_CONTROLLER);
    assert_eq!(decision["reportingInstance"], "forewarn-test");
    assert_eq!(decision["regarding"]["kind"], "Node");
    assert_eq!(decision["regarding"]["name"], NODE);
    assert_eq!(decision["regarding"]["uid"], n["metadata"]["uid"]);
    assert_eq!(decision["metadata"]["namespace"], "default");
    assert_eq!(
        decision["metadata"]["name"],
        event_name(NODE, "ev-spot-1", "SpotInterrupted")
    );
    assert!(
        decision["note"]
            .as_str()
            .unwrap()
            .contains("spot-interruption"),
        "{decision}"
    );
    assert!(decision["eventTime"].is_string());
    // The pass that evicted left the pods terminating; the next one found them gone.
    assert_eq!(out.drain.as_ref().unwrap().evicted.len(), 3, "{out:?}");
    assert_eq!(events["Drained"]["type"], "Normal");
    assert!(
        events["Drained"]["note"]
            .as_str()
            .unwrap()
            .starts_with("Drained: no pod left to evict"),
        "{}",
        events["Drained"]
    );
    assert!(out.detail().contains("cordoned node/"), "{}", out.detail());
}

#[tokio::test]
async fn a_second_identical_plan_writes_nothing() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-spot-2"))
        .await;
    w.run(&plan).await;
    let rv = w.fake.resource_version();
    w.fake.clear_requests();

    let again = w.run(&plan).await;

    assert_eq!(w.fake.writes().len(), again.events.len());
    assert_nothing_written_again(&w.fake);
    assert_eq!(w.fake.resource_version(), rv);
    assert_eq!(again.cordon, Some(CordonOutcome::AlreadyCordoned));
    let drain = again.drain.unwrap();
    assert!(drain.evicted.is_empty() && drain.left.is_empty());
    assert!(
        again.events.iter().all(|(_, o)| *o == EventOutcome::Exists),
        "{:?}",
        again.events
    );
    assert_accepted(&w.fake.requests());
}

// ---------------------------------------------------------------------------------------------
// Surge: placeholders first, evictions when there is room

/// A world whose spot drains surge (`FOREWARN_SURGE=spot-interruption,...`), with a ReplicaSet
/// pod, a bare pod and a DaemonSet pod on the node.
async fn surging() -> World {
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
fn placeholders(w: &World) -> BTreeMap<String, Value> {
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
    for absent in [
        "serviceAccountName",
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
        "securityContext",
    ] {
        assert!(c.get(absent).is_none(), "{absent} in {ph}");
    }
}

/// Drain passes (after the cordon pass) until none is pending, each after the pass gap or at
/// the time the drain asked to be looked at again; `between` runs before each pass.
async fn surge_passes(
    w: &World,
    executor: &KubeExecutor,
    plan: &Plan,
    mut between: impl FnMut(&World, usize),
) -> Vec<NodeOutcome> {
    let started_at = w.clock.now();
    let mut outcomes = executor.run(plan, Pass::Cordon).await.unwrap();
    let mut pass = 1;
    while outcomes[0].pending() {
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
fn sized(name: &str, id: &str, cpu: &str) -> Value {
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

/// `infra/k8s/placeholders.yaml`'s PriorityClass, admission policy and binding stored in `w`'s
/// fake, which enforces the policy (its CEL evaluated), and `w`'s clients impersonating
/// `group`: what forewarn's code sends, the API server admits or denies as it would.
fn as_forewarn_under_the_policy(w: &mut World, group: &str) {
    as_forewarn_under(w, "placeholders.yaml", group);
}

/// `infra/k8s/<file>`'s PriorityClasses, admission policies and bindings stored in `w`'s fake,
/// which enforces the policies, and `w`'s clients impersonating `group`.
fn as_forewarn_under(w: &mut World, file: &str, group: &str) {
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../infra/k8s")
            .join(file),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest).unwrap();
    for doc in docs.into_iter().filter(|d| {
        [
            "PriorityClass",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        .contains(&d["kind"].as_str().unwrap_or_default())
    }) {
        w.fake.insert(doc);
    }
    let mut config = w.fake.config();
    config.auth_info.impersonate = Some(format!("arn:aws:sts::123456789012:assumed-role/{group}"));
    config.auth_info.impersonate_groups = Some(vec![group.to_string()]);
    w.clients =
        ClusterClient::new(kube::Client::try_from(config).unwrap()).with_clock(w.clock.shared());
}

/// The placeholders forewarn makes pass `infra/k8s/placeholders.yaml`'s admission policy, its
/// CEL evaluated by the fake as the API server does; anything else forewarn's groups would
/// create or delete — a pod of another namespace, another name, an extra label or annotation,
/// a probe, a lifecycle hook, a service account, a delete of a tenant's pod — is denied.
#[tokio::test]
async fn placeholders_pass_the_admission_policy_and_nothing_else_forewarns_groups_send_does() {
    let fake = KubeFake::builder().admission_policies().start().await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    let mut web = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    web["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    web["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    w.fake.insert(web);
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        as_forewarn_under_the_policy(&mut w, group);
        let plan = w
            .plan(&event(
                EventKind::SpotInterruption,
                &format!("ev-admit-{group}"),
            ))
            .await;
        let executor = w.executor();
        executor.run(&plan, Pass::Cordon).await.unwrap();
        let out = first_drain_pass(&w, &executor, &plan).await;
        let drain = out.drain.unwrap();
        assert_eq!(
            drain.placeholders_created, 1,
            "{group}: admitted: {drain:?}"
        );
        assert_eq!(drain.waiting, ["default/web-1"]);
        // Deleted by the sweeper once expired: admitted too.
        let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
        assert_eq!(executor.clean_placeholders(later).await.unwrap().len(), 1);
        assert!(placeholders(&w).is_empty());
    }
    // What the policy denies forewarn's groups, however it is sent.
    let executor = w.executor();
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-admit-shape"))
        .await;
    executor.run(&plan, Pass::Cordon).await.unwrap();
    first_drain_pass(&w, &executor, &plan).await;
    let good = placeholders(&w).remove("default/web-1").unwrap();
    let client = w.clients.client().await.unwrap();
    let pods = |ns: &str| -> kube::Api<kube::core::DynamicObject> {
        kube::Api::namespaced_with(
            client.clone(),
            ns,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        )
    };
    let variant = |change: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
            v["metadata"].as_object_mut().unwrap().remove(field);
        }
        v.as_object_mut().unwrap().remove("status");
        let uid = "u-shape";
        v["metadata"]["name"] = json!(format!("forewarn-placeholder-{uid}"));
        v["metadata"]["annotations"]["forewarn.io/pod-uid"] = json!(uid);
        change(&mut v);
        v
    };
    let denied: Vec<(&str, Value)> = vec![
        (
            "another namespace",
            variant(&|v| v["metadata"]["namespace"] = json!("default")),
        ),
        (
            "another name",
            variant(&|v| v["metadata"]["name"] = json!("forewarn-placeholder-x")),
        ),
        (
            "an extra label",
            variant(&|v| v["metadata"]["labels"]["app"] = json!("web")),
        ),
        (
            "an extra annotation",
            variant(&|v| v["metadata"]["annotations"]["x"] = json!("y")),
        ),
        (
            "a probe",
            variant(&|v| {
                v["spec"]["containers"][0]["livenessProbe"] =
                    json!({"exec": {"command": ["sh", "-c", "curl evil"]}})
            }),
        ),
        (
            "a lifecycle hook",
            variant(&|v| {
                v["spec"]["containers"][0]["lifecycle"] =
                    json!({"postStart": {"exec": {"command": ["sh"]}}})
            }),
        ),
        (
            "a service account",
            variant(&|v| v["spec"]["serviceAccountName"] = json!("admin")),
        ),
        (
            "another image",
            variant(&|v| v["spec"]["containers"][0]["image"] = json!("busybox")),
        ),
        (
            "another class",
            variant(&|v| v["spec"]["priorityClassName"] = json!("system-node-critical")),
        ),
        (
            "an owner other than a Node",
            variant(&|v| {
                v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "y"}])
            }),
        ),
    ];
    for (what, body) in denied {
        let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
        let obj: kube::core::DynamicObject = serde_json::from_value(body).unwrap();
        match pods(&ns)
            .create(&kube::api::PostParams::default(), &obj)
            .await
        {
            Err(kube::Error::Api(s)) => assert!(
                [403, 422].contains(&s.code) && s.message.contains("forewarn-placeholders-only"),
                "{what}: {s:?}"
            ),
            other => panic!("{what}: admitted: {other:?}"),
        }
    }
    let admitted = variant(&|_| {});
    let obj: kube::core::DynamicObject = serde_json::from_value(admitted).unwrap();
    pods("forewarn")
        .create(&kube::api::PostParams::default(), &obj)
        .await
        .expect("the placeholder's own shape, under another uid, is admitted");
    // A tenant's pod cannot be deleted by forewarn's groups.
    match pods("default")
        .delete("web-1", &kube::api::DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("a tenant's pod deleted: {other:?}"),
    }
    assert!(w.pod("default", "web-1").is_some());
}

/// A placeholder never counts as room on another doomed node: a pod that tolerates every taint
/// (the cordon's included) has its placeholder kept off a node forewarn cordoned — the fake's
/// scheduler honours the placeholder's required node affinity — so it stays pending, and the
/// pod is not evicted for room that is going away too.
#[tokio::test]
async fn a_placeholder_never_lands_on_another_node_forewarn_cordoned() {
    let fake = KubeFake::builder()
        .scheduler(kube_fake::SchedulerSettings::default())
        .start()
        .await;
    let mut w = World::on(fake);
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    w.fake.insert(sized(NODE, ID, "1"));
    w.fake.insert(sized(OTHER_NODE, OTHER_ID, "4"));
    let mut web = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    web["spec"]["nodeSelector"] = json!({"pool": "general"});
    web["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    web["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500m"}});
    w.fake.insert(web);
    let executor = w.executor();
    // The other node's instance is warned first: forewarn cordons it (and labels it).
    let instances = BTreeMap::from([(OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE))]);
    let known: Vec<InstanceFacts> = instances.values().cloned().collect();
    let nodes = KubeNodeDirectory::new(w.clients.clone())
        .nodes(&known)
        .await
        .unwrap();
    let warning = fixtures::event(EventKind::SpotInterruption, "ev-other", OTHER_ID)
        .time(w.clock.now())
        .build();
    let other = decide(&warning, Facts::new(&instances, &nodes), &w.config);
    executor.run(&other, Pass::Cordon).await.unwrap();
    let labels = w.node(OTHER_NODE).unwrap()["metadata"]["labels"].clone();
    assert_eq!(labels["forewarn.io/cordoned"], "true", "{labels}");
    // Then this node: its placeholder finds no room but on the other doomed node.
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-this")).await;
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let out = first_drain_pass(&w, &executor, &plan).await;
    assert_eq!(out.drain.unwrap().waiting, ["default/web-1"]);
    w.clock.advance(Duration::from_secs(5));
    w.fake.settle();
    let ph = placeholders(&w).remove("default/web-1").unwrap();
    assert!(
        ph["spec"]["nodeName"].is_null(),
        "not bound to a doomed node: {ph}"
    );
    let plan_again = first_drain_pass(&w, &executor, &plan).await;
    assert!(
        w.pod("default", "web-1").is_some(),
        "still serving, its room not there yet: {plan_again:?}"
    );
}

/// `infra/k8s/node-writes.yaml`'s policy, enforced by the fake (its CEL evaluated), admits what
/// forewarn's cordon and its way back write on a Node, as either group, and denies any other
/// change forewarn's groups could send: another label, another taint removed, the provider id.
#[tokio::test]
async fn forewarns_node_writes_pass_the_node_policy_and_nothing_else_does() {
    let fake = KubeFake::builder().admission_policies().start().await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    let mut n = w.node(NODE).unwrap();
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    w.fake.insert(n);
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        as_forewarn_under(&mut w, "node-writes.yaml", group);
        let plan = w
            .plan(&event(
                EventKind::SpotInterruption,
                &format!("ev-nodes-{group}"),
            ))
            .await;
        let out = w
            .executor()
            .run(&plan, Pass::Cordon)
            .await
            .unwrap()
            .remove(0);
        assert!(out.cordon.is_some(), "{group}: {out:?}");
        let cordoned = w.node(NODE).unwrap();
        assert_eq!(cordoned["spec"]["unschedulable"], true, "{group}: admitted");
        assert_eq!(
            cordoned["metadata"]["labels"]["forewarn.io/cordoned"],
            "true"
        );
        let mut back = cordoned.clone();
        back["spec"]["unschedulable"] = json!(false);
        back["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        back["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("forewarn.io/cordoned");
        w.fake.insert(back);
    }
    let client = w.clients.client().await.unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let params = kube::api::PatchParams::default();
    for (what, patch) in [
        (
            "another label",
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/pool": "x"}}}),
        ),
        ("another taint removed", json!({"spec": {"taints": []}})),
        (
            "the provider id",
            json!({"spec": {"providerID": "aws:///us-east-1a/i-0fffffffffffffff0"}}),
        ),
    ] {
        match nodes
            .patch(NODE, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert!(s.message.contains("forewarn-node-writes"), "{what}: {s:?}")
            }
            other => panic!("{what}: admitted: {other:?}"),
        }
    }
}

/// A first drain pass (after its cordon) of `plan`, now.
async fn first_drain_pass(w: &World, executor: &KubeExecutor, plan: &Plan) -> NodeOutcome {
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

#[tokio::test]
async fn the_sweeper_deletes_placeholders_that_outlived_their_drain() {
    let w = surging().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-left"))
        .await;
    let executor = w.executor();
    // The first drain pass creates the placeholder; then the drain's chain is lost.
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let drain = Pass::Drain {
        started_at: w.clock.now(),
        role: DrainRole::First,
        heartbeat: false,
    };
    executor.run(&plan, drain).await.unwrap();
    assert_eq!(placeholders(&w).len(), 1);
    // A tenant's pod dressed as a placeholder (forewarn's labels, name, class and annotations,
    // expired) in its own namespace: not forewarn's, never deleted.
    let mut forged = placeholders(&w).into_values().next().unwrap();
    forged["metadata"]["namespace"] = json!("default");
    forged["metadata"]["annotations"]["forewarn.io/pod"] = json!("default/forged");
    forged["metadata"].as_object_mut().unwrap().remove("uid");
    forged["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    w.fake.insert(forged);
    // Not expired yet: nothing goes.
    assert!(
        executor
            .clean_placeholders(w.clock.now())
            .await
            .unwrap()
            .is_empty()
    );
    let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
    let dry = w.executor().dry_run(true);
    assert_eq!(dry.clean_placeholders(later).await.unwrap().len(), 1);
    assert_eq!(placeholders(&w).len(), 2, "a dry run deletes nothing");
    let gone = executor.clean_placeholders(later).await.unwrap();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(
        gone[0].starts_with("forewarn/forewarn-placeholder-"),
        "{gone:?}"
    );
    // Only the tenant's look-alike is left: forewarn never deletes it.
    let left = placeholders(&w);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left.values().next().unwrap()["metadata"]["namespace"],
        "default"
    );
}

/// EC2 does not answer: the sweep cannot look.
struct LeavingDown;

#[async_trait]
impl forewarn::ports::LeavingInstances for LeavingDown {
    async fn leaving(
        &self,
        _cluster: &str,
    ) -> Result<Vec<InstanceFacts>, forewarn::ports::DirectoryError> {
        Err(forewarn::ports::DirectoryError::new(
            "ec2",
            forewarn::ports::FailureKind::Unavailable,
            "DescribeInstances: 503 Service Unavailable",
        ))
    }
    async fn statuses(
        &self,
    ) -> Result<Vec<forewarn::domain::status::InstanceStatus>, forewarn::ports::DirectoryError>
    {
        Ok(Vec::new())
    }
}

/// A sweeper run whose sweep cannot look (EC2 down) still cleans up the placeholders drains
/// left, and a delete that fails does not stop the others: the run reports both failures after
/// every step ran.
#[tokio::test]
async fn the_sweepers_clean_up_runs_whatever_else_failed_and_every_delete_is_tried() {
    let w = surging().await;
    // A second controller's pod: two placeholders.
    w.fake
        .insert(pod_object("default", "api-1", NODE, "api", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-surge-sweep"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    first_drain_pass(&w, &executor, &plan).await;
    let made = placeholders(&w);
    assert_eq!(made.len(), 2, "{made:?}");
    // The drain's chain is lost; later, the first delete is answered 500.
    let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
    w.clock
        .sleep((later - w.clock.now()).to_std().unwrap())
        .await;
    w.fake.inject(
        Fault::new(500)
            .method(Method::DELETE)
            .path_contains("/api/v1/namespaces/forewarn/pods/"),
    );
    let dir = tempfile::tempdir().unwrap();
    let sweeper = forewarn::app::sweeper::Sweeper {
        handler: forewarn::app::handler::Handler {
            executor: Some(Arc::new(w.executor())),
            ..w.handler(dir.path())
        },
        leaving: Arc::new(LeavingDown),
        region: Some("us-east-1".into()),
        priorities: None,
    };
    let run = sweeper.run(None).await;
    assert!(run.findings.is_err(), "EC2 is down: the sweep cannot look");
    let failures = run.failures();
    assert!(failures[0].contains("503"), "{failures:?}");
    assert!(
        failures
            .iter()
            .any(|f| f.contains("placeholders: 1 of 2 failed")),
        "{failures:?}"
    );
    assert_eq!(placeholders(&w).len(), 1, "the other delete went through");
    // The next run deletes what is left.
    let again = sweeper.run(None).await;
    assert_eq!(again.placeholders.unwrap().len(), 1);
    assert!(placeholders(&w).is_empty());
}

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
    let detail = out.detail();
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

#[tokio::test]
async fn a_conflicting_cordon_is_read_again_and_retried() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-409"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Cordon);
    w.fake.clear_requests();
    w.fake.inject(
        Fault::new(409)
            .method(Method::PATCH)
            .path_contains("/api/v1/nodes/")
            .times(1),
    );

    let out = w.run(&plan).await;

    assert_eq!(out.cordon, Some(CordonOutcome::Cordoned { attempts: 2 }));
    let node_requests: Vec<(Method, u16)> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("/api/v1/nodes/{NODE}"))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        node_requests,
        vec![
            (Method::GET, 200),
            (Method::PATCH, 409),
            (Method::GET, 200),
            (Method::PATCH, 200)
        ]
    );
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], true);
    assert_eq!(
        taints(&w.node(NODE).unwrap())[1],
        (
            TAINT.into(),
            "rebalance-recommendation".into(),
            "NoSchedule".into()
        )
    );
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_node_that_keeps_conflicting_is_an_error() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-409s"))
        .await;
    w.fake.inject(
        Fault::new(409)
            .method(Method::PATCH)
            .path_contains("/api/v1/nodes/")
            .times(100),
    );

    let err = execute_passes(&w.executor(), &plan).await.unwrap_err();

    assert_eq!(err.instance_id, ID);
    assert!(err.message().contains(NODE), "{err}");
    assert!(
        err.message().contains("conflicting after 5 attempts"),
        "{err}"
    );
}

#[tokio::test]
async fn a_taint_added_between_read_and_patch_is_kept() {
    // A real conflict: another controller adds a taint after forewarn read the node and before
    // its patch arrives. The resourceVersion in the patch makes the server answer 409; forewarn
    // reads the node again and the other taint survives.
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::RebalanceRecommendation, "ev-race"))
        .await;
    w.fake.clear_requests();
    let mut changed = w.fake.get("v1", "Node", None, NODE).unwrap();
    changed["spec"]["taints"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "other-controller", "effect": "NoSchedule"}));
    // The other controller's write lands right after forewarn's read of the node.
    w.fake
        .after_answer(Method::GET, format!("/api/v1/nodes/{NODE}"), changed);

    let out = w.run(&plan).await;

    assert_eq!(out.cordon, Some(CordonOutcome::Cordoned { attempts: 2 }));
    let keys: Vec<String> = taints(&w.node(NODE).unwrap())
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(keys, vec!["dedicated", "other-controller", TAINT]);
    let patches: Vec<u16> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::PATCH)
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, vec![409, 200]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_node_that_is_gone_is_success() {
    let w = World::plain().await;
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-gone")).await;
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.clear_requests();

    let results = execute_passes(&w.executor(), &plan).await.unwrap();

    assert!(
        results[0].detail.contains("is gone"),
        "{}",
        results[0].detail
    );
    // The cordon pass went by the node the directory had just read: its one patch found no
    // node (404), and nothing else was sent.
    assert_eq!(written(&w.fake), vec![("PATCH".to_string(), 404)]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_control_plane_node_gets_no_write() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-cp")).await;
    assert_eq!(plan.actions[0].action, Action::CordonDrain);
    // The node turned out to be control-plane (live labels): the executor checks again.
    let mut cp = w.node(NODE).unwrap();
    cp["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(cp);
    w.fake.clear_requests();

    let out = w.run(&plan).await;

    // The cordon pass went by the node the directory had just read; its patch, conditional on
    // that read's resourceVersion, was refused (409), and the node read again is verified
    // again: refused, nothing written.
    assert!(
        out.refused.as_deref().unwrap().contains("control-plane"),
        "{out:?}"
    );
    assert_eq!(written(&w.fake), vec![("PATCH".to_string(), 409)]);
    assert_eq!(w.node(NODE).unwrap()["spec"].get("unschedulable"), None);
    // Read afresh (the directory's read too old to stand in), it is refused before any write.
    w.clock.advance(Duration::from_secs(11));
    w.fake.clear_requests();
    let out = w.run(&plan).await;
    assert!(
        out.refused.as_deref().unwrap().contains("control-plane"),
        "{out:?}"
    );
    assert_eq!(w.fake.writes(), vec![]);

    // By taint alone, too; and the decision core never plans anything for one.
    let mut tainted = node(NODE, ID);
    tainted["spec"]["taints"] =
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    w.fake.insert(tainted);
    let out = w.run(&plan).await;
    assert!(out.refused.is_some());
    let planned = w.plan(&event(EventKind::SpotInterruption, "ev-cp-2")).await;
    assert_eq!(planned.actions[0].action, Action::None);
    assert_eq!(w.fake.writes(), vec![]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_says_what_it_would_do() {
    let w = World::plain().await;
    seed_pods(&w);
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-dry")).await;
    w.fake.clear_requests();
    let executor = w.executor().dry_run(true);

    let out = passes(&executor, &plan).await.unwrap().remove(0);

    assert_eq!(w.fake.writes(), vec![]);
    let Some(CordonOutcome::WouldCordon { patch }) = &out.cordon else {
        panic!("{:?}", out.cordon)
    };
    assert_eq!(patch["spec"]["unschedulable"], true);
    let drain = out.drain.as_ref().unwrap();
    assert_eq!(
        drain
            .would_evict
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["default/web-1", "default/web-2", "kube-system/coredns-1"]
    );
    assert!(drain.evicted.is_empty());
    let detail = out.detail();
    assert!(detail.starts_with("dry run"), "{detail}");
    assert!(detail.contains("would cordon"), "{detail}");
    assert!(detail.contains("would evict 3 pods"), "{detail}");
    assert!(
        detail.contains("would record Events SpotInterrupted"),
        "{detail}"
    );

    // A delete, too.
    let owned = w.node(NODE).unwrap();
    let mut owned = owned;
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "default-x1", "uid": "uid-nc"}]);
    w.fake.insert(owned);
    w.fake.insert(nodeclaim("default-x1"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-dry-2"))
        .await;
    w.fake.clear_requests();
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    assert_eq!(
        out.delete,
        Some(DeleteOutcome::WouldDelete {
            target: "nodeclaim/default-x1".into()
        })
    );
    assert_eq!(w.fake.writes(), vec![]);
    assert_accepted(&w.fake.requests());
}

#[tokio::test]
async fn a_failing_api_is_an_error_so_the_event_comes_back() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-500")).await;
    // The pods of the node cannot be listed: nothing of the drain can be done.
    w.fake.inject(
        Fault::new(500)
            .method(Method::GET)
            .path_contains("/api/v1/pods")
            .times(100),
    );

    let err = execute_passes(&w.executor(), &plan).await.unwrap_err();

    assert_eq!(err.instance_id, ID);
    assert!(err.message().contains("list pods on node/"), "{err}");
    assert!(err.message().contains(": 500"), "{err}");

    // A 503 that clears up is retried in place.
    w.fake.clear_faults();
    w.fake
        .inject(Fault::new(503).path_contains("/eviction").times(1));
    let out = w.run(&plan).await;
    assert_eq!(
        out.drain.unwrap().evicted,
        vec!["default/web-1".to_string()]
    );
}

// ---------------------------------------------------------------------------------------------
// Delete

fn nodeclaim(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"providerID": format!("aws:///us-east-1a/{ID}"), "nodeName": NODE},
    })
}

fn machine(ns: &str, name: &str, finalizers: bool) -> Value {
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

    assert_eq!(
        out.delete,
        Some(DeleteOutcome::Deleted {
            target: "nodeclaim/default-abc12".into()
        })
    );
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
    assert_eq!(
        again.delete,
        Some(DeleteOutcome::AlreadyGone {
            target: "nodeclaim/default-abc12".into()
        })
    );
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

    assert_eq!(
        out.delete,
        Some(DeleteOutcome::Deleted {
            target: "machine/capi-clusters/md-0-7f9c".into()
        })
    );
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
    assert_eq!(
        again.delete,
        Some(DeleteOutcome::AlreadyDeleting {
            target: "machine/capi-clusters/md-0-7f9c".into()
        })
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

    assert_eq!(
        out.delete,
        Some(DeleteOutcome::Deleted {
            target: format!("node/{NODE}")
        })
    );
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
    assert!(again.node_gone);
    assert_eq!(w.fake.writes(), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle actions

#[derive(Default)]
struct RecordingLifecycle {
    calls: Mutex<Vec<(String, String)>>,
    heartbeats: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl LifecycleCompleter for RecordingLifecycle {
    async fn complete(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<LifecycleOutcome, LifecycleError> {
        self.calls
            .lock()
            .unwrap()
            .push((instance_id.to_string(), action.token.clone()));
        Ok(LifecycleOutcome::Completed)
    }

    async fn heartbeat(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, LifecycleError> {
        self.heartbeats
            .lock()
            .unwrap()
            .push((instance_id.to_string(), action.token.clone()));
        Ok(true)
    }
}

#[tokio::test]
async fn the_lifecycle_action_is_completed_after_the_drain_and_not_after_a_failure() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w.plan(&event(EventKind::AsgTermination, "ev-asg")).await;
    assert!(plan.actions[0].complete_lifecycle.is_some());
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());

    // The API fails: the event comes back, the instance is not let go.
    w.fake.inject(
        Fault::new(500)
            .method(Method::GET)
            .path_contains("/api/v1/pods")
            .times(100),
    );
    assert!(execute_passes(&executor, &plan).await.is_err());
    assert!(lifecycle.calls.lock().unwrap().is_empty());

    w.fake.clear_faults();
    let results = execute_passes(&executor, &plan).await.unwrap();
    assert_eq!(
        *lifecycle.calls.lock().unwrap(),
        vec![(
            ID.to_string(),
            "168c6c3d-d370-48df-af77-8b8852e0806c".to_string()
        )]
    );
    assert!(w.pod("default", "web-1").is_none());
    assert!(
        results[0]
            .detail
            .contains("completed lifecycle action eks-demo-ng-1/forewarn-drain"),
        "{}",
        results[0].detail
    );

    // Without an Auto Scaling client, or in a dry run, it is only reported.
    let out = w.run(&plan).await;
    assert_eq!(out.lifecycle, Some(LifecycleOutcome::NotConfigured));
    let out = w.executor().dry_run(true);
    let out = passes(&out, &plan).await.unwrap().remove(0);
    assert_eq!(out.lifecycle, Some(LifecycleOutcome::WouldComplete));
}

/// Launch hooks: the instance has no node yet when the plan is made; the node the kubelet
/// registers is read in every pass.
async fn launching() -> (World, Arc<RecordingLifecycle>, KubeExecutor) {
    let mut w = World::new().await;
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    // Short, so that the test's passes (100 ms apart) reach the deadline.
    w.config.launch_timeout = chrono::Duration::seconds(3);
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());
    (w, lifecycle, executor)
}

#[tokio::test]
async fn a_launch_hook_is_completed_once_the_node_has_joined_and_is_ready() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    let a = &plan.actions[0];
    assert_eq!(a.action, Action::None);
    assert_eq!(
        a.node.as_deref(),
        Some(NODE),
        "the name it will have: {a:?}"
    );
    assert!(a.complete_lifecycle.as_ref().unwrap().is_launch());

    // The kubelet registers the node after the first look (not Ready yet), and the node
    // becomes Ready after the third.
    let path = format!("/api/v1/nodes/{NODE}");
    let mut registering = node(NODE, ID);
    registering["status"]["conditions"] =
        json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]);
    w.fake.after_answer(Method::GET, &path, registering.clone());
    w.fake.after_answer(Method::GET, &path, registering);
    w.fake.after_answer(Method::GET, &path, node(NODE, ID));

    let first = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(first.pending(), "{first:?}");
    assert!(
        first.detail().contains("no node of instance"),
        "{}",
        first.detail()
    );
    assert!(lifecycle.calls.lock().unwrap().is_empty());
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    assert!(!out.pending());
    assert_eq!(
        out.joining,
        Some(Joining::Ready {
            node: NODE.to_string()
        })
    );
    assert_eq!(
        *lifecycle.calls.lock().unwrap(),
        vec![(
            ID.to_string(),
            "168c6c3d-d370-48df-af77-8b8852e0806c".to_string()
        )]
    );
    assert!(
        !lifecycle.heartbeats.lock().unwrap().is_empty(),
        "kept alive while waiting"
    );
    // Only reads: a launch changes no node.
    for method in [Method::PATCH, Method::PUT, Method::DELETE] {
        assert!(paths(&w.fake.requests(), method).is_empty());
    }
    // Ready before any pass (a late event): completed in the first pass.
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());
    let out = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(!out.pending());
    assert_eq!(lifecycle.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_launch_hook_whose_node_never_joins_is_left_to_its_timeout() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    // A node of the planned name left by an earlier instance is not this instance's node.
    w.fake.insert(node(NODE, OTHER_ID));
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    match &out.joining {
        Some(Joining::TimedOut { why }) => {
            assert!(why.contains(&format!("runs instance {OTHER_ID}")), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        lifecycle.calls.lock().unwrap().is_empty(),
        "never completed"
    );
    assert!(!lifecycle.heartbeats.lock().unwrap().is_empty());
    assert!(
        out.detail().contains("left to the hook's own timeout"),
        "{}",
        out.detail()
    );
    // A dry run of a node not Ready says so and would not complete.
    let out = w
        .executor()
        .dry_run(true)
        .run(&plan, Pass::Cordon)
        .await
        .unwrap()
        .remove(0);
    assert!(!out.pending());
    assert_eq!(out.lifecycle, None, "{out:?}");
}

#[tokio::test]
async fn a_launch_hook_of_a_control_plane_node_is_left_alone() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    let mut cp = node(NODE, ID);
    cp["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(cp);
    let out = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(
        out.refused.as_deref().unwrap().contains("control-plane"),
        "{out:?}"
    );
    assert!(!out.pending());
    assert!(lifecycle.calls.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// The node directory

#[tokio::test]
async fn the_directory_gets_nodes_by_name_and_lists_at_most_once() {
    let w = World::new().await;
    w.fake.insert(node(NODE, ID));
    // Custom name, found by providerID; instance-id name, found by name; a reused DNS name.
    w.fake
        .insert(node("worker-custom-1", "i-0a1b2c3d4e5f60002"));
    let mut by_id = node("i-0a1b2c3d4e5f60003.us-east-1.compute.internal", "x");
    by_id["spec"].as_object_mut().unwrap().remove("providerID");
    w.fake.insert(by_id);
    w.fake
        .insert(node("ip-10-0-1-14.ec2.internal", "i-0a1b2c3d4e5f69999"));
    let directory = KubeNodeDirectory::new(w.clients.clone());

    let all_by_name = directory.nodes(&[instance(ID, NODE)]).await.unwrap();
    assert_eq!(all_by_name.len(), 1);
    assert_eq!(all_by_name[0].name, NODE);
    assert_eq!(all_by_name[0].instance_id(), Some(ID));
    let requests = w.fake.requests();
    assert_eq!(requests.len(), 1, "one get, no list: {requests:?}");
    w.fake.clear_requests();

    let batch = [
        instance(ID, NODE),
        instance("i-0a1b2c3d4e5f60002", "ip-10-0-1-12.ec2.internal"),
        instance("i-0a1b2c3d4e5f60003", "ip-10-0-1-13.ec2.internal"),
        instance("i-0a1b2c3d4e5f60004", "ip-10-0-1-14.ec2.internal"),
    ];
    let found = directory.nodes(&batch).await.unwrap();
    let names: BTreeSet<&str> = found.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            NODE,
            "worker-custom-1",
            "i-0a1b2c3d4e5f60003.us-east-1.compute.internal"
        ])
    );
    let requests = w.fake.requests();
    let gets = requests
        .iter()
        .filter(|r| r.method == Method::GET && r.path.starts_with("/api/v1/nodes/"))
        .count();
    let lists = requests
        .iter()
        .filter(|r| r.method == Method::GET && r.path == "/api/v1/nodes")
        .count();
    assert_eq!((gets, lists), (4, 1));
    assert_accepted(&requests);
    assert!(directory.nodes(&[]).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Through the pipeline

struct Instances(BTreeMap<String, InstanceFacts>);

#[async_trait]
impl forewarn::ports::InstanceDirectory for Instances {
    async fn describe(
        &self,
        ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, forewarn::ports::DirectoryError> {
        Ok(self
            .0
            .iter()
            .filter(|(k, _)| ids.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[tokio::test]
async fn the_pipeline_acts_through_the_adapter_once_per_event() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = Instances(BTreeMap::from([(ID.to_string(), instance(ID, NODE))]));
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let executor = w.executor();
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &w.in_process);
    let raw = fixtures::spot_json("ev-pipeline", ID, &Utc::now().to_rfc3339());
    let records =
        forewarn::domain::inbound::decode("test", raw.to_string().as_bytes(), Utc::now()).unwrap();

    let reports = pipeline.process(&records).await;

    assert_eq!(
        reports[0].outcome,
        forewarn::domain::report::Outcome::Acted,
        "{reports:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(
        result.contains("cordoned") && result.contains("evicted 1 pod"),
        "{result}"
    );
    assert!(w.pod("default", "web-1").is_none());

    // The same event again: a duplicate, and not a request to the cluster beyond the lookup.
    w.fake.clear_requests();
    let reports = pipeline.process(&records).await;
    assert_eq!(
        reports[0].outcome,
        forewarn::domain::report::Outcome::Duplicate
    );
    assert_eq!(w.fake.writes(), vec![]);
}

/// The handler with the webhook configured: one message per action, the drain's numbers in the
/// report and its metrics, and a webhook that fails never fails the event.
#[tokio::test]
async fn the_handler_tells_the_webhook_and_counts_evictions() {
    use forewarn::domain::report::Outcome;
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let answer = Arc::new(std::sync::atomic::AtomicU16::new(200));
    let app = axum::Router::new().route(
        "/hooks/forewarn",
        axum::routing::post({
            let (received, answer) = (received.clone(), answer.clone());
            move |axum::Json(body): axum::Json<Value>| async move {
                received.lock().unwrap().push(body);
                axum::http::StatusCode::from_u16(answer.load(std::sync::atomic::Ordering::SeqCst))
                    .unwrap()
            }
        }),
    );
    let url = format!("{}/hooks/forewarn", serve(app).await);
    let mut w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(pod_object("default", "web-2", NODE, "web", "ReplicaSet"));
    let template = r#"{"text": "{{action}} {{node}}: {{result}}", "event": "{{event_id}}", "pool": "{{pool}}", "cluster": "{{cluster}}"}"#;
    let settings = forewarn::app::settings::Settings::from_lookup(|n| match n {
        "FOREWARN_CLUSTER_NAME" => Some("demo".into()),
        "FOREWARN_WEBHOOK_URL" => Some(url.clone()),
        // The test's receiver is plain HTTP on loopback.
        "FOREWARN_WEBHOOK_ALLOW_HTTP" => Some("true".into()),
        // Evictions at once (this test counts them in one message): no surge, blank as set.
        "FOREWARN_SURGE" => Some(String::new()),
        "FOREWARN_WEBHOOK_TEMPLATE" => Some(template.into()),
        _ => None,
    })
    .unwrap();
    w.config = settings.config.clone();
    let webhook = forewarn::adapters::webhook::Webhook::new(
        settings.webhook.clone().unwrap(),
        settings.config.cluster_name.clone(),
    );
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        notifier: Some(Arc::new(webhook)),
        instances: Arc::new(Instances(BTreeMap::from([
            (ID.to_string(), instance(ID, NODE)),
            (OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE)),
        ]))),
        nodes: Arc::new(KubeNodeDirectory::new(w.clients.clone())),
        executor: Some(Arc::new(w.executor())),
        concurrency: 4,
        ..w.handler(dir.path())
    };
    let spot =
        |id: &str, instance: &str| fixtures::spot_json(id, instance, &w.clock.now().to_rfc3339());

    let inv = handler.invoke(spot("ev-hook", ID), None).await.unwrap();

    let report = &inv.reports[0];
    assert_eq!(report.outcome, Outcome::Acted, "{report:?}");
    let action = &report.actions[0];
    assert_eq!(
        action.drain,
        Some(forewarn::domain::report::DrainSummary {
            evicted: 2,
            left: 0,
            complete: true,
            pending: false,
        })
    );
    let cordoned_at = action.cordoned_at.expect("the cordon's time");
    assert!(report.time.unwrap() <= cordoned_at && cordoned_at <= w.clock.now());
    let received_now = received.lock().unwrap().clone();
    assert_eq!(received_now.len(), 1, "{received_now:?}");
    let message = &received_now[0];
    assert_eq!(message["event"], "ev-hook");
    assert_eq!(message["pool"], "spot/m5.large/us-east-1a");
    assert_eq!(message["cluster"], "demo");
    let text = message["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("cordon-drain {NODE}: cordoned node/{NODE}"))
            && text.contains("evicted 2 pods"),
        "{text}"
    );
    let docs = forewarn::app::telemetry::emf_documents(report, Utc::now());
    let evictions = docs.iter().find(|d| d.get("Evictions").is_some()).unwrap();
    assert_eq!(evictions["Evictions"], 2);
    let drains = docs.iter().find(|d| d.get("Drains").is_some()).unwrap();
    assert_eq!(drains["Result"], "complete");

    // The webhook fails: the event is applied all the same; a duplicate tells nothing.
    answer.store(500, std::sync::atomic::Ordering::SeqCst);
    let inv = handler
        .invoke(spot("ev-hook-2", OTHER_ID), None)
        .await
        .unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Acted, "{:?}", inv.reports);
    assert_eq!(received.lock().unwrap().len(), 2);
    let inv = handler
        .invoke(spot("ev-hook-2", OTHER_ID), None)
        .await
        .unwrap();
    assert_eq!(inv.reports[0].outcome, Outcome::Duplicate);
    assert_eq!(received.lock().unwrap().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// RBAC

/// What an API request needs: (API group, resource, verb, namespace, the object's name when the
/// path has one). As a grant: a `None` namespace is every namespace (a ClusterRole bound by a
/// ClusterRoleBinding), a `None` name every object.
type Need = (String, String, String, Option<String>, Option<String>);

const HANDLER_GROUP: &str = "forewarn-handler";
const SWEEPER_GROUP: &str = "forewarn-sweeper";

/// What an API request needs.
fn rbac_need(r: &RecordedRequest) -> Need {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => panic!("not a resource path: {}", r.path),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        other => (None, other),
    };
    let (resource, name) = match rest {
        [resource] => (resource.to_string(), None),
        [resource, name] => (resource.to_string(), Some(name.to_string())),
        [resource, name, sub] => (format!("{resource}/{sub}"), Some(name.to_string())),
        _ => panic!("not a resource path: {}", r.path),
    };
    let verb = match (r.method.as_str(), name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        (m, _) => panic!("unexpected {m} {}", r.path),
    };
    (group, resource, verb.to_string(), namespace, name)
}

/// Whether `grant` allows the request needing `need`.
fn grants(grant: &Need, need: &Need) -> bool {
    grant.0 == need.0
        && grant.1 == need.1
        && grant.2 == need.2
        && (grant.3.is_none() || grant.3 == need.3)
        && (grant.4.is_none() || grant.4 == need.4)
}

/// What infra/k8s/rbac.yaml grants each group: every binding's role, resolved (a RoleBinding's
/// grants are limited to its namespace). Every subject is a group, every role is bound, and no
/// rule has a wildcard.
fn rbac_granted() -> BTreeMap<String, BTreeSet<Need>> {
    // rbac.yaml, and placeholders.yaml's grant, applied with FOREWARN_SURGE (the scenarios
    // below surge).
    let mut docs: Vec<Value> = Vec::new();
    for file in ["rbac.yaml", "placeholders.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../infra/k8s")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        docs.extend(serde_saphyr::from_multiple::<Value>(&text).unwrap());
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .collect();
    let mut bound = BTreeSet::new();
    let mut granted: BTreeMap<String, BTreeSet<Need>> = BTreeMap::new();
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let namespace = binding["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        assert_eq!(
            namespace.is_some(),
            binding["kind"] == "RoleBinding",
            "{binding}"
        );
        let role_ref = &binding["roleRef"];
        let role = roles
            .iter()
            .find(|r| {
                r["kind"] == role_ref["kind"]
                    && r["metadata"]["name"] == role_ref["name"]
                    && (r["kind"] == "ClusterRole"
                        || r["metadata"]["namespace"].as_str() == namespace.as_deref())
            })
            .unwrap_or_else(|| panic!("the role of {binding}"));
        bound.insert((
            role["kind"].to_string(),
            role["metadata"]["name"].to_string(),
        ));
        for subject in binding["subjects"].as_array().unwrap() {
            assert_eq!(subject["kind"], "Group", "only groups are bound: {subject}");
            let group = granted
                .entry(subject["name"].as_str().unwrap().to_string())
                .or_default();
            for rule in role["rules"].as_array().unwrap() {
                let names: Vec<Option<String>> = match rule.get("resourceNames") {
                    Some(n) => strings(n).into_iter().map(Some).collect(),
                    None => vec![None],
                };
                for g in strings(&rule["apiGroups"]) {
                    for res in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            assert!(
                                g != "*" && res != "*" && verb != "*",
                                "a wildcard in {rule}"
                            );
                            for name in &names {
                                group.insert((
                                    g.clone(),
                                    res.clone(),
                                    verb.clone(),
                                    namespace.clone(),
                                    name.clone(),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(bound.len(), roles.len(), "every role is bound");
    granted
}

/// `used` (the requests of one function's code paths) is exactly what `group` is granted: each
/// request granted, each grant used.
fn assert_exactly(group: &str, used: &BTreeSet<Need>, granted: &BTreeMap<String, BTreeSet<Need>>) {
    let granted = granted
        .get(group)
        .unwrap_or_else(|| panic!("rbac.yaml binds nothing to {group}"));
    let missing: Vec<_> = used
        .iter()
        .filter(|u| !granted.iter().any(|g| grants(g, u)))
        .collect();
    assert!(
        missing.is_empty(),
        "{group}: used but not granted: {missing:?}"
    );
    let unused: Vec<_> = granted
        .iter()
        .filter(|g| !used.iter().any(|u| grants(g, u)))
        .collect();
    assert!(
        unused.is_empty(),
        "{group}: granted but never used: {unused:?}"
    );
}

/// This cluster's leaving instances, as EC2 would list them.
struct Leaving(Vec<InstanceFacts>);

#[async_trait]
impl forewarn::ports::LeavingInstances for Leaving {
    async fn leaving(
        &self,
        _cluster: &str,
    ) -> Result<Vec<InstanceFacts>, forewarn::ports::DirectoryError> {
        Ok(self.0.clone())
    }
    async fn statuses(
        &self,
    ) -> Result<Vec<forewarn::domain::status::InstanceStatus>, forewarn::ports::DirectoryError>
    {
        Ok(Vec::new())
    }
}

/// No node groups: the priorities are the base's.
struct NoGroups;

#[async_trait]
impl forewarn::ports::NodeGroupSource for NoGroups {
    async fn describe(
        &self,
    ) -> Result<Vec<forewarn::domain::priorities::AsgDescription>, forewarn::ports::DirectoryError>
    {
        Ok(Vec::new())
    }
}

/// The expander ConfigMap as `kubectl create -f infra/k8s/priority-expander.yaml` makes it.
fn expander_manifest() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../infra/k8s/priority-expander.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every request a sweep and a priority update send, against a cluster where each kind of
/// finding occurs: a spot instance stopped by an interruption (cordon and drain), and nodes of
/// instances EC2 no longer knows, plain, Karpenter's and Cluster API's (deletes). The priority
/// expander is updated from the manifest's ConfigMap, and its absence is reported, not mended.
async fn sweeper_requests() -> Vec<RecordedRequest> {
    use forewarn::app::priorities::{Change, PrioritySettings};
    use forewarn::app::sweeper::{SweepPriorities, Sweeper};
    use forewarn::domain::pool::CapacityType;
    use forewarn::domain::sweep::SPOT_TERMINATION_REASON;

    let mut w = World::new().await;
    // Spot drains surge (FOREWARN_SURGE): placeholders are created, listed and deleted.
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    // Stopped by a spot interruption: drained.
    w.fake.insert(node(NODE, ID));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let stopping = fixtures::instance(ID)
        .typed("m5.large", "us-east-1a")
        .dns(NODE)
        .capacity(CapacityType::Spot)
        .state("stopping")
        .state_reason(Some(SPOT_TERMINATION_REASON))
        .launched(Utc::now() - chrono::Duration::hours(1))
        .cluster("demo")
        .build();
    // Gone from EC2: deleted, each through its owner.
    let gone = |n: u32| {
        (
            format!("ip-10-0-7-{n}.ec2.internal"),
            format!("i-0a1b2c3d4e5f7000{n}"),
        )
    };
    let (plain, plain_id) = gone(1);
    w.fake.insert(node(&plain, &plain_id));
    let (karpenter, karpenter_id) = gone(2);
    w.fake.insert(
        node_object(&karpenter, &karpenter_id)
            .nodeclaim("nc-s")
            .kubelet()
            .build(),
    );
    w.fake.insert(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "nc-s"},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"providerID": format!("aws:///us-east-1a/{karpenter_id}"), "nodeName": karpenter},
    }));
    let (capi, capi_id) = gone(3);
    let mut n = node(&capi, &capi_id);
    n["metadata"]["annotations"] = json!({"cluster.x-k8s.io/machine": "m-s",
        "cluster.x-k8s.io/cluster-namespace": "default"});
    w.fake.insert(n);
    let mut m = machine("default", "m-s", false);
    m["spec"]["providerID"] = json!(format!("aws:///us-east-1a/{capi_id}"));
    m["status"] = json!({"nodeRef": {"kind": "Node", "name": capi}});
    w.fake.insert(m);
    w.fake
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "forewarn-priority-base", "namespace": "kube-system"},
        "data": {"priorities": "10: ['.*']"}}));

    let dir = tempfile::tempdir().unwrap();
    let handler = w.handler(dir.path());
    // Records signed with the store's keys, as the wiring builds it.
    let executor = w.executor().with_keys(handler.store.clone());
    let sweeper = Sweeper {
        handler: forewarn::app::handler::Handler {
            instances: Arc::new(Instances(BTreeMap::from([(
                ID.to_string(),
                stopping.clone(),
            )]))),
            nodes: Arc::new(KubeNodeDirectory::new(w.clients.clone())),
            executor: Some(Arc::new(executor)),
            concurrency: 4,
            policies: Some(w.policies()),
            ..handler
        },
        leaving: Arc::new(Leaving(vec![stopping])),
        region: Some("us-east-1".into()),
        priorities: Some(SweepPriorities {
            groups: Arc::new(NoGroups),
            expander: Arc::new(forewarn::adapters::kube::KubeExpander::new(
                w.clients.clone(),
            )),
            settings: PrioritySettings::default(),
        }),
    };
    let reports = sweeper.sweep(None).await.unwrap();
    // The way back reads every node (nothing of forewarn's has lost its reason here).
    assert!(sweeper.way_back().await.unwrap().is_empty());
    // The clean-up lists every placeholder (none is left: the drain deleted its own).
    assert!(sweeper.clean_placeholders().await.unwrap().is_empty());
    // The stopped spot instance is found twice: as a spot interruption (drained first) and as the
    // leaving instance of a node.
    assert_eq!(reports.len(), 5, "{reports:#?}");
    assert!(
        reports
            .iter()
            .all(|r| r.outcome == forewarn::domain::report::Outcome::Acted),
        "{reports:#?}"
    );
    assert!(w.pod("default", "web-1").is_none(), "drained");
    assert!(w.node(&plain).is_none(), "the plain node is deleted");
    assert!(
        w.fake
            .get("karpenter.sh/v1", "NodeClaim", None, "nc-s")
            .is_none()
    );
    assert!(
        w.fake
            .get(
                "cluster.x-k8s.io/v1beta1",
                "Machine",
                Some("default"),
                "m-s"
            )
            .is_none()
    );

    // No expander ConfigMap: reported, not created.
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Missing);
    assert!(
        !w.fake
            .requests()
            .iter()
            .any(|r| r.method.as_str() == "POST" && r.path.contains("configmaps")),
        "the sweeper created a ConfigMap"
    );
    // Created from the manifest: updated from the base priorities, then left alone.
    w.fake.insert(expander_manifest());
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Updated);
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Unchanged);
    w.fake.requests()
}

#[tokio::test]
async fn rbac_grants_exactly_what_the_adapter_uses() {
    let granted = rbac_granted();
    assert_eq!(
        granted.keys().map(String::as_str).collect::<Vec<_>>(),
        vec![HANDLER_GROUP, SWEEPER_GROUP],
        "one group per function"
    );
    for (group, needs) in &granted {
        assert!(
            !needs.iter().any(|n| n.1 == "configmaps" && n.2 == "create"),
            "{group} may create ConfigMaps (any name, aws-auth included)"
        );
    }

    // The handler: every action, every lookup path.
    let mut handler = BTreeSet::new();
    let mut collect = |fake: &KubeFake| {
        for r in fake.requests() {
            handler.insert(rbac_need(&r));
        }
    };
    {
        let w = World::plain().await;
        seed_pods(&w);
        let directory = KubeNodeDirectory::new(w.clients.clone());
        directory
            .nodes(&[instance("i-0a1b2c3d4e5f60002", "ip-10-0-9-9.ec2.internal")])
            .await
            .unwrap();
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-1"))
            .await;
        w.run(&plan).await;
        let plan = w.plan(&event(EventKind::StateChange, "ev-rbac-2")).await;
        w.run(&plan).await;
        // The policy ConfigMap, refused: an Event on it.
        w.fake.insert(policy_configmap("forewarn", "rules: [oops"));
        w.policies().policy(&w.clock).await;
        collect(&w.fake);
    }
    {
        let w = World::plain().await;
        let mut n = node(NODE, ID);
        n["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim", "name": "nc-1", "uid": "u"}]);
        w.fake.insert(n);
        w.fake.insert(nodeclaim("nc-1"));
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-3"))
            .await;
        w.run(&plan).await;
        collect(&w.fake);
    }
    {
        let w = World::plain().await;
        let mut n = node(NODE, ID);
        n["metadata"]["annotations"] = json!({"cluster.x-k8s.io/machine": "m-1"});
        w.fake.insert(n);
        w.fake.insert(machine("default", "m-1", false));
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-4"))
            .await;
        w.run(&plan).await;
        collect(&w.fake);
    }
    {
        // Surge: placeholders listed, created, and deleted once their pod is gone.
        let w = surging().await;
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-5"))
            .await;
        surge_passes(&w, &w.executor(), &plan, |_, _| {}).await;
        collect(&w.fake);
    }
    assert_exactly(HANDLER_GROUP, &handler, &granted);

    // The sweeper: a sweep with every kind of finding, and the priority expander.
    let sweeper: BTreeSet<Need> = sweeper_requests().await.iter().map(rbac_need).collect();
    assert_exactly(SWEEPER_GROUP, &sweeper, &granted);
}

// ---------------------------------------------------------------------------------------------
// Stub HTTP servers (for what the Kubernetes fake does not see: headers; and Auto Scaling,
// whose CompleteLifecycleAction moto does not implement)

/// Serves `app` on a loopback port; returns its URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

/// A credentials provider that counts how often it is asked.
#[derive(Debug, Default, Clone)]
struct CountingCredentials {
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl aws_credential_types::provider::ProvideCredentials for CountingCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        aws_credential_types::provider::future::ProvideCredentials::ready(Ok(
            aws_credential_types::Credentials::new(
                "AKIDTEST",
                "secret",
                Some("session-token".into()),
                None,
                "test",
            ),
        ))
    }
}

#[tokio::test]
async fn eks_clients_carry_an_iam_token_made_anew_when_it_expires() {
    use axum::extract::State;
    use axum::http::HeaderMap;

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/version",
            axum::routing::get(
                |State(seen): State<Arc<Mutex<Vec<String>>>>, headers: HeaderMap| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push(auth);
                    axum::Json(json!({
                        "major": "1", "minor": "33", "gitVersion": "v1.33.0-eks-1",
                        "gitCommit": "x", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                        "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
                    }))
                },
            ),
        )
        .with_state(seen.clone());
    let url = serve(app).await;
    let mut base = kube::Config::new(url.parse().unwrap());
    base.default_retry = false;
    let credentials = CountingCredentials::default();
    let provider =
        aws_credential_types::provider::SharedCredentialsProvider::new(credentials.clone());

    let clients = ClusterClient::eks(
        base.clone(),
        "demo",
        "eu-west-1",
        provider.clone(),
        forewarn::adapters::kube::TOKEN_CACHE_LIFETIME,
    );
    for _ in 0..2 {
        let version = clients
            .client()
            .await
            .unwrap()
            .apiserver_version()
            .await
            .unwrap();
        assert_eq!(version.git_version, "v1.33.0-eks-1");
    }
    let calls = || credentials.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(calls(), 1, "the token is cached");
    let auths = seen.lock().unwrap().clone();
    assert_eq!(auths.len(), 2);
    assert_eq!(auths[0], auths[1]);
    let token = auths[0].strip_prefix("Bearer ").expect("a bearer token");
    let presigned = forewarn::adapters::kube::url_from_token(token).unwrap();
    assert!(
        presigned.starts_with(
            "https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
        ),
        "{presigned}"
    );
    for part in [
        "X-Amz-Algorithm=AWS4-HMAC-SHA256",
        "X-Amz-Credential=AKIDTEST%2F",
        "%2Feu-west-1%2Fsts%2Faws4_request",
        "X-Amz-Expires=60",
        "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id",
        "X-Amz-Security-Token=session-token",
        "X-Amz-Signature=",
    ] {
        assert!(presigned.contains(part), "{part} in {presigned}");
    }

    // A token past its lifetime is made anew on the next use.
    let expiring = ClusterClient::eks(base, "demo", "eu-west-1", provider, Duration::ZERO);
    expiring
        .client()
        .await
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
    expiring
        .client()
        .await
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
    assert_eq!(calls(), 3);
}

/// An Auto Scaling Query API stub answering CompleteLifecycleAction as `answer` says; records
/// the form bodies.
async fn autoscaling_stub(
    answer: fn() -> (u16, &'static str),
) -> (aws_sdk_autoscaling::Client, Arc<Mutex<Vec<String>>>) {
    use axum::extract::State;

    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(
                move |State(bodies): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                    bodies.lock().unwrap().push(body);
                    let (status, xml) = answer();
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [("content-type", "text/xml")],
                        xml,
                    )
                },
            ),
        )
        .with_state(bodies.clone());
    let url = serve(app).await;
    let config = aws_sdk_autoscaling::Config::builder()
        .behavior_version(aws_sdk_autoscaling::config::BehaviorVersion::latest())
        .region(aws_sdk_autoscaling::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new(
            "AKID", "secret", None, None, "test",
        ))
        .build();
    (aws_sdk_autoscaling::Client::from_conf(config), bodies)
}

fn lifecycle_action() -> LifecycleAction {
    LifecycleAction {
        hook_name: "forewarn-drain".into(),
        asg_name: "eks-demo-ng-1".into(),
        token: "168c6c3d-d370-48df-af77-8b8852e0806c".into(),
        transition: "autoscaling:EC2_INSTANCE_TERMINATING".into(),
    }
}

#[tokio::test]
async fn complete_lifecycle_action_continues_and_takes_no_active_action_as_done() {
    use forewarn::adapters::autoscaling::AsgLifecycle;

    let (client, bodies) = autoscaling_stub(|| (200, COMPLETED)).await;
    let asg = AsgLifecycle::from_client(client);
    assert_eq!(
        asg.complete(ID, &lifecycle_action()).await.unwrap(),
        LifecycleOutcome::Completed
    );
    let body = bodies.lock().unwrap()[0].clone();
    for part in [
        "Action=CompleteLifecycleAction",
        "AutoScalingGroupName=eks-demo-ng-1",
        "LifecycleHookName=forewarn-drain",
        "LifecycleActionResult=CONTINUE",
        "LifecycleActionToken=168c6c3d-d370-48df-af77-8b8852e0806c",
        &format!("InstanceId={ID}"),
    ] {
        assert!(body.contains(part), "{part} in {body}");
    }

    let (client, _) = autoscaling_stub(|| {
        (
            400,
            concat!(
                r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>"#,
                "<Type>Sender</Type><Code>ValidationError</Code>",
                "<Message>No active Lifecycle Action found with instance ID i-0a1b2c3d4e5f60001</Message>",
                "</Error><RequestId>r-2</RequestId></ErrorResponse>"
            ),
        )
    })
    .await;
    let outcome = AsgLifecycle::from_client(client)
        .complete(ID, &lifecycle_action())
        .await
        .unwrap();
    assert!(
        matches!(&outcome, LifecycleOutcome::AlreadyCompleted { message } if message.contains("No active Lifecycle Action")),
        "{outcome:?}"
    );

    let (client, _) = autoscaling_stub(|| {
        (
            400,
            concat!(
                r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>"#,
                "<Type>Sender</Type><Code>ValidationError</Code>",
                "<Message>1 validation error detected: Value at 'lifecycleHookName' failed to satisfy constraint</Message>",
                "</Error><RequestId>r-3</RequestId></ErrorResponse>"
            ),
        )
    })
    .await;
    let err = AsgLifecycle::from_client(client)
        .complete(ID, &lifecycle_action())
        .await
        .unwrap_err();
    assert_eq!(err.code.as_deref(), Some("ValidationError"));
    assert!(
        err.to_string().contains("eks-demo-ng-1/forewarn-drain"),
        "{err}"
    );
    assert!(err.to_string().contains(ID), "{err}");
}

const COMPLETED: &str = concat!(
    r#"<CompleteLifecycleActionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">"#,
    "<CompleteLifecycleActionResult/>",
    "<ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>",
    "</CompleteLifecycleActionResponse>"
);

// ---------------------------------------------------------------------------------------------
// Drains that do not wait, and cordons first

fn critical(mut pod: Value) -> Value {
    pod["spec"]["priorityClassName"] = json!("system-cluster-critical");
    pod
}

fn terminating(w: &World, name: &str) -> bool {
    w.pod("default", name)
        .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
}

/// Eviction requests sent, accepted or not.
fn evictions(w: &World) -> usize {
    w.fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::POST && r.path.ends_with("/eviction"))
        .count()
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
    assert!(first.heartbeat_at.is_some());
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
    assert!(
        events.contains_key(&plan.actions[0].event_reason),
        "{events:?}"
    );
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
    let executor = w.executor().with_settings(ExecutorSettings {
        pass_budget: Duration::from_millis(100),
        ..fast()
    });
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

/// The writes the fake was sent: method and answer.
fn written(fake: &KubeFake) -> Vec<(String, u16)> {
    fake.writes()
        .iter()
        .map(|r| (r.method.to_string(), r.status))
        .collect()
}

/// A queue that records the continuations it is given (or refuses them).
#[derive(Default)]
struct Continuations {
    sent: Mutex<Vec<(String, String, Duration)>>,
    refuse: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl forewarn::ports::ContinuationQueue for Continuations {
    async fn send(
        &self,
        queue_arn: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), forewarn::ports::QueueError> {
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(forewarn::ports::QueueError {
                queue: queue_arn.to_string(),
                message: "SendMessage: throttled".into(),
                kind: forewarn::ports::FailureKind::Throttled,
                source: None,
            });
        }
        self.sent
            .lock()
            .unwrap()
            .push((queue_arn.to_string(), body.to_string(), delay));
        Ok(())
    }
}

const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:forewarn-events";

/// The SQS event Lambda would pass for messages with these bodies.
fn sqs_event(bodies: &[String]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            json!({"messageId": format!("m-{i}"), "receiptHandle": format!("r-{i}"), "body": body,
                   "attributes": {"ApproximateReceiveCount": "1"},
                   "eventSource": "aws:sqs", "eventSourceARN": QUEUE_ARN, "awsRegion": "us-east-1"})
        })
        .collect();
    json!({ "Records": records })
}

/// The records of the SQS batch Lambda would pass for messages with these bodies.
fn sqs_batch(bodies: &[String]) -> Vec<forewarn::domain::inbound::Record> {
    let input = sqs_event(bodies).to_string();
    forewarn::domain::inbound::decode("sqs", input.as_bytes(), Utc::now()).unwrap()
}

/// A quiet pass (a copy the execution environment kept) records no Event: neither the Events of
/// the decision it would owe nor the drain's end, though it ends the drain; the queued twin,
/// not quiet, records them.
#[tokio::test]
async fn a_quiet_pass_records_no_event_even_when_it_ends_the_drain() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-quiet"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let drain = |role| Pass::Drain {
        started_at: w.clock.now(),
        role,
        heartbeat: false,
    };
    // One pass evicts, the next sees the pod gone and ends the drain.
    executor.run(&plan, drain(DrainRole::Quiet)).await.unwrap();
    let out = executor
        .run(&plan, drain(DrainRole::Quiet))
        .await
        .unwrap()
        .remove(0);
    assert!(w.pod("default", "web-1").is_none(), "evicted: {out:?}");
    assert!(!out.pending(), "the drain is over: {out:?}");
    assert!(w.events().is_empty(), "{:?}", w.events().keys());
    executor.run(&plan, drain(DrainRole::Owed)).await.unwrap();
    let events = w.events();
    for reason in ["SpotInterrupted", "Cordoned", "Drained"] {
        assert!(events.contains_key(reason), "{reason}: {:?}", events.keys());
    }
}

/// A pass that leaves a pod its disruption budget refused keeps a copy of its queued
/// continuation in the execution environment: the environment's next invocation after the
/// budget's wait runs it beside its own batch — before the queued pass, which in a mass
/// interruption waits behind thousands of other messages — and the pod is evicted. The copy
/// records no Event and queues nothing (its queued twin does both).
#[tokio::test]
async fn a_budget_refusal_is_tried_again_by_the_environment_before_its_queued_pass() {
    use forewarn::domain::report::Outcome;
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    // One of two `pair` pods may be away at a time; the one on the other node is already going
    // (another drain evicted it): the budget has no room until it is gone, 30 s from now.
    w.fake
        .insert(pod_object("default", "pair-1", NODE, "pair", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "pair-2",
        OTHER_NODE,
        "pair",
        "ReplicaSet",
    ));
    w.fake.insert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pair", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "pair"}}},
    }));
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(w.fake.client(), "default");
    pods.evict("pair-2", &Default::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, true);
    let next = || queue.sent.lock().unwrap().pop().map(|(_, body, _)| body);
    let going = |w: &World, pod: &str| {
        w.pod("default", pod)
            .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some())
    };
    let warning = spot_body("ev-kept", ID);
    handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    // The first pass: web-1 evicted, pair-1 refused by its budget; the next pass is queued.
    let first = next().expect("the first pass is queued");
    handler.invoke(sqs_event(&[first]), None).await.unwrap();
    assert!(going(&w, "web-1"));
    assert!(!going(&w, "pair-1"), "refused by its budget");
    assert!(next().is_some(), "the next pass is queued as always");
    let events = w.events().len();

    // 31 s on, pair-2 is gone. The environment's next invocation (any batch: here the
    // warning again) runs the kept copy: pair-1 is evicted before its queued pass comes.
    w.clock.advance(Duration::from_secs(31));
    assert!(w.pod("default", "pair-2").is_none());
    let out = handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    assert!(going(&w, "pair-1"), "evicted by the kept copy");
    assert_eq!(out.reports.len(), 1, "the answer is about the batch only");
    assert_eq!(out.reports[0].outcome, Outcome::Duplicate);
    assert_eq!(out.response["batchItemFailures"], json!([]));
    assert!(next().is_none(), "the copy queues nothing");
    assert_eq!(w.events().len(), events, "the copy records no Event");
    // Kept once: a later invocation runs nothing more.
    w.fake.clear_requests();
    handler
        .invoke(sqs_event(std::slice::from_ref(&warning)), None)
        .await
        .unwrap();
    assert!(
        !w.fake
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/eviction")),
        "no copy is left"
    );
}

/// A node of 737 pods with 253-character names (the longest a pod name may be), every eviction
/// refused by its budget: each continuation of its drain stays within SQS's 256 KiB and does not
/// grow with the pods or the passes (it carries no pod: the plan is per instance).
#[tokio::test]
async fn a_continuation_of_a_node_of_737_long_named_pods_fits_in_an_sqs_message() {
    use forewarn::domain::inbound::continuation::MAX_MESSAGE_BYTES;
    let w = World::plain().await;
    for i in 0..737 {
        // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters, a valid DNS subdomain.
        let name = format!(
            "p{i:04}{}.{}.{}.{}",
            "a".repeat(58),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(name.len(), 253);
        w.fake
            .insert(pod_object("default", &name, NODE, "held", "ReplicaSet"));
    }
    w.fake.insert(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "held", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "held"}}},
    }));
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, false);
    let next = || queue.sent.lock().unwrap().pop().map(|(_, body, _)| body);
    let out = handler
        .invoke(sqs_event(&[spot_body("ev-737", ID)]), None)
        .await
        .unwrap();
    assert_eq!(out.response["batchItemFailures"], json!([]));
    let mut sizes = Vec::new();
    let mut body = next().expect("the first pass queues the drain");
    for _ in 0..2 {
        sizes.push(body.len());
        let out = handler.invoke(sqs_event(&[body]), None).await.unwrap();
        assert_eq!(
            out.response["batchItemFailures"],
            json!([]),
            "{:#?}",
            out.reports
        );
        body = next().expect("the refused pods keep the drain going");
    }
    sizes.push(body.len());
    assert!(
        w.fake
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/eviction"))
            .count()
            >= 737,
        "every pod was tried"
    );
    for size in &sizes {
        assert!(*size <= MAX_MESSAGE_BYTES, "{sizes:?}");
    }
    // The passes' counters change a few digits, nothing per pod.
    assert!(
        sizes.iter().max().unwrap() - sizes.iter().min().unwrap() < 100,
        "{sizes:?}"
    );
    assert!(sizes[0] < 16 * 1024, "{sizes:?}");
}

/// A continuation SQS would not take (an event near SQS's limit whose body, quoted inside the
/// continuation, escapes past it) is never sent: the event fails, saying how large it would be.
#[tokio::test]
async fn an_oversized_continuation_is_not_sent_and_its_event_fails_saying_why() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let handler = w.queued_handler(dir.path(), &queue, false);
    // A spot warning of 200 KB (SQS takes it) whose detail holds quotes: escaped once more in
    // the continuation, they double.
    let mut warning: Value = serde_json::from_str(&spot_body("ev-big", ID)).unwrap();
    warning["detail"]["note"] = json!("\"".repeat(100_000));
    let warning = warning.to_string();
    assert!(warning.len() < 256 * 1024);
    let out = handler.invoke(sqs_event(&[warning]), None).await.unwrap();
    assert_eq!(
        out.response["batchItemFailures"],
        json!([{"itemIdentifier": "m-0"}])
    );
    let reason = out.reports[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("more than the 262144 an SQS message holds: it is not sent"),
        "{reason}"
    );
    assert!(queue.sent.lock().unwrap().is_empty(), "nothing was sent");
}

fn spot_body(id: &str, instance_id: &str) -> String {
    fixtures::spot_json(id, instance_id, &Utc::now().to_rfc3339()).to_string()
}

#[tokio::test]
async fn through_the_pipeline_a_drain_continues_in_queued_passes_and_the_event_is_recorded_once() {
    use forewarn::domain::report::Outcome;
    let w = World::plain().await;
    w.fake.set_eviction_grace(Duration::from_secs(3));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = Instances(BTreeMap::from([(ID.to_string(), instance(ID, NODE))]));
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let executor = w.executor();
    let queue = Arc::new(Continuations::default());
    let queued = Passes {
        interval: Duration::from_secs(1),
        queue: Some(queue.clone()),
        kept: None,
    };
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &queued);
    let original = spot_body("ev-queued", ID);

    // The queue refuses the continuation: the event fails (it comes back) and is not recorded.
    queue
        .refuse
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Failed, "{reports:?}");
    assert!(
        reports[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("continuation")
    );
    use forewarn::ports::PoolStore;
    assert!(
        store
            .applied(&["ev-queued".into()])
            .await
            .unwrap()
            .is_empty()
    );

    // Delivered again: cordoned (nothing else), recorded, the drain's first pass queued at once.
    queue
        .refuse
        .store(false, std::sync::atomic::Ordering::SeqCst);
    w.fake.clear_requests();
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Acted, "{reports:?}");
    // One request: the directory's read of the node, which the cordon pass uses (the node was
    // cordoned by the failed delivery: no patch).
    let sent: Vec<(String, String)> = w
        .fake
        .requests()
        .iter()
        .map(|r| (r.method.to_string(), r.path.clone()))
        .collect();
    assert_eq!(
        sent,
        [("GET".to_string(), format!("/api/v1/nodes/{NODE}"))],
        "{sent:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(result.contains("drain in the next pass"), "{result}");
    assert!(reports[0].actions[0].cordoned_at.is_some());
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], true);
    assert!(!terminating(&w, "web-1"), "the cordon pass evicts nothing");
    assert_eq!(evictions(&w), 0);
    assert_eq!(store.applied(&["ev-queued".into()]).await.unwrap().len(), 1);
    let (arn, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert_eq!((arn.as_str(), delay), (QUEUE_ARN, Duration::ZERO));

    // The original again (at least once): a duplicate, no second chain.
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&original)))
        .await;
    assert_eq!(reports[0].outcome, Outcome::Duplicate);
    assert!(queue.sent.lock().unwrap().is_empty());

    // Pass 1: the evictions (the Events of the decision are left to the next pass, the drain
    // going on); the next pass after the interval.
    let reports = pipeline.process(&sqs_batch(&[body])).await;
    assert_eq!(reports[0].pass, Some(1), "{reports:?}");
    assert_eq!(reports[0].outcome, Outcome::Acted);
    assert!(reports[0].actions[0].drain.unwrap().pending);
    assert!(terminating(&w, "web-1"));
    assert!(w.events().is_empty(), "{:?}", w.events());
    let (_, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert_eq!(delay, Duration::from_secs(1));

    // Pass 2 while the pod terminates: the Events of the decision; the next pass when the pod
    // is due to be gone, not sooner.
    let reports = pipeline.process(&sqs_batch(&[body])).await;
    assert_eq!(reports[0].pass, Some(2));
    assert!(reports[0].actions[0].drain.unwrap().pending);
    assert!(w.events().contains_key("Cordoned"));
    assert!(
        w.events().contains_key("SpotInterrupted"),
        "{:?}",
        w.events()
    );
    let (_, body, delay) = queue.sent.lock().unwrap().pop().unwrap();
    assert!(
        delay > Duration::from_secs(1) && delay <= Duration::from_secs(3),
        "{delay:?}"
    );

    // After the grace period: pass 3 ends the drain; nothing more is queued, nothing recorded
    // twice.
    w.clock.advance(Duration::from_millis(3200));
    let reports = pipeline
        .process(&sqs_batch(std::slice::from_ref(&body)))
        .await;
    assert_eq!(reports[0].pass, Some(3));
    let drain = reports[0].actions[0].drain.unwrap();
    assert!(!drain.pending && drain.complete, "{reports:?}");
    assert!(queue.sent.lock().unwrap().is_empty());
    assert!(w.pod("default", "web-1").is_none());
    assert!(w.events().contains_key("Drained"));
    let pools = store.pools(&Default::default(), Utc::now()).await.unwrap();
    assert_eq!(pools[0].interruptions(), 1, "{pools:?}");
}

/// The continuations `queue` was given since last asked, their bodies and delays.
fn take_sent(queue: &Continuations) -> Vec<(String, Duration)> {
    std::mem::take(&mut *queue.sent.lock().unwrap())
        .into_iter()
        .map(|(_, body, delay)| (body, delay))
        .collect()
}

/// What the fake was asked: method and path with its query.
fn asked(w: &World) -> Vec<String> {
    w.fake
        .requests()
        .iter()
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

#[tokio::test]
async fn drains_waiting_for_room_look_at_their_placeholders_alone_in_one_list_a_batch() {
    use forewarn::domain::report::Outcome;
    let mut w = World::plain().await;
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    w.fake.set_eviction_grace(Duration::from_secs(30));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    w.fake.insert(pod_object(
        "default",
        "api-1",
        OTHER_NODE,
        "api",
        "ReplicaSet",
    ));
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = Instances(BTreeMap::from([
        (ID.to_string(), instance(ID, NODE)),
        (OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE)),
    ]));
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let executor = w.executor();
    let queue = Arc::new(Continuations::default());
    let queued = Passes {
        interval: Duration::from_secs(1),
        queue: Some(queue.clone()),
        kept: None,
    };
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &queued);
    let batch = |sent: Vec<(String, Duration)>| {
        let bodies: Vec<String> = sent.into_iter().map(|(b, _)| b).collect();
        sqs_batch(&bodies)
    };

    // Both warnings in one batch: cordons. Then the drains' first passes: a placeholder for
    // each pod, nothing evicted (no room anywhere), the next look in 10 s, waiting for room.
    let reports = pipeline
        .process(&sqs_batch(&[
            spot_body("ev-a", ID),
            spot_body("ev-b", OTHER_ID),
        ]))
        .await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    let reports = pipeline.process(&batch(take_sent(&queue))).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert_eq!(placeholders(&w).len(), 2);
    assert_eq!(evictions(&w), 0);
    let sent = take_sent(&queue);
    assert_eq!(sent.len(), 2);
    for (body, delay) in &sent {
        assert_eq!(*delay, Duration::from_secs(10));
        assert!(body.contains(r#""room":{"#), "{body}");
    }
    assert!(
        w.events().is_empty(),
        "the first passes leave their Events to the next"
    );

    // 10 s later, still no room: the passes after the first are full passes, which record the
    // Events the first passes left; nothing is evicted.
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert!(asked(&w).contains(&format!("GET /api/v1/nodes/{NODE}?")));
    assert_eq!(
        w.fake
            .list("events.k8s.io/v1", "Event")
            .iter()
            .filter(|e| e["reason"] == "Cordoned")
            .count(),
        2
    );
    assert_eq!(evictions(&w), 0);
    let sent = take_sent(&queue);
    assert_eq!(sent.len(), 2);

    // 10 s later, still no room: the batch makes one request, a list of both nodes'
    // placeholders; no node, no pod is read; both looks queued again.
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    let result = reports[0].actions[0].result.clone().unwrap();
    assert!(
        result.starts_with("waiting for room: 1 placeholders"),
        "{result}"
    );
    let requests = asked(&w);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /api/v1/namespaces/forewarn/pods?")
            && requests[0].contains("forewarn.io%2Fplaceholder-node+in+%28"),
        "{requests:?}"
    );
    let sent = take_sent(&queue);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|(_, d)| *d == Duration::from_secs(10)));

    // web-1's placeholder runs elsewhere, api-1's was preempted: both drains make a full pass;
    // web-1 is evicted (there is room), api-1's placeholder is made again and api-1 waits.
    let mut ph = placeholders(&w).remove("default/web-1").unwrap();
    ph["spec"]["nodeName"] = json!("ip-10-0-9-9.ec2.internal");
    ph["status"] = json!({"phase": "Running"});
    w.fake.insert(ph);
    let gone = placeholders(&w).remove("default/api-1").unwrap();
    w.fake.remove(
        "v1",
        "Pod",
        Some("forewarn"),
        gone["metadata"]["name"].as_str().unwrap(),
    );
    w.clock.advance(Duration::from_secs(10));
    w.fake.clear_requests();
    let reports = pipeline.process(&batch(sent)).await;
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Acted),
        "{reports:?}"
    );
    assert!(terminating(&w, "web-1"), "evicted once there was room");
    assert!(!terminating(&w, "api-1"), "api-1 still waits for room");
    assert!(placeholders(&w).contains_key("default/api-1"), "made again");
    let requests = asked(&w);
    for node in [NODE, OTHER_NODE] {
        assert!(
            requests
                .iter()
                .any(|r| r == &format!("GET /api/v1/nodes/{node}?")),
            "a full pass reads its node first: {requests:?}"
        );
    }
}

#[tokio::test]
async fn every_node_of_a_batch_is_cordoned_before_any_eviction() {
    use forewarn::app::pipeline::Limits;
    let w = World::plain().await;
    let ids = [
        "i-0a1b2c3d4e5f60001",
        "i-0a1b2c3d4e5f60002",
        "i-0a1b2c3d4e5f60003",
    ];
    let names = [
        "ip-10-0-1-11.ec2.internal",
        "ip-10-0-1-21.ec2.internal",
        "ip-10-0-1-31.ec2.internal",
    ];
    for (id, name) in ids.iter().zip(names).skip(1) {
        w.fake.insert(node(name, id));
    }
    for name in names {
        w.fake.insert(pod_object(
            "default",
            &format!("web-{name}"),
            name,
            "web",
            "ReplicaSet",
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let store = forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let instances = Instances(
        ids.iter()
            .zip(names)
            .map(|(id, name)| (id.to_string(), instance(id, name)))
            .collect(),
    );
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let executor = w.executor();
    let pipeline = w.pipeline(&store, &instances, &directory, &executor, &w.in_process);
    let bodies: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| spot_body(&format!("ev-batch-{i}"), id))
        .collect();
    w.fake.clear_requests();
    // One event at a time: without the cordon pass, the last node would be cordoned after the
    // first ones' evictions.
    let limits = Limits {
        concurrency: 1,
        deadline: None,
    };
    let reports = pipeline.process_with(&sqs_batch(&bodies), limits).await;
    assert!(
        reports
            .iter()
            .all(|r| r.outcome == forewarn::domain::report::Outcome::Acted),
        "{reports:?}"
    );
    let log = w.fake.requests();
    let last_cordon = log
        .iter()
        .rposition(|r| r.method == Method::PATCH && r.path.starts_with("/api/v1/nodes/"))
        .unwrap();
    let first_eviction = log
        .iter()
        .position(|r| r.path.ends_with("/eviction"))
        .unwrap();
    assert!(last_cordon < first_eviction, "{log:#?}");
    for name in names {
        let node = w.node(name).unwrap();
        assert_eq!(node["spec"]["unschedulable"], true);
    }
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
    assert!(
        events.contains_key(&plan.actions[0].event_reason),
        "{events:?}"
    );
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
    assert_eq!(executor.settings().pass_budget, Duration::ZERO);
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

// ---------------------------------------------------------------------------------------------
// Every pass verifies live what it acts on

/// A drain pass for the plan, as a continuation asks for it.
fn drain_pass(announce: bool) -> Pass {
    Pass::Drain {
        started_at: Utc::now(),
        role: if announce {
            DrainRole::First
        } else {
            DrainRole::Later
        },
        heartbeat: false,
    }
}

/// The writes the fake accepted (2xx).
fn accepted_writes(fake: &KubeFake) -> Vec<RecordedRequest> {
    fake.writes()
        .into_iter()
        .filter(|w| (200..300).contains(&w.status))
        .collect()
}

#[tokio::test]
async fn a_pass_on_a_node_name_reused_by_another_instance_is_refused() {
    let w = World::plain().await;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-reused"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // The instance is gone and a new one registers under the same name, cordoned by forewarn for
    // another warning, with a pod of its own.
    w.fake.remove("v1", "Node", None, NODE);
    let mut reused = node(NODE, "i-0a1b2c3d4e5f6ffff");
    reused["spec"]["unschedulable"] = json!(true);
    reused["spec"]["taints"] = json!([{"key": "forewarn.io/interruption",
        "value": "rebalance-recommendation", "effect": "NoSchedule"}]);
    w.fake.insert(reused);
    w.fake
        .insert(pod_object("default", "new-1", NODE, "web", "ReplicaSet"));
    w.fake.clear_requests();

    for pass in [drain_pass(true), drain_pass(false)] {
        let out = w.executor().run(&plan, pass).await.unwrap().remove(0);
        let why = out.refused.clone().expect("refused");
        assert!(
            why.contains("i-0a1b2c3d4e5f6ffff") && why.contains(ID),
            "{why}"
        );
        assert!(!out.pending(), "the chain ends");
        assert!(out.detail().starts_with("refused: "), "{}", out.detail());
    }
    assert_eq!(accepted_writes(&w.fake), vec![], "nothing written");
    assert!(w.pod("default", "new-1").is_some(), "its pod is untouched");
}

#[tokio::test]
async fn a_drain_pass_ends_when_forewarns_taint_was_removed_or_the_node_is_gone() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-untainted"))
        .await;
    w.executor().run(&plan, Pass::Cordon).await.unwrap();
    // An operator uncordons the node and removes forewarn's taint (keeping the others).
    let mut n = w.node(NODE).unwrap();
    n["spec"]["unschedulable"] = json!(false);
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]);
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.insert(n);
    w.fake.clear_requests();
    let out = w
        .executor()
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    let why = out.refused.clone().expect("refused");
    assert!(why.contains("taint forewarn.io/interruption"), "{why}");
    assert!(!out.pending());
    assert_eq!(
        accepted_writes(&w.fake),
        vec![],
        "no cordon again, no eviction"
    );
    assert!(w.pod("default", "web-1").is_some());

    // Its node deleted between two passes: the chain ends cleanly, without an error.
    w.fake.remove("v1", "Node", None, NODE);
    let out = w
        .executor()
        .run(&plan, drain_pass(false))
        .await
        .unwrap()
        .remove(0);
    assert!(
        out.node_gone && out.refused.is_none() && !out.pending(),
        "{out:?}"
    );
}

#[tokio::test]
async fn eviction_500_and_409_are_that_pods_and_retried_in_the_next_pass() {
    let w = World::plain().await;
    for name in ["web-1", "web-2"] {
        w.fake
            .insert(pod_object("default", name, NODE, "web", "ReplicaSet"));
    }
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-evict-500"))
        .await;
    let executor = w.executor();
    executor.run(&plan, Pass::Cordon).await.unwrap();
    // A pod under two budgets answers 500; a conflict answers 409.
    w.fake.inject(
        Fault::new(500)
            .path_contains("/pods/web-1/eviction")
            .times(1),
    );
    w.fake.inject(
        Fault::new(409)
            .path_contains("/pods/web-2/eviction")
            .times(1),
    );
    let first = executor
        .run(&plan, drain_pass(true))
        .await
        .unwrap()
        .remove(0);
    let drain = first.drain.clone().unwrap();
    assert!(drain.pending, "{drain:?}");
    let left: BTreeMap<&str, &str> = drain
        .left
        .iter()
        .map(|l| (l.pod.as_str(), l.reason.as_str()))
        .collect();
    assert!(left["default/web-1"].starts_with("500"), "{left:?}");
    assert!(left["default/web-2"].starts_with("409"), "{left:?}");
    // The next pass evicts them.
    let second = executor
        .run(&plan, drain_pass(false))
        .await
        .unwrap()
        .remove(0);
    let drain = second.drain.unwrap();
    assert_eq!(drain.evicted.len(), 2, "{drain:?}");
}

#[tokio::test]
async fn a_delete_through_a_nodeclaim_of_another_instance_is_refused() {
    let w = World::plain().await;
    let mut n = node(NODE, ID);
    n["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim", "name": "nc-other", "uid": "u"}]);
    w.fake.remove("v1", "Node", None, NODE);
    w.fake.insert(n);
    // The NodeClaim of that name is another instance's.
    let mut claim = nodeclaim("nc-other");
    claim["status"] = json!({"providerID": format!("aws:///us-east-1a/{OTHER_ID}"),
        "nodeName": OTHER_NODE});
    w.fake.insert(claim);
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-not-owner"))
        .await;
    assert_eq!(plan.actions[0].action, Action::Delete);
    let out = w.run(&plan).await;
    match &out.delete {
        Some(DeleteOutcome::Refused { why, .. }) => assert!(why.contains(OTHER_ID), "{why}"),
        other => panic!("refused expected: {other:?}"),
    }
    assert!(
        w.fake
            .get("karpenter.sh/v1", "NodeClaim", None, "nc-other")
            .is_some()
    );
    assert!(
        out.detail()
            .contains("refused to delete nodeclaim/nc-other")
    );
}

/// The way back against the fake: a `cordon-for` of seconds is undone after its time and not
/// before (taint, cordon, record and the load-balancer label forewarn added all go; the other
/// taint stays), with an `Uncordoned` Event; a node cordoned by someone else is never touched.
#[tokio::test]
async fn a_cordon_for_is_undone_after_its_time_and_anothers_cordon_is_kept() {
    let mut w = World::plain().await;
    w.config.policy = forewarn::domain::policy::Policy::parse(
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-for 30s}\n",
    )
    .unwrap();
    // Someone else cordoned the other node.
    let mut theirs = w.node(OTHER_NODE).unwrap();
    theirs["spec"]["unschedulable"] = json!(true);
    w.fake.insert(theirs.clone());
    let event = fixtures::event(EventKind::RebalanceRecommendation, "ev-for", ID)
        .time(w.clock.now())
        .build();
    let plan = w.plan(&event).await;
    assert_eq!(plan.actions[0].action, Action::Cordon);
    assert!(
        plan.actions[0]
            .reason
            .starts_with("rule all: cordon-for 30s"),
        "{}",
        plan.actions[0].reason
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let executor = w.executor().with_keys(store.clone());
    passes(&executor, &plan).await.unwrap();
    let cordoned = w.node(NODE).unwrap();
    assert_eq!(cordoned["spec"]["unschedulable"], json!(true));
    assert!(
        cordoned["metadata"]["annotations"][forewarn::domain::wayback::ANNOTATION_CORDON]
            .is_string()
    );

    let instances = forewarn::adapters::snapshot::SnapshotInstances(BTreeMap::from([(
        ID.to_string(),
        instance(ID, NODE),
    )]));
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let way_back = forewarn::app::wayback::WayBack {
        nodes: &directory,
        instances: &instances,
        store: store.as_ref(),
        executor: Some(&executor),
        taint_key: &w.config.taint_key,
        statuses: None,
    };
    // Before its time: nothing undone.
    w.clock.advance(Duration::from_secs(29));
    assert!(way_back.run(w.clock.now()).await.unwrap().is_empty());
    assert_eq!(w.node(NODE).unwrap()["spec"]["unschedulable"], json!(true));

    w.clock.advance(Duration::from_secs(2));
    let undone = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0].node, NODE);
    assert_eq!(
        undone[0].outcome,
        Some(forewarn::domain::wayback::UndoOutcome::Undone)
    );
    let back = w.node(NODE).unwrap();
    assert_eq!(back["spec"]["unschedulable"], json!(false));
    let taint_keys: Vec<String> = taints(&back).into_iter().map(|t| t.0).collect();
    assert_eq!(taint_keys, vec!["dedicated"]);
    assert!(
        back["metadata"]["annotations"]
            .get(forewarn::domain::wayback::ANNOTATION_CORDON)
            .is_none()
    );
    assert!(back["metadata"]["labels"].get(LABEL_EXCLUDE_LB).is_none());
    assert!(
        w.fake
            .events()
            .iter()
            .any(|e| e["reason"] == json!("Uncordoned")
                && e["note"].as_str().unwrap_or_default().contains("ran until")),
        "{:#?}",
        w.fake.events()
    );
    // Someone else's cordon is as it was.
    assert_eq!(w.node(OTHER_NODE).unwrap()["spec"], theirs["spec"]);
    // Run again: nothing left to undo.
    assert!(way_back.run(w.clock.now()).await.unwrap().is_empty());
}

/// The way back undoes only what forewarn did: a node an operator cordoned before forewarn's
/// cordon-for stays cordoned when forewarn's goes (its taint and record removed); a record the
/// node's kubelet rewrote (a shorter cordon) does not verify, is reported refused and leaves
/// the node as it is.
#[tokio::test]
async fn an_operators_cordon_survives_the_way_back_and_a_rewritten_record_is_refused() {
    use forewarn::domain::wayback::{ANNOTATION_CORDON, UndoOutcome};
    let mut w = World::plain().await;
    w.config.policy = forewarn::domain::policy::Policy::parse(
        "rules:\n- name: all\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-for 30s}\n",
    )
    .unwrap();
    let mut operators = w.node(NODE).unwrap();
    operators["spec"]["unschedulable"] = json!(true);
    w.fake.insert(operators);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(forewarn::adapters::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let executor = w.executor().with_keys(store.clone());
    let cordon = |id: &str| {
        fixtures::event(EventKind::RebalanceRecommendation, id, ID)
            .time(w.clock.now())
            .build()
    };
    let plan = w.plan(&cordon("ev-1")).await;
    passes(&executor, &plan).await.unwrap();
    let instances = forewarn::adapters::snapshot::SnapshotInstances(BTreeMap::from([(
        ID.to_string(),
        instance(ID, NODE),
    )]));
    let directory = KubeNodeDirectory::new(w.clients.clone());
    let way_back = forewarn::app::wayback::WayBack {
        nodes: &directory,
        instances: &instances,
        store: store.as_ref(),
        executor: Some(&executor),
        taint_key: &w.config.taint_key,
        statuses: None,
    };
    w.clock.advance(Duration::from_secs(31));
    let undone = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(undone[0].outcome, Some(UndoOutcome::Undone));
    let back = w.node(NODE).unwrap();
    assert_eq!(
        back["spec"]["unschedulable"],
        json!(true),
        "the operator's cordon stays"
    );
    assert!(taints(&back).iter().all(|t| t.0 != w.config.taint_key));
    assert!(
        back["metadata"]["annotations"]
            .get(ANNOTATION_CORDON)
            .is_none()
    );

    // Cordoned again by forewarn (the node schedulable now), for 30 s; the kubelet moves the
    // record's end to the past.
    let mut schedulable = w.node(NODE).unwrap();
    schedulable["spec"]["unschedulable"] = json!(false);
    w.fake.insert(schedulable);
    let plan = w.plan(&cordon("ev-2")).await;
    passes(&executor, &plan).await.unwrap();
    let mut node = w.node(NODE).unwrap();
    let mut record: Value = serde_json::from_str(
        node["metadata"]["annotations"][ANNOTATION_CORDON]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    record["until"] = json!((w.clock.now() - chrono::Duration::seconds(1)).to_rfc3339());
    node["metadata"]["annotations"][ANNOTATION_CORDON] = json!(record.to_string());
    w.fake.insert(node.clone());
    let reports = way_back.run(w.clock.now()).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        matches!(&reports[0].outcome, Some(UndoOutcome::Refused { why }) if why.contains("does not verify")),
        "{reports:?}"
    );
    assert!(
        reports[0].why.contains("not one forewarn signed"),
        "{reports:?}"
    );
    let after = w.node(NODE).unwrap();
    assert_eq!(after["spec"], node["spec"], "left as it was");
    assert_eq!(
        after["metadata"]["annotations"],
        node["metadata"]["annotations"]
    );
}

fn policy_configmap(namespace: &str, yaml: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "forewarn-policy", "namespace": namespace},
        "data": {"policy.yaml": yaml}})
}

/// The PolicyRefused Events recorded so far.
fn policy_refusals(w: &World) -> Vec<Value> {
    w.fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == json!("PolicyRefused"))
        .collect()
}

/// The functions read the policy from the ConfigMap in forewarn's namespace (never
/// kube-system's): a rule applies to the next event; a bad update keeps the good policy, with a
/// Warning Event on the ConfigMap.
#[tokio::test]
async fn the_functions_read_the_policy_configmap_and_keep_the_good_one() {
    let w = World::plain().await;
    // Whoever writes ConfigMaps in kube-system: not read.
    w.fake.insert(policy_configmap(
        "kube-system",
        "rules:\n- name: planted\n  nodes: {}\n  actions: {rebalance-recommendation: cordon-drain}\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        policies: Some(w.policies()),
        ..w.handler(dir.path())
    };
    assert!(
        handler.config().await.policy.is_empty(),
        "kube-system's ConfigMap is not forewarn's policy"
    );
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n- name: quiet\n  nodes: {}\n  actions: {rebalance-recommendation: cordon}\n",
    ));
    w.clock.advance(Duration::from_secs(61));
    assert_eq!(
        handler.config().await.policy.rules[0].name,
        "quiet",
        "read from forewarn's namespace"
    );
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n- name: quiet\n  nodes: {}\n  actions: {rebalance-recommendation: evaporate}\n",
    ));
    w.clock.advance(Duration::from_secs(61));
    let config = handler.config().await;
    assert_eq!(
        config.policy.rules[0].name, "quiet",
        "the good policy is kept"
    );
    let refused = policy_refusals(&w);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["regarding"]["name"], json!("forewarn-policy"));
    assert_eq!(refused[0]["regarding"]["namespace"], json!("forewarn"));
    assert_eq!(refused[0]["metadata"]["namespace"], json!("forewarn"));
    assert!(
        refused[0]["note"].as_str().unwrap().contains(
            "the last good one is kept: rules[0].actions.rebalance-recommendation: unknown \
             action \"evaporate\""
        ),
        "{}",
        refused[0]["note"]
    );
    assert!(
        w.fake
            .requests()
            .iter()
            .all(|r| !r.path.contains("/namespaces/kube-system/")),
        "kube-system is never read for the policy"
    );
}

/// A ConfigMap writer asks more than the deployment allows (FOREWARN_POLICY_ALLOW, default every
/// action but `delete` and `none`): that rule is refused naming its field, with a PolicyRefused
/// Event, and its nodes keep the defaults — the node is cordoned as the defaults say, never
/// deleted — while the policy's other rules apply.
#[tokio::test]
async fn a_configmap_rule_asking_delete_is_refused_and_its_nodes_keep_the_defaults() {
    let w = World::plain().await;
    w.fake.insert(policy_configmap(
        "forewarn",
        "rules:\n\
         - name: others\n  nodes: {pool: elsewhere}\n  actions: {rebalance-recommendation: cordon-for 1h}\n\
         - name: everything\n  nodes: {}\n  actions: {rebalance-recommendation: delete, spot-interruption: none}\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let handler = forewarn::app::handler::Handler {
        policies: Some(w.policies()),
        ..w.handler(dir.path())
    };
    let config = handler.config().await;
    // One refusal for the rule (naming its first field asking too much).
    let refused = policy_refusals(&w);
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let note = refused[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("rules[1].actions.spot-interruption: rule \"everything\" asks \"none\"")
            && note.contains("its nodes keep the defaults"),
        "{note}"
    );
    assert_eq!(refused[0]["type"], json!("Warning"));
    // The other rule as written; the refused rule's nodes: the defaults, for every kind.
    let elsewhere = BTreeMap::from([("pool".to_string(), "elsewhere".to_string())]);
    assert_eq!(
        config
            .policy
            .choose(EventKind::RebalanceRecommendation, &elsewhere)
            .action
            .map(|a| a.to_string())
            .as_deref(),
        Some("cordon-for 1h")
    );
    for kind in [
        EventKind::RebalanceRecommendation,
        EventKind::SpotInterruption,
    ] {
        assert_eq!(
            config.policy.choose(kind, &BTreeMap::new()).action,
            None,
            "{kind:?}"
        );
    }
    // The plans of the node under the policy read: the defaults' actions, never a delete.
    let mut w = w;
    w.config.policy = config.policy.clone();
    let defaults = forewarn::domain::config::Config::default();
    for kind in [
        EventKind::RebalanceRecommendation,
        EventKind::SpotInterruption,
    ] {
        let plan = w.plan(&event(kind, &format!("ev-policy-{kind:?}"))).await;
        assert_eq!(plan.actions[0].action, defaults.action(kind), "{kind:?}");
        assert_ne!(plan.actions[0].action, Action::Delete);
    }
    // The `none` it asked on spot warnings is refused too: the node is drained.
    assert_eq!(
        defaults.action(EventKind::SpotInterruption),
        Action::CordonDrain
    );
}
