//! The configuration reference: every variable [`crate::app::settings`] reads, its default and
//! what it means, in one table, and the page of the docs site made from it
//! (`docs/reference/configuration.md`). Tests fail when the table and the settings disagree (a
//! variable read but not described, or described but not read; a default that is not what an
//! unset variable gives) and when the page is not the one this module makes:
//! `FOREWARN_BLESS=1 cargo test -p forewarn-shared --lib reference` writes it anew.

use std::fmt::Write;

use crate::app::settings::RETIRED;

/// Who reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readers {
    /// The Lambda functions and the `forewarn` command alike.
    All,
    /// The Lambda functions (the command has flags for these).
    Functions,
}

/// One variable of the reference.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// Its name (`FOREWARN_ACTION_<KIND>` stands for one variable per event kind).
    pub name: &'static str,
    /// Its default, as the page shows it.
    pub default: &'static str,
    /// The value that is the same as leaving it unset, when there is one such value: a test
    /// sets it and expects the settings of an empty environment.
    pub default_value: Option<&'static str>,
    /// What it does.
    pub meaning: &'static str,
    pub readers: Readers,
}

const fn var(
    name: &'static str,
    default: &'static str,
    default_value: Option<&'static str>,
    meaning: &'static str,
) -> Variable {
    Variable {
        name,
        default,
        default_value,
        meaning,
        readers: Readers::All,
    }
}

impl Variable {
    /// The same variable, read by the Lambda functions only.
    const fn functions_only(self) -> Variable {
        Variable {
            readers: Readers::Functions,
            ..self
        }
    }
}

