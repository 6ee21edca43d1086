//! The CloudFormation side of `forewarn deploy`: the template's parameters, the stack's current
//! state, the parameters of each pass, create-or-update and the wait for its end.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::client::Waiters;
use aws_sdk_cloudformation::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_cloudformation::types::{Capability, Parameter};
use aws_sdk_cloudformation::waiters::stack_create_complete::WaitUntilStackCreateCompleteError;
use forewarn::adapters::aws::aws_error_text;
use serde::Deserialize;

/// Set by the command: `false` on a first deploy, `true` once both functions exist.
pub const FUNCTIONS_DEPLOYED: &str = "FunctionsDeployed";
/// The clusters served, one list: `--cluster` (this account's names, member accounts'
/// `ACCOUNT/NAME`) and `*` for `--all-clusters`. Its first entry is the stack's own cluster.
pub const CLUSTERS: &str = "Clusters";
/// Whether the stack makes the access entries of its own cluster (and `forewarn deploy` those of
/// the other clusters).
pub const CREATE_ACCESS_ENTRY: &str = "CreateAccessEntry";
/// Selects the build flag.
pub const FUNCTION_ARCHITECTURE: &str = "FunctionArchitecture";
/// What an update that changes nothing did.
pub const UNCHANGED: &str = "unchanged (no updates are to be performed)";

/// How long a stack operation may take before the command gives up waiting (CloudFormation
/// goes on; the next run waits for nothing and fails while it is in progress). The SDK's
/// waiters look at the stack at once, then every 30 s to 2 min.
const WAIT_LIMIT: Duration = Duration::from_secs(3600);

/// One parameter of the template: its default and allowed values (YAML scalars, which
/// CloudFormation takes as strings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Declared {
    #[serde(rename = "Default")]
    pub default: Option<String>,
    #[serde(rename = "AllowedValues", default)]
    pub allowed: Vec<String>,
}

/// The template's parameters, by name.
pub type Template = BTreeMap<String, Declared>;

/// The `Parameters` section of a template (the rest is skipped: its short-form tags, `!Ref` and
/// `!Sub`, are not read).
pub fn declared(template: &str) -> anyhow::Result<Template> {
    #[derive(Deserialize)]
    struct Section {
        #[serde(rename = "Parameters")]
        parameters: Template,
    }
    let section: Section =
        serde_saphyr::from_str(template).context("reading the template's Parameters section")?;
    Ok(section.parameters)
}

/// The `--parameter KEY=VALUE` arguments, checked against the template: no `FunctionsDeployed`
/// (the command sets it), no `Clusters` (`--cluster`, `--all-clusters`), no key given twice, no
/// key or value the template refuses.
pub fn given(raw: &[String], template: &Template) -> anyhow::Result<Vec<(String, String)>> {
    let mut given: Vec<(String, String)> = Vec::new();
    for arg in raw {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| anyhow!("--parameter {arg}: expected KEY=VALUE"))?;
        match key {
            FUNCTIONS_DEPLOYED => bail!(
                "--parameter {FUNCTIONS_DEPLOYED}: forewarn deploy sets it (false on a first \
                 deploy until both functions exist, then true); leave it out"
            ),
            CLUSTERS => bail!(
                "--parameter {CLUSTERS}: give the clusters with --cluster (once per cluster; \
                 ACCOUNT/NAME for a member account's) or --all-clusters"
            ),
            _ => {}
        }
        let Some(declared) = template.get(key) else {
            let known: Vec<&str> = template
                .keys()
                .map(String::as_str)
                .filter(|k| ![FUNCTIONS_DEPLOYED, CLUSTERS].contains(k))
                .collect();
            bail!(
                "--parameter {key}: infra/forewarn.yaml has no such parameter (it has {})",
                known.join(", ")
            );
        };
        if !declared.allowed.is_empty() && !declared.allowed.iter().any(|a| a == value) {
            bail!(
                "--parameter {key}={value}: must be one of {}",
                declared.allowed.join(", ")
            );
        }
        if given.iter().any(|(k, _)| k == key) {
            bail!("--parameter {key} is given twice");
        }
        given.push((key.to_string(), value.to_string()));
    }
    Ok(given)
}

