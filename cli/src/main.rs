//! `forewarn`: replay interruption events offline or against live endpoints, query the pool table,
//! audit the cluster's spot readiness, deploy forewarn.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use forewarn::app::settings::{
    ClusterChoice, ClusterSelection, InstanceChoice, Settings, StoreChoice,
};
use forewarn::domain::clusters::{self, ClusterId, Place};
use forewarn::domain::config::Mode;

mod audit;
mod check;
mod deploy;
mod key;
mod migrate;
mod pools;
mod priorities;
mod reconcile;
#[cfg(test)]
mod reference;
mod replay;
mod text;

/// forewarn: EC2 interruption handling for Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "forewarn", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The time the command runs at (RFC 3339), instead of the wall clock: the samples' events
    /// of 2026-11-20 replayed, listed or audited "a minute later" decide as they did then
    /// (windows, deadlines, pool and ledger expiries). The clock runs on from it.
    #[arg(long, global = true, value_name = "TIME")]
    now: Option<chrono::DateTime<chrono::Utc>>,
}

/// The command's clock: the wall clock, or one that starts at `--now`.
fn clock(now: Option<chrono::DateTime<chrono::Utc>>) -> std::sync::Arc<dyn forewarn::ports::Clock> {
    use forewarn::adapters::clock::SystemClock;
    match now {
        Some(now) => std::sync::Arc::new(SystemClock::starting_at(now)),
        None => SystemClock::shared(),
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode and plan interruption events from files, record their pools.
    ///
    /// PATH is a file or a folder (every *.json directly in it, in name order). Each file holds a
    /// bare EventBridge event, an SQS event as Lambda receives it, or a JSON array of events.
    /// Without --execute and without --kube or --table, the pools are recorded in the embedded
    /// store and nothing else changes; with --kube or --table and without --execute, nothing is
    /// written at all (a dry run): a live cluster (--kube)
    /// and a DynamoDB table (--table) are only read.
    Replay(replay::ReplayArgs),
    /// List capacity pools recorded as unavailable, newest first.
    Pools(pools::PoolsArgs),
    /// Will an interruption hurt? A spot-readiness report with the fixes to apply.
    ///
    /// Reads the workloads (Deployments, StatefulSets, ReplicaSets, bare pods), their
    /// PodDisruptionBudgets, PriorityClasses and nodes, live (--kube) or from a capture
    /// (--cluster-state), and the pool history (--table or the embedded store). Exit code: 0,
    /// 2 when a finding at or above --fail-on exists, 1 for errors.
    Audit(audit::AuditArgs),
    /// Prove on the live cluster that every write forewarn makes would be admitted.
    ///
    /// In each cluster, as each of forewarn's groups (impersonated: your identity needs the
    /// `impersonate` verb), sends every kind of write forewarn makes as a server-side dry run
    /// (dryRun=All: nothing is stored) — the cordon of a real worker node, an eviction of a real
    /// pod, its placeholder, a pod Event and a node Event, the way back's patch, the priority
    /// expander's update — and prints one line each: admitted, or refused with the server's
    /// message and the admission that refused it. Exit code: 0, 2 when a write the
    /// configuration uses is refused, 1 for errors.
    Check(check::CheckArgs),
    /// Write the Cluster Autoscaler's priority expander from base priorities and the pool table.
    ///
    /// Node groups (Auto Scaling groups tagged for the Cluster Autoscaler and this cluster) whose
    /// pools are unavailable are moved below the lowest base priority until their pools' windows
    /// end. Prints the ConfigMap it would write; with --kube compares it with the cluster's, and
    /// with --execute writes it.
    Priorities(priorities::PrioritiesArgs),
    /// The way back: undo forewarn's cordons whose reason is gone.
    ///
    /// Reads every node that carries forewarn's taint and its record (the annotation
    /// forewarn.io/cordon): a `cordon-for` whose time has passed, an instance that was to stop
    /// and runs again. A cordon is kept while its instance's pool is marked unavailable in the
    /// pool store (--table or the embedded store). Without --execute nothing is changed: it
    /// prints what it would undo. A node cordoned by someone else is never touched.
    Reconcile(reconcile::ReconcileArgs),
    /// The continuation key drains and cordon records are signed with: `forewarn key rotate`.
    Key(key::KeyArgs),
    /// Move from aws-node-termination-handler: its Helm values as a forewarn policy.
    ///
    /// Prints on stdout a policy (YAML) for `forewarn replay --policy`, the functions' policy file or
    /// the policy ConfigMap, keeping NTH's meaning per event kind; on stderr, the variables to
    /// set for the keys that are settings rather than policy, and every key it cannot carry
    /// over, named, with why.
    Migrate(migrate::MigrateArgs),
    /// Deploy forewarn: build, the stack, both functions, their wiring, the Kubernetes manifests.
    ///
    /// Run in the repository. Builds both functions with cargo-lambda, creates or updates the
    /// CloudFormation stack (infra/forewarn.yaml), deploys the functions with `cargo lambda
    /// deploy` from the stack's outputs, updates the stack with FunctionsDeployed=true, and
    /// applies infra/k8s (--kube) or prints how to. Safe to rerun: a rerun is an upgrade.
    /// --dry-run prints every step and changes nothing.
    Deploy(deploy::DeployArgs),
}

/// Where pools are recorded. A flag not given takes its variable's value, through the settings
/// (which read every variable).
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// DynamoDB pool table (endpoint, region and credentials from the standard AWS
    /// configuration, e.g. AWS_ENDPOINT_URL_DYNAMODB) [default: FOREWARN_TABLE]. Without
    /// either: the embedded store.
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
    /// Folder of the embedded pool store [default: FOREWARN_STATE_DIR, else
    /// $XDG_STATE_HOME/forewarn, else ~/.local/state/forewarn].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Where instance facts come from, by `--instances FILE` and `--ec2` (a file wins; neither:
/// none), for the commands that take both.
pub fn instance_choice(file: &Option<PathBuf>, ec2: bool) -> InstanceChoice {
    match (file, ec2) {
        (Some(path), _) => InstanceChoice::File(path.clone()),
        (None, true) => InstanceChoice::Ec2,
        (None, false) => InstanceChoice::None,
    }
}

/// Where the cluster is read from, by `--cluster-state FILE` and `--kube` (a file wins; neither:
/// none), for the commands that take both.
pub fn cluster_choice(file: &Option<PathBuf>, kube: bool, settings: &Settings) -> ClusterChoice {
    match (file, kube) {
        (Some(path), _) => ClusterChoice::Snapshot(path.clone()),
        (None, true) => ClusterChoice::Live(settings.cluster_access.clone()),
        (None, false) => ClusterChoice::None,
    }
}

/// A run's mode: `--execute` (`execute`) acts; reading something `live` (a cluster, a table)
/// without it is a dry run (read, never written); otherwise a plan.
pub fn mode(execute: bool, live: bool) -> Mode {
    match (execute, live) {
        (true, _) => Mode::Act,
        (false, true) => Mode::DryRun,
        (false, false) => Mode::Plan,
    }
}

/// `--cluster CLUSTER`: which served cluster a command reads (or acts on) live.
#[derive(Args, Debug, Clone, Default)]
pub struct ClusterArg {
    /// The cluster, when the environment serves several or to pick one:
    /// NAME, ACCOUNT/NAME or ACCOUNT/REGION/NAME (a cluster is its account, region and name);
    /// the kubeconfig context of that name when there is one, else the EKS cluster [default:
    /// the one cluster the environment serves]
    #[arg(long, value_name = "CLUSTER", value_parser = parse_cluster)]
    pub cluster: Option<ClusterId>,
}

/// `--cluster`'s value: `name`, `account/name` or `account/region/name`.
pub fn parse_cluster(v: &str) -> Result<ClusterId, String> {
    ClusterId::parse(v).map_err(|e| format!("{e}; a cluster is {}", clusters::FORMS))
}

impl ClusterArg {
    /// Narrows `settings` to the one cluster the command works on: `--cluster` (reached
    /// through the kubeconfig context of that name, else as the settings reach a named
    /// cluster), else the lone cluster the settings serve; several served and no `--cluster`
    /// is an error.
    pub fn narrow(&self, settings: &mut Settings) -> anyhow::Result<()> {
        let id = match (&self.cluster, settings.clusters.lone()) {
            (Some(id), _) => id.clone(),
            (None, Some(_)) => return Ok(()),
            (None, None) => anyhow::bail!(
                "the environment serves several clusters: say which one with --cluster CLUSTER"
            ),
        };
        settings.cluster_access = access(settings, &id);
        settings.clusters = ClusterSelection::Named(vec![id]);
        Ok(())
    }
}

/// How the command reaches the cluster `id`: the kubeconfig context written as it is, when
/// there is one; else as the settings reach it (seen from the own account, its region the
/// AWS configuration's).
pub fn access(settings: &Settings, id: &ClusterId) -> forewarn::adapters::kube::ClusterAccess {
    let written = id.to_string();
    if forewarn::adapters::kube::has_context(&written) {
        return forewarn::adapters::kube::ClusterAccess::Context(written);
    }
    let own = Place {
        account: settings.accounts.own.clone(),
        region: None,
    };
    settings.access_of(id, &own)
}

impl StoreArgs {
    /// The store these arguments select ([`StoreArgs::choice`]), for reading (`forewarn pools`,
    /// `forewarn audit`).
    pub async fn open(
        &self,
        settings: &Settings,
        clock: std::sync::Arc<dyn forewarn::ports::Clock>,
    ) -> anyhow::Result<std::sync::Arc<dyn forewarn::ports::PoolStore>> {
        let choice = self.choice(settings);
        Ok(forewarn::app::wiring::store(&choice, Mode::DryRun, None, settings.aws, clock).await?)
    }

    /// The store these arguments select, the settings filling in the flags not given: the
    /// table (`--table`, else `FOREWARN_TABLE`), else the embedded store in `--state-dir`, else
    /// the settings' folder.
    pub fn choice(&self, settings: &Settings) -> StoreChoice {
        let (table, key_secret) = match &settings.store {
            StoreChoice::Dynamo { table, key_secret } => (Some(table.clone()), key_secret.clone()),
            StoreChoice::Embedded { .. } => (None, None),
        };
        match self.table.clone().or(table) {
            Some(table) => StoreChoice::Dynamo { table, key_secret },
            None => StoreChoice::Embedded {
                dir: self
                    .state_dir
                    .clone()
                    .unwrap_or_else(|| settings.state_dir.clone()),
            },
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextOrJson {
    Text,
    Json,
}

/// The command: its clap definition, its long help ending with the settings' summary (made from
/// their one declaration, as the configuration page is).
fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_long_help(forewarn::app::settings::summary())
}

#[tokio::main]
async fn main() -> ExitCode {
    use clap::FromArgMatches;
    // Usage errors exit with 1 (2 is `audit --fail-on`'s); help and version with 0.
    let parsed = command()
        .try_get_matches()
        .and_then(|mut m| Cli::from_arg_matches_mut(&mut m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("forewarn: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Plain-text logs on stderr, filtered by the settings' `RUST_LOG`, else `warn`.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(forewarn::app::telemetry::filter(&settings, "warn"))
        .with_writer(std::io::stderr)
        .try_init();
    let clock = clock(cli.now);
    let result = match cli.command {
        Command::Replay(args) => replay::run(args, settings, clock).await,
        Command::Pools(args) => pools::run(args, settings, clock).await,
        Command::Audit(args) => audit::run(args, settings, clock).await,
        Command::Check(args) => check::run(args, settings, clock).await,
        Command::Priorities(args) => priorities::run(args, settings, clock).await,
        Command::Reconcile(args) => reconcile::run(args, settings, clock).await,
        Command::Key(args) => key::run(args, settings, clock).await,
        Command::Migrate(args) => migrate::run(args),
        Command::Deploy(args) => deploy::run(args, settings, clock).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("forewarn: {e:#}");
            ExitCode::FAILURE
        }
    }
}
