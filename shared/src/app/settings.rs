//! Every setting forewarn reads, declared once: [`Variables`], one field per `FOREWARN_*`
//! variable (clap derive: its name, default, parser and doc). The Lambda functions and the
//! `forewarn` command are wired from [`Settings`], the typed values made of them and of the
//! platform's variables (see [`crate::app::wiring`]); the configuration page
//! (`app/reference.rs`, by a test) and the command's `--help` are made from the same declaration.
//! Nothing else reads the environment for a `FOREWARN_*` name.
//!
//! Reading is pure: [`Settings::from_vars`] takes the variables as (name, value) pairs. A value
//! is trimmed and a blank one is unset; a bad value is a [`ConfigError`] naming the variable,
//! its value and what is wrong with it. A retired variable (the upgrade page's table,
//! `docs/how-to/upgrade.md`) is refused, naming its new home.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};

use crate::adapters::accounts::{AccountSettings, is_account_id};
use crate::adapters::aws::AwsSettings;
use crate::adapters::kube::{ClusterAccess, EksAccess, ExecutorSettings, KUBE_SHARE};
use crate::adapters::webhook::{DEFAULT_TEMPLATE, Template, WebhookConfig, check_url, redacted};
use crate::app::pipeline::{CONCURRENCY, DEREGISTER_BUDGET, PASS_INTERVAL};
use crate::app::priorities::PrioritySettings;
use crate::domain::clusters::{ClusterId, Entry, Place};
use crate::domain::config::{Config, Mode, TaintEffect, TaintKeys};
use crate::domain::event::EventKind;
use crate::domain::policy::PolicyAllow;
use crate::domain::priorities::HotShare;
use crate::domain::time::parse_duration;

/// How long before the Lambda's deadline work stops, so the answer still gets out: the
/// benchmarked value.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(3);

/// Every `FOREWARN_*` variable forewarn reads, declared once, in the order the configuration
/// page shows them. Each field's doc is its meaning on the page and in `--help`.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "forewarn-settings",
    no_binary_name = true,
    disable_help_flag = true
)]
pub struct Variables {
    /// The clusters one deployment serves, separated by commas. A cluster is its account,
    /// region and name: `name` (of the deployment's own account and region), `account/name` (the
    /// own region) or `account/region/name`; `*` is every EKS cluster of the own account and
    /// region and of every account and region the list names, `account/*` and `account/region/*`
    /// every cluster of one (listed again every 5 minutes; with `KUBECONFIG`, every context, a
    /// context named `account/region/name` being of that place). Each instance is handled only in
    /// a served cluster of its own account and region whose name its tags
    /// (`kubernetes.io/cluster/<name>`, `aws:eks:cluster-name`, `eks:cluster-name`) give, on that
    /// cluster's own client; any other instance is acknowledged, nothing done. An event of an
    /// account the list does not name is refused before any role is assumed there; another
    /// account needs `FOREWARN_MEMBER_ROLE` and `FOREWARN_ACCOUNT_ID`. A cluster of the own place
    /// is reached through the kubeconfig context of its name when `KUBECONFIG` is set, else
    /// through EKS (`DescribeCluster` and an IAM token in the cluster's own account, through the
    /// member role, and region). Unset: one unnamed cluster, every instance of the own account
    /// and region. See [Many clusters](../many-clusters.md)
    #[arg(long, env = "FOREWARN_CLUSTERS", value_name = "CLUSTERS", value_parser = ClusterSelection::parse)]
    pub clusters: Option<ClusterSelection>,

