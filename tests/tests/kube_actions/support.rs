//! The world the tests act in: a Kubernetes fake with a plain node of instance `ID` (and an
//! unrelated one beside it), forewarn's clients on it, one manual clock; the plans made and
//! carried out through the adapter; and the checks every test ends with (the request log).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::kube::{ClusterClient, ExecutorSettings, KubeExecutor, NodeOutcome};
pub(crate) use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::pipeline::{Passes, Pipeline};
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::Config;
use forewarn::domain::event::{Detail, Event, EventKind};
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures::{self, node_object, pdb_object, pod_object};
use forewarn::domain::plan::{Facts, Plan, decide};
use forewarn::ports::{
    ActionResult, Clock, DrainRole, Executor, NodeDirectory, Pass, PortError, Work,
};
use kube_fake::{KubeFake, Method, RecordedRequest};
use serde_json::{Value, json};

pub(crate) const NODE: &str = "ip-10-0-1-11.ec2.internal";
pub(crate) const ID: &str = "i-0a1b2c3d4e5f60001";
pub(crate) const OTHER_NODE: &str = "ip-10-0-1-12.ec2.internal";
pub(crate) const OTHER_ID: &str = "i-0a1b2c3d4e5f69999";
pub(crate) const TAINT: &str = "forewarn.io/interruption";

pub(crate) use forewarn_tests::cluster::{HANDLER_GROUP, client_as as as_group};

