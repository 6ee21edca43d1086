//! `forewarn reconcile`: the way back from the command line (see `forewarn::app::wayback`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use forewarn::app::settings::Settings;
use forewarn::app::wayback::{UndoReport, WayBack};
use forewarn::app::wiring;
use forewarn::domain::cordon_record::UndoOutcome;
use forewarn::ports::Clock;

use crate::{ClusterArg, StoreArgs, TextOrJson, text};

#[derive(Args, Debug)]
pub struct ReconcileArgs {
    /// What `kubectl get nodes -o json` printed: the nodes to look at.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "kube",
        required_unless_present = "kube"
    )]
    cluster_state: Option<PathBuf>,
    /// Look at the live cluster (KUBECONFIG / ~/.kube/config): each
    /// node read again and verified just before it would be undone; read only unless --execute.
    #[arg(long)]
    kube: bool,
    /// What `aws ec2 describe-instances --output json` printed: whether an instance that was
    /// to stop runs again, and its pool.
    #[arg(long, value_name = "FILE", conflicts_with = "ec2")]
    instances: Option<PathBuf>,
    /// Ask EC2 (one DescribeInstances) through the standard AWS configuration.
    #[arg(long)]
    ec2: bool,
    /// Undo the cordons (needs --kube). Without it nothing is changed: what would be undone is
    /// printed.
    #[arg(long, requires = "kube")]
    execute: bool,
    /// Output: one line per node, or one JSON object per node per line.
    #[arg(long, value_enum, default_value = "text")]
    output: TextOrJson,
    #[command(flatten)]
    cluster: ClusterArg,
    #[command(flatten)]
    store: StoreArgs,
}

/// Finds the cordons whose reason is gone; with --execute undoes them. Exit code 1 when an
/// undo failed.
pub async fn run(
    args: ReconcileArgs,
    mut settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    if args.execute && !args.kube {
        bail!("--execute changes a live cluster: it needs --kube");
    }
    args.cluster.narrow(&mut settings)?;
    settings.store = args.store.choice(&settings);
    settings.mode = crate::mode(args.execute, args.kube);
    settings.instances = crate::instance_choice(&args.instances, args.ec2);
    settings.cluster = crate::cluster_choice(&args.cluster_state, args.kube, &settings);
    settings.webhook = None;
    let services = wiring::services_with_clock(&settings, clock.clone()).await?;
    let h = &services.handler;
    let cluster = h.fleet.cluster(None).await?;
    let place = match &cluster.id {
        Some(id) => id.place.or(h.fleet.own()),
        None => h.fleet.own().clone(),
    };
    let upkeep = forewarn::app::upkeep::Upkeep::actions_of(&cluster);
    let reports = WayBack {
        nodes: cluster.nodes.as_ref(),
        instances: h.instances.as_ref(),
        store: h.store.as_ref(),
        upkeep: upkeep.as_deref(),
        taint_key: &h.config.taint_key,
        // Status checks (for `impaired` cordons) only from EC2 itself, with --ec2.
        statuses: services.leaving.as_deref().filter(|_| args.ec2),
        place: &place,
    }
    .run(clock.now())
    .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        TextOrJson::Json => text::json_lines(&mut out, &reports)?,
        TextOrJson::Text => {
            if reports.is_empty() {
                writeln!(out, "no cordon of forewarn's has lost its reason")?;
            }
            for r in &reports {
                writeln!(out, "node/{}: {}", r.node, line(r))?;
            }
        }
    }
    out.flush().context("writing the output")?;
    let failed: Vec<&UndoReport> = reports.iter().filter(|r| r.error.is_some()).collect();
    for r in &failed {
        eprintln!(
            "forewarn: node/{}: {}",
            r.node,
            r.error.as_deref().unwrap_or_default()
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn line(r: &UndoReport) -> String {
    let what = match (&r.kept, &r.outcome, &r.error) {
        (Some(kept), _, _) => kept.clone(),
        (_, _, Some(e)) => format!("failed: {e}"),
        (_, Some(UndoOutcome::Undone), _) => "cordon undone".into(),
        (_, Some(UndoOutcome::WouldUndo), _) | (_, None, _) => {
            "would undo the cordon (add --execute with --kube to undo it)".into()
        }
        (_, Some(UndoOutcome::NodeGone), _) => "gone".into(),
        (_, Some(UndoOutcome::Refused { why }), _) => format!("left cordoned: {why}"),
    };
    if r.event_id.is_empty() {
        // A record that does not verify names no event forewarn knows.
        return format!("{what} — {}", r.why);
    }
    format!("{what} — {} (event {})", r.why, r.event_id)
}
