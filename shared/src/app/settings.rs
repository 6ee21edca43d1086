//! Every variable forewarn reads, read in one place into one [`Settings`] value: what the Lambda
//! functions and the `forewarn` command are wired from (see [`crate::app::wiring`]), and what the
//! command's flags default to. Nothing else reads the environment. Reading is pure — a `lookup`
//! function stands for the environment — and goes through [`Vars`]: a value is trimmed and a
//! blank one is unset, every boolean takes the same words and every duration the same forms
//! (see [`crate::domain::vars`]); a bad value is a [`ConfigError`] naming the variable, its value
//! and what is wrong with it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::adapters::accounts::{AccountSettings, ENV_ACCOUNT_ID, ENV_MEMBER_ROLE};
use crate::adapters::aws::AwsSettings;
use crate::adapters::kube::{
    ClusterAccess, ENV_CLUSTER_CA, ENV_CLUSTER_ENDPOINT, ENV_EKS_CLUSTER, ENV_ENVIRONMENTS,
    ENV_EVICTION_PARALLELISM, ENV_KUBE_BURST, ENV_KUBE_QPS, EksAccess, ExecutorSettings,
    KUBE_SHARE,
};
use crate::adapters::webhook::{ENV_ALLOW_HTTP, ENV_TEMPLATE, ENV_URL, WebhookConfig};
use crate::app::priorities::PrioritySettings;
use crate::domain::clusters::{ClusterId, Entry, Place, is_cluster_name};
use crate::domain::config::{Config, ConfigError, Mode, VARIABLES as CONFIG_VARIABLES};
use crate::domain::event::EventKind;
use crate::domain::policy::PolicyAllow;
use crate::domain::priorities::HotShare;
use crate::domain::vars::{Vars, parse_std_duration};

pub const ENV_DRY_RUN: &str = "FOREWARN_DRY_RUN";
pub const ENV_TABLE: &str = "FOREWARN_TABLE";
/// The Secrets Manager secret of the continuation keys (the stack's).
pub const ENV_KEY_SECRET: &str = "FOREWARN_KEY_SECRET";
pub const ENV_STATE_DIR: &str = "FOREWARN_STATE_DIR";
pub const ENV_INSTANCES_FILE: &str = "FOREWARN_INSTANCES_FILE";
pub const ENV_CLUSTER_STATE_FILE: &str = "FOREWARN_CLUSTER_STATE_FILE";
pub const ENV_CONCURRENCY: &str = "FOREWARN_CONCURRENCY";
pub const ENV_SAFETY_MARGIN: &str = "FOREWARN_SAFETY_MARGIN";
pub const ENV_LOG: &str = "FOREWARN_LOG";
pub const ENV_PRIORITIES: &str = "FOREWARN_PRIORITIES";
pub const ENV_PRIORITY_HOT_SHARE: &str = "FOREWARN_PRIORITY_HOT_SHARE";
pub const ENV_PRIORITY_TAKE_OVER: &str = "FOREWARN_PRIORITY_TAKE_OVER";
pub const ENV_DRAIN_PASS_INTERVAL: &str = "FOREWARN_DRAIN_PASS_INTERVAL";
pub const ENV_POLICY_FILE: &str = "FOREWARN_POLICY_FILE";
pub const ENV_POLICY_ALLOW: &str = "FOREWARN_POLICY_ALLOW";
/// How long a drain's first evictions wait at most for its instance to leave its load balancers,
/// or `off`.
pub const ENV_DEREGISTER_BUDGET: &str = "FOREWARN_DEREGISTER_BUDGET";
/// forewarn's share of each account's Elastic Load Balancing limits, in calls a second.
pub const ENV_ELB_RATE: &str = "FOREWARN_ELB_RATE";
/// The clusters one deployment serves: names separated by commas, or `*` for every EKS cluster
/// of the account and region (every context of a given kubeconfig).
pub const ENV_CLUSTERS: &str = "FOREWARN_CLUSTERS";
/// Events handled at once within a batch, unless `FOREWARN_CONCURRENCY` says otherwise (the
/// handler's default too).
pub const CONCURRENCY: usize = 8;

/// How long before the Lambda's deadline work stops, so the answer still gets out: the
/// benchmarked value (the handler's default too).
pub const SAFETY_MARGIN: Duration = Duration::from_secs(3);

/// The one cluster served, as before `FOREWARN_CLUSTERS` (retired: see [`RETIRED`]).
const ENV_CLUSTER_NAME: &str = "FOREWARN_CLUSTER_NAME";

/// A variable retired in favour of another home: still read, for one release, each use
/// logged as a warning naming that home (the upgrade page lists them:
/// `docs/how-to/upgrade.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// Its name; one ending in `_` stands for every variable of that prefix
    /// (`FOREWARN_ACTION_<KIND>`).
    pub name: &'static str,
    /// Where what it says is said now.
    pub home: &'static str,
}

/// Every retired variable, still read as before.
pub const RETIRED: &[Retired] = &[
    Retired {
        name: ENV_CLUSTER_NAME,
        home: "name the cluster in FOREWARN_CLUSTERS",
    },
    Retired {
        name: ENV_EKS_CLUSTER,
        home: "name the cluster in FOREWARN_CLUSTERS: outside a kubeconfig and a pod, the one \
               cluster named is reached through EKS",
    },
    Retired {
        name: ENV_CLUSTER_ENDPOINT,
        home: "none: EKS DescribeCluster gives the endpoint",
    },
    Retired {
        name: ENV_CLUSTER_CA,
        home: "none: EKS DescribeCluster gives the certificate authority",
    },
    Retired {
        name: "FOREWARN_TAINT_KEYS",
        home: "FOREWARN_TAINT_KEY=nth gives aws-node-termination-handler's keys",
    },
    Retired {
        name: "FOREWARN_DELETE_OWNED_ON",
        home: "a policy rule's `delete-owned-on` (kinds), e.g. `rules: [{name: all, \
               delete-owned-on: [spot-interruption]}]`",
    },
    Retired {
        name: "FOREWARN_SURGE",
        home: "a policy rule's `surge` (kinds; `[]`: none), e.g. `rules: [{name: all, surge: \
               []}]` in the ConfigMap forewarn/forewarn-policy",
    },
    Retired {
        name: "FOREWARN_EXCLUDE_FROM_LB",
        home: "a policy rule's `exclude-from-load-balancers` (true or false)",
    },
    Retired {
        name: "FOREWARN_COMPLETE_LIFECYCLE_ACTION",
        home: "FOREWARN_LIFECYCLE_HOOKS=off completes no lifecycle action",
    },
    Retired {
        name: "FOREWARN_LOG",
        home: "RUST_LOG, the log filter every Rust program reads",
    },
    Retired {
        name: "FOREWARN_KUBE_BURST",
        home: "none: the burst is FOREWARN_KUBE_QPS rounded up (the share's, divided by \
               FOREWARN_ENVIRONMENTS, without it)",
    },
    Retired {
        name: "FOREWARN_INTERRUPTION_NOTICE",
        home: "none: EC2's two minutes",
    },
    Retired {
        name: "FOREWARN_EVICTION_PARALLELISM",
        home: "none: 8 evictions in flight per drain, the benchmarked value",
    },
    Retired {
        name: "FOREWARN_IMPAIRED_AFTER",
        home: "none: 5 minutes, the sweep's period (impaired at two sweeps in a row)",
    },
    Retired {
        name: "FOREWARN_SAFETY_MARGIN",
        home: "none: work stops 3 s before the Lambda's deadline, the benchmarked value",
    },
    Retired {
        name: ENV_PRIORITY_HOT_SHARE,
        home: "FOREWARN_PRIORITIES=hot-share=SHARE",
    },
    Retired {
        name: ENV_PRIORITY_TAKE_OVER,
        home: "FOREWARN_PRIORITIES=take-over",
    },
    Retired {
        name: ENV_WEBHOOK_ALLOW_HTTP,
        home: "none: an http:// webhook is taken for a loopback host only (it never crosses the \
               network); any other needs https://",
    },
    Retired {
        name: ENV_ELB_RATE,
        home: "none: 3 deregistrations a second per account, the benchmarked share of ELB's limits",
    },
    Retired {
        name: "FOREWARN_LAUNCH_TIMEOUT",
        home: "none: 10 minutes for a launching instance's node to be Ready",
    },
    Retired {
        name: "FOREWARN_DEADLINE_MARGIN",
        home: "none: drains end 15 s before their instance goes, the benchmarked margin",
    },
    Retired {
        name: "FOREWARN_ACTION_",
        home: "give the action in the policy (FOREWARN_POLICY_FILE): a rule without `nodes` and \
               its `actions`, e.g. `rules: [{name: all, actions: {rebalance-recommendation: \
               cordon-drain}}]`",
    },
];

