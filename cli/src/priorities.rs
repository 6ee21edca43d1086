//! `forewarn priorities`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{ArgGroup, Args, ValueEnum};
use forewarn::app::priorities::{BaseSource, Change, Priorities};
use forewarn::app::settings::{InstanceChoice, Settings};
use forewarn::app::upkeep::Upkeep;
use forewarn::app::wiring::{self, GroupsChoice};
use forewarn::domain::config::Mode;
use forewarn::domain::priorities::HotShare;
use forewarn::ports::Clock;

use crate::StoreArgs;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlOrJson {
    Yaml,
    Json,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["groups", "asg"])))]
pub struct PrioritiesArgs {
    /// What `aws autoscaling describe-auto-scaling-groups --output json` printed.
    #[arg(long, value_name = "FILE")]
    groups: Option<PathBuf>,
    /// Ask Auto Scaling (DescribeAutoScalingGroups, and EC2 DescribeLaunchTemplateVersions)
    /// through the standard AWS configuration.
    #[arg(long)]
    asg: bool,
    /// A file holding the base priorities (the expander's `priorities` YAML). Without it: the
    /// ConfigMap kube-system/forewarn-priority-base (key `priorities`), with --kube.
    #[arg(long, value_name = "FILE")]
    base: Option<PathBuf>,
    /// The cluster whose node groups count (overrides the served clusters).
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// The share of a group's pools that must be unavailable for it to be demoted, e.g. 0.5
    /// or 50% (overrides the priorities setting's hot-share) [default: 1, every pool].
    #[arg(long, value_name = "SHARE", value_parser = HotShare::parse)]
    hot_share: Option<HotShare>,
    /// What to print on standard output: the ConfigMap it would write, as YAML or JSON.
    #[arg(long, value_enum, default_value = "yaml")]
    output: YamlOrJson,
    /// Compare with (and, with --execute, write to) the live cluster's
    /// kube-system/cluster-autoscaler-priority-expander.
    #[arg(long)]
    kube: bool,
    /// Write the ConfigMap when it differs.
    #[arg(long, requires = "kube")]
    execute: bool,
    /// Overwrite an expander ConfigMap forewarn did not create.
    #[arg(long)]
    take_over: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(
    args: PrioritiesArgs,
    mut settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    let cluster = args
        .cluster
        .clone()
        .or_else(|| settings.clusters.lone().flatten().map(|id| id.name.clone()))
        .context("which cluster? give --cluster, or name one among the served clusters")?;
    let mut priority_settings = settings.priorities.settings;
    priority_settings.hot_share = args.hot_share.unwrap_or(priority_settings.hot_share);
    priority_settings.take_over |= args.take_over;
    let base = match &args.base {
        Some(path) => BaseSource::Text {
            text: std::fs::read_to_string(path)
                .with_context(|| format!("reading the base priorities {}", path.display()))?,
            name: format!("file {}", path.display()),
        },
        None if args.kube => BaseSource::ConfigMap,
        None => anyhow::bail!(
            "where are the base priorities? give --base FILE, or --kube to read the ConfigMap kube-system/forewarn-priority-base"
        ),
    };
    // Read only, the store always; the cluster unless --execute.
    settings.mode = Mode::DryRun;
    settings.store = args.store.choice(&settings);
    settings.instances = InstanceChoice::None;
    settings.cluster = crate::cluster_choice(&None, args.kube, &settings);
    settings.webhook = None;
    let services = wiring::services_with_clock(&settings, clock.clone()).await?;
    let choice = (args.groups.clone()).map_or(GroupsChoice::AutoScaling, GroupsChoice::File);
    let groups = match (&choice, services.node_groups.clone()) {
        (GroupsChoice::AutoScaling, Some(asg)) => asg,
        _ => wiring::node_groups(&choice, None, settings.aws).await?,
    };
    let upkeep = Upkeep::of(&*services.handler.fleet.cluster(None).await?);
    let run = Priorities {
        cluster: &cluster,
        place: Default::default(),
        groups: groups.as_ref(),
        store: services.handler.store.as_ref(),
        expander: upkeep.as_ref().map(|u| u.expander.as_ref()),
        base,
        settings: priority_settings,
        write: args.execute,
        // Run with a person's credentials: may create the ConfigMap (the sweeper may not).
        create: true,
    };
    let outcome = run.run(clock.now()).await?;

    let mut out = std::io::stdout().lock();
    if let Some(desired) = &outcome.desired {
        match args.output {
            YamlOrJson::Yaml => write!(out, "{}", desired.yaml())?,
            YamlOrJson::Json => crate::text::json(&mut out, &desired.document())?,
        }
    }
    out.flush().context("writing the output")?;
    for h in &outcome.hot {
        eprintln!(
            "forewarn: {} is hot: {} of {} pools unavailable ({}) until {}",
            h.group,
            h.pools.len(),
            h.of,
            h.pools.join(", "),
            h.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
    }
    let said = match outcome.change {
        Change::NoBase => "no base priorities: nothing to do",
        Change::NotCompared => "not compared with a cluster (add --kube)",
        Change::Unchanged => "the expander ConfigMap is up to date",
        Change::Created => "created the expander ConfigMap",
        Change::Updated => "updated the expander ConfigMap",
        Change::WouldCreate => "would create the expander ConfigMap (add --execute)",
        Change::WouldUpdate => "would update the expander ConfigMap (add --execute)",
        Change::Missing => {
            "the expander ConfigMap is missing: create it with `kubectl create -f infra/k8s/priority-expander.yaml`"
        }
    };
    eprintln!(
        "forewarn: {} node groups of cluster {cluster}, {} hot; {said}",
        outcome.groups.len(),
        outcome.hot.len()
    );
    Ok(ExitCode::SUCCESS)
}
