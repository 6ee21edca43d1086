//! Every `FOREWARN_*` variable, read in one place into one [`Settings`] value: what the Lambda
//! functions and the `forewarn` command are wired from (see [`crate::app::wiring`]). Reading is
//! pure — a `lookup` function stands for the environment — and every bad value is a
//! [`ConfigError`] naming the variable, its value and what is wrong with it.

use std::path::PathBuf;
use std::time::Duration;

use crate::adapters::kube::{
    ClusterAccess, ENV_CLUSTER_CA, ENV_CLUSTER_ENDPOINT, ENV_EKS_CLUSTER, ENV_EVICTION_PARALLELISM,
    ENV_KUBE_BURST, ENV_KUBE_QPS, ExecutorSettings, rate_limit_from_lookup,
};
use crate::adapters::webhook::{ENV_ALLOW_HTTP, ENV_TEMPLATE, ENV_URL, WebhookConfig};
use crate::app::priorities::PrioritySettings;
use crate::domain::config::{Config, ConfigError, Mode, VARIABLES as CONFIG_VARIABLES};
use crate::domain::priorities::HotShare;

pub const ENV_DRY_RUN: &str = "FOREWARN_DRY_RUN";
pub const ENV_TABLE: &str = "FOREWARN_TABLE";
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

/// Every variable the settings read besides the decision core's ([`CONFIG_VARIABLES`]); a
/// test checks the README's configuration tables name exactly these.
pub const VARIABLES: &[&str] = &[
    ENV_WEBHOOK_URL,
    ENV_WEBHOOK_TEMPLATE,
    ENV_WEBHOOK_ALLOW_HTTP,
    ENV_STATE_DIR,
    ENV_TABLE,
    ENV_EKS_CLUSTER,
    ENV_CLUSTER_ENDPOINT,
    ENV_CLUSTER_CA,
    ENV_EVICTION_PARALLELISM,
    ENV_KUBE_QPS,
    ENV_KUBE_BURST,
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
];
const ENV_WEBHOOK_URL: &str = ENV_URL;
const ENV_WEBHOOK_TEMPLATE: &str = ENV_TEMPLATE;
const ENV_WEBHOOK_ALLOW_HTTP: &str = ENV_ALLOW_HTTP;

/// Where pools are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The DynamoDB pool table of this name (`FOREWARN_TABLE`).
    Dynamo { table: String },
    /// The embedded store in this folder (`FOREWARN_STATE_DIR`, else the per-user default).
    Embedded { dir: Option<PathBuf> },
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

/// Everything the functions and the command are configured by.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The decision core's configuration.
    pub config: Config,
    /// What a run may change: plan, dry run or act.
    pub mode: Mode,
    pub store: StoreChoice,
    pub instances: InstanceChoice,
    pub cluster: ClusterChoice,
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
    /// The sweeper updates the priority expander (`FOREWARN_PRIORITIES`, default true; it
    /// needs a live cluster and does nothing without base priorities).
    pub priorities_enabled: bool,
    /// `FOREWARN_PRIORITY_HOT_SHARE`, `FOREWARN_PRIORITY_TAKE_OVER`.
    pub priorities: PrioritySettings,
    /// The delay between two passes of a drain carried on by continuation messages
    /// (`FOREWARN_DRAIN_PASS_INTERVAL`, default 5 s); `None` (`off`): the handler carries its
    /// drains on in process, passes 5 s apart, as a replay does.
    pub drain_pass_interval: Option<Duration>,
}

