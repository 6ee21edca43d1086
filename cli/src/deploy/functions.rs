//! The functions' side of `forewarn deploy`: the `cargo lambda build` and `cargo lambda deploy`
//! command lines, and running them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, anyhow, bail};
use forewarn::app::settings::Settings;
use tokio::process::Command;

/// One Lambda function: its binary, the prefix of its stack outputs and its Kubernetes group.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    pub binary: &'static str,
    /// `Handler` or `Sweeper`: `<prefix>FunctionName`, `<prefix>RoleArn`.
    pub prefix: &'static str,
    /// The group its role's access entries put it in, which infra/k8s/ binds (fixed: the stack's
    /// access entries name it too).
    pub group: &'static str,
}

pub const FUNCTIONS: [Function; 2] = [
    Function {
        binary: "interruption-handler",
        prefix: "Handler",
        group: "forewarn-handler",
    },
    Function {
        binary: "pool-sweeper",
        prefix: "Sweeper",
        group: "forewarn-sweeper",
    },
];

/// How many lines of a failed command's standard error its error carries.
const STDERR_TAIL: usize = 40;

/// `cargo lambda build --release <flag> -p interruption-handler -p pool-sweeper`, without
/// `cargo`, the flag that of the stack's `FunctionArchitecture`.
pub fn build_args(architecture: &str) -> anyhow::Result<Vec<String>> {
    let flag = match architecture {
        "arm64" => "--arm64",
        "x86_64" => "--x86-64",
        other => bail!("FunctionArchitecture {other}: expected arm64 or x86_64"),
    };
    let [handler, sweeper] = FUNCTIONS.map(|f| f.binary);
    let args = format!("lambda build --release {flag} -p {handler} -p {sweeper}");
    Ok(args.split(' ').map(String::from).collect())
}

/// The variables the stack's environment outputs set (`NAME=` after `Outputs:` in `template`):
/// changed through the stack's parameters only.
pub fn stack_variables(template: &str) -> BTreeSet<&str> {
    let outputs = template.find("\nOutputs:").map_or("", |at| &template[at..]);
    outputs
        .match_indices("FOREWARN_")
        .filter_map(|(at, _)| {
            let name = &outputs[at..];
            let end =
                name.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))?;
            name[end..].starts_with('=').then(|| &name[..end])
        })
        .collect()
}

