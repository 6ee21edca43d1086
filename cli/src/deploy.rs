//! `forewarn deploy`: docs/deploy.md's deployment in one command. Builds both functions with
//! cargo-lambda, creates or updates the stack, deploys the functions with `cargo lambda deploy`
//! from the stack's outputs, wires them (`FunctionsDeployed=true`), makes the access entries of
//! the clusters the stack does not, and applies or prints the Kubernetes manifests in each
//! cluster served. Every step is idempotent: a rerun is an upgrade, and a rerun with one more
//! `--cluster` adds that cluster.

mod access;
mod functions;
mod manifests;
mod routes;
mod stack;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use aws_config::Region;
use clap::Args;
use forewarn::adapters::accounts;
use forewarn::adapters::aws::aws_error_text;
use forewarn::adapters::kube::{ClusterAccess, EksAccess};
use forewarn::app::settings::Settings;
use forewarn::domain::preflight::Capability;

pub(crate) use functions::FUNCTIONS;
use functions::command_line;
use stack::{CREATE_ACCESS_ENTRY, Clusters, Current, FUNCTION_ARCHITECTURE, Param, Plan};

/// The template, relative to the repository's root.
const TEMPLATE: &str = "infra/forewarn.yaml";
/// The outputs printed at the end.
const SUMMARY: &[&str] = &[
    "QueueUrl",
    "DeadLetterQueueUrl",
    "TableName",
    "HandlerFunctionName",
    "SweeperFunctionName",
];
/// Indentation of the lines under a step.
const UNDER: &str = "      ";

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// An EKS cluster to serve (repeatable: one deployment for several clusters; the stack's
    /// Clusters). The first of this account is a new stack's own cluster (the first of its
    /// Clusters: the stack makes its access entries) and names it (forewarn-<cluster>); an
    /// existing stack keeps its own, which must be among them. A member account's cluster is
    /// ACCOUNT/NAME (it needs OrganizationId, and infra/member.yaml in that account): its access
    /// entries are made, and its manifests applied, in that account (see --member-admin-role).
    /// Adding a cluster later: the same command with one more --cluster.
    #[arg(long, required_unless_present = "all_clusters")]
    cluster: Vec<String>,
    /// The role assumed in a member account (--cluster ACCOUNT/NAME) to make its cluster's
    /// access entries and apply its manifests: an administrator's role there.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "OrganizationAccountAccessRole"
    )]
    member_admin_role: String,
    /// Serve every EKS cluster of the account and region (`*` in the stack's Clusters; EKS
    /// ListClusters says which get access entries and manifests now). At most one --cluster of
    /// this account with it: a new stack's own cluster.
    #[arg(long)]
    all_clusters: bool,
    /// The CloudFormation stack, at most 56 characters: its resources are named after it (the
    /// functions <stack>-handler and <stack>-sweeper, which Lambda takes up to 64) [default:
    /// forewarn-<first --cluster>].
    #[arg(long, value_name = "NAME")]
    stack_name: Option<String>,
    /// A stack parameter, e.g. `--parameter FunctionArchitecture=x86_64` (repeatable). An
    /// existing stack keeps the value of every parameter not given. Not FunctionsDeployed (the
    /// command sets it) nor Clusters (--cluster, --all-clusters).
    #[arg(long = "parameter", value_name = "KEY=VALUE")]
    parameters: Vec<String>,
    /// The AWS region [default: the standard AWS configuration: AWS_REGION, the profile].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Carry the deployment out. Without it every step is printed and nothing changes: the
    /// stack is only described, the cluster (with --kube) only read.
    #[arg(long)]
    execute: bool,
    /// One more environment variable of the handler, e.g. the webhook's URL, VARIABLE=https://...
    /// (repeatable). A deploy sets a function's whole environment (the stack's, the crate's
    /// metadata, these): give them at every run.
    #[arg(long, value_name = "KEY=VALUE")]
    handler_env: Vec<String>,
    /// One more environment variable of the sweeper (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    sweeper_env: Vec<String>,
    /// Do not build: deploy the bootstraps already under target/lambda.
    #[arg(long)]
    no_build: bool,
    /// Apply the manifests in each cluster served: through the kubeconfig's (KUBECONFIG,
    /// ~/.kube/config) context named after the cluster, else through EKS with your IAM identity
    /// (one cluster alone: else the kubeconfig's current context).
    /// Without it they are listed with the kubectl commands that apply them.
    #[arg(long)]
    kube: bool,
    /// The forewarn repository to deploy from (its infra/, the functions' crates) [default: the
    /// checkout this command was built from]. Never looked for from the current directory.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// One line on standard output with `format!`'s arguments, flushed (the steps' lines and the
/// builds' progress interleave).
macro_rules! say {
    ($($arg:tt)*) => {{
        let mut out = std::io::stdout().lock();
        writeln!(out, $($arg)*).and_then(|()| out.flush()).context("writing the output")
    }};
}