    /// Kinds that mark their pool unavailable, separated by commas (`none`: no kind); every kind
    /// counts in the pool's history
    #[arg(long, env = "FOREWARN_UNAVAILABLE_KINDS", value_name = "KINDS", value_parser = Kinds::parse,
        default_value_t = Kinds(Config::default().unavailable_kinds))]
    pub unavailable_kinds: Kinds,

    /// How long a pool stays unavailable after an event (`90s`, `15m`, `1h 30m`)
    #[arg(long, env = "FOREWARN_POOL_TTL", value_name = "DURATION", value_parser = Span::parse,
        default_value_t = Span::of(Config::default().pool_ttl))]
    pub pool_ttl: Span,

    /// The key of the taint put on cordoned nodes (its value is the event kind); `nth`:
    /// aws-node-termination-handler's key for the four kinds NTH taints for
    /// (`aws-node-termination-handler/` and `spot-itn`, `rebalance-recommendation`,
    /// `scheduled-maintenance` for `scheduled-change`, `asg-lifecycle-termination` for
    /// `asg-termination`) and `forewarn.io/interruption` for the others, so that tolerations
    /// written for NTH keep matching: see
    /// [Moving from NTH](../how-to/from-nth.md#tolerations-and-taints)
    #[arg(long, env = "FOREWARN_TAINT_KEY", value_name = "KEY",
        default_value_t = Config::default().taint_key)]
    pub taint_key: String,

    /// The effect of that taint: `NoSchedule`, `PreferNoSchedule` or `NoExecute`
    #[arg(long, env = "FOREWARN_TAINT_EFFECT", value_name = "EFFECT",
        default_value_t = Config::default().taint_effect)]
    pub taint_effect: TaintEffect,

    /// Drain deadline after the event time for events that give none
    #[arg(long, env = "FOREWARN_DRAIN_TIMEOUT", value_name = "DURATION", value_parser = Span::parse,
        default_value_t = Span::of(Config::default().drain_timeout))]
    pub drain_timeout: Span,

    /// Comma-separated lifecycle hook names forewarn answers (completes and heartbeats); unset:
    /// any hook of this cluster's instances. Others are left to their owners. `off`: no
    /// lifecycle action is completed (the hooks' own timeouts and default results decide;
    /// drains still happen)
    #[arg(long, env = "FOREWARN_LIFECYCLE_HOOKS", value_name = "HOOKS", value_parser = Hooks::parse)]
    pub lifecycle_hooks: Option<Hooks>,

    /// Post one JSON message per node action to this `https://` URL (a Slack incoming webhook,
    /// ...); see [telemetry](../telemetry.md#webhook). An `http://` URL is taken for a loopback
    /// host only. The URL is a secret: logs and errors show its host only
    #[arg(long, env = "FOREWARN_WEBHOOK_URL", value_name = "URL", hide_env_values = true,
        value_parser = check_url)]
    pub webhook_url: Option<String>,

    /// The message: a JSON object with `{{field}}` placeholders in its strings; unset: Slack's
    /// `{"text": ...}`
    #[arg(long, env = "FOREWARN_WEBHOOK_TEMPLATE", value_name = "JSON", value_parser = Template::parse)]
    pub webhook_template: Option<Template>,

    /// The embedded pool store's folder; unset: `$XDG_STATE_HOME/forewarn`, else
    /// `~/.local/state/forewarn`
    #[arg(long, env = "FOREWARN_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// The DynamoDB pool table (selects the DynamoDB store)
    #[arg(long, env = "FOREWARN_TABLE", value_name = "TABLE")]
    pub table: Option<String>,

    /// The Secrets Manager secret (ARN or name) holding the continuation keys, which sign
    /// drains' continuations and cordon records: the stack's `<stack>-continuation-key`,
    /// readable by forewarn's roles only. Its current
    /// version is the current key, its previous version the one before the last rotation
    /// (`forewarn key rotate`). Needed with `FOREWARN_TABLE`
    #[arg(long, env = "FOREWARN_KEY_SECRET", value_name = "SECRET")]
    pub key_secret: Option<String>,

    /// Client-side rate limit of the Kubernetes API calls of one process, in requests per
    /// second, like client-go's QPS (its burst: the QPS rounded up). Each Lambda execution
    /// environment is a process with its own limit; unset: forewarn's share of the API server,
    /// 200 requests/s, divided by `FOREWARN_ENVIRONMENTS` (the handler as deployed: 20), and
    /// without that no limit; `0`: no limit. A 429's `Retry-After` holds back every call until it
    /// has passed. Two lanes: node reads, cordons, deletes and Events go before the drains'
    /// evictions and pod lists, so a mass interruption's cordons do not queue behind evictions
    #[arg(long, env = "FOREWARN_KUBE_QPS", value_name = "QPS", value_parser = qps)]
    pub kube_qps: Option<f64>,

    /// The delay between two passes of a drain that does not wait (1 s to 900 s, or `off`). The
    /// handler's first pass over a warning cordons and taints the node and returns; the drain
    /// (evictions, pods still terminating, evictions a budget refused, the lifecycle action) is
    /// carried on by messages it queues (`sqs:SendMessage`): the first at once, the next ones
    /// with this delay, until the node is empty or the drain's deadline passes. `off`: the same
    /// passes run inside the invocation, 5 s apart, after every event of the batch has had its
    /// first pass, as `forewarn replay` does
    #[arg(long, env = "FOREWARN_DRAIN_PASS_INTERVAL", value_name = "DURATION",
        value_parser = OrOff::within(1, 900), default_value_t = OrOff(Some(PASS_INTERVAL)))]
    pub drain_pass_interval: OrOff,

    /// The actions a rule of the policy ConfigMap may ask: names separated by commas or spaces
    /// (`none`, `cordon`, `cordon-drain`, `delete`, `cordon-for`, `adaptive`), or `all`; a rule
    /// asking another is refused and its nodes keep the defaults (see
    /// [policies](../concepts/policies.md)). Not applied to `FOREWARN_POLICY_FILE`
    #[arg(long, env = "FOREWARN_POLICY_ALLOW", value_name = "ACTIONS", value_parser = PolicyAllow::parse,
        default_value_t = PolicyAllow::default())]
    pub policy_allow: PolicyAllow,

    /// A policy per node group (YAML, see [policies](../concepts/policies.md)): a matching
    /// rule's action for a kind replaces the kind's default action on that node. A file that
    /// cannot be read or a policy that does not parse stops the function at its start, naming
    /// the field
    #[arg(long, env = "FOREWARN_POLICY_FILE", value_name = "FILE")]
    pub policy_file: Option<PathBuf>,

    /// The deployment's own AWS account (12 digits; the stack sets it): EC2 and Auto Scaling
    /// calls about an instance of an event of this account (or of an event naming none) use the
    /// deployment's own credentials. Unset: every event is taken as the own account's
    #[arg(long, env = "FOREWARN_ACCOUNT_ID", value_name = "ACCOUNT", help_heading = FUNCTIONS,
        value_parser = account_id)]
    pub account_id: Option<String>,

    /// The IAM role name (no path) forewarn assumes in an organization's member account
    /// (`forewarn-member` in `infra/member.yaml`): an event of another account than
    /// `FOREWARN_ACCOUNT_ID` is looked up (`DescribeInstances`) and its lifecycle action completed
    /// in that account and the event's region, with STS `AssumeRole` of
    /// `arn:<partition>:iam::<account>:role/<name>`, as are the member clusters' EKS calls. Needs
    /// `FOREWARN_ACCOUNT_ID`; only the accounts `FOREWARN_CLUSTERS` names are served. Unset, or
    /// for an account not named: the event is acknowledged as not served, naming the account
    /// (nothing done, no pool recorded). A named account whose role cannot be assumed, or is
    /// refused a lookup, fails its events (retried, then kept in the dead-letter queue; the
    /// `AccountUnreachable` metric)
    #[arg(long, env = "FOREWARN_MEMBER_ROLE", value_name = "ROLE", help_heading = FUNCTIONS,
        value_parser = role_name)]
    pub member_role: Option<String>,

    /// How many execution environments of the function run at once at most (1 to 1000; the
    /// stack sets the handler's to its `MaximumConcurrency`): without `FOREWARN_KUBE_QPS`, each
    /// takes forewarn's share of the API server (200 requests/s, burst 20) divided by it
    #[arg(long, env = "FOREWARN_ENVIRONMENTS", value_name = "N", help_heading = FUNCTIONS,
        value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub environments: Option<u32>,

    /// Traffic first: before a drain's first evictions, its instance leaves every instance-mode
    /// target group of its cluster (target groups the AWS Load Balancer Controller tagged
    /// `elbv2.k8s.aws/cluster=<cluster>`, found by that tag, no other), and when the instance
    /// goes within minutes (a spot or capacity reservation warning, `stopping`) its pods'
    /// addresses every IP-mode one. Rounds shared by every batch through the pool table take off
    /// every instance offered by then, one `DeregisterTargets` per group; the evictions wait for
    /// their round at most this long (1 s to 30 s), then go ahead whatever it is, and the
    /// record's report says what became of it. `off`: drains do not touch the load balancers.
    /// Needs a cluster name (`FOREWARN_CLUSTERS`)
    #[arg(long, env = "FOREWARN_DEREGISTER_BUDGET", value_name = "DURATION", help_heading = FUNCTIONS,
        value_parser = OrOff::within(1, 30),
        default_value_t = OrOff(Some(DEREGISTER_BUDGET)))]
    pub deregister_budget: OrOff,

    /// Plan and report, write nothing: no cluster action, no table write (`true` under
    /// `cargo lambda watch`)
    #[arg(long, env = "FOREWARN_DRY_RUN", value_name = "BOOL", help_heading = FUNCTIONS,
        action = clap::ArgAction::Set, value_parser = parse_bool, default_value_t = false)]
    pub dry_run: bool,

    /// Plan against a `describe-instances` capture instead of EC2
    #[arg(long, env = "FOREWARN_INSTANCES_FILE", value_name = "FILE", help_heading = FUNCTIONS)]
    pub instances_file: Option<PathBuf>,

    /// Plan against a `kubectl get nodes,pods -A -o json` capture instead of the cluster (never
    /// acts)
    #[arg(long, env = "FOREWARN_CLUSTER_STATE_FILE", value_name = "FILE", help_heading = FUNCTIONS)]
    pub cluster_state_file: Option<PathBuf>,

    /// Events of distinct instances handled at once in a batch (events of one instance run in
    /// event-time order)
    #[arg(long, env = "FOREWARN_CONCURRENCY", value_name = "N", help_heading = FUNCTIONS,
        value_parser = clap::value_parser!(u16).range(1..), default_value_t = CONCURRENCY as u16)]
    pub concurrency: u16,

    /// The pool sweeper updates the Cluster Autoscaler's priority expander after each sweep
    /// (with a live cluster; nothing without base priorities): `true` or `false`, or options that
    /// mean `true`, separated by commas: `take-over` (overwrite a
    /// `cluster-autoscaler-priority-expander` ConfigMap forewarn did not create) and
    /// `hot-share=SHARE` (the share of a node group's pools that must be unavailable for it to be
    /// demoted: `0.5`, `50%`; default `1`, every pool). See [priorities](../how-to/priorities.md)
    #[arg(long, env = "FOREWARN_PRIORITIES", value_name = "OPTIONS", help_heading = FUNCTIONS,
        value_parser = Priorities::parse, default_value = "true")]
    pub priorities: Priorities,
}

/// The heading of the variables only the Lambda functions read (the command has flags for
/// these).
pub const FUNCTIONS: &str = "Variables of the Lambda functions";

/// A bad configuration value: which variable, what value, what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration {variable}={value:?}: {message}")]
pub struct ConfigError {
    pub variable: String,
    pub value: String,
    pub message: String,
}

impl ConfigError {
    /// `variable`'s `value` is bad: `problem` says why.
    pub fn new(variable: &str, value: &str, problem: impl fmt::Display) -> ConfigError {
        ConfigError {
            variable: variable.to_string(),
            value: value.to_string(),
            message: problem.to_string(),
        }
    }
}

/// The one boolean parser: `true`, `1`, `yes`, `on` and `false`, `0`, `no`, `off`, in any case.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "`{}` is not a boolean (true or false, 1 or 0, yes or no, on or off)",
            s.trim()
        )),
    }
}

/// A duration a variable gives (see [`parse_duration`]), shown as `1h`, `5m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Duration);

impl Span {
    fn parse(s: &str) -> Result<Span, String> {
        let d = parse_duration(s).map_err(|e| e.to_string())?;
        Ok(Span(d.to_std().unwrap_or_default()))
    }

    fn of(d: chrono::Duration) -> Span {
        Span(d.to_std().unwrap_or_default())
    }

    fn chrono(self) -> chrono::Duration {
        chrono::Duration::from_std(self.0).unwrap_or_default()
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        humantime::format_duration(self.0).fmt(f)
    }
}

