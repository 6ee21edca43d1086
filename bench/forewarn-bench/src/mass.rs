//! A mass interruption: spot warnings for every node of a large cluster, arriving as SQS
//! batches handled by concurrent invocations (as Lambda scales out), against the Kubernetes
//! fake with latency and a request-rate limit. Time until every node is cordoned and until
//! every drain ends, next to the bound the rate limit sets; peak memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;
use forewarn::adapters::embedded::EmbeddedStore;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor, KubeNodeDirectory};
use forewarn::adapters::snapshot::SnapshotInstances;
use forewarn::app::handler::Handler;
use forewarn::domain::config::Config;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::pool::CapacityType;
use forewarn::domain::report::Outcome;
use futures::StreamExt;
use kube_fake::KubeFake;
use tokio::time::Instant;

use crate::e2e::{CLUSTER, kube_counts, sqs_batch};
use crate::stats::{mib_of_kb, proc_status_kb, rate_bound, ratio, secs};
use forewarn::domain::fixtures::{app_pod as pod, ec2_node as node};

#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// Nodes (instances) interrupted at once.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Evictable (ReplicaSet) pods per node.
    #[arg(long, default_value_t = 2)]
    pub pods_per_node: usize,
    /// Messages per SQS batch.
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// Invocations in flight at once (Lambda's scale-out).
    #[arg(long, default_value_t = 10)]
    pub invocations: usize,
    /// The fake's latency per request, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
    /// The fake's rate limit (requests per second) and burst.
    #[arg(long, default_value_t = 200.0)]
    pub server_rps: f64,
    #[arg(long, default_value_t = 50)]
    pub server_burst: u32,
    /// The client-side limit (FOREWARN_KUBE_QPS / FOREWARN_KUBE_BURST); 0: none.
    #[arg(long, default_value_t = 200.0)]
    pub client_qps: f64,
    #[arg(long, default_value_t = 20)]
    pub client_burst: u32,
}

fn instance_id(n: usize) -> String {
    format!("i-0b{n:015x}")
}

fn node_name(n: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.ec2.internal",
        n / 65536 % 256,
        n / 256 % 256,
        n % 256
    )
}

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// The least Kubernetes requests one node's warning needs (see the end-to-end table): find
/// the node, cordon, list its pods, one eviction per pod, one look that they are gone, three
/// Events (interrupted, cordoned, drained).
pub fn least_requests_per_node(pods: usize) -> u64 {
    7 + pods as u64
}

