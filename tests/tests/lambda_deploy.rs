//! The deploy workflow of docs/deploy.md against moto: the stack (with two lifecycle hook names,
//! which `--env-var` could not carry), `cargo lambda deploy --endpoint-url` of both functions with
//! the roles and environment from the stack's outputs (through `--env-file`, from
//! `HandlerEnvFile` and `SweeperEnvFile`), then the stack
//! again with `FunctionsDeployed=true`, which wires the event source mapping.
//!
//! The functions must have been built with `cargo lambda build --x86-64` (the test
//! command, scripts/test.sh, does it first, in the dev profile: the deploy does not depend on the
//! profile, and the release build is docs/deploy.md's; this machine cannot fetch the aarch64
//! standard library, so the arm64 build is configured and documented but not run here). moto's
//! Lambda cannot invoke without Docker, so invocation is tested in-process (e2e.rs).

use std::process::Command;

use aws_sdk_cloudformation::types::{Parameter, StackStatus};
use forewarn_tests::moto::{deploy_stack, runtime, shared, unique_name, workspace_root};
use serde_json::Value;

/// Runs a command of the venv's tools against moto; answers stdout.
fn run(program: &str, args: &[&str], endpoint: &str) -> String {
    let venv = workspace_root().join(".venv/bin");
    let path = format!(
        "{}:{}",
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .env("PATH", path)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .output()
        .unwrap_or_else(|e| {
            panic!("running {program}: {e} (run scripts/test.sh, which installs it)")
        });
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cargo_lambda_deploy_to_moto_then_wire_the_stack() {
    forewarn_tests::moto::lambda_bootstrap("interruption-handler");
    forewarn_tests::moto::lambda_bootstrap("pool-sweeper");
    let server = shared();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        let sdk = server.sdk_config();
        let cluster = unique_name("deploy");
        let template =
            std::fs::read_to_string(workspace_root().join("infra/forewarn.yaml")).unwrap();
        let params = [
            ("Clusters", cluster.as_str()),
            ("FunctionArchitecture", "x86_64"),
            ("CreateAccessEntry", "false"),
            ("LifecycleHookNames", "drain-a,drain-b"),
        ];
        let outputs = deploy_stack(&sdk, &cluster, &template, &params)
            .await
            .expect("the stack deploys");
        assert_eq!(outputs["CargoLambdaBuildFlag"], "--x86-64");

        for (binary, prefix) in [
            ("interruption-handler", "Handler"),
            ("pool-sweeper", "Sweeper"),
        ] {
            let name = &outputs[&format!("{prefix}FunctionName")];
            let role = &outputs[&format!("{prefix}RoleArn")];
            let timeout = &outputs["FunctionTimeout"];
            // docs/how-to/deploy-by-hand.md: `out HandlerEnvFile > handler.env` and
            // `--env-file handler.env`; the same for the sweeper.
            let env_dir = tempfile::tempdir().unwrap();
            let env_file = env_dir.path().join(format!("{binary}.env"));
            std::fs::write(&env_file, &outputs[&format!("{prefix}EnvFile")]).unwrap();
            let env = ["--env-file", env_file.to_str().unwrap()];
            let mut args = vec![
                "lambda",
                "deploy",
                name,
                "--binary-name",
                binary,
                "--iam-role",
                role,
                "--timeout",
                timeout,
                "--endpoint-url",
                &endpoint,
                "--region",
                "us-east-1",
            ];
            args.extend(env);
            run("cargo", &args, &endpoint);
            let conf: Value = serde_json::from_str(&run(
                "aws",
                &[
                    "lambda",
                    "get-function-configuration",
                    "--function-name",
                    name,
                    "--output",
                    "json",
                ],
                &endpoint,
            ))
            .unwrap();
            assert_eq!(conf["Runtime"], "provided.al2023", "{conf}");
            assert_eq!(conf["Handler"], "bootstrap", "{conf}");
            assert_eq!(conf["Role"], role.as_str(), "{conf}");
            assert_eq!(conf["Timeout"].to_string(), *timeout, "{conf}");
            assert_eq!(conf["Architectures"][0], "x86_64", "{conf}");
            assert!(conf["CodeSize"].as_u64().unwrap() > 1_000_000, "{conf}");
            let vars = &conf["Environment"]["Variables"];
            assert_eq!(vars["FOREWARN_CLUSTERS"], cluster.as_str(), "{conf}");
            assert_eq!(
                vars["FOREWARN_TABLE"],
                outputs["TableName"].as_str(),
                "{conf}"
            );
            assert!(
                vars.get("FOREWARN_EKS_CLUSTER").is_none(),
                "retired: {conf}"
            );
            match prefix {
                "Handler" => assert_eq!(
                    vars["FOREWARN_LIFECYCLE_HOOKS"], "drain-a,drain-b",
                    "{conf}"
                ),
                _ => assert!(vars.get("FOREWARN_LIFECYCLE_HOOKS").is_none(), "{conf}"),
            }
        }

        // Step 4: the stack again, now that the functions exist.
        let cfn = aws_sdk_cloudformation::Client::new(&sdk);
        update_stack_with_functions_deployed(&cfn, &cluster, &template, &params).await;
        // The mapping the stack created (moto's list-event-source-mappings does not show it
        // reliably, and its DescribeStackResource answers 500: list the stack's resources and get
        // the mapping by its physical id).
        assert_the_event_source_mapping(&cfn, &cluster, &outputs, &endpoint).await;
    });
}

