//! A Capacity Block for ML at its end, as a user meets it (issue 48): one block of 64
//! `p5.48xlarge` nodes (8 GPUs each), every node full with the 8 pods of a StatefulSet, each pod
//! asking for one GPU (requests and limits), a `preStop` hook and a 600 s
//! `terminationGracePeriodSeconds`. EC2 sends one `Capacity Block Expiration Warning` for the
//! block, 40 minutes before its end; its instances begin to terminate 30 minutes before the end,
//! so the pods have 10 minutes, and their own grace periods are as long as that.
//!
//! The machinery of [`crate::mass`]: the Kubernetes fake with its latency and rate limit, the
//! emulated SQS queue and event source mapping ([`crate::mass::poll`]), each execution
//! environment a handler of its own, built from the settings the stack's environment gives
//! (`forewarn::app::settings::Settings`: every setting the deployed default), continuation
//! drains as deployed. The block's instances are answered by the snapshot directory
//! (`SnapshotInstances`: the instances whose `capacity_reservation_id` is the block's), every
//! lookup counted.
//!
//! Measured from the fake's log of requests, relative to the warning: when each node was
//! cordoned; when each pod's eviction was accepted, the grace period it asked
//! (`deleteOptions.gracePeriodSeconds`, else the pod's own), and so when that grace ends. The run
//! is in real time, so it does not wait out the 10 minutes: it stops taking messages once every
//! pod's eviction was accepted (every grace is known then), or at `--cutoff-seconds`.
//!
//! The fake does not run `preStop` hooks, and it ends every graceful deletion after one grace
//! period of its own (here the pods' 600 s), whatever the eviction asked: the grace each pod was
//! given is read from the eviction as the API server would take it, not from the fake's store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::snapshot::SnapshotInstances;
use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::handler::Handler;
use forewarn::app::pipeline::Passes;
use forewarn::app::settings::Settings as Deployed;
use forewarn::domain::clusters::ClusterId;
use forewarn::domain::facts::{CapacityBlock, InstanceFacts};
use forewarn::domain::inbound::continuation::Tenant;
use forewarn::domain::pool::CapacityType;
use forewarn::ports::{ContinuationQueue, InstanceDirectory, Place, PortError};
use kube_fake::{KubeFake, RecordedRequest};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::e2e::{CLUSTER, kube_counts};
use crate::mass::{self, OWN_ACCOUNT, REGION, STACK_CONCURRENCY, instance_id, node_name};
use crate::queue::Queue;
use crate::stats::{percentile, rate_bound, secs};

#[derive(Debug, Clone, clap::Args)]
pub struct BlocksSettings {
    /// Instances (nodes) of the Capacity Block.
    #[arg(long, default_value_t = 64)]
    pub nodes: usize,
    /// Pods per node, each asking for one GPU (a node has 8).
    #[arg(long, default_value_t = 8)]
    pub pods_per_node: usize,
    /// The pods' terminationGracePeriodSeconds.
    #[arg(long, default_value_t = 600)]
    pub grace_seconds: u64,
    /// Minutes from the warning to the block's end (EC2 warns 40 minutes ahead).
    #[arg(long, default_value_t = 40)]
    pub end_minutes: i64,
    /// Stop taking messages this long after the warning if some pod's eviction is still not
    /// accepted (by default at the termination start).
    #[arg(long, default_value_t = 600)]
    pub cutoff_seconds: u64,
    /// The fake's latency and rate limit (as the mass benchmark's).
    #[command(flatten)]
    pub server: crate::server::FakeServer,
    /// A client-side limit of each execution environment other than the deployed one
    /// (`FOREWARN_KUBE_QPS`; by default forewarn's share divided by the function's
    /// concurrency), to see what the limit costs; printed as a setting that is not deployed.
    #[arg(long)]
    pub kube_qps: Option<f64>,
    /// With `--kube-qps`: its burst (`FOREWARN_KUBE_BURST`; default the QPS rounded up).
    #[arg(long)]
    pub kube_burst: Option<u32>,
}