/// A node of this world: as a kubelet on EC2 registers it, with its InternalIP and Hostname
/// addresses, an instance-type label and a `dedicated=batch` taint (which forewarn must keep).
pub(crate) fn node(name: &str, instance_id: &str) -> Value {
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
pub(crate) fn instance(id: &str, dns: &str) -> InstanceFacts {
    fixtures::instance(id)
        .typed("m5.large", "us-east-1a")
        .dns(dns)
        .state("running")
        .cluster("demo")
        .build()
}

/// This world's configuration: drains without surge (the default; surge has tests of its own,
/// in `surge`).
pub(crate) fn config() -> Config {
    Config {
        cluster: Some(ClusterId::at(&Place::default(), "demo")),
        surge_kinds: BTreeSet::new(),
        ..Config::default()
    }
}

/// An event of `kind` about this world's instance, happening now.
pub(crate) fn event(kind: EventKind, id: &str) -> Event {
    let event = fixtures::event(kind, id, ID)
        .time(Utc::now())
        .account("123456789012");
    match kind {
        EventKind::AsgTermination => event.detail(Detail::AsgTermination(fixtures::lifecycle(
            "eks-demo-ng-1",
            "forewarn-drain",
        ))),
        EventKind::AsgLaunch => event.detail(Detail::AsgLaunch(fixtures::lifecycle(
            "eks-demo-ng-1",
            "forewarn-joined",
        ))),
        _ => event,
    }
    .build()
}

/// The tests' settings: their Events reported by `forewarn-test`.
pub(crate) fn fast() -> ExecutorSettings {
    ExecutorSettings {
        reporting_instance: "forewarn-test".into(),
        ..ExecutorSettings::default()
    }
}

/// The time between two drain passes in these tests (the fake's pods go at once, or after the
/// grace period a test sets).
pub(crate) const PASS_GAP: Duration = Duration::from_millis(100);

/// An event's passes as the pipeline's in-process driver runs them: the first pass, then drain
/// passes [`PASS_GAP`] apart until none is pending; each action's outcomes merged into one
/// (every eviction and Event, the pod Events' counts summed, every pass's detail, the last of the
/// rest).
pub(crate) async fn passes(
    executor: &KubeExecutor,
    plan: &Plan,
) -> Result<Vec<NodeOutcome>, PortError> {
    let clock = executor.clock();
    let started_at = clock.now();
    let mut merged = executor.run(plan, Pass::Cordon).await?;
    let mut pass = 1;
    while merged.iter().any(|o| o.result.pending) {
        clock.sleep(PASS_GAP).await;
        let drain = Pass::Drain {
            started_at,
            role: DrainRole::of_pass(pass),
            heartbeat: true,
        };
        let outcomes = executor.run(plan, drain).await?;
        for (m, mut o) in merged.iter_mut().zip(outcomes) {
            m.events.extend(o.events.clone());
            let drain = match (m.drain.take(), o.drain.take()) {
                (Some(before), Some(mut now)) => {
                    let mut evicted = before.evicted;
                    evicted.extend(now.evicted);
                    now.evicted = evicted;
                    let mut gone = before.already_gone;
                    gone.extend(now.already_gone);
                    now.already_gone = gone;
                    let (b, n) = (before.pod_events, &mut now.pod_events);
                    n.recorded += b.recorded;
                    n.existed += b.existed;
                    n.given_up += b.given_up;
                    Some(now)
                }
                (before, now) => now.or(before),
            };
            o.result.detail = format!("{}; {}", m.result.detail, o.result.detail);
            o.events = std::mem::take(&mut m.events);
            o.drain = drain;
            *m = o;
        }
        pass += 1;
    }
    Ok(merged)
}

/// [`passes`] through the [`Executor`] port: the last pass's results.
pub(crate) async fn execute_passes(
    executor: &KubeExecutor,
    plan: &Plan,
) -> Result<Vec<ActionResult>, PortError> {
    let clock = executor.clock();
    let started_at = clock.now();
    let mut results = executor
        .execute(plan, Pass::Cordon, Work::default())
        .await?;
    let mut pass = 1;
    while results.iter().any(|r| r.pending) {
        clock.sleep(PASS_GAP).await;
        let drain = Pass::Drain {
            started_at,
            role: DrainRole::of_pass(pass),
            heartbeat: true,
        };
        results = executor.execute(plan, drain, Work::default()).await?;
        pass += 1;
    }
    Ok(results)
}

pub(crate) struct World {
    pub(crate) fake: KubeFake,
    pub(crate) clients: ClusterClient,
    pub(crate) config: Config,
    /// The one clock of the world: forewarn's adapter and the fake go by it; tests move it on
    /// (a sleep of forewarn's moves it at once) instead of sleeping.
    pub(crate) clock: ManualClock,
    /// A drain's passes carried on in process, [`PASS_GAP`] apart.
    pub(crate) in_process: Passes,
}

impl World {
    /// A world on a fake that enforces forewarn's admission policies.
    pub(crate) async fn new() -> World {
        World::on(KubeFake::builder().admission_policies().start().await)
    }

    /// A world on `fake` (a fake built with the cluster simulation, say), set up as a cluster
    /// forewarn was deployed to ([`forewarn_tests::cluster::as_deployed`]: its namespace at Pod
    /// Security `restricted`, the placeholders' PriorityClass, the admission policies where the
    /// fake serves them), forewarn's clients sending as the handler's group
    /// ([`HANDLER_GROUP`]): every write goes through the fake's admission chain as on a real
    /// API server.
    pub(crate) fn on(fake: KubeFake) -> World {
        let clock = ManualClock::at(Utc::now());
        let fakes = clock.clone();
        fake.set_clock(move || fakes.now());
        forewarn_tests::cluster::as_deployed(&fake);
        let clients = ClusterClient::new(as_group(&fake, HANDLER_GROUP)).with_clock(clock.shared());
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
    pub(crate) fn handler(&self, dir: &std::path::Path) -> forewarn::app::handler::Handler {
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
    pub(crate) fn queued_handler(
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
            fleet: Fleet::one(self.cluster()),
            passes: Passes {
                interval: Duration::from_secs(1),
                queue: Some(queue.clone()),
                kept: kept.then(Arc::default),
                tenant: Default::default(),
            },
            ..self.handler(dir)
        }
    }

    /// The pipeline over this world's cluster, with drains carried on by `passes`.
    pub(crate) fn pipeline<'a>(
        &'a self,
        store: &'a dyn forewarn::ports::PoolStore,
        instances: &'a forewarn::app::pipeline::Described,
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
            traffic: None,
            concurrency: forewarn::app::pipeline::CONCURRENCY,
            work: Default::default(),
        }
    }

    /// A plain node with the instance `ID`, an unrelated node beside it.
    pub(crate) async fn plain() -> World {
        let w = World::new().await;
        w.fake.insert(node(NODE, ID));
        w.fake.insert(node(OTHER_NODE, OTHER_ID));
        w
    }

    /// The cluster's policy ConfigMap, read through the adapter.
    /// This world's cluster: its nodes, the executor and its upkeep, the expander's
    /// ConfigMaps (no policy ConfigMap).
    pub(crate) fn cluster(&self) -> Cluster {
        let executor = Arc::new(self.executor());
        forewarn::adapters::upkeep::live_cluster(None, self.clients.clone(), Some(executor))
    }

    pub(crate) fn policies(&self) -> Arc<forewarn::app::policy::PolicyCache> {
        Arc::new(forewarn::app::policy::PolicyCache::new(
            Arc::new(forewarn::adapters::kube::KubePolicy::new(
                self.clients.clone(),
                "forewarn-test",
            )),
            self.config.policy.clone(),
            Default::default(),
        ))
    }

    pub(crate) fn executor(&self) -> KubeExecutor {
        KubeExecutor::new(self.clients.clone(), &self.config).with_settings(fast())
    }

    /// The plan for `event`, from node facts read through the adapter's directory.
    pub(crate) async fn plan(&self, event: &Event) -> Plan {
        let instances = BTreeMap::from([(ID.to_string(), instance(ID, NODE))]);
        let known: Vec<InstanceFacts> = instances.values().cloned().collect();
        let nodes = (self.clients)
            .nodes(&known, Default::default())
            .await
            .unwrap();
        decide(event, Facts::new(&instances, &nodes), &self.config)
    }

    pub(crate) async fn run(&self, plan: &Plan) -> NodeOutcome {
        let mut outcomes = passes(&self.executor(), plan).await.unwrap();
        assert_eq!(outcomes.len(), 1);
        outcomes.remove(0)
    }

    pub(crate) fn node(&self, name: &str) -> Option<Value> {
        self.fake.get("v1", "Node", None, name)
    }

    pub(crate) fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.fake.get("v1", "Pod", Some(ns), name)
    }

    /// forewarn's Events but those on pods (see the `pod_events` tests), by reason.
    pub(crate) fn events(&self) -> BTreeMap<String, Value> {
        self.fake
            .list("events.k8s.io/v1", "Event")
            .into_iter()
            .filter(|e| e["regarding"]["kind"] != "Pod")
            .map(|e| (e["reason"].as_str().unwrap_or_default().to_string(), e))
            .collect()
    }
}