/// Every `FOREWARN_*` variable, in the order the page shows them.
pub const VARIABLES: &[Variable] = &[
    var(
        "FOREWARN_CLUSTERS",
        "unset",
        None,
        "the clusters one deployment serves, separated by commas. A cluster is its account, \
         region and name: `name` (of the deployment's own account and region), \
         `account/name` (the own region) or `account/region/name`; `*` is every EKS cluster of \
         the own account and region and of every account and region the list names, \
         `account/*` and `account/region/*` every cluster of one (listed again every 5 \
         minutes; with `KUBECONFIG`, every context, a context named `account/region/name` \
         being of that place). Each instance is handled only in a served cluster of its own \
         account and region whose name its tags (`kubernetes.io/cluster/<name>`, \
         `aws:eks:cluster-name`, `eks:cluster-name`) give, on that cluster's own client; any \
         other instance is acknowledged, nothing done. An event of an account the list does \
         not name is refused before any role is assumed there; another account needs \
         `FOREWARN_MEMBER_ROLE` and `FOREWARN_ACCOUNT_ID`. A cluster of the own place is \
         reached through the kubeconfig context of its name when `KUBECONFIG` is set, else \
         through EKS (`DescribeCluster` and an IAM token in the cluster's own account, through \
         the member role, and region). Not with the retired `FOREWARN_CLUSTER_NAME`. See [Many \
         clusters](../many-clusters.md)",
    ),
    var(
        "FOREWARN_UNAVAILABLE_KINDS",
        "`spot-interruption,capacity-reservation-interruption,capacity-block-expiration`",
        Some("spot-interruption,capacity-reservation-interruption,capacity-block-expiration"),
        "kinds that mark their pool unavailable; every kind counts in the pool's history",
    ),
    var(
        "FOREWARN_POOL_TTL",
        "`1h`",
        Some("1h"),
        "how long a pool stays unavailable after an event (`90s`, `15m`, `1h30m`)",
    ),
    var(
        "FOREWARN_TAINT_KEY",
        "`forewarn.io/interruption`",
        Some("forewarn.io/interruption"),
        "the key of the taint put on cordoned nodes (its value is the event kind); `nth`: \
         aws-node-termination-handler's key for the four kinds NTH taints for \
         (`aws-node-termination-handler/` and `spot-itn`, `rebalance-recommendation`, \
         `scheduled-maintenance` for `scheduled-change`, `asg-lifecycle-termination` for \
         `asg-termination`) and `forewarn.io/interruption` for the others, so that tolerations \
         written for NTH keep matching: see \
         [Moving from NTH](../how-to/from-nth.md#tolerations-and-taints)",
    ),
    var(
        "FOREWARN_TAINT_EFFECT",
        "`NoSchedule`",
        Some("NoSchedule"),
        "`NoSchedule`, `PreferNoSchedule` or `NoExecute`",
    ),
    var(
        "FOREWARN_DRAIN_TIMEOUT",
        "`5m`",
        Some("5m"),
        "drain deadline after the event time for events that give none",
    ),
    var(
        "FOREWARN_LIFECYCLE_HOOKS",
        "any hook",
        None,
        "comma-separated lifecycle hook names forewarn answers (completes and heartbeats); \
         unset: any hook of this cluster's instances. Others are left to their owners. `off`: \
         no lifecycle action is completed (the hooks' own timeouts and default results decide; \
         drains still happen)",
    ),
    var(
        "FOREWARN_WEBHOOK_URL",
        "unset",
        None,
        "post one JSON message per node action to this `https://` URL (a Slack incoming webhook, \
         ...); see [telemetry](../telemetry.md#webhook). The URL is a secret: logs and errors show \
         its host only",
    ),
    var(
        "FOREWARN_WEBHOOK_TEMPLATE",
        "Slack `{\"text\": ...}`",
        None,
        "the message: a JSON object with `{{field}}` placeholders in its strings",
    ),
    var(
        "FOREWARN_STATE_DIR",
        "`$XDG_STATE_HOME/forewarn`, else `~/.local/state/forewarn`",
        None,
        "the embedded pool store's folder",
    ),
    var(
        "FOREWARN_TABLE",
        "unset",
        None,
        "the DynamoDB pool table (selects the DynamoDB store)",
    ),
    var(
        "FOREWARN_KEY_SECRET",
        "unset",
        None,
        "the Secrets Manager secret (ARN or name) holding the continuation keys, which sign \
         drains' continuations and cordon records: the stack's \
         `forewarn-<ClusterName>-continuation-key`, readable by forewarn's roles only. Its \
         current version is the current key, its previous version the one before the last \
         rotation (`forewarn key rotate`); keys a pool table held before are adopted at the \
         first read. Unset: the keys are an item of the pool table `FOREWARN_TABLE` (as before \
         the stack made the secret)",
    ),
    var(
        "FOREWARN_ACCOUNT_ID",
        "unset",
        None,
        "the deployment's own AWS account (12 digits; the stack sets it): EC2 and Auto Scaling \
         calls about an instance of an event of this account (or of an event naming none) use \
         the deployment's own credentials. Unset: every event is taken as the own account's",
    )
    .functions_only(),
    var(
        "FOREWARN_MEMBER_ROLE",
        "unset",
        None,
        "the IAM role name (no path) forewarn assumes in an organization's member account \
         (`forewarn-member` in `infra/member.yaml`): an event of another account than \
         `FOREWARN_ACCOUNT_ID` is looked up (`DescribeInstances`) and its lifecycle action \
         completed in that account and the event's region, with STS `AssumeRole` of \
         `arn:<partition>:iam::<account>:role/<name>`, as are the member clusters' EKS calls. \
         Needs `FOREWARN_ACCOUNT_ID`; only the accounts `FOREWARN_CLUSTERS` names are served. \
         Unset, or for an account not named: the event is acknowledged as not served, naming \
         the account (nothing done, no pool recorded). A named account whose role cannot be \
         assumed, or is refused a lookup, fails its events (retried, then kept in the \
         dead-letter queue; the `AccountUnreachable` metric). An account that is not 12 digits \
         or a region that is not a region's name always fails",
    )
    .functions_only(),
    var(
        "FOREWARN_KUBE_QPS",
        "forewarn's share of the API server, 200 requests/s, divided by `FOREWARN_ENVIRONMENTS` (the handler as deployed: `20`); without it, no limit",
        None,
        "client-side rate limit of the Kubernetes API calls of one process, in requests per \
         second, like client-go's QPS. Each Lambda execution environment is a process with its \
         own limit: the API server's share for forewarn divided by the function's concurrency \
         (what the deployed handler takes by default, and the benchmarks assume); `0`: no \
         limit. A 429's `Retry-After` holds back every call until it has passed. Two lanes: \
         node reads, cordons, deletes and Events go before the drains' evictions and pod lists, \
         so a mass interruption's cordons do not queue behind evictions",
    ),
    var(
        "FOREWARN_ENVIRONMENTS",
        "unset; the stack sets the handler's to its `MaximumConcurrency`",
        None,
        "how many execution environments of the function run at once at most (1–1000): \
         without `FOREWARN_KUBE_QPS`, each takes forewarn's share of the API server (200 \
         requests/s, burst 20) divided by it",
    )
    .functions_only(),
    var(
        "FOREWARN_DRAIN_PASS_INTERVAL",
        "`5s`",
        Some("5s"),
        "the delay between two passes of a drain that does not wait (1 s to 900 s, or `off`). \
         The handler's first pass over a warning cordons and taints the node and returns; the \
         drain — evictions, pods still terminating, evictions a budget refused, the lifecycle \
         action — is carried on by messages it queues (`sqs:SendMessage`): the first at once, \
         the next ones with this delay, until the node is empty or the drain's deadline passes. \
         `off`: the same passes run inside the invocation, 5 s apart, after every event of the \
         batch has had its first pass, as `forewarn replay` does",
    ),
    var(
        "FOREWARN_DEREGISTER_BUDGET",
        "`3s`",
        Some("3s"),
        "traffic first: before a drain's first evictions, its instance leaves every instance-mode \
         target group of its cluster (target groups the AWS Load Balancer Controller tagged \
         `elbv2.k8s.aws/cluster=<cluster>`, found by that tag, no other), and when the instance \
         goes within minutes (a spot or capacity reservation warning, `stopping`) its pods' \
         addresses every IP-mode one. Rounds shared by every batch through the pool table take \
         off every instance offered by then, one `DeregisterTargets` per group; the evictions \
         wait for their round at most this long (1 s to 30 s), then go ahead whatever it is, and \
         the record's report says what became of it. `off`: drains do not touch the load \
         balancers. Needs a cluster name (`FOREWARN_CLUSTERS`)",
    )
    .functions_only(),
    var(
        "FOREWARN_POLICY_ALLOW",
        "every action but `delete` and `none`",
        None,
        "the actions a rule of the policy ConfigMap may ask: names separated by commas or spaces \
         (`none`, `cordon`, `cordon-drain`, `delete`, `cordon-for`, `adaptive`), or `all`; a \
         rule asking another is refused and its nodes keep the defaults (see \
         [policies](../concepts/policies.md)). Not applied to `FOREWARN_POLICY_FILE`",
    ),
    var(
        "FOREWARN_POLICY_FILE",
        "unset",
        None,
        "a policy per node group (YAML, see [policies](../concepts/policies.md)): a matching \
         rule's action for a kind replaces the kind's default action on that node. A file that \
         cannot be read or a policy that does not parse stops the function at its start, naming \
         the field",
    ),
    var(
        "FOREWARN_DRY_RUN",
        "`false` (`true` under `cargo lambda watch`)",
        None,
        "plan and report, write nothing: no cluster action, no table write",
    )
    .functions_only(),
    var(
        "FOREWARN_INSTANCES_FILE",
        "unset",
        None,
        "plan against a `describe-instances` capture instead of EC2",
    )
    .functions_only(),
    var(
        "FOREWARN_CLUSTER_STATE_FILE",
        "unset",
        None,
        "plan against a `kubectl get nodes,pods -A -o json` capture instead of the cluster \
         (never acts)",
    )
    .functions_only(),
    var(
        "FOREWARN_CONCURRENCY",
        "`8`",
        Some("8"),
        "events of distinct instances handled at once in a batch (events of one instance run in \
         event-time order)",
    )
    .functions_only(),
    var(
        "FOREWARN_PRIORITIES",
        "`true`",
        Some("true"),
        "the pool sweeper updates the Cluster Autoscaler's priority expander after each sweep \
         (with a live cluster; nothing without base priorities): `true` or `false`, or options \
         that mean `true`, separated by commas: `take-over` (overwrite a \
         `cluster-autoscaler-priority-expander` ConfigMap forewarn did not create) and \
         `hot-share=SHARE` (the share of a node group's pools that must be unavailable for it \
         to be demoted: `0.5`, `50%`; default `1`, every pool). See \
         [priorities](../how-to/priorities.md)",
    )
    .functions_only(),
];