/// The block: its reservation (`cr-` and 17 hex digits), type, zone.
const RESERVATION: &str = "cr-0b1c2d3e4f5a6b7c8";
const INSTANCE_TYPE: &str = "p5.48xlarge";
const ZONE: &str = "us-east-1a";
const NAMESPACE: &str = "ml";
/// The bound on every node's cordon, from the warning.
const CORDON_BOUND: Duration = Duration::from_secs(2);
/// How often the run looks whether every pod's eviction was accepted.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The name of pod `p` of node `n` (of the StatefulSet `train-{n}`).
fn pod_name(n: usize, p: usize) -> String {
    format!("train-{n}-{p}")
}

/// The deployed handler's settings: those of the stack's environment (the function's
/// concurrency as `FOREWARN_ENVIRONMENTS`, the cluster's name), every other variable unset;
/// `overrides` (`FOREWARN_KUBE_QPS`, and the burst) set the client-side limit.
fn deployed(overrides: &[(&str, String)]) -> anyhow::Result<Deployed> {
    let mut d = Deployed::from_vars([
        ("FOREWARN_ENVIRONMENTS", STACK_CONCURRENCY.to_string()),
        ("FOREWARN_CLUSTERS", CLUSTER.to_string()),
    ])?;
    // The fleet names the one cluster so.
    d.config.cluster = Some(ClusterId::at(&Place::default(), CLUSTER));
    let value = |name: &str| {
        overrides
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    if let Some(qps) = value("FOREWARN_KUBE_QPS") {
        let burst = value("burst").map_or(qps.ceil().max(1.0) as u32, |b| b as u32);
        d.kube_rate_limit = Some((qps, burst));
    }
    Ok(d)
}

/// The variables a run sets unlike the stack: `--kube-qps`, `--kube-burst`.
fn overrides(b: &BlocksSettings) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(qps) = b.kube_qps {
        out.push(("FOREWARN_KUBE_QPS", qps.to_string()));
    }
    if let Some(burst) = b.kube_burst.filter(|_| b.kube_qps.is_some()) {
        out.push(("burst", burst.to_string()));
    }
    out
}

/// The instance directory of the run: the snapshot's answers, each lookup counted (what EC2
/// would have been asked).
struct Counted {
    inner: SnapshotInstances,
    /// `capacity_block` lookups: each one `DescribeCapacityReservations` and one
    /// `DescribeInstances` filtered on `capacity-reservation-id`.
    blocks: AtomicUsize,
    /// `DescribeInstances` by id, and the ids asked.
    describes: AtomicUsize,
    ids: AtomicUsize,
}

#[async_trait]
impl InstanceDirectory for Counted {
    async fn describe(
        &self,
        place: &Place,
        ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        self.describes.fetch_add(1, Ordering::Relaxed);
        self.ids.fetch_add(ids.len(), Ordering::Relaxed);
        self.inner.describe(place, ids).await
    }

    async fn capacity_block(
        &self,
        place: &Place,
        reservation_id: &str,
    ) -> Result<CapacityBlock, PortError> {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.inner.capacity_block(place, reservation_id).await
    }
}

/// Seeds the fake with the block's nodes, their StatefulSets and pods, and the placeholders'
/// PriorityClass (as `infra/k8s/placeholders.yaml` makes it); the instances' facts, by id.
fn seed(fake: &KubeFake, b: &BlocksSettings) -> BTreeMap<String, InstanceFacts> {
    fake.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": forewarn::domain::surge::PRIORITY_CLASS},
        "value": -1, "preemptionPolicy": "Never", "globalDefault": false}),
    );
    let gpus = (b.pods_per_node.max(8)).to_string();
    let mut instances = BTreeMap::new();
    for n in 0..b.nodes {
        let (id, name) = (instance_id(n), node_name(n));
        let mut node = forewarn::domain::fixtures::ec2_node(&name, &id, ZONE);
        node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!(INSTANCE_TYPE);
        node["metadata"]["labels"]["eks.amazonaws.com/capacityType"] = json!("CAPACITY_BLOCK");
        let resources = json!({"cpu": "191450m", "memory": "1952Gi", "pods": "100",
            "nvidia.com/gpu": gpus});
        node["status"]["capacity"] = resources.clone();
        node["status"]["allocatable"] = resources;
        node["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        fake.insert(node);
        let set = format!("train-{n}");
        let template = pod_spec(b, None);
        fake.insert(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": set, "namespace": NAMESPACE, "uid": format!("uid-{set}")},
            "spec": {"replicas": b.pods_per_node, "serviceName": set,
                "selector": {"matchLabels": {"app": set}},
                "template": {"metadata": {"labels": {"app": set}}, "spec": template}}}));
        for p in 0..b.pods_per_node {
            fake.insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name(n, p), "namespace": NAMESPACE,
                    "labels": {"app": set, "apps.kubernetes.io/pod-index": p.to_string()},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                        "name": set, "uid": format!("uid-{set}"), "controller": true}]},
                "spec": pod_spec(b, Some(&name)),
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}}));
        }
        instances.insert(id.clone(), instance(n, &id, &name));
    }
    instances
}