/// The longest stack name: the stack names its resources after itself, the functions
/// `<stack>-handler` and `<stack>-sweeper`, which Lambda takes up to 64 characters.
pub const STACK_NAME_MAX: usize = 56;

/// The stack's name, `--stack-name` (`given`) or forewarn-<first --cluster>, checked: a name
/// CloudFormation takes (a letter, then letters, digits and dashes) and whose resources' names
/// fit (at most [`STACK_NAME_MAX`] characters).
pub fn stack_name(given: Option<&str>, clusters: &Clusters) -> anyhow::Result<String> {
    let (name, whence) = match (given, clusters.named.first()) {
        (Some(name), _) => (name.to_string(), "--stack-name"),
        (None, Some(first)) => (
            format!("forewarn-{first}"),
            "the stack's name, forewarn-<first --cluster>",
        ),
        (None, None) => bail!(
            "--all-clusters without --cluster: give --stack-name, the stack to update (or \
             --cluster NAME, a new stack's own cluster)"
        ),
    };
    let well_formed = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !well_formed {
        bail!(
            "{whence} {name}: not a CloudFormation stack name (a letter, then letters, digits \
             and dashes): give --stack-name"
        );
    }
    if name.len() > STACK_NAME_MAX {
        bail!(
            "{whence} {name} has {} characters, more than {STACK_NAME_MAX}: the functions are \
             named after the stack ({name}-handler, {name}-sweeper) and Lambda takes at most 64; \
             give a shorter --stack-name",
            name.len()
        );
    }
    Ok(name)
}

/// What DescribeStacks says of an existing stack.
#[derive(Debug, Clone, Default)]
pub struct Current {
    pub status: String,
    pub reason: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
}

/// Whether the stack can be updated now; an error saying why not and what to do.
pub fn check_updatable(name: &str, current: &Current) -> anyhow::Result<()> {
    let status = current.status.as_str();
    if status.ends_with("_IN_PROGRESS") {
        bail!("stack {name} is {status}: wait until it is done, then run forewarn deploy again");
    }
    if matches!(
        status,
        "ROLLBACK_COMPLETE" | "ROLLBACK_FAILED" | "CREATE_FAILED" | "DELETE_FAILED"
    ) {
        bail!(
            "stack {name} is {status} ({}): it cannot be updated; delete it \
             (aws cloudformation delete-stack --stack-name {name}) and run forewarn deploy again",
            current.reason.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(())
}

/// The stack, or `None` when it does not exist.
pub async fn describe(cfn: &Client, name: &str) -> anyhow::Result<Option<Current>> {
    let out = match cfn.describe_stacks().stack_name(name).send().await {
        Ok(out) => out,
        Err(e)
            if e.code() == Some("ValidationError")
                && e.message().is_some_and(|m| m.contains("does not exist")) =>
        {
            return Ok(None);
        }
        Err(e) => bail!("describing stack {name}: {}", aws_error_text(&e)),
    };
    let pair =
        |k: Option<&str>, v: Option<&str>| Some((k?.to_string(), v.unwrap_or_default().into()));
    Ok(out.stacks().first().map(|stack| Current {
        status: stack.stack_status().map_or("", |s| s.as_str()).to_string(),
        reason: stack.stack_status_reason().map(str::to_string),
        parameters: (stack.parameters().iter())
            .filter_map(|p| pair(p.parameter_key(), p.parameter_value()))
            .collect(),
        outputs: (stack.outputs().iter())
            .filter_map(|o| pair(o.output_key(), o.output_value()))
            .collect(),
    }))
}

/// One parameter sent to CloudFormation; `kept`: the existing stack's value, not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub key: String,
    pub value: String,
    pub kept: bool,
}

impl Param {
    pub fn new(key: &str, value: &str, kept: bool) -> Param {
        let (key, value) = (key.to_string(), value.to_string());
        Param { key, value, kept }
    }
}

/// The clusters `--cluster` and `--all-clusters` name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clusters {
    /// `--cluster NAME`, this account's clusters, in the order given.
    pub named: Vec<String>,
    /// `--cluster ACCOUNT/NAME`, member accounts' clusters, in the order given.
    pub members: Vec<String>,
    /// `--all-clusters`: every EKS cluster of the account and region.
    pub all: bool,
}

