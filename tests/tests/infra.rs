//! The templates in infra/: cfn-lint finds nothing (no error, no warning), and the stack's pool
//! table is the pool-table template's, so the two cannot drift.

use std::process::Command;

use forewarn_tests::moto::workspace_root;

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