/// A training pod's spec (on `node` when given): one GPU asked in requests and limits, a
/// `preStop` hook that checkpoints, the block's grace period.
fn pod_spec(b: &BlocksSettings, node: Option<&str>) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": b.grace_seconds,
        "nodeSelector": {"node.kubernetes.io/instance-type": INSTANCE_TYPE},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "train", "image": "trainer:1",
            "resources": {
                "requests": {"nvidia.com/gpu": "1", "cpu": "22", "memory": "230Gi"},
                "limits": {"nvidia.com/gpu": "1"}},
            "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "checkpoint --now"]}}}}]
    });
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    spec
}

/// The facts EC2 gives of instance `n` of the block: tagged for the cluster, in the block.
fn instance(n: usize, id: &str, name: &str) -> InstanceFacts {
    InstanceFacts {
        instance_id: id.to_string(),
        instance_type: Some(INSTANCE_TYPE.into()),
        zone: Some(ZONE.into()),
        zone_id: Some("use1-az4".into()),
        capacity_type: Some(CapacityType::CapacityBlock),
        private_dns: Some(name.to_string()),
        state: Some("running".into()),
        state_reason: None,
        launch_time: Some(Utc::now() - chrono::Duration::hours(23)),
        tags: BTreeMap::from([(format!("kubernetes.io/cluster/{CLUSTER}"), "owned".into())]),
        addresses: vec![format!("10.1.{}.{}", n / 256, n % 256)],
        capacity_reservation_id: Some(RESERVATION.into()),
    }
}

/// The block's expiration warning, sent at `at`, the block ending `end_minutes` later.
fn warning(at: DateTime<Utc>, end_minutes: i64) -> Value {
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({
        "version": "0", "id": "5c2e7a91-3b4d-4f6e-8a1c-0b1c2d3e4f5a",
        "detail-type": forewarn::domain::event::DT_BLOCK_EXPIRATION,
        "source": "aws.ec2", "account": OWN_ACCOUNT, "time": time(at), "region": REGION,
        "resources": [format!(
            "arn:aws:ec2:{REGION}:{OWN_ACCOUNT}:capacity-reservation/{RESERVATION}")],
        "detail": {"capacity-reservation-id": RESERVATION,
            "end-date": time(at + chrono::Duration::minutes(end_minutes))}
    })
}