/// The platform's variables forewarn reads, and what it makes of each.
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
    ("RUST_LOG", "the log filter when `FOREWARN_LOG` is unset"),
];

const HEADER: &str = "\
# Configuration

<!-- Generated from shared/src/app/reference.rs: edit the table there, then run
     `FOREWARN_BLESS=1 cargo test -p forewarn-shared --lib reference` to write this page. -->

forewarn is configured by environment variables: the stack sets them on the Lambda functions
(see [deploy](../deploy.md)), and the `forewarn` command reads the same ones, its flags
winning where given. Every variable is read in one place, `shared/src/app/settings.rs`.
";

const VALUES: &str = "\
## Values

A variable set blank (empty, or spaces) counts as unset, and takes its default — except
`FOREWARN_UNAVAILABLE_KINDS` (and the retired `FOREWARN_DELETE_OWNED_ON` and `FOREWARN_SURGE`),
where a blank value names no kind. Every boolean variable takes the same words, in any case: `true`, `1`,
`yes`, `on` and `false`, `0`, `no`, `off`. A duration (`90`, `90s`, `15m`, `1h30m`, `2d`) is at
most 10 years. A bad value stops the function or the command with a message naming the variable
and the value (the webhook URL's host only: the URL is a secret).
";

/// The page `docs/reference/configuration.md`.
pub fn configuration_page() -> String {
    let mut page = String::from(HEADER);
    for (title, readers) in [
        ("## Variables", Readers::All),
        (
            "## Variables of the Lambda functions\n\nThe command has flags for these.",
            Readers::Functions,
        ),
    ] {
        page.push('\n');
        page.push_str(title);
        page.push_str("\n\n| variable | default | meaning |\n|---|---|---|\n");
        for v in VARIABLES.iter().filter(|v| v.readers == readers) {
            let _ = writeln!(page, "| `{}` | {} | {} |", v.name, v.default, v.meaning);
        }
    }
    page.push_str(
        "\n## Retired variables\n\nStill read until the next release, each use logged as a \
         warning naming its new home ([Upgrade](../how-to/upgrade.md)).\n\n\
         | variable | its home now |\n|---|---|\n",
    );
    for r in RETIRED {
        let name = match r.name.strip_suffix('_') {
            Some(prefix) => format!("{prefix}_<KIND>"),
            None => r.name.to_string(),
        };
        let _ = writeln!(page, "| `{name}` | {} |", r.home);
    }
    page.push('\n');
    page.push_str(VALUES);
    page.push_str(
        "\n## The platform's variables\n\nforewarn reads these too; the AWS SDK and kube read \
         the rest of their own (`AWS_REGION`, `AWS_PROFILE`, `AWS_ENDPOINT_URL`, ...).\n\n\
         | variable | what forewarn makes of it |\n|---|---|\n",
    );
    for (name, meaning) in PLATFORM {
        let _ = writeln!(page, "| `{name}` | {meaning} |");
    }
    page
}

/// A generated page that is not what the code makes of it.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not what the code makes of it: run `FOREWARN_BLESS=1 {bless}` and commit it"
    )]
    Stale { path: String, bless: String },
}

