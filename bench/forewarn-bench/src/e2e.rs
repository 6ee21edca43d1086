//! One spot warning end to end: an SQS batch of one through the real handler, DynamoDB and EC2
//! on moto (through the counting proxy), the cluster in the Kubernetes fake. Wall time, and the
//! round trips per service next to the least the same work needs.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::bail;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::app::fleet::{Cluster, Fleet};
use forewarn::app::handler::Handler;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::config::Config;
use forewarn::domain::fixtures::{app_pod as pod, ec2_node as node, spot_json};
use forewarn::domain::report::Outcome;
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::moto::{MotoServer, create_pool_table};
use forewarn_tests::proxy::AwsProxy;
use kube_fake::{KubeFake, RecordedRequest};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::stats::{ms, percentile};

pub const CLUSTER: &str = "bench";

/// A Kubernetes request as `METHOD resource[/subresource]`, names left out (`GET nodes/{name}`,
/// `LIST pods`, `POST pods/{name}/eviction`).
pub fn kube_label(method: &str, path: &str) -> String {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or_default(),
        Some(&"apis") => segments.get(3..).unwrap_or_default(),
        _ => &segments,
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [resource] if method == "GET" => format!("LIST {resource}"),
        [resource] => format!("{method} {resource}"),
        [resource, _name] => format!("{method} {resource}/{{name}}"),
        [resource, _name, sub, ..] => format!("{method} {resource}/{{name}}/{sub}"),
        [] => format!("{method} {path}"),
    }
}

pub fn kube_counts(requests: &[RecordedRequest]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in requests {
        *counts
            .entry(kube_label(r.method.as_str(), &r.path))
            .or_insert(0) += 1;
    }
    counts
}

/// The least calls one spot warning for a node with two evictable pods (and a DaemonSet pod)
/// needs, each with why.
pub const MINIMUM: &[(&str, &str, usize, &str)] = &[
    (
        "ec2",
        "DescribeInstances",
        1,
        "the event names only the instance id; its type, zone, capacity type (the pool) and tags (the cluster check) come from EC2",
    ),
    (
        "dynamodb",
        "read of the ledger",
        1,
        "whether this interruption was already handled must be known before acting (a duplicate must not act again)",
    ),
    (
        "dynamodb",
        "TransactWriteItems",
        1,
        "the ledger entry and the pool mark, together, after acting (recorded before acting, a failed action would be lost)",
    ),
    (
        "kubernetes",
        "find the node",
        1,
        "the node of the instance (by its name from the instance's private DNS)",
    ),
    ("kubernetes", "PATCH nodes/{name}", 1, "cordon and taint"),
    (
        "kubernetes",
        "LIST pods",
        1,
        "the pods on the node (field selector spec.nodeName)",
    ),
    (
        "kubernetes",
        "POST pods/{name}/eviction",
        2,
        "one eviction per evictable pod (the DaemonSet pod stays)",
    ),
    (
        "kubernetes",
        "LIST pods (wait)",
        1,
        "the drain ends when the evicted pods are gone: at least one look after the evictions",
    ),
    (
        "kubernetes",
        "POST events",
        5,
        "one Event per thing done to the node (SpotInterrupted, Cordoned, Drained) and one on each pod evicted (SpotInterruption); a create answered 409 already says the Event exists, no read first",
    ),
];

