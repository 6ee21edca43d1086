//! `forewarn-bench`: the benchmarks of docs/benchmarks.md. Each subcommand prints a markdown
//! section; `scripts/bench.sh` builds the functions and runs them all.

mod blocks;
mod capacity;
mod coldstart;
mod cpu;
mod e2e;
mod elb;
mod emulator;
mod fleet;
mod mass;
mod plot;
mod policies;
mod queue;
mod server;
mod stats;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "forewarn's benchmarks (see docs/benchmarks.md)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Cold starts of the release bootstraps (and the empty function) against a local Lambda
    /// Runtime API.
    ColdStart {
        /// Starts of each function.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Where `cargo lambda build` put the functions.
        #[arg(long, default_value = "target/lambda")]
        lambda_dir: PathBuf,
    },
    /// One spot warning end to end on moto and the Kubernetes fake, with the calls per service.
    E2e {
        #[arg(long, default_value_t = 10)]
        runs: usize,
    },
    /// A mass interruption against a rate-limited Kubernetes fake.
    Mass(mass::MassArgs),
    /// One deployment serving two clusters: their mass interruptions at once, one API server
    /// down for 60 s, and forewarn's own share of a loaded API server (issue 38).
    Fleet(fleet::FleetArgs),
    /// The capacity a mass interruption costs its workloads, with surge and evicting at once,
    /// on the fake's cluster simulation (scheduler, ReplicaSets, an autoscaler) (issue 27).
    Capacity(capacity::CapacitySettings),
    /// A Capacity Block's expiration warning: its 64 GPU nodes cordoned, every pod evicted with a
    /// grace period that ends before the instances terminate (issue 48).
    Blocks(blocks::BlocksSettings),
    /// Rebalance policies (`cordon`, `cordon-for 30m`, `adaptive`) on a simulated month of one
    /// pool family: capacity-hours cordoned, interruptions drained ahead (issue 25).
    Policies(policies::Settings),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let section = match cli.command {
        Command::ColdStart { runs, lambda_dir } => cold_start(runs, &lambda_dir).await?,
        Command::E2e { runs } => e2e::report(runs).await?,
        Command::Mass(args) => mass::report(&args.settings, args.svg.as_deref()).await?,
        Command::Fleet(args) => fleet::report(&args).await?,
        Command::Capacity(settings) => capacity::report(&settings).await?,
        Command::Blocks(settings) => blocks::report(&settings).await?,
        Command::Policies(settings) => policies::report(&settings)?,
    };
    println!("{section}");
    Ok(())
}