/// One execution environment, as the wiring builds it from `deployed`: its own client (with the
/// per-environment limit), executor (with its settings and signing keys) and node directory.
fn environment(
    deployed: &Deployed,
    fake: &KubeFake,
    queue: &Arc<Queue>,
    instances: &Arc<Counted>,
    store: &Arc<dyn forewarn::ports::PoolStore>,
) -> Arc<Handler> {
    let clients = ClusterClient::new(fake.client()).with_rate_limit(deployed.kube_rate_limit);
    let executor = KubeExecutor::new(clients.clone(), &deployed.config)
        .with_settings(deployed.executor.clone())
        .with_keys(store.clone());
    let cluster = Cluster {
        executor: Some(Arc::new(executor)),
        ..Cluster::new(None, Arc::new(clients))
    };
    Arc::new(Handler {
        redelivery: Some(queue.clone()),
        passes: Passes {
            interval: deployed
                .drain_pass_interval
                .unwrap_or(forewarn::app::pipeline::PASS_INTERVAL),
            queue: deployed
                .drain_pass_interval
                .map(|_| queue.clone() as Arc<dyn ContinuationQueue>),
            kept: deployed.drain_pass_interval.map(|_| Arc::default()),
            tenant: Tenant::Cluster,
        },
        instances: instances.clone(),
        fleet: Fleet::one(cluster),
        concurrency: deployed.concurrency,
        // As the wiring gives it to a deployment of one cluster (none).
        takes_per_cluster: forewarn::app::fleet::triage::takes(deployed.kube_rate_limit, false),
        safety_margin: forewarn::app::settings::SAFETY_MARGIN,
        ..Handler::new(deployed.config.clone(), store.clone())
    })
}

/// What the fake's log shows of one pod: its eviction's first acceptance after the warning, the
/// grace it asked (`None`: the pod's own), and the attempts refused before.
#[derive(Debug, Clone, Default, PartialEq)]
struct PodSeen {
    accepted: Option<Duration>,
    asked: Option<u64>,
    refused: usize,
}

/// What the log `requests` shows from `from`: per node, when its cordon (a patch setting
/// `spec.unschedulable`) was accepted; per pod (node-major), its [`PodSeen`].
fn seen(
    requests: &[RecordedRequest],
    from: DateTime<Utc>,
    nodes: usize,
    per_node: usize,
) -> (Vec<Option<Duration>>, Vec<PodSeen>) {
    let names: BTreeMap<String, usize> = (0..nodes).map(|n| (node_name(n), n)).collect();
    let mut cordoned = vec![None; nodes];
    let mut pods = vec![PodSeen::default(); nodes * per_node];
    let pods_path = format!("/api/v1/namespaces/{NAMESPACE}/pods/train-");
    for r in requests {
        let at = (r.at - from).to_std().unwrap_or_default();
        let accepted = (200..300).contains(&r.status);
        let body = r.body.as_ref();
        if accepted
            && r.method == "PATCH"
            && body.and_then(|b| b.pointer("/spec/unschedulable")) == Some(&json!(true))
            && let Some(&n) = r
                .path
                .strip_prefix("/api/v1/nodes/")
                .and_then(|n| names.get(n))
        {
            cordoned[n].get_or_insert(at);
        }
        if let Some((n, p)) = crate::mass::eviction_of(r, &pods_path)
            && n < nodes
            && p < per_node
        {
            let pod = &mut pods[n * per_node + p];
            if pod.accepted.is_some() {
                continue;
            }
            if accepted {
                pod.accepted = Some(at);
                pod.asked = body
                    .and_then(|b| b.pointer("/deleteOptions/gracePeriodSeconds"))
                    .and_then(Value::as_u64);
            } else {
                pod.refused += 1;
            }
        }
    }
    (cordoned, pods)
}

/// What a run measured.
struct Measured {
    cordoned: Vec<Option<Duration>>,
    pods: Vec<PodSeen>,
    /// When the run stopped taking messages, after the warning.
    stopped: Duration,
    requests: u64,
    rate_limited: u64,
    by_kind: BTreeMap<String, usize>,
    /// When each request was answered, after the warning, in order.
    answered: Vec<Duration>,
    totals: mass::Totals,
    /// Capacity Block lookups, `DescribeInstances` by id and the ids they asked.
    lookups: (usize, usize, usize),
    /// How much of the run the CPU was the bottleneck.
    load: crate::cpu::Load,
}

impl Measured {
    /// The requests answered by `t` after the warning.
    fn answered_by(&self, t: Duration) -> u64 {
        self.answered.partition_point(|a| *a <= t) as u64
    }
}