/// An SQS batch of spot warnings, one message per instance id.
pub fn sqs_batch(ids: &[&str], tag: &str) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let records: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| {
            let body = spot_json(&format!("{tag}-{n}-{id}"), id, &now);
            json!({
                "messageId": format!("m-{tag}-{n}"),
                "receiptHandle": format!("rh-{tag}-{n}"),
                "body": body.to_string(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795168868412"},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:forewarn",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// What the runs go through: moto (EC2, DynamoDB) behind the counting proxy, the Kubernetes
/// fake, and the handler over them.
struct Bench {
    handler: Handler,
    fake: KubeFake,
    spot: Launch,
    image: String,
    ec2: aws_sdk_ec2::Client,
    proxy: AwsProxy,
    /// Kept for the runs' length (and dropped last): moto stops when it is dropped.
    _moto: MotoServer,
}

impl Bench {
    async fn start() -> anyhow::Result<Bench> {
        let moto = MotoServer::try_start()?;
        let base = moto.sdk_config();
        let table = create_pool_table(&base, "forewarn-bench-pools").await?;
        let proxy = AwsProxy::start(&moto.endpoint()).await?;
        let sdk = forewarn::adapters::aws::default_retries(
            proxy.sdk_config(&base),
            forewarn::adapters::aws::AwsSettings::default(),
        );
        let ec2 = aws_sdk_ec2::Client::new(&base);
        let image = any_image(&ec2).await?;
        let fake = KubeFake::start().await;
        let config = Config {
            cluster: Some(ClusterId::at(&Place::default(), CLUSTER)),
            ..Config::default()
        };
        let clients = ClusterClient::new(fake.client());
        let store = Arc::new(forewarn_tests::moto::keyed_store(
            &sdk,
            &table,
            &forewarn_tests::moto::key_secret_of(&table),
        ));
        let handler = Handler {
            instances: Arc::new(Ec2Directory::from_conf(&sdk)),
            fleet: Fleet::one(Cluster {
                executor: Some(Arc::new(KubeExecutor::new(clients.clone(), &config))),
                ..Cluster::new(None, Arc::new(clients))
            }),
            ..Handler::new(config.clone(), store)
        };
        Ok(Bench {
            handler,
            fake,
            spot: Launch::spot(CLUSTER),
            image,
            ec2,
            proxy,
            _moto: moto,
        })
    }
}

/// What the single runs saw: their wall times, and the first run's calls.
#[derive(Default)]
struct Singles {
    walls: Vec<std::time::Duration>,
    /// AWS calls per service.
    aws: Option<BTreeMap<String, usize>>,
    /// AWS calls per `service operation`.
    ops: Option<BTreeMap<String, usize>>,
    /// Kubernetes requests per [`kube_label`].
    kube: Option<BTreeMap<String, usize>>,
    /// The counts differed between runs.
    varied: bool,
}

/// `runs` spot warnings, each for a fresh instance and node, one at a time.
async fn singles(b: &Bench, runs: usize) -> anyhow::Result<Singles> {
    let mut seen = Singles::default();
    for run in 0..runs {
        let l = launch(&b.ec2, &b.image, &b.spot).await?;
        b.fake.insert(node(&l.dns, &l.id, "us-east-1a"));
        b.fake
            .insert(pod(&format!("web-{run}-a"), &l.dns, "ReplicaSet"));
        b.fake
            .insert(pod(&format!("web-{run}-b"), &l.dns, "ReplicaSet"));
        b.fake
            .insert(pod(&format!("agent-{run}"), &l.dns, "DaemonSet"));
        let batch = sqs_batch(&[&l.id], &format!("e2e{run}"));
        b.proxy.reset();
        b.fake.clear_requests();
        let deadline = b.handler.clock.now() + chrono::Duration::seconds(120);
        let start = Instant::now();
        let inv = b.handler.invoke(batch, Some(deadline)).await?;
        seen.walls.push(start.elapsed());
        let outcome = inv.reports.first().map(|r| r.outcome);
        if outcome != Some(Outcome::Acted) {
            bail!(
                "run {run}: the warning was not acted on: {:?}",
                inv.reports.first()
            );
        }
        let aws = b.proxy.counts();
        let mut ops = BTreeMap::new();
        for c in b.proxy.calls() {
            *ops.entry(format!("{} {}", c.service, c.operation))
                .or_insert(0usize) += 1;
        }
        let kube = kube_counts(&b.fake.requests());
        if seen.aws.as_ref().is_some_and(|a| *a != aws)
            || seen.kube.as_ref().is_some_and(|k| *k != kube)
        {
            seen.varied = true;
        }
        seen.aws.get_or_insert(aws);
        seen.ops.get_or_insert(ops);
        seen.kube.get_or_insert(kube);
    }
    Ok(seen)
}

/// How many warnings the full batch holds.
const FULL: usize = 10;

/// What the full batch did.
struct FullBatch {
    wall: std::time::Duration,
    acted: usize,
    /// AWS calls per ``service `operation` ``.
    ops: BTreeMap<String, usize>,
    /// Kubernetes requests.
    kube: usize,
}

/// A full batch: [`FULL`] warnings for as many instances in one SQS batch.
async fn full_batch(b: &Bench) -> anyhow::Result<FullBatch> {
    let mut launched = Vec::new();
    for n in 0..FULL {
        let l = launch(&b.ec2, &b.image, &b.spot).await?;
        b.fake.insert(node(&l.dns, &l.id, "us-east-1a"));
        b.fake
            .insert(pod(&format!("batch-{n}-a"), &l.dns, "ReplicaSet"));
        b.fake
            .insert(pod(&format!("batch-{n}-b"), &l.dns, "ReplicaSet"));
        launched.push(l);
    }
    let ids: Vec<&str> = launched.iter().map(|l| l.id.as_str()).collect();
    b.proxy.reset();
    b.fake.clear_requests();
    let start = Instant::now();
    let inv = b
        .handler
        .invoke(
            sqs_batch(&ids, "e2e-full"),
            Some(b.handler.clock.now() + chrono::Duration::seconds(120)),
        )
        .await?;
    let wall = start.elapsed();
    let acted = inv
        .reports
        .iter()
        .filter(|r| r.outcome == Outcome::Acted)
        .count();
    let mut ops = BTreeMap::new();
    for c in b.proxy.calls() {
        *ops.entry(format!("{} `{}`", c.service, c.operation))
            .or_insert(0usize) += 1;
    }
    Ok(FullBatch {
        wall,
        acted,
        ops,
        kube: b.fake.requests().len(),
    })
}

/// `runs` spot warnings, each for a fresh instance and node, one at a time, then a full batch;
/// the report as a markdown section.
pub async fn report(runs: usize) -> anyhow::Result<String> {
    let bench = Bench::start().await?;
    let (measured, load) = crate::cpu::measured(async {
        let seen = singles(&bench, runs).await?;
        anyhow::Ok((seen, full_batch(&bench).await?))
    })
    .await;
    let (seen, full) = measured?;
    let mut out = singles_section(runs, seen, &load);
    out.push_str(&format!(
        "\nA full batch (one SQS batch of {FULL} warnings for {FULL} instances, each node with 2 ReplicaSet pods): \
         {} of {FULL} acted in {}; AWS calls: {}; Kubernetes requests: {} (least: {}).\n",
        full.acted,
        ms(full.wall),
        full.ops
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        full.kube,
        FULL * 9,
    ));
    Ok(out)
}

/// The single runs' part of the report: wall times, calls, and the least they need.
fn singles_section(runs: usize, seen: Singles, load: &crate::cpu::Load) -> String {
    let ops = seen.ops.unwrap_or_default();
    let kube = seen.kube.unwrap_or_default();
    let kube_total: usize = kube.values().sum();
    let mut out = format!(
        "### One event end to end ({runs} runs, one spot warning each, a node with 2 ReplicaSet pods and 1 DaemonSet pod)\n\n\
         Wall time of `Handler::invoke` on the SQS batch: median {}, p90 {} (these runs and \
         the full batch below: {}).\n\n\
         | service | call | count per event | least needed |\n|---|---|---|---|\n",
        ms(percentile(&seen.walls, 50.0).unwrap_or_default()),
        ms(percentile(&seen.walls, 90.0).unwrap_or_default()),
        load.cell(),
    );
    for (op, n) in &ops {
        let (service, call) = op.split_once(' ').unwrap_or((op, ""));
        out.push_str(&format!("| {service} | `{call}` | {n} | |\n"));
    }
    for (label, n) in &kube {
        out.push_str(&format!("| kubernetes | `{label}` | {n} | |\n"));
    }
    let mut least: BTreeMap<&str, usize> = BTreeMap::new();
    for (service, _, n, _) in MINIMUM {
        *least.entry(service).or_insert(0) += n;
    }
    let aws_totals = seen.aws.unwrap_or_default();
    out.push_str("\nTotals per service, next to the least the same work needs:\n\n| service | calls | least |\n|---|---|---|\n");
    for service in ["ec2", "dynamodb"] {
        out.push_str(&format!(
            "| {service} | {} | {} |\n",
            aws_totals.get(service).copied().unwrap_or(0),
            least.get(service).copied().unwrap_or(0)
        ));
    }
    for (service, n) in &aws_totals {
        if service != "ec2" && service != "dynamodb" {
            out.push_str(&format!("| {service} | {n} | 0 |\n"));
        }
    }
    out.push_str(&format!(
        "| kubernetes | {kube_total} | {} |\n\nThe least, line by line:\n\n",
        least.get("kubernetes").copied().unwrap_or(0)
    ));
    for (service, call, n, why) in MINIMUM {
        out.push_str(&format!("- {service} `{call}` × {n}: {why}\n"));
    }
    if seen.varied {
        out.push_str("\nThe counts differed between runs; the table shows the first run's.\n");
    } else {
        out.push_str("\nEvery run made exactly these calls.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_labels_leave_names_out() {
        assert_eq!(kube_label("GET", "/api/v1/nodes/ip-1"), "GET nodes/{name}");
        assert_eq!(kube_label("GET", "/api/v1/pods"), "LIST pods");
        assert_eq!(
            kube_label("PATCH", "/api/v1/nodes/ip-1"),
            "PATCH nodes/{name}"
        );
        assert_eq!(
            kube_label("POST", "/api/v1/namespaces/shop/pods/web/eviction"),
            "POST pods/{name}/eviction"
        );
        assert_eq!(
            kube_label("POST", "/api/v1/namespaces/default/events"),
            "POST events"
        );
        assert_eq!(
            kube_label("GET", "/apis/karpenter.sh/v1/nodeclaims/x"),
            "GET nodeclaims/{name}"
        );
    }
}