async fn cold_start(runs: usize, lambda_dir: &std::path::Path) -> anyhow::Result<String> {
    let root = forewarn_tests::moto::workspace_root();
    let lambda_dir = if lambda_dir.is_absolute() {
        lambda_dir.to_path_buf()
    } else {
        root.join(lambda_dir)
    };
    // The sweeper asks EC2 for the cluster's leaving instances: moto answers.
    let moto = forewarn_tests::moto::MotoServer::try_start()?;
    // moto loads its EC2 backend on the first EC2 request (seconds): not the sweeper's time.
    aws_sdk_ec2::Client::new(&moto.sdk_config())
        .describe_instances()
        .send()
        .await?;
    let state = |file: &str| root.join("events/state").join(file).display().to_string();
    let captured = vec![
        (
            "FOREWARN_INSTANCES_FILE".to_string(),
            state("instances.json"),
        ),
        (
            "FOREWARN_CLUSTER_STATE_FILE".to_string(),
            state("cluster.json"),
        ),
        ("FOREWARN_CLUSTERS".to_string(), "demo".to_string()),
        ("FOREWARN_DRY_RUN".to_string(), "true".to_string()),
        ("RUST_LOG".to_string(), "info".to_string()),
    ];
    let function = |name: &'static str, env: Vec<(String, String)>, event: Vec<u8>, note| {
        coldstart::Function {
            name,
            label: format!("`{name}`"),
            bootstrap: lambda_dir.join(name).join("bootstrap"),
            zip: lambda_dir.join(name).join("bootstrap.zip"),
            env,
            event,
            event_note: note,
        }
    };
    let mut sweeper_env = captured.clone();
    sweeper_env.push(("AWS_ENDPOINT_URL".into(), moto.endpoint()));
    // This Debian machine keeps its CA certificates twice: one bundle file and a directory of
    // ~290 files, and the TLS roots are read from both unless SSL_CERT_FILE names the one file
    // (what Lambda's Amazon Linux has is a bundle file). The handler once more with only it:
    let mut bundle_only = captured.clone();
    bundle_only.push((
        "SSL_CERT_FILE".to_string(),
        "/etc/ssl/certs/ca-certificates.crt".to_string(),
    ));
    let fake = kube_fake::KubeFake::start().await;
    let state_dir = tempfile::Builder::new()
        .prefix("forewarn-bench-")
        .tempdir()?;
    let deployed = deployed_env(&moto, &fake, state_dir.path()).await?;
    let handler_event = std::fs::read(root.join("events/17-sqs-batch.json"))?;
    let mut handler_deployed = function(
        "interruption-handler",
        deployed.clone(),
        handler_event.clone(),
        "the same event, deployed-like: the stack's variables, EC2 and the pool table in moto, the cluster (the API fake on loopback) through a kubeconfig, acting",
    );
    handler_deployed.label = "`interruption-handler` (deployed-like)".to_string();
    let mut handler_bundle_only = function(
        "interruption-handler",
        bundle_only,
        handler_event.clone(),
        "the same, with `SSL_CERT_FILE` naming the CA bundle file (no scan of `/etc/ssl/certs/`)",
    );
    handler_bundle_only.label = "`interruption-handler` (CA bundle file only)".to_string();
    let functions = vec![
        function("empty-function", Vec::new(), b"{}".to_vec(), "`{}`"),
        function(
            "clients-function",
            deployed,
            b"{}".to_vec(),
            "`{}`, with the deployed-like handler's environment",
        ),
        function(
            "interruption-handler",
            captured,
            handler_event,
            "`events/17-sqs-batch.json` (an SQS batch of spot warnings), planned on the captured state in `events/state/` (dry run)",
        ),
        function(
            "pool-sweeper",
            sweeper_env,
            br#"{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}"#.to_vec(),
            "a scheduled event: one sweep (leaving instances from moto's EC2, one round trip to it; nodes from the captured state)",
        ),
        handler_deployed,
        handler_bundle_only,
    ];
    let report = coldstart::report(&functions, runs).await;
    drop(fake);
    report
}

/// The deployed-like environment of the cold start (the handler's, and the SDK floor's): the
/// stack's variables (the pool table and the other services in moto, acting), the cluster
/// reached through a kubeconfig in `dir` naming the fake on loopback, as EKS's endpoint would be.
async fn deployed_env(
    moto: &forewarn_tests::moto::MotoServer,
    fake: &kube_fake::KubeFake,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<(String, String)>> {
    let table =
        forewarn_tests::moto::create_pool_table(&moto.sdk_config(), "forewarn-pools").await?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: demo\n  cluster:\n    server: {}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: demo\n  context:\n    cluster: demo\n    user: u\n\
             current-context: demo\n",
            fake.url()
        ),
    )?;
    let secret = forewarn_tests::moto::key_secret_of(&table);
    Ok([
        ("FOREWARN_CLUSTERS", "demo"),
        ("FOREWARN_TABLE", table.as_str()),
        ("FOREWARN_KEY_SECRET", secret.as_str()),
        ("FOREWARN_ACCOUNT_ID", "123456789012"),
        ("FOREWARN_ENVIRONMENTS", "8"),
        ("FOREWARN_DRY_RUN", "false"),
        ("AWS_ENDPOINT_URL", moto.endpoint().as_str()),
        ("KUBECONFIG", &kubeconfig.display().to_string()),
        ("RUST_LOG", "info"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect())
}