/// The retired variables `vars` sets, each with its home.
fn retired(vars: Vars) -> Vec<(String, &'static str)> {
    let action_names = EventKind::ALL
        .iter()
        .filter(|k| k.configurable())
        .map(|k| crate::domain::config::action_variable(*k));
    RETIRED
        .iter()
        .flat_map(|r| match r.name.strip_suffix('_') {
            Some(_) => action_names
                .clone()
                .map(|n| (n, r.home))
                .collect::<Vec<_>>(),
            None => vec![(r.name.to_string(), r.home)],
        })
        .filter(
            |(name, _)| match crate::domain::config::KIND_LISTS.contains(&name.as_str()) {
                // Set blank, a list of kinds names none: that is a value too.
                true => vars.get_or_blank(name).is_some(),
                false => vars.is_set(name),
            },
        )
        .collect()
}

/// Every variable the settings read besides the decision core's ([`CONFIG_VARIABLES`]); a
/// test checks the configuration reference ([`crate::app::reference`]) describes exactly these.
pub const VARIABLES: &[&str] = &[
    ENV_WEBHOOK_URL,
    ENV_WEBHOOK_TEMPLATE,
    ENV_WEBHOOK_ALLOW_HTTP,
    ENV_STATE_DIR,
    ENV_TABLE,
    ENV_KEY_SECRET,
    ENV_CLUSTERS,
    ENV_EKS_CLUSTER,
    ENV_CLUSTER_ENDPOINT,
    ENV_CLUSTER_CA,
    ENV_ACCOUNT_ID,
    ENV_MEMBER_ROLE,
    ENV_EVICTION_PARALLELISM,
    ENV_KUBE_QPS,
    ENV_KUBE_BURST,
    ENV_ENVIRONMENTS,
    ENV_LOG,
    ENV_DRY_RUN,
    ENV_INSTANCES_FILE,
    ENV_CLUSTER_STATE_FILE,
    ENV_CONCURRENCY,
    ENV_SAFETY_MARGIN,
    ENV_PRIORITIES,
    ENV_PRIORITY_HOT_SHARE,
    ENV_PRIORITY_TAKE_OVER,
    ENV_DRAIN_PASS_INTERVAL,
    ENV_POLICY_FILE,
    ENV_POLICY_ALLOW,
    ENV_DEREGISTER_BUDGET,
    ENV_ELB_RATE,
];
const ENV_WEBHOOK_URL: &str = ENV_URL;
const ENV_WEBHOOK_TEMPLATE: &str = ENV_TEMPLATE;
const ENV_WEBHOOK_ALLOW_HTTP: &str = ENV_ALLOW_HTTP;

/// Set by the Lambda runtime (and cargo-lambda's emulator): the function's name.
pub const ENV_LAMBDA_FUNCTION_NAME: &str = "AWS_LAMBDA_FUNCTION_NAME";
pub const ENV_HOSTNAME: &str = "HOSTNAME";
pub const ENV_KUBECONFIG: &str = "KUBECONFIG";
/// Set in every pod: the process runs in a cluster.
pub const ENV_KUBERNETES_SERVICE_HOST: &str = "KUBERNETES_SERVICE_HOST";
pub const ENV_XDG_STATE_HOME: &str = "XDG_STATE_HOME";
pub const ENV_HOME: &str = "HOME";
/// The AWS SDK reads it; forewarn only asks whether it is set (see [`AwsSettings`]).
pub const ENV_AWS_MAX_ATTEMPTS: &str = "AWS_MAX_ATTEMPTS";
/// The log filter when [`ENV_LOG`] is unset (or does not parse).
pub const ENV_RUST_LOG: &str = "RUST_LOG";

/// The variables of the platform (not `FOREWARN_*`) the settings read, each for what it says
/// of where forewarn runs. The configuration reference ([`crate::app::reference`]) says what.
pub const PLATFORM_VARIABLES: &[&str] = &[
    ENV_LAMBDA_FUNCTION_NAME,
    ENV_HOSTNAME,
    ENV_KUBECONFIG,
    ENV_KUBERNETES_SERVICE_HOST,
    ENV_XDG_STATE_HOME,
    ENV_HOME,
    ENV_AWS_MAX_ATTEMPTS,
    ENV_RUST_LOG,
];