/// Whether `name` is a name EKS gives a cluster (the template's `AllowedPattern`): 1 to 100
/// letters, digits, dashes or underscores, starting with a letter or digit.
fn is_cluster_name(name: &str) -> bool {
    name.len() <= 100
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Clusters {
    /// Checked: names EKS accepts, `ACCOUNT/NAME` for a member account's (a 12-digit account),
    /// none given twice; at least one of this account's without `--all-clusters` (a new stack's
    /// own cluster), at most one with it.
    pub fn new(given: Vec<String>, all: bool) -> anyhow::Result<Clusters> {
        for (i, entry) in given.iter().enumerate() {
            let good = match entry.split_once('/') {
                None => is_cluster_name(entry),
                Some((account, name)) => {
                    forewarn::domain::clusters::is_account_id(account) && is_cluster_name(name)
                }
            };
            if !good {
                bail!(
                    "--cluster {entry:?}: not an EKS cluster name (1 to 100 letters, digits, \
                     dashes or underscores, starting with a letter or digit), nor ACCOUNT/NAME \
                     for a member account's (a 12-digit account id)"
                );
            }
            if given[..i].contains(entry) {
                bail!("--cluster {entry} is given twice");
            }
        }
        let (members, named): (Vec<String>, Vec<String>) =
            given.into_iter().partition(|e| e.contains('/'));
        match (named.len(), all) {
            (0, false) if members.is_empty() => bail!(
                "give the clusters to serve: --cluster NAME (once per cluster), or --all-clusters"
            ),
            (0, false) => bail!(
                "--cluster {}: a member account's cluster cannot be the stack's own (the first \
                 of its Clusters, whose access entries it makes): give this account's cluster \
                 too (--cluster NAME)",
                members[0]
            ),
            (2.., true) => bail!(
                "--all-clusters serves every EKS cluster of the account and region: give at \
                 most one --cluster of this account with it, the stack's own (the first of its \
                 Clusters, whose access entries it makes)"
            ),
            _ => Ok(Clusters {
                named,
                members,
                all,
            }),
        }
    }

    /// Whether `entry` (an entry of the stack's `Clusters`) is among the clusters given.
    fn serves(&self, entry: &str) -> bool {
        match entry {
            "*" => self.all,
            _ if entry.contains('/') => self.members.iter().any(|m| m == entry),
            _ => self.all || self.named.iter().any(|n| n == entry),
        }
    }

    /// `Clusters` with `first` first: then this account's clusters given, `*` with
    /// `--all-clusters`, the member accounts' clusters; each once.
    pub fn value(&self, first: &str) -> String {
        let mut entries = vec![first];
        let (named, members) = (self.named.iter(), self.members.iter());
        let all = self.all.then_some("*");
        for entry in named
            .map(String::as_str)
            .chain(all)
            .chain(members.map(String::as_str))
        {
            if !entries.contains(&entry) {
                entries.push(entry);
            }
        }
        entries.join(",")
    }

    /// The first entry of the stack's `Clusters`, its own cluster (whose access entries it
    /// makes): an existing stack keeps its own, which must be among the clusters given (or,
    /// with `--all-clusters`, be the `--cluster` given if any); a new stack takes the first
    /// `--cluster` of this account.
    fn first(&self, stack: &str, current: Option<&Current>) -> anyhow::Result<String> {
        let own = current
            .and_then(|c| c.parameters.get(CLUSTERS))
            .and_then(|v| entries(v).into_iter().next());
        match (own, self.named.first()) {
            (Some(own), Some(first)) if self.all && is_own(&own) && own != *first => bail!(
                "stack {stack} is cluster {own}'s (the first of its Clusters, whose access \
                 entries it makes), not {first}'s: with --all-clusters give --cluster {own} or \
                 none, or another --stack-name"
            ),
            (Some(own), _) if !self.serves(&own) => {
                let given: Vec<&str> = (self.named.iter().chain(&self.members))
                    .map(String::as_str)
                    .collect();
                let given = given.join(", --cluster ");
                bail!(
                    "stack {stack} is cluster {own}'s (the first of its Clusters, whose access \
                     entries it makes), which is not among --cluster {given}: add --cluster \
                     {own} (it may come last), or give another --stack-name"
                )
            }
            (Some(own), _) => Ok(own),
            (None, Some(first)) => Ok(first.clone()),
            (None, None) => bail!(
                "stack {stack} does not exist yet: with --all-clusters, give its own cluster \
                 with --cluster NAME (the first of its Clusters, whose access entries it makes)"
            ),
        }
    }
}

/// Whether an entry of `Clusters` names a cluster of this account (not `*`, not
/// `ACCOUNT/...`).
fn is_own(entry: &str) -> bool {
    entry != "*" && !entry.contains('/')
}

/// The entries of a `CommaDelimitedList` parameter as DescribeStacks answers it: `a,b` from
/// CloudFormation, `['a', 'b']` from moto (5.2.5), whose brackets, quotes and spaces no entry
/// holds.
pub fn entries(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|e| e.trim_matches(|c: char| c == '[' || c == ']' || c == '\'' || c == ' '))
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// The parameters of both passes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The stack's own cluster, whose access entries it makes (with `CreateAccessEntry`): the
    /// first entry of its `Clusters`, a name of this account.
    pub own: Option<String>,
    /// Whether the stack exists (the first pass updates it).
    pub exists: bool,
    /// The first pass: given, else kept, else the template's default (not sent).
    pub first: Vec<Param>,
    /// Whether the first pass leaves `FunctionsDeployed` true (an existing stack's value).
    pub wired: bool,
    defaults: BTreeMap<String, String>,
}

