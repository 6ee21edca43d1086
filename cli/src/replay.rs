//! `forewarn replay`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use clap::Args;
use forewarn::config::Config;
use forewarn::event::{self, DecodeError, Origin, Record};
use forewarn::pipeline::{Outcome, Pipeline, Tally};
use forewarn::pool::ReadOnlyStore;
use std::sync::Arc;

use forewarn::ec2::Ec2Directory;
use forewarn::kube::ClusterAccess;
use forewarn::ports::{InstanceDirectory, NoInstances, NoNodes};
use forewarn::snapshot::{self, SnapshotInstances};
use forewarn::wiring::{Cluster, live_cluster};

use crate::{StoreArgs, TextOrJson, stores, text};

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Files or folders of events.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Output: a readable summary, or one JSON object per event per line.
    #[arg(long, value_enum, default_value = "text")]
    output: TextOrJson,
    /// What `aws ec2 describe-instances --output json` printed: instance types, zones,
    /// lifecycles, cluster tags, private DNS names.
    #[arg(long, value_name = "FILE", conflicts_with = "ec2")]
    instances: Option<PathBuf>,
    /// Ask EC2 (DescribeInstances, one call per batch) through the standard AWS configuration.
    #[arg(long)]
    ec2: bool,
    /// What `kubectl get nodes,pods -A -o json` printed: the nodes to plan against.
    #[arg(long, value_name = "FILE", conflicts_with = "kube")]
    cluster_state: Option<PathBuf>,
    /// Plan against the live cluster (KUBECONFIG / ~/.kube/config, or FOREWARN_EKS_CLUSTER):
    /// read only unless --execute.
    #[arg(long)]
    kube: bool,
    /// The cluster forewarn acts for (overrides FOREWARN_CLUSTER_NAME).
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// Carry the plan out: act on the live cluster (with --kube) and write to the DynamoDB
    /// table (with --table). Without it a live cluster and a table are only read.
    #[arg(long)]
    execute: bool,
    #[command(flatten)]
    store: StoreArgs,
}

/// Every `*.json` directly in a folder, in name order; a file as it is.
fn expand(paths: &[PathBuf]) -> Vec<Result<PathBuf, (PathBuf, String)>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(entries) => {
                    let mut files: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
                        .collect();
                    files.sort();
                    if files.is_empty() {
                        out.push(Err((path.clone(), "no *.json file in this folder".into())));
                    }
                    out.extend(files.into_iter().map(Ok));
                }
                Err(e) => out.push(Err((path.clone(), format!("cannot read the folder: {e}")))),
            }
        } else {
            out.push(Ok(path.clone()));
        }
    }
    out
}

/// Reads and decodes every input; an unreadable or undecodable file becomes one failed record.
pub fn read_records(paths: &[PathBuf]) -> Vec<Record> {
    let failed = |path: &Path, message: String| Record {
        origin: Origin::bare(path.display().to_string()),
        event: Err(DecodeError {
            origin: Origin::bare(path.display().to_string()),
            field: None,
            message,
        }),
    };
    let mut records = Vec::new();
    for entry in expand(paths) {
        let path = match entry {
            Ok(path) => path,
            Err((path, message)) => {
                records.push(failed(&path, message));
                continue;
            }
        };
        let label = path.display().to_string();
        match std::fs::read(&path) {
            Ok(bytes) => match event::decode(&label, &bytes) {
                Ok(decoded) => records.extend(decoded),
                Err(e) => records.push(Record {
                    origin: e.origin.clone(),
                    event: Err(e),
                }),
            },
            Err(e) => records.push(failed(&path, format!("cannot read: {e}"))),
        }
    }
    records
}

pub async fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let mut config = Config::from_env()?;
    if let Some(name) = args.cluster_name.clone() {
        config.cluster_name = Some(name);
    }
    let sdk = if args.ec2 || args.kube {
        Some(aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await)
    } else {
        None
    };
    let instances: Arc<dyn InstanceDirectory> = match (&args.instances, &sdk) {
        (Some(path), _) => Arc::new(SnapshotInstances(snapshot::load_instances(path)?)),
        (None, Some(sdk)) if args.ec2 => Arc::new(Ec2Directory::from_conf(sdk)),
        _ => Arc::new(NoInstances),
    };
    let (nodes, executor): Cluster = match (&args.cluster_state, &sdk) {
        (Some(path), _) => (Arc::new(snapshot::load_cluster_state(path)?), None),
        (None, Some(sdk)) if args.kube => {
            let lookup = |name: &str| std::env::var(name).ok();
            let access = ClusterAccess::from_lookup(lookup);
            live_cluster(&access, &lookup, sdk, &config, !args.execute).await?
        }
        _ => (Arc::new(NoNodes), None),
    };
    let store = stores::open(&args.store).await?;
    let read_only;
    let store_ref: &dyn forewarn::pool::PoolStore = if args.store.table.is_some() && !args.execute {
        read_only = ReadOnlyStore(store.as_ref());
        &read_only
    } else {
        store.as_ref()
    };

    let records = read_records(&args.paths);
    let pipeline = Pipeline {
        config: &config,
        store: store_ref,
        instances: instances.as_ref(),
        nodes: nodes.as_ref(),
        executor: executor.as_deref(),
    };
    let reports = pipeline.process(&records, Utc::now()).await;

    let mut out = std::io::stdout().lock();
    match args.output {
        TextOrJson::Json => {
            for report in &reports {
                serde_json::to_writer(&mut out, report)?;
                writeln!(out)?;
            }
        }
        TextOrJson::Text => {
            let writes = if args.store.table.is_some() && !args.execute {
                format!("{} (read only: add --execute to write)", store.describe())
            } else {
                store.describe()
            };
            text::replay(&mut out, &reports, &writes, Utc::now())?;
        }
    }
    out.flush().context("writing the output")?;
    let tally = Tally::of(&reports);
    for r in reports.iter().filter(|r| r.outcome == Outcome::Failed) {
        eprintln!("forewarn: {}", r.reason.as_deref().unwrap_or("failed"));
    }
    Ok(if tally.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