/// Where pools are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The DynamoDB pool table of this name (`FOREWARN_TABLE`), its continuation keys in the
    /// Secrets Manager secret `key_secret` (`FOREWARN_KEY_SECRET`) when given, else in the
    /// table.
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
            .chain(ids.iter().filter_map(|c| c.account.clone()))
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
        let mut entries: Vec<Entry> = Vec::new();
        for entry in v.split(',').map(str::trim) {
            let entry = Entry::parse(entry).map_err(|_| Invalid { expected: EXPECTED })?;
            if entries.contains(&entry) {
                return Err(Invalid { expected: EXPECTED });
            }
            entries.push(entry);
        }
        let mut places: Vec<Place> = Vec::new();
        let mut also: Vec<ClusterId> = Vec::new();
        for entry in &entries {
            match entry {
                Entry::One(id) => also.push(id.clone()),
                Entry::Every(place) => places.push(place.clone()),
            }
        }
        if places.is_empty() {
            return Ok(ClusterSelection::Named(also));
        }
        if places.contains(&Place::default()) {
            // `*`: every place the list names too.
            places.extend(also.iter().map(ClusterId::place));
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
    /// How the variables say a live cluster is reached (EKS, else kubeconfig inference), whether
    /// or not one is in reach: what the command's `--kube` connects to (see
    /// [`Settings::access_of`] for a named one of several).
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
    /// Work stops this long before the Lambda's deadline, so the answer still gets out.
    pub safety_margin: Duration,
    /// The log filter (`FOREWARN_LOG`), when set.
    pub log_filter: Option<String>,
    /// `RUST_LOG`: the log filter when `FOREWARN_LOG` is unset or does not parse.
    pub rust_log: Option<String>,
    /// The sweeper updates the priority expander (`FOREWARN_PRIORITIES`, default true; it
    /// needs a live cluster and does nothing without base priorities).
    pub priorities_enabled: bool,
    /// `FOREWARN_PRIORITY_HOT_SHARE`, `FOREWARN_PRIORITY_TAKE_OVER`.
    pub priorities: PrioritySettings,
    /// The delay between two passes of a drain carried on by continuation messages
    /// (`FOREWARN_DRAIN_PASS_INTERVAL`, default 5 s); `None` (`off`): the handler carries its
    /// drains on in process, passes 5 s apart, as a replay does.
    pub drain_pass_interval: Option<Duration>,
    /// How long a drain's first evictions wait at most for its instance to leave the target
    /// groups of its cluster (`FOREWARN_DEREGISTER_BUDGET`, default 3 s); `None` (`off`): they
    /// are not taken off (see [`crate::app::pipeline::Traffic`]).
    pub deregister_budget: Option<Duration>,
    /// forewarn's share of each account's ELB limits (`FOREWARN_ELB_RATE`, default 3 calls a
    /// second): the rounds of traffic first are spaced to keep to it, and make at most this
    /// many calls at once.
    pub elb_rate: u32,
    /// What the cluster's policy ConfigMap may ask (`FOREWARN_POLICY_ALLOW`: action names
    /// separated by commas or spaces, or `all`; default every action but `delete` and `none`).
    /// The policy file (`FOREWARN_POLICY_FILE`) is not limited.
    pub policy_allow: PolicyAllow,
    /// What forewarn makes of the AWS SDK's configuration (`AWS_MAX_ATTEMPTS` set or not).
    pub aws: AwsSettings,
    /// The own account and the role assumed in the others (`FOREWARN_ACCOUNT_ID`,
    /// `FOREWARN_MEMBER_ROLE`).
    pub accounts: AccountSettings,
    /// `AWS_LAMBDA_FUNCTION_NAME`: the process runs as this Lambda function (or under
    /// cargo-lambda's emulator), and writes metrics (see [`crate::app::telemetry`]).
    pub lambda_function: Option<String>,
    /// The retired variables set (see [`RETIRED`]), each with its new home: telemetry warns
    /// of each once at start.
    pub retired: Vec<(String, &'static str)>,
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

impl Settings {
    /// The settings of the process environment: the one place forewarn reads it.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings `lookup` gives (see [`Vars`]: a variable that is unset or blank counts as
    /// unset):
    ///
    /// - the decision core's variables, through [`Config::from_vars`];
    /// - `FOREWARN_DRY_RUN` true: [`Mode::DryRun`], else [`Mode::Act`];
    /// - `FOREWARN_TABLE`: the DynamoDB table, else the embedded store in
    ///   [`Settings::state_dir`] (`FOREWARN_STATE_DIR`, `XDG_STATE_HOME`, `HOME`);
    /// - `FOREWARN_INSTANCES_FILE`: captured instances, else EC2;
    /// - `FOREWARN_CLUSTER_STATE_FILE`: captured cluster state; else `FOREWARN_EKS_CLUSTER`
    ///   (with `FOREWARN_CLUSTER_ENDPOINT`, `FOREWARN_CLUSTER_CA`); else kubeconfig inference
    ///   when `KUBECONFIG` is set or the process runs in a pod (`KUBERNETES_SERVICE_HOST`);
    ///   else no cluster;
    /// - `FOREWARN_EVICTION_PARALLELISM` and the Events' reporting instance
    ///   (`AWS_LAMBDA_FUNCTION_NAME`, else `HOSTNAME`, else `forewarn`);
    /// - `FOREWARN_KUBE_QPS`, `FOREWARN_KUBE_BURST`, `FOREWARN_WEBHOOK_URL`,
    ///   `FOREWARN_WEBHOOK_TEMPLATE`, `FOREWARN_WEBHOOK_ALLOW_HTTP`, `FOREWARN_CONCURRENCY`,
    ///   `FOREWARN_SAFETY_MARGIN`, `FOREWARN_LOG` (and `RUST_LOG`),
    ///   `FOREWARN_DRAIN_PASS_INTERVAL`, `FOREWARN_POLICY_ALLOW`;
    /// - `FOREWARN_PRIORITIES`, `FOREWARN_PRIORITY_HOT_SHARE`, `FOREWARN_PRIORITY_TAKE_OVER`;
    /// - `FOREWARN_ACCOUNT_ID`, `FOREWARN_MEMBER_ROLE`;
    /// - `AWS_MAX_ATTEMPTS` (set or not) and `AWS_LAMBDA_FUNCTION_NAME`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        Settings::from_vars(Vars::new(&lookup))
    }

    /// [`Settings::from_lookup`], from variables already wrapped.
    pub fn from_vars(vars: Vars) -> Result<Settings, ConfigError> {
        let clusters = clusters(vars)?;
        let cluster_access = cluster_access(vars, &clusters);
        let state_dir = state_dir(vars);
        let priorities = priorities(vars)?;
        let mut config = Config::from_vars(vars)?;
        if let Some(path) = vars.get(ENV_POLICY_FILE) {
            config.policy = read_policy(Path::new(&path))
                .map_err(|e| ConfigError::new(ENV_POLICY_FILE, &path, e))?;
        }
        Ok(Settings {
            config,
            mode: match vars.boolean(ENV_DRY_RUN)? {
                Some(true) => Mode::DryRun,
                Some(false) | None => Mode::Act,
            },
            store: match vars.get(ENV_TABLE) {
                Some(table) => StoreChoice::Dynamo {
                    table,
                    key_secret: vars.get(ENV_KEY_SECRET),
                },
                None => StoreChoice::Embedded {
                    dir: state_dir.clone(),
                },
            },
            state_dir,
            instances: match vars.get(ENV_INSTANCES_FILE) {
                Some(path) => InstanceChoice::File(PathBuf::from(path)),
                None => InstanceChoice::Ec2,
            },
            cluster: cluster(vars, &cluster_access, &clusters),
            accounts: accounts(vars, &clusters)?,
            clusters,
            cluster_access,
            kubeconfig_given: vars.is_set(ENV_KUBECONFIG),
            executor: executor(vars)?,
            kube_rate_limit: kube_rate_limit(vars)?,
            webhook: WebhookConfig::from_vars(vars)?,
            concurrency: vars
                .parse(ENV_CONCURRENCY, |v| {
                    positive(v).ok_or(Invalid {
                        expected: "a positive whole number",
                    })
                })?
                .unwrap_or(CONCURRENCY),
            safety_margin: vars
                .parse(ENV_SAFETY_MARGIN, parse_std_duration)?
                .unwrap_or(SAFETY_MARGIN),
            log_filter: vars.get(ENV_LOG),
            rust_log: vars.get(ENV_RUST_LOG),
            priorities_enabled: priorities.0,
            priorities: priorities.1,
            drain_pass_interval: vars
                .parse(ENV_DRAIN_PASS_INTERVAL, pass_interval)?
                .unwrap_or(Some(Duration::from_secs(5))),
            deregister_budget: vars
                .parse(ENV_DEREGISTER_BUDGET, deregister_budget)?
                .unwrap_or(Some(crate::app::pipeline::DEREGISTER_BUDGET)),
            elb_rate: vars
                .parse(ENV_ELB_RATE, |v| {
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=20).contains(n))
                        .ok_or(Invalid {
                            expected: "a number of calls a second from 1 to 20",
                        })
                })?
                .unwrap_or(crate::app::pipeline::ELB_RATE),
            policy_allow: vars
                .parse(ENV_POLICY_ALLOW, PolicyAllow::parse)?
                .unwrap_or_default(),
            aws: AwsSettings {
                max_attempts_set: vars.is_set(ENV_AWS_MAX_ATTEMPTS),
            },
            lambda_function: vars.get(ENV_LAMBDA_FUNCTION_NAME),
            retired: retired(vars),
        })
    }

    /// How the served cluster `id` is reached, from a deployment whose own account and region
    /// are `own`: through [`ENV_EKS_CLUSTER`]'s access when that names it (a cluster of the own
    /// place); else through the kubeconfig context named after it when a kubeconfig is given
    /// (its name for a cluster of the own place, else `account/region/name`: a cluster of
    /// another place never takes the own one's context); else through EKS (`DescribeCluster`
    /// and an IAM token in its account and region).
    pub fn access_of(&self, id: &ClusterId, own: &Place) -> ClusterAccess {
        let at_own = id.place().or(own) == *own;
        match &self.cluster_access {
            ClusterAccess::Eks(eks) if eks.cluster == id.name && at_own => {
                self.cluster_access.clone()
            }
            _ if self.kubeconfig_given && at_own => ClusterAccess::Context(id.name.clone()),
            _ if self.kubeconfig_given => ClusterAccess::Context(id.or(own).to_string()),
            _ => ClusterAccess::Eks(EksAccess {
                cluster: id.name.clone(),
                endpoint: None,
                ca_base64: None,
                region: id.region.clone(),
            }),
        }
    }

    /// Every `FOREWARN_*` variable the settings read (`FOREWARN_ACTION_<KIND>` as that prefix).
    pub fn variables() -> Vec<&'static str> {
        CONFIG_VARIABLES.iter().chain(VARIABLES).copied().collect()
    }
}