/// A duration within bounds, or `off` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrOff(pub Option<Duration>);

impl OrOff {
    /// The parser of a duration from `min` to `max` seconds, or `off`.
    fn within(min: u64, max: u64) -> impl Fn(&str) -> Result<OrOff, String> + Clone {
        move |v: &str| {
            if v == "off" {
                return Ok(OrOff(None));
            }
            let range = Duration::from_secs(min)..=Duration::from_secs(max);
            match Span::parse(v) {
                Ok(Span(d)) if range.contains(&d) => Ok(OrOff(Some(d))),
                _ => Err(format!(
                    "not a duration from {min}s to {max}s (e.g. {min}s, {}), or off",
                    humantime::format_duration(Duration::from_secs(max))
                )),
            }
        }
    }
}

impl fmt::Display for OrOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => Span(d).fmt(f),
            None => f.write_str("off"),
        }
    }
}

/// The items of a list separated by commas, trimmed, blank ones left out.
fn items(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Event kinds separated by commas, or `none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kinds(pub BTreeSet<EventKind>);

impl Kinds {
    fn parse(v: &str) -> Result<Kinds, String> {
        if v.trim() == "none" {
            return Ok(Kinds(BTreeSet::new()));
        }
        let kind = |s: &str| {
            (s.parse().ok())
                .filter(|k: &EventKind| k.configurable())
                .ok_or_else(|| format!("`{s}` is not an event kind"))
        };
        items(v).map(kind).collect::<Result<_, _>>().map(Kinds)
    }
}

impl fmt::Display for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|k| k.as_str()).collect();
        match names.is_empty() {
            true => f.write_str("none"),
            false => f.write_str(&names.join(",")),
        }
    }
}

/// The lifecycle hooks answered: these names, or none at all (`off`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hooks {
    Off,
    Named(BTreeSet<String>),
}

impl Hooks {
    /// `off`, or lifecycle hook names (1 to 255 of `[A-Za-z0-9-_/]`) separated by commas.
    fn parse(v: &str) -> Result<Hooks, String> {
        if v == "off" {
            return Ok(Hooks::Off);
        }
        let is_hook = |h: &str| {
            (1..=255).contains(&h.len())
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'))
        };
        let hooks: BTreeSet<String> = items(v).map(str::to_string).collect();
        match hooks.iter().find(|h| !is_hook(h)) {
            Some(bad) => Err(format!(
                "`{bad}` is not a lifecycle hook name (1 to 255 letters, digits, '-', '_' or '/')"
            )),
            None => Ok(Hooks::Named(hooks)),
        }
    }
}

/// Whether the sweeper updates the priority expander, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priorities {
    pub enabled: bool,
    pub settings: PrioritySettings,
}

impl Priorities {
    /// `true` or `false`, or options that mean `true` with them, separated by commas:
    /// `take-over` and `hot-share=SHARE` (`0.5`, `50%`).
    fn parse(value: &str) -> Result<Priorities, String> {
        let mut p = Priorities {
            enabled: true,
            settings: PrioritySettings::default(),
        };
        if let Ok(on) = parse_bool(value) {
            p.enabled = on;
            return Ok(p);
        }
        for option in items(value) {
            match option.split_once('=') {
                None if option == "take-over" => p.settings.take_over = true,
                Some(("hot-share", share)) => {
                    p.settings.hot_share = HotShare::parse(share).map_err(|e| e.to_string())?;
                }
                _ => {
                    return Err(format!(
                        "`{option}` is not true, false, take-over or hot-share=SHARE (e.g. \
                         hot-share=50%)"
                    ));
                }
            }
        }
        Ok(p)
    }
}

/// `FOREWARN_KUBE_QPS`: requests per second, 0 to 1,000,000.
fn qps(v: &str) -> Result<f64, &'static str> {
    v.parse::<f64>()
        .ok()
        .filter(|q| q.is_finite() && (0.0..=1e6).contains(q))
        .ok_or("not a number of requests per second (0 to 1000000; 0: no limit)")
}

/// `FOREWARN_ACCOUNT_ID`: 12 digits.
fn account_id(v: &str) -> Result<String, &'static str> {
    is_account_id(v)
        .then(|| v.to_string())
        .ok_or("not an AWS account id (12 digits)")
}

/// `FOREWARN_MEMBER_ROLE`: an IAM role name without a path (1 to 64 of letters, digits and
/// `+=,.@_-`).
fn role_name(v: &str) -> Result<String, &'static str> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b);
    ((1..=64).contains(&v.len()) && v.bytes().all(allowed))
        .then(|| v.to_string())
        .ok_or("not an IAM role name (1 to 64 letters, digits or +=,.@_-, no path)")
}

/// The upgrade page: its table of retired variables is the one list of them.
const UPGRADE: &str = include_str!("../../../docs/how-to/upgrade.md");

/// Where the setting of `name` lives now, when `name` is a retired variable: its row of the
/// upgrade page's table (`| \`NAME\` | home |`; `NAME_<KIND>` stands for every name of that
/// prefix).
pub fn retired_home(name: &str) -> Option<&'static str> {
    UPGRADE
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split_once("` | "))
        .filter(|(old, _)| old.starts_with("FOREWARN_"))
        .find(|(old, _)| match old.strip_suffix("<KIND>") {
            Some(prefix) => name.starts_with(prefix),
            None => *old == name,
        })
        .map(|(_, home)| home.trim_end().trim_end_matches('|').trim_end())
}

/// Where pools are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The DynamoDB pool table of this name (`FOREWARN_TABLE`), its continuation keys in the
    /// Secrets Manager secret `key_secret` (`FOREWARN_KEY_SECRET`; none: a store read for its
    /// pools alone, as `forewarn pools --table` does).
    Dynamo {
        table: String,
        key_secret: Option<String>,
    },
    /// The embedded store in this folder ([`Settings::state_dir`]).
    Embedded { dir: PathBuf },
}

/// Where facts about instances come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceChoice {
    /// Captured `aws ec2 describe-instances` output (`FOREWARN_INSTANCES_FILE`).
    File(PathBuf),
    /// EC2 `DescribeInstances` (the functions' default).
    Ec2,
    /// None at all: no pool is known (`forewarn replay` without `--instances` or `--ec2`).
    None,
}

/// Where nodes come from and actions go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterChoice {
    /// Captured `kubectl get nodes,pods -A -o json` output: plans against it, never an action.
    Snapshot(PathBuf),
    /// A live cluster, reached as `ClusterAccess` says.
    Live(ClusterAccess),
    /// No cluster at all: plans without nodes.
    None,
}

/// Which clusters a deployment serves (`FOREWARN_CLUSTERS`, else `FOREWARN_CLUSTER_NAME`). A
/// cluster is (account, region, name): what an entry does not say is the deployment's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterSelection {
    /// One cluster, named by nobody: every instance of the own account and region is its
    /// (`FOREWARN_CLUSTER_NAME` unset).
    Unnamed,
    /// These clusters (`FOREWARN_CLUSTERS=a,111122223333/b`, or `FOREWARN_CLUSTER_NAME=a`).
    Named(Vec<ClusterId>),
    /// Every cluster of these places (EKS `ListClusters` in each, or every context of the
    /// kubeconfig given), and these clusters besides: `FOREWARN_CLUSTERS=*` (the own place and
    /// every place the list names), `account/*`, `account/region/*`.
    Every {
        places: Vec<Place>,
        also: Vec<ClusterId>,
    },
}

impl ClusterSelection {
    /// The lone cluster, when one cluster is served (named or not): `Some(None)` for
    /// [`ClusterSelection::Unnamed`]; `None` when several may be.
    pub fn lone(&self) -> Option<Option<&ClusterId>> {
        match self {
            ClusterSelection::Unnamed => Some(None),
            ClusterSelection::Named(ids) if ids.len() == 1 => Some(Some(&ids[0])),
            _ => None,
        }
    }

    /// The accounts it names (besides the own account, which entries that name none are of):
    /// the only other accounts whose events are served.
    pub fn accounts(&self) -> BTreeSet<String> {
        let (places, ids): (&[Place], &[ClusterId]) = match self {
            ClusterSelection::Unnamed => (&[], &[]),
            ClusterSelection::Named(ids) => (&[], ids),
            ClusterSelection::Every { places, also } => (places, also),
        };
        places
            .iter()
            .filter_map(|p| p.account.clone())
            .chain(ids.iter().filter_map(|c| c.place.account.clone()))
            .collect()
    }

