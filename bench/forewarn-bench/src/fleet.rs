//! One deployment serving several clusters (issue 38): the mass interruption of `mass`, played
//! on one cluster alone, then on two clusters at once — each its own API server at the same
//! rate as the cluster alone, every node of both warned at t = 0 through one queue, consumed by
//! the same 10 concurrent invocations — then on the two with one API server down for the first
//! 60 s, then `--clusters` (10) at once, then two accounts, the member one's role denying
//! `ec2:DescribeInstances`. Per cluster: when every node was cordoned, and the share of nodes
//! fully handled (cordoned, every eviction accepted) before the instance goes (120 s). The
//! goals: each cluster within 1.05× the cluster alone, 100 % handled (the healthy cluster of
//! the outage, the own account's of the denial, the slowest of the ten).
//!
//! The neighbour (issues 46 and 59): a loud cluster's 5,000 warnings at t = 0, a quiet
//! cluster's 10 at t = 1 s, in two member accounts and in one account; the quiet cluster's last
//! cordon within 3× the quiet cluster alone, its last eviction within 1.2× (issue 59's goals);
//! the loud cluster's last cordon and nodes handled by 120 s shown beside them.
//!
//! Then forewarn's share of one API server (API Priority and Fairness, `infra/k8s/flow-control.yaml`),
//! on the Kubernetes fake's model of it: 1,000 nodes' cordons sent at once by the executor as
//! forewarn's handler group, under its client-side limit of the mass run (200 requests/s), on
//! a default server of 600 seats, idle or with other clients taking 80 % of it in
//! `global-default` (in 10 flows), with the manifest or without. The fake answers a queued
//! request at once and counts when the real server would have started it: the figure is when
//! the last cordon would have started, on the run's clock (which the client's limit moves on).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::kube::{ClusterClient, KubeExecutor};
use forewarn::domain::clusters::{ClusterId, Place};
use forewarn::domain::event::EventKind;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures;
use forewarn::domain::plan::{Facts, decide};
use forewarn::ports::{Clock, NodeDirectory, Pass};
use futures::StreamExt;
use kube_fake::{ForeignLoad, KubeFake};
use serde_json::Value;

use crate::mass::{self, Member, Run, RunMode, Settings};

/// How long an instance lives after its spot warning.
const WINDOW: Duration = Duration::from_secs(120);
/// How long the outage lasts.
const OUTAGE: Duration = Duration::from_secs(60);
/// The loaded server of the share benchmark: a default API server's 600 seats
/// (`--max-requests-inflight` 400 and `--max-mutating-requests-inflight` 200), each serving
/// 10 requests a second (100 ms a request); the fake's model counts a seat as one request a
/// second, so it is given their product.
const SERVER_SEATS: f64 = 600.0;
const REQUESTS_PER_SEAT: f64 = 10.0;
/// The goals.
const SLOWER_AT_MOST: f64 = 1.05;
const LOADED_AT_MOST: f64 = 1.1;

/// A cluster's figures: when its last node was cordoned, and the nodes fully handled by 120 s.
struct Figures {
    cordoned: Option<Duration>,
    handled: usize,
    /// How much of its run the CPU was the bottleneck.
    load: crate::cpu::Load,
}

fn figures(run: &Run) -> Figures {
    let all = run
        .cordoned
        .iter()
        .try_fold(Duration::ZERO, |m, t| Some(m.max((*t)?)));
    Figures {
        cordoned: all,
        handled: run.handled_by(WINDOW),
        load: run.load,
    }
}

/// The fleet benchmark's command line.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    #[command(flatten)]
    pub settings: Settings,
    /// Only this part (by default all of them, in this order).
    #[arg(long, value_enum)]
    pub only: Option<Part>,
    /// The many-clusters run: this many clusters of `--nodes` nodes each, warned at once.
    #[arg(long, default_value_t = 10)]
    pub clusters: usize,
    /// The neighbour case: the loud cluster's warnings at t = 0...
    #[arg(long, default_value_t = 5000)]
    pub loud_nodes: usize,
    /// ...and the quiet cluster's, one second later.
    #[arg(long, default_value_t = 10)]
    pub quiet_nodes: usize,
    /// Draw the runs (per cluster, nodes cordoned and fully drained over time, against the
    /// 120 s window) to this SVG file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
}