/// The `KEY=VALUE` variables of `flag` (`--handler-env`, `--sweeper-env`), checked: a valid
/// name, none the stack sets, one line. Both functions get their environment through
/// `--env-file`, so a value may hold commas.
///
/// An error names the variable, never its value (a webhook URL is a secret); an argument that
/// is not `KEY=VALUE` is named by its place, not its text, which may be a value given alone.
pub fn extra_env(
    flag: &str,
    raw: &[String],
    from_the_stack: &BTreeSet<&str>,
) -> anyhow::Result<Vec<String>> {
    for (i, var) in raw.iter().enumerate() {
        let n = i + 1;
        let nth = match (n % 10, n % 100) {
            (_, 11..=13) | (0 | 4..=9, _) => "th",
            (1, _) => "st",
            (2, _) => "nd",
            _ => "rd",
        };
        let (key, value) = var
            .split_once('=')
            .filter(|(k, _)| {
                k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .ok_or_else(|| {
                anyhow!(
                    "{flag} (its {n}{nth} use): expected KEY=VALUE, KEY a variable name (the \
                     argument is not shown: it may hold a secret)"
                )
            })?;
        if from_the_stack.contains(key) {
            bail!("{flag} {key}: the stack's outputs set it; change the stack's parameters");
        }
        if value.contains(['\n', '\r']) {
            bail!("{flag} {key}: the value must be one line");
        }
    }
    Ok(raw.to_vec())
}

/// Refuses `vars` (a function's environment file, `KEY=VALUE` a line, the last of a name
/// winning), read as cargo lambda's `--env-file` reads it (dotenv: a quoted value unquoted),
/// when the function `binary` would refuse it at its start, by the settings' own parser: a
/// function that cannot start holds its batches for the queue's visibility timeout. The error
/// names the variable and what is wrong, never the value (a webhook URL is a secret). Lines
/// that are not `KEY=VALUE` (a dry run's `<HandlerEnvFile>`) say nothing.
pub fn starts_with(binary: &str, vars: &[String]) -> anyhow::Result<()> {
    let file: String = vars
        .iter()
        .filter(|line| line.contains('='))
        .map(|line| format!("{line}\n"))
        .collect();
    let set = dotenvy::from_read_iter(file.as_bytes())
        .collect::<Result<BTreeMap<_, _>, _>>()
        .map_err(|e| {
            anyhow!(
                "function {binary}: its environment file is not read as cargo lambda reads it: {e}"
            )
        })?;
    Settings::from_vars(set).map(drop).map_err(|e| {
        anyhow!(
            "function {binary}: {}: {}; the function would refuse to start, so nothing is \
             deployed",
            e.variable,
            e.message
        )
    })
}

/// `cargo lambda deploy <name> --binary-name <binary> --iam-role <role> --timeout <t>
/// --env-file <env_file> [--region <region>] [--endpoint-url <url>]`, without `cargo`, from the
/// stack's outputs (`[name, role, t]`). The environment goes through a file (the stack's
/// `HandlerEnvFile` or `SweeperEnvFile`, then the extra variables), not `--env-var`, which cargo
/// lambda splits at every comma: a list of clusters or hook names keeps its commas. cargo lambda
/// adds the `env` of the crate's `[package.metadata.lambda.deploy]` (its dry run off, ...). The
/// endpoint is the one the SDK would use instead of AWS's: `AWS_ENDPOINT_URL_LAMBDA`, else
/// `AWS_ENDPOINT_URL`.
pub fn deploy_args(
    f: Function,
    [name, role, timeout]: &[String; 3],
    env_file: &str,
    region: Option<&str>,
) -> Vec<String> {
    let endpoint = ["AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.is_empty());
    let flags = [
        ("--binary-name", Some(f.binary)),
        ("--iam-role", Some(role.as_str())),
        ("--timeout", Some(timeout.as_str())),
        ("--env-file", Some(env_file)),
        ("--region", region),
        ("--endpoint-url", endpoint.as_deref()),
    ];
    let flags = (flags.into_iter()).filter_map(|(flag, value)| Some([flag, value?]));
    let args = ["lambda", "deploy", name.as_str()].into_iter();
    args.chain(flags.flatten()).map(String::from).collect()
}

/// Where cargo-lambda puts a function's bootstrap: `<target>/lambda/<binary>/bootstrap`, the
/// target directory being `CARGO_TARGET_DIR` or `<root>/target`.
pub fn bootstrap(root: &Path, binary: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| root.join("target"), PathBuf::from);
    target.join("lambda").join(binary).join("bootstrap")
}

/// A dry run's placeholder for what the stack would say, e.g. `<HandlerRoleArn>`.
pub fn is_placeholder(arg: &str) -> bool {
    arg.len() > 2 && arg.starts_with('<') && arg.ends_with('>')
}

/// The names of `KEY=VALUE` lines, for a dry run (`<HandlerEnvFile>` as it is, anything else
/// hidden).
pub fn names_of(vars: &[String]) -> Vec<&str> {
    vars.iter()
        .map(|v| match v.split_once('=') {
            Some((k, _)) => k,
            None if is_placeholder(v) => v,
            None => "(hidden)",
        })
        .collect()
}

/// A command line as a shell would take it back (arguments quoted when needed; a dry run's
/// placeholders as they are). The functions' variables are never on it (they go through
/// `--env-file`): what the command prints of a command names no value (a webhook URL is a
/// secret).
pub fn command_line(program: &str, args: &[String]) -> String {
    let quote = |arg: &str| {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c);
        match (arg.is_empty() || !arg.chars().all(plain)) && !is_placeholder(arg) {
            true => format!("'{}'", arg.replace('\'', r"'\''")),
            false => arg.to_string(),
        }
    };
    let words: Vec<String> = std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(quote)
        .collect();
    words.join(" ")
}

/// Runs `program args` in `dir`, its standard error ours when `echo` (a build's progress). A
/// failure names the command and carries the end of its standard error (or of its output when
/// that is empty; nothing more when it was echoed).
pub async fn run(program: &str, args: &[String], dir: &Path, echo: bool) -> anyhow::Result<()> {
    let line = command_line(program, args);
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(if echo {
            Stdio::inherit()
        } else {
            Stdio::piped()
        })
        .output()
        .await
        .with_context(|| format!("`{line}` could not start (is {program} on PATH?)"))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(if out.stderr.is_empty() {
        &out.stdout
    } else {
        &out.stderr
    });
    let said: Vec<&str> = said.lines().collect();
    let tail = &said[said.len().saturating_sub(STDERR_TAIL)..];
    bail!("`{line}` failed ({}):\n{}", out.status, tail.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `--handler-env` and `--sweeper-env` may not set is what the stack's environment
    /// outputs (`HandlerEnvFile`, `SweeperEnvFile`, and the `EnvVars` twins) set: each a variable
    /// the settings declare.
    #[test]
    fn the_stacks_variables_are_declared_settings() {
        use clap::CommandFactory;
        let template = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/forewarn.yaml"),
        )
        .unwrap();
        let set = stack_variables(&template);
        assert!(set.len() >= 7, "{set:?}");
        let command = forewarn::app::settings::Variables::command();
        let declared: std::collections::BTreeSet<String> = command
            .get_arguments()
            .filter_map(|a| Some(a.get_env()?.to_string_lossy().into_owned()))
            .collect();
        for name in &set {
            assert!(declared.contains(*name), "{name}");
        }
        let err = extra_env("--handler-env", &["FOREWARN_TABLE=x".to_string()], &set).unwrap_err();
        assert!(
            err.to_string().contains("the stack's outputs set it"),
            "{err}"
        );
    }

    /// An environment the function would refuse at its start is refused before the deploy,
    /// naming the variable and what is wrong, never the value; the last of a name wins, as in
    /// the file Lambda is given; a dry run's placeholder line says nothing.
    #[test]
    fn an_environment_the_function_would_refuse_is_refused_before_the_deploy() {
        let env = |vars: &[&str]| vars.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        starts_with(
            "interruption-handler",
            &env(&[
                "<HandlerEnvFile>",
                "FOREWARN_CLUSTERS=prod",
                "FOREWARN_DRY_RUN=false",
                "FOREWARN_POLICY_ALLOW=\"cordon cordon-drain\"",
            ]),
        )
        .unwrap();
        let err = starts_with(
            "interruption-handler",
            &env(&["FOREWARN_CONCURRENCY=8", "FOREWARN_CONCURRENCY=lots"]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("function interruption-handler: FOREWARN_CONCURRENCY: ")
                && err.contains("nothing is deployed")
                && !err.contains("lots"),
            "{err}"
        );
        let secret = "https://hooks.example.invalid/T000/very-secret";
        let err = starts_with(
            "pool-sweeper",
            &env(&["FOREWARN_WEBHOOK_URL=ftp://hooks.example.invalid/very-secret"]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("FOREWARN_WEBHOOK_URL") && !err.contains("very-secret"),
            "{err}"
        );
        starts_with(
            "pool-sweeper",
            &env(&[&format!("FOREWARN_WEBHOOK_URL={secret}")]),
        )
        .unwrap();
    }

    #[test]
    fn the_command_lines_of_docs_deploy_md() {
        assert_eq!(
            command_line("cargo", &build_args("arm64").unwrap()),
            "cargo lambda build --release --arm64 -p interruption-handler -p pool-sweeper"
        );
        assert_eq!(build_args("x86_64").unwrap()[3], "--x86-64");
        assert!(build_args("sparc").is_err());
        let outputs = ["SweeperFunctionName", "SweeperRoleArn", "FunctionTimeout"];
        let args = deploy_args(
            FUNCTIONS[1],
            &outputs.map(|k| format!("<{k}>")),
            "/tmp/x/pool-sweeper.env",
            Some("eu-west-1"),
        );
        let line = command_line("cargo", &args);
        assert!(
            line.starts_with(
                "cargo lambda deploy <SweeperFunctionName> --binary-name pool-sweeper --iam-role \
                 <SweeperRoleArn> --timeout <FunctionTimeout> --env-file /tmp/x/pool-sweeper.env \
                 --region eu-west-1"
            ),
            "{line}"
        );
        assert_eq!(command_line("a b'c", &[]), r"'a b'\''c'");
        assert_eq!(command_line("", &[]), "''");
    }

    #[test]
    fn extra_variables_are_checked() {
        let vars = |raw: &[&str]| raw.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // A list keeps its commas: both environments go through a file.
        let stack = std::collections::BTreeSet::from(["FOREWARN_TABLE"]);
        let ok = extra_env("--sweeper-env", &vars(&["RUST_LOG=debug", "X=a,b"]), &stack);
        assert_eq!(ok.unwrap().len(), 2);
        let err = |raw: &[&str]| {
            extra_env("--sweeper-env", &vars(raw), &stack)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&["FOREWARN_TABLE=t"]).contains("stack's outputs set it"));
        assert!(err(&["1X=a"]).contains("KEY=VALUE"));
        assert!(err(&["noequals"]).contains("KEY=VALUE"));
        // Never the value: a secret given without its name, or with a bad one.
        for raw in [
            "https://hooks.example.com/services/SECRET",
            "HOOK URL=https://hooks.example.com/services/SECRET",
        ] {
            let e = err(&["RUST_LOG=debug", raw]);
            assert!(
                !e.contains("SECRET") && !e.contains("hooks.example.com"),
                "{e}"
            );
            assert!(
                e.starts_with("--sweeper-env (its 2nd use): expected KEY=VALUE"),
                "{e}"
            );
        }
        let e = err(&["FOREWARN_WEBHOOK_URL=https://h.example.com/SECRET\nX=1"]);
        assert!(
            e.contains("FOREWARN_WEBHOOK_URL") && !e.contains("SECRET"),
            "{e}"
        );
        assert!(err(&["X=a\nY=b"]).contains("one line"));
    }

    #[tokio::test]
    async fn a_failed_command_is_named_with_its_stderr() {
        let dir = std::env::temp_dir();
        let sh = |script: &str| ["-c".to_string(), script.to_string()];
        let e = run("sh", &sh("echo hello; echo bad >&2; exit 3"), &dir, false)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("`sh -c"), "{e}");
        assert!(e.ends_with(":\nbad"), "{e}");
        let e = run("sh", &sh("echo out; exit 3"), &dir, false)
            .await
            .unwrap_err();
        assert!(e.to_string().ends_with(":\nout"), "{e}");
        run("sh", &sh("echo hi"), &dir, false).await.unwrap();
        let missing = run("forewarn-no-such-program", &[], &dir, false)
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("on PATH"), "{missing}");
    }

    /// A dry run names the variables of a function's file, never their values.
    #[test]
    fn a_dry_run_names_the_variables_not_their_values() {
        let vars = [
            "A=1".to_string(),
            "<HandlerEnvFile>".to_string(),
            "x".to_string(),
        ];
        assert_eq!(names_of(&vars), ["A", "<HandlerEnvFile>", "(hidden)"]);
    }
}
