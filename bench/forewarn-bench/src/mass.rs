//! A mass interruption as a user meets it: spot warnings for every node of a large cluster, all
//! at once, through an SQS queue consumed by the stack's default 10 concurrent invocations
//! (`MaximumConcurrency`), against the Kubernetes fake with latency, a request-rate limit,
//! pods that take their grace period (30 s) to go once evicted, and a share of pods behind
//! PodDisruptionBudgets that allow one disruption at a time.
//!
//! The queue is played in process as the event source mapping sees SQS: batches of visible
//! messages (the stack's batch size and batching window: 10, none); a message reported failed stays invisible for the visibility timeout
//! (900 s) unless the handler changed it; messages sent with a delay (a drain's continuations)
//! become visible when it ends. Per node it records when it was cordoned and when the eviction
//! of its last evictable pod was accepted, relative to the warning (all warnings at t = 0), and
//! the share of nodes fully handled before the instance goes (t = 120 s); plus the Lambda time
//! (the sum of the invocations' durations) per 1,000 warnings. Run twice when asked: drains
//! that do not wait (continuations, as deployed) and the drain run in process (`off`: the same
//! passes inside the invocation), the baseline.

use forewarn::domain::clusters::{ClusterId, Place};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use async_trait::async_trait;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::adapters::snapshot::SnapshotInstances;
use forewarn::app::fleet::{Cluster, Connector, Fleet, unreachable};
use forewarn::app::handler::{Handler, Invocation};
use forewarn::app::pipeline::{DEREGISTER_BUDGET, Passes, Traffic};
use forewarn::domain::config::Config;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::pool::CapacityType;
use forewarn::domain::report::Outcome;
use forewarn::ports::ContinuationQueue;
use futures::StreamExt;
use kube_fake::{KubeFake, RecordedRequest};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::e2e::{CLUSTER, kube_counts};
use crate::queue::{Queue, Received, poller_starts, pollers_at};
use crate::stats::{mib_of_kb, percentile, proc_status_kb, rate_bound, ratio, secs};
use forewarn::domain::fixtures::{ec2_node as node, pod_object};

#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// Nodes (instances) interrupted at once.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Evictable (ReplicaSet) pods per node.
    #[arg(long, default_value_t = 2)]
    pub pods_per_node: usize,
    /// Messages per SQS batch (the event source mapping's batch size; more than 10 needs a
    /// batching window).
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// How long the event source mapping gathers messages before it invokes with fewer than a
    /// batch (its MaximumBatchingWindowInSeconds).
    #[arg(long, default_value_t = 0)]
    pub batching_window_seconds: u64,
    /// Triage by cluster, as deployed; `false`: an invocation takes on every message it reads,
    /// as before issue 59 (to compare).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub triage: bool,
    /// Invocations in flight at once (the event source mapping's MaximumConcurrency).
    #[arg(long, default_value_t = STACK_CONCURRENCY)]
    pub invocations: usize,
    /// How long an evicted pod takes to go (its terminationGracePeriodSeconds), in seconds.
    #[arg(long, default_value_t = 30)]
    pub grace_seconds: u64,
    /// Share of nodes whose second pod belongs to a pair of pods on two nodes behind a
    /// PodDisruptionBudget with maxUnavailable 1.
    #[arg(long, default_value_t = 0.2)]
    pub pdb_share: f64,
    /// The drains: `continue` (as deployed), `block` (`off`: the passes run in process) or `both`.
    #[arg(long, default_value = "both")]
    pub drains: String,
    /// Delay between two passes of a drain that does not wait (FOREWARN_DRAIN_PASS_INTERVAL).
    #[arg(long, default_value_t = 5)]
    pub pass_interval_seconds: u64,
    /// Stop taking messages this long after the warnings (the instances are long gone by then).
    #[arg(long, default_value_t = 240)]
    pub cutoff_seconds: u64,
    /// The fake's latency and rate limit.
    #[command(flatten)]
    pub server: crate::server::FakeServer,
    /// The client-side limit across the invocations: by default forewarn's share of the API
    /// server, which the deployed handler divides by FOREWARN_ENVIRONMENTS (the stack's
    /// MaximumConcurrency, `--invocations` here) as this run does; 0: none.
    #[arg(long, default_value_t = forewarn::adapters::kube::KUBE_SHARE.0)]
    pub client_qps: f64,
    #[arg(long, default_value_t = forewarn::adapters::kube::KUBE_SHARE.1)]
    pub client_burst: u32,
    /// How the client-side limit is held.
    #[arg(long, value_enum, default_value_t = ClientLimit::PerEnvironment)]
    pub client_limit: ClientLimit,
    /// Target groups of the cluster (half instance mode, half IP mode) whose targets each
    /// drain takes off first (FOREWARN_DEREGISTER_BUDGET 3 s); 0: no load balancers. Runs of
    /// several clusters have none.
    #[arg(long, default_value_t = 6)]
    pub target_groups: usize,
    /// Elastic Load Balancing's latency per call, in milliseconds.
    #[arg(long, default_value_t = 30)]
    pub elb_latency_ms: u64,
    /// EC2's latency per `DescribeInstances` call (of up to 200 instances, one after another
    /// as the handler's adapter sends them), in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub ec2_latency_ms: u64,
    /// EC2's time to answer each instance a call describes, over its latency, in
    /// microseconds: a page of 1,000 (a cluster's list) takes a second more than a lookup of
    /// ten (an assumption: EC2 documents no figure; its responses grow with the instances).
    #[arg(long, default_value_t = 1000)]
    pub ec2_per_instance_us: u64,
    /// EC2's request rate limit of `DescribeInstances` in each account and region, shared by
    /// every execution environment: calls a second (refill) and at once (bucket), EC2's
    /// documented defaults for a non-mutating action ("Request throttling for the Amazon EC2
    /// API"); 0: none. A call beyond it waits for its token (as if its retries were exact:
    /// the SDK's backoff with jitter waits longer, or fails the lookup).
    #[arg(long, default_value_t = 20.0)]
    pub ec2_rate: f64,
    #[arg(long, default_value_t = 100)]
    pub ec2_bucket: u32,
    /// SQS's latency per `SendMessage` (a drain's continuation, a warning sent back), in
    /// milliseconds.
    #[arg(long, default_value_t = 10)]
    pub sqs_latency_ms: u64,
}

/// The mass benchmark's command line: its settings, and where to draw its figure.
#[derive(Debug, Clone, clap::Args)]
pub struct MassArgs {
    #[command(flatten)]
    pub settings: Settings,
    /// Write the figure (per node, when it was cordoned and when its last eviction was
    /// accepted, both runs, against the 120 s window) to this SVG file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
}

/// How the bench holds the client-side limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientLimit {
    /// As in Lambda, where each execution environment is a process with its own limiter: each
    /// poller gets the limit divided by `--invocations`, rate and burst.
    PerEnvironment,
    /// One limiter for every invocation, as if they were one process.
    Shared,
}

impl Settings {
    /// What an invocation takes on of one cluster, as the wiring gives it
    /// ([`forewarn::app::fleet::triage::takes`] of its environment's limit, in a deployment of
    /// `several` clusters); none without triage.
    pub(crate) fn takes_per_cluster(&self, several: bool) -> Option<usize> {
        let takes = forewarn::app::fleet::triage::takes(self.environment_limit(), several);
        takes.filter(|_| self.triage)
    }

    /// The settings of `forewarn-bench mass` with no option given.
    pub(crate) fn defaults() -> Settings {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        <Cli as clap::Parser>::parse_from(["bench"]).settings
    }

    /// The limit of each execution environment when they have their own: the client-side limit
    /// divided among the pollers.
    fn environment_limit(&self) -> Option<(f64, u32)> {
        let n = self.invocations.max(1);
        (self.client_qps > 0.0 && self.client_limit == ClientLimit::PerEnvironment).then(|| {
            (
                self.client_qps / n as f64,
                (self.client_burst / n as u32).max(1),
            )
        })
    }
}

pub(crate) fn instance_id(n: usize) -> String {
    format!("i-0b{n:015x}")
}

pub(crate) fn node_name(n: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.ec2.internal",
        n / 65536 % 256,
        n / 256 % 256,
        n % 256
    )
}

/// The zones the instances of a run are in: three of [`REGION_ZONES`].
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// The zones of the region (us-east-1 has six), each a list of its own when a cluster's
/// instances are listed.
const REGION_ZONES: usize = 6;
const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:forewarn";
/// The deployment's own account (the sample events').
pub(crate) const OWN_ACCOUNT: &str = "123456789012";

/// Whether a run's deployment serves an organization: one of its clusters is in a member account.
fn is_organization(members: &[Member]) -> bool {
    members.iter().any(|m| m.account.is_some())
}

/// The deployment's region, every cluster's.
pub(crate) const REGION: &str = "us-east-1";
/// The stack's function timeout: each invocation's deadline.
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(150);
/// How long an instance lives after its spot warning.
const WINDOW: Duration = Duration::from_secs(120);