impl Plan {
    /// A new stack: `Clusters` as the clusters given say (the first `--cluster` of this account
    /// first), the given parameters and `FunctionsDeployed=false`. An existing one: `Clusters`
    /// with its own first entry kept first (which must be among the clusters given: the stack
    /// makes its access entries), its own `FunctionsDeployed` (an upgrade never removes the
    /// event source mapping), the given parameters, and the previous value of every other
    /// parameter the template still declares (as `aws cloudformation deploy` does), sent
    /// explicitly: moto's UsePreviousValue only knows parameters given at creation. New
    /// parameters take their defaults.
    pub fn new(
        stack: &str,
        clusters: &Clusters,
        given: &[(String, String)],
        current: Option<&Current>,
        template: &Template,
    ) -> anyhow::Result<Plan> {
        let first = clusters.first(stack, current)?;
        // Given at every run (`--cluster`, `--all-clusters`): a cluster left out is no longer
        // served.
        let mut params = vec![Param::new(CLUSTERS, &clusters.value(&first), false)];
        let deployed = current.map(|c| {
            c.parameters
                .get(FUNCTIONS_DEPLOYED)
                .map_or("false", String::as_str)
        });
        params.push(Param::new(
            FUNCTIONS_DEPLOYED,
            deployed.unwrap_or("false"),
            deployed.is_some(),
        ));
        params.extend(given.iter().map(|(k, v)| Param::new(k, v, false)));
        for (key, value) in current.iter().flat_map(|c| &c.parameters) {
            if template.contains_key(key) && !params.iter().any(|p| &p.key == key) {
                params.push(Param::new(key, value, true));
            }
        }
        Ok(Plan {
            // A by-hand stack's first entry may be `*` or a member account's: no own cluster.
            own: is_own(&first).then_some(first),
            exists: current.is_some(),
            first: params,
            wired: deployed == Some("true"),
            defaults: (template.iter())
                .filter_map(|(k, d)| Some((k.clone(), d.default.clone()?)))
                .collect(),
        })
    }

    /// The value a parameter will have after the first pass.
    pub fn value(&self, key: &str) -> Option<&str> {
        let first = self.first.iter().find(|p| p.key == key);
        first
            .map(|p| &p.value)
            .or(self.defaults.get(key))
            .map(String::as_str)
    }

    /// The second pass: the first with `FunctionsDeployed=true`.
    pub fn second(&self) -> Vec<Param> {
        let wire = |p: &Param| match p.key == FUNCTIONS_DEPLOYED {
            true => Param::new(FUNCTIONS_DEPLOYED, "true", false),
            false => p.clone(),
        };
        self.first.iter().map(wire).collect()
    }