/// [`ENV_PRIORITIES`]: `true` (the default) or `false`, or options that mean `true` with
/// them, separated by commas: `take-over` (overwrite an expander ConfigMap forewarn did not
/// create) and `hot-share=SHARE` (`0.5`, `50%`). The retired `FOREWARN_PRIORITY_HOT_SHARE` and
/// `FOREWARN_PRIORITY_TAKE_OVER` are read first.
fn priorities(vars: Vars) -> Result<(bool, PrioritySettings), ConfigError> {
    let mut settings = PrioritySettings {
        hot_share: vars
            .parse(ENV_PRIORITY_HOT_SHARE, HotShare::parse)?
            .unwrap_or(HotShare::ALL),
        take_over: vars.boolean(ENV_PRIORITY_TAKE_OVER)?.unwrap_or(false),
    };
    let Some(value) = vars.get(ENV_PRIORITIES) else {
        return Ok((true, settings));
    };
    if let Ok(on) = crate::domain::vars::parse_bool(&value) {
        return Ok((on, settings));
    }
    for option in value.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            None if option == "take-over" => settings.take_over = true,
            Some(("hot-share", share)) => {
                settings.hot_share = HotShare::parse(share.trim())
                    .map_err(|e| ConfigError::new(ENV_PRIORITIES, &value, e))?;
            }
            _ => {
                return Err(ConfigError::new(
                    ENV_PRIORITIES,
                    &value,
                    format!(
                        "`{option}` is not true, false, take-over or hot-share=SHARE (e.g. \
                         hot-share=50%)"
                    ),
                ));
            }
        }
    }
    Ok((true, settings))
}

/// A whole number above 0.
fn positive(v: &str) -> Option<usize> {
    v.parse::<usize>().ok().filter(|n| *n > 0)
}

/// `FOREWARN_DRAIN_PASS_INTERVAL`: a duration from 1 s to 900 s, or `off` (`None`).
fn pass_interval(v: &str) -> Result<Option<Duration>, Invalid> {
    off_or_within(
        v,
        Duration::from_secs(1)..=Duration::from_secs(900),
        "a duration from 1s to 900s (SQS's longest message delay), or off",
    )
}

/// `FOREWARN_DEREGISTER_BUDGET`: a duration from 1 s to 30 s, or `off` (`None`).
fn deregister_budget(v: &str) -> Result<Option<Duration>, Invalid> {
    off_or_within(
        v,
        Duration::from_secs(1)..=Duration::from_secs(30),
        "a duration from 1s to 30s (the evictions of a two-minute warning wait that long at \
         most), or off",
    )
}

/// `off` (`None`), or a duration within `range`; else what was `expected`.
fn off_or_within(
    v: &str,
    range: std::ops::RangeInclusive<Duration>,
    expected: &'static str,
) -> Result<Option<Duration>, Invalid> {
    if v == "off" {
        return Ok(None);
    }
    parse_std_duration(v)
        .ok()
        .filter(|d| range.contains(d))
        .map(Some)
        .ok_or(Invalid { expected })
}

/// The embedded store's folder (see [`Settings::state_dir`]).
fn state_dir(vars: Vars) -> PathBuf {
    if let Some(dir) = vars.get(ENV_STATE_DIR) {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = vars
        .get(ENV_XDG_STATE_HOME)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return xdg.join("forewarn");
    }
    if let Some(home) = vars.get(ENV_HOME) {
        return PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("forewarn");
    }
    PathBuf::from(".forewarn")
}

/// The clusters served: [`ENV_CLUSTERS`], else [`ENV_CLUSTER_NAME`] as a one-cluster list,
/// else one unnamed cluster. Both set is an error: which one is meant cannot be told.
fn clusters(vars: Vars) -> Result<ClusterSelection, ConfigError> {
    let listed = vars.parse(ENV_CLUSTERS, ClusterSelection::parse)?;
    match (listed, vars.get(ENV_CLUSTER_NAME)) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            ENV_CLUSTERS,
            &vars.get(ENV_CLUSTERS).unwrap_or_default(),
            "set together with FOREWARN_CLUSTER_NAME, which it replaces: give the one cluster \
             in FOREWARN_CLUSTERS, or several, and unset FOREWARN_CLUSTER_NAME",
        )),
        (Some(listed), None) => Ok(listed),
        (None, Some(name)) if is_cluster_name(&name) => {
            Ok(ClusterSelection::Named(vec![ClusterId::at(
                &Place::default(),
                &name,
            )]))
        }
        (None, Some(name)) => Err(ConfigError::new(
            ENV_CLUSTER_NAME,
            &name,
            "not a cluster name (1 to 100 letters, digits, `-`, `_` or `.`; a cluster of \
             another account goes in FOREWARN_CLUSTERS)",
        )),
        (None, None) => Ok(ClusterSelection::Unnamed),
    }
}