    /// `FOREWARN_CLUSTERS`'s value: entries separated by commas (each trimmed, none twice):
    /// clusters (`name`, `account/name`, `account/region/name`) and places' every cluster (`*`,
    /// `account/*`, `account/region/*`; `*` is every cluster of the own place and of every
    /// place the list names).
    pub fn parse(v: &str) -> Result<ClusterSelection, Invalid> {
        const EXPECTED: &str = "clusters separated by commas, none twice, each `name`, \
             `account/name` or `account/region/name` (a 12-digit account id, a region such as \
             `eu-west-1`, a name of 1 to 100 letters, digits, `-`, `_` or `.`), or `*`, \
             `account/*`, `account/region/*` for every cluster of the own place, an account or \
             an account's region";
        let invalid = Invalid { expected: EXPECTED };
        let (mut places, mut also, mut entries) = (Vec::new(), Vec::new(), Vec::new());
        for entry in v.split(',').map(str::trim) {
            let entry = Entry::parse(entry).map_err(|_| invalid)?;
            if entries.contains(&entry) {
                return Err(invalid);
            }
            match &entry {
                Entry::One(id) => also.push(id.clone()),
                Entry::Every(place) => places.push(place.clone()),
            }
            entries.push(entry);
        }
        if places.is_empty() {
            return Ok(ClusterSelection::Named(also));
        }
        if places.contains(&Place::default()) {
            // `*`: every place the list names too.
            places.extend(also.iter().map(|id| id.place.clone()));
        }
        places.sort();
        places.dedup();
        Ok(ClusterSelection::Every { places, also })
    }
}

/// Everything the functions and the command are configured by.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The decision core's configuration.
    pub config: Config,
    /// What a run may change: plan, dry run or act.
    pub mode: Mode,
    pub store: StoreChoice,
    /// The embedded store's folder: `FOREWARN_STATE_DIR`, else `$XDG_STATE_HOME/forewarn` (an
    /// absolute `XDG_STATE_HOME` only, as the XDG base directory specification asks), else
    /// `$HOME/.local/state/forewarn`, else `./.forewarn`. The store's when it is embedded, and
    /// the command's `--state-dir` when not given.
    pub state_dir: PathBuf,
    pub instances: InstanceChoice,
    /// Which clusters are served (see [`ClusterSelection`]).
    pub clusters: ClusterSelection,
    /// Where the lone cluster's nodes come from; with several clusters, whether they are live.
    pub cluster: ClusterChoice,
    /// How a live cluster is reached (EKS, else kubeconfig inference), whether or not one is in
    /// reach: what the command's `--kube` connects to (see [`Settings::access_of`] for a named
    /// one of several).
    pub cluster_access: ClusterAccess,
    /// `KUBECONFIG` is set: clusters are reached through its contexts.
    pub kubeconfig_given: bool,
    /// How the Kubernetes executor works (evictions at once, the Events' reporting instance).
    pub executor: ExecutorSettings,
    /// The client-side Kubernetes API rate limit: (requests per second, burst).
    pub kube_rate_limit: Option<(f64, u32)>,
    /// Where to post a message per action, if anywhere.
    pub webhook: Option<WebhookConfig>,
    /// Events handled at once within a batch.
    pub concurrency: usize,
    /// `RUST_LOG`: the log filter.
    pub rust_log: Option<String>,
    /// Whether and how the sweeper updates the priority expander.
    pub priorities: Priorities,
    /// The delay between two passes of a drain carried on by continuation messages; `None`
    /// (`off`): the handler carries its drains on in process, passes 5 s apart, as a replay does.
    pub drain_pass_interval: Option<Duration>,
    /// How long a drain's first evictions wait at most for its instance to leave the target
    /// groups of its cluster; `None` (`off`): they are not taken off (see
    /// [`crate::app::pipeline::Traffic`]).
    pub deregister_budget: Option<Duration>,
    /// What the cluster's policy ConfigMap may ask (the policy file is not limited).
    pub policy_allow: PolicyAllow,
    /// What forewarn makes of the AWS SDK's configuration (`AWS_MAX_ATTEMPTS` set or not).
    pub aws: AwsSettings,
    /// The own account and the role assumed in the others.
    pub accounts: AccountSettings,
    /// `AWS_LAMBDA_FUNCTION_NAME`: the process runs as this Lambda function (or under
    /// cargo-lambda's emulator), and writes metrics (see [`crate::app::telemetry`]).
    pub lambda_function: Option<String>,
}

/// A value its variable does not take: what it should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not {expected}")]
pub struct Invalid {
    pub expected: &'static str,
}

/// A policy file that could not be used: which, and why.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Invalid {
        path: PathBuf,
        source: crate::domain::policy::PolicyError,
    },
}

