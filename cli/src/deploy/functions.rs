//! The functions' side of `forewarn deploy`: the `cargo lambda build` and `cargo lambda deploy`
//! command lines, and running them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, anyhow, bail};

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

/// The `cargo lambda build` flag of a `FunctionArchitecture`.
pub fn build_flag(architecture: &str) -> anyhow::Result<&'static str> {
    match architecture {
        "arm64" => Ok("--arm64"),
        "x86_64" => Ok("--x86-64"),
        other => bail!("FunctionArchitecture {other}: expected arm64 or x86_64"),
    }
}

/// `cargo lambda build --release <flag> -p interruption-handler -p pool-sweeper`, without
/// `cargo`.
pub fn build_args(flag: &str) -> Vec<String> {
    let mut args: Vec<String> = ["lambda", "build", "--release", flag]
        .map(String::from)
        .to_vec();
    for f in FUNCTIONS {
        args.extend(["-p".to_string(), f.binary.to_string()]);
    }
    args
}

/// The variables the stack's environment outputs set (`NAME=` after `Outputs:` in `template`):
/// changed through the stack's parameters only.
pub fn stack_variables(template: &str) -> std::collections::BTreeSet<&str> {
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
    from_the_stack: &std::collections::BTreeSet<&str>,
) -> anyhow::Result<Vec<String>> {
    for (i, var) in raw.iter().enumerate() {
        let (key, value) = var
            .split_once('=')
            .filter(|(k, _)| {
                k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .ok_or_else(|| {
                anyhow!(
                    "{flag} (its {} use): expected KEY=VALUE, KEY a variable name (the argument \
                     is not shown: it may hold a secret)",
                    ordinal(i + 1)
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
    let mut set = std::collections::BTreeMap::new();
    for entry in dotenvy::from_read_iter(file.as_bytes()) {
        let (key, value) = entry.map_err(|e| {
            anyhow!(
                "function {binary}: its environment file is not read as cargo lambda reads it: {e}"
            )
        })?;
        set.insert(key, value);
    }
    forewarn::app::settings::Settings::from_vars(set)
        .map(|_| ())
        .map_err(|e| {
            anyhow!(
                "function {binary}: {}: {}; the function would refuse to start, so nothing is \
                 deployed",
                e.variable,
                e.message
            )
        })
}

/// The handler's configuration as its extra environment (`--handler-env`) sets it (its taint
/// key and effect, each the handler's default when not given); a bad value is an error naming
/// it.
pub fn taint_of(handler_env: &[String]) -> anyhow::Result<forewarn::domain::config::Config> {
    let vars = handler_env.iter().filter_map(|kv| kv.split_once('='));
    forewarn::app::settings::Settings::from_vars(vars)
        .map(|s| s.config)
        .map_err(|e| anyhow!("--handler-env: {e}"))
}

/// `cargo lambda deploy <name> --binary-name <binary> --iam-role <role> --timeout <t>
/// --env-file <env_file> [--region <region>] [--endpoint-url <url>]`, without `cargo`. The
/// environment goes through a file (the stack's `HandlerEnvFile` or `SweeperEnvFile`, then the
/// extra variables), not `--env-var`, which cargo lambda splits at every comma: a list of
/// clusters or hook names keeps its commas. cargo lambda adds the `env` of the crate's
/// `[package.metadata.lambda.deploy]` (its dry run off, ...).
pub fn deploy_args(
    f: Function,
    output: &dyn Fn(&str) -> String,
    env_file: &str,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Vec<String> {
    let mut args = vec![
        "lambda".to_string(),
        "deploy".to_string(),
        output(&format!("{}FunctionName", f.prefix)),
        "--binary-name".to_string(),
        f.binary.to_string(),
        "--iam-role".to_string(),
        output(&format!("{}RoleArn", f.prefix)),
        "--timeout".to_string(),
        output("FunctionTimeout"),
    ];
    args.extend(["--env-file".to_string(), env_file.to_string()]);
    if let Some(region) = region {
        args.extend(["--region".to_string(), region.to_string()]);
    }
    if let Some(endpoint) = endpoint {
        args.extend(["--endpoint-url".to_string(), endpoint.to_string()]);
    }
    args
}

/// The Lambda endpoint the SDK would use instead of AWS's: `AWS_ENDPOINT_URL_LAMBDA`, else
/// `AWS_ENDPOINT_URL` (cargo-lambda takes it as `--endpoint-url`).
pub fn endpoint_from_env() -> Option<String> {
    ["AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.is_empty())
}

/// Where cargo-lambda puts a function's bootstrap: `<target>/lambda/<binary>/bootstrap`, the
/// target directory being `CARGO_TARGET_DIR` or `<root>/target`.
pub fn bootstrap(root: &Path, binary: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| root.join("target"), PathBuf::from);
    target.join("lambda").join(binary).join("bootstrap")
}

/// `1st`, `2nd`, `3rd`, `4th`...
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What a hidden value is shown as.
pub const HIDDEN: &str = "(hidden)";

/// A command line as a shell would take it back (arguments quoted when needed). The functions'
/// variables are never on it (they go through `--env-file`): what the command prints of a
/// command names no value (a webhook URL is a secret).
pub fn command_line(program: &str, args: &[String]) -> String {
    std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The names of `KEY=VALUE` lines, for a dry run (`<HandlerEnvFile>` as it is).
pub fn names_of(vars: &[String]) -> Vec<String> {
    vars.iter()
        .map(|v| match v.split_once('=') {
            Some((k, _)) => k.to_string(),
            None if is_placeholder(v) => v.clone(),
            None => HIDDEN.to_string(),
        })
        .collect()
}

fn is_placeholder(arg: &str) -> bool {
    arg.len() > 2 && arg.starts_with('<') && arg.ends_with('>')
}

fn quote(arg: &str) -> String {
    let placeholder = is_placeholder(arg);
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if plain || placeholder {
        // A placeholder of the dry run, e.g. <HandlerRoleArn>, is shown as it is.
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Runs `program args` in `dir`, its standard error ours when `echo` (a build's progress),
/// and answers its standard output. A failure names the command and carries the end of its
/// standard error (or of its output when that is empty; nothing more when it was echoed).
pub fn run(program: &str, args: &[String], dir: &Path, echo: bool) -> anyhow::Result<String> {
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
        .with_context(|| format!("`{line}` could not start (is {program} on PATH?)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = match stderr.is_empty() {
        true => stdout.lines().collect(),
        false => stderr.lines().collect(),
    };
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
            command_line("cargo", &build_args(build_flag("arm64").unwrap())),
            "cargo lambda build --release --arm64 -p interruption-handler -p pool-sweeper"
        );
        assert_eq!(build_flag("x86_64").unwrap(), "--x86-64");
        assert!(build_flag("sparc").is_err());
        let output = |k: &str| format!("<{k}>");
        let args = deploy_args(
            FUNCTIONS[1],
            &output,
            "/tmp/x/pool-sweeper.env",
            Some("eu-west-1"),
            None,
        );
        assert_eq!(
            command_line("cargo", &args),
            "cargo lambda deploy <SweeperFunctionName> --binary-name pool-sweeper --iam-role \
             <SweeperRoleArn> --timeout <FunctionTimeout> --env-file /tmp/x/pool-sweeper.env \
             --region eu-west-1"
        );
        assert_eq!(quote("a b'c"), r"'a b'\''c'");
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

    #[test]
    fn a_failed_command_is_named_with_its_stderr() {
        let dir = std::env::temp_dir();
        let args = [
            "-c".to_string(),
            "echo hello; echo bad >&2; exit 3".to_string(),
        ];
        let e = run("sh", &args, &dir, false).unwrap_err().to_string();
        assert!(e.contains("`sh -c"), "{e}");
        assert!(e.ends_with(":\nbad"), "{e}");
        let ok = run(
            "sh",
            &["-c".to_string(), "echo hi".to_string()],
            &dir,
            false,
        )
        .unwrap();
        assert_eq!(ok, "hi\n");
        let missing = run("forewarn-no-such-program", &[], &dir, false).unwrap_err();
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