    /// `K=V K=V (kept: K=V ...; N more at their defaults)`, for the steps' lines: what is given,
    /// and what an existing stack keeps (its values at the template's defaults only counted).
    pub fn describe(&self, params: &[Param]) -> String {
        let pairs = |ps: Vec<&Param>| {
            let pairs: Vec<String> = ps
                .iter()
                .map(|p| format!("{}={}", p.key, p.value))
                .collect();
            pairs.join(" ")
        };
        let (kept, given): (Vec<&Param>, Vec<&Param>) = params.iter().partition(|p| p.kept);
        let (at_default, kept): (Vec<&Param>, Vec<&Param>) = kept.into_iter().partition(|p| {
            self.defaults.get(&p.key) == Some(&p.value) && p.key != FUNCTIONS_DEPLOYED
        });
        let mut notes = Vec::new();
        if !kept.is_empty() {
            notes.push(pairs(kept));
        }
        if !at_default.is_empty() {
            notes.push(format!("{} more at their defaults", at_default.len()));
        }
        match notes.is_empty() {
            true => pairs(given),
            false => format!("{} (kept: {})", pairs(given), notes.join("; ")),
        }
    }
}

/// Creates the stack (`exists` false) or updates it, and waits until it is done (the SDK's
/// waiter, at most [`WAIT_LIMIT`]); answers what was done: `created` or `updated` with the
/// stack's outputs now, or [`UNCHANGED`] ("No updates are to be performed") without. An
/// operation that does not end complete is an error naming the status, its reason and the first
/// failed resources of this operation.
pub async fn create_or_update(
    cfn: &Client,
    name: &str,
    template: &str,
    params: &[Param],
    exists: bool,
) -> anyhow::Result<(&'static str, Option<BTreeMap<String, String>>)> {
    let started = SystemTime::now();
    let params: Vec<Parameter> = (params.iter())
        .map(|p| {
            Parameter::builder()
                .parameter_key(&p.key)
                .parameter_value(&p.value)
        })
        .map(|p| p.build())
        .collect();
    // CreateStack and UpdateStack take the same arguments, and both waiters poll
    // DescribeStacks and answer the same error type.
    let (verb, done, did) = match exists {
        false => ("CreateStack", "CREATE_COMPLETE", "created"),
        true => ("UpdateStack", "UPDATE_COMPLETE", "updated"),
    };
    macro_rules! send_and_wait {
        ($operation:ident, $waiter:ident) => {{
            let sent = (cfn.$operation().stack_name(name).template_body(template))
                .set_parameters(Some(params))
                .capabilities(Capability::CapabilityNamedIam)
                .send()
                .await;
            match sent {
                Err(e)
                    if e.message()
                        .is_some_and(|m| m.contains("No updates are to be performed")) =>
                {
                    return Ok((UNCHANGED, None));
                }
                Err(e) => bail!("{verb} {name}: {}", aws_error_text(&e)),
                Ok(_) => cfn
                    .$waiter()
                    .stack_name(name)
                    .wait(WAIT_LIMIT)
                    .await
                    .map(drop),
            }
        }};
    }
    let waited: Result<(), WaitUntilStackCreateCompleteError> = match exists {
        false => send_and_wait!(create_stack, wait_until_stack_create_complete),
        true => send_and_wait!(update_stack, wait_until_stack_update_complete),
    };
    // Whatever the waiter says (it counts some ends as success, others as failure), the
    // stack's status now is the answer.
    let current = describe(cfn, name).await?;
    let current = current.ok_or_else(|| anyhow!("stack {name} is gone"))?;
    let status = current.status.as_str();
    let busy = status.ends_with("_IN_PROGRESS") || status.is_empty();
    match waited {
        _ if status == done => Ok((did, Some(current.outputs))),
        Err(WaitUntilStackCreateCompleteError::ExceededMaxWait(_)) | Ok(()) if busy => {
            bail!("stack {name} is still {status} after {WAIT_LIMIT:?}: look at its events")
        }
        Err(e) if busy => bail!(
            "waiting for stack {name} ({status}): {}",
            DisplayErrorContext(&e)
        ),
        _ => {
            let reason = current.reason.as_deref().unwrap_or("no reason given");
            let failures = failed_resources(cfn, name, started).await;
            bail!("stack {name} ended {status} (expected {done}): {reason}{failures}")
        }
    }
}

