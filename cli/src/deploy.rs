//! `forewarn deploy`: docs/deploy.md's deployment in one command. Builds both functions with
//! cargo-lambda, creates or updates the stack, deploys the functions with `cargo lambda deploy`
//! from the stack's outputs, wires them (`FunctionsDeployed=true`), and applies or prints the
//! Kubernetes manifests. Every step is idempotent: a rerun is an upgrade.

mod functions;
mod manifests;
mod stack;

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use aws_config::Region;
use clap::Args;
use forewarn::app::settings::Settings;

use functions::{Env, FUNCTIONS, command_line};
use stack::{Change, Current, FUNCTION_ARCHITECTURE, Plan};

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
    /// The EKS cluster (the stack's ClusterName).
    #[arg(long, value_name = "NAME")]
    cluster: String,
    /// The CloudFormation stack [default: forewarn-<cluster>].
    #[arg(long, value_name = "NAME")]
    stack_name: Option<String>,
    /// A stack parameter, e.g. `--parameter FunctionArchitecture=x86_64` (repeatable). An
    /// existing stack keeps the value of every parameter not given. Not FunctionsDeployed (the
    /// command sets it) nor ClusterName (--cluster).
    #[arg(long = "parameter", value_name = "KEY=VALUE")]
    parameters: Vec<String>,
    /// The AWS region [default: the standard AWS configuration: AWS_REGION, the profile].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Print every step and change nothing: the stack is only described, the cluster (with
    /// --kube) only read.
    #[arg(long)]
    dry_run: bool,
    /// One more environment variable of the handler, e.g. FOREWARN_WEBHOOK_URL=https://...
    /// (repeatable). A deploy sets a function's whole environment (the stack's, the crate's
    /// metadata, these): give them at every run.
    #[arg(long, value_name = "KEY=VALUE")]
    handler_env: Vec<String>,
    /// One more environment variable of the sweeper (repeatable; no comma in the value).
    #[arg(long, value_name = "KEY=VALUE")]
    sweeper_env: Vec<String>,
    /// Do not build: deploy the bootstraps already under target/lambda.
    #[arg(long)]
    no_build: bool,
    /// Apply the manifests to the cluster of the kubeconfig (KUBECONFIG, ~/.kube/config, or
    /// FOREWARN_EKS_CLUSTER). Without it they are listed with the kubectl commands that apply
    /// them.
    #[arg(long)]
    kube: bool,
    /// The forewarn repository to deploy from (its infra/, the functions' crates) [default: the
    /// checkout this command was built from]. Never looked for from the current directory.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// One line on standard output, flushed (the steps' lines and the builds' progress interleave).
fn say(text: impl Display) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .context("writing the output")
}