pub async fn report(s: &Settings) -> anyhow::Result<String> {
    let fake = Arc::new(KubeFake::start().await);
    let mut instances = BTreeMap::new();
    let ids: Vec<String> = (0..s.nodes).map(instance_id).collect();
    for (n, id) in ids.iter().enumerate() {
        let zone = ZONES[n % ZONES.len()];
        let name = node_name(n);
        fake.insert(node(&name, id, zone));
        for p in 0..s.pods_per_node {
            fake.insert(pod(&format!("w{n}-{p}"), &name, "ReplicaSet"));
        }
        instances.insert(
            id.clone(),
            InstanceFacts {
                instance_id: id.clone(),
                instance_type: Some(["m5.large", "c5.large", "r5.large"][n % 3].to_string()),
                zone: Some(zone.to_string()),
                capacity_type: Some(CapacityType::Spot),
                private_dns: Some(name),
                state: Some("running".into()),
                state_reason: None,
                launch_time: Some(chrono::Utc::now() - chrono::Duration::hours(3)),
                tags: BTreeMap::from([(
                    format!("kubernetes.io/cluster/{CLUSTER}"),
                    "owned".into(),
                )]),
            },
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("forewarn-bench-mass-")
        .tempdir()?;
    let config = Config {
        cluster_name: Some(CLUSTER.to_string()),
        ..Config::default()
    };
    let clients = ClusterClient::new(fake.client());
    let handler = Arc::new(Handler {
        mode: forewarn::domain::config::Mode::Act,
        notifier: None,
        redelivery: None,
        drain_passes: None,
        config: config.clone(),
        store: Arc::new(EmbeddedStore::open(dir.path())?),
        instances: Arc::new(SnapshotInstances(instances)),
        nodes: Arc::new(KubeNodeDirectory::new(clients.clone())),
        executor: Some(Arc::new(KubeExecutor::new(clients, &config))),
        concurrency: s.batch,
        safety_margin: Duration::from_secs(3),
    });
    let batches: Vec<serde_json::Value> = ids
        .chunks(s.batch.max(1))
        .enumerate()
        .map(|(b, chunk)| {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            sqs_batch(&refs, &format!("mass{b}"))
        })
        .collect();

    fake.set_latency(Duration::from_millis(s.latency_ms));
    fake.set_rate_limit(s.server_rps, s.server_burst);
    if s.client_qps > 0.0 {
        ClusterClient::set_rate_limit(s.client_qps, s.client_burst);
    } else {
        ClusterClient::clear_rate_limit();
    }
    fake.clear_requests();
    let rss_before = proc_status_kb(None, "VmRSS").unwrap_or_default();

    // Watches the nodes: the moment the last one is cordoned (resolution: the poll period).
    const POLL: Duration = Duration::from_millis(25);
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let watcher = tokio::spawn({
        let fake_nodes = Arc::clone(&fake);
        let done = Arc::clone(&done);
        let total = s.nodes;
        async move {
            loop {
                let cordoned = fake_nodes
                    .list("v1", "Node")
                    .iter()
                    .filter(|n| n["spec"]["unschedulable"] == serde_json::Value::Bool(true))
                    .count();
                if cordoned >= total {
                    return Some(start.elapsed());
                }
                if done.load(Ordering::Relaxed) {
                    return None;
                }
                tokio::time::sleep(POLL).await;
            }
        }
    });
    let results: Vec<_> = futures::stream::iter(batches)
        .map(|batch| {
            let handler = Arc::clone(&handler);
            async move {
                let deadline = Instant::now() + Duration::from_secs(150);
                handler.invoke(batch, Some(deadline)).await
            }
        })
        .buffer_unordered(s.invocations.max(1))
        .collect()
        .await;
    let drained = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let cordoned = watcher.await?;
    let peak = proc_status_kb(None, "VmHWM").unwrap_or_default();
    ClusterClient::clear_rate_limit();

    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        match r {
            Ok(inv) => {
                for rep in &inv.reports {
                    *outcomes.entry(format!("{:?}", rep.outcome)).or_insert(0) += 1;
                }
            }
            Err(e) => bail!("an invocation failed: {e}"),
        }
    }
    let acted = outcomes
        .get(&format!("{:?}", Outcome::Acted))
        .copied()
        .unwrap_or(0);
    let counters = fake.counters();
    let by_kind = kube_counts(&fake.requests());
    let least = least_requests_per_node(s.pods_per_node) * s.nodes as u64;
    let drain_bound = rate_bound(least, s.server_rps, u64::from(s.server_burst));
    let cordon_bound = rate_bound(2 * s.nodes as u64, s.server_rps, u64::from(s.server_burst));
    let actual_bound = rate_bound(
        counters.requests - counters.rate_limited,
        s.server_rps,
        u64::from(s.server_burst),
    );
    let client = if s.client_qps > 0.0 {
        format!("{} requests/s, burst {}", s.client_qps, s.client_burst)
    } else {
        "none".into()
    };
    let mut out = format!(
        "### Mass interruption: {} spot warnings in batches of {}, {} invocations at once, client-side limit {}\n\n\
         The fake: {} ms latency per request, {} requests/s with a burst of {} (429 + `Retry-After: 1` above it). \
         Client-side limit (`FOREWARN_KUBE_QPS`/`FOREWARN_KUBE_BURST`, one bucket for the process): {}. {} pods to evict ({} per node).\n\n\
         | measure | time | bound set by the rate limit | × bound |\n|---|---|---|---|\n",
        s.nodes,
        s.batch,
        s.invocations,
        client,
        s.latency_ms,
        s.server_rps,
        s.server_burst,
        client,
        s.nodes * s.pods_per_node,
        s.pods_per_node,
    );
    match cordoned {
        Some(c) => out.push_str(&format!(
            "| every node cordoned | {} | {} (2 requests per node: find, patch) | {} |\n",
            secs(c),
            secs(cordon_bound),
            ratio(c, cordon_bound)
        )),
        None => out.push_str("| every node cordoned | not all were | | |\n"),
    }
    out.push_str(&format!(
        "| every drain ended | {} | {} ({} requests per node at least: {} in all) | {} |\n",
        secs(drained),
        secs(drain_bound),
        least_requests_per_node(s.pods_per_node),
        least,
        ratio(drained, drain_bound)
    ));
    out.push_str(&format!(
        "| every drain ended, against the requests actually made | {} | {} ({} requests answered without a rate-limit 429) | {} |\n",
        secs(drained),
        secs(actual_bound),
        counters.requests - counters.rate_limited,
        ratio(drained, actual_bound)
    ));
    out.push_str(&format!(
        "\nOutcomes: {}. Requests to the fake: {} in all, {} answered 429 by its rate limit.\n\n\
         Requests by kind: {}.\n\n\
         Memory of the bench process (the handler, {} invocations at once and the Kubernetes fake with {} nodes and {} pods in it): \
         resident before the warnings {}, peak (VmHWM) {}.\n",
        outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        counters.requests,
        counters.rate_limited,
        by_kind
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        s.invocations,
        s.nodes,
        s.nodes * s.pods_per_node,
        mib_of_kb(rss_before),
        mib_of_kb(peak),
    ));
    if acted != s.nodes {
        out.push_str(&format!(
            "\n**Only {acted} of {} warnings were acted on.**\n",
            s.nodes
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_are_unique_and_well_formed() {
        assert_eq!(instance_id(1), "i-0b000000000000001");
        assert_eq!(instance_id(1).len(), 19);
        assert_eq!(node_name(258), "ip-10-0-1-2.ec2.internal");
        assert_eq!(least_requests_per_node(2), 9);
    }
}