/// The least Kubernetes requests one node's warning needs: find the node, cordon, list its
/// pods, one eviction per pod, one look that they are gone, three Events (interrupted,
/// cordoned, drained).
pub fn least_requests_per_node(pods: usize) -> u64 {
    7 + pods as u64
}

/// Whether node `n`'s second pod is in a budgeted pair (pairs are nodes 2k and 2k+1).
pub(crate) fn budgeted(n: usize, share: f64) -> bool {
    let pair = n / 2;
    ((pair as f64 + 0.5) * share).floor() != ((pair as f64 - 0.5) * share).floor() || (share >= 1.0)
}

/// The SQS event Lambda would pass for `messages`.
fn sqs_event(messages: &[Received]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, body, receives)| {
            json!({
                "messageId": format!("m-{id}"), "receiptHandle": format!("rh-{id}"), "body": body,
                "attributes": {"ApproximateReceiveCount": receives.to_string()},
                "messageAttributes": {}, "eventSource": "aws:sqs",
                "eventSourceARN": QUEUE_ARN, "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

fn warning(n: usize, id: &str, time: &str) -> Value {
    forewarn::domain::fixtures::spot_json(&format!("mass-{n}-{id}"), id, time)
}

/// What one run measured.
pub(crate) struct Run {
    /// Per node: when it was seen cordoned, when its last evictable pod's eviction was seen
    /// accepted (terminating or gone).
    pub(crate) cordoned: Vec<Option<Duration>>,
    pub(crate) evicted: Vec<Option<Duration>>,
    /// Per node: when its first eviction was answered, whatever the answer.
    tried: Vec<Option<Duration>>,
    invocations: usize,
    lambda_time: Duration,
    /// The part of `lambda_time` spent by invocations that carried only drain passes.
    pass_time: Duration,
    pub(crate) outcomes: BTreeMap<String, usize>,
    passes: usize,
    /// Events on evicted pods recorded, and given up (the reports' drain summaries).
    pod_events: (usize, usize),
    pub(crate) requests: u64,
    pub(crate) rate_limited: u64,
    pub(crate) by_kind: BTreeMap<String, usize>,
    /// What the API server answered in each 10 s of the window, by kind (429s apart).
    spending: Vec<BTreeMap<String, usize>>,
    peak_kb: u64,
    /// With the cluster simulation: every pod's life, and when the warnings were sent.
    pub(crate) timeline: Vec<kube_fake::PodTimeline>,
    pub(crate) warned_at: chrono::DateTime<chrono::Utc>,
    /// What the load balancers were asked and did (see [`crate::elb`]), when the run had some.
    pub(crate) elb: Option<String>,
    /// How much of the run the CPU was the bottleneck (the whole run's, every cluster's).
    pub(crate) load: crate::cpu::Load,
    /// The messages a new one was received after when its warnings were sent
    /// ([`Queue::ahead`]), and how long after they were sent the last of them was first read
    /// (`None`: not all were).
    pub(crate) behind: (usize, Option<Duration>),
    /// When, from the run's start, its instances were first listed whole (a mass
    /// interruption's list, `cluster_instances`).
    pub(crate) listed: Option<Duration>,
}

impl Run {
    /// The nodes whose first eviction was answered by `window`; of them, those not fully
    /// handled by then; of those, the ones with a pod behind a budget (see [`budgeted`]).
    fn began_by(&self, window: Duration, s: &Settings) -> (usize, usize, usize) {
        let by = |t: &Option<Duration>| t.is_some_and(|t| t <= window);
        let began: Vec<usize> = (0..self.tried.len())
            .filter(|&i| by(&self.tried[i]))
            .collect();
        let short: Vec<usize> = began
            .iter()
            .copied()
            .filter(|&i| !(by(&self.cordoned[i]) && by(&self.evicted[i])))
            .collect();
        let budgeted = short
            .iter()
            .filter(|&&i| s.pods_per_node > 1 && budgeted(i, s.pdb_share))
            .count();
        (began.len(), short.len(), budgeted)
    }

    /// The nodes fully handled (cordoned, every eviction accepted) by `window` after the warnings.
    pub(crate) fn handled_by(&self, window: Duration) -> usize {
        self.cordoned
            .iter()
            .zip(&self.evicted)
            .filter(|(c, e)| c.is_some_and(|c| c <= window) && e.is_some_and(|e| e <= window))
            .count()
    }
}

/// What a run sets that the deployed handler does not: each setting whose value in the run is
/// not the stack's default (the settings' declaration; the client-side limit as the stack
/// derives it), as `` `NAME=value` (deployed: default) ``. Every section prints them beside its
/// figures.
pub(crate) fn overrides(s: &Settings, mode: RunMode) -> Vec<String> {
    let surge: Vec<&str> = forewarn::domain::config::Config::default()
        .surge_kinds
        .iter()
        .map(|k| k.as_str())
        .collect();
    let surge = surge.join(",");
    let default_interval = forewarn::app::pipeline::PASS_INTERVAL.as_secs();
    // The stack sets FOREWARN_ENVIRONMENTS to its MaximumConcurrency; the handler derives its
    // limit from it.
    let deployed_limit = forewarn::app::settings::Settings::from_vars([(
        "FOREWARN_ENVIRONMENTS",
        STACK_CONCURRENCY.to_string(),
    )])
    .ok()
    .and_then(|d| d.kube_rate_limit);
    let shown = |l: Option<(f64, u32)>| {
        (
            l.map_or("none".into(), |l| l.0.to_string()),
            l.map_or("none".into(), |l| l.1.to_string()),
        )
    };
    let (qps, burst) = shown(s.environment_limit());
    let (deployed_qps, deployed_burst) = shown(deployed_limit);
    let run = [
        (
            "FOREWARN_CONCURRENCY",
            s.batch.to_string(),
            forewarn::app::pipeline::CONCURRENCY.to_string(),
        ),
        (
            "surge (a policy rule's)",
            if mode.surge {
                surge.clone()
            } else {
                String::new()
            },
            surge,
        ),
        (
            "FOREWARN_DRAIN_PASS_INTERVAL",
            if mode.continuing {
                format!("{}s", s.pass_interval_seconds)
            } else {
                "off".into()
            },
            format!("{default_interval}s"),
        ),
        ("FOREWARN_KUBE_QPS", qps, deployed_qps),
        ("burst (the QPS rounded up)", burst, deployed_burst),
    ];
    let mut out: Vec<String> = run
        .into_iter()
        .filter(|(_, value, default)| value != default)
        .map(|(name, value, default)| {
            let shown = |v: &str| {
                if v.is_empty() {
                    "blank".to_string()
                } else {
                    format!("`{v}`")
                }
            };
            format!("`{name}`={} (deployed: {})", shown(&value), shown(&default))
        })
        .collect();
    let stack = Settings::defaults();
    for (name, value, deployed) in [
        ("BatchSize", s.batch as u64, stack.batch as u64),
        (
            "MaximumBatchingWindowInSeconds",
            s.batching_window_seconds,
            stack.batching_window_seconds,
        ),
    ] {
        if value != deployed {
            out.push(format!("`{name}`={value} (deployed: {deployed})"));
        }
    }
    if !s.triage {
        out.push("triage by cluster off (deployed: on)".into());
    }
    if s.invocations != STACK_CONCURRENCY {
        out.push(format!(
            "`MaximumConcurrency`={} (deployed: {})",
            s.invocations, STACK_CONCURRENCY
        ));
    }
    out
}

/// The line that says how AWS answers in a run (EC2's lookups, SQS's sends).
pub(crate) fn aws_line(s: &Settings) -> String {
    let limit = if s.ec2_rate > 0.0 {
        format!(
            "at most {}/s and {} at once in each account (EC2's request throttle of a \
             non-mutating call; a call beyond it waits for its token)",
            s.ec2_rate, s.ec2_bucket
        )
    } else {
        "no rate limit".into()
    };
    format!(
        "AWS: EC2's `DescribeInstances` {} ms a call and {} ms an instance answered, {limit}; \
         SQS's `SendMessage` {} ms.",
        s.ec2_latency_ms,
        s.ec2_per_instance_us as f64 / 1000.0,
        s.sqs_latency_ms
    )
}

/// The line that lists a run's [`overrides`].
pub(crate) fn overrides_line(s: &Settings, mode: RunMode) -> String {
    match overrides(s, mode).as_slice() {
        [] => "Every setting of the handler is the deployed default.".into(),
        o => format!(
            "Settings that are not the deployed defaults: {}.",
            o.join(", ")
        ),
    }
}

/// The stack's default `MaximumConcurrency` (`the_defaults_are_the_stacks` reads it).
pub(crate) const STACK_CONCURRENCY: usize = 10;

// The handler's safety margin in every run: the deployed default.
use forewarn::app::settings::SAFETY_MARGIN;

/// How one run is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunMode {
    /// Drains continue by continuation messages (as deployed), else in process.
    pub continuing: bool,
    /// Placeholders first (`FOREWARN_SURGE`'s default kinds), else evictions at once.
    pub surge: bool,
    /// The fake's cluster simulation (scheduler, ReplicaSets, an autoscaler whose nodes are
    /// Ready this long after a pod finds no room), with requests on every pod.
    pub launch_delay: Option<Duration>,
}

/// Each pod's cpu request and each node's allocatable cpu in the simulated cluster: the doomed
/// nodes are full; the autoscaler's nodes take 8 pods.
const POD_CPU: &str = "500m";
const GROUP: &str = "general";

/// What the event source mapping's pollers add up.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    pub(crate) invocations: usize,
    pub(crate) lambda_time: Duration,
    pub(crate) pass_time: Duration,
    pub(crate) outcomes: BTreeMap<String, usize>,
    pub(crate) passes: usize,
    /// Events on evicted pods recorded, and given up.
    pub(crate) pod_events: (usize, usize),
}

/// The mass interruption's report as a markdown section, with its chart in `svg` when given.
pub async fn report(s: &Settings, svg: Option<&std::path::Path>) -> anyhow::Result<String> {
    let modes: Vec<bool> = match s.drains.as_str() {
        "continue" => vec![true],
        "block" => vec![false],
        "both" => vec![true, false],
        other => bail!("--drains {other}: expected continue, block or both"),
    };
    let mut out = header(s);
    let mut runs: Vec<Option<Run>> = vec![None, None];
    for continuing in modes {
        let mode = RunMode {
            continuing,
            surge: false,
            launch_delay: None,
        };
        let run = one_run(s, mode).await?;
        runs[usize::from(!continuing)] = Some(run);
    }
    timing_rows(&mut out, s, &runs);
    cost_rows(&mut out, s, &runs);
    for elb in runs.iter().flatten().filter_map(|r| r.elb.as_ref()) {
        out.push('\n');
        out.push_str(elb);
    }
    afterword(&mut out, s, &runs, svg)?;
    Ok(out)
}

/// The report's heading, what the run is, and the head of its table.
fn header(s: &Settings) -> String {
    let pdb_pairs = (0..s.nodes / 2)
        .filter(|&k| budgeted(2 * k, s.pdb_share))
        .count();
    let client = match (s.client_qps > 0.0, s.environment_limit()) {
        (false, _) => "none".into(),
        (true, None) => format!(
            "{} requests/s, burst {}, one limiter for every invocation",
            s.client_qps, s.client_burst
        ),
        (true, Some((qps, burst))) => format!(
            "{qps} requests/s, burst {burst}, in each of the {} execution environments \
             (`FOREWARN_KUBE_QPS` = the server's {} / the function's concurrency): each poller \
             has a limiter of its own, kept from one invocation to the next",
            s.invocations, s.client_qps
        ),
    };
    format!(
        "### Mass interruption: {} spot warnings at once, batches of {}, {} invocations at once\n\n\
         The fake: {} (429 + `Retry-After: 1` above it); \
         evicted pods take {} s to go (their grace period). {} pods to evict ({} per node); {} pairs of pods on two nodes \
         behind a PodDisruptionBudget with `maxUnavailable: 1` ({} pods). Client-side limit: {}. \
         Each warning at t = 0; its instance goes at t = 120 s. The queue: failed messages invisible for 900 s unless \
         the handler changes that; continuations delayed as sent, in whole seconds as SQS takes them. {} {}\n\n\
         | measure | continuation drains (as deployed) | in-process drain (`off`, baseline) | bound |\n|---|---|---|---|\n",
        s.nodes,
        s.batch,
        s.invocations,
        s.server.described(),
        s.grace_seconds,
        s.nodes * s.pods_per_node,
        s.pods_per_node,
        pdb_pairs,
        pdb_pairs * 2,
        client,
        aws_line(s),
        overrides_line(
            s,
            RunMode {
                continuing: true,
                surge: false,
                launch_delay: None,
            }
        ),
    )
}

/// A row of the table: `f` of each run (continuation drains, in-process drain), and the bound.
fn row(
    out: &mut String,
    runs: &[Option<Run>],
    name: &str,
    f: &dyn Fn(&Run) -> String,
    bound: &str,
) {
    let cell = |i: usize| runs[i].as_ref().map(f).unwrap_or_else(|| "not run".into());
    out.push_str(&format!(
        "| {name} | {} | {} | {bound} |\n",
        cell(0),
        cell(1)
    ));
}

/// The table's rows of when nodes were cordoned and drained.
fn timing_rows(out: &mut String, s: &Settings, runs: &[Option<Run>]) {
    let cordon_bound = rate_bound(
        2 * s.nodes as u64,
        s.server.server_rps,
        u64::from(s.server.server_burst),
    );
    let n = s.nodes;
    let last = |v: &[Option<Duration>]| -> Option<Duration> {
        if v.iter().all(Option::is_some) {
            v.iter().flatten().max().copied()
        } else {
            None
        }
    };
    let within =
        |v: &[Option<Duration>]| v.iter().filter(|t| t.is_some_and(|t| t <= WINDOW)).count();
    row(
        out,
        runs,
        "every node cordoned",
        &|r| match last(&r.cordoned) {
            Some(t) => r.load.marked(
                t <= cordon_bound.mul_f64(1.2),
                format!("{} ({})", secs(t), ratio(t, cordon_bound)),
            ),
            None => r.load.marked(
                false,
                format!("{} of {n} only", r.cordoned.iter().flatten().count()),
            ),
        },
        &format!(
            "{} (2 requests per node at the server's rate) × 1.2 = {}",
            secs(cordon_bound),
            secs(cordon_bound.mul_f64(1.2))
        ),
    );
    let p = |v: &[Option<Duration>], q: f64| {
        let all: Vec<Duration> = v.iter().flatten().copied().collect();
        percentile(&all, q).map(secs).unwrap_or_else(|| "-".into())
    };
    row(
        out,
        runs,
        "node cordoned, p50 / p99",
        &|r| format!("{} / {}", p(&r.cordoned, 50.0), p(&r.cordoned, 99.0)),
        "",
    );
    row(
        out,
        runs,
        "every evictable pod's eviction accepted",
        &|r| match last(&r.evicted) {
            Some(t) => r.load.marked(t <= WINDOW, secs(t)),
            None => r.load.marked(
                false,
                format!("{} of {n} nodes only", r.evicted.iter().flatten().count()),
            ),
        },
        "120 s (the instance goes)",
    );
    row(
        out,
        runs,
        "node's last eviction accepted, p50 / p99",
        &|r| format!("{} / {}", p(&r.evicted, 50.0), p(&r.evicted, 99.0)),
        "",
    );
    row(
        out,
        runs,
        "nodes fully handled (cordoned, every eviction accepted) by 120 s",
        &|r| {
            let both = r.handled_by(WINDOW);
            r.load.marked(
                both == n,
                format!(
                    "{both} of {n} ({:.1} %)",
                    100.0 * both as f64 / n.max(1) as f64
                ),
            )
        },
        "100 %",
    );
    row(
        out,
        runs,
        "nodes whose drain began (an eviction answered) by 120 s; of them not fully handled (with a pod behind a budget)",
        &|r| {
            let (began, short, budgeted) = r.began_by(WINDOW, s);
            format!("{began}; {short} ({budgeted})")
        },
        "",
    );
    row(
        out,
        runs,
        "nodes cordoned by 120 s",
        &|r| format!("{} of {n}", within(&r.cordoned)),
        "",
    );
}

/// The table's rows of what the runs cost: Lambda time, invocations, requests, memory.
fn cost_rows(out: &mut String, s: &Settings, runs: &[Option<Run>]) {
    let n = s.nodes;
    row(
        out,
        runs,
        "Lambda time (sum of invocation durations) per 1,000 warnings",
        &|r| secs(r.lambda_time.mul_f64(1000.0 / n.max(1) as f64)),
        "continuations ≤ 1/10 of the in-process drain's",
    );
    row(
        out,
        runs,
        "of which invocations carrying only drain passes",
        &|r| secs(r.pass_time.mul_f64(1000.0 / n.max(1) as f64)),
        "",
    );
    row(
        out,
        runs,
        "invocations (of which drain passes: messages)",
        &|r| format!("{} ({})", r.invocations, r.passes),
        "",
    );
    row(
        out,
        runs,
        "Kubernetes requests (429 by the server's limit)",
        &|r| format!("{} ({})", r.requests, r.rate_limited),
        &format!(
            "{} at least ({} per node)",
            least_requests_per_node(s.pods_per_node) * n as u64,
            least_requests_per_node(s.pods_per_node)
        ),
    );
    row(
        out,
        runs,
        "peak memory of the bench process",
        &|r| mib_of_kb(r.peak_kb),
        "",
    );
    let loads: Vec<Option<crate::cpu::Load>> =
        runs.iter().map(|r| r.as_ref().map(|r| r.load)).collect();
    out.push_str(&crate::cpu::row(4, &loads));
}

/// What follows the table: the share of Lambda time, the chart (written to `svg`), the API
/// server's answers over time, and each run's outcomes.
fn afterword(
    out: &mut String,
    s: &Settings,
    runs: &[Option<Run>],
    svg: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let (Some(c), Some(b)) = (&runs[0], &runs[1]) {
        let share = c.lambda_time.as_secs_f64() / b.lambda_time.as_secs_f64().max(1e-9);
        out.push_str(&format!(
            "\nLambda time of continuation drains: {:.3} of the in-process drain's ({}).\n",
            share,
            c.load
                .and(b.load)
                .verdict(share <= 0.1, "within the 1/10 goal", "above the 1/10 goal")
        ));
    }
    if let Some(path) = svg {
        draw(path, runs, s)?;
        out.push_str(&format!(
            "\n![Nodes cordoned and fully drained over time, continuation drains against the \
             in-process drain]({})\n",
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
    }
    if let Some(r) = &runs[0] {
        out.push_str(&format!(
            "\nWhat the API server answered, {SPENT_EVERY} s at a time (continuation drains):\n\n{}",
            spending_table(r, s)
        ));
    }
    for (i, name) in [(0, "continuation drains"), (1, "in-process drain")] {
        if let Some(r) = &runs[i] {
            out.push_str(&format!(
                "\n{name}: outcomes {}; pod Events recorded {}, given up {}; requests by kind: {}.\n",
                r.outcomes
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.pod_events.0,
                r.pod_events.1,
                r.by_kind
                    .iter()
                    .map(|(k, v)| format!("`{k}` {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// Per node, from the fake's log of requests (nothing polls the fake while the run goes on, so
/// the measure takes no CPU from it), after the warnings.
#[derive(Debug, PartialEq)]
struct Seen {
    /// When its cordon was answered (its first patch accepted).
    cordoned: Vec<Option<Duration>>,
    /// When the last of its evictable pods' evictions was (each pod's first accepted; `None`
    /// while one has none).
    evicted: Vec<Option<Duration>>,
    /// When its first eviction was answered, whatever the answer (its first drain pass).
    tried: Vec<Option<Duration>>,
}

/// What [`Seen`] the log `requests` shows, from `from`.
fn handled(
    requests: &[kube_fake::RecordedRequest],
    from: chrono::DateTime<chrono::Utc>,
    names: &[String],
    pods_per_node: usize,
) -> Seen {
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(n, name)| (name.as_str(), n))
        .collect();
    let mut cordoned: Vec<Option<Duration>> = vec![None; names.len()];
    let mut tried: Vec<Option<Duration>> = vec![None; names.len()];
    let mut pods: Vec<Vec<Option<Duration>>> = vec![vec![None; pods_per_node]; names.len()];
    for r in requests {
        let at = (r.at - from).to_std().unwrap_or_default();
        let accepted = (200..300).contains(&r.status);
        if accepted
            && r.method == "PATCH"
            && let Some(&n) = r
                .path
                .strip_prefix("/api/v1/nodes/")
                .and_then(|name| index.get(name))
        {
            cordoned[n].get_or_insert(at);
        }
        // `/api/v1/namespaces/shop/pods/w{n}-{p}/eviction`, as the run names its pods.
        if let Some((n, p)) = eviction_of(r, "/api/v1/namespaces/shop/pods/w")
            && let Some(slot) = pods.get_mut(n).and_then(|v| v.get_mut(p))
        {
            tried[n].get_or_insert(at);
            if accepted {
                slot.get_or_insert(at);
            }
        }
    }
    let evicted = pods
        .into_iter()
        .map(|v| {
            v.into_iter()
                .try_fold(Duration::ZERO, |m, t| Some(m.max(t?)))
        })
        .collect();
    Seen {
        cordoned,
        evicted,
        tried,
    }
}

/// The node `n` and pod `p` of an eviction `r` asks for, of a pod named `{prefix}{n}-{p}` (its
/// path up to the node's number).
pub(crate) fn eviction_of(r: &kube_fake::RecordedRequest, prefix: &str) -> Option<(usize, usize)> {
    let (n, p) = r
        .path
        .strip_prefix(prefix)?
        .strip_suffix("/eviction")?
        .split_once('-')?;
    (r.method == "POST").then_some(())?;
    Some((n.parse().ok()?, p.parse().ok()?))
}

/// The width of a column of [`spending`].
const SPENT_EVERY: u64 = 10;

/// Per [`SPENT_EVERY`] seconds from `from` until `window` after it: the requests answered, by
/// kind, the 429s of each kind apart (an eviction's: its budget's refusal or the rate limit).
fn spending(
    requests: &[kube_fake::RecordedRequest],
    from: chrono::DateTime<chrono::Utc>,
    window: Duration,
) -> Vec<BTreeMap<String, usize>> {
    let columns = window.as_secs().div_ceil(SPENT_EVERY) as usize;
    let mut out = vec![BTreeMap::new(); columns];
    for r in requests {
        let Ok(t) = (r.at - from).to_std() else {
            continue;
        };
        let Some(column) = out.get_mut((t.as_secs() / SPENT_EVERY) as usize) else {
            continue;
        };
        let kind = crate::e2e::kube_label(r.method.as_str(), &r.path);
        let label = if r.status == 429 {
            format!("{kind}, answered 429")
        } else {
            kind
        };
        *column.entry(label).or_insert(0) += 1;
    }
    out
}

/// The table of a run's [`spending`]: a row per kind, a column per 10 s, the server's most in
/// the last row.
fn spending_table(run: &Run, s: &Settings) -> String {
    let kinds: std::collections::BTreeSet<&String> =
        run.spending.iter().flat_map(BTreeMap::keys).collect();
    let mut out = String::from("| requests answered | ");
    let heads: Vec<String> = (0..run.spending.len() as u64)
        .map(|c| format!("{}–{} s", c * SPENT_EVERY, (c + 1) * SPENT_EVERY))
        .collect();
    out.push_str(&heads.join(" | "));
    out.push_str(" |\n|---|");
    out.push_str(&"---:|".repeat(heads.len()));
    out.push('\n');
    for kind in kinds {
        let cells: Vec<String> = run
            .spending
            .iter()
            .map(|c| c.get(kind).copied().unwrap_or(0).to_string())
            .collect();
        out.push_str(&format!("| `{kind}` | {} |\n", cells.join(" | ")));
    }
    let totals: Vec<String> = run
        .spending
        .iter()
        .map(|c| c.values().sum::<usize>().to_string())
        .collect();
    out.push_str(&format!("| all | {} |\n", totals.join(" | ")));
    // The rate, and its burst once, at the start.
    let most: Vec<String> = (0..heads.len())
        .map(|c| {
            let burst = if c == 0 {
                f64::from(s.server.server_burst)
            } else {
                0.0
            };
            format!("{:.0}", s.server.server_rps * SPENT_EVERY as f64 + burst)
        })
        .collect();
    out.push_str(&format!(
        "| the most the server's rate allows | {} |\n",
        most.join(" | ")
    ));
    out
}

/// The figure: per run, how many nodes were cordoned, and how many had their last eviction
/// accepted, by each second after the warnings (each node's times, sorted), against the 120 s
/// window.
fn draw(path: &std::path::Path, runs: &[Option<Run>], s: &Settings) -> anyhow::Result<()> {
    use crate::plot::{Chart, Line, cumulative};
    use plotters::style::RGBColor;
    let end = s.cutoff_seconds as f64;
    let times = |v: &[Option<Duration>]| -> Vec<f64> {
        v.iter().flatten().map(Duration::as_secs_f64).collect()
    };
    let styles = [
        (
            "continuation drains",
            RGBColor(120, 160, 230),
            RGBColor(20, 60, 200),
        ),
        (
            "in-process drain",
            RGBColor(240, 170, 120),
            RGBColor(200, 30, 30),
        ),
    ];
    let names: Vec<[String; 2]> = styles
        .iter()
        .map(|(run, _, _)| [format!("{run}: cordoned"), format!("{run}: fully drained")])
        .collect();
    let mut lines = Vec::new();
    for ((run, (_, light, dark)), [cordoned, drained]) in runs.iter().zip(styles).zip(&names) {
        let Some(run) = run else { continue };
        lines.push(Line {
            name: cordoned,
            color: light,
            points: cumulative(&times(&run.cordoned), end),
        });
        lines.push(Line {
            name: drained,
            color: dark,
            points: cumulative(&times(&run.evicted), end),
        });
    }
    let caption = format!(
        "{} spot warnings at t = 0: nodes cordoned and fully drained",
        s.nodes
    );
    let chart = Chart {
        caption: &caption,
        x_desc: "seconds after the warnings",
        y_desc: "nodes",
        x_max: end,
        y_max: s.nodes as f64 * 1.05,
        mark: Some((WINDOW.as_secs_f64(), "the instances go (120 s)")),
        lines,
    };
    crate::plot::draw(path, &chart)
}

pub(crate) async fn one_run(s: &Settings, mode: RunMode) -> anyhow::Result<Run> {
    let mut runs = fleet_run(s, mode, &[Member::up(CLUSTER)]).await?;
    Ok(runs.remove(0))
}

/// One cluster of a run: its name, its nodes (`None`: the run's `--nodes`), when its warnings
/// are sent after the run's first, and how long its API server is down from then on.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub name: String,
    pub down_for: Option<Duration>,
    pub nodes: Option<usize>,
    pub warned_after: Duration,
    /// A member account it is in (`None`: the deployment's own), and whether that account's
    /// role denies `ec2:DescribeInstances`.
    pub account: Option<String>,
    pub denies: bool,
}

impl Member {
    /// The cluster it is, named whole as a deployment names it once it knows its own account:
    /// of its account (the own one unless it is a member's), in the deployment's region.
    fn id(&self) -> ClusterId {
        let account = self.account.as_deref().unwrap_or(OWN_ACCOUNT);
        ClusterId::at(&Place::of(account, REGION), &self.name)
    }

    pub(crate) fn up(name: &str) -> Member {
        Member {
            name: name.into(),
            down_for: None,
            nodes: None,
            warned_after: Duration::ZERO,
            account: None,
            denies: false,
        }
    }

    /// The same cluster in the member account `account`, whose role denies
    /// `ec2:DescribeInstances` when `denies`.
    pub(crate) fn in_account(self, account: &str, denies: bool) -> Member {
        Member {
            account: Some(account.into()),
            denies,
            ..self
        }
    }

    pub(crate) fn down(name: &str, down_for: Duration) -> Member {
        Member {
            down_for: Some(down_for),
            ..Member::up(name)
        }
    }

    /// The same cluster with `nodes` nodes, warned `after` the run's first warnings.
    pub(crate) fn of(self, nodes: usize, after: Duration) -> Member {
        Member {
            nodes: Some(nodes),
            warned_after: after,
            ..self
        }
    }

    fn nodes(&self, s: &Settings) -> usize {
        self.nodes.unwrap_or(s.nodes)
    }
}

/// One cluster of a run as it is played: its fake, its nodes' names (the same in every
/// cluster: VPCs reuse addresses) and its instances' ids.
struct Played {
    member: Member,
    /// The message group its warnings arrive in, as the stack's rules and routes give it: its
    /// account's with an organization (a run with a member account), none without.
    group: Option<String>,
    fake: Arc<KubeFake>,
    names: Vec<String>,
    ids: Vec<String>,
    clients: ClusterClient,
}

/// A run of one deployment over `members` (one: as a deployment of one cluster; several: one
/// deployment serving them all, each cluster its own API server at the same rate, every node of
/// every cluster warned at t = 0 through one queue): each cluster's [`Run`], in order.
pub(crate) async fn fleet_run(
    s: &Settings,
    mode: RunMode,
    members: &[Member],
) -> anyhow::Result<Vec<Run>> {
    let (played, instances) = play(s, mode, members).await;
    let dir = tempfile::Builder::new()
        .prefix("forewarn-bench-mass-")
        .tempdir()?;
    let config = Config {
        cluster: (members.len() == 1).then(|| ClusterId::at(&Place::default(), &members[0].name)),
        ..config_of(mode)
    };
    let queue = Arc::new(Queue::sending_in(Duration::from_millis(s.sqs_latency_ms)));
    let store: Arc<dyn forewarn::ports::PoolStore> = Arc::new(EmbeddedStore::open(dir.path())?);
    // The account's load balancers (one cluster's runs only).
    let elb =
        (s.target_groups > 0 && members.len() == 1).then(|| Arc::new(elb_account(s, &instances)));
    let accounts = Accounts::of(members, instances, s);
    let instances: Arc<dyn forewarn::ports::InstanceDirectory> = accounts.clone();
    // Each poller is an execution environment with a handler of its own, set up as a cold
    // start sets it up: its executor (and what its surge drains remember), its kept retries.
    let environment = || {
        let clients: BTreeMap<String, ClusterClient> = played
            .iter()
            .map(|p| {
                let clients = match s.environment_limit() {
                    Some(limit) => p.clients.clone().with_rate_limit(Some(limit)),
                    None => p.clients.clone(),
                };
                (p.member.name.clone(), clients)
            })
            .collect();
        let fleet = match clients.len() {
            1 => Fleet::one(cluster_of(None, &clients[&members[0].name], &config)),
            _ => Fleet::many(
                None,
                members.iter().map(Member::id).collect(),
                Arc::new(BenchClusters {
                    clients,
                    config: config.clone(),
                }),
            ),
        };
        let several = fleet.several();
        Arc::new(Handler {
            redelivery: Some(queue.clone()),
            passes: Passes {
                interval: Duration::from_secs(s.pass_interval_seconds),
                queue: mode
                    .continuing
                    .then(|| queue.clone() as Arc<dyn ContinuationQueue>),
                kept: mode.continuing.then(Arc::default),
                // As the wiring gives it: an organization's continuations are their account's.
                tenant: if is_organization(members) {
                    forewarn::domain::inbound::continuation::Tenant::Account
                } else {
                    forewarn::domain::inbound::continuation::Tenant::Cluster
                },
            },
            instances: instances.clone(),
            fleet,
            concurrency: s.batch,
            takes_per_cluster: s.takes_per_cluster(several),
            safety_margin: SAFETY_MARGIN,
            traffic: elb.as_ref().map(|account| Traffic {
                balancers: Arc::new(crate::elb::Environment::new(account.clone())),
                budget: DEREGISTER_BUDGET,
            }),
            ..Handler::new(config.clone(), store.clone())
        })
    };

    ready(s, &played);
    let warned_at = chrono::Utc::now();
    let start = Instant::now();
    let cutoff = start + Duration::from_secs(s.cutoff_seconds);
    let ((totals, sent), load) = crate::cpu::measured(async {
        tokio::join!(
            poll(s, &queue, environment, cutoff, Arc::default()),
            timeline(&played, &queue, start, warned_at)
        )
    })
    .await;
    let totals = totals?;
    played
        .iter()
        .map(|p| {
            let requests = p.fake.requests();
            let warned_at = warned_at + forewarn::ports::span(p.member.warned_after);
            let seen = handled(&requests, warned_at, &p.names, s.pods_per_node);
            let elb = elb
                .as_ref()
                .map(|a| a.summary(&p.ids, &seen.tried, warned_at));
            let run = run_of(&p.fake, &requests, seen, totals.clone(), warned_at)?;
            let (ahead, at, ids) = &sent[&p.member.name];
            let behind = (*ahead, queue.first_read(ids).map(|read| read - *at));
            let listed = accounts.listed(&p.member.name).map(|at| at - start);
            Ok(Run {
                elb,
                load,
                behind,
                listed,
                ..run
            })
        })
        .collect()
}

/// Readies the API servers of a run's clusters: the server's model applied, the requests so far
/// cleared, those down at first failing every request.
fn ready(s: &Settings, played: &[Played]) {
    for p in played {
        s.server
            .apply(&p.fake, Duration::from_secs(s.grace_seconds));
        p.fake.clear_requests();
        if p.member.down_for.is_some() {
            p.fake
                .inject(kube_fake::Fault::new(503).times(usize::MAX / 2));
        }
    }
}

/// What happens to a run's clusters from `start` (at `warned_at`): the warnings of the
/// clusters warned first at once, interleaved, the others' on time; each outage ending on time.
/// Of each cluster: the messages ahead of its warnings, when they were sent, and their ids
/// (watched).
async fn timeline(
    played: &[Played],
    queue: &Arc<Queue>,
    start: Instant,
    warned_at: chrono::DateTime<chrono::Utc>,
) -> BTreeMap<String, (usize, Instant, Vec<u64>)> {
    let first: Vec<&Played> = played
        .iter()
        .filter(|p| p.member.warned_after.is_zero())
        .collect();
    let mut sent: BTreeMap<_, _> = (warn(queue, &first, warned_at).into_iter())
        .map(|(name, ids)| (name, (0, start, ids)))
        .collect();
    let later = played
        .iter()
        .filter(|p| !p.member.warned_after.is_zero())
        .map(|p| async move {
            tokio::time::sleep_until(start + p.member.warned_after).await;
            let at = warned_at + forewarn::ports::span(p.member.warned_after);
            let (ahead, sent) = (queue.ahead(), Instant::now());
            let ids = warn(queue, &[p], at)
                .remove(&p.member.name)
                .unwrap_or_default();
            (p.member.name.clone(), (ahead, sent, ids))
        });
    let outages = played.iter().filter_map(|p| {
        let fake = Arc::clone(&p.fake);
        p.member.down_for.map(|d| async move {
            tokio::time::sleep_until(start + d).await;
            fake.clear_faults();
        })
    });
    let (later, _) = futures::future::join(
        futures::future::join_all(later),
        futures::future::join_all(outages),
    )
    .await;
    sent.extend(later);
    sent
}

/// Queues a spot warning for every node of `played`, sent at `at`, the clusters' interleaved;
/// their ids by cluster, watched (see [`Queue::watch`]).
fn warn(
    queue: &Queue,
    played: &[&Played],
    at: chrono::DateTime<chrono::Utc>,
) -> BTreeMap<String, Vec<u64>> {
    let time = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let most = played.iter().map(|p| p.ids.len()).max().unwrap_or(0);
    let mut ids: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for n in 0..most {
        for p in played.iter().filter(|p| n < p.ids.len()) {
            let mut event = warning(n, &p.ids[n], &time);
            if let Some(account) = &p.member.account {
                event["account"] = json!(account);
            }
            // As the stack delivers it: with an organization in the account's message group
            // (the own account's rules, a member's route); without one in none (a tenant of
            // its own).
            let id = queue.send(event.to_string(), p.group.as_deref(), Duration::ZERO);
            ids.entry(p.member.name.clone()).or_default().push(id);
        }
    }
    ids.values().for_each(|ids| queue.watch(ids));
    ids
}

/// The instances of every account of a run, each described in its own account: those of an
/// account in `denied` are refused there, as a member role denying `ec2:DescribeInstances`
/// refuses them (a permanent failure). Each call answers after EC2's latency, and after its
/// token of the account's request rate limit (`--ec2-rate`, `--ec2-bucket`).
struct Accounts {
    known: SnapshotInstances,
    denied: BTreeSet<String>,
    /// Each `DescribeInstances` call's latency, and each instance's it answers.
    latency: (Duration, Duration),
    /// Calls a second and at once, in each account (`None`: no limit).
    limit: Option<(f64, f64)>,
    /// Each account's tokens (the own account's under `None`), when they were counted.
    buckets: Mutex<BTreeMap<Option<String>, (f64, Instant)>>,
    /// When each cluster's instances were first listed whole.
    listed: Mutex<BTreeMap<String, Instant>>,
}

impl Accounts {
    /// The instances of a run's `members`, those of a denying member's account refused.
    fn of(
        members: &[Member],
        instances: BTreeMap<String, InstanceFacts>,
        s: &Settings,
    ) -> Arc<Accounts> {
        let denied = members
            .iter()
            .filter(|m| m.denies)
            .filter_map(|m| m.account.clone())
            .collect();
        Arc::new(Accounts {
            known: SnapshotInstances(instances),
            denied,
            latency: (
                Duration::from_millis(s.ec2_latency_ms),
                Duration::from_micros(s.ec2_per_instance_us),
            ),
            limit: (s.ec2_rate > 0.0).then_some((s.ec2_rate, f64::from(s.ec2_bucket.max(1)))),
            buckets: Mutex::default(),
            listed: Mutex::default(),
        })
    }

    /// When `cluster`'s instances were first listed whole.
    fn listed(&self, cluster: &str) -> Option<Instant> {
        self.listed.lock().unwrap().get(cluster).copied()
    }

    /// How long `calls` in `account` wait for their tokens, taken now (reservations: the
    /// count may go below zero, a later call waits behind an earlier one).
    fn wait(&self, account: Option<&String>, calls: u32) -> Duration {
        let Some((rate, bucket)) = self.limit else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap();
        let (tokens, at) = buckets.entry(account.cloned()).or_insert((bucket, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(bucket);
        *tokens -= f64::from(calls);
        *at = now;
        Duration::from_secs_f64((-*tokens).max(0.0) / rate)
    }

    /// Answers `calls` in `place`, of `instances` in all, as EC2 would: after their tokens and
    /// its latency, refused in a denying account.
    async fn call(
        &self,
        place: &forewarn::ports::Place,
        (calls, instances): (usize, usize),
    ) -> Result<(), forewarn::ports::PortError> {
        let calls = calls.max(1) as u32;
        let wait = self.wait(place.account.as_ref(), calls);
        let (latency, each) = self.latency;
        tokio::time::sleep(wait + latency * calls + each * instances as u32).await;
        match place.account.as_ref().filter(|a| self.denied.contains(*a)) {
            Some(account) => Err(forewarn::ports::PortError::new(
                "ec2",
                forewarn::ports::FailureKind::Forbidden,
                format!("AccessDenied: the member role of {account} denies ec2:DescribeInstances"),
            )),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl forewarn::ports::InstanceDirectory for Accounts {
    async fn describe(
        &self,
        place: &forewarn::ports::Place,
        ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, forewarn::ports::PortError> {
        let found = self.known.describe(place, ids).await?;
        self.call(place, (ids.len().div_ceil(200), found.len()))
            .await?;
        Ok(found)
    }

    /// As the EC2 directory lists them, every page after its token and its time, 1,000 a call:
    /// when the region's zones may be listed at once (`at_once`), its zones
    /// (`DescribeAvailabilityZones`, read once per environment and place there, here a call's
    /// latency before every such list: at worst), then each zone at once (an empty zone a call
    /// too); else in one list.
    async fn cluster_instances(
        &self,
        place: &forewarn::ports::Place,
        cluster: &str,
        at_once: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), forewarn::ports::PortError> {
        let all = Mutex::new(BTreeMap::new());
        let each = |page: BTreeMap<_, _>| all.lock().unwrap().extend(page);
        self.known
            .cluster_instances(place, cluster, 1, &each)
            .await?;
        let all = all.into_inner().unwrap();
        let zoned = REGION_ZONES <= at_once;
        if zoned {
            tokio::time::sleep(self.latency.0).await;
        }
        let zone = |n: usize| ZONES.get(n).copied();
        let lists = (0..if zoned { REGION_ZONES } else { 1 }).map(|n| {
            let theirs = (all.iter()).filter(|(_, i)| !zoned || i.zone.as_deref() == zone(n));
            let theirs: Vec<(String, InstanceFacts)> =
                theirs.map(|(id, i)| (id.clone(), i.clone())).collect();
            async move {
                let mut pages: Vec<_> = theirs.chunks(1000).map(<[_]>::to_vec).collect();
                if pages.is_empty() {
                    pages.push(vec![]);
                }
                for page in pages.into_iter().take(forewarn::ports::CLUSTER_PAGES_MAX) {
                    self.call(place, (1, page.len())).await?;
                    found(page.into_iter().collect());
                }
                Ok(())
            }
        });
        let listed: Result<(), _> = futures::future::join_all(lists).await.into_iter().collect();
        if listed.is_ok() {
            let mut at = self.listed.lock().unwrap();
            at.entry(cluster.to_string()).or_insert_with(Instant::now);
        }
        listed
    }
}

/// The clusters of a run, each its fake seeded with its nodes and a client; every cluster's
/// instances, by id.
async fn play(
    s: &Settings,
    mode: RunMode,
    members: &[Member],
) -> (Vec<Played>, BTreeMap<String, InstanceFacts>) {
    let simulated = mode.launch_delay.is_some();
    // One client (so one rate limit) for the process, or each execution environment a client
    // with a limit of its own, as each environment has in Lambda; one per cluster.
    let process_limit = (s.client_qps > 0.0 && s.environment_limit().is_none())
        .then_some((s.client_qps, s.client_burst));
    let mut played = Vec::new();
    let mut instances = BTreeMap::new();
    let mut first_id = 0;
    let organization = is_organization(members);
    for member in members {
        let fake = Arc::new(start_fake(mode).await);
        let nodes = member.nodes(s);
        let names: Vec<String> = (0..nodes).map(node_name).collect();
        let ids: Vec<String> = (0..nodes).map(|n| instance_id(first_id + n)).collect();
        first_id += nodes;
        instances.extend(seed(&fake, s, simulated, &ids, &names, &member.name));
        let clients = ClusterClient::new(fake.client()).with_rate_limit(process_limit);
        let group = member.account.as_deref().unwrap_or(OWN_ACCOUNT);
        played.push(Played {
            member: member.clone(),
            group: organization.then(|| group.to_string()),
            fake,
            names,
            ids,
            clients,
        });
    }
    (played, instances)
}

/// One cluster's services over `clients`, as the wiring builds them (nodes and executor).
fn cluster_of(id: Option<ClusterId>, clients: &ClusterClient, config: &Config) -> Cluster {
    Cluster {
        executor: Some(Arc::new(KubeExecutor::new(clients.clone(), config))),
        ..Cluster::new(id, Arc::new(clients.clone()))
    }
}

/// Each served cluster of an execution environment connected to its own fake.
struct BenchClusters {
    clients: BTreeMap<String, ClusterClient>,
    config: Config,
}

#[async_trait]
impl Connector for BenchClusters {
    async fn connect(&self, id: &ClusterId) -> Result<Cluster, forewarn::ports::PortError> {
        let clients = self.clients.get(&id.name).ok_or_else(|| {
            unreachable(
                id,
                forewarn::ports::FailureKind::Invalid,
                "not a cluster of this run",
            )
        })?;
        Ok(cluster_of(Some(id.clone()), clients, &self.config))
    }
}

/// The event source mapping: up to `s.invocations` pollers (its `MaximumConcurrency`), 5 at
/// first and more as it scales up (see [`crate::queue`]), each an execution environment made by
/// `environment`, taking a batch and invoking until `cutoff` (or nothing is left, or `stop` is
/// set: an invocation under way finishes): what they added up.
pub(crate) async fn poll(
    s: &Settings,
    queue: &Arc<Queue>,
    environment: impl Fn() -> Arc<Handler>,
    cutoff: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<Totals> {
    // As the event source mapping takes them (Lambda developer guide, "Batching behavior").
    anyhow::ensure!(
        (1..=10_000).contains(&s.batch) && (s.batch <= 10 || s.batching_window_seconds >= 1),
        "--batch {}: an event source mapping of a standard queue takes 1 to 10,000 messages a \
         batch, more than 10 only with a batching window of at least 1 s \
         (--batching-window-seconds)",
        s.batch
    );
    let totals = Arc::new(Mutex::new(Totals::default()));
    let began = Instant::now();
    let pollers = (0..s.invocations.max(1)).map(|n| {
        let queue = Arc::clone(queue);
        let handler = environment();
        let totals = Arc::clone(&totals);
        let (batch, window) = (s.batch, Duration::from_secs(s.batching_window_seconds));
        let stop = Arc::clone(&stop);
        debug_assert!(pollers_at(poller_starts(n), s.invocations) > n);
        async move {
            tokio::time::sleep_until(began + poller_starts(n)).await;
            loop {
                if Instant::now() >= cutoff || stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Ok::<(), anyhow::Error>(());
                }
                let mut messages = queue.receive(batch);
                // The batching window: from the first message, more gathered until it ends or
                // the batch is full.
                let gathering = Instant::now() + window;
                while !messages.is_empty() && messages.len() < batch && Instant::now() < gathering {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    messages.extend(queue.receive(batch - messages.len()));
                }
                if messages.is_empty() {
                    if queue.idle_until(cutoff) {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let began = Instant::now();
                let deadline = handler.clock.now() + forewarn::ports::span(FUNCTION_TIMEOUT);
                let invoke = handler.invoke(sqs_event(&messages), Some(deadline));
                let invocation = invoke
                    .await
                    .map_err(|e| anyhow::anyhow!("an invocation failed: {e}"))?;
                let took = began.elapsed();
                let failed = failed_ids(&invocation);
                let ids: Vec<u64> = messages.iter().map(|m| m.0).collect();
                queue.settle(&ids, &failed);
                tally(&mut totals.lock().unwrap(), &invocation, took);
            }
        }
    });
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(pollers)
        .buffer_unordered(s.invocations.max(1))
        .collect()
        .await;
    for r in results {
        r?;
    }
    let totals = totals.lock().unwrap().clone();
    Ok(totals)
}

/// The Kubernetes fake of a run: with the autoscaler when `mode` simulates launches.
async fn start_fake(mode: RunMode) -> KubeFake {
    match mode.launch_delay {
        None => KubeFake::start().await,
        Some(launch_delay) => {
            KubeFake::builder()
                .replicasets()
                .autoscaler(kube_fake::AutoscalerSettings {
                    launch_delay,
                    ..kube_fake::AutoscalerSettings::default()
                        .group(kube_fake::NodeGroup::new(GROUP).label("pool", GROUP))
                })
                .start()
                .await
        }
    }
}

/// forewarn's configuration in a run: surge drains when `mode` says.
fn config_of(mode: RunMode) -> Config {
    Config {
        cluster: Some(ClusterId::at(&Place::default(), CLUSTER)),
        surge_kinds: if mode.surge {
            forewarn::domain::surge::SURGE_KINDS.into()
        } else {
            std::collections::BTreeSet::new()
        },
        ..Config::default()
    }
}

/// The messages an invocation reported failed (their ids).
fn failed_ids(invocation: &Invocation) -> Vec<u64> {
    invocation.response["batchItemFailures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["itemIdentifier"].as_str())
        .filter_map(|id| id.trim_start_matches("m-").parse().ok())
        .collect()
}

/// Seeds the fake with the run's cluster: per node (named `names`, of instances `ids`) its pods,
/// the budgets of the pairs, and — `simulated`, with the autoscaler — what lets the pods come
/// back (their ReplicaSets, the placeholders' PriorityClass). The instances' facts, by id.
fn seed(
    fake: &KubeFake,
    s: &Settings,
    simulated: bool,
    ids: &[String],
    names: &[String],
    cluster: &str,
) -> BTreeMap<String, InstanceFacts> {
    // Per app, how many of its pods there are (its ReplicaSet's replicas).
    let mut apps: BTreeMap<String, usize> = BTreeMap::new();
    let mut instances = BTreeMap::new();
    for (n, id) in ids.iter().enumerate() {
        let zone = ZONES[n % ZONES.len()];
        let name = &names[n];
        let mut doomed = node(name, id, zone);
        if simulated {
            // Full: its pods' requests take all of it.
            doomed["metadata"]["labels"]["pool"] = json!(GROUP);
            doomed["status"]["allocatable"] = json!({"cpu": format!("{}m", 500 * s.pods_per_node), "memory": "16Gi", "pods": "110"});
        }
        fake.insert(doomed);
        for p in 0..s.pods_per_node {
            let app = if p == 1 && budgeted(n, s.pdb_share) {
                format!("pair-{}", n / 2)
            } else {
                format!("w{n}-{p}")
            };
            let mut pod = pod_object("shop", &format!("w{n}-{p}"), name, &app, "ReplicaSet");
            if simulated {
                pod["spec"]["nodeSelector"] = json!({"pool": GROUP});
                pod["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": POD_CPU}});
            }
            fake.insert(pod);
            *apps.entry(app).or_insert(0) += 1;
        }
        if s.pods_per_node > 1 && n % 2 == 0 && budgeted(n, s.pdb_share) {
            fake.insert(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": format!("pair-{}", n / 2), "namespace": "shop"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": format!("pair-{}", n / 2)}}},
            }));
        }
        instances.insert(
            id.clone(),
            InstanceFacts {
                instance_id: id.clone(),
                instance_type: Some(["m5.large", "c5.large", "r5.large"][n % 3].to_string()),
                zone: Some(zone.to_string()),
                zone_id: None,
                capacity_type: Some(CapacityType::Spot),
                private_dns: Some(name.clone()),
                state: Some("running".into()),
                state_reason: None,
                launch_time: Some(chrono::Utc::now() - chrono::Duration::hours(3)),
                tags: BTreeMap::from([(
                    format!("kubernetes.io/cluster/{cluster}"),
                    "owned".into(),
                )]),
                addresses: crate::elb::addresses(n, s.pods_per_node),
                capacity_reservation_id: None,
            },
        );
    }
    if simulated {
        // The placeholders' PriorityClass, as infra/k8s/placeholders.yaml makes it (without it
        // a placeholder's priority would be 0, and no replacement would preempt it).
        fake.insert(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": forewarn::domain::surge::PRIORITY_CLASS},
            "value": -1, "preemptionPolicy": "Never", "globalDefault": false}),
        );
        // The ReplicaSets that recreate an evicted pod at once (as `pod_object` names them).
        for (app, replicas) in &apps {
            fake.insert(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("{app}-rs"), "namespace": "shop", "uid": format!("uid-{app}-rs")},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                    "template": {"metadata": {"labels": {"app": app}},
                        "spec": {"nodeSelector": {"pool": GROUP},
                            "terminationGracePeriodSeconds": s.grace_seconds,
                            "containers": [{"name": "main", "image": "app",
                                "resources": {"requests": {"cpu": POD_CPU}}}]}}}}));
        }
    }
    instances
}

/// Adds what one invocation did (taking `took`) to the totals.
fn tally(t: &mut Totals, invocation: &Invocation, took: Duration) {
    t.invocations += 1;
    t.lambda_time += took;
    if invocation.reports.iter().all(|r| r.pass.is_some()) {
        t.pass_time += took;
    }
    for r in &invocation.reports {
        for d in r.actions.iter().filter_map(|a| a.drain) {
            t.pod_events.0 += d.pod_events;
            t.pod_events.1 += d.pod_events_given_up;
        }
        if r.pass.is_some() {
            t.passes += 1;
            // A pass that did not act (failed, refused) is counted by its reason.
            if r.outcome != Outcome::Acted {
                let why: String = r
                    .reason
                    .as_deref()
                    .unwrap_or_default()
                    .chars()
                    .take(100)
                    .collect();
                let key = format!("pass {:?} ({why})", r.outcome);
                *t.outcomes.entry(key).or_insert(0) += 1;
            }
        } else {
            *t.outcomes.entry(format!("{:?}", r.outcome)).or_insert(0) += 1;
        }
    }
}

/// The run as measured: what the fake saw (`requests`, `seen`) and the pollers' totals.
fn run_of(
    fake: &KubeFake,
    requests: &[RecordedRequest],
    seen: Seen,
    totals: Totals,
    warned_at: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Run> {
    let counters = fake.counters();
    let Seen {
        cordoned,
        evicted,
        tried,
    } = seen;
    let Totals {
        invocations,
        lambda_time,
        pass_time,
        outcomes,
        passes,
        pod_events,
    } = totals;
    if outcomes
        .get(&format!("{:?}", Outcome::Acted))
        .copied()
        .unwrap_or(0)
        == 0
    {
        bail!("no warning was acted on: {outcomes:?}");
    }
    Ok(Run {
        cordoned,
        evicted,
        tried,
        invocations,
        lambda_time,
        pass_time,
        outcomes,
        passes,
        pod_events,
        requests: counters.requests,
        rate_limited: counters.rate_limited,
        by_kind: kube_counts(requests),
        spending: spending(requests, warned_at, WINDOW),
        peak_kb: proc_status_kb(None, "VmHWM").unwrap_or_default(),
        timeline: fake.pod_timeline(),
        warned_at,
        elb: None,
        load: crate::cpu::Load::default(),
        behind: (0, None),
        listed: None,
    })
}

/// The account of a mass run: `--target-groups` of the cluster over `instances`, calls answered
/// after `--elb-latency-ms`.
fn elb_account(
    s: &Settings,
    instances: &BTreeMap<String, forewarn::domain::facts::InstanceFacts>,
) -> crate::elb::Account {
    let nodes: Vec<(String, Vec<String>)> = instances
        .values()
        .map(|i| (i.instance_id.clone(), i.addresses.clone()))
        .collect();
    let latency = Duration::from_millis(s.elb_latency_ms);
    crate::elb::Account::new(s.target_groups, &nodes, latency)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deployed = benchmarked: the run's invocations are the stack's default MaximumConcurrency
    /// (`infra/forewarn.yaml`), and each invocation's limit is what the deployed handler takes
    /// by default there (the share divided by FOREWARN_ENVIRONMENTS, its settings' own rule).
    #[test]
    fn the_defaults_are_the_stacks() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            settings: Settings,
        }
        let s = Cli::parse_from(["bench"]).settings;
        let template = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/forewarn.yaml"),
        )
        .unwrap();
        let at = template
            .find("\n  MaximumConcurrency:\n")
            .expect("the parameter");
        let default: usize = template[at..]
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .and_then(|d| d.parse().ok())
            .expect("its default");
        assert_eq!(s.invocations, default);
        let deployed = forewarn::app::settings::Settings::from_vars([(
            "FOREWARN_ENVIRONMENTS",
            default.to_string(),
        )])
        .unwrap()
        .kube_rate_limit;
        assert_eq!(s.environment_limit(), deployed);
        // The event source mapping's batch and batching window.
        let mapping = |name: &str| -> u64 {
            let line = template
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
                .expect("the event source mapping's setting");
            line.split_whitespace().next().unwrap().parse().unwrap()
        };
        assert_eq!(s.batch as u64, mapping("BatchSize"));
        assert_eq!(
            s.batching_window_seconds,
            mapping("MaximumBatchingWindowInSeconds")
        );
    }

    fn answered(method: &str, path: &str, status: u16, ms: i64) -> kube_fake::RecordedRequest {
        kube_fake::RecordedRequest {
            method: method.parse().unwrap(),
            path: path.into(),
            query: String::new(),
            content_type: None,
            body: None,
            bearer: None,
            status,
            at: chrono::DateTime::UNIX_EPOCH + chrono::Duration::milliseconds(ms),
        }
    }

    #[test]
    fn a_node_is_handled_when_its_cordon_and_every_pods_first_eviction_were_accepted() {
        let names = vec![node_name(0), node_name(1)];
        let cordon = |n: usize| format!("/api/v1/nodes/{}", names[n]);
        let evict = |n: usize, p: usize| format!("/api/v1/namespaces/shop/pods/w{n}-{p}/eviction");
        let log = [
            answered("GET", &cordon(0), 200, 100),
            answered("PATCH", &cordon(0), 200, 200),
            answered("PATCH", &cordon(0), 200, 900),
            answered("PATCH", &cordon(1), 429, 300),
            answered("PATCH", &cordon(1), 200, 1300),
            answered("POST", &evict(0, 0), 201, 400),
            answered("POST", &evict(0, 1), 429, 500),
            answered("POST", &evict(0, 1), 201, 2500),
            answered("POST", &evict(0, 1), 201, 3000),
            answered("POST", &evict(1, 1), 429, 1350),
            answered("POST", &evict(1, 0), 201, 1400),
        ];
        let seen = handled(&log, chrono::DateTime::UNIX_EPOCH, &names, 2);
        let ms = Duration::from_millis;
        assert_eq!(seen.cordoned, [Some(ms(200)), Some(ms(1300))]);
        // Node 0: its second pod's first accepted eviction; node 1's second pod has none.
        assert_eq!(seen.evicted, [Some(ms(2500)), None]);
        // Each node's first eviction answered, a refusal included.
        assert_eq!(seen.tried, [Some(ms(400)), Some(ms(1350))]);
    }

    #[test]
    fn the_spending_counts_each_kind_per_10_s_and_429s_apart() {
        let log = [
            answered("GET", "/api/v1/nodes/a", 200, 1_000),
            answered("GET", "/api/v1/nodes/a", 429, 2_000),
            answered("PATCH", "/api/v1/nodes/a", 200, 12_000),
            answered("PATCH", "/api/v1/nodes/a", 200, 130_000),
        ];
        let spent = spending(&log, chrono::DateTime::UNIX_EPOCH, WINDOW);
        assert_eq!(spent.len(), 12);
        assert_eq!(spent[0]["GET nodes/{name}"], 1);
        assert_eq!(spent[0]["GET nodes/{name}, answered 429"], 1);
        assert_eq!(spent[1]["PATCH nodes/{name}"], 1);
        assert_eq!(
            spent
                .iter()
                .map(|c| c.values().sum::<usize>())
                .sum::<usize>(),
            3
        );
    }

    /// Deployed = benchmarked: the run's warnings are grouped as the stack's rules deliver
    /// them: a member account's route puts them in the account's group, the own account's rules
    /// (without an organization) in none.
    #[test]
    fn warnings_are_grouped_as_the_stacks_rules_deliver_them() {
        let root = forewarn_tests::moto::workspace_root();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let route = read("infra/member-route.yaml");
        assert!(
            route.contains("SqsParameters:\n            MessageGroupId: !Ref MemberAccountId"),
            "a route delivers in its account's group"
        );
        let stack = read("infra/forewarn.yaml");
        let grouped = "SqsParameters: !If\n            - WithOrganization\n            - MessageGroupId: !Ref AWS::AccountId\n            - !Ref AWS::NoValue";
        assert_eq!(
            stack.matches(grouped).count(),
            7,
            "each rule of the own account: a group only with an organization"
        );
    }

    /// The default run differs from the deployed handler in the batch's concurrency and in
    /// surge (off), nothing else; a limit or concurrency of its own is listed too.
    #[test]
    fn a_runs_overrides_are_what_it_sets_unlike_the_stack() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            s: Settings,
        }
        let s = Cli::parse_from(["bench"]).s;
        let plain = RunMode {
            continuing: true,
            surge: false,
            launch_delay: None,
        };
        let names = |o: Vec<String>| -> Vec<String> {
            o.iter()
                .map(|l| l.split('=').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            names(overrides(&s, plain)),
            ["`FOREWARN_CONCURRENCY`", "`surge (a policy rule's)`"]
        );
        let surge = RunMode {
            surge: true,
            ..plain
        };
        assert_eq!(names(overrides(&s, surge)), ["`FOREWARN_CONCURRENCY`"]);
        let off = RunMode {
            continuing: false,
            ..plain
        };
        assert!(names(overrides(&s, off)).contains(&"`FOREWARN_DRAIN_PASS_INTERVAL`".to_string()));
        let faster = Settings {
            client_qps: 800.0,
            invocations: 20,
            ..s
        };
        let listed = names(overrides(&faster, plain));
        assert!(
            listed.contains(&"`FOREWARN_KUBE_QPS`".to_string()),
            "{listed:?}"
        );
        assert!(
            listed.contains(&"`MaximumConcurrency`".to_string()),
            "{listed:?}"
        );
    }

    #[test]
    fn names_and_ids_are_unique_and_well_formed() {
        assert_eq!(instance_id(1), "i-0b000000000000001");
        assert_eq!(instance_id(1).len(), 19);
        assert_eq!(node_name(258), "ip-10-0-1-2.ec2.internal");
        assert_eq!(least_requests_per_node(2), 9);
    }

    #[test]
    fn the_budgeted_share_is_the_share_asked_for() {
        for share in [0.0, 0.2, 0.5, 1.0] {
            let pairs = (0..1000).filter(|&k| budgeted(2 * k, share)).count();
            assert!(
                (pairs as f64 - 1000.0 * share).abs() <= 1.0,
                "{share}: {pairs}"
            );
        }
        assert_eq!(budgeted(4, 0.3), budgeted(5, 0.3), "both nodes of a pair");
    }
}
