//! The templates in infra/: cfn-lint finds nothing (no error, no warning), the stack's pool
//! table is the pool-table template's, so the two cannot drift, and the stack's defaults and
//! policies say what docs/deploy.md and docs/security.md say of them.

use std::process::Command;

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

#[test]
fn cfn_lint_is_clean() {
    let root = workspace_root();
    let cfn_lint = root.join(".venv/bin/cfn-lint");
    assert!(
        cfn_lint.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        cfn_lint.display()
    );
    // `cfn-lint infra/*.yaml`: every template directly in infra/ (the Kubernetes manifests
    // live in infra/k8s/).
    let mut templates: Vec<String> = std::fs::read_dir(root.join("infra"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    templates.sort();
    assert_eq!(templates.len(), 2, "{templates:?}");
    let out = Command::new(&cfn_lint)
        .args(&templates)
        .output()
        .expect("run cfn-lint");
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "cfn-lint reported (exit {:?}):\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines of the `PoolTable` resource, without its `TableName`.
fn pool_table(template: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace_root().join(template)).unwrap();
    let mut lines = text.lines().skip_while(|l| *l != "  PoolTable:");
    let mut block = vec![lines.next().expect("a PoolTable resource").to_string()];
    for line in lines {
        let indent = line.len() - line.trim_start().len();
        if !line.trim().is_empty() && indent <= 2 {
            break;
        }
        if !line.trim_start().starts_with("TableName:") {
            block.push(line.trim_end().to_string());
        }
    }
    while block.last().is_some_and(|l| l.is_empty()) {
        block.pop();
    }
    block
}

#[test]
fn the_stack_pool_table_is_the_pool_table_template() {
    let alone = pool_table("infra/pool-table.yaml");
    assert!(alone.len() > 20, "{alone:#?}");
    assert!(
        alone
            .iter()
            .any(|l| l.contains("AttributeName: expires_at"))
    );
    assert_eq!(pool_table("infra/forewarn.yaml"), alone);
}

/// `infra/forewarn.yaml` as JSON, its intrinsic functions in their long form
/// (`{"Fn::GetAtt": ["Queue", "Arn"]}`), read by cfn-lint's own template decoder (the venv's
/// Python), so that the short forms (`!GetAtt`, `!If`, ...) need no YAML support here.
fn stack_template() -> Value {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        python.display()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys, cfnlint.decode as d\n\
             t, m = d.decode(sys.argv[1])\n\
             assert not m, m\n\
             json.dump(t, sys.stdout, default=str)",
        )
        .arg(root.join("infra/forewarn.yaml"))
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "decoding the template failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoded template is JSON")
}

/// A number of the template, written as a YAML number or string.
fn number(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

/// The stack's default `MaxReceiveCount` keeps a spot warning that fails at every attempt on the
/// queue past its window, with the delays the handler gives failed messages
/// (`forewarn::domain::retry`), and the former default of 5 did not.
#[test]
fn max_receive_count_outlasts_a_spot_warning_window() {
    use forewarn::domain::config::Config;
    use forewarn::domain::retry::{Failed, RetryPolicy};

    let t = stack_template();
    let max = number(&t["Parameters"]["MaxReceiveCount"]["Default"]);
    assert_eq!(max, 15);
    assert_eq!(
        t["Resources"]["EventQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"],
        json!({"Ref": "MaxReceiveCount"})
    );
    let config = Config::default();
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
        .unwrap()
        .to_utc();
    let window_end = start + config.interruption_notice - config.deadline_margin;
    assert_eq!((window_end - start).num_seconds(), 105);
    let policy = RetryPolicy::default();
    // When each receive of a message that fails every time happens, from the first at the event.
    let receives = |count: u64| {
        let mut at = vec![start];
        for n in 1..count {
            let now = *at.last().unwrap();
            let delay = policy.delay(Failed::Event { window_end }, n as u32, now);
            at.push(now + chrono::Duration::from_std(delay).unwrap());
        }
        at
    };
    let stack = receives(max);
    let inside = stack.iter().filter(|t| **t < window_end).count();
    assert_eq!(inside, 10, "{stack:?}");
    assert!(
        *stack.last().unwrap() > window_end,
        "the last receive comes after the window: {stack:?}"
    );
    let old = receives(5);
    assert!(
        *old.last().unwrap() + chrono::Duration::seconds(60) < window_end,
        "with 5 receives, a warning reached the DLQ early in its window: {old:?}"
    );
}