/// The run: the block seeded, one warning at a whole second, the event source mapping polling
/// until every pod's eviction is accepted (or the cutoff).
async fn run(b: &BlocksSettings, deployed: &Deployed) -> anyhow::Result<Measured> {
    let fake = Arc::new(KubeFake::start().await);
    let instances = Arc::new(Counted {
        inner: SnapshotInstances(seed(&fake, b)),
        blocks: AtomicUsize::new(0),
        describes: AtomicUsize::new(0),
        ids: AtomicUsize::new(0),
    });
    // Evicted pods terminate for their own grace period (the fake keeps one for all).
    b.server.apply(&fake, Duration::from_secs(b.grace_seconds));
    let dir = tempfile::Builder::new()
        .prefix("forewarn-bench-blocks-")
        .tempdir()?;
    let store: Arc<dyn forewarn::ports::PoolStore> = Arc::new(EmbeddedStore::open(dir.path())?);
    let queue = Arc::new(Queue::default());
    let polling = mass::Settings {
        nodes: b.nodes,
        ..mass::Settings::defaults()
    };
    // The warning at a whole second: the event's `time` is then the moment it is sent.
    let now = Utc::now();
    let next = chrono::Duration::milliseconds(1000 - i64::from(now.timestamp_subsec_millis()));
    tokio::time::sleep(next.to_std().unwrap_or_default()).await;
    let warned_at = chrono::DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap_or(now);
    fake.clear_requests();
    let start = Instant::now();
    queue.send(
        warning(warned_at, b.end_minutes).to_string(),
        None,
        Duration::ZERO,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let everyone = b.nodes * b.pods_per_node;
    let polled = async {
        let make = || environment(deployed, &fake, &queue, &instances, &store);
        let cutoff = start + Duration::from_secs(b.cutoff_seconds);
        let totals = mass::poll(&polling, &queue, make, cutoff, stop.clone()).await;
        stop.store(true, Ordering::Relaxed);
        totals
    };
    let watched = async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(LOOK_EVERY).await;
            let (_, pods) = seen(&fake.requests(), warned_at, b.nodes, b.pods_per_node);
            if pods.iter().filter(|p| p.accepted.is_some()).count() == everyone {
                stop.store(true, Ordering::Relaxed);
            }
        }
        start.elapsed()
    };
    let ((totals, stopped), load) =
        crate::cpu::measured(async { tokio::join!(polled, watched) }).await;
    let totals = totals?;
    let requests = fake.requests();
    let (cordoned, pods) = seen(&requests, warned_at, b.nodes, b.pods_per_node);
    let counters = fake.counters();
    let lookups = (
        instances.blocks.load(Ordering::Relaxed),
        instances.describes.load(Ordering::Relaxed),
        instances.ids.load(Ordering::Relaxed),
    );
    Ok(Measured {
        cordoned,
        pods,
        stopped,
        requests: counters.requests,
        rate_limited: counters.rate_limited,
        by_kind: kube_counts(&requests),
        answered: {
            let mut at: Vec<Duration> = requests
                .iter()
                .map(|r| (r.at - warned_at).to_std().unwrap_or_default())
                .collect();
            at.sort();
            at
        },
        totals,
        lookups,
        load,
    })
}