/// The parts of the fleet benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Two clusters at once, then with one API server down 60 s; `--clusters` at once; two
    /// accounts, one denying `ec2:DescribeInstances`.
    Clusters,
    /// A neighbour's mass interruption: `--loud-nodes` warnings in one cluster, `--quiet-nodes`
    /// in another one second later.
    Neighbour,
    /// forewarn's share of a loaded API server.
    Share,
}

/// The report as a markdown section.
pub async fn report(args: &FleetArgs) -> anyhow::Result<String> {
    let s = &args.settings;
    let mut out = String::new();
    let wants = |part: Part| args.only.is_none_or(|only| only == part);
    if wants(Part::Clusters) {
        out.push_str(&clusters(args).await?);
        out.push('\n');
    }
    if wants(Part::Neighbour) {
        out.push_str(&neighbour(args).await?);
        out.push('\n');
    }
    if wants(Part::Share) {
        out.push_str(&share(s).await?);
    }
    Ok(out)
}

/// The runs of several clusters at once, against one cluster alone.
async fn clusters(args: &FleetArgs) -> anyhow::Result<String> {
    let s = &args.settings;
    let mode = RunMode {
        continuing: true,
        surge: false,
        launch_delay: None,
    };
    let alone = mass::fleet_run(s, mode, &[Member::up("blue")]).await?;
    let pair = mass::fleet_run(s, mode, &[Member::up("blue"), Member::up("green")]).await?;
    let outage = mass::fleet_run(
        s,
        mode,
        &[Member::down("blue", OUTAGE), Member::up("green")],
    )
    .await?;
    if let Some(path) = &args.svg {
        draw(path, s.nodes, &alone[0], &pair, &outage)?;
    }
    let many: Vec<Member> = (0..args.clusters)
        .map(|k| Member::up(&format!("c{k}")))
        .collect();
    let many = mass::fleet_run(s, mode, &many).await?;
    // Every cluster of a run has the run's load.
    let slowest = many.iter().map(figures).fold(
        Figures {
            cordoned: Some(Duration::ZERO),
            handled: s.nodes,
            load: many.first().map(|r| r.load).unwrap_or_default(),
        },
        |m, f| Figures {
            cordoned: m.cordoned.zip(f.cordoned).map(|(a, b)| a.max(b)),
            handled: m.handled.min(f.handled),
            load: m.load,
        },
    );
    let accounts = [
        Member::up("blue"),
        Member::up("green").in_account(DENYING_ACCOUNT, true),
    ];
    let accounts = mass::fleet_run(s, mode, &accounts).await?;
    let alone = figures(&alone[0]);
    let pair_row = |k: usize| figures(&pair[k]);
    let outage_row = |k: usize| figures(&outage[k]);
    let many_run = format!("{} clusters", args.clusters);
    let many_cluster = format!("the slowest of {}", args.clusters);
    let denying = format!("two accounts, green's ({DENYING_ACCOUNT}) denying DescribeInstances");
    let rows = [
        ("one cluster alone", "blue", &alone, None),
        ("two clusters", "blue", &pair_row(0), Some(SLOWER_AT_MOST)),
        ("two clusters", "green", &pair_row(1), Some(SLOWER_AT_MOST)),
        (
            "two clusters, blue's API server down 60 s",
            "blue",
            &outage_row(0),
            None,
        ),
        (
            "two clusters, blue's API server down 60 s",
            "green",
            &outage_row(1),
            Some(SLOWER_AT_MOST),
        ),
        (&many_run, &many_cluster, &slowest, Some(SLOWER_AT_MOST)),
        (
            &denying,
            "blue",
            &figures(&accounts[0]),
            Some(SLOWER_AT_MOST),
        ),
    ];
    let mut out = clusters_header(s, mode);
    for (run, cluster, f, goal) in rows {
        out.push_str(&row(run, cluster, f, &alone, goal, s.nodes));
    }
    // The section's runs as one (a row's goal is flagged by its own runs').
    let load = [&outage[0], &pair[0], &many[0], &accounts[0]]
        .into_iter()
        .fold(alone.load, |l, r| l.and(r.load));
    out.push_str(&crate::cpu::row(6, &[Some(load)]));
    let green = &accounts[1];
    let refused = green
        .outcomes
        .iter()
        .filter(|(k, _)| !k.contains("Acted"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    out.push_str(&format!(
        "\nIn the run of two accounts, green's {n} warnings were refused in its own account \
         and nothing was done in green's cluster ({} requests to its API server); the \
         deployment's outcomes other than acted: {refused}.\n",
        green.requests,
        n = s.nodes,
    ));
    Ok(out)
}

/// The head of the many-clusters section: what the runs are, and the head of their table.
fn clusters_header(s: &Settings, mode: RunMode) -> String {
    format!(
        "### Many clusters: {n} spot warnings per cluster at once, one deployment\n\n`forewarn-bench fleet --nodes {n} --only clusters`: {n} spot warnings per cluster at \
         t = 0, one queue consumed as the event source mapping scales (5 concurrent batches at \
         first, 300 more a minute, up to {inv}) in batches of {batch} messages, each cluster's API \
         server at {rps} requests/s ({lat} ms latency), {pods} pods per node with {grace} s \
         grace periods, drains carried on by continuations (as deployed). {aws} {overrides}\n\n\
         | run | cluster | every node cordoned | × the cluster alone | goal | fully handled by 120 s |\n\
         |---|---|---|---|---|---|\n",
        n = s.nodes,
        inv = s.invocations,
        batch = s.batch,
        rps = s.server.server_rps,
        lat = s.server.latency_ms,
        pods = s.pods_per_node,
        grace = s.grace_seconds,
        aws = mass::aws_line(s),
        overrides = mass::overrides_line(s, mode),
    )
}

/// The member account of the run of two accounts, whose role denies `ec2:DescribeInstances`.
const DENYING_ACCOUNT: &str = "210987654321";

/// The neighbour's mass interruption (issue 46): one deployment serving a loud cluster warned
/// for `loud_nodes` nodes at t = 0 and a quiet one warned for `quiet_nodes` one second later;
/// the quiet cluster's last cordon and last eviction, against the quiet cluster alone. Twice:
/// the two clusters in two member accounts of an organization (each account's events routed in
/// its own message group), then both in the deployment's own account.
async fn neighbour(args: &FleetArgs) -> anyhow::Result<String> {
    let s = &args.settings;
    let mode = RunMode {
        continuing: true,
        surge: false,
        launch_delay: None,
    };
    let mut rows = String::new();
    let mut handled = String::new();
    let mut load = crate::cpu::Load::default();
    for (case, accounts) in [
        ("two member accounts", Some((LOUD_ACCOUNT, QUIET_ACCOUNT))),
        ("one account", None),
    ] {
        let place = |m: Member, account: Option<&str>| match account {
            Some(a) => m.in_account(a, false),
            None => m,
        };
        let quiet = |after| {
            place(
                Member::up("quiet").of(args.quiet_nodes, after),
                accounts.map(|a| a.1),
            )
        };
        let loud = place(
            Member::up("loud").of(args.loud_nodes, Duration::ZERO),
            accounts.map(|a| a.0),
        );
        let alone = mass::fleet_run(s, mode, &[quiet(Duration::ZERO)]).await?;
        let both = mass::fleet_run(s, mode, &[loud, quiet(NEIGHBOUR_AFTER)]).await?;
        let (q, a) = (&both[1], &alone[0]);
        // A figure of the two runs: comparable when both are.
        let pair_load = a.load.and(q.load);
        load = load.and(pair_load);
        rows.push_str(&neighbour_row(
            case,
            ("last cordon", CORDON_AT_MOST),
            (last(&a.cordoned), last(&q.cordoned)),
            &pair_load,
        ));
        rows.push_str(&neighbour_row(
            case,
            ("last eviction", EVICTION_AT_MOST),
            (last(&a.evicted), last(&q.evicted)),
            &pair_load,
        ));
        // What the deployment sent back to the queue (triage): warnings, drains' passes.
        let sent_back = |of: &str| -> usize {
            let outcomes = both[0].outcomes.iter();
            outcomes
                .filter(|(k, _)| k.starts_with(of))
                .map(|(_, n)| n)
                .sum()
        };
        handled.push_str(&format!(
            "- {case}: the quiet cluster {} of {} nodes fully handled by 120 s beside the loud \
             one; the loud cluster {} of {}, its last node cordoned {}. Sent back to the \
             queue by triage: {} warnings, {} drains' passes.\n",
            q.handled_by(WINDOW),
            args.quiet_nodes,
            both[0].handled_by(WINDOW),
            args.loud_nodes,
            last(&both[0].cordoned)
                .map_or("never".into(), |t| format!("at {:.2} s", t.as_secs_f64())),
            sent_back("Requeued"),
            sent_back("pass Requeued"),
        ));
        handled.push_str(&floor(s, case, a, (q, &both[0])));
    }
    rows.push_str(&crate::cpu::row(6, &[Some(load)]));
    Ok(format!(
        "### A neighbour's mass interruption: {loud} warnings in one cluster, {quiet} in another 1 s later\n\n\
         `forewarn-bench fleet --only neighbour`: one deployment, one queue consumed as the event \
         source mapping scales (5 concurrent batches at first, 300 more a minute, up to \
         {inv}), each cluster its own API server at {rps} requests/s; the loud cluster's \
         {loud} spot warnings at t = 0, the quiet cluster's {quiet} at t = 1 s. The message \
         groups are the deployment's: with an organization, each account's warnings (its \
         route's) and continuations in the account's group; without one, the warnings in none \
         and each cluster's continuations in the cluster's. The quiet cluster's figures from \
         its own warnings, against the quiet cluster alone. {aws} \
         {overrides}\n\n\
         | clusters in | quiet cluster | alone | beside the loud one | × alone | goal |\n|---|---|---|---|---|---|\n{rows}\n{handled}",
        loud = args.loud_nodes,
        quiet = args.quiet_nodes,
        inv = s.invocations,
        rps = s.server.server_rps,
        aws = mass::aws_line(s),
        overrides = mass::overrides_line(s, mode),
    ))
}

/// The latest of `times`, when every one is known.
fn last(times: &[Option<Duration>]) -> Option<Duration> {
    times
        .iter()
        .try_fold(Duration::ZERO, |m, t| Some(m.max((*t)?)))
}

/// One row of the neighbour's table.
fn neighbour_row(
    case: &str,
    (what, at_most): (&str, f64),
    (alone, with): (Option<Duration>, Option<Duration>),
    load: &crate::cpu::Load,
) -> String {
    let secs =
        |d: Option<Duration>| d.map_or("not all".into(), |d| format!("{:.2} s", d.as_secs_f64()));
    let (times, met) = match (alone, with) {
        (Some(a), Some(w)) if a > Duration::ZERO => {
            let r = w.as_secs_f64() / a.as_secs_f64();
            (format!("{r:.2}×"), r <= at_most)
        }
        _ => ("—".into(), false),
    };
    format!(
        "| {case} | {what} | {} | {} | {times} | ≤ {at_most}×: {} |\n",
        secs(alone),
        secs(with),
        load.verdict(met, "met", "not met")
    )
}

/// This design's floor for the quiet cluster's last cordon beside the loud one, and why: its
/// warnings are received after the messages ahead of them when sent (the loud cluster's not
/// yet read, unless the fair queue counts the loud tenant noisy); each batch of those costs
/// its invocation at least one send back (its warnings sent back at once), so they are read at
/// best as the event source mapping's batches (as it scales) take one send each; once read,
/// the quiet cluster's are cordoned at best as fast as alone. Beside it, the same from this
/// run: when its warnings were read, and when the loud cluster was listed (until then, each
/// batch ahead costs a `DescribeInstances` under EC2's throttle, not only a send).
fn floor(s: &Settings, case: &str, alone: &Run, (quiet, loud): (&Run, &Run)) -> String {
    // From its warnings read to its last cordon: alone, and beside the loud one.
    let after_read = |run: &Run| last(&run.cordoned)?.checked_sub(run.behind.1?);
    let (Some(alone_cordon), Some(own)) = (last(&alone.cordoned), after_read(alone)) else {
        return format!(
            "- {case}: no floor (the quiet cluster alone was not all read and cordoned)\n"
        );
    };
    let ahead = quiet.behind.0;
    let reads = read_at_best(ahead, NEIGHBOUR_AFTER, s);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let times = |d: Duration| format!("{:.2}×", d.as_secs_f64() / alone_cordon.as_secs_f64());
    let measured = match (quiet.behind.1, after_read(quiet)) {
        (Some(read), Some(then)) => format!(
            "In this run they were read in {}, the quiet cluster's last cordon {} after (alone: \
             {}), {} in all ({})",
            secs(read),
            secs(then),
            secs(own),
            secs(read + then),
            times(read + then)
        ),
        _ => "In this run they were not all read, or not all cordoned".into(),
    };
    let listed = loud
        .listed
        .filter(|_| ahead > 0)
        .map_or(String::new(), |l| {
            format!(
                ": until the loud cluster was listed, at {} of the run, each batch ahead cost a \
             `DescribeInstances` under EC2's throttle, not only a send",
                secs(l)
            )
        });
    format!(
        "- {case}, this design's floor: the quiet cluster's warnings were sent behind {ahead} \
         messages not yet read (a tenant of its own is received oldest first; a noisy tenant's \
         messages are not ahead). Read at the speed of sending back ({} messages a batch, a \
         batch a send of {} ms, as many at once as the event source mapping runs), they take \
         {}: the quiet cluster's last cordon then {} at best, **{}** alone. {measured}{listed}.\n",
        s.batch,
        s.sqs_latency_ms,
        secs(reads),
        secs(reads + own),
        times(reads + own),
    )
}

/// How long `ahead` messages take to be read from `from` (after the first messages appeared)
/// at best: every batch of `--batch` taking one SQS send, as many at once as the event source
/// mapping's pollers then (see [`crate::queue::pollers_at`]).
fn read_at_best(ahead: usize, from: Duration, s: &Settings) -> Duration {
    let send = Duration::from_millis(s.sqs_latency_ms).max(Duration::from_millis(1));
    let (mut at, mut read) = (from, 0);
    while read < ahead {
        read += crate::queue::pollers_at(at, s.invocations) * s.batch.max(1);
        at += send;
    }
    at - from
}

/// The member accounts of the neighbour case's organization run.
const LOUD_ACCOUNT: &str = "111111111111";
const QUIET_ACCOUNT: &str = "222222222222";

/// The neighbour case's quiet cluster is warned this long after the loud one.
const NEIGHBOUR_AFTER: Duration = Duration::from_secs(1);
/// Its goals (issue 59): its last cordon within this many times its last cordon alone...
const CORDON_AT_MOST: f64 = 3.0;
/// ...its last eviction within this many times alone.
const EVICTION_AT_MOST: f64 = 1.2;

/// The figure: per cluster of each run, the nodes cordoned over time; for the outage's clusters
/// also the nodes fully drained.
fn draw(
    path: &std::path::Path,
    nodes: usize,
    alone: &Run,
    pair: &[Run],
    outage: &[Run],
) -> anyhow::Result<()> {
    use crate::plot::{Chart, Line, cumulative, draw};
    use plotters::style::RGBColor;
    let end = 150.0;
    let times = |v: &[Option<Duration>]| -> Vec<f64> {
        v.iter().flatten().map(Duration::as_secs_f64).collect()
    };
    let lines = vec![
        Line {
            name: "one cluster alone: cordoned",
            color: RGBColor(120, 120, 120),
            points: cumulative(&times(&alone.cordoned), end),
        },
        Line {
            name: "two clusters, blue: cordoned",
            color: RGBColor(90, 140, 220),
            points: cumulative(&times(&pair[0].cordoned), end),
        },
        Line {
            name: "two clusters, green: cordoned",
            color: RGBColor(90, 190, 120),
            points: cumulative(&times(&pair[1].cordoned), end),
        },
        Line {
            name: "blue down 60 s: blue cordoned",
            color: RGBColor(200, 30, 30),
            points: cumulative(&times(&outage[0].cordoned), end),
        },
        Line {
            name: "blue down 60 s: green cordoned",
            color: RGBColor(20, 110, 50),
            points: cumulative(&times(&outage[1].cordoned), end),
        },
        Line {
            name: "blue down 60 s: green fully drained",
            color: RGBColor(120, 60, 160),
            points: cumulative(&times(&outage[1].evicted), end),
        },
    ];
    let caption = format!("{nodes} spot warnings per cluster at t = 0, one deployment");
    let chart = Chart {
        caption: &caption,
        x_desc: "seconds after the warnings",
        y_desc: "nodes",
        x_max: end,
        y_max: nodes as f64 * 1.05,
        mark: Some((WINDOW.as_secs_f64(), "the instances go (120 s)")),
        lines,
    };
    draw(path, &chart)
}

fn row(
    run: &str,
    cluster: &str,
    f: &Figures,
    alone: &Figures,
    goal: Option<f64>,
    nodes: usize,
) -> String {
    let secs =
        |d: Option<Duration>| d.map_or("not all".into(), |d| format!("{:.1} s", d.as_secs_f64()));
    let times = match (f.cordoned, alone.cordoned) {
        (Some(a), Some(b)) if b > Duration::ZERO => {
            format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
        }
        _ => "—".into(),
    };
    // A figure against the cluster alone: comparable when both runs are.
    let load = f.load.and(alone.load);
    let goal = match (goal, f.cordoned, alone.cordoned) {
        (Some(g), Some(a), Some(b)) => {
            let met = a.as_secs_f64() <= g * b.as_secs_f64() && f.handled == nodes;
            format!("≤ {g}×, 100 %: {}", load.verdict(met, "met", "not met"))
        }
        (Some(g), _, _) => format!("≤ {g}×, 100 %: {}", load.verdict(false, "", "not met")),
        (None, _, _) => "—".into(),
    };
    format!(
        "| {run} | {cluster} | {} | {times} | {goal} | {} of {nodes} ({}) |\n",
        secs(f.cordoned),
        f.handled,
        percent(f.handled, nodes),
    )
}

fn percent(part: usize, whole: usize) -> String {
    if whole == 0 {
        return "n/a".into();
    }
    format!("{:.1} %", 100.0 * part as f64 / whole as f64)
}

/// The priority level's table: the same cordons on an idle server and on a loaded one, with
/// forewarn's own level and without.
async fn share(s: &Settings) -> anyhow::Result<String> {
    let own_idle = cordons(s, true, false).await?;
    let own_loaded = cordons(s, true, true).await?;
    let shared_idle = cordons(s, false, false).await?;
    let shared_loaded = cordons(s, false, true).await?;
    let met = own_loaded <= LOADED_AT_MOST * own_idle;
    Ok(format!(
        "{n} nodes' cordons at once, forewarn's client limited to {qps} requests/s as in the \
         runs above, on one API server of {seats} seats of {per} requests/s each (the fake's \
         model of API Priority and Fairness, on its clock), other clients taking 80 % of it in \
         `global-default` (10 flows):\n\n\
         | forewarn's requests | idle server | 80 % taken by others | × idle | goal |\n\
         |---|---|---|---|---|\n\
         | in their own level (`infra/k8s/flow-control.yaml`) | {oi:.1} s | {ol:.1} s | {r1:.2}× | ≤ {LOADED_AT_MOST}×: {m} |\n\
         | in `global-default` (no manifest) | {si:.1} s | {sl:.1} s | {r2:.2}× | — |\n",
        n = s.nodes,
        qps = s.client_qps,
        seats = SERVER_SEATS,
        per = REQUESTS_PER_SEAT,
        oi = own_idle,
        ol = own_loaded,
        si = shared_idle,
        sl = shared_loaded,
        r1 = own_loaded / own_idle.max(f64::EPSILON),
        r2 = shared_loaded / shared_idle.max(f64::EPSILON),
        m = if met { "met" } else { "not met" },
    ))
}

/// The share benchmark's clock: a [`ManualClock`] that only sleeps move on, where a sleep of
/// `d` begun at `t` ends at `t + d` — the clock goes to the later of that and where it is. On a
/// plain [`ManualClock`] every sleep moves the clock on by its whole length, so the waits of the
/// 100 cordons in flight, each for its turn under the client's limit, added up instead of
/// overlapping: the run's clock ran tens of times faster than the requests it sent, and the
/// figure measured the clock, not the server.
#[derive(Debug, Clone)]
struct OverlappingClock(ManualClock);

#[async_trait::async_trait]
impl Clock for OverlappingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }

    async fn sleep(&self, d: Duration) {
        self.0.set(self.0.now() + forewarn::ports::span(d));
        // Let whatever the new time wakes run before the sleeper goes on, as ManualClock does.
        tokio::task::yield_now().await;
    }

    async fn alarm(&self, at: chrono::DateTime<chrono::Utc>) {
        self.0.alarm(at).await;
    }
}