/// `; <resource> <status>: <reason>` for the failed resources of the operation begun at
/// `started`, oldest first (at most three); empty when none can be read.
async fn failed_resources(cfn: &Client, name: &str, started: SystemTime) -> String {
    let Ok(events) = cfn.describe_stack_events().stack_name(name).send().await else {
        return String::new();
    };
    let since = started.duration_since(SystemTime::UNIX_EPOCH);
    let since = since.map_or(0, |d| d.as_secs() as i64) - 60;
    let failed = events.stack_events().iter().filter_map(|e| {
        let status = e.resource_status()?.as_str();
        let reason = e.resource_status_reason().unwrap_or("no reason given");
        let failed = status.ends_with("_FAILED") && e.timestamp()?.secs() >= since;
        let id = e.logical_resource_id()?;
        failed.then(|| format!("; {id} {status}: {reason}"))
    });
    let mut failed: Vec<String> = failed.collect();
    failed.reverse();
    failed.truncate(3);
    failed.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Template {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/forewarn.yaml");
        declared(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn one(name: &str) -> Clusters {
        Clusters::new(vec![name.to_string()], false).unwrap()
    }

    #[test]
    fn the_template_declares_its_parameters_with_defaults() {
        let t = template();
        assert_eq!(
            t[FUNCTION_ARCHITECTURE].default.as_deref(),
            Some("arm64"),
            "{t:?}"
        );
        assert_eq!(t[FUNCTION_ARCHITECTURE].allowed, ["arm64", "x86_64"]);
        assert_eq!(t["MaximumConcurrency"].default.as_deref(), Some("10"));
        assert_eq!(t[FUNCTIONS_DEPLOYED].default.as_deref(), Some("false"));
        assert!(t.contains_key(CLUSTERS) && t[CLUSTERS].default.is_none());
        assert!(t.contains_key("AlarmTopicArn"), "the last one: {t:?}");
    }

    #[test]
    fn given_parameters_are_checked() {
        let t = template();
        let ok = given(
            &strings(&["FunctionArchitecture=x86_64", "AlarmTopicArn=arn:x"]),
            &t,
        )
        .unwrap();
        assert_eq!(ok[1], ("AlarmTopicArn".into(), "arn:x".into()));
        let err = |args: &[&str]| given(&strings(args), &t).unwrap_err().to_string();
        assert!(err(&["FunctionsDeployed=true"]).contains("forewarn deploy sets it"));
        assert!(err(&["Clusters=x"]).contains("--cluster"));
        assert!(err(&["Nope=1"]).contains("no such parameter"));
        assert!(err(&["Nope=1"]).contains("FunctionArchitecture"));
        assert!(!err(&["Nope=1"]).contains("Clusters"), "not given so");
        assert!(err(&["FunctionArchitecture=sparc"]).contains("arm64, x86_64"));
        assert!(err(&["MaximumConcurrency"]).contains("KEY=VALUE"));
        assert!(err(&["MaximumConcurrency=2", "MaximumConcurrency=3"]).contains("twice"));
        // Fixed at the values benchmarked (issue 58): no parameter any more.
        assert!(err(&["BatchSize=5"]).contains("no such parameter"));
    }

    #[test]
    fn an_existing_stack_keeps_its_values_and_its_wiring() {
        let t = template();
        let current = Current {
            status: "UPDATE_COMPLETE".into(),
            parameters: [
                (CLUSTERS, "demo"),
                (FUNCTIONS_DEPLOYED, "true"),
                (FUNCTION_ARCHITECTURE, "x86_64"),
                ("MaximumConcurrency", "5"),
                ("BatchSize", "5"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..Current::default()
        };
        let given = vec![("MaximumConcurrency".to_string(), "7".to_string())];
        let plan = Plan::new("s", &one("demo"), &given, Some(&current), &t).unwrap();
        assert!(plan.exists && plan.wired);
        assert_eq!(plan.own.as_deref(), Some("demo"));
        assert_eq!(plan.value(FUNCTION_ARCHITECTURE), Some("x86_64"));
        assert_eq!(plan.value("MaximumConcurrency"), Some("7"));
        assert_eq!(plan.value("CreateAccessEntry"), Some("true"));
        assert!(
            !plan.first.iter().any(|p| p.key == "BatchSize"),
            "a parameter the template no longer declares is dropped: {:?}",
            plan.first
        );
        assert_eq!(
            plan.describe(&plan.first),
            "Clusters=demo MaximumConcurrency=7 (kept: FunctionsDeployed=true \
             FunctionArchitecture=x86_64)"
        );
        let mut at_defaults = current.clone();
        at_defaults
            .parameters
            .insert("CreateAccessEntry".into(), "true".into());
        at_defaults
            .parameters
            .insert("MaximumConcurrency".into(), "10".into());
        let plan = Plan::new("s", &one("demo"), &[], Some(&at_defaults), &t).unwrap();
        assert_eq!(
            plan.describe(&plan.first),
            "Clusters=demo (kept: FunctionsDeployed=true FunctionArchitecture=x86_64; 2 more at \
             their defaults)"
        );
        let other = Plan::new("s", &one("prod"), &[], Some(&current), &t).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("is cluster demo's (the first of its Clusters, whose access entries it makes), which is not among --cluster prod"),
            "{other}"
        );
    }

    fn existing(clusters: &str) -> Current {
        let parameters: BTreeMap<String, String> =
            [(CLUSTERS, clusters), (FUNCTIONS_DEPLOYED, "true")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        Current {
            status: "UPDATE_COMPLETE".into(),
            parameters,
            ..Current::default()
        }
    }

    /// Several clusters: the stack keeps its first cluster first when it is among them (in any
    /// place), the others follow in the order given; adding one changes Clusters alone; back to
    /// one cluster is that one; --all-clusters is `*` after the stack's own; a member account's
    /// clusters come last. moto's form of a list (`['a', 'b']`) is read as CloudFormation's.
    #[test]
    fn several_clusters_keep_the_stacks_own_first() {
        let t = template();
        let many = |names: &[&str], all| Clusters::new(strings(names), all).unwrap();
        let new = Plan::new("s", &many(&["a", "b"], false), &[], None, &t).unwrap();
        assert_eq!(new.own.as_deref(), Some("a"));
        assert_eq!(
            new.describe(&new.first),
            "Clusters=a,b FunctionsDeployed=false"
        );
        let lone = Plan::new("s", &one("demo"), &[], Some(&existing("demo")), &t).unwrap();
        assert_eq!(
            lone.describe(&lone.first),
            "Clusters=demo (kept: FunctionsDeployed=true)"
        );
        let added = Plan::new(
            "s",
            &many(&["demo", "b"], false),
            &[],
            Some(&existing("demo")),
            &t,
        )
        .unwrap();
        assert_eq!(
            added.describe(&added.first),
            "Clusters=demo,b (kept: FunctionsDeployed=true)"
        );
        let again = Plan::new(
            "s",
            &many(&["b", "demo"], false),
            &[],
            Some(&existing("['demo', 'b']")),
            &t,
        )
        .unwrap();
        assert_eq!(
            again.own.as_deref(),
            Some("demo"),
            "the stack's own, though given second"
        );
        assert_eq!(
            again.describe(&again.first),
            "Clusters=demo,b (kept: FunctionsDeployed=true)"
        );
        let back = Plan::new("s", &one("demo"), &[], Some(&existing("demo,b")), &t).unwrap();
        assert_eq!(back.value(CLUSTERS), Some("demo"));
        assert!(back.describe(&back.first).starts_with("Clusters=demo "));
        let all = Plan::new("s", &many(&[], true), &[], Some(&existing("demo")), &t).unwrap();
        assert_eq!(
            (all.own.as_deref(), all.value(CLUSTERS)),
            (Some("demo"), Some("demo,*"))
        );
        let members = Clusters::new(strings(&["111111111111/m", "a"]), true).unwrap();
        let with = Plan::new("s", &members, &[], None, &t).unwrap();
        assert_eq!(with.value(CLUSTERS), Some("a,*,111111111111/m"));
        let e = Plan::new("s", &many(&[], true), &[], None, &t).unwrap_err();
        assert!(e.to_string().contains("give its own cluster"), "{e}");
        let e = Plan::new("s", &many(&["x"], true), &[], Some(&existing("demo")), &t).unwrap_err();
        assert!(e.to_string().contains("give --cluster demo or none"), "{e}");
        let e = Plan::new(
            "s",
            &many(&["a", "b"], false),
            &[],
            Some(&existing("demo")),
            &t,
        )
        .unwrap_err();
        assert!(e.to_string().contains("add --cluster demo"), "{e}");
        // A by-hand stack whose first entry is every cluster: no own cluster.
        let star = Plan::new("s", &many(&["a"], true), &[], Some(&existing("*,a")), &t).unwrap();
        assert_eq!(
            (star.own.as_deref(), star.value(CLUSTERS)),
            (None, Some("*,a"))
        );
    }

    #[test]
    fn cluster_arguments_are_checked() {
        let err = |names: &[&str], all| Clusters::new(strings(names), all).unwrap_err().to_string();
        assert!(err(&["a", "a"], false).contains("given twice"));
        assert!(err(&["-a"], false).contains("not an EKS cluster name"));
        assert!(err(&["a,b"], false).contains("not an EKS cluster name"));
        assert!(err(&[], false).contains("--all-clusters"));
        assert!(err(&["a", "b"], true).contains("at most one --cluster"));
        assert!(Clusters::new(strings(&["a"]), true).is_ok());
        // A member account's cluster: ACCOUNT/NAME, never the stack's own.
        let c = Clusters::new(strings(&["a", "111111111111/m", "222222222222/m"]), false).unwrap();
        assert_eq!(c.named, ["a"]);
        assert_eq!(c.members, ["111111111111/m", "222222222222/m"]);
        assert_eq!(c.value("a"), "a,111111111111/m,222222222222/m");
        assert!(err(&["111111111111/m"], false).contains("cannot be the stack's own"));
        assert!(err(&["a", "1111/m"], false).contains("ACCOUNT/NAME"));
        assert!(err(&["a", "111111111111/-m"], false).contains("ACCOUNT/NAME"));
        let e = given(&strings(&["Clusters=111111111111/m"]), &template()).unwrap_err();
        assert!(e.to_string().contains("--cluster"), "{e}");
        assert_eq!(entries("['a', '111111111111/*']"), ["a", "111111111111/*"]);
        assert_eq!(entries("a,b"), ["a", "b"]);
    }

    #[test]
    fn a_new_stack_starts_unwired_and_the_second_pass_wires_it() {
        let plan = Plan::new("s", &one("demo"), &[], None, &template()).unwrap();
        assert!(!plan.exists && !plan.wired);
        assert_eq!(plan.value(FUNCTIONS_DEPLOYED), Some("false"));
        assert_eq!(plan.value(FUNCTION_ARCHITECTURE), Some("arm64"));
        let second = plan.second();
        assert!(
            second
                .iter()
                .any(|p| p.key == FUNCTIONS_DEPLOYED && p.value == "true")
        );
        assert_eq!(second.len(), plan.first.len());
    }

    /// A stack's name becomes its resources' (the functions' at most 64 characters): at most 56
    /// characters, as CloudFormation spells a stack name.
    #[test]
    fn stack_names_fit_their_resources_names() {
        assert_eq!(stack_name(None, &one("demo")).unwrap(), "forewarn-demo");
        let long = "s".repeat(STACK_NAME_MAX);
        assert_eq!(stack_name(Some(&long), &one("demo")).unwrap(), long);
        let e = stack_name(None, &one(&"c".repeat(48)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("57 characters") && e.contains("give a shorter --stack-name"),
            "{e}"
        );
        let e = stack_name(None, &one("my_cluster"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a CloudFormation stack name"), "{e}");
        assert!(stack_name(Some("9lives"), &one("demo")).is_err());
        let all = Clusters::new(vec![], true).unwrap();
        let e = stack_name(None, &all).unwrap_err().to_string();
        assert!(e.contains("give --stack-name"), "{e}");
    }

    #[test]
    fn busy_or_failed_stacks_are_not_updated() {
        let at = |status: &str| Current {
            status: status.into(),
            ..Current::default()
        };
        assert!(check_updatable("s", &at("UPDATE_ROLLBACK_COMPLETE")).is_ok());
        let busy = check_updatable("s", &at("UPDATE_IN_PROGRESS")).unwrap_err();
        assert!(busy.to_string().contains("wait until it is done"), "{busy}");
        let failed = check_updatable("s", &at("ROLLBACK_COMPLETE")).unwrap_err();
        assert!(failed.to_string().contains("delete-stack"), "{failed}");
    }
}