/// The section: the run's figures beside their bounds.
pub async fn report(b: &BlocksSettings) -> anyhow::Result<String> {
    let deployed = deployed(&overrides(b))?;
    let m = run(b, &deployed).await?;
    let mut out = header(b, &deployed);
    cordon_rows(&mut out, b, &deployed, &m);
    grace_rows(&mut out, b, &deployed, &m);
    cost_rows(&mut out, &m);
    out.push_str(&crate::cpu::row(4, &[Some(m.load)]));
    out.push_str(&format!(
        "\nThe run stopped taking messages {} after the warning ({}). Outcomes: {}; pod Events \
         recorded {}, given up {}. Kubernetes requests by kind: {}.\n",
        secs(m.stopped),
        if m.pods.iter().all(|p| p.accepted.is_some()) {
            "every pod's eviction accepted: every grace known"
        } else {
            "the cutoff, some pod's eviction still not accepted"
        },
        m.totals
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        m.totals.pod_events.0,
        m.totals.pod_events.1,
        m.by_kind
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    Ok(out)
}

/// The heading, what the run is, the head of the table.
fn header(b: &BlocksSettings, d: &Deployed) -> String {
    let limit = d
        .kube_rate_limit
        .map_or("none".to_string(), |(qps, burst)| {
            format!("{qps} requests/s, burst {burst}, in each execution environment")
        });
    let set: Vec<String> = overrides(b)
        .iter()
        .map(|(n, v)| format!("`{n}={v}`"))
        .collect();
    let deployed = if set.is_empty() {
        "The handler as deployed: every setting the default".to_string()
    } else {
        format!(
            "**Not as deployed**: {} (deployed: forewarn's share divided by the function's \
             concurrency); every other setting the default",
            set.join(", ")
        )
    };
    format!(
        "### Capacity Block expiration: one warning for a block of {n} `{INSTANCE_TYPE}` nodes, {pods} GPU pods\n\n\
         `forewarn-bench blocks`: one `Capacity Block Expiration Warning` for `{RESERVATION}` at t = 0, \
         its end at t + {end} min, so its instances begin to terminate at t + {term} s. {n} nodes \
         (8 GPUs allocatable each), each with {per} pods of a StatefulSet of its own, each pod asking \
         `nvidia.com/gpu: 1` (requests and limits), a `preStop` hook (not run by the fake) and \
         `terminationGracePeriodSeconds: {grace}`. The fake: {server}. {deployed} \
         (`FOREWARN_CONCURRENCY` {conc}, `FOREWARN_SURGE` with `capacity-block-expiration`, \
         `FOREWARN_DRAIN_PASS_INTERVAL` {interval}, `FOREWARN_DEADLINE_MARGIN` {margin} s; \
         client-side limit {limit}); no load balancers.\n\n\
         | measure | figure | bound | met |\n|---|---|---|---|\n",
        n = b.nodes,
        pods = b.nodes * b.pods_per_node,
        end = b.end_minutes,
        term = termination_start(b).as_secs(),
        per = b.pods_per_node,
        grace = b.grace_seconds,
        server = b.server.described(),
        conc = d.concurrency,
        interval = d
            .drain_pass_interval
            .map_or("off".into(), |i| format!("{} s", i.as_secs())),
        margin = d.config.deadline_margin.num_seconds(),
    )
}

/// When the block's instances begin to terminate, after the warning.
fn termination_start(b: &BlocksSettings) -> Duration {
    let end = chrono::Duration::minutes(b.end_minutes);
    (end - forewarn::domain::event::BLOCK_TERMINATION_LEAD)
        .to_std()
        .unwrap_or_default()
}

/// The `met` cell of a bound: `yes`, or `**no**` (flagged when the run was CPU-bound).
fn met(m: &Measured, ok: bool) -> String {
    m.load.verdict(ok, "yes", "**no**")
}

/// The rows of the cordons.
fn cordon_rows(out: &mut String, b: &BlocksSettings, d: &Deployed, m: &Measured) {
    let done: Vec<Duration> = m.cordoned.iter().flatten().copied().collect();
    let all = done.len() == b.nodes;
    let max = done.iter().max().copied();
    let p = |q| percentile(&done, q).map_or("-".into(), secs);
    out.push_str(&format!(
        "| warning → node cordoned: max / p50 | {} / {} | every node within {} | {} |\n",
        if all {
            max.map_or("-".into(), secs)
        } else {
            format!("{} of {} nodes only", done.len(), b.nodes)
        },
        p(50.0),
        secs(CORDON_BOUND),
        met(m, all && max.is_some_and(|t| t <= CORDON_BOUND)),
    ));
    let within = done.iter().filter(|t| **t <= CORDON_BOUND).count();
    out.push_str(&format!(
        "| nodes cordoned within {} | {within} of {} | every node |  |\n",
        secs(CORDON_BOUND),
        b.nodes
    ));
    // What one execution environment's limit would allow for the requests answered until the
    // last cordon: the time the block would take in the warning's environment alone, which its
    // parts (each other instance a warning of its own, `app::blocks::fan_out`) spread over the
    // environments the event source mapping runs.
    let before = max.map_or(0, |last| m.answered_by(last));
    let floor = d.kube_rate_limit.map_or(Duration::ZERO, |(qps, burst)| {
        rate_bound(before, qps, u64::from(burst))
    });
    out.push_str(&format!(
        "| requests answered until the last cordon; the least time one execution environment's client-side limit would allow for them (the block in the warning's environment alone) | {before}; {} | more than {}: the parts spread the block over environments |  |\n",
        secs(floor),
        secs(CORDON_BOUND),
    ));
}

/// The rows of the evictions and their grace periods.
fn grace_rows(out: &mut String, b: &BlocksSettings, d: &Deployed, m: &Measured) {
    let term = termination_start(b);
    let deadline = term.saturating_sub(d.config.deadline_margin.to_std().unwrap_or_default());
    let everyone = m.pods.len();
    let accepted: Vec<(Duration, u64)> = m
        .pods
        .iter()
        .filter_map(|p| Some((p.accepted?, p.asked.unwrap_or(b.grace_seconds))))
        .collect();
    let times: Vec<Duration> = accepted.iter().map(|(t, _)| *t).collect();
    let ends: Vec<Duration> = accepted
        .iter()
        .map(|(t, g)| *t + Duration::from_secs(*g))
        .collect();
    let p = |v: &[Duration], q| percentile(v, q).map_or("-".into(), secs);
    out.push_str(&format!(
        "| pods' evictions accepted (first / p50 / last) | {} of {everyone} ({} / {} / {}) | every pod | {} |\n",
        accepted.len(),
        p(&times, 0.0),
        p(&times, 50.0),
        p(&times, 100.0),
        met(m, accepted.len() == everyone),
    ));
    let asked: Vec<u64> = m.pods.iter().filter_map(|p| p.asked).collect();
    let own = accepted.len() - asked.len();
    out.push_str(&format!(
        "| grace given (`deleteOptions.gracePeriodSeconds`): min / max; pods left their own {} s | {} s / {} s; {own} | the seconds left to the drain's deadline (t + {} s) |  |\n",
        b.grace_seconds,
        asked.iter().min().map_or("-".into(), u64::to_string),
        asked.iter().max().map_or("-".into(), u64::to_string),
        deadline.as_secs(),
    ));
    let latest = ends.iter().max().copied();
    out.push_str(&format!(
        "| latest end of any grace (eviction accepted + grace) | {} | before the termination start (t + {} s) | {} |\n",
        latest.map_or("-".into(), |l| format!(
            "t + {} ({} before the termination start)",
            secs(l),
            secs(term.saturating_sub(l))
        )),
        term.as_secs(),
        met(m, accepted.len() == everyone && latest.is_some_and(|l| l <= term)),
    ));
    let late = ends.iter().filter(|e| **e > term).count();
    out.push_str(&format!(
        "| pods whose grace would end after the termination start | {late} | 0 | {} |\n",
        met(m, late == 0 && accepted.len() == everyone),
    ));
    let refused: usize = m.pods.iter().map(|p| p.refused).sum();
    out.push_str(&format!(
        "| evictions refused before their acceptance (429 and others) | {refused} |  |  |\n"
    ));
}

/// The rows of what the run cost: requests, AWS lookups, invocations.
fn cost_rows(out: &mut String, m: &Measured) {
    let (blocks, describes, ids) = m.lookups;
    let created = m
        .by_kind
        .iter()
        .filter(|(k, _)| k.starts_with("POST") && k.contains("pods") && !k.contains("eviction"))
        .map(|(_, v)| v)
        .sum::<usize>();
    out.push_str(&format!(
        "| Kubernetes requests until the run stopped (429 by the server's limit); of them pod creates (placeholders) | {} ({}); {created} |  |  |\n",
        m.requests, m.rate_limited
    ));
    out.push_str(&format!(
        "| AWS lookups: Capacity Block lookups (each one `DescribeCapacityReservations` and one `DescribeInstances` by `capacity-reservation-id`); `DescribeInstances` by id (ids) | {blocks}; {describes} ({ids}) | one lookup per invocation carrying the block ({}) | {} |\n",
        m.totals.invocations,
        met(m, blocks <= m.totals.invocations),
    ));
    out.push_str(&format!(
        "| invocations (of which drain passes); Lambda time | {} ({}); {} |  |  |\n",
        m.totals.invocations,
        m.totals.passes,
        secs(m.totals.lambda_time)
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(method: &str, path: &str, body: Value, status: u16, ms: i64) -> RecordedRequest {
        RecordedRequest {
            method: method.parse().unwrap(),
            path: path.into(),
            query: String::new(),
            content_type: None,
            body: Some(body),
            bearer: None,
            status,
            at: DateTime::UNIX_EPOCH + chrono::Duration::milliseconds(ms),
        }
    }

    #[test]
    fn a_cordon_is_the_unschedulable_patch_and_a_grace_is_the_accepted_evictions() {
        let node = format!("/api/v1/nodes/{}", node_name(1));
        let evict = |p| format!("/api/v1/namespaces/ml/pods/train-1-{p}/eviction");
        let grace = |g: u64| json!({"deleteOptions": {"gracePeriodSeconds": g}});
        let log = [
            answered(
                "PATCH",
                &node,
                json!({"metadata": {"labels": {}}}),
                200,
                100,
            ),
            answered(
                "PATCH",
                &node,
                json!({"spec": {"unschedulable": true}}),
                429,
                200,
            ),
            answered(
                "PATCH",
                &node,
                json!({"spec": {"unschedulable": true}}),
                200,
                900,
            ),
            answered("POST", &evict(0), grace(590), 429, 1000),
            answered("POST", &evict(0), grace(589), 201, 2000),
            answered("POST", &evict(0), grace(500), 201, 3000),
            answered("POST", &evict(1), json!({"kind": "Eviction"}), 201, 2500),
        ];
        let (cordoned, pods) = seen(&log, DateTime::UNIX_EPOCH, 2, 2);
        let ms = Duration::from_millis;
        assert_eq!(cordoned, [None, Some(ms(900))]);
        assert_eq!(pods[0], PodSeen::default());
        let first = PodSeen {
            accepted: Some(ms(2000)),
            asked: Some(589),
            refused: 1,
        };
        assert_eq!(pods[2], first, "the first accepted eviction's grace");
        assert_eq!(pods[3].asked, None, "no grace asked: the pod's own");
    }

    /// The warning is one EC2 sends: a Capacity Block's, its reservation well formed, and the
    /// termination starts 10 minutes after it by default.
    #[test]
    fn the_warning_is_a_capacity_blocks_and_its_instances_go_ten_minutes_later() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            b: BlocksSettings,
        }
        let b = Cli::parse_from(["bench"]).b;
        assert!(forewarn::domain::event::ec2::is_reservation_id(RESERVATION));
        let at: DateTime<Utc> = "2026-11-20T10:00:00Z".parse().unwrap();
        let records =
            forewarn::domain::inbound::decode_value("b", json!([warning(at, 40)]), at).unwrap();
        let event = records[0].event.as_ref().unwrap();
        assert_eq!(
            event.kind,
            forewarn::domain::event::EventKind::CapacityBlockExpiration
        );
        assert_eq!(termination_start(&b), Duration::from_secs(600));
        assert_eq!((b.nodes, b.pods_per_node, b.grace_seconds), (64, 8, 600));
    }

    /// Deployed = benchmarked: the handler's settings are an empty environment's but for what
    /// the stack sets; surge is on for Capacity Blocks.
    #[test]
    fn the_handler_is_the_deployed_one() {
        let d = deployed(&[]).unwrap();
        assert_eq!(d.kube_rate_limit, Some((20.0, 2)), "forewarn's share / 10");
        assert_eq!(d.concurrency, 8);
        assert!(
            d.config
                .surge_kinds
                .contains(&forewarn::domain::event::EventKind::CapacityBlockExpiration)
        );
        assert_eq!(d.drain_pass_interval, Some(Duration::from_secs(5)));
        assert_eq!(d.config.deadline_margin, chrono::Duration::seconds(15));
    }
}
