//! `forewarn replay`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;
use forewarn::app::settings::{Settings, StoreChoice};
use forewarn::app::wiring;
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::event::{DecodeError, Origin};
use forewarn::domain::inbound::{self, Record};
use forewarn::domain::report::{Outcome, Tally};

use forewarn::ports::Clock;

use crate::{StoreArgs, TextOrJson, text};

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
    /// Plan against the live cluster (KUBECONFIG / ~/.kube/config):
    /// read only unless --execute.
    #[arg(long)]
    kube: bool,
    /// The cluster forewarn acts for (overrides the served clusters): an instance whose tags
    /// name only other clusters is never touched.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// The policy per node group (YAML; overrides the settings' policy file and, with --kube, the
    /// cluster's ConfigMap forewarn/forewarn-policy). A bad policy is an error naming the
    /// field: nothing is replayed.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
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
/// Reads the records of `paths`; `received` dates an event whose `time` is empty (after an SQS
/// message's `SentTimestamp`).
pub fn read_records(paths: &[PathBuf], received: DateTime<Utc>) -> Vec<Record> {
    let failed = |path: &Path, message: String| {
        let origin = Origin::bare(path.display().to_string());
        let error = DecodeError {
            origin: origin.clone(),
            field: None,
            message,
        };
        Record::new(origin, Err(error))
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
            Ok(bytes) => match inbound::decode(&label, &bytes, received) {
                Ok(decoded) => records.extend(decoded),
                Err(e) => records.push(Record::new(e.origin.clone(), Err(e))),
            },
            Err(e) => records.push(failed(&path, format!("cannot read: {e}"))),
        }
    }
    records
}

/// Replays `args.paths` with the process's `settings`, which the flags override.
pub async fn run(
    args: ReplayArgs,
    mut settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    if let Some(name) = args.cluster.clone() {
        settings.config.cluster = Some(ClusterId::at(&Place::default(), &name));
    }
    if let Some(path) = &args.policy {
        settings.config.policy = forewarn::app::settings::read_policy(path)?;
    }
    settings.store = args.store.choice(&settings);
    // A DynamoDB table is read live: without --execute, never written.
    let table = matches!(settings.store, StoreChoice::Dynamo { .. });
    settings.mode = crate::mode(args.execute, args.kube || table);
    settings.instances = crate::instance_choice(&args.instances, args.ec2);
    settings.cluster = crate::cluster_choice(&args.cluster_state, args.kube, &settings);
    // Replay reports what it did itself: no webhook. Its drains' passes run in process: a
    // replayed SQS record names a queue, but a replay never sends anything to it.
    settings.webhook = None;
    settings.drain_pass_interval = None;
    let mut services = wiring::services_with_clock(&settings, clock.clone()).await?;
    // A fleet of one cluster answers it for no name (a fleet of named clusters refuses).
    if args.policy.is_some()
        && let Ok(lone) = services.handler.fleet.cluster(None).await
    {
        // --policy wins over the cluster's ConfigMap.
        let cluster = forewarn::app::fleet::Cluster {
            policies: None,
            ..(*lone).clone()
        };
        services.handler.fleet = forewarn::app::fleet::Fleet::one(cluster);
    }

    let records = read_records(&args.paths, clock.now());
    let handler = &services.handler;
    let reports = handler.run(&records, None).await;

    let mut out = std::io::stdout().lock();
    match args.output {
        TextOrJson::Json => text::json_lines(&mut out, &reports)?,
        TextOrJson::Text => {
            let location = handler.store.location();
            let writes = match settings.mode.writes_store() {
                true => location,
                false => format!("{location} (read only: add --execute to write)"),
            };
            text::replay(&mut out, &reports, &writes, clock.now())?;
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