/// Whether the generated page at `path` is `page`; with `FOREWARN_BLESS` set, writes it first.
/// The tests of generated pages (this one's and the command line's) call it; the error says
/// how to make the page current (`bless`: the command that writes it).
pub fn check_generated_page(path: &str, page: &str, bless: &str) -> Result<(), PageError> {
    if std::env::var_os("FOREWARN_BLESS").is_some() {
        std::fs::write(path, page).map_err(|source| PageError::Write {
            path: path.to_string(),
            source,
        })?;
    }
    if std::fs::read_to_string(path).is_ok_and(|on_disk| on_disk == page) {
        Ok(())
    } else {
        Err(PageError::Stale {
            path: path.to_string(),
            bless: bless.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::app::settings::{PLATFORM_VARIABLES, Settings};

    fn settings(vars: &[(&str, &str)]) -> String {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let settings = Settings::from_lookup(|name| vars.get(name).cloned())
            .unwrap_or_else(|e| panic!("{vars:?}: {e}"));
        format!("{settings:?}")
    }

    /// The table names exactly the variables the settings read.
    #[test]
    fn the_reference_names_every_variable_read() {
        let described: BTreeSet<&str> = VARIABLES
            .iter()
            .map(|v| v.name.split('<').next().unwrap_or(v.name))
            .chain(RETIRED.iter().map(|r| r.name))
            .collect();
        let read: BTreeSet<&str> = Settings::variables().into_iter().collect();
        assert_eq!(described, read);
        let platform: BTreeSet<&str> = PLATFORM.iter().map(|(n, _)| *n).collect();
        assert_eq!(platform, PLATFORM_VARIABLES.iter().copied().collect());
    }

    /// Each default the page states as a value is what an unset variable gives.
    #[test]
    fn every_stated_default_is_the_default() {
        let unset = settings(&[]);
        for v in VARIABLES {
            if let Some(value) = v.default_value {
                assert_eq!(
                    settings(&[(v.name, value)]),
                    unset,
                    "{} is documented to default to {value}",
                    v.name
                );
            }
        }
    }

    /// docs/reference/configuration.md is the page this module makes.
    #[test]
    fn the_configuration_page_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/reference/configuration.md"
        );
        let bless = "cargo test -p forewarn-shared --lib reference";
        if let Err(e) = check_generated_page(path, &configuration_page(), bless) {
            panic!("{e}");
        }
    }
}