/// The action's detail says `part`: one of its `; `-separated parts, exactly (what a step did,
/// as it tells people: `deleted nodeclaim/x`, `node/x already gone`).
pub(crate) fn assert_said(out: &NodeOutcome, part: &str) {
    let detail = &out.result.detail;
    assert!(
        detail.split("; ").any(|p| p == part),
        "{part:?} not said in {detail:?}"
    );
}

/// Every answer is one the adapter expects, every body of the right type.
pub(crate) fn assert_accepted(requests: &[RecordedRequest]) {
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
pub(crate) fn assert_nothing_written_again(fake: &KubeFake) {
    for write in fake.writes() {
        assert!(
            write.method == Method::POST && write.path.contains("/events") && write.status == 409,
            "{write:?}"
        );
    }
}

pub(crate) fn paths(requests: &[RecordedRequest], method: Method) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method == method)
        .map(|r| r.path.clone())
        .collect()
}

pub(crate) fn taints(node: &Value) -> Vec<(String, String, String)> {
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

pub(crate) fn eviction_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}/eviction")
}

/// The pods of the plain node: two web pods, a critical DNS pod, and the ones a drain leaves:
/// a DaemonSet pod, a mirror pod, a finished Job pod. A web pod on the other node.
pub(crate) fn seed_pods(w: &World) {
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

pub(crate) use forewarn::adapters::snapshot::SnapshotInstances as Instances;

/// `found`, as a batch's lookup found them (what a pipeline is given).
pub(crate) fn known(found: BTreeMap<String, InstanceFacts>) -> forewarn::app::pipeline::Described {
    forewarn::app::pipeline::Described {
        found,
        failed: BTreeMap::new(),
    }
}

/// Serves `app` on a loopback port; returns its URL.
pub(crate) async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

pub(crate) fn terminating(w: &World, name: &str) -> bool {
    w.pod("default", name)
        .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
}

/// Eviction requests sent, accepted or not.
pub(crate) fn evictions(w: &World) -> usize {
    w.fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::POST && r.path.ends_with("/eviction"))
        .count()
}

/// The writes the fake was sent: method and answer.
pub(crate) fn written(fake: &KubeFake) -> Vec<(String, u16)> {
    fake.writes()
        .iter()
        .map(|r| (r.method.to_string(), r.status))
        .collect()
}

/// A queue that records the continuations it is given (or refuses them).
#[derive(Default)]
pub(crate) struct Continuations {
    pub(crate) sent: Mutex<Vec<(String, String, Duration)>>,
    /// The message group of each continuation sent, in order.
    pub(crate) groups: Mutex<Vec<String>>,
    pub(crate) refuse: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl forewarn::ports::ContinuationQueue for Continuations {
    async fn send(
        &self,
        queue_arn: &str,
        group: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), forewarn::ports::PortError> {
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            let kind = forewarn::ports::FailureKind::Throttled;
            let said = "SendMessage: throttled";
            return Err(forewarn::ports::PortError::new(queue_arn, kind, said));
        }
        self.sent
            .lock()
            .unwrap()
            .push((queue_arn.to_string(), body.to_string(), delay));
        self.groups.lock().unwrap().push(group.to_string());
        Ok(())
    }
}

/// A drain pass for the plan, as a continuation asks for it.
pub(crate) fn drain_pass(announce: bool) -> Pass {
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

/// This cluster's leaving instances, as EC2 would list them.
pub(crate) struct Leaving(pub(crate) Vec<InstanceFacts>);

#[async_trait]
impl forewarn::app::leaving::LeavingInstances for Leaving {
    async fn leaving(
        &self,
        _place: &forewarn::ports::Place,
        _cluster: &str,
    ) -> Result<Vec<InstanceFacts>, forewarn::ports::PortError> {
        Ok(self.0.clone())
    }
    async fn statuses(
        &self,
        _place: &forewarn::ports::Place,
    ) -> Result<Vec<forewarn::domain::status::InstanceStatus>, forewarn::ports::PortError> {
        Ok(Vec::new())
    }
}