/// The policy in the YAML file at `path` (`--policy`, `FOREWARN_POLICY_FILE`).
pub fn read_policy(path: &Path) -> Result<crate::domain::policy::Policy, PolicyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    crate::domain::policy::Policy::parse(&text).map_err(|source| PolicyFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// The variables of the platform (not `FOREWARN_*`) the settings read, each with what
/// forewarn makes of it (the configuration page lists them).
pub const PLATFORM: &[(&str, &str)] = &[
    (
        "AWS_LAMBDA_FUNCTION_NAME",
        "set, forewarn runs as a Lambda function: it writes EMF metrics, and names the Kubernetes \
         Events' reporting instance after the function",
    ),
    ("HOSTNAME", "the Events' reporting instance otherwise"),
    (
        "KUBECONFIG",
        "clusters are reached through its contexts (kubeconfig inference) rather than EKS",
    ),
    (
        "KUBERNETES_SERVICE_HOST",
        "in a pod: the cluster is the pod's own (in-cluster configuration) rather than EKS's",
    ),
    (
        "XDG_STATE_HOME",
        "the default `FOREWARN_STATE_DIR` (an absolute path only)",
    ),
    ("HOME", "the default `FOREWARN_STATE_DIR` otherwise"),
    (
        "AWS_MAX_ATTEMPTS",
        "set, the AWS SDK's attempts per request are left as it says; otherwise 5",
    ),
    (
        "RUST_LOG",
        "the log filter (default `info` in the functions, `warn` in the command)",
    ),
];

/// The variables given, trimmed, the blank ones left out.
type Given = BTreeMap<String, String>;

impl Settings {
    /// The settings of the process environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        let vars = std::env::vars_os().filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            match value.into_string() {
                Ok(value) => Some(Ok((name, value))),
                Err(_) => (name.starts_with("FOREWARN_"))
                    .then(|| Err(ConfigError::new(&name, "", "not UTF-8 text"))),
            }
        });
        Settings::from_vars(vars.collect::<Result<Vec<_>, _>>()?)
    }

    /// The settings `vars` (name, value) give: [`Variables`] parsed from the `FOREWARN_*` ones
    /// (a retired one refused), with the platform's [`PLATFORM`].
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Result<Settings, ConfigError>
    where
        K: Into<String>,
        V: AsRef<str>,
    {
        let given: Given = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.as_ref().trim().to_string()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let variables = Variables::from_given(&given)?;
        Settings::new(variables, &given)
    }

    /// The settings of `v`, with the platform's variables of `given`.
    fn new(v: Variables, given: &Given) -> Result<Settings, ConfigError> {
        let clusters = v.clusters.clone().unwrap_or(ClusterSelection::Unnamed);
        let kubeconfig =
            given.contains_key("KUBECONFIG") || given.contains_key("KUBERNETES_SERVICE_HOST");
        let cluster_access = cluster_access(&clusters, v.clusters.is_some() && !kubeconfig);
        let state_dir = v.state_dir.clone().unwrap_or_else(|| state_dir(given));
        let accounts = accounts(&v, &clusters, given)?;
        Ok(Settings {
            config: config(&v)?,
            mode: if v.dry_run { Mode::DryRun } else { Mode::Act },
            store: match v.table {
                Some(table) if v.key_secret.is_none() => {
                    let why = "needs FOREWARN_KEY_SECRET, the secret of the continuation keys \
                               (the stack's <stack>-continuation-key)";
                    return Err(ConfigError::new("FOREWARN_TABLE", &table, why));
                }
                Some(table) => StoreChoice::Dynamo {
                    table,
                    key_secret: v.key_secret,
                },
                None => StoreChoice::Embedded {
                    dir: state_dir.clone(),
                },
            },
            state_dir,
            instances: v
                .instances_file
                .map_or(InstanceChoice::Ec2, InstanceChoice::File),
            cluster: match v.cluster_state_file {
                Some(path) => ClusterChoice::Snapshot(path),
                None if kubeconfig
                    || v.clusters.is_some()
                    || matches!(cluster_access, ClusterAccess::Eks(_)) =>
                {
                    ClusterChoice::Live(cluster_access.clone())
                }
                None => ClusterChoice::None,
            },
            accounts,
            clusters,
            cluster_access,
            kubeconfig_given: given.contains_key("KUBECONFIG"),
            executor: ExecutorSettings {
                reporting_instance: ["AWS_LAMBDA_FUNCTION_NAME", "HOSTNAME"]
                    .iter()
                    .find_map(|name| given.get(*name).cloned())
                    .map_or_else(|| "forewarn".into(), |v| v.chars().take(128).collect()),
                ..ExecutorSettings::default()
            },
            kube_rate_limit: match (v.kube_qps, v.environments) {
                (None, Some(n)) => Some((KUBE_SHARE.0 / f64::from(n), (KUBE_SHARE.1 / n).max(1))),
                (Some(qps), _) if qps > 0.0 => Some((qps, qps.ceil().max(1.0) as u32)),
                _ => None,
            },
            webhook: v.webhook_url.map(|url| WebhookConfig {
                url,
                template: v.webhook_template.unwrap_or_else(|| {
                    Template::parse(DEFAULT_TEMPLATE).expect("the default template is valid")
                }),
            }),
            concurrency: usize::from(v.concurrency),
            rust_log: given.get("RUST_LOG").cloned(),
            priorities: v.priorities,
            drain_pass_interval: v.drain_pass_interval.0,
            deregister_budget: v.deregister_budget.0,
            policy_allow: v.policy_allow,
            aws: AwsSettings {
                max_attempts_set: given.contains_key("AWS_MAX_ATTEMPTS"),
            },
            lambda_function: given.get("AWS_LAMBDA_FUNCTION_NAME").cloned(),
        })
    }

    /// How the served cluster `id` is reached, from a deployment whose own account and region
    /// are `own`: through the settings' EKS access when that names it (a cluster of the own
    /// place); else through the kubeconfig context named after it when a kubeconfig is given
    /// (its name for a cluster of the own place, else `account/region/name`: a cluster of
    /// another place never takes the own one's context); else through EKS (`DescribeCluster`
    /// and an IAM token in its account and region).
    pub fn access_of(&self, id: &ClusterId, own: &Place) -> ClusterAccess {
        let at_own = id.place.or(own) == *own;
        match &self.cluster_access {
            ClusterAccess::Eks(eks) if eks.cluster == id.name && at_own => {
                self.cluster_access.clone()
            }
            _ if self.kubeconfig_given && at_own => ClusterAccess::Context(id.name.clone()),
            _ if self.kubeconfig_given => ClusterAccess::Context(id.or(own).to_string()),
            _ => ClusterAccess::Eks(EksAccess {
                cluster: id.name.clone(),
                region: id.place.region.clone(),
            }),
        }
    }
}

impl Variables {
    /// The variables `given` sets, parsed as declared: each `FOREWARN_*` value is given to its
    /// field's parser (as its flag), so that the functions and the command read them alike.
    fn from_given(given: &Given) -> Result<Variables, ConfigError> {
        if let Some((name, value, home)) = given
            .iter()
            .filter(|(n, _)| n.starts_with("FOREWARN_"))
            .find_map(|(n, v)| Some((n, v, retired_home(n)?)))
        {
            return Err(ConfigError::new(
                name,
                value,
                format!("retired (see docs/how-to/upgrade.md): {home}"),
            ));
        }
        let command = Variables::command();
        let flags = command
            .get_arguments()
            .filter_map(|a| {
                let value = given.get(a.get_env()?.to_str()?)?;
                Some(format!("--{}={value}", a.get_long()?))
            })
            .collect::<Vec<_>>();
        // The values are the given ones only, never the process's own environment.
        command
            .mut_args(|a| a.env(None::<&str>))
            .try_get_matches_from(flags)
            .and_then(|mut m| Variables::from_arg_matches_mut(&mut m))
            .map_err(|e| config_error(&e, given))
    }
}

/// The [`ConfigError`] of clap's error `e` about a value of `given`: the variable of the flag it
/// names, the value (not shown for a secret) and what its parser said.
fn config_error(e: &clap::Error, given: &Given) -> ConfigError {
    use clap::error::{ContextKind, ContextValue};
    let flag = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(flag)) => flag.clone(),
        _ => String::new(),
    };
    let long = flag.trim_start_matches("--").split([' ', '=']).next();
    let command = Variables::command();
    let arg = command.get_arguments().find(|a| a.get_long() == long);
    let variable = arg
        .and_then(|a| a.get_env())
        .map_or_else(|| "FOREWARN_*".into(), |n| n.to_string_lossy().into_owned());
    let value = match given.get(&variable).cloned() {
        Some(url) if arg.is_some_and(|a| a.is_hide_env_values_set()) => redacted(&url),
        other => other.unwrap_or_default(),
    };
    let message = std::error::Error::source(e)
        .map(|s| s.to_string())
        .unwrap_or_else(|| e.kind().to_string());
    ConfigError::new(&variable, &value, message)
}

/// The decision core's configuration of `v`, its policy read from the policy file.
fn config(v: &Variables) -> Result<Config, ConfigError> {
    let defaults = Config::default();
    let (taint_key, taint_keys) = match v.taint_key.as_str() {
        "nth" => (defaults.taint_key.clone(), TaintKeys::Nth),
        key => (key.to_string(), TaintKeys::Forewarn),
    };
    let policy = match &v.policy_file {
        Some(path) => read_policy(path)
            .map_err(|e| ConfigError::new("FOREWARN_POLICY_FILE", &path.to_string_lossy(), e))?,
        None => defaults.policy.clone(),
    };
    Ok(Config {
        unavailable_kinds: v.unavailable_kinds.0.clone(),
        pool_ttl: v.pool_ttl.chrono(),
        taint_key,
        taint_keys,
        taint_effect: v.taint_effect,
        drain_timeout: v.drain_timeout.chrono(),
        complete_lifecycle_action: v.lifecycle_hooks != Some(Hooks::Off),
        lifecycle_hooks: match &v.lifecycle_hooks {
            Some(Hooks::Named(names)) if !names.is_empty() => Some(names.clone()),
            _ => None,
        },
        policy,
        ..defaults
    })
}

/// The embedded store's folder when `FOREWARN_STATE_DIR` is unset (see
/// [`Settings::state_dir`]).
fn state_dir(given: &Given) -> PathBuf {
    if let Some(xdg) = given
        .get("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return xdg.join("forewarn");
    }
    match given.get("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/forewarn"),
        None => PathBuf::from(".forewarn"),
    }
}

/// The accounts: the own one and the member role, serving the own account and the accounts
/// `clusters` names, no other. A member role needs the own account (else the own events would be
/// taken for a member's), and a named account other than the own one needs both.
fn accounts(
    v: &Variables,
    clusters: &ClusterSelection,
    given: &Given,
) -> Result<AccountSettings, ConfigError> {
    if let (Some(role), None) = (&v.member_role, &v.account_id) {
        return Err(ConfigError::new(
            "FOREWARN_MEMBER_ROLE",
            role,
            "needs FOREWARN_ACCOUNT_ID, the deployment's own account, whose events use its own \
             credentials",
        ));
    }
    let others: BTreeSet<String> = clusters
        .accounts()
        .into_iter()
        .filter(|a| Some(a) != v.account_id.as_ref())
        .collect();
    if let Some(other) = others.first()
        && v.member_role.is_none()
    {
        return Err(ConfigError::new(
            "FOREWARN_CLUSTERS",
            &given.get("FOREWARN_CLUSTERS").cloned().unwrap_or_default(),
            format!(
                "names account {other}, which is reached through the member role: set \
                 FOREWARN_MEMBER_ROLE and FOREWARN_ACCOUNT_ID (the deployment's own account), and \
                 deploy infra/member.yaml in that account"
            ),
        ));
    }
    Ok(AccountSettings {
        own: v.account_id.clone(),
        member_role: v.member_role.clone(),
        served: others,
    })
}

