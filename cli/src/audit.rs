//! `forewarn audit`: will an interruption hurt? The spot-readiness report, with the
//! PodDisruptionBudgets to add.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::Duration;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use forewarn::app::settings::Settings;
use forewarn::app::wiring;
use forewarn::domain::audit::{
    self, AuditReport, Counts, Level, SuggestedBudget, Summary, budget_yaml, budgets_yaml,
    hot_pools, suggested_budgets,
};
use forewarn::domain::pool::PoolQuery;
use forewarn::ports::Clock;

use crate::{ClusterArg, StoreArgs};

/// The exit code when a finding at or above `--fail-on` exists.
pub const EXIT_FINDINGS: u8 = 2;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditOutput {
    /// Findings by workload, then the summary.
    Text,
    /// One JSON object per finding per line, then one summary object (`"summary": true`).
    Json,
    /// The PodDisruptionBudgets to add, as multi-document YAML for `kubectl apply -f -`.
    Yaml,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Read the live cluster (KUBECONFIG / ~/.kube/config), read only:
    /// the permissions are in infra/k8s/audit-rbac.yaml.
    #[arg(
        long,
        conflicts_with = "cluster_state",
        required_unless_present = "cluster_state"
    )]
    kube: bool,
    /// What `kubectl get deploy,sts,rs,pods,pdb,priorityclasses,nodes -A -o json` printed.
    #[arg(long, value_name = "FILE")]
    cluster_state: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    output: AuditOutput,
    /// Also write each PodDisruptionBudget to add to DIR/<namespace>.<name>.yaml.
    #[arg(long, value_name = "DIR")]
    fix: Option<PathBuf>,
    /// Exit with 2 when a finding of this level or worse exists.
    #[arg(long, value_name = "LEVEL", value_parser = PossibleValuesParser::new(["error", "warning", "info"]).try_map(|s| s.parse::<Level>()))]
    fail_on: Option<Level>,
    /// Pools interrupted within this many days count as hot.
    #[arg(long, value_name = "DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=3650))]
    hot_days: u32,
    #[command(flatten)]
    cluster: ClusterArg,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(
    args: AuditArgs,
    mut settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    if args.kube {
        args.cluster.narrow(&mut settings)?;
    }
    let choice = crate::cluster_choice(&args.cluster_state, args.kube, &settings);
    let source = wiring::workload_source(&choice, settings.aws).await?;
    let view = source
        .workloads()
        .await
        .context("reading the cluster's workloads")?;
    let store = args.store.open(&settings, clock.clone()).await?;
    let now = clock.now();
    let query = PoolQuery {
        include_available: true,
        ..PoolQuery::default()
    };
    let records = store
        .pools(&query, now)
        .await
        .with_context(|| format!("reading the pool history from {}", store.location()))?;
    let hot = hot_pools(&records, now, Duration::days(i64::from(args.hot_days)));
    let report = audit::audit(&view, &settings.config, &hot);
    let budgets = suggested_budgets(&view);

    if let Some(dir) = &args.fix {
        write_fixes(dir, &budgets)?;
    }
    let mut out = std::io::stdout().lock();
    match args.output {
        AuditOutput::Text => text(&mut out, &report, &budgets, args.fix.is_some())?,
        AuditOutput::Json => {
            crate::text::json_lines(&mut out, &report.findings)?;
            let summary = SummaryJson {
                summary: true,
                numbers: &report.summary,
                survival: (report.summary.survival() * 1000.0).round() / 1000.0,
                budgets_to_add: budgets.len(),
            };
            crate::text::json_lines(&mut out, &[summary])?;
        }
        AuditOutput::Yaml => {
            let s = &report.summary;
            writeln!(
                out,
                "# forewarn audit: {} of {} workloads on spot, {}; {} PodDisruptionBudgets to add",
                s.checked,
                s.workloads,
                counts(&s.findings),
                budgets.len()
            )?;
            write!(out, "{}", budgets_yaml(&budgets))?;
        }
    }
    out.flush()?;
    let failed = args
        .fail_on
        .is_some_and(|fail_on| report.worst().is_some_and(|w| w >= fail_on));
    Ok(if failed {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

/// The last line of `--output json`.
#[derive(serde::Serialize)]
struct SummaryJson<'a> {
    summary: bool,
    #[serde(flatten)]
    numbers: &'a Summary,
    /// `surviving_replicas / spot_replicas`, rounded to 3 decimals.
    survival: f64,
    budgets_to_add: usize,
}

/// `1 errors, 2 warnings, 0 infos`.
fn counts(c: &Counts) -> String {
    format!(
        "{} errors, {} warnings, {} infos",
        c.error, c.warning, c.info
    )
}

fn write_fixes(dir: &std::path::Path, budgets: &[SuggestedBudget]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--fix {}: cannot create the folder", dir.display()))?;
    for b in budgets {
        let path = dir.join(format!("{}.{}.yaml", b.namespace, b.name));
        std::fs::write(&path, budget_yaml(b))
            .with_context(|| format!("--fix: cannot write {}", path.display()))?;
    }
    Ok(())
}

fn text(
    out: &mut impl Write,
    report: &AuditReport,
    budgets: &[SuggestedBudget],
    fixed: bool,
) -> std::io::Result<()> {
    for group in report.findings.chunk_by(|a, b| a.workload == b.workload) {
        writeln!(out, "{}", group[0].workload)?;
        for f in group {
            let (level, code) = (f.level.as_str(), f.code.as_str());
            writeln!(out, "  {level:<7}  {code:<19}  {}", f.message)?;
        }
        writeln!(out)?;
    }
    let s = &report.summary;
    let (workloads, checked, counts) = (s.workloads, s.checked, counts(&s.findings));
    writeln!(
        out,
        "{workloads} workloads, {checked} with pods on spot capacity: {counts}"
    )?;
    let (survivors, spot, share) = (s.surviving_replicas, s.spot_replicas, s.survival() * 100.0);
    writeln!(
        out,
        "{survivors} of {spot} spot-hosted replicas ({share:.0}%) would survive the interruption \
         of their pool"
    )?;
    if !budgets.is_empty() {
        let how = if fixed {
            "written by --fix"
        } else {
            "see --output yaml or --fix DIR"
        };
        let names = Vec::from_iter(
            budgets
                .iter()
                .map(|b| format!("{}/{}", b.namespace, b.name)),
        );
        let (n, names) = (names.len(), names.join(", "));
        writeln!(out, "{n} PodDisruptionBudgets to add ({how}): {names}")?;
    }
    Ok(())
}
