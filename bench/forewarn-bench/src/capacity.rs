//! The capacity a mass interruption costs its workloads, with surge (placeholders first, each
//! pod evicted once there is room for it) and with evictions at once: the mass interruption of
//! [`crate::mass`], continuation drains as deployed, on the Kubernetes fake's cluster
//! simulation — its scheduler binding pods where they fit, ReplicaSets recreating an evicted
//! pod at once, priority preemption, and an autoscaler whose nodes are Ready a launch time
//! (60 s) after a pod finds no room. Every pod requests 500m; the doomed nodes are full, and
//! every one is interrupted, so each replacement needs a node the autoscaler brings.
//!
//! **Capacity lost**, per workload (ReplicaSet): the pod-seconds between each of its pods
//! stopping to serve (its eviction accepted: deletion started; or its instance gone at 120 s)
//! and its replacement Running (or the end of the run). Plus the share of nodes fully handled
//! (cordoned, every eviction accepted) before the instance goes, which surge must keep.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use plotters::style::{BLUE, RED};

use crate::mass::{self, Run, RunMode};
use crate::plot::{self, Chart, Line};
use crate::stats::percentile;

#[derive(Debug, Clone, clap::Args)]
pub struct CapacitySettings {
    #[command(flatten)]
    pub mass: mass::Settings,
    /// The autoscaler's launch time: from a pod finding no room to its node Ready, in seconds.
    #[arg(long, default_value_t = 60)]
    pub launch_seconds: u64,
    /// Write the figure (serving pods over time, both runs) to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// When an instance goes after its warning.
const GONE: i64 = 120;

/// One run's figures.
struct Loss {
    /// Per workload, pod-seconds lost.
    per_workload: Vec<f64>,
    /// Serving pods of the workloads, per second from the warnings.
    serving: Vec<(i64, usize)>,
    handled: usize,
    /// Nodes not fully handled by 120 s that have a pod behind a budget.
    unhandled_budgeted: usize,
    last_eviction_p99: String,
    /// Requests (429s), and by kind.
    requests: String,
    /// The warnings' outcomes, and the passes that did not act, by reason.
    outcomes: String,
    by_kind: String,
    /// How much of the run the CPU was the bottleneck.
    load: crate::cpu::Load,
}

pub async fn report(s: &CapacitySettings) -> anyhow::Result<String> {
    let launch = Duration::from_secs(s.launch_seconds);
    let mut losses = Vec::new();
    for surge in [false, true] {
        let mode = RunMode {
            continuing: true,
            surge,
            launch_delay: Some(launch),
        };
        let run = mass::one_run(&s.mass, mode).await?;
        losses.push(loss(&run, &s.mass));
    }
    let (at_once, surge) = (&losses[0], &losses[1]);
    let total = |l: &Loss| l.per_workload.iter().sum::<f64>();
    let p = |l: &Loss, q: f64| {
        let d: Vec<Duration> = l
            .per_workload
            .iter()
            .map(|s| Duration::from_secs_f64(s.max(0.0)))
            .collect();
        percentile(&d, q).map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
    };
    let n = s.mass.nodes;
    let share = total(surge) / total(at_once).max(1e-9);
    // Both runs make the figure: it is comparable when both are.
    let load = at_once.load.and(surge.load);
    let mut out = header(s, launch);
    out.push_str(&format!(
        "| capacity lost (pod-seconds, all workloads) | {:.0} | {} | surge ≤ 0.2× |\n",
        total(at_once),
        load.marked(share <= 0.2, format!("{:.0} ({:.3}×)", total(surge), share)),
    ));
    out.push_str(&format!(
        "| per workload, p50 / p99 | {} / {} | {} / {} |  |\n",
        p(at_once, 50.0),
        p(at_once, 99.0),
        p(surge, 50.0),
        p(surge, 99.0)
    ));
    let handled = |l: &Loss| {
        l.load
            .marked(l.handled == n, format!("{} of {n}", l.handled))
    };
    out.push_str(&format!(
        "| nodes fully handled (cordoned, every eviction accepted) by 120 s | {} | {} | every node |\n",
        handled(at_once),
        handled(surge)
    ));
    out.push_str(&format!(
        "| node's last eviction accepted, p99 | {} | {} | before 120 s |\n",
        at_once.last_eviction_p99, surge.last_eviction_p99
    ));
    out.push_str(&format!(
        "| nodes not fully handled by 120 s (of them, with a pod behind a budget) | {} ({}) | {} ({}) |  |\n",
        n - at_once.handled,
        at_once.unhandled_budgeted,
        n - surge.handled,
        surge.unhandled_budgeted
    ));
    out.push_str(&format!(
        "| Kubernetes requests (429 by the server's limit) | {} | {} |  |\n",
        at_once.requests, surge.requests
    ));
    out.push_str(&crate::cpu::row(4, &[Some(at_once.load), Some(surge.load)]));
    out.push_str(&format!(
        "\nSurge loses {:.3} of what evicting at once loses ({}).\n",
        share,
        load.verdict(
            share <= 0.2 && surge.handled == n,
            "within the goal",
            "not within the goal"
        )
    ));
    for (name, l) in [("evict at once", at_once), ("surge", surge)] {
        out.push_str(&format!(
            "\n{name}: outcomes {}; requests by kind: {}.\n",
            l.outcomes, l.by_kind
        ));
    }
    if let Some(path) = &s.svg {
        draw(path, at_once, surge, n * s.mass.pods_per_node)?;
        out.push_str(&format!(
            "\n![Serving pods over time, surge against evict-at-once]({})\n",
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
    }
    Ok(out)
}

/// The section's heading, what the run is, and the head of its table.
fn header(s: &CapacitySettings, launch: Duration) -> String {
    let n = s.mass.nodes;
    format!(
        "### Capacity lost: {n} spot warnings at once, {} pods per node, a {} s launch time\n\n\
         `forewarn-bench capacity --nodes {n}`: the mass interruption above (continuation \
         drains, the stack's defaults, the same rate limits), on the fake's cluster \
         simulation (scheduler, ReplicaSets recreating an evicted pod at once, preemption, an \
         autoscaler whose nodes are Ready {} s after a pod finds no room). Every pod requests \
         500m; every node is interrupted, so each replacement needs a new node. The surge \
         run: {}\n\n\
         | measure | evict at once | surge | goal |\n|---|---|---|---|\n",
        s.mass.pods_per_node,
        s.launch_seconds,
        s.launch_seconds,
        mass::overrides_line(
            &s.mass,
            RunMode {
                continuing: true,
                surge: true,
                launch_delay: Some(launch),
            }
        ),
    )
}

/// The loss of one run (see the module doc).
fn loss(run: &Run, settings: &mass::Settings) -> Loss {
    let cutoff_seconds = settings.cutoff_seconds;
    let t0 = run.warned_at;
    let gone = t0 + chrono::Duration::seconds(GONE);
    let end = t0 + chrono::Duration::seconds(i64::try_from(cutoff_seconds).unwrap_or(i64::MAX));
    // Per workload: when each original pod stopped serving, and when each replacement ran.
    let mut stopped: BTreeMap<&str, Vec<DateTime<Utc>>> = BTreeMap::new();
    let mut started: BTreeMap<&str, Vec<DateTime<Utc>>> = BTreeMap::new();
    // The lives of the workloads' pods, as (from, to).
    let mut lives = Vec::new();
    for t in &run.timeline {
        let Some(owner) = t.owner.as_deref().filter(|o| o.starts_with("ReplicaSet/")) else {
            continue;
        };
        if t.created_at <= t0 {
            let stop = t.stopped_at.unwrap_or(gone).min(gone);
            stopped.entry(owner).or_default().push(stop);
            lives.push((t.running_at.unwrap_or(t.created_at).min(t0), stop));
        } else {
            let run_at = t.running_at.unwrap_or(end).min(end);
            started.entry(owner).or_default().push(run_at);
            lives.push((run_at, t.stopped_at.unwrap_or(end)));
        }
    }
    let per_workload = stopped
        .iter_mut()
        .map(|(owner, stops)| {
            stops.sort();
            let mut runs = started.get(owner).cloned().unwrap_or_default();
            runs.sort();
            stops
                .iter()
                .enumerate()
                .map(|(i, stop)| {
                    let ran = runs.get(i).copied().unwrap_or(end);
                    (ran - *stop).num_milliseconds().max(0) as f64 / 1000.0
                })
                .sum()
        })
        .collect();
    // Each second until the end of the run (at its end every life is cut: not counted).
    let serving = (0..(end - t0).num_seconds())
        .map(|s| {
            let at = t0 + chrono::Duration::seconds(s);
            (s, lives.iter().filter(|(a, b)| *a <= at && at < *b).count())
        })
        .collect();
    let handled = run.handled_by(Duration::from_secs(GONE as u64));
    let evicted: Vec<Duration> = run.evicted.iter().flatten().copied().collect();
    let window = Duration::from_secs(GONE as u64);
    let unhandled_budgeted = (0..run.cordoned.len())
        .filter(|&i| {
            let done = |t: &Option<Duration>| t.is_some_and(|t| t <= window);
            !(done(&run.cordoned[i]) && done(&run.evicted[i]))
        })
        .filter(|&i| settings.pods_per_node > 1 && mass::budgeted(i, settings.pdb_share))
        .count();
    Loss {
        per_workload,
        serving,
        handled,
        unhandled_budgeted,
        requests: format!("{} ({})", run.requests, run.rate_limited),
        outcomes: run
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        by_kind: run
            .by_kind
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        last_eviction_p99: percentile(&evicted, 99.0).map_or("-".into(), crate::stats::secs),
        load: run.load,
    }
}

/// The figure: serving pods over time, both runs, the instances' end marked.
fn draw(path: &std::path::Path, at_once: &Loss, surge: &Loss, pods: usize) -> anyhow::Result<()> {
    let points = |l: &Loss| -> Vec<(f64, f64)> {
        l.serving
            .iter()
            .map(|(s, n)| (*s as f64, *n as f64))
            .collect()
    };
    let end = at_once.serving.last().map_or(GONE, |(s, _)| *s);
    let chart = Chart {
        caption: "Pods serving after the warnings (t = 0 s)",
        x_desc: "seconds after the warnings",
        y_desc: "pods serving",
        x_max: end as f64,
        y_max: (pods + pods / 10) as f64,
        mark: Some((GONE as f64, "the instances go (120 s)")),
        lines: vec![
            Line {
                name: "evict at once",
                color: RED,
                points: points(at_once),
            },
            Line {
                name: "surge",
                color: BLUE,
                points: points(surge),
            },
        ],
    };
    plot::draw(path, &chart)
}