/// How a live cluster is reached: for the one cluster `FOREWARN_CLUSTERS` names by its name
/// alone (`eks`: it is set, outside a kubeconfig and a pod), through EKS, as every other served
/// cluster; else kubeconfig inference.
fn cluster_access(clusters: &ClusterSelection, eks: bool) -> ClusterAccess {
    match clusters.lone() {
        Some(Some(id)) if eks && id.place == Place::default() => ClusterAccess::Eks(EksAccess {
            cluster: id.name.clone(),
            ..EksAccess::default()
        }),
        _ => ClusterAccess::Kubeconfig,
    }
}

/// A line per variable (its name, default and what it is, cut short): the command's long help
/// ends with them.
pub fn summary() -> String {
    let mut out = String::from("Settings (docs/reference/configuration.md says each whole):\n");
    for arg in Variables::command().get_arguments() {
        let (Some(env), Some(help)) = (arg.get_env(), arg.get_help()) else {
            continue;
        };
        let help = help.to_string();
        let cut = ["; ", ": ", " (", ". "]
            .iter()
            .filter_map(|p| help.find(p))
            .min()
            .unwrap_or(help.len());
        let name = match arg.get_default_values() {
            [default] => format!("{}={}", env.to_string_lossy(), default.to_string_lossy()),
            _ => env.to_string_lossy().into_owned(),
        };
        let name = if name.len() > 40 {
            env.to_string_lossy().into_owned()
        } else {
            name
        };
        out.push_str(&format!("  {name:<40} {}\n", &help[..cut]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_vars(vars.iter().copied())
    }

    fn ids(v: &[&str]) -> Vec<ClusterId> {
        v.iter().map(|s| ClusterId::parse(s).unwrap()).collect()
    }

    /// Deployed = benchmarked: with the stack's FOREWARN_ENVIRONMENTS (the event source
    /// mapping's MaximumConcurrency) and no QPS, each execution environment takes its part of
    /// forewarn's share of the API server; a QPS set wins (its burst the QPS rounded up);
    /// neither: no limit.
    #[test]
    fn the_client_limit_is_the_share_divided_by_the_environments() {
        let limit = |vars: &[(&str, &str)]| settings(vars).map(|s| s.kube_rate_limit);
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "10")]),
            Ok(Some((20.0, 2)))
        );
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "1000")]),
            Ok(Some((0.2, 1)))
        );
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "10"), ("FOREWARN_KUBE_QPS", "50")]),
            Ok(Some((50.0, 50)))
        );
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "10"), ("FOREWARN_KUBE_QPS", "0")]),
            Ok(None),
            "0: no limit, as asked"
        );
        assert_eq!(limit(&[("FOREWARN_KUBE_QPS", "2.5")]), Ok(Some((2.5, 3))));
        assert_eq!(limit(&[]), Ok(None));
        for (name, bad) in [
            ("FOREWARN_ENVIRONMENTS", "0"),
            ("FOREWARN_ENVIRONMENTS", "1001"),
            ("FOREWARN_ENVIRONMENTS", "ten"),
            ("FOREWARN_KUBE_QPS", "fast"),
            ("FOREWARN_KUBE_QPS", "-1"),
            ("FOREWARN_KUBE_QPS", "NaN"),
        ] {
            let e = limit(&[(name, bad)]).unwrap_err();
            assert_eq!((e.variable.as_str(), e.value.as_str()), (name, bad), "{e}");
        }
    }

    #[test]
    fn the_clusters_served() {
        assert_eq!(settings(&[]).unwrap().clusters, ClusterSelection::Unnamed);
        let one = settings(&[("FOREWARN_CLUSTERS", "demo")]).unwrap();
        assert_eq!(one.clusters.lone(), Some(Some(&ids(&["demo"])[0])));
        let list = settings(&[("FOREWARN_CLUSTERS", " blue, green.eu ")]).unwrap();
        assert_eq!(
            list.clusters,
            ClusterSelection::Named(ids(&["blue", "green.eu"]))
        );
        assert_eq!(list.clusters.lone(), None);
        // Several clusters are live even with no kubeconfig: reached through EKS.
        assert!(matches!(list.cluster, ClusterChoice::Live(_)));
        let own = Place::of("123456789012", "eu-west-1");
        assert_eq!(
            list.access_of(&ids(&["blue"])[0], &own),
            ClusterAccess::Eks(EksAccess {
                cluster: "blue".into(),
                region: None,
            })
        );
        let kube = settings(&[("FOREWARN_CLUSTERS", "a,b"), ("KUBECONFIG", "/k")]).unwrap();
        assert_eq!(
            kube.access_of(&ids(&["a"])[0], &own),
            ClusterAccess::Context("a".into())
        );
        assert_eq!(
            kube.access_of(&ids(&["123456789012/eu-west-1/a"])[0], &own),
            ClusterAccess::Context("a".into()),
            "the own place's cluster, written whole"
        );
        let all = settings(&[("FOREWARN_CLUSTERS", "*")]).unwrap();
        assert_eq!(
            all.clusters,
            ClusterSelection::Every {
                places: vec![Place::default()],
                also: vec![]
            }
        );
        for bad in ["a,,b", "a,a", "a b", "x/y", &"n".repeat(101), "*,*"] {
            let e = settings(&[("FOREWARN_CLUSTERS", bad)]).unwrap_err();
            assert_eq!(
                (e.variable.as_str(), e.value.as_str()),
                ("FOREWARN_CLUSTERS", bad)
            );
            assert!(e.message.contains("clusters separated by commas"), "{e}");
        }
    }

    /// A cluster is (account, region, name): `name`, `account/name`, `account/region/name`;
    /// `*` is every cluster of the own place and of every place the list names, `account/*`
    /// every cluster of an account. The accounts named are the only others served, and they
    /// need the member role.
    #[test]
    fn clusters_of_other_accounts_and_regions() {
        const ORG: [(&str, &str); 2] = [
            ("FOREWARN_ACCOUNT_ID", "123456789012"),
            ("FOREWARN_MEMBER_ROLE", "forewarn-member"),
        ];
        let with = |clusters: &str| {
            let mut vars = ORG.to_vec();
            vars.push(("FOREWARN_CLUSTERS", clusters));
            settings(&vars)
        };
        let s = with("prod,111111111111/prod,222222222222/us-east-2/edge").unwrap();
        assert_eq!(
            s.clusters,
            ClusterSelection::Named(ids(&[
                "prod",
                "111111111111/prod",
                "222222222222/us-east-2/edge"
            ]))
        );
        let served: Vec<&str> = s.accounts.served.iter().map(String::as_str).collect();
        assert_eq!(served, ["111111111111", "222222222222"]);
        let member = |a: &str| Place {
            account: Some(a.into()),
            region: None,
        };
        let s = with("*,111111111111/prod,333333333333/*").unwrap();
        assert_eq!(
            s.clusters,
            ClusterSelection::Every {
                places: vec![
                    Place::default(),
                    member("111111111111"),
                    member("333333333333")
                ],
                also: ids(&["111111111111/prod"]),
            }
        );
        // The own account written out is the own account: no member role needed for it.
        let own = settings(&[
            ("FOREWARN_ACCOUNT_ID", "123456789012"),
            ("FOREWARN_CLUSTERS", "123456789012/prod"),
        ])
        .unwrap();
        assert!(own.accounts.served.is_empty());
        // Another account without the member role cannot be served: said at start, naming it.
        for vars in [
            vec![
                ("FOREWARN_ACCOUNT_ID", "123456789012"),
                ("FOREWARN_CLUSTERS", "prod,111111111111/prod"),
            ],
            vec![("FOREWARN_CLUSTERS", "111111111111/*")],
        ] {
            let e = settings(&vars).unwrap_err();
            assert_eq!(e.variable, "FOREWARN_CLUSTERS");
            assert!(e.to_string().contains("111111111111"), "{e}");
            assert!(e.to_string().contains("FOREWARN_MEMBER_ROLE"), "{e}");
        }
        // A member role needs the own account.
        let e = settings(&[("FOREWARN_MEMBER_ROLE", "forewarn-member")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_MEMBER_ROLE");
        assert!(e.message.contains("FOREWARN_ACCOUNT_ID"), "{e}");
        for (name, bad, says) in [
            ("FOREWARN_ACCOUNT_ID", "12345678901x", "12 digits"),
            ("FOREWARN_MEMBER_ROLE", "path/role", "IAM role name"),
        ] {
            let e = settings(&[(name, bad), ("FOREWARN_ACCOUNT_ID", "123456789012")]);
            let e = match name {
                "FOREWARN_ACCOUNT_ID" => settings(&[(name, bad)]).unwrap_err(),
                _ => e.unwrap_err(),
            };
            assert_eq!(e.variable, name);
            assert!(e.message.contains(says), "{e}");
        }
    }

    /// The one cluster FOREWARN_CLUSTERS names is reached through EKS outside a kubeconfig
    /// and a pod; with one, through it.
    #[test]
    fn the_lone_named_cluster_is_reached_through_eks_outside_a_kubeconfig() {
        let eks = settings(&[("FOREWARN_CLUSTERS", "demo")]).unwrap();
        let ClusterChoice::Live(ClusterAccess::Eks(access)) = &eks.cluster else {
            panic!("{:?}", eks.cluster);
        };
        assert_eq!(access.cluster, "demo");
        for (k, v) in [
            ("KUBECONFIG", "/k"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ] {
            let s = settings(&[("FOREWARN_CLUSTERS", "demo"), (k, v)]).unwrap();
            assert_eq!(
                s.cluster,
                ClusterChoice::Live(ClusterAccess::Kubeconfig),
                "{k}"
            );
        }
    }

    /// FOREWARN_PRIORITIES: a boolean, or options that mean on.
    #[test]
    fn priorities_take_a_boolean_or_options() {
        let p = |v: &str| settings(&[("FOREWARN_PRIORITIES", v)]).map(|s| s.priorities);
        assert!(!p("false").unwrap().enabled);
        let on = p("take-over, hot-share=50%").unwrap();
        assert!(on.enabled && on.settings.take_over);
        assert_eq!(on.settings.hot_share, HotShare::parse("0.5").unwrap());
        assert_eq!(p("true").unwrap(), settings(&[]).unwrap().priorities);
        for bad in ["sometimes", "hot-share=2", "take-over,x"] {
            let e = p(bad).unwrap_err();
            assert_eq!(
                (e.variable.as_str(), e.value.as_str()),
                ("FOREWARN_PRIORITIES", bad)
            );
        }
        assert_eq!(
            p("sometimes").unwrap_err().message,
            "`sometimes` is not true, false, take-over or hot-share=SHARE (e.g. hot-share=50%)"
        );
    }

    /// Every retired variable of the upgrade page's table is refused at start, naming its new
    /// home; none of them is a variable read now; a name nobody declared (a test's knob) is left
    /// alone.
    #[test]
    fn a_retired_variable_is_refused_naming_its_new_home() {
        let read: BTreeSet<String> = Variables::command()
            .get_arguments()
            .filter_map(|a| Some(a.get_env()?.to_string_lossy().into_owned()))
            .collect();
        let rows: Vec<(&str, &str)> = UPGRADE
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split_once("` | "))
            .filter(|(name, _)| name.starts_with("FOREWARN_"))
            .collect();
        assert!(rows.len() >= 20, "{rows:?}");
        for (row, home) in rows {
            let name = row.replace("<KIND>", "SPOT_INTERRUPTION");
            assert!(!read.contains(&name), "{name} is read and retired");
            let e = settings(&[(&name, "x")]).unwrap_err();
            assert_eq!(e.variable, name);
            let home = home.trim_end_matches(" |");
            assert!(e.message.ends_with(home), "{name}: {e}");
            if !row.ends_with("<KIND>") {
                assert!(settings(&[(&format!("{name}X"), "x")]).is_ok(), "{name}X");
            }
        }
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.config, Config::default());
        assert_eq!(s.mode, Mode::Act);
        assert_eq!(
            s.store,
            StoreChoice::Embedded {
                dir: PathBuf::from(".forewarn")
            }
        );
        assert_eq!(s.cluster, ClusterChoice::None);
        assert_eq!(s.cluster_access, ClusterAccess::Kubeconfig);
        assert_eq!(s.executor.reporting_instance, "forewarn");
        assert_eq!(s.aws, AwsSettings::default());
        assert_eq!(s.lambda_function, None);
        assert_eq!(s.rust_log, None);
        assert_eq!(s.instances, InstanceChoice::Ec2);
        assert_eq!(s.kube_rate_limit, None);
        assert_eq!(s.webhook, None);
        assert_eq!(s.concurrency, CONCURRENCY);
        assert_eq!(s.drain_pass_interval, Some(PASS_INTERVAL));
        assert_eq!(s.deregister_budget, Some(DEREGISTER_BUDGET));
        assert!(s.priorities.enabled);
        assert_eq!(s.priorities.settings, PrioritySettings::default());
        assert_eq!(s.policy_allow, PolicyAllow::default());
    }

    #[test]
    fn every_variable_read() {
        let s = settings(&[
            ("FOREWARN_CLUSTERS", "demo"),
            ("FOREWARN_DRY_RUN", "true"),
            ("FOREWARN_TABLE", " pools "),
            ("FOREWARN_KEY_SECRET", "keys"),
            ("FOREWARN_STATE_DIR", "/ignored/with/a/table"),
            ("FOREWARN_INSTANCES_FILE", "i.json"),
            ("FOREWARN_KUBE_QPS", "50"),
            ("FOREWARN_WEBHOOK_URL", "https://hooks.example.com/x"),
            ("FOREWARN_CONCURRENCY", "2"),
            ("FOREWARN_PRIORITIES", "false"),
            ("FOREWARN_POLICY_ALLOW", "cordon delete"),
            (
                "FOREWARN_UNAVAILABLE_KINDS",
                "spot-interruption, rebalance-recommendation",
            ),
            ("FOREWARN_POOL_TTL", "1h30m"),
            ("FOREWARN_TAINT_EFFECT", "NoExecute"),
            ("FOREWARN_DRAIN_TIMEOUT", "2d"),
            ("FOREWARN_LIFECYCLE_HOOKS", " forewarn-drain, other ,"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "2s"),
            ("FOREWARN_DEREGISTER_BUDGET", "off"),
            ("AWS_LAMBDA_FUNCTION_NAME", "forewarn-handler"),
            ("AWS_MAX_ATTEMPTS", "9"),
            ("RUST_LOG", "warn"),
        ])
        .unwrap();
        assert_eq!(s.mode, Mode::DryRun);
        assert_eq!(
            s.store,
            StoreChoice::Dynamo {
                table: "pools".into(),
                key_secret: Some("keys".into()),
            }
        );
        assert_eq!(s.instances, InstanceChoice::File(PathBuf::from("i.json")));
        assert_eq!(s.kube_rate_limit, Some((50.0, 50)));
        assert_eq!(
            s.webhook.map(|w| w.url).as_deref(),
            Some("https://hooks.example.com/x")
        );
        assert_eq!(s.concurrency, 2);
        assert!(!s.priorities.enabled);
        assert_eq!(s.policy_allow, PolicyAllow::parse("cordon,delete").unwrap());
        let c = &s.config;
        assert!(
            c.unavailable_kinds
                .contains(&EventKind::RebalanceRecommendation)
        );
        assert_eq!(c.pool_ttl, chrono::Duration::minutes(90));
        assert_eq!(c.taint_effect, TaintEffect::NoExecute);
        assert_eq!(c.drain_timeout, chrono::Duration::days(2));
        assert_eq!(
            c.lifecycle_hooks,
            Some(["forewarn-drain".to_string(), "other".to_string()].into())
        );
        assert_eq!(s.drain_pass_interval, Some(Duration::from_secs(2)));
        assert_eq!(s.deregister_budget, None);
        assert_eq!(s.lambda_function.as_deref(), Some("forewarn-handler"));
        assert_eq!(s.executor.reporting_instance, "forewarn-handler");
        assert!(s.aws.max_attempts_set);
        assert_eq!(s.rust_log.as_deref(), Some("warn"));
        let long = "f".repeat(200);
        let s = settings(&[("AWS_LAMBDA_FUNCTION_NAME", &long), ("HOSTNAME", "h")]).unwrap();
        assert_eq!(s.executor.reporting_instance, "f".repeat(128));
        assert_eq!(
            settings(&[("HOSTNAME", "laptop")])
                .unwrap()
                .executor
                .reporting_instance,
            "laptop"
        );
    }

    /// `off` completes no lifecycle action; `none` marks no pool unavailable.
    #[test]
    fn off_and_none() {
        let off = settings(&[("FOREWARN_LIFECYCLE_HOOKS", "off")])
            .unwrap()
            .config;
        assert!(!off.complete_lifecycle_action);
        assert_eq!(off.lifecycle_hooks, None);
        let none = settings(&[("FOREWARN_UNAVAILABLE_KINDS", "none")])
            .unwrap()
            .config;
        assert!(none.unavailable_kinds.is_empty());
        let e = settings(&[("FOREWARN_LIFECYCLE_HOOKS", "ok,bad name")]).unwrap_err();
        assert!(e.message.contains("`bad name`"), "{e}");
    }

    /// `nth`: NTH's keys for the kinds NTH taints for, forewarn's own for the others.
    #[test]
    fn the_taint_key_is_forewarns_or_nths() {
        let own = settings(&[("FOREWARN_TAINT_KEY", "example.com/going")])
            .unwrap()
            .config;
        assert_eq!(own.taint_keys, TaintKeys::Forewarn);
        assert_eq!(
            own.taint_key_for(EventKind::SpotInterruption),
            "example.com/going"
        );
        let nth = settings(&[("FOREWARN_TAINT_KEY", "nth")]).unwrap().config;
        assert_eq!(nth.taint_keys, TaintKeys::Nth);
        assert_eq!(
            nth.taint_key_for(EventKind::SpotInterruption),
            "aws-node-termination-handler/spot-itn"
        );
        assert_eq!(
            nth.taint_key_for(EventKind::Impaired),
            Config::default().taint_key
        );
    }

    /// Every boolean takes the same words, in any case.
    #[test]
    fn a_boolean_takes_the_same_words() {
        let dry = |v: &str| settings(&[("FOREWARN_DRY_RUN", v)]).map(|s| s.mode);
        for word in ["true", "1", "yes", "on", "TRUE", "Yes", " On "] {
            assert_eq!(dry(word), Ok(Mode::DryRun), "{word}");
        }
        for word in ["false", "0", "no", "off", "False", "NO", "oFF"] {
            assert_eq!(dry(word), Ok(Mode::Act), "{word}");
        }
        let e = dry("sometimes").unwrap_err();
        assert_eq!(
            e.message,
            "`sometimes` is not a boolean (true or false, 1 or 0, yes or no, on or off)"
        );
    }

    /// A variable set blank is unset: every setting keeps its default; and each default the
    /// declaration states is what the variable unset gives.
    #[test]
    fn blank_is_unset_and_every_default_is_the_default() {
        let names: Vec<String> = Variables::command()
            .get_arguments()
            .filter_map(|a| Some(a.get_env()?.to_string_lossy().into_owned()))
            .chain(PLATFORM.iter().map(|(n, _)| n.to_string()))
            .collect();
        let unset = format!("{:?}", settings(&[]).unwrap());
        for blank in ["", " ", "\t "] {
            let vars = names.iter().map(|n| (n.clone(), blank));
            assert_eq!(format!("{:?}", Settings::from_vars(vars).unwrap()), unset);
        }
        for arg in Variables::command().get_arguments() {
            let (Some(name), [default]) = (arg.get_env(), arg.get_default_values()) else {
                continue;
            };
            let vars = [(name.to_string_lossy(), default.to_string_lossy())];
            let set = Settings::from_vars(vars.iter().map(|(n, v)| (n.to_string(), v.as_ref())));
            assert_eq!(format!("{:?}", set.unwrap()), unset, "{name:?}={default:?}");
        }
    }

    #[test]
    fn state_dir_precedence() {
        let all = [
            ("FOREWARN_STATE_DIR", "/explicit"),
            ("XDG_STATE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        let dir = |vars: &[(&str, &str)]| settings(vars).unwrap().state_dir;
        assert_eq!(dir(&all), PathBuf::from("/explicit"));
        assert_eq!(dir(&all[1..]), PathBuf::from("/xdg/forewarn"));
        assert_eq!(
            dir(&[("XDG_STATE_HOME", "relative"), ("HOME", "/home/u")]),
            PathBuf::from("/home/u/.local/state/forewarn")
        );
        assert_eq!(dir(&[]), PathBuf::from(".forewarn"));
        // The table wins; the folder is still known (the command's --state-dir default).
        let table = [("FOREWARN_TABLE", "pools"), ("HOME", "/home/u")];
        let s = settings(&[table[0], table[1], ("FOREWARN_KEY_SECRET", "k")]).unwrap();
        assert_eq!(s.state_dir, PathBuf::from("/home/u/.local/state/forewarn"));
        // A table without the continuation keys' secret is refused, naming both.
        let e = settings(&table).unwrap_err().to_string();
        assert!(
            e.contains("FOREWARN_TABLE") && e.contains("FOREWARN_KEY_SECRET"),
            "{e}"
        );
    }

    #[test]
    fn where_the_cluster_comes_from() {
        let snapshot = settings(&[
            ("FOREWARN_CLUSTER_STATE_FILE", "c.json"),
            ("FOREWARN_CLUSTERS", "demo"),
        ])
        .unwrap();
        assert_eq!(
            snapshot.cluster,
            ClusterChoice::Snapshot(PathBuf::from("c.json"))
        );
        for (k, v) in [
            ("KUBECONFIG", "/k"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ] {
            assert_eq!(
                settings(&[(k, v)]).unwrap().cluster,
                ClusterChoice::Live(ClusterAccess::Kubeconfig)
            );
        }
    }

    #[test]
    fn bad_values_name_the_variable_and_the_value() {
        for (name, value, says) in [
            ("FOREWARN_CONCURRENCY", "0", "0"),
            ("FOREWARN_CONCURRENCY", "many", "many"),
            ("FOREWARN_POOL_TTL", "forever", "not a duration"),
            (
                "FOREWARN_DRAIN_TIMEOUT",
                "9223372036854775807",
                "longer than 10 years",
            ),
            (
                "FOREWARN_UNAVAILABLE_KINDS",
                "spot",
                "`spot` is not an event kind",
            ),
            ("FOREWARN_TAINT_EFFECT", "Never", "not a taint effect"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "0s", "from 1s to 900s"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "20m", "from 1s to 900s"),
            ("FOREWARN_DEREGISTER_BUDGET", "2m", "from 1s to 30s"),
            ("FOREWARN_DEREGISTER_BUDGET", "soon", "from 1s to 30s"),
            ("FOREWARN_POLICY_ALLOW", "cordon,evaporate", "`evaporate`"),
            (
                "FOREWARN_WEBHOOK_TEMPLATE",
                "{\"text\": \"{{nope}}\"}",
                "nope",
            ),
        ] {
            let err = settings(&[(name, value)]).unwrap_err();
            assert_eq!((err.variable.as_str(), err.value.as_str()), (name, value));
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    /// The webhook URL is a secret: an error about it, and the settings' `Debug` form, show its
    /// host at most.
    #[test]
    fn the_webhook_url_is_never_shown() {
        for url in [
            "ftp://hooks.example.com/services/XXXXsecret",
            "http://hooks.example.com/services/XXXXsecret",
        ] {
            let err = settings(&[("FOREWARN_WEBHOOK_URL", url)]).unwrap_err();
            assert_eq!(err.variable, "FOREWARN_WEBHOOK_URL");
            assert!(!err.to_string().contains("XXXXsecret"), "{err}");
            assert!(err.to_string().contains("hooks.example.com"), "{err}");
        }
        let s = settings(&[(
            "FOREWARN_WEBHOOK_URL",
            "https://hooks.example.com/services/XXXXsecret",
        )])
        .unwrap();
        assert!(!format!("{s:?}").contains("XXXXsecret"));
    }
}