/// The checkout this command was built from (its crate's folder's parent, fixed at build time).
fn own_checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository to deploy from: `--root` when given, else [`own_checkout`] — never a folder
/// found from the current directory (whoever controls the working directory would choose the
/// template, the manifests and the functions deployed). It must hold `infra/forewarn.yaml`.
fn find_root(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (root, whence) = match given {
        Some(dir) => (dir.to_path_buf(), "--root"),
        None => (
            own_checkout(),
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
    args: DeployArgs,
    /// `--handler-env`, `--sweeper-env`, checked.
    handler_env: Vec<String>,
    sweeper_env: Vec<String>,
    root: PathBuf,
    template: String,
    name: String,
    cfn: aws_sdk_cloudformation::Client,
    region: Option<String>,
    plan: Plan,
    /// The stack's outputs: the existing stack's, then those after the first pass.
    outputs: Option<BTreeMap<String, String>>,
    /// The command's clock: every wait of the deploy's own (the placeholder policy's check).
    clock: std::sync::Arc<dyn forewarn::ports::Clock>,
}

pub async fn run(
    args: DeployArgs,
    settings: Settings,
    clock: std::sync::Arc<dyn forewarn::ports::Clock>,
) -> anyhow::Result<ExitCode> {
    let root = find_root(args.root.as_deref())?;
    let template = std::fs::read_to_string(root.join(TEMPLATE))
        .with_context(|| format!("reading {}", root.join(TEMPLATE).display()))?;
    let declared = stack::declared(&template).with_context(|| format!("reading {TEMPLATE}"))?;
    let given = stack::given(&args.parameters, &declared)?;
    let handler_env = functions::extra_env("--handler-env", &args.handler_env, true)?;
    let sweeper_env = functions::extra_env("--sweeper-env", &args.sweeper_env, false)?;
    let objects = manifests::load(&root)?;
    let name = args
        .stack_name
        .clone()
        .unwrap_or_else(|| format!("forewarn-{}", args.cluster));
    let mut sdk = forewarn::adapters::aws::load(settings.aws).await;
    if let Some(region) = &args.region {
        sdk = sdk
            .into_builder()
            .region(Region::new(region.clone()))
            .build();
    }
    let region = sdk.region().map(ToString::to_string);
    if region.is_none() && !args.dry_run {
        bail!("no AWS region: give --region, or set AWS_REGION");
    }
    say(format!(
        "forewarn deploy: cluster {}, stack {name}, region {}{}",
        args.cluster,
        region.as_deref().unwrap_or("(none configured)"),
        if args.dry_run {
            " — dry run: nothing is changed"
        } else {
            ""
        }
    ))?;
    // The cluster first: a kubeconfig that does not work stops the command before any change.
    let cluster = match (args.kube, args.dry_run) {
        (false, _) => None,
        (true, true) => Some(connect(&settings).await),
        (true, false) => Some(Ok(connect(&settings).await?)),
    };
    let cfn = aws_sdk_cloudformation::Client::new(&sdk);
    let current = read_stack(&cfn, &name, args.dry_run).await?;
    if let Some(current) = &current
        && !args.dry_run
    {
        stack::check_updatable(&name, current)?;
    }
    let plan = Plan::new(&name, &args.cluster, &given, current.as_ref(), &declared)?;
    // The manifests name the stack's groups (given, kept, or the defaults they are written with).
    let groups: Vec<(String, String)> = manifests::GROUP_PARAMETERS
        .iter()
        .map(|(param, default)| {
            let name = plan.value(param).unwrap_or(default);
            (default.to_string(), name.to_string())
        })
        .collect();
    let objects = manifests::with_groups(objects, &groups);
    let mut deploy = Deploy {
        outputs: current.map(|c| c.outputs),
        args,
        handler_env,
        sweeper_env,
        root,
        template,
        name,
        cfn,
        region,
        plan,
        clock,
    };
    deploy.build().await?;
    deploy.stack().await?;
    deploy.functions().await?;
    deploy.wire().await?;
    deploy.manifests(cluster, &objects).await?;
    deploy.summary()?;
    Ok(ExitCode::SUCCESS)
}

/// The stack as it is. In a dry run a stack that cannot be read is `None` (the steps shown are
/// then a first deploy's), after a line saying so.
async fn read_stack(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    dry_run: bool,
) -> anyhow::Result<Option<Current>> {
    match stack::describe(cfn, name).await {
        Ok(Some(current)) => {
            say(format!("stack {name}: exists ({})", current.status))?;
            if dry_run && let Err(e) = stack::check_updatable(name, &current) {
                say(format!("{UNDER}the update below would fail: {e:#}"))?;
            }
            Ok(Some(current))
        }
        Ok(None) => {
            say(format!("stack {name}: does not exist yet"))?;
            Ok(None)
        }
        Err(e) if dry_run => {
            say(format!(
                "stack {name}: could not be read ({e:#}); whether it exists, its parameters and \
                 its outputs are unknown: the steps below are a first deploy's, with <Output> \
                 for what the stack would say"
            ))?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Deploy {
    fn dry_run(&self) -> bool {
        self.args.dry_run
    }

    /// Step 1: `cargo lambda build`, for the architecture of the stack's `FunctionArchitecture`.
    async fn build(&self) -> anyhow::Result<()> {
        let architecture = self.plan.value(FUNCTION_ARCHITECTURE).unwrap_or("arm64");
        let args = functions::build_args(functions::build_flag(architecture)?);
        say(format!(
            "[1/5] build ({architecture}): {}",
            command_line("cargo", &args)
        ))?;
        if self.args.no_build {
            for f in FUNCTIONS {
                let path = functions::bootstrap(&self.root, f.binary);
                match (path.is_file(), self.dry_run()) {
                    (true, _) => {}
                    (false, true) => say(format!(
                        "{UNDER}{} is missing: the deploy would fail",
                        path.display()
                    ))?,
                    (false, false) => bail!(
                        "{} is missing (--no-build): build the functions first, or leave out \
                         --no-build",
                        path.display()
                    ),
                }
            }
            return say(format!(
                "{UNDER}skipped (--no-build): the bootstraps under target/lambda are deployed"
            ));
        }
        if self.dry_run() {
            return say(format!("{UNDER}would run it"));
        }
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || functions::run("cargo", &args, &root, true))
            .await
            .context("the build's task")??;
        say(format!("{UNDER}built"))
    }

    /// Step 2: the stack created, or updated with the given and kept parameters.
    async fn stack(&mut self) -> anyhow::Result<()> {
        let verb = if self.plan.exists { "update" } else { "create" };
        say(format!(
            "[2/5] stack {}: {verb} with {}",
            self.name,
            self.plan.describe(&self.plan.first)
        ))?;
        if self.dry_run() {
            return say(format!(
                "{UNDER}would {verb} it (capabilities CAPABILITY_NAMED_IAM) and wait until it is \
                 complete"
            ));
        }
        let change = stack::create_or_update(
            &self.cfn,
            &self.name,
            &self.template,
            &self.plan.first,
            self.plan.exists,
        )
        .await?;
        say(format!("{UNDER}{change}"))?;
        self.refresh_outputs().await
    }

    async fn refresh_outputs(&mut self) -> anyhow::Result<()> {
        let current = stack::describe(&self.cfn, &self.name)
            .await?
            .ok_or_else(|| anyhow!("stack {} is gone", self.name))?;
        self.outputs = Some(current.outputs);
        Ok(())
    }

    /// An output of the stack: in a dry run `<Key>` when unknown; else an error when missing.
    fn output(&self, key: &str) -> anyhow::Result<String> {
        match self.outputs.as_ref().and_then(|o| o.get(key)) {
            Some(value) => Ok(value.clone()),
            None if self.dry_run() => Ok(format!("<{key}>")),
            None => bail!(
                "stack {} has no output {key}: was it deployed from {TEMPLATE}?",
                self.name
            ),
        }
    }

    /// Step 3: both functions, with the roles, timeout and environment of the stack's outputs.
    async fn functions(&self) -> anyhow::Result<()> {
        say("[3/5] functions: cargo lambda deploy, with the stack's outputs")?;
        let known: BTreeMap<String, String> = [
            "FunctionTimeout",
            "HandlerEnvFile",
            "SweeperEnvVars",
            "HandlerFunctionName",
            "HandlerRoleArn",
            "SweeperFunctionName",
            "SweeperRoleArn",
        ]
        .iter()
        .map(|k| Ok((k.to_string(), self.output(k)?)))
        .collect::<anyhow::Result<_>>()?;
        let lookup = |k: &str| known.get(k).cloned().unwrap_or_else(|| format!("<{k}>"));
        // HandlerEnvFile, then --handler-env: one KEY=VALUE a line.
        let mut handler_vars: Vec<String> = lookup("HandlerEnvFile")
            .lines()
            .map(str::to_string)
            .collect();
        handler_vars.extend(self.handler_env.iter().cloned());
        // Removed at the end of the step.
        let env_dir = match self.dry_run() {
            true => None,
            false => Some(
                tempfile::Builder::new()
                    .prefix("forewarn-deploy-")
                    .tempdir()
                    .context("creating a folder for the handler's environment file")?,
            ),
        };
        let env_file = match &env_dir {
            None => "<a file holding HandlerEnvFile>".to_string(),
            Some(dir) => {
                let path = dir.path().join("handler.env");
                std::fs::write(&path, format!("{}\n", handler_vars.join("\n")))
                    .with_context(|| format!("writing {}", path.display()))?;
                path.display().to_string()
            }
        };
        let sweeper_vars = lookup("SweeperEnvVars");
        let endpoint = functions::endpoint_from_env();
        for f in FUNCTIONS {
            let env = match f.prefix {
                "Handler" => Env::File(&env_file),
                _ => Env::Vars(&sweeper_vars, &self.sweeper_env),
            };
            let args = functions::deploy_args(
                f,
                &lookup,
                env,
                self.region.as_deref(),
                endpoint.as_deref(),
            );
            say(format!("{UNDER}{}", command_line("cargo", &args)))?;
            if self.dry_run() {
                if f.prefix == "Handler" {
                    // Names only: a value may be a secret (a webhook URL).
                    say(format!(
                        "{UNDER}  (the file sets: {})",
                        functions::names_of(&handler_vars).join(" ")
                    ))?;
                }
                say(format!("{UNDER}  would run it"))?;
                continue;
            }
            let root = self.root.clone();
            tokio::task::spawn_blocking(move || functions::run("cargo", &args, &root, false))
                .await
                .context("the deploy's task")??;
            say(format!(
                "{UNDER}  deployed {}",
                lookup(&format!("{}FunctionName", f.prefix))
            ))?;
        }
        Ok(())
    }

    /// Step 4: `FunctionsDeployed=true`, unless the stack already had it.
    async fn wire(&mut self) -> anyhow::Result<()> {
        say(format!(
            "[4/5] wiring: stack {} with FunctionsDeployed=true (the event source mapping, the \
             sweeper's schedule and permission, the function alarms)",
            self.name
        ))?;
        if self.plan.wired {
            return say(format!(
                "{UNDER}already wired (FunctionsDeployed was true and is kept): the first pass \
                 updated what changed"
            ));
        }
        if self.dry_run() {
            return say(format!(
                "{UNDER}would update it with {} and wait until it is complete",
                self.plan.describe(&self.plan.second())
            ));
        }
        let change = stack::create_or_update(
            &self.cfn,
            &self.name,
            &self.template,
            &self.plan.second(),
            true,
        )
        .await?;
        say(format!("{UNDER}{change}"))?;
        if change != Change::Unchanged {
            self.refresh_outputs().await?;
        }
        Ok(())
    }

    /// Step 5: the manifests, applied with --kube, else listed with their kubectl commands.
    async fn manifests(
        &self,
        cluster: Option<anyhow::Result<Cluster>>,
        objects: &[manifests::Object],
    ) -> anyhow::Result<()> {
        let files: Vec<&str> = manifests::MANIFESTS.iter().map(|m| m.0).collect();
        say(format!("[5/5] kubernetes: {}", files.join(", ")))?;
        let Some(cluster) = cluster else {
            for o in objects {
                let what = match o.policy {
                    manifests::Policy::Apply => "to be applied",
                    manifests::Policy::CreateOnly => "to be created once (never overwritten)",
                };
                say(format!("{UNDER}{o} ({}): {what}", o.file))?;
            }
            say(format!(
                "{UNDER}not applied (no --kube); with admin access to the cluster, run:"
            ))?;
            for c in manifests::kubectl_commands() {
                say(format!("{UNDER}  {c}"))?;
            }
            return Ok(());
        };
        let Cluster { client, version } = match cluster {
            Ok(cluster) => cluster,
            Err(e) if self.dry_run() => {
                say(format!("{UNDER}the cluster could not be reached ({e:#})"))?;
                for o in objects {
                    say(format!("{UNDER}{o} ({}): would be applied", o.file))?;
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut skipped: Vec<&str> = Vec::new();
        let mut checked = false;
        for o in objects {
            if let Some(why) = o.skipped_on(version) {
                say(format!("{UNDER}{o}: {why}"))?;
                if !skipped.contains(&o.file) {
                    skipped.push(o.file);
                }
                continue;
            }
            if manifests::is_placeholder_grant(o) && !checked && !self.dry_run() {
                // The policy and its binding were applied: the grant only once it holds, for
                // both of forewarn's groups.
                for key in ["HandlerKubernetesGroup", "SweeperKubernetesGroup"] {
                    let group = self.plan.value(key).unwrap_or_default();
                    manifests::check_placeholder_policy(&client, group, 5, self.clock.as_ref())
                        .await?;
                    say(format!(
                        "{UNDER}{}: enforced for {group} (a pod that is not a placeholder is \
                         refused)",
                        manifests::PLACEHOLDER_POLICY
                    ))?;
                }
                checked = true;
            }
            match manifests::apply(&client, o, self.dry_run()).await {
                Ok(outcome) => say(format!("{UNDER}{o}: {outcome}"))?,
                Err(e) if self.dry_run() => say(format!("{UNDER}{o}: could not be read ({e:#})"))?,
                Err(e) => return Err(e),
            }
        }
        for file in skipped {
            say(format!("{UNDER}{}", skipped_means(file)))?;
        }
        Ok(())
    }

    /// The outputs that matter, and the last line.
    fn summary(&self) -> anyhow::Result<()> {
        match &self.outputs {
            Some(outputs) => {
                say(format!("outputs of stack {}:", self.name))?;
                for key in SUMMARY {
                    let value = outputs.get(*key).map_or("(none)", String::as_str);
                    say(format!("  {key}: {value}"))?;
                }
            }
            None => say(format!(
                "outputs of stack {}: known once it exists",
                self.name
            ))?,
        }
        say(if self.dry_run() {
            "dry run: nothing was changed"
        } else {
            "deployed"
        })
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
            "without placeholders.yaml, surge (FOREWARN_SURGE: spot and capacity-reservation \
             warnings by default) has no grant: each placeholder is refused and its pod evicted \
             at once, as without surge; --handler-env FOREWARN_SURGE= --sweeper-env \
             FOREWARN_SURGE= stops it trying"
        }
    }
}

/// A client of the cluster the settings reach (the kubeconfig, or FOREWARN_EKS_CLUSTER), which
/// has answered (its version).
async fn connect(settings: &Settings) -> anyhow::Result<Cluster> {
    let cluster = forewarn::adapters::kube::connect(&settings.cluster_access, settings.aws)
        .await
        .context("connecting to the cluster (--kube)")?;
    let client = cluster
        .client()
        .await
        .context("connecting to the cluster (--kube)")?;
    let info = client
        .apiserver_version()
        .await
        .context("the cluster does not answer (--kube)")?;
    Ok(Cluster {
        version: manifests::version_of(&info.major, &info.minor),
        client,
    })
}

/// The cluster `--kube` reaches, and its (major, minor) version when `/version` gave numbers.
struct Cluster {
    client: kube::Client,
    version: Option<(u32, u32)>,
}