/// The accounts: [`AccountSettings::from_vars`], serving the own account and the accounts
/// `clusters` names, no other. A named account other than the own one needs the member role
/// (and the own account, to tell it from the own one).
fn accounts(vars: Vars, clusters: &ClusterSelection) -> Result<AccountSettings, ConfigError> {
    let mut accounts = AccountSettings::from_vars(vars)?;
    let others: BTreeSet<String> = clusters
        .accounts()
        .into_iter()
        .filter(|a| Some(a) != accounts.own.as_ref())
        .collect();
    if let Some(other) = others.first()
        && (accounts.member_role.is_none() || accounts.own.is_none())
    {
        return Err(ConfigError::new(
            ENV_CLUSTERS,
            &vars.get(ENV_CLUSTERS).unwrap_or_default(),
            format!(
                "names account {other}, which is reached through the member role: set \
                 {ENV_MEMBER_ROLE} and {ENV_ACCOUNT_ID} (the deployment's own account), and \
                 deploy infra/member.yaml in that account"
            ),
        ));
    }
    accounts.served = others;
    Ok(accounts)
}

/// How a live cluster is reached: the retired [`ENV_EKS_CLUSTER`] (with
/// [`ENV_CLUSTER_ENDPOINT`] and [`ENV_CLUSTER_CA`]); else, for the one cluster
/// [`ENV_CLUSTERS`] names by its name alone, outside a kubeconfig (`KUBECONFIG` unset) and a
/// pod, through EKS, as every other served cluster; else kubeconfig inference.
fn cluster_access(vars: Vars, clusters: &ClusterSelection) -> ClusterAccess {
    let eks = |cluster: String| {
        ClusterAccess::Eks(EksAccess {
            cluster,
            endpoint: vars.get(ENV_CLUSTER_ENDPOINT),
            ca_base64: vars.get(ENV_CLUSTER_CA),
            region: None,
        })
    };
    if let Some(cluster) = vars.get(ENV_EKS_CLUSTER) {
        return eks(cluster);
    }
    let kubeconfig = vars.is_set(ENV_KUBECONFIG) || vars.is_set(ENV_KUBERNETES_SERVICE_HOST);
    match clusters.lone() {
        Some(Some(id))
            if vars.is_set(ENV_CLUSTERS) && !kubeconfig && id.place() == Place::default() =>
        {
            eks(id.name.clone())
        }
        _ => ClusterAccess::Kubeconfig,
    }
}

/// Where nodes come from: a capture, else a live cluster when one is in reach (EKS named, a
/// kubeconfig named, running in a pod, or several clusters or every one served — reached
/// through EKS when no kubeconfig is given), else none.
fn cluster(vars: Vars, access: &ClusterAccess, clusters: &ClusterSelection) -> ClusterChoice {
    if let Some(path) = vars.get(ENV_CLUSTER_STATE_FILE) {
        return ClusterChoice::Snapshot(PathBuf::from(path));
    }
    let in_reach = matches!(access, ClusterAccess::Eks(_))
        || vars.is_set(ENV_KUBECONFIG)
        || vars.is_set(ENV_KUBERNETES_SERVICE_HOST)
        || clusters.lone().is_none()
        || vars.is_set(ENV_CLUSTERS);
    if in_reach {
        ClusterChoice::Live(access.clone())
    } else {
        ClusterChoice::None
    }
}

/// The executor's settings: its defaults, with [`ENV_EVICTION_PARALLELISM`] and the Events'
/// reporting instance (the Lambda function's name, else the host name, else `forewarn`; at most
/// 128 characters).
fn executor(vars: Vars) -> Result<ExecutorSettings, ConfigError> {
    let defaults = ExecutorSettings::default();
    let parallelism = vars.parse(ENV_EVICTION_PARALLELISM, |v| {
        v.parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or(Invalid {
                expected: "a number of evictions from 1 to 100",
            })
    })?;
    let reporting_instance = [ENV_LAMBDA_FUNCTION_NAME, ENV_HOSTNAME]
        .iter()
        .find_map(|name| vars.get(name))
        .map(|v| v.chars().take(128).collect());
    Ok(ExecutorSettings {
        eviction_parallelism: parallelism.unwrap_or(defaults.eviction_parallelism),
        reporting_instance: reporting_instance.unwrap_or(defaults.reporting_instance.clone()),
        ..defaults
    })
}