/// The repository to deploy from: `--root` when given, else the checkout this command was built
/// from (its crate's folder's parent, fixed at build time) — never a folder found from the
/// current directory (whoever controls the working directory would choose the template, the
/// manifests and the functions deployed). It must hold `infra/forewarn.yaml`.
fn find_root(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (root, whence) = match given {
        Some(dir) => (dir.to_path_buf(), "--root"),
        None => (
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            "the checkout forewarn was built from (give --root to deploy from another)",
        ),
    };
    if !root.join(TEMPLATE).is_file() {
        bail!(
            "{TEMPLATE} not found in {} ({whence}): give --root, the forewarn repository to \
             deploy from",
            root.display()
        );
    }
    Ok(root)
}

struct Deploy {
    /// Without --execute: nothing may change.
    dry_run: bool,
    no_build: bool,
    /// `--handler-env`, `--sweeper-env`, checked: in the order of [`FUNCTIONS`].
    env: [Vec<String>; 2],
    root: PathBuf,
    template: String,
    name: String,
    cfn: aws_sdk_cloudformation::Client,
    eks: aws_sdk_eks::Client,
    region: Option<String>,
    plan: Plan,
    /// The clusters served now: `--cluster`, or those EKS lists (`--all-clusters`).
    served: Vec<String>,
    /// The stack's outputs: the existing stack's, then those after each change.
    outputs: Option<BTreeMap<String, String>>,
    /// The command's clock: every wait of the deploy's own (the placeholder policy's check).
    clock: Arc<dyn forewarn::ports::Clock>,
    /// What failed in one cluster while the others went on: the command fails at the end.
    failures: Vec<String>,
    /// The command's settings (how clusters are reached, what the configuration uses).
    settings: Settings,
    /// Each member account's AWS configuration (`--member-admin-role` assumed there), by
    /// account: where its clusters' access entries are made.
    members: Members,
}