/// Step 4 of docs/deploy.md: the stack updated with `FunctionsDeployed=true` (its other
/// parameters as they were), waited for until the update is complete.
async fn update_stack_with_functions_deployed(
    cfn: &aws_sdk_cloudformation::Client,
    cluster: &str,
    template: &str,
    params: &[(&str, &str)],
) {
    let mut update = cfn
        .update_stack()
        .stack_name(cluster)
        .template_body(template);
    for (k, v) in params.iter().chain([("FunctionsDeployed", "true")].iter()) {
        update = update.parameters(
            Parameter::builder()
                .parameter_key(*k)
                .parameter_value(*v)
                .build(),
        );
    }
    update.send().await.expect("UpdateStack");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let d = cfn
            .describe_stacks()
            .stack_name(cluster)
            .send()
            .await
            .unwrap();
        match d.stacks()[0].stack_status() {
            Some(StackStatus::UpdateComplete) => break,
            Some(StackStatus::UpdateInProgress) | None => {}
            other => panic!("stack update ended {other:?}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stack update did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The event source mapping the updated stack created: the handler's, from the queue, reporting
/// batch item failures, in batches of 10 and at most 10 at a time.
async fn assert_the_event_source_mapping(
    cfn: &aws_sdk_cloudformation::Client,
    cluster: &str,
    outputs: &std::collections::HashMap<String, String>,
    endpoint: &str,
) {
    let resources = cfn
        .list_stack_resources()
        .stack_name(cluster)
        .send()
        .await
        .expect("ListStackResources");
    let uuid = resources
        .stack_resource_summaries()
        .iter()
        .find(|r| r.logical_resource_id() == Some("HandlerEventSourceMapping"))
        .and_then(|r| r.physical_resource_id())
        .expect("the stack has the event source mapping now")
        .to_string();
    let m: Value = serde_json::from_str(&run(
        "aws",
        &[
            "lambda",
            "get-event-source-mapping",
            "--uuid",
            &uuid,
            "--output",
            "json",
        ],
        endpoint,
    ))
    .unwrap();
    let handler_arn = format!(":function:{}", outputs["HandlerFunctionName"]);
    assert!(
        m["FunctionArn"].as_str().unwrap().ends_with(&handler_arn),
        "{m}"
    );
    assert_eq!(m["EventSourceArn"], outputs["QueueArn"].as_str(), "{m}");
    assert_eq!(
        m["FunctionResponseTypes"][0], "ReportBatchItemFailures",
        "{m}"
    );
    assert_eq!(m["BatchSize"], 10, "{m}");
    assert_eq!(m["ScalingConfig"]["MaximumConcurrency"], 10, "{m}");
}

/// The features scripts/test.sh builds the functions with: the tests' own (tests/unify-features).
const UNIFY: &str = "interruption-handler/unify-test-features,pool-sweeper/unify-test-features";

/// `cargo tree -e features` for `args` on this machine's target: one `<crate> v<version>
/// [(path)] <features>` line per crate and feature set.
fn resolved_features(args: &[&str]) -> std::collections::BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "--target", "x86_64-unknown-linux-gnu"])
        .args(["-f", "{p} {f}", "--prefix", "none"])
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The test command builds the functions after the tests and must not build their dependencies
/// a second time: every crate of the functions' build must come with a feature set the tests'
/// build has (else cargo builds it again, and everything above it).
#[test]
fn the_lambda_build_resolves_the_features_of_the_tests() {
    let tests = resolved_features(&["--workspace", "-e", "normal,build,dev"]);
    let lambda = resolved_features(&[
        "-p",
        "interruption-handler",
        "-p",
        "pool-sweeper",
        "--features",
        UNIFY,
        "-e",
        "normal,build",
    ]);
    let functions = ["interruption-handler v", "pool-sweeper v"];
    let differ: Vec<&String> = lambda
        .iter()
        .filter(|l| !functions.iter().any(|f| l.starts_with(f)))
        .filter(|l| !tests.contains(*l))
        .collect();
    assert!(
        differ.is_empty(),
        "the functions' build resolves these differently from the tests' build; add the tests' \
         features to tests/unify-features/Cargo.toml: {differ:#?}"
    );
    let script = std::fs::read_to_string(workspace_root().join("scripts/test.sh")).unwrap();
    assert!(
        script.contains(&format!("--features {UNIFY}")),
        "scripts/test.sh builds the functions with --features {UNIFY}"
    );
}