/// The client-side rate limit [`ENV_KUBE_QPS`] and [`ENV_KUBE_BURST`] set (the burst is the
/// QPS rounded up unless set; a QPS of 0: none); without a QPS, [`KUBE_SHARE`] divided by
/// [`ENV_ENVIRONMENTS`] when the stack sets it (each execution environment its part of
/// forewarn's share of the API server), else none.
fn kube_rate_limit(vars: Vars) -> Result<Option<(f64, u32)>, ConfigError> {
    let environments = vars.parse(ENV_ENVIRONMENTS, |v| {
        v.parse::<u32>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or(Invalid {
                expected: "a whole number of execution environments (1 to 1000)",
            })
    })?;
    if !vars.is_set(ENV_KUBE_QPS)
        && let Some(n) = environments
    {
        let (qps, burst) = KUBE_SHARE;
        return Ok(Some((qps / f64::from(n), (burst / n).max(1))));
    }
    let qps = vars.parse(ENV_KUBE_QPS, |v| {
        v.parse::<f64>()
            .ok()
            .filter(|q| q.is_finite() && *q >= 0.0 && *q <= 1e6)
            .ok_or(Invalid {
                expected: "a number of requests per second (0 to 1000000; 0: no limit)",
            })
    })?;
    let Some(qps) = qps.filter(|q| *q > 0.0) else {
        return Ok(None);
    };
    let burst = vars.parse(ENV_KUBE_BURST, |v| {
        v.parse::<u32>().ok().filter(|b| *b >= 1).ok_or(Invalid {
            expected: "a positive whole number of requests",
        })
    })?;
    Ok(Some((qps, burst.unwrap_or(qps.ceil().max(1.0) as u32))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| vars.get(name).cloned())
    }

    /// Deployed = benchmarked: with the stack's FOREWARN_ENVIRONMENTS (the event source
    /// mapping's MaximumConcurrency) and no QPS, each execution environment takes its part of
    /// forewarn's share of the API server; a QPS set wins; neither: no limit.
    #[test]
    fn the_client_limit_is_the_share_divided_by_the_environments() {
        let limit = |vars: &[(&str, &str)]| settings(vars).unwrap().kube_rate_limit;
        assert_eq!(limit(&[("FOREWARN_ENVIRONMENTS", "10")]), Some((20.0, 2)));
        assert_eq!(limit(&[("FOREWARN_ENVIRONMENTS", "1000")]), Some((0.2, 1)));
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "10"), ("FOREWARN_KUBE_QPS", "50")]),
            Some((50.0, 50))
        );
        assert_eq!(
            limit(&[("FOREWARN_ENVIRONMENTS", "10"), ("FOREWARN_KUBE_QPS", "0")]),
            None,
            "0: no limit, as asked"
        );
        assert_eq!(limit(&[]), None);
        for bad in ["0", "1001", "ten"] {
            let e = settings(&[("FOREWARN_ENVIRONMENTS", bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("FOREWARN_ENVIRONMENTS"), "{e}");
        }
    }

    fn ids(v: &[&str]) -> Vec<ClusterId> {
        v.iter().map(|s| ClusterId::parse(s).unwrap()).collect()
    }

    #[test]
    fn the_clusters_served() {
        assert_eq!(settings(&[]).unwrap().clusters, ClusterSelection::Unnamed);
        let one = settings(&[("FOREWARN_CLUSTER_NAME", "demo")]).unwrap();
        assert_eq!(one.clusters, ClusterSelection::Named(ids(&["demo"])));
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
                endpoint: None,
                ca_base64: None,
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
            assert_eq!(e.variable, "FOREWARN_CLUSTERS", "{bad}: {e}");
        }
        let both = settings(&[("FOREWARN_CLUSTERS", "a"), ("FOREWARN_CLUSTER_NAME", "a")]);
        let e = both.unwrap_err().to_string();
        assert!(
            e.contains("FOREWARN_CLUSTER_NAME, which it replaces"),
            "{e}"
        );
        let e = settings(&[("FOREWARN_CLUSTER_NAME", "111111111111/a")]).unwrap_err();
        assert_eq!(e.variable, "FOREWARN_CLUSTER_NAME");
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
        let s = with("*,111111111111/prod,333333333333/*").unwrap();
        let member = |a: &str| Place {
            account: Some(a.into()),
            region: None,
        };
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
        let s = with("333333333333/*").unwrap();
        assert_eq!(
            s.clusters,
            ClusterSelection::Every {
                places: vec![member("333333333333")],
                also: vec![],
            }
        );
        // The own account written out is the own account: no member role needed for it.
        let own = settings(&[
            ("FOREWARN_ACCOUNT_ID", "123456789012"),
            ("FOREWARN_CLUSTERS", "123456789012/prod"),
        ])
        .unwrap();
        assert!(own.accounts.served.is_empty());
        // Another account without the member role (or without the own account) cannot be
        // served: said at start, naming it.
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
    }

    /// The one cluster FOREWARN_CLUSTERS names is reached through EKS outside a kubeconfig
    /// and a pod (what the retired FOREWARN_EKS_CLUSTER said); with one, through it.
    #[test]
    fn the_lone_named_cluster_is_reached_through_eks_outside_a_kubeconfig() {
        let eks = settings(&[("FOREWARN_CLUSTERS", "demo")]).unwrap();
        let ClusterChoice::Live(ClusterAccess::Eks(access)) = &eks.cluster else {
            panic!("{:?}", eks.cluster);
        };
        assert_eq!(access.cluster, "demo");
        let retired = settings(&[
            ("FOREWARN_EKS_CLUSTER", "demo"),
            ("FOREWARN_CLUSTERS", "demo"),
        ])
        .unwrap();
        assert_eq!(retired.cluster, eks.cluster);
        assert_eq!(retired.retired[0].0, "FOREWARN_EKS_CLUSTER");
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
        // The retired FOREWARN_CLUSTER_NAME keeps its meaning: no cluster unless one is in reach.
        let named = settings(&[("FOREWARN_CLUSTER_NAME", "demo")]).unwrap();
        assert_eq!(named.cluster, ClusterChoice::None);
    }

    /// FOREWARN_PRIORITIES: a boolean, or options that mean on.
    #[test]
    fn priorities_take_a_boolean_or_options() {
        let p = |v: &str| settings(&[("FOREWARN_PRIORITIES", v)]);
        assert!(!p("false").unwrap().priorities_enabled);
        let on = p("take-over, hot-share=50%").unwrap();
        assert!(on.priorities_enabled && on.priorities.take_over);
        assert_eq!(on.priorities.hot_share, HotShare::parse("0.5").unwrap());
        assert_eq!(
            p("true").unwrap().priorities,
            settings(&[]).unwrap().priorities
        );
        let retired = settings(&[
            ("FOREWARN_PRIORITY_TAKE_OVER", "true"),
            ("FOREWARN_PRIORITY_HOT_SHARE", "50%"),
        ])
        .unwrap();
        assert_eq!(retired.priorities, on.priorities);
        for bad in ["sometimes", "hot-share=2", "take-over,x"] {
            let e = p(bad).unwrap_err();
            assert_eq!(
                (e.variable.as_str(), e.value.as_str()),
                ("FOREWARN_PRIORITIES", bad)
            );
        }
    }

    /// A retired variable is still read as before, and named with its home, once.
    #[test]
    fn retired_variables_are_read_and_named_with_their_home() {
        let s = settings(&[
            ("FOREWARN_CLUSTER_NAME", "blue"),
            ("FOREWARN_TAINT_KEYS", "nth"),
            ("FOREWARN_ACTION_SPOT_INTERRUPTION", "cordon"),
            ("FOREWARN_ACTION_IMPAIRED", " "),
            ("FOREWARN_SURGE", " "),
        ])
        .unwrap();
        assert_eq!(s.clusters, ClusterSelection::Named(ids(&["blue"])));
        assert_eq!(s.config.taint_keys, crate::domain::config::TaintKeys::Nth);
        assert_eq!(
            s.config.action(EventKind::SpotInterruption),
            crate::domain::config::Action::Cordon
        );
        let named: Vec<&str> = s.retired.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            named,
            [
                "FOREWARN_CLUSTER_NAME",
                "FOREWARN_TAINT_KEYS",
                "FOREWARN_SURGE",
                "FOREWARN_ACTION_SPOT_INTERRUPTION"
            ],
            "a blank one is unset, but a blank list of kinds names none"
        );
        assert!(s.retired[0].1.contains("FOREWARN_CLUSTERS"));
        assert!(s.retired[1].1.contains("FOREWARN_TAINT_KEY=nth"));
        assert!(s.config.surge_kinds.is_empty());
        assert!(s.retired[2].1.contains("`surge`"));
        assert!(s.retired[3].1.contains("policy"));
        assert!(settings(&[]).unwrap().retired.is_empty());
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
        assert_eq!(s.concurrency, 8);
        assert_eq!(s.safety_margin, Duration::from_secs(3));
        assert_eq!(s.drain_pass_interval, Some(Duration::from_secs(5)));
        assert_eq!(s.executor.eviction_parallelism, 8);
        assert_eq!(s.log_filter, None);
        assert!(s.priorities_enabled);
        assert_eq!(s.priorities, PrioritySettings::default());
        assert_eq!(s.policy_allow, PolicyAllow::default());
    }

    #[test]
    fn every_variable_read() {
        let s = settings(&[
            ("FOREWARN_CLUSTER_NAME", "demo"),
            ("FOREWARN_DRY_RUN", "true"),
            ("FOREWARN_TABLE", " pools "),
            ("FOREWARN_STATE_DIR", "/ignored/with/a/table"),
            ("FOREWARN_INSTANCES_FILE", "i.json"),
            ("FOREWARN_EKS_CLUSTER", "demo"),
            ("FOREWARN_CLUSTER_ENDPOINT", "https://x.example.com"),
            ("FOREWARN_EVICTION_PARALLELISM", "3"),
            ("FOREWARN_KUBE_QPS", "50"),
            ("FOREWARN_KUBE_BURST", "10"),
            ("FOREWARN_WEBHOOK_URL", "http://hooks.example.com/x"),
            ("FOREWARN_WEBHOOK_ALLOW_HTTP", "true"),
            ("FOREWARN_CONCURRENCY", "2"),
            ("FOREWARN_SAFETY_MARGIN", "5s"),
            ("FOREWARN_LOG", "debug"),
            ("FOREWARN_PRIORITIES", "false"),
            ("FOREWARN_PRIORITY_HOT_SHARE", "50%"),
            ("FOREWARN_PRIORITY_TAKE_OVER", "true"),
            ("FOREWARN_POLICY_ALLOW", "cordon delete"),
            ("AWS_LAMBDA_FUNCTION_NAME", "forewarn-handler"),
            ("AWS_MAX_ATTEMPTS", "9"),
            ("RUST_LOG", "warn"),
        ])
        .unwrap();
        assert_eq!(s.config.cluster_name.as_deref(), Some("demo"));
        assert_eq!(s.mode, Mode::DryRun);
        assert_eq!(
            s.store,
            StoreChoice::Dynamo {
                table: "pools".into(),
                key_secret: None,
            }
        );
        assert_eq!(s.instances, InstanceChoice::File(PathBuf::from("i.json")));
        match &s.cluster {
            ClusterChoice::Live(ClusterAccess::Eks(eks)) => {
                assert_eq!(eks.cluster, "demo");
                assert_eq!(eks.endpoint.as_deref(), Some("https://x.example.com"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.executor.eviction_parallelism, 3);
        assert_eq!(s.kube_rate_limit, Some((50.0, 10)));
        assert_eq!(
            s.webhook.map(|w| w.url).as_deref(),
            Some("http://hooks.example.com/x")
        );
        assert_eq!(s.concurrency, 2);
        assert_eq!(s.safety_margin, Duration::from_secs(5));
        assert_eq!(s.log_filter.as_deref(), Some("debug"));
        assert!(!s.priorities_enabled);
        assert_eq!(s.priorities.hot_share, HotShare::parse("0.5").unwrap());
        assert!(s.priorities.take_over);
        assert_eq!(s.policy_allow, PolicyAllow::parse("cordon,delete").unwrap());
        assert_eq!(s.lambda_function.as_deref(), Some("forewarn-handler"));
        assert_eq!(s.executor.reporting_instance, "forewarn-handler");
        assert!(s.aws.max_attempts_set);
        assert_eq!(s.rust_log.as_deref(), Some("warn"));
    }

    /// Every boolean takes the same words, in any case; a blank one is unset (its default).
    #[test]
    fn every_boolean_takes_the_same_words() {
        let http = "http://hooks.example.com/x";
        let read = |name: &str, value: &str| {
            let s = if name == "FOREWARN_WEBHOOK_ALLOW_HTTP" {
                settings(&[(name, value), ("FOREWARN_WEBHOOK_URL", http)])?
            } else {
                settings(&[(name, value)])?
            };
            Ok::<bool, ConfigError>(match name {
                "FOREWARN_DRY_RUN" => s.mode == Mode::DryRun,
                "FOREWARN_PRIORITIES" => s.priorities_enabled,
                "FOREWARN_PRIORITY_TAKE_OVER" => s.priorities.take_over,
                "FOREWARN_EXCLUDE_FROM_LB" => s.config.exclude_from_load_balancers,
                "FOREWARN_COMPLETE_LIFECYCLE_ACTION" => s.config.complete_lifecycle_action,
                "FOREWARN_WEBHOOK_ALLOW_HTTP" => s.webhook.is_some(),
                other => panic!("{other}"),
            })
        };
        let booleans = [
            ("FOREWARN_DRY_RUN", false),
            ("FOREWARN_PRIORITIES", true),
            ("FOREWARN_PRIORITY_TAKE_OVER", false),
            ("FOREWARN_EXCLUDE_FROM_LB", true),
            ("FOREWARN_COMPLETE_LIFECYCLE_ACTION", true),
        ];
        for (name, default) in booleans {
            for word in ["true", "1", "yes", "on", "TRUE", "Yes", " On "] {
                assert_eq!(read(name, word), Ok(true), "{name}={word}");
            }
            for word in ["false", "0", "no", "off", "False", "NO", "oFF"] {
                assert_eq!(read(name, word), Ok(false), "{name}={word}");
            }
            for blank in ["", "  "] {
                assert_eq!(read(name, blank), Ok(default), "{name}={blank:?}");
            }
            let e = read(name, "sometimes").unwrap_err();
            assert_eq!((e.variable.as_str(), e.value.as_str()), (name, "sometimes"));
            // FOREWARN_PRIORITIES takes options too, and says so.
            let expected = match name {
                "FOREWARN_PRIORITIES" => {
                    "`sometimes` is not true, false, take-over or hot-share=SHARE (e.g. \
                     hot-share=50%)"
                }
                _ => "`sometimes` is not a boolean (true or false, 1 or 0, yes or no, on or off)",
            };
            assert_eq!(e.message, expected);
        }
        // An http:// webhook URL is taken only when allowed.
        for word in ["yes", "ON", "1"] {
            assert_eq!(
                read("FOREWARN_WEBHOOK_ALLOW_HTTP", word),
                Ok(true),
                "{word}"
            );
        }
        for word in ["no", "off", "", " "] {
            let e = read("FOREWARN_WEBHOOK_ALLOW_HTTP", word).unwrap_err();
            assert_eq!(e.variable, "FOREWARN_WEBHOOK_URL", "{word}");
        }
    }

    /// A variable set blank is unset: every setting keeps its default (but the three lists of
    /// event kinds, for which a blank value names no kind).
    #[test]
    fn blank_is_unset_everywhere() {
        let lists = [
            "FOREWARN_DELETE_OWNED_ON",
            "FOREWARN_UNAVAILABLE_KINDS",
            "FOREWARN_SURGE",
        ];
        let names: Vec<&str> = Settings::variables()
            .into_iter()
            .chain(PLATFORM_VARIABLES.iter().copied())
            .filter(|v| !lists.contains(v))
            .collect();
        for blank in ["", " ", "\t "] {
            let vars: Vec<(&str, &str)> = names.iter().map(|n| (*n, blank)).collect();
            let s = settings(&vars).unwrap();
            let d = settings(&[]).unwrap();
            assert_eq!(s.config, d.config);
            assert_eq!(s.mode, d.mode);
            assert_eq!(s.store, d.store);
            assert_eq!(s.instances, d.instances);
            assert_eq!(s.cluster, d.cluster);
            assert_eq!(s.cluster_access, d.cluster_access);
            assert_eq!(s.kube_rate_limit, d.kube_rate_limit);
            assert_eq!(s.webhook, d.webhook);
            assert_eq!(s.concurrency, d.concurrency);
            assert_eq!(s.safety_margin, d.safety_margin);
            assert_eq!(s.log_filter, d.log_filter);
            assert_eq!(s.rust_log, d.rust_log);
            assert_eq!(s.priorities_enabled, d.priorities_enabled);
            assert_eq!(s.priorities, d.priorities);
            assert_eq!(s.drain_pass_interval, d.drain_pass_interval);
            assert_eq!(s.aws, d.aws);
            assert_eq!(s.lambda_function, d.lambda_function);
            assert_eq!(
                s.executor.eviction_parallelism,
                d.executor.eviction_parallelism
            );
            assert_eq!(s.executor.reporting_instance, d.executor.reporting_instance);
        }
        let none = settings(&[(lists[0], ""), (lists[1], " ")]).unwrap();
        assert!(none.config.delete_owned_on.is_empty());
        assert!(none.config.unavailable_kinds.is_empty());
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
        assert_eq!(
            dir(&[("FOREWARN_STATE_DIR", " "), ("HOME", "/home/u")]),
            PathBuf::from("/home/u/.local/state/forewarn")
        );
        assert_eq!(dir(&[]), PathBuf::from(".forewarn"));
        // The table wins; the folder is still known (the command's --state-dir default).
        let s = settings(&[("FOREWARN_TABLE", "pools"), ("HOME", "/home/u")]).unwrap();
        assert_eq!(
            s.store,
            StoreChoice::Dynamo {
                table: "pools".into(),
                key_secret: None,
            }
        );
        assert_eq!(s.state_dir, PathBuf::from("/home/u/.local/state/forewarn"));
    }

    #[test]
    fn access_from_the_environment() {
        let access = |vars: &[(&str, &str)]| settings(vars).unwrap().cluster_access;
        assert_eq!(access(&[]), ClusterAccess::Kubeconfig);
        assert_eq!(
            access(&[("FOREWARN_EKS_CLUSTER", " ")]),
            ClusterAccess::Kubeconfig
        );
        assert_eq!(
            access(&[
                ("FOREWARN_EKS_CLUSTER", "demo"),
                ("FOREWARN_CLUSTER_ENDPOINT", "https://x.eks.amazonaws.com"),
            ]),
            ClusterAccess::Eks(EksAccess {
                cluster: "demo".into(),
                endpoint: Some("https://x.eks.amazonaws.com".into()),
                ca_base64: None,
                region: None,
            })
        );
    }

    #[test]
    fn rate_limit_from_the_environment() {
        let limit = |qps: &str, burst: &str| {
            settings(&[("FOREWARN_KUBE_QPS", qps), ("FOREWARN_KUBE_BURST", burst)])
                .map(|s| s.kube_rate_limit)
        };
        assert_eq!(limit("", "10"), Ok(None));
        assert_eq!(limit(" ", ""), Ok(None));
        assert_eq!(limit("0", ""), Ok(None));
        assert_eq!(limit("2.5", ""), Ok(Some((2.5, 3))));
        assert_eq!(limit("200", "20"), Ok(Some((200.0, 20))));
        for (qps, burst, variable) in [
            ("fast", "", "FOREWARN_KUBE_QPS"),
            ("-1", "", "FOREWARN_KUBE_QPS"),
            ("NaN", "", "FOREWARN_KUBE_QPS"),
            ("5", "0", "FOREWARN_KUBE_BURST"),
        ] {
            let e = limit(qps, burst).unwrap_err();
            assert_eq!(e.variable, variable, "{e}");
        }
    }

    #[test]
    fn executor_settings_from_the_environment() {
        let s = settings(&[
            ("FOREWARN_EVICTION_PARALLELISM", "3"),
            ("HOSTNAME", "laptop"),
        ])
        .unwrap();
        assert_eq!(s.executor.eviction_parallelism, 3);
        assert_eq!(s.executor.reporting_instance, "laptop");
        let e = settings(&[("FOREWARN_EVICTION_PARALLELISM", "0")]).unwrap_err();
        assert_eq!(e.variable, ENV_EVICTION_PARALLELISM);
        assert_eq!(
            e.to_string(),
            "configuration FOREWARN_EVICTION_PARALLELISM=\"0\": not a number of evictions from 1 \
             to 100"
        );
        let long = "f".repeat(200);
        let s = settings(&[("AWS_LAMBDA_FUNCTION_NAME", &long), ("HOSTNAME", "h")]).unwrap();
        assert_eq!(s.executor.reporting_instance, "f".repeat(128));
    }

    #[test]
    fn where_the_cluster_comes_from() {
        let snapshot = settings(&[
            ("FOREWARN_CLUSTER_STATE_FILE", "c.json"),
            ("FOREWARN_EKS_CLUSTER", "demo"),
        ])
        .unwrap();
        assert_eq!(
            snapshot.cluster,
            ClusterChoice::Snapshot(PathBuf::from("c.json"))
        );
        let kubeconfig = settings(&[("KUBECONFIG", "/k")]).unwrap();
        assert_eq!(
            kubeconfig.cluster,
            ClusterChoice::Live(ClusterAccess::Kubeconfig)
        );
        let in_a_pod = settings(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]).unwrap();
        assert_eq!(
            in_a_pod.cluster,
            ClusterChoice::Live(ClusterAccess::Kubeconfig)
        );
        let blank = settings(&[("KUBECONFIG", " "), ("FOREWARN_CLUSTER_STATE_FILE", "")]).unwrap();
        assert_eq!(blank.cluster, ClusterChoice::None);
    }

    #[test]
    fn drain_passes_can_be_spaced_or_turned_off() {
        let s = settings(&[("FOREWARN_DRAIN_PASS_INTERVAL", "2s")]).unwrap();
        assert_eq!(s.drain_pass_interval, Some(Duration::from_secs(2)));
        let off = settings(&[("FOREWARN_DRAIN_PASS_INTERVAL", "off")]).unwrap();
        assert_eq!(off.drain_pass_interval, None);
    }

    #[test]
    fn the_deregistration_budget_is_bounded_or_off() {
        let d = settings(&[]).unwrap();
        assert_eq!(d.deregister_budget, Some(Duration::from_secs(3)));
        assert_eq!(d.elb_rate, 3);
        assert_eq!(settings(&[("FOREWARN_ELB_RATE", "5")]).unwrap().elb_rate, 5);
        for bad in ["0", "21", "fast"] {
            let e = settings(&[("FOREWARN_ELB_RATE", bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("FOREWARN_ELB_RATE"), "{e}");
        }
        let s = settings(&[("FOREWARN_DEREGISTER_BUDGET", "2s")]).unwrap();
        assert_eq!(s.deregister_budget, Some(Duration::from_secs(2)));
        let off = settings(&[("FOREWARN_DEREGISTER_BUDGET", "off")]).unwrap();
        assert_eq!(off.deregister_budget, None);
        for bad in ["0s", "2m", "soon"] {
            let e = settings(&[("FOREWARN_DEREGISTER_BUDGET", bad)]).unwrap_err();
            assert!(e.to_string().contains("FOREWARN_DEREGISTER_BUDGET"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (name, value) in [
            ("FOREWARN_DRY_RUN", "maybe"),
            ("FOREWARN_CONCURRENCY", "0"),
            ("FOREWARN_CONCURRENCY", "many"),
            ("FOREWARN_SAFETY_MARGIN", "soon"),
            ("FOREWARN_EVICTION_PARALLELISM", "1000"),
            ("FOREWARN_KUBE_QPS", "fast"),
            ("FOREWARN_WEBHOOK_ALLOW_HTTP", "maybe"),
            ("FOREWARN_POOL_TTL", "forever"),
            ("FOREWARN_PRIORITY_HOT_SHARE", "0"),
            ("FOREWARN_PRIORITY_TAKE_OVER", "yes please"),
            ("FOREWARN_PRIORITIES", "sometimes"),
            ("FOREWARN_EXCLUDE_FROM_LB", "y"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "0s"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "20m"),
            ("FOREWARN_POLICY_ALLOW", "cordon,evaporate"),
        ] {
            let err = settings(&[(name, value)]).unwrap_err();
            assert_eq!(err.variable, name, "{err}");
            assert_eq!(err.value, value, "{err}");
            assert!(err.to_string().contains(name), "{err}");
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
