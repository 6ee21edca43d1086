//! `forewarn deploy` end to end: against moto (its endpoint through AWS_ENDPOINT_URL, as the SDK
//! and `cargo lambda deploy --endpoint-url` take it) and the Kubernetes API fake (through a
//! kubeconfig). A dry run changes nothing; a first run creates the stack, both functions, the
//! event source mapping and the manifests' objects; a second run (an upgrade, without the
//! parameters: the stack keeps them) leaves the mapping and the priority expander's ConfigMap as
//! they are and puts back an RBAC object that drifted.
//!
//! The functions must have been built with `cargo lambda build --x86-64` (scripts/test.sh does
//! it first); the runs use `--no-build`: the release build for arm64 cannot run on these
//! machines.

use std::path::Path;
use std::process::{Command, Output};

use aws_sdk_cloudformation::Client;
use forewarn_tests::moto::{runtime, shared, unique_name};
use kube_fake::{KubeFake, ResourceDef, StatusOnCreate};
use serde_json::{Value, json};

// Several clusters in one deployment.
#[path = "deploy/many.rs"]
mod many;
mod support;
use forewarn_tests::eks::EksFake;
use support::{Forewarn, kubeconfig_for, root};

/// The venv's tools (cargo-lambda, the AWS CLI) first on PATH.
fn path_with_venv() -> String {
    format!(
        "{}:{}",
        root().join(".venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A row of the fake for an RBAC kind, which it does not serve by default.
fn rbac(kind: &'static str, plural: &'static str, namespaced: bool) -> ResourceDef {
    ResourceDef {
        group: "rbac.authorization.k8s.io",
        ..row(kind, plural, namespaced)
    }
}

/// A row of the fake for a core kind it does not serve by default (`group` set over it for
/// another).
fn row(kind: &'static str, plural: &'static str, namespaced: bool) -> ResourceDef {
    ResourceDef {
        group: "",
        version: "v1",
        kind,
        plural,
        singular: "",
        namespaced,
        short_names: &[],
        custom: false,
        status_subresource: false,
        status_on_create: StatusOnCreate::Keep,
        delete_returns_object: false,
        create_on_update: true,
        field_labels: None,
        list_merge: &[],
    }
}

/// A row of the fake for Namespaces, which it does not serve by default: cluster-scoped, with
/// a status the server sets (`Active`) on create, as the API server's namespace registry does.
fn namespaces() -> ResourceDef {
    ResourceDef {
        group: "",
        status_subresource: true,
        status_on_create: StatusOnCreate::Replace(|| json!({"phase": "Active"})),
        create_on_update: false,
        ..row("Namespace", "namespaces", false)
    }
}

/// The fake serving what the manifests hold, at Kubernetes `minor` (1.x), with a 1.29+ server's
/// flow-control configuration.
async fn fake_at(minor: u32) -> KubeFake {
    KubeFake::builder()
        .version(1, minor)
        .flow_control()
        .resource(namespaces())
        .resource(rbac("ClusterRole", "clusterroles", false))
        .resource(rbac("ClusterRoleBinding", "clusterrolebindings", false))
        .resource(rbac("Role", "roles", true))
        .resource(rbac("RoleBinding", "rolebindings", true))
        .admission_policies()
        .start()
        .await
}

async fn fake() -> KubeFake {
    fake_at(33).await
}

/// `forewarn <args>` in the workspace root against moto at `endpoint` and the cluster of
/// `kubeconfig`, off the runtime (which serves the fake).
async fn forewarn(endpoint: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    forewarn_with(endpoint, None, kubeconfig, args).await
}

/// [`forewarn`], EKS at `eks` (the tests' fake) when given; else an EKS that knows each
/// `--cluster` as the cluster the kubeconfig's current context points at (its endpoint), as a
/// kubeconfig made by `aws eks update-kubeconfig` does.
async fn forewarn_with(
    endpoint: &str,
    eks: Option<&str>,
    kubeconfig: &Path,
    args: &[&str],
) -> Output {
    let (endpoint, kubeconfig) = (endpoint.to_string(), kubeconfig.to_path_buf());
    let own_eks = match eks {
        Some(_) => None,
        None => Some(eks_of(&kubeconfig, args).await),
    };
    let eks = eks
        .map(str::to_string)
        .or_else(|| own_eks.as_ref().map(EksFake::url))
        .unwrap_or_default();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let state = tempfile::tempdir().unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Forewarn::new(state.path())
            .aws_testing()
            .env("AWS_ENDPOINT_URL_EKS", &eks)
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env_remove("AWS_ENDPOINT_URL_LAMBDA")
            .env_remove("AWS_ENDPOINT_URL_CLOUDFORMATION")
            .env_remove("AWS_PROFILE")
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("FOREWARN_EKS_CLUSTER")
            .env("PATH", path_with_venv())
            .run(&args)
    })
    .await
    .unwrap()
}

/// An EKS whose clusters are `args`' `--cluster`s, each at the server of `kubeconfig`'s current
/// context (none readable: nowhere that answers).
async fn eks_of(kubeconfig: &Path, args: &[&str]) -> EksFake {
    let clusters: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--cluster")
        .map(|w| w[1])
        .collect();
    let eks = EksFake::start(&clusters).await;
    let server = kube::config::Kubeconfig::read_from(kubeconfig)
        .ok()
        .and_then(|k| {
            let current = k.current_context.clone()?;
            let context = k
                .contexts
                .iter()
                .find(|c| c.name == current)?
                .context
                .clone()?;
            let cluster = k.clusters.iter().find(|c| c.name == context.cluster)?;
            cluster.cluster.as_ref()?.server.clone()
        })
        .unwrap_or_else(|| "http://127.0.0.1:1".into());
    for cluster in clusters {
        eks.set_endpoint(cluster, &server);
    }
    eks
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "forewarn deploy failed:\n{}\n{}",
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
}

/// The venv's `aws` against moto; `None` when it fails.
fn aws(endpoint: &str, args: &[&str]) -> Option<Value> {
    let out = Command::new("aws")
        .args(args)
        .args(["--output", "json"])
        .env("PATH", path_with_venv())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .output()
        .expect("run the venv's aws (scripts/test.sh installs it)");
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// The parameters of `name`, an updated stack.
async fn stack_parameters(cfn: &Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let d = cfn.describe_stacks().stack_name(name).send().await.unwrap();
    assert_eq!(
        d.stacks()[0].stack_status().map(|s| s.as_str()),
        Some("UPDATE_COMPLETE")
    );
    parameters_of(cfn, name).await
}

/// The parameters of `name`, whatever its status.
async fn parameters_of(cfn: &Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let d = cfn.describe_stacks().stack_name(name).send().await.unwrap();
    d.stacks()[0]
        .parameters()
        .iter()
        .map(|p| {
            (
                p.parameter_key().unwrap().to_string(),
                p.parameter_value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The event source mapping of the stack (moto's list-event-source-mappings does not show it
/// reliably and its DescribeStackResource answers 500: its physical id from
/// ListStackResources, as tests/tests/lambda_deploy.rs does) and what Lambda says of it.
async fn mapping(cfn: &Client, stack: &str, endpoint: &str) -> (String, Value) {
    let resources = cfn
        .list_stack_resources()
        .stack_name(stack)
        .send()
        .await
        .unwrap();
    let uuid = resources
        .stack_resource_summaries()
        .iter()
        .find(|r| r.logical_resource_id() == Some("HandlerEventSourceMapping"))
        .and_then(|r| r.physical_resource_id())
        .expect("the stack has the event source mapping")
        .to_string();
    let m = aws(
        endpoint,
        &["lambda", "get-event-source-mapping", "--uuid", &uuid],
    )
    .expect("the mapping exists in Lambda");
    (uuid, m)
}

fn function(endpoint: &str, name: &str) -> Option<Value> {
    aws(
        endpoint,
        &[
            "lambda",
            "get-function-configuration",
            "--function-name",
            name,
        ],
    )
}

const EXPANDER: &str = "cluster-autoscaler-priority-expander";

#[test]
fn a_dry_run_prints_every_step_and_changes_nothing() {
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let fake = fake().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig_for(&fake.url(), dir.path());
        let cluster = unique_name("dry");
        let stack = format!("forewarn-{cluster}");
        let out = forewarn(
            &endpoint,
            &kubeconfig,
            &[
                "deploy",
                "--cluster",
                &cluster,
                "--parameter",
                "FunctionArchitecture=x86_64",
                "--parameter",
                "CreateAccessEntry=false",
                "--kube",
            ],
        )
        .await;
        let text = succeeded(&out);
        for line in [
            format!("stack {stack}: does not exist yet"),
            "[1/6] build (x86_64): cargo lambda build --release --x86-64 -p interruption-handler \
             -p pool-sweeper"
                .to_string(),
            format!(
                "[2/6] stack {stack}: create with Clusters={cluster} FunctionsDeployed=false \
                 FunctionArchitecture=x86_64 CreateAccessEntry=false"
            ),
            format!(
                "cargo lambda deploy <HandlerFunctionName> --binary-name interruption-handler \
                 --iam-role <HandlerRoleArn> --timeout <FunctionTimeout> --env-file <a file \
                 holding HandlerEnvFile> --region us-east-1 --endpoint-url {endpoint}"
            ),
            format!(
                "cargo lambda deploy <SweeperFunctionName> --binary-name pool-sweeper --iam-role \
                 <SweeperRoleArn> --timeout <FunctionTimeout> --env-file <a file holding \
                 SweeperEnvFile> --region us-east-1 --endpoint-url {endpoint}"
            ),
            format!(
                "would update it with Clusters={cluster} FunctionsDeployed=true \
                 FunctionArchitecture=x86_64 CreateAccessEntry=false"
            ),
            "ClusterRole forewarn: would be created".to_string(),
            "Namespace forewarn: would be created".to_string(),
            "RoleBinding forewarn/forewarn-policy: would be created".to_string(),
            format!("ConfigMap kube-system/{EXPANDER}: would be created"),
            "dry run: nothing was changed (add --execute to deploy)".to_string(),
        ] {
            assert!(text.contains(&line), "missing {line:?} in:\n{text}");
        }
        for step in ["[3/6]", "[4/6]", "[6/6]"] {
            assert!(text.contains(step), "{step} in:\n{text}");
        }

        let cfn = Client::new(&server.sdk_config());
        let described = cfn.describe_stacks().stack_name(&stack).send().await;
        assert!(described.is_err(), "a dry run created {stack}");
        assert!(function(&endpoint, &format!("{stack}-handler")).is_none());
        assert!(
            fake.writes().is_empty(),
            "a dry run wrote: {:?}",
            fake.writes()
        );
    });
}

#[test]
fn deploy_then_upgrade_against_moto_and_the_kubernetes_fake() {
    forewarn_tests::moto::lambda_bootstrap("interruption-handler");
    forewarn_tests::moto::lambda_bootstrap("pool-sweeper");
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let fake = fake().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig_for(&fake.url(), dir.path());
        let cluster = unique_name("deploy");
        let stack = format!("forewarn-{cluster}");
        let cfn = Client::new(&server.sdk_config());

        let d = Deploying {
            endpoint: &endpoint,
            kubeconfig: &kubeconfig,
            cluster: &cluster,
            stack: &stack,
            cfn: &cfn,
            fake: &fake,
        };
        let (outputs, uuid) = first_deploy(&d).await;
        let role = created_in_order(&fake);
        // Between the runs: the sweeper writes the expander, someone edits the ClusterRole.
        let mut expander = fake
            .get("v1", "ConfigMap", Some("kube-system"), EXPANDER)
            .unwrap();
        expander["data"]["priorities"] = json!("10:\n  - .*spot.*\n0:\n  - .*");
        fake.insert(expander);
        let mut drifted = role.clone();
        drifted["rules"].as_array_mut().unwrap().truncate(1);
        fake.insert(drifted);
        fake.clear_requests();
        let before = versions(&fake);

        upgrade(&d, &outputs, &uuid, &before).await;
    });
}

/// What a deploy test deploys with, and where.
struct Deploying<'a> {
    endpoint: &'a str,
    kubeconfig: &'a Path,
    cluster: &'a str,
    stack: &'a str,
    cfn: &'a Client,
    fake: &'a KubeFake,
}

/// The first deploy, with parameters and environments: what it says, the stack's parameters
/// and outputs, the functions, the event source mapping. The outputs, and the mapping's uuid.
async fn first_deploy(d: &Deploying<'_>) -> (std::collections::BTreeMap<String, String>, String) {
    let Deploying {
        endpoint,
        kubeconfig,
        cluster,
        stack,
        cfn,
        ..
    } = *d;
    // The first deploy.
    let out = forewarn(
        endpoint,
        kubeconfig,
        &[
            "deploy",
            "--execute",
            "--cluster",
            cluster,
            "--no-build",
            "--parameter",
            "FunctionArchitecture=x86_64",
            "--parameter",
            "CreateAccessEntry=false",
            "--parameter",
            "LifecycleHookNames=drain-a,drain-b",
            "--handler-env",
            "FOREWARN_POOL_TTL=45m",
            "--sweeper-env",
            "FOREWARN_POOL_TTL=30m",
            "--kube",
        ],
    )
    .await;
    let text = succeeded(&out);
    for line in [
        format!("[2/6] stack {stack}: create with"),
        "      created\n".to_string(),
        format!("  deployed {stack}-handler"),
        format!("  deployed {stack}-sweeper"),
        "      updated\n".to_string(),
        "Namespace forewarn: created".to_string(),
        "ClusterRole forewarn: created".to_string(),
        "Role forewarn/forewarn-policy: created".to_string(),
        "PriorityLevelConfiguration forewarn: created".to_string(),
        "FlowSchema forewarn: created".to_string(),
        "PriorityClass forewarn-placeholder: created".to_string(),
        "ValidatingAdmissionPolicy forewarn-node-writes: created".to_string(),
        "ValidatingAdmissionPolicyBinding forewarn-node-writes: created".to_string(),
        "ValidatingAdmissionPolicy forewarn-placeholders-only: created".to_string(),
        "ValidatingAdmissionPolicyBinding forewarn-placeholders-only: created".to_string(),
        "forewarn-placeholders-only: enforced for forewarn-handler".to_string(),
        "forewarn-placeholders-only: enforced for forewarn-sweeper".to_string(),
        "Role forewarn/forewarn-placeholders: created".to_string(),
        "ClusterRole forewarn-placeholder-budgets: created".to_string(),
        format!("ConfigMap kube-system/{EXPANDER}: created"),
        format!("  HandlerFunctionName: {stack}-handler"),
        "deployed\n".to_string(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
    let params = stack_parameters(cfn, stack).await;
    assert_eq!(params["FunctionsDeployed"], "true", "{params:?}");
    let described = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .unwrap();
    let outputs: std::collections::BTreeMap<String, String> = described.stacks()[0]
        .outputs()
        .iter()
        .map(|o| {
            (
                o.output_key().unwrap().to_string(),
                o.output_value().unwrap().to_string(),
            )
        })
        .collect();
    check_functions(endpoint, cluster, &outputs);
    assert_eq!(pool_ttl(endpoint, &outputs), ["45m", "30m"]);
    let (uuid, m) = mapping(cfn, stack, endpoint).await;
    assert!(
        m["FunctionArn"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":function:{stack}-handler")),
        "{m}"
    );
    assert_eq!(m["EventSourceArn"], outputs["QueueArn"].as_str(), "{m}");
    (outputs, uuid)
}

/// Every manifest's object is in the fake, created in order (the namespace first, the pod
/// grant after the binding and its check); forewarn's ClusterRole as created.
fn created_in_order(fake: &KubeFake) -> Value {
    let manifests = manifest_objects();
    for (api_version, kind, namespace, name) in &manifests {
        let o = fake.get(api_version, kind, namespace.as_deref(), name);
        assert!(o.is_some(), "{kind} {name} is missing in the fake");
    }
    // The pod grant only once the policy that narrows it to placeholders is bound. The
    // objects are applied (PATCH), the expander created (POST), the check is a dry-run POST.
    let created: Vec<String> = fake
        .writes()
        .iter()
        .filter(|w| w.method == "POST" || w.method == "PATCH")
        .map(|w| w.path.clone())
        .collect();
    let last = |plural: &str| {
        created
            .iter()
            .rposition(|p| p.contains(&format!("{plural}/")))
            .unwrap_or_else(|| panic!("no apply of {plural} in {created:?}"))
    };
    // forewarn's namespace before anything else, so before anything in it.
    assert!(
        created[0].ends_with("/api/v1/namespaces/forewarn"),
        "{created:?}"
    );
    assert!(
        created.iter().any(|p| p.contains("/namespaces/forewarn/")),
        "{created:?}"
    );
    // The pod grant (the last Role created: placeholders.yaml's, rbac.yaml's comes first)
    // only after the binding, and after the check that the policy is enforced (a dry-run
    // create of a pod that is not a placeholder, refused).
    let check = created
        .iter()
        .position(|p| p == "/api/v1/namespaces/forewarn/pods")
        .unwrap_or_else(|| panic!("no check in {created:?}"));
    assert!(
        last("/validatingadmissionpolicybindings") < check && check < last("/roles"),
        "{created:?}"
    );
    assert!(
        fake.list("v1", "Pod").is_empty(),
        "the check stored nothing"
    );
    let role = fake.get(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "forewarn",
    );
    let role = role.unwrap();
    assert_eq!(role["rules"].as_array().unwrap().len(), 6, "{role}");
    role
}

/// The upgrade, without parameters: the stack keeps them, the mapping stays, the expander is
/// left as the sweeper wrote it, only what drifted is written.
async fn upgrade(
    d: &Deploying<'_>,
    outputs: &std::collections::BTreeMap<String, String>,
    uuid: &str,
    before: &[(String, Option<String>)],
) {
    let Deploying {
        endpoint,
        kubeconfig,
        cluster,
        stack,
        cfn,
        fake,
    } = *d;
    // The upgrade: no parameters, the stack keeps them.
    let out = forewarn(
        endpoint,
        kubeconfig,
        &[
            "deploy",
            "--execute",
            "--cluster",
            cluster,
            "--no-build",
            "--kube",
        ],
    )
    .await;
    let text = succeeded(&out);
    for line in [
        format!("stack {stack}: exists (UPDATE_COMPLETE)"),
        "[1/6] build (x86_64)".to_string(),
        format!("[2/6] stack {stack}: update with Clusters={cluster} (kept: "),
        "FunctionsDeployed=true".to_string(),
        "CreateAccessEntry=false".to_string(),
        "LifecycleHookNames=drain-a,drain-b".to_string(),
        "already wired".to_string(),
        "ClusterRole forewarn: updated".to_string(),
        "ClusterRoleBinding forewarn: unchanged".to_string(),
        format!("ConfigMap kube-system/{EXPANDER}: exists: left as it is"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in:\n{text}");
    }
    let params = stack_parameters(cfn, stack).await;
    assert_eq!(params["FunctionsDeployed"], "true", "{params:?}");
    assert_eq!(params["FunctionArchitecture"], "x86_64", "{params:?}");
    assert_eq!(params["CreateAccessEntry"], "false", "{params:?}");
    assert_eq!(
        params["LifecycleHookNames"], "drain-a,drain-b",
        "{params:?}"
    );
    check_functions(endpoint, cluster, outputs);
    // A deploy sets the whole environment: what --handler-env and --sweeper-env added is
    // gone when they are not given again.
    assert_eq!(pool_ttl(endpoint, outputs), ["", ""]);
    let (after, m) = mapping(cfn, stack, endpoint).await;
    assert_eq!(after, uuid, "the upgrade replaced the event source mapping");
    assert_eq!(m["EventSourceArn"], outputs["QueueArn"].as_str(), "{m}");
    let expander = fake
        .get("v1", "ConfigMap", Some("kube-system"), EXPANDER)
        .unwrap();
    assert_eq!(
        expander["data"]["priorities"], "10:\n  - .*spot.*\n0:\n  - .*",
        "the upgrade overwrote the sweeper's expander"
    );
    let role = fake
        .get(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "forewarn",
        )
        .unwrap();
    assert_eq!(role["rules"].as_array().unwrap().len(), 6, "{role}");
    // Every object applied again (the placeholder policy's check as dry runs that store
    // nothing), the expander not written: only what drifted changed.
    let writes: Vec<String> = fake
        .writes()
        .iter()
        .filter(|w| !w.query.contains("dryRun=All"))
        .map(|w| w.method.to_string())
        .collect();
    assert!(writes.iter().all(|m| m == "PATCH"), "{writes:?}");
    assert_eq!(writes.len(), manifest_objects().len() - 1, "{writes:?}");
    assert_eq!(
        changed_since(fake, before),
        ["ClusterRole forewarn"],
        "the upgrade changes only what drifted"
    );
    assert!(text.contains("forewarn-placeholders-only: enforced for forewarn-handler"));
}

/// Each manifest object (`Kind [namespace/]name`) with its resourceVersion in the fake.
fn versions(fake: &KubeFake) -> Vec<(String, Option<String>)> {
    manifest_objects()
        .into_iter()
        .map(|(api_version, kind, namespace, name)| {
            let o = fake.get(&api_version, &kind, namespace.as_deref(), &name);
            let rv = o.and_then(|o| o["metadata"]["resourceVersion"].as_str().map(String::from));
            let at = namespace.map_or(String::new(), |ns| format!("{ns}/"));
            (format!("{kind} {at}{name}"), rv)
        })
        .collect()
}

/// The manifest objects whose resourceVersion moved since `before` ([`versions`]).
fn changed_since(fake: &KubeFake, before: &[(String, Option<String>)]) -> Vec<String> {
    versions(fake)
        .into_iter()
        .zip(before)
        .filter(|(now, then)| now.1 != then.1)
        .map(|(now, _)| now.0)
        .collect()
}

/// Both functions as the stack's outputs say: role, timeout, environment.
fn check_functions(
    endpoint: &str,
    cluster: &str,
    outputs: &std::collections::BTreeMap<String, String>,
) {
    for prefix in ["Handler", "Sweeper"] {
        let name = &outputs[&format!("{prefix}FunctionName")];
        let conf = function(endpoint, name).unwrap_or_else(|| panic!("{name} is not deployed"));
        assert_eq!(conf["Runtime"], "provided.al2023", "{conf}");
        assert_eq!(
            conf["Role"],
            outputs[&format!("{prefix}RoleArn")].as_str(),
            "{conf}"
        );
        assert_eq!(
            conf["Timeout"].to_string(),
            outputs["FunctionTimeout"],
            "{conf}"
        );
        assert_eq!(conf["Architectures"][0], "x86_64", "{conf}");
        let vars = &conf["Environment"]["Variables"];
        assert_eq!(vars["FOREWARN_CLUSTERS"], cluster, "{conf}");
        assert!(
            vars.get("FOREWARN_EKS_CLUSTER").is_none(),
            "retired: {conf}"
        );
        assert_eq!(
            vars["FOREWARN_TABLE"],
            outputs["TableName"].as_str(),
            "{conf}"
        );
        // Through --env-file (quoted there) and --env-var alike: the stack's PolicyAllow.
        assert_eq!(
            vars["FOREWARN_POLICY_ALLOW"], "cordon cordon-drain cordon-for adaptive",
            "{conf}"
        );
        match prefix {
            // Through --env-file: the list keeps its comma.
            "Handler" => assert_eq!(
                vars["FOREWARN_LIFECYCLE_HOOKS"], "drain-a,drain-b",
                "{conf}"
            ),
            _ => assert!(vars.get("FOREWARN_LIFECYCLE_HOOKS").is_none(), "{conf}"),
        }
    }
}

/// FOREWARN_POOL_TTL of the handler and the sweeper ("" when unset).
fn pool_ttl(endpoint: &str, outputs: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    ["HandlerFunctionName", "SweeperFunctionName"]
        .iter()
        .map(|k| {
            let conf = function(endpoint, &outputs[*k]).unwrap();
            let ttl = &conf["Environment"]["Variables"]["FOREWARN_POOL_TTL"];
            ttl.as_str().unwrap_or_default().to_string()
        })
        .collect()
}

/// (apiVersion, kind, namespace, name) of every object of infra/k8s/rbac.yaml,
/// infra/k8s/flow-control.yaml, infra/k8s/node-writes.yaml, infra/k8s/placeholders.yaml and
/// infra/k8s/priority-expander.yaml.
fn manifest_objects() -> Vec<(String, String, Option<String>, String)> {
    let mut objects = Vec::new();
    for file in [
        "infra/k8s/rbac.yaml",
        "infra/k8s/flow-control.yaml",
        "infra/k8s/node-writes.yaml",
        "infra/k8s/placeholders.yaml",
        "infra/k8s/priority-expander.yaml",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        for d in docs.iter().filter(|d| !d.is_null()) {
            let s = |p: &str| d.pointer(p).and_then(Value::as_str).map(str::to_string);
            objects.push((
                s("/apiVersion").unwrap(),
                s("/kind").unwrap(),
                s("/metadata/namespace"),
                s("/metadata/name").unwrap(),
            ));
        }
    }
    assert_eq!(objects.len(), 21, "{objects:?}");
    objects
}

/// A cluster older than 1.30 serves no ValidatingAdmissionPolicy: the placeholders' grant would
/// be pod create and delete unnarrowed, so none of placeholders.yaml is applied, and the run
/// says what that means for surge.
#[test]
fn a_cluster_before_1_30_gets_no_placeholder_grant() {
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let fake = fake_at(29).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig_for(&fake.url(), dir.path());
        let cluster = unique_name("old");
        let out = forewarn(
            &endpoint,
            &kubeconfig,
            &["deploy", "--cluster", &cluster, "--kube"],
        )
        .await;
        let text = succeeded(&out);
        let skipped = "skipped: infra/k8s/placeholders.yaml needs Kubernetes 1.30 or later, the \
                       cluster is 1.29";
        for line in [
            "ClusterRole forewarn: would be created".to_string(),
            format!("ValidatingAdmissionPolicy forewarn-placeholders-only: {skipped}"),
            format!("Role forewarn/forewarn-placeholders: {skipped}"),
            format!("ClusterRole forewarn-placeholder-budgets: {skipped}"),
            "ValidatingAdmissionPolicy forewarn-node-writes: skipped: infra/k8s/node-writes.yaml \
             needs Kubernetes 1.30 or later, the cluster is 1.29"
                .to_string(),
            "without node-writes.yaml, forewarn's groups may patch any field of a Node".to_string(),
            format!("PriorityClass forewarn-placeholder: {skipped}"),
            "surge is off on this cluster: without placeholders.yaml".to_string(),
            format!("ConfigMap kube-system/{EXPANDER}: would be created"),
            "FlowSchema forewarn: would be created".to_string(),
        ] {
            assert!(text.contains(&line), "missing {line:?} in:\n{text}");
        }
        assert!(
            !text.contains("without flow-control.yaml"),
            "1.29 serves it:\n{text}"
        );
        let read: Vec<String> = fake.requests().iter().map(|r| r.path.clone()).collect();
        assert!(
            !read
                .iter()
                .any(|p| p.contains("placeholder") || p.contains("node-writes")),
            "a skipped object is not even read: {read:?}"
        );
        assert!(fake.writes().is_empty(), "a dry run writes nothing");
    });
}

/// Without AWS: bad parameters and a `--root` that is not the repository are refused before
/// anything is read, and the repository is never looked for from the working directory; no
/// variable's value is printed; a dry run that cannot reach AWS still prints every step, and the
/// kubectl commands.
#[test]
fn refusals_and_a_dry_run_without_aws() {
    let state = tempfile::tempdir().unwrap();
    let run = |dir: &Path, args: &[&str]| -> Output {
        Forewarn::new(state.path())
            .dir(dir)
            .aws_testing()
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .env("AWS_MAX_ATTEMPTS", "1")
            .env_remove("AWS_PROFILE")
            .env("PATH", path_with_venv())
            .run(args)
    };
    parameters_refused(&run);
    an_unanswering_cluster_stops_everything(state.path());
    the_root_is_never_found_from_the_working_directory(&run);
    values_are_never_printed(&run);
    a_dry_run_says_every_step(&run);
}

/// Parameters forewarn sets, or that do not exist or hold a bad value, are refused.
fn parameters_refused(run: &dyn Fn(&Path, &[&str]) -> Output) {
    let refused = |args: &[&str], says: &str| {
        let out = run(&root(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing is done");
    };
    refused(
        &[
            "deploy",
            "--cluster",
            "demo",
            "--parameter",
            "FunctionsDeployed=true",
        ],
        "forewarn deploy sets it",
    );
    refused(
        &["deploy", "--cluster", "demo", "--parameter", "Clusters=x"],
        "give the clusters with --cluster",
    );
    refused(
        &[
            "deploy",
            "--cluster",
            "demo",
            "--parameter",
            "MaxReceiveCount=5",
        ],
        "has no such parameter",
    );
    refused(
        &["deploy", "--cluster", &"c".repeat(48)],
        "give a shorter --stack-name",
    );
    refused(
        &["deploy", "--cluster", "demo", "--parameter", "Colour=blue"],
        "has no such parameter",
    );
    refused(
        &[
            "deploy",
            "--cluster",
            "demo",
            "--parameter",
            "FunctionArchitecture=sparc",
        ],
        "must be one of arm64, x86_64",
    );
}

/// `--kube` with a cluster that does not answer: stopped before the first step.
fn an_unanswering_cluster_stops_everything(state: &Path) {
    let kubeconfig = kubeconfig_for("http://127.0.0.1:1", state);
    let out = Forewarn::new(state)
        .aws_testing()
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("FOREWARN_EKS_CLUSTER")
        .run(&["deploy", "--execute", "--cluster", "demo", "--kube"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the cluster does not answer (--kube)"),
        "{err}"
    );
    assert!(!stdout(&out).contains("[1/6]"), "{}", stdout(&out));
}

/// The repository is --root, or the checkout the command was built from: never one found
/// from the working directory, even one that looks like forewarn's.
fn the_root_is_never_found_from_the_working_directory(run: &dyn Fn(&Path, &[&str]) -> Output) {
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(elsewhere.path().join("infra/k8s")).unwrap();
    std::fs::write(
        elsewhere.path().join("infra/forewarn.yaml"),
        "planted: true\n",
    )
    .unwrap();
    let inside = elsewhere.path().join("infra/k8s");
    let out = run(&inside, &["deploy", "--cluster", "demo"]);
    let text = succeeded(&out);
    assert!(text.contains("[6/6] kubernetes"), "{text}");
    let empty = tempfile::tempdir().unwrap();
    let out = run(
        &root(),
        &[
            "deploy",
            "--cluster",
            "demo",
            "--root",
            empty.path().to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("infra/forewarn.yaml not found in")
            && err.contains("(--root)"),
        "{err}"
    );
    let out = run(
        elsewhere.path(),
        &[
            "deploy",
            "--cluster",
            "demo",
            "--root",
            root().to_str().unwrap(),
        ],
    );
    succeeded(&out);
}

/// Values of the functions' variables are never printed: a dry run and an error name them.
fn values_are_never_printed(run: &dyn Fn(&Path, &[&str]) -> Output) {
    let secret = "https://hooks.example.com/services/T000/B000/XXXXSECRET";
    let out = run(
        &root(),
        &[
            "deploy",
            "--cluster",
            "demo",
            "--handler-env",
            &format!("FOREWARN_WEBHOOK_URL={secret}"),
            "--sweeper-env",
            &format!("FOREWARN_WEBHOOK_URL={secret}"),
        ],
    );
    let text = succeeded(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("XXXXSECRET") && !err.contains("XXXXSECRET"),
        "{text}\n{err}"
    );
    for output in ["HandlerEnvFile", "SweeperEnvFile"] {
        assert!(
            text.contains(&format!("(the file sets: <{output}> FOREWARN_WEBHOOK_URL)")),
            "{text}"
        );
    }
    let out = run(
        &root(),
        &["deploy", "--cluster", "demo", "--handler-env", secret],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--handler-env (its 1st use): expected KEY=VALUE"),
        "{err}"
    );
    assert!(!err.contains("XXXXSECRET"), "{err}");
}

/// A dry run without AWS says every step it would take.
fn a_dry_run_says_every_step(run: &dyn Fn(&Path, &[&str]) -> Output) {
    let out = run(&root(), &["deploy", "--cluster", "demo"]);
    let text = succeeded(&out);
    for line in [
        "stack forewarn-demo: could not be read (",
        "[1/6] build (arm64): cargo lambda build --release --arm64 -p interruption-handler -p \
         pool-sweeper",
        "[2/6] stack forewarn-demo: create with Clusters=demo FunctionsDeployed=false",
        "--endpoint-url http://127.0.0.1:1",
        "[4/6] wiring",
        "ClusterRole forewarn (infra/k8s/rbac.yaml): to be applied",
        "not applied (no --kube)",
        "kubectl apply -f infra/k8s/rbac.yaml",
        "kubectl create -f infra/k8s/priority-expander.yaml",
        "kubectl apply -f infra/k8s/flow-control.yaml   # only on Kubernetes 1.29 or later",
        "outputs of stack forewarn-demo: known once it exists",
        "dry run: nothing was changed (add --execute to deploy)",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