/// The value `lookup` gives `name`, trimmed; blank counts as unset.
fn value(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Where nodes come from: captured cluster state (`FOREWARN_CLUSTER_STATE_FILE`); else a live
/// cluster when one is in reach (EKS settings, `KUBECONFIG`, or in a pod); else none.
fn cluster_choice(lookup: &impl Fn(&str) -> Option<String>) -> ClusterChoice {
    if let Some(path) = value(lookup, ENV_CLUSTER_STATE_FILE) {
        return ClusterChoice::Snapshot(PathBuf::from(path));
    }
    let access = ClusterAccess::from_lookup(lookup);
    let in_reach = matches!(access, ClusterAccess::Eks(_))
        || value(lookup, "KUBECONFIG").is_some()
        || value(lookup, "KUBERNETES_SERVICE_HOST").is_some();
    if in_reach {
        ClusterChoice::Live(access)
    } else {
        ClusterChoice::None
    }
}

/// `FOREWARN_DRAIN_PASS_INTERVAL`: 5 s unset, `None` for `off`, else 1 s to 900 s.
fn drain_pass_interval(value: Option<&str>) -> Result<Option<Duration>, ConfigError> {
    let Some(v) = value else {
        return Ok(Some(Duration::from_secs(5)));
    };
    if v == "off" {
        return Ok(None);
    }
    crate::domain::vars::parse_duration(v)
        .ok()
        .and_then(|d| d.to_std().ok())
        .filter(|d| (Duration::from_secs(1)..=Duration::from_secs(900)).contains(d))
        .map(Some)
        .ok_or_else(|| ConfigError {
            variable: ENV_DRAIN_PASS_INTERVAL.into(),
            value: v.into(),
            message: "not a duration from 1s to 900s (SQS's longest message delay), or off".into(),
        })
}

impl Settings {
    /// The settings of the process environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings `lookup` gives (a variable that is unset or blank counts as unset):
    ///
    /// - the decision core's variables, through [`Config::from_lookup`];
    /// - `FOREWARN_DRY_RUN=true`: [`Mode::DryRun`], else [`Mode::Act`];
    /// - `FOREWARN_TABLE`: the DynamoDB table, else the embedded store (`FOREWARN_STATE_DIR`);
    /// - `FOREWARN_INSTANCES_FILE`: captured instances, else EC2;
    /// - `FOREWARN_CLUSTER_STATE_FILE`: captured cluster state; else `FOREWARN_EKS_CLUSTER`
    ///   (with `FOREWARN_CLUSTER_ENDPOINT`, `FOREWARN_CLUSTER_CA`); else kubeconfig inference
    ///   when `KUBECONFIG` is set or the process runs in a pod (`KUBERNETES_SERVICE_HOST`);
    ///   else no cluster;
    /// - `FOREWARN_EVICTION_PARALLELISM`, `FOREWARN_KUBE_QPS`, `FOREWARN_KUBE_BURST`,
    ///   `FOREWARN_WEBHOOK_URL`, `FOREWARN_WEBHOOK_TEMPLATE`, `FOREWARN_WEBHOOK_ALLOW_HTTP`,
    ///   `FOREWARN_CONCURRENCY`,
    ///   `FOREWARN_SAFETY_MARGIN`, `FOREWARN_LOG`, `FOREWARN_DRAIN_PASS_INTERVAL`;
    /// - `FOREWARN_PRIORITIES`, `FOREWARN_PRIORITY_HOT_SHARE`, `FOREWARN_PRIORITY_TAKE_OVER`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let get = |name: &str| value(&lookup, name);
        let bad = |variable: &str, value: &str, message: &str| ConfigError {
            variable: variable.into(),
            value: value.into(),
            message: message.into(),
        };
        let config = Config::from_lookup(&lookup)?;
        let mode = match get(ENV_DRY_RUN).as_deref() {
            None | Some("false") | Some("0") => Mode::Act,
            Some("true") | Some("1") => Mode::DryRun,
            Some(other) => return Err(bad(ENV_DRY_RUN, other, "not a boolean (true or false)")),
        };
        let store = match get(ENV_TABLE) {
            Some(table) => StoreChoice::Dynamo { table },
            None => StoreChoice::Embedded {
                dir: get(ENV_STATE_DIR).map(PathBuf::from),
            },
        };
        let cluster = cluster_choice(&lookup);
        let kube_rate_limit = rate_limit_from_lookup(&lookup).map_err(|e| match e {
            crate::adapters::kube::ConnectError::RateLimit {
                variable,
                value,
                message,
            } => bad(variable, &value, message),
            other => bad(ENV_KUBE_QPS, "", &other.to_string()),
        })?;
        let concurrency = match get(ENV_CONCURRENCY) {
            None => 8,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(ENV_CONCURRENCY, &v, "not a positive whole number"))?,
        };
        let safety_margin = match get(ENV_SAFETY_MARGIN) {
            None => Duration::from_secs(3),
            Some(v) => crate::domain::vars::parse_duration(&v)
                .ok()
                .and_then(|d| d.to_std().ok())
                .ok_or_else(|| bad(ENV_SAFETY_MARGIN, &v, "not a duration (e.g. 3s)"))?,
        };
        let boolean = |variable: &str, default: bool| match get(variable).as_deref() {
            None => Ok(default),
            Some("true") | Some("1") => Ok(true),
            Some("false") | Some("0") => Ok(false),
            Some(other) => Err(bad(variable, other, "not a boolean (true or false)")),
        };
        let drain_pass_interval = drain_pass_interval(get(ENV_DRAIN_PASS_INTERVAL).as_deref())?;
        let priorities_enabled = boolean(ENV_PRIORITIES, true)?;
        let take_over = boolean(ENV_PRIORITY_TAKE_OVER, false)?;
        let hot_share = match get(ENV_PRIORITY_HOT_SHARE) {
            None => HotShare::ALL,
            Some(v) => {
                HotShare::parse(&v).map_err(|m| bad(ENV_PRIORITY_HOT_SHARE, &v, &m.to_string()))?
            }
        };
        Ok(Settings {
            priorities_enabled,
            priorities: PrioritySettings {
                hot_share,
                take_over,
            },
            config,
            mode,
            store,
            instances: match get(ENV_INSTANCES_FILE) {
                Some(path) => InstanceChoice::File(PathBuf::from(path)),
                None => InstanceChoice::Ec2,
            },
            cluster,
            executor: ExecutorSettings::from_lookup(&lookup)?,
            kube_rate_limit,
            webhook: WebhookConfig::from_lookup(&lookup)?,
            concurrency,
            safety_margin,
            log_filter: get(ENV_LOG),
            drain_pass_interval,
        })
    }

    /// Every `FOREWARN_*` variable the settings read (`FOREWARN_ACTION_<KIND>` as that prefix).
    pub fn variables() -> Vec<&'static str> {
        CONFIG_VARIABLES.iter().chain(VARIABLES).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.config, Config::default());
        assert_eq!(s.mode, Mode::Act);
        assert_eq!(s.store, StoreChoice::Embedded { dir: None });
        assert_eq!(s.cluster, ClusterChoice::None);
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
        ])
        .unwrap();
        assert_eq!(s.config.cluster_name.as_deref(), Some("demo"));
        assert_eq!(s.mode, Mode::DryRun);
        assert_eq!(
            s.store,
            StoreChoice::Dynamo {
                table: "pools".into()
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
            ("FOREWARN_PRIORITY_TAKE_OVER", "yes"),
            ("FOREWARN_PRIORITIES", "on"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "0s"),
            ("FOREWARN_DRAIN_PASS_INTERVAL", "20m"),
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

    /// The README's configuration tables document exactly the variables the settings read.
    #[test]
    fn the_readme_documents_every_variable() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("## Configuration")
            .expect("README has a Configuration section");
        let section = &readme[start..];
        let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
        // The first cell of each row of a variable: one or more `FOREWARN_...` names.
        let documented: BTreeSet<String> = section[..end]
            .lines()
            .filter(|l| l.starts_with("| `FOREWARN_"))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .map(|v| v.split('<').next().unwrap_or(v).to_string())
            .collect();
        let read: BTreeSet<String> = Settings::variables()
            .into_iter()
            .map(str::to_string)
            .collect();
        assert_eq!(documented, read);
    }
}