/// The objects of `infra/k8s/flow-control.yaml`.
fn flow_control_manifest() -> anyhow::Result<Vec<Value>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/k8s/flow-control.yaml");
    let text = std::fs::read_to_string(&path)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Seconds until the last of `s.nodes` cordons would have started, sent at once by the
/// executor as forewarn's handler group (at most 100 at a time: 10 invocations of 10).
async fn cordons(s: &Settings, manifest: bool, loaded: bool) -> anyhow::Result<f64> {
    const GROUP: &str = "forewarn-handler";
    let fake = KubeFake::builder().flow_control().start().await;
    let clock = OverlappingClock(ManualClock::at(chrono::Utc::now()));
    let c = clock.clone();
    fake.set_clock(move || c.now());
    if manifest {
        for o in flow_control_manifest()? {
            fake.insert(o);
        }
    }
    let mut kube = fake.config();
    kube.auth_info.impersonate = Some(format!("arn:aws:sts::123456789012:assumed-role/{GROUP}"));
    kube.auth_info.impersonate_groups = Some(vec![GROUP.to_string()]);
    // forewarn's own client-side limit, as in the mass run: what it asks of the server.
    let limit = (s.client_qps > 0.0).then_some((s.client_qps, s.client_burst));
    let clients = ClusterClient::new(kube::Client::try_from(kube)?)
        .with_clock(Arc::new(clock.clone()))
        .with_rate_limit(limit);
    let mut instances = BTreeMap::new();
    for n in 0..s.nodes {
        let id = format!("i-0c{n:015x}");
        let name = format!("ip-10-9-{}-{}.ec2.internal", n / 256, n % 256);
        fake.insert(fixtures::node_object(&name, &id).ready().build());
        let facts = fixtures::instance(&id)
            .typed("m5.large", "us-east-1a")
            .dns(&name)
            .state("running")
            .cluster("blue")
            .build();
        instances.insert(id, facts);
    }
    if loaded {
        fake.set_foreign_load(ForeignLoad::new("global-default", 0.8).flows(10));
    }
    fake.set_server_capacity(Some(SERVER_SEATS * REQUESTS_PER_SEAT));
    let started = clock.now();
    let known: Vec<InstanceFacts> = instances.values().cloned().collect();
    let nodes = clients.nodes(&known, Default::default()).await?;
    let config = forewarn::domain::config::Config {
        cluster: Some(ClusterId::at(&Place::default(), "blue")),
        ..Default::default()
    };
    let executor = Arc::new(KubeExecutor::new(clients, &config));
    let plans: Vec<_> = instances
        .keys()
        .map(|id| {
            let ev = fixtures::event(EventKind::SpotInterruption, &format!("ev-{id}"), id)
                .time(clock.now())
                .build();
            decide(&ev, Facts::new(&instances, &nodes), &config)
        })
        .collect();
    let runs = futures::stream::iter(plans).map(|plan| {
        let executor = Arc::clone(&executor);
        async move { executor.run(&plan, Pass::Cordon).await }
    });
    let results: Vec<_> = runs.buffer_unordered(100).collect().await;
    for r in results {
        r?;
    }
    let stats = fake.flow_stats();
    let last = stats
        .values()
        .filter_map(|s| s.last_start)
        .max()
        .unwrap_or_else(|| clock.now())
        .max(clock.now());
    Ok((last - started).num_milliseconds() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_ahead_are_read_at_best_a_send_a_round_of_the_mappings_batches() {
        let s = Settings {
            batch: 10,
            invocations: 10,
            sqs_latency_ms: 10,
            ..Settings::defaults()
        };
        assert_eq!(read_at_best(0, NEIGHBOUR_AFTER, &s), Duration::ZERO);
        // At 1 s the mapping runs its 10 batches: 100 messages a send.
        assert_eq!(
            read_at_best(5000, NEIGHBOUR_AFTER, &s),
            Duration::from_millis(500)
        );
        // From the start, 5 batches (50 a send) until it scales.
        assert_eq!(
            read_at_best(100, Duration::ZERO, &s),
            Duration::from_millis(20)
        );
        assert_eq!(
            read_at_best(101, Duration::ZERO, &s),
            Duration::from_millis(30)
        );
    }
}