pub async fn run(
    args: DeployArgs,
    settings: Settings,
    clock: Arc<dyn forewarn::ports::Clock>,
) -> anyhow::Result<ExitCode> {
    let dry_run = !args.execute;
    // Everything that is not AWS's or a cluster's first: a bad argument stops the command
    // before anything is read.
    let root = find_root(args.root.as_deref())?;
    let template = std::fs::read_to_string(root.join(TEMPLATE))
        .with_context(|| format!("reading {}", root.join(TEMPLATE).display()))?;
    let declared = stack::declared(&template).with_context(|| format!("reading {TEMPLATE}"))?;
    let given = stack::given(&args.parameters, &declared)?;
    let clusters = Clusters::new(args.cluster, args.all_clusters)?;
    let from_the_stack = functions::stack_variables(&template);
    let env = [
        functions::extra_env("--handler-env", &args.handler_env, &from_the_stack)?,
        functions::extra_env("--sweeper-env", &args.sweeper_env, &from_the_stack)?,
    ];
    let objects = manifests::load(&root)?;
    let name = stack::stack_name(args.stack_name.as_deref(), &clusters)?;
    let mut sdk = forewarn::adapters::aws::load(settings.aws).await;
    if let Some(region) = args.region {
        sdk = sdk.into_builder().region(Region::new(region)).build();
    }
    let region = sdk.region().map(ToString::to_string);
    if region.is_none() && !dry_run {
        bail!("no AWS region: give --region, or set AWS_REGION");
    }
    let served = served(&clusters, &sdk, dry_run).await?;
    let mut members = Members::new();
    for (account, _) in clusters.members.iter().filter_map(|c| member_of(c)) {
        let config = member_config(&sdk, account, &args.member_admin_role).await;
        members.entry(account.to_string()).or_insert(config);
    }
    say!(
        "forewarn deploy: {}, stack {name}, region {}{}",
        describe_served(&clusters, &served),
        region.as_deref().unwrap_or("(none configured)"),
        match dry_run {
            true => " — dry run: nothing is changed (add --execute to deploy)",
            false => "",
        }
    )?;
    // The clusters first: when none answers, the command stops before any change.
    let eks = aws_sdk_eks::Client::new(&sdk);
    let reached = match args.kube {
        true => Some(reach(&settings, (&eks, &members), &served, dry_run).await?),
        false => None,
    };
    let cfn = aws_sdk_cloudformation::Client::new(&sdk);
    let current = read_stack(&cfn, &name, dry_run).await?;
    let plan = Plan::new(&name, &clusters, &given, current.as_ref(), &declared)?;
    // A member account's cluster is reached through the member role, which needs the stack's
    // `OrganizationId` (given or kept): refused before anything changes.
    if let Some(member) = clusters.members.first()
        && plan.value("OrganizationId").unwrap_or_default().is_empty()
    {
        bail!(
            "--cluster {member}: a member account's cluster is reached through the member role, \
             which needs an organization: give --parameter OrganizationId=o-... (and deploy \
             infra/member.yaml in that account)"
        );
    }
    // The manifests name the handler's taint: its effect, and NTH's keys only when it uses them.
    let objects = manifests::with_taints(objects, &env[0])?;
    let mut deploy = Deploy {
        outputs: current.map(|c| c.outputs),
        dry_run,
        no_build: args.no_build,
        env,
        root,
        template,
        name,
        cfn,
        eks,
        region,
        plan,
        served,
        clock,
        failures: Vec::new(),
        settings,
        members,
    };
    deploy.build().await?;
    deploy.stack().await?;
    deploy.routes().await?;
    deploy.functions().await?;
    deploy.wire().await?;
    deploy.access_entries().await?;
    deploy.manifests(reached, &objects).await?;
    deploy.summary()?;
    if !deploy.failures.is_empty() {
        bail!(
            "not deployed in every cluster: {}",
            deploy.failures.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The clusters served now: `--cluster`, or every EKS cluster of the account and region
/// (`--all-clusters`). In a dry run a list that cannot be read is empty, after a line saying so.
async fn served(
    clusters: &Clusters,
    sdk: &aws_config::SdkConfig,
    dry_run: bool,
) -> anyhow::Result<Vec<String>> {
    if !clusters.all {
        return Ok([&clusters.named[..], &clusters.members[..]].concat());
    }
    let listed = forewarn::adapters::kube::EksClusters::of(sdk).await;
    match listed.map_err(|e| anyhow!("listing the EKS clusters (--all-clusters): {e}")) {
        Ok(mut names) => {
            names.sort();
            Ok(names)
        }
        Err(e) if dry_run => {
            say!("{e:#}: the clusters are unknown, the per-cluster steps below name none")?;
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// Each member account's AWS configuration, by account.
type Members = BTreeMap<String, aws_config::SdkConfig>;

/// The account and name of a member account's cluster (`ACCOUNT/NAME`); `None` for one of this
/// account.
fn member_of(cluster: &str) -> Option<(&str, &str)> {
    cluster.split_once('/')
}

/// A cluster's name in its own account.
fn bare(cluster: &str) -> &str {
    member_of(cluster).map_or(cluster, |(_, name)| name)
}

/// The AWS configuration of a member account: the operator's credentials (`sdk`), assuming
/// `role` there (its credentials are fetched at the first call: a role that cannot be assumed
/// fails that cluster's steps).
pub(crate) async fn member_config(
    sdk: &aws_config::SdkConfig,
    account: &str,
    role: &str,
) -> aws_config::SdkConfig {
    let region = sdk.region().map_or("us-east-1", |r| r.as_ref());
    let arn = accounts::role_arn(account, role, region);
    accounts::assume_role(sdk, arn, "forewarn-deploy", sdk.region().cloned()).await
}

/// `cluster a`, `clusters a, b`, `every EKS cluster of the account and region (now a, b)`.
fn describe_served(clusters: &Clusters, served: &[String]) -> String {
    match (clusters.all, served) {
        (true, []) => "every EKS cluster of the account and region (none now)".to_string(),
        (true, _) => format!(
            "every EKS cluster of the account and region (now {})",
            served.join(", ")
        ),
        (false, [one]) => format!("cluster {one}"),
        (false, _) => format!("clusters {}", served.join(", ")),
    }
}

/// With `--kube`, each cluster served, connected and asked its version. When none answers (one
/// cluster alone: when it does not), the command stops before any change, except in a dry run;
/// when some do, the others are named now and the command fails at the end.
async fn reach(
    settings: &Settings,
    (eks, members): (&aws_sdk_eks::Client, &Members),
    served: &[String],
    dry_run: bool,
) -> anyhow::Result<Reached> {
    let mut reached = Vec::new();
    for name in served {
        let member = member_of(name).and_then(|(account, _)| members.get(account));
        let cluster = connect(settings, eks, name, served.len() == 1, member).await;
        reached.push((name.clone(), cluster));
    }
    if dry_run {
        return Ok(reached);
    }
    let errors: Vec<String> = (reached.iter())
        .filter_map(|(_, r)| r.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    if !reached.is_empty() && errors.len() == reached.len() {
        bail!("{}", errors.join("; "));
    }
    for (name, r) in &reached {
        if let Err(e) = r {
            say!(
                "cluster {name}: cannot be reached ({e:#}); the other clusters are deployed, and \
                 the command fails at the end"
            )?;
        }
    }
    Ok(reached)
}

/// Each cluster served and its connection (with `--kube`).
type Reached = Vec<(String, anyhow::Result<Cluster>)>;

/// The stack as it is, which must be updatable. In a dry run a stack that cannot be read is
/// `None` (the steps shown are then a first deploy's), after a line saying so, and one that
/// cannot be updated is said.
async fn read_stack(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    dry_run: bool,
) -> anyhow::Result<Option<Current>> {
    match stack::describe(cfn, name).await {
        Ok(Some(current)) => {
            say!("stack {name}: exists ({})", current.status)?;
            match stack::check_updatable(name, &current) {
                Err(e) if dry_run => say!("{UNDER}the update below would fail: {e:#}")?,
                checked => checked?,
            }
            Ok(Some(current))
        }
        Ok(None) => say!("stack {name}: does not exist yet").map(|()| None),
        Err(e) if dry_run => {
            say!(
                "stack {name}: could not be read ({e:#}); whether it exists, its parameters and \
                 its outputs are unknown: the steps below are a first deploy's, with <Output> \
                 for what the stack would say"
            )?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Deploy {
    /// Step 1: `cargo lambda build`, for the architecture of the stack's `FunctionArchitecture`.
    async fn build(&self) -> anyhow::Result<()> {
        let architecture = self.plan.value(FUNCTION_ARCHITECTURE).unwrap_or("arm64");
        let args = functions::build_args(architecture)?;
        let line = command_line("cargo", &args);
        say!("[1/6] build ({architecture}): {line}")?;
        if self.no_build {
            for f in FUNCTIONS {
                let path = functions::bootstrap(&self.root, f.binary);
                match (path.is_file(), self.dry_run) {
                    (true, _) => {}
                    (false, true) => say!(
                        "{UNDER}{} is missing: the deploy would fail",
                        path.display()
                    )?,
                    (false, false) => bail!(
                        "{} is missing (--no-build): build the functions first, or leave out \
                         --no-build",
                        path.display()
                    ),
                }
            }
            return say!(
                "{UNDER}skipped (--no-build): the bootstraps under target/lambda are deployed"
            );
        }
        if self.dry_run {
            return say!("{UNDER}would run it");
        }
        functions::run("cargo", &args, &self.root, true).await?;
        say!("{UNDER}built")
    }

    /// Step 2: the stack created, or updated with the given and kept parameters.
    async fn stack(&mut self) -> anyhow::Result<()> {
        let (exists, first) = (self.plan.exists, self.plan.first.clone());
        let verb = if exists { "update" } else { "create" };
        let params = self.plan.describe(&first);
        say!("[2/6] stack {}: {verb} with {params}", self.name)?;
        if self.dry_run {
            return say!(
                "{UNDER}would {verb} it (capabilities CAPABILITY_NAMED_IAM) and wait until it is \
                 complete"
            );
        }
        self.update(&first, exists).await
    }

    /// The stack created or updated with `params` and said; its outputs kept when it changed.
    async fn update(&mut self, params: &[Param], exists: bool) -> anyhow::Result<()> {
        let (cfn, name) = (&self.cfn, &self.name);
        let (change, outputs) =
            stack::create_or_update(cfn, name, &self.template, params, exists).await?;
        self.outputs = outputs.or(self.outputs.take());
        say!("{UNDER}{change}")
    }

    /// Step 2, with an organization: the route of each member account `Clusters` names (see
    /// [`routes`]), made or updated from the stack's outputs; the routes of accounts no longer
    /// named deleted.
    async fn routes(&mut self) -> anyhow::Result<()> {
        let wanted = routes::accounts(self.plan.value(stack::CLUSTERS).unwrap_or_default());
        let mut existing = BTreeSet::new();
        if self.plan.exists || !self.dry_run {
            match routes::existing(&self.cfn, &self.name).await {
                Ok(listed) => existing = listed,
                // A dry run says what it cannot read, and goes on.
                Err(e) if self.dry_run => {
                    say!("{UNDER}the routes could not be listed ({e}): none assumed")?
                }
                Err(e) => return Err(e),
            }
        }
        let stale: Vec<&String> = existing.iter().filter(|a| !wanted.contains(*a)).collect();
        if wanted.is_empty() && stale.is_empty() {
            return Ok(());
        }
        let path = self.root.join(routes::TEMPLATE);
        let template = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for account in &wanted {
            let name = routes::stack_name(&self.name, account);
            let params = routes::params(account, |k| self.output(k))?;
            if self.dry_run {
                say!("{UNDER}route of {account}: would create or update stack {name}")?;
                continue;
            }
            let exists = existing.contains(account);
            let (change, _) = stack::create_or_update(&self.cfn, &name, &template, &params, exists)
                .await
                .with_context(|| format!("the route of member account {account}"))?;
            say!("{UNDER}route of {account} (stack {name}): {change}")?;
        }
        for account in stale {
            let name = routes::stack_name(&self.name, account);
            if self.dry_run {
                say!("{UNDER}route of {account}: no longer served, would delete stack {name}")?;
                continue;
            }
            let deleted = self.cfn.delete_stack().stack_name(&name).send().await;
            deleted.map_err(|e| anyhow!("DeleteStack {name}: {}", aws_error_text(&e)))?;
            say!("{UNDER}route of {account}: no longer served, stack {name} being deleted")?;
        }
        Ok(())
    }

    /// An output of the stack: in a dry run `<Key>` when unknown; else an error when missing.
    fn output(&self, key: &str) -> anyhow::Result<String> {
        match self.outputs.as_ref().and_then(|o| o.get(key)) {
            Some(value) => Ok(value.clone()),
            None if self.dry_run => Ok(format!("<{key}>")),
            None => bail!(
                "stack {} has no output {key}: was it deployed from {TEMPLATE}?",
                self.name
            ),
        }
    }

    /// Step 3: both functions, with the roles, timeout and environment of the stack's outputs.
    async fn functions(&self) -> anyhow::Result<()> {
        say!("[3/6] functions: cargo lambda deploy, with the stack's outputs")?;
        // Every output the commands name read, and each environment checked, before anything is
        // deployed: a function that cannot start leaves its batches to the queue's visibility
        // timeout.
        let mut deploys = Vec::new();
        for (f, extra) in FUNCTIONS.into_iter().zip(&self.env) {
            let output = |key: &str| self.output(&format!("{}{key}", f.prefix));
            // <Prefix>EnvFile, then --handler-env or --sweeper-env: one KEY=VALUE a line.
            let vars: Vec<String> = (output("EnvFile")?.lines().map(str::to_string))
                .chain(extra.iter().cloned())
                .collect();
            functions::starts_with(f.binary, &vars)?;
            let timeout = self.output("FunctionTimeout")?;
            deploys.push((
                f,
                [output("FunctionName")?, output("RoleArn")?, timeout],
                vars,
            ));
        }
        // Removed at the end of the step; a dry run makes none.
        let env_dir = (!self.dry_run)
            .then(|| {
                tempfile::Builder::new()
                    .prefix("forewarn-deploy-")
                    .tempdir()
            })
            .transpose()
            .context("creating a folder for the functions' environment files")?;
        for (f, outputs, vars) in deploys {
            let path = (env_dir.as_ref()).map(|d| d.path().join(format!("{}.env", f.binary)));
            let env_file = match &path {
                None => format!("<a file holding {}EnvFile>", f.prefix),
                Some(path) => path.display().to_string(),
            };
            let args = functions::deploy_args(f, &outputs, &env_file, self.region.as_deref());
            say!("{UNDER}{}", command_line("cargo", &args))?;
            let Some(path) = path else {
                // A dry run: names only, a value may be a secret (a webhook URL).
                let names = functions::names_of(&vars).join(" ");
                say!("{UNDER}  (the file sets: {names})")?;
                say!("{UNDER}  would run it")?;
                continue;
            };
            std::fs::write(&path, vars.join("\n") + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            functions::run("cargo", &args, &self.root, false).await?;
            say!("{UNDER}  deployed {}", outputs[0])?;
        }
        Ok(())
    }

    /// Step 4: `FunctionsDeployed=true`, unless the stack already had it.
    async fn wire(&mut self) -> anyhow::Result<()> {
        say!(
            "[4/6] wiring: stack {} with FunctionsDeployed=true (the event source mapping, the \
             sweeper's schedule and permission, the function alarms)",
            self.name
        )?;
        if self.plan.wired {
            return say!(
                "{UNDER}already wired (FunctionsDeployed was true and is kept): the first pass \
                 updated what changed"
            );
        }
        let second = self.plan.second();
        if self.dry_run {
            let params = self.plan.describe(&second);
            return say!("{UNDER}would update it with {params} and wait until it is complete");
        }
        self.update(&second, true).await
    }

    /// Step 5: the access entries of the functions' roles in each cluster served but the
    /// stack's own (the first of its `Clusters`: the stack makes those): each role in its
    /// Kubernetes group. None with `CreateAccessEntry=false` (the roles are mapped another way).
    /// A cluster whose entry fails is named, the others go on, and the command fails at the end.
    async fn access_entries(&mut self) -> anyhow::Result<()> {
        say!("[5/6] access entries: the functions' roles in each cluster served (EKS)")?;
        if self.plan.value(CREATE_ACCESS_ENTRY) == Some("false") {
            return say!(
                "{UNDER}none: {CREATE_ACCESS_ENTRY}=false (the roles are given access another \
                 way, e.g. each cluster's aws-auth ConfigMap)"
            );
        }
        let roles = FUNCTIONS.map(|f| self.output(&format!("{}RoleArn", f.prefix)));
        let roles = roles.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let region = self.region.clone().unwrap_or_default();
        for cluster in self.served.clone() {
            if self.plan.own.as_deref() == Some(cluster.as_str()) {
                say!(
                    "{UNDER}cluster {cluster}: the stack's own (HandlerAccessEntry, \
                     SweeperAccessEntry)"
                )?;
                continue;
            }
            // In a member account, the roles the central functions act as there: the member
            // role (the handler's group) and its read-only twin (the sweeper's), as
            // infra/member.yaml names them.
            let (eks, principals) = match member_of(&cluster) {
                None => (self.eks.clone(), roles.clone()),
                Some((account, _)) => {
                    let arn = |role| accounts::role_arn(account, role, &region);
                    let eks = self.members.get(account).map(aws_sdk_eks::Client::new);
                    (
                        eks.unwrap_or_else(|| self.eks.clone()),
                        vec![arn("forewarn-member"), arn("forewarn-member-read")],
                    )
                }
            };
            for (role, f) in principals.iter().zip(FUNCTIONS) {
                let what = format!("{UNDER}cluster {cluster}: {role} in group {}", f.group);
                if role.starts_with('<') {
                    // A stack yet to be created: nothing to read.
                    say!("{what}: would be created")?;
                    continue;
                }
                match access::ensure(&eks, bare(&cluster), role, f.group, self.dry_run).await {
                    Ok(done) => say!("{what}: {done}")?,
                    Err(e) if self.dry_run => say!("{what}: could not be read ({e})")?,
                    Err(e) => {
                        say!("{what}: failed ({e})")?;
                        // The error names the cluster.
                        self.failures.push(e.to_string());
                    }
                }
            }
        }
        Ok(())
    }

    /// Step 6: the manifests in each cluster served, applied with --kube, else listed with their
    /// kubectl commands. A cluster that cannot be reached, or whose manifests fail, is named;
    /// the others go on, and the command fails at the end.
    async fn manifests(
        &mut self,
        reached: Option<Reached>,
        objects: &[manifests::Object],
    ) -> anyhow::Result<()> {
        let files: Vec<&str> = manifests::MANIFESTS.iter().map(|m| m.0).collect();
        say!("[6/6] kubernetes: {}", files.join(", "))?;
        let Some(reached) = reached else {
            return self.list_manifests(objects);
        };
        for (name, cluster) in reached {
            let cluster = match cluster {
                Ok(cluster) => cluster,
                Err(e) if self.dry_run => {
                    say!("{UNDER}cluster {name}: could not be reached ({e:#})")?;
                    for o in objects {
                        say!("{UNDER}  {o} ({}): would be applied", o.file)?;
                    }
                    continue;
                }
                Err(e) => {
                    // The error names the cluster.
                    say!("{UNDER}cluster {name}: not applied ({e:#})")?;
                    self.failures.push(format!("{e:#}"));
                    continue;
                }
            };
            say!("{UNDER}cluster {name} ({}):", via(&cluster.access, &name))?;
            match self.apply_in(&cluster, objects).await {
                Ok(granted) if !self.dry_run => self.preflight(&name, &cluster, granted).await?,
                Ok(_) => {}
                Err(e) => {
                    say!("{UNDER}  cluster {name}: stopped ({e:#})")?;
                    self.failures.push(format!("cluster {name}: {e:#}"));
                }
            }
        }
        Ok(())
    }

    /// Without --kube: the objects, and the kubectl commands that apply them in each cluster.
    fn list_manifests(&self, objects: &[manifests::Object]) -> anyhow::Result<()> {
        for o in objects {
            let what = match o.policy {
                manifests::Policy::Apply => "to be applied",
                manifests::Policy::CreateOnly => "to be created once (never overwritten)",
            };
            say!("{UNDER}{o} ({}): {what}", o.file)?;
        }
        let clusters = match self.served.as_slice() {
            [] | [_] => "the cluster".to_string(),
            several => format!("each cluster ({})", several.join(", ")),
        };
        say!("{UNDER}not applied (no --kube); with admin access to {clusters}, run:")?;
        for c in manifests::kubectl_commands() {
            say!("{UNDER}  {c}")?;
        }
        Ok(())
    }

    /// The preflight (`forewarn check --kube`) in a cluster whose manifests were applied: every
    /// write of both groups as a server-side dry run, one line each. A refused write the
    /// configuration uses fails the command at the end — but the placeholders' when their grant
    /// was not applied (`granted`: surge is off there, as said above).
    async fn preflight(
        &mut self,
        name: &str,
        cluster: &Cluster,
        granted: bool,
    ) -> anyhow::Result<()> {
        let reaching = (&cluster.access, cluster.member.as_ref());
        let proofs = crate::check::prove_cluster(&self.settings, reaching, self.clock.clone());
        let proofs = match proofs.await {
            Ok(proofs) => proofs,
            Err(e) => return say!("{UNDER}  preflight not run ({e:#}): run forewarn check --kube"),
        };
        say!("{UNDER}  preflight (forewarn check --kube), dry runs as each group:")?;
        for line in crate::check::lines(&proofs) {
            say!("{UNDER}    {line}")?;
        }
        let (config, priorities) = (&self.settings.config, self.settings.priorities.enabled);
        let blocked: Vec<String> = forewarn::app::preflight::blocking(&proofs, config, priorities)
            .into_iter()
            .filter(|p| granted || p.capability != Capability::Placeholder)
            .map(|p| format!("{} as {} refused", p.capability.as_str(), p.group))
            .collect();
        if !blocked.is_empty() {
            self.failures
                .push(format!("cluster {name}: preflight: {}", blocked.join(", ")));
        }
        Ok(())
    }

    /// Every object in one cluster, in order; the first failure stops this cluster's. Answers
    /// whether the placeholders' grant was applied (false also in a dry run).
    async fn apply_in(
        &self,
        cluster: &Cluster,
        objects: &[manifests::Object],
    ) -> anyhow::Result<bool> {
        let under = format!("{UNDER}  ");
        let mut skipped: Vec<&str> = Vec::new();
        // The placeholders' grant: applied only once the policy is enforced for both groups
        // (checked when the grant is reached, after the policy and its binding).
        let mut grant: Option<bool> = None;
        for o in objects {
            if let Some(why) = o.skipped_on(cluster.version) {
                say!("{under}{o}: {why}")?;
                if !skipped.contains(&o.file) {
                    skipped.push(o.file);
                }
                continue;
            }
            if manifests::is_placeholder_grant(o) && !self.dry_run {
                let granted = match grant {
                    Some(granted) => granted,
                    None => self.placeholder_policy_holds(cluster, &under).await?,
                };
                grant = Some(granted);
                if !granted {
                    say!("{under}{o}: not applied (surge is off, above)")?;
                    continue;
                }
            }
            match manifests::apply(&cluster.client, o, self.dry_run).await {
                Ok(done) => say!("{under}{o}: {done}")?,
                Err(e) if self.dry_run => say!("{under}{o}: could not be read ({e:#})")?,
                Err(e) => return Err(e),
            }
        }
        for file in skipped {
            say!("{under}{}", skipped_means(file))?;
        }
        Ok(grant.unwrap_or(false))
    }

    /// Whether the placeholder policy is enforced for both of forewarn's groups (said for each);
    /// when it is not, says plainly that surge is off on this cluster and why.
    async fn placeholder_policy_holds(
        &self,
        cluster: &Cluster,
        under: &str,
    ) -> anyhow::Result<bool> {
        for group in FUNCTIONS.map(|f| f.group) {
            let clock = self.clock.as_ref();
            let found = manifests::check_placeholder_policy(&cluster.client, group, 5, clock).await;
            if found != manifests::Enforcement::Enforced {
                say!("{under}{}", manifests::surge_off(group, &found))?;
                return Ok(false);
            }
            say!(
                "{under}{}: enforced for {group} (a pod that is not a placeholder is refused)",
                manifests::PLACEHOLDER_POLICY
            )?;
        }
        Ok(true)
    }

    /// The outputs that matter, and the last line.
    fn summary(&self) -> anyhow::Result<()> {
        let name = &self.name;
        match &self.outputs {
            Some(outputs) => {
                say!("outputs of stack {name}:")?;
                for key in SUMMARY {
                    say!(
                        "  {key}: {}",
                        outputs.get(*key).map_or("(none)", String::as_str)
                    )?;
                }
            }
            None => say!("outputs of stack {name}: known once it exists")?,
        }
        let last = match (self.dry_run, self.failures.is_empty()) {
            (true, _) => "dry run: nothing was changed (add --execute to deploy)",
            (false, true) => "deployed",
            (false, false) => "deployed, but not in every cluster (below)",
        };
        say!("{last}")
    }
}

/// What a manifest skipped on an older cluster means.
fn skipped_means(file: &str) -> &'static str {
    match file {
        "infra/k8s/flow-control.yaml" => {
            "without flow-control.yaml, forewarn's requests share the priority level \
             global-default with every other ordinary client: its own share of the API server \
             (API Priority and Fairness) needs Kubernetes 1.29"
        }
        "infra/k8s/node-writes.yaml" => {
            "without node-writes.yaml, forewarn's groups may patch any field of a Node that RBAC \
             lets them (rbac.yaml): the admission policy that narrows it needs Kubernetes 1.30"
        }
        _ => {
            "surge is off on this cluster: without placeholders.yaml (ValidatingAdmissionPolicy \
             is served from Kubernetes 1.30; this server is older), surge (spot, capacity \
             reservation and Capacity Block warnings by default) has no grant: each placeholder \
             is refused and its pod evicted at once, as without surge; a policy rule \
             `{name: no-surge, nodes: {}, surge: []}` stops it trying"
        }
    }
}

/// How `--kube` reaches the cluster `name`: the kubeconfig's context named after it when there
/// is one; else the settings' EKS access when it names it; else, one cluster alone (of this
/// account), the kubeconfig's current context; else EKS (`DescribeCluster`, an IAM token of the
/// caller's identity).
fn access_of(settings: &Settings, name: &str, one: bool) -> ClusterAccess {
    if forewarn::adapters::kube::has_context(name) {
        return ClusterAccess::Context(name.to_string());
    }
    match &settings.cluster_access {
        ClusterAccess::Eks(eks) if eks.cluster == name => settings.cluster_access.clone(),
        ClusterAccess::Kubeconfig if one && member_of(name).is_none() => ClusterAccess::Kubeconfig,
        _ => ClusterAccess::Eks(EksAccess {
            cluster: bare(name).to_string(),
            ..EksAccess::default()
        }),
    }
}

/// How the cluster `name` is reached, said: `kubeconfig context NAME`, `EKS`, ...
fn via(access: &ClusterAccess, name: &str) -> String {
    match (access, member_of(name)) {
        (ClusterAccess::Context(context), _) => format!("kubeconfig context {context}"),
        (ClusterAccess::Kubeconfig, _) => "the kubeconfig's current context".to_string(),
        (ClusterAccess::Eks(_), Some((account, _))) => format!("EKS in account {account}"),
        (ClusterAccess::Eks(_), None) => "EKS".to_string(),
    }
}

/// A client of the cluster `name` ([`access_of`]), which has answered (its version), and —
/// reached through a kubeconfig — is EKS cluster `name` ([`same_endpoint`]). A member
/// account's cluster (`member`: its account's AWS configuration) is described, and signed for,
/// in that account.
async fn connect(
    settings: &Settings,
    eks: &aws_sdk_eks::Client,
    name: &str,
    one: bool,
    member: Option<&aws_config::SdkConfig>,
) -> anyhow::Result<Cluster> {
    let access = access_of(settings, name, one);
    let connecting = || format!("cluster {name}: connecting (--kube)");
    let client = crate::check::connect(settings, (&access, member), None)
        .await
        .with_context(connecting)?
        .client()
        .await
        .with_context(connecting)?;
    let info = (client.apiserver_version().await)
        .with_context(|| format!("cluster {name}: the cluster does not answer (--kube)"))?;
    let eks = member.map_or_else(|| eks.clone(), aws_sdk_eks::Client::new);
    same_endpoint(&eks, bare(name), &access)
        .await
        .with_context(|| format!("cluster {name}: not the EKS cluster of that name (--kube)"))?;
    let version = manifests::version_of(&info.major, &info.minor);
    let member = member.cloned();
    Ok(Cluster {
        client,
        version,
        access,
        member,
    })
}

/// Before anything is granted through a kubeconfig context (`access`, with the kubeconfig read
/// from `KUBECONFIG`, else `~/.kube/config`): its server must be EKS cluster `name`'s endpoint
/// (`DescribeCluster` in the deployment's account and region), so that a context of that name
/// pointing elsewhere — another account's cluster of the same name, a stale entry — gets no
/// grant of forewarn's. Reached through EKS itself, nothing to check.
pub(crate) async fn same_endpoint(
    eks: &aws_sdk_eks::Client,
    name: &str,
    access: &ClusterAccess,
) -> anyhow::Result<()> {
    let context = match access {
        ClusterAccess::Context(c) => Some(c.as_str()),
        ClusterAccess::Kubeconfig => None,
        ClusterAccess::Eks(_) => return Ok(()),
    };
    let kubeconfig = kube::config::Kubeconfig::read().context("reading the kubeconfig")?;
    endpoint_is(eks, name, &kubeconfig, context).await
}

/// [`same_endpoint`] on `kubeconfig`'s context `context` (`None`: the current one).
async fn endpoint_is(
    eks: &aws_sdk_eks::Client,
    name: &str,
    kubeconfig: &kube::config::Kubeconfig,
    context: Option<&str>,
) -> anyhow::Result<()> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await;
    let server = config
        .context("reading the kubeconfig")?
        .cluster_url
        .to_string();
    let described = eks.describe_cluster().name(name).send().await;
    let described =
        described.map_err(|e| anyhow!("EKS DescribeCluster of {name}: {}", aws_error_text(&e)))?;
    let endpoint = (described.cluster().and_then(|c| c.endpoint()))
        .ok_or_else(|| anyhow!("EKS cluster {name} has no endpoint yet"))?;
    let trimmed = |url: &str| url.trim_end_matches('/').to_ascii_lowercase();
    if trimmed(&server) != trimmed(endpoint) {
        bail!(
            "the kubeconfig's {} points at {server}, not EKS cluster {name}'s endpoint \
             {endpoint}: nothing is applied through it",
            context.map_or("current context".to_string(), |c| format!("context {c}"))
        );
    }
    Ok(())
}

/// A cluster `--kube` reaches, how, and its (major, minor) version when `/version` gave numbers.
struct Cluster {
    client: kube::Client,
    version: Option<(u32, u32)>,
    /// How it is reached (the preflight's impersonating clients too).
    access: ClusterAccess,
    /// A member account's configuration (its admin role), which reaches its EKS cluster.
    member: Option<aws_config::SdkConfig>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig context of the cluster's name that points elsewhere than EKS's endpoint for
    /// it (another account's cluster of that name, a stale entry) is refused, both named; the
    /// same server (a trailing slash and case aside) passes; a cluster EKS does not know is
    /// refused.
    #[tokio::test]
    async fn a_context_pointing_elsewhere_than_the_clusters_endpoint_is_refused() {
        let fake = forewarn_tests::eks::EksFake::start(&["blue"]).await;
        fake.set_endpoint("blue", "https://ABC.gr7.us-east-1.eks.amazonaws.com");
        let eks = access::tests::client_of(&fake);
        let kubeconfig = |server: &str| {
            kube::config::Kubeconfig::from_yaml(&format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: blue\n  context:\n    cluster: c\n    user: u\n\
                 current-context: blue\n"
            ))
            .unwrap()
        };
        let right = kubeconfig("https://abc.gr7.us-east-1.eks.amazonaws.com/");
        endpoint_is(&eks, "blue", &right, Some("blue"))
            .await
            .unwrap();
        endpoint_is(&eks, "blue", &right, None).await.unwrap();
        let wrong = kubeconfig("https://other.gr7.us-east-1.eks.amazonaws.com");
        let e = endpoint_is(&eks, "blue", &wrong, Some("blue"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("context blue points at https://other") && e.contains("nothing is applied"),
            "{e}"
        );
        let e = endpoint_is(&eks, "green", &right, Some("blue"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("DescribeCluster of green"), "{e}");
    }
}
