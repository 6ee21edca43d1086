//! `forewarn priorities` in replay: the samples' events through the embedded store, the node
//! groups from `events/state/asgs.json`, the base from `events/state/priorities-base.yaml`.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod support;
use support::{Forewarn, root};

fn forewarn(state: &Path, args: &[&str]) -> Output {
    forewarn_in(&root(), state, args)
}

/// `forewarn` run in `dir`, whose `events/` the relative paths name.
fn forewarn_in(dir: &Path, state: &Path, args: &[&str]) -> Output {
    Forewarn::new(state)
        .dir(dir)
        // The replayed samples are two days old at the tests' now: windows long enough to be open.
        .env("FOREWARN_POOL_TTL", "240h")
        .env_remove("FOREWARN_PRIORITY_HOT_SHARE")
        .env_remove("KUBECONFIG")
        .run(args)
}

const PRIORITIES: [&str; 7] = [
    "priorities",
    "--groups",
    "events/state/asgs.json",
    "--base",
    "events/state/priorities-base.yaml",
    "--cluster",
    "demo",
];

fn priorities(state: &Path, extra: &[&str]) -> Output {
    let mut args = PRIORITIES.to_vec();
    args.extend_from_slice(extra);
    forewarn(state, &args)
}

/// A store with the samples replayed (the store is read as of the tests' now).
fn replayed() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let out = forewarn_in(
        &root(),
        state.path(),
        &[
            "replay",
            "--instances",
            "events/state/instances.json",
            "events/",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    state
}

#[test]
fn demotes_the_group_whose_share_of_pools_is_down() {
    let state = replayed();
    // spot#m5.large in us-east-1a and us-east-1b are down: 2 of demo-spot-general's 4 pools.
    let out = priorities(state.path(), &["--hot-share", "50%", "--output", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("demo-spot-general is hot: 2 of 4 pools"),
        "{stderr}"
    );
    assert!(
        stderr.contains("3 node groups of cluster demo, 1 hot"),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["apiVersion"], "v1");
    assert_eq!(doc["kind"], "ConfigMap");
    assert_eq!(
        doc["metadata"]["name"],
        "cluster-autoscaler-priority-expander"
    );
    assert_eq!(doc["metadata"]["namespace"], "kube-system");
    assert_eq!(
        doc["data"]["priorities"],
        "50:\n- ^demo\\-spot\\-compute$\n10:\n- .*on-demand.*\n9:\n- ^demo\\-spot\\-general$\n"
    );
    // The expander's format: a map of integer priority to a list of regular expressions.
    let map: std::collections::BTreeMap<i64, Vec<String>> =
        serde_saphyr::from_str(doc["data"]["priorities"].as_str().unwrap()).unwrap();
    assert_eq!(
        map,
        [
            (50, vec![r"^demo\-spot\-compute$".to_string()]),
            (10, vec![".*on-demand.*".to_string()]),
            (9, vec![r"^demo\-spot\-general$".to_string()]),
        ]
        .into()
    );
    let why: Value = serde_json::from_str(
        doc["metadata"]["annotations"]["forewarn.io/demoted"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(why["priority"], 9);
    assert_eq!(why["groups"][0]["group"], "demo-spot-general");

    // The default share (every pool): nothing is hot, the base as it is, as YAML.
    let out = priorities(state.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(
        yaml.starts_with("apiVersion: v1\nkind: ConfigMap\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("  priorities: |\n    50:\n    - .*spot.*\n    10:\n    - .*on-demand.*\n"),
        "{yaml}"
    );
}

#[test]
fn says_what_is_wrong_with_its_inputs() {
    let state = tempfile::tempdir().unwrap();
    let bad = state.path().join("bad.yaml");
    std::fs::write(&bad, "50: ['(']\n").unwrap();
    let out = forewarn(
        state.path(),
        &[
            "priorities",
            "--groups",
            "events/state/asgs.json",
            "--cluster",
            "demo",
            "--base",
            bad.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("priority 50"),
        "{stderr}"
    );

    let out = forewarn(
        state.path(),
        &[
            "priorities",
            "--groups",
            "events/state/asgs.json",
            "--cluster",
            "demo",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--base"));

    let out = forewarn(
        state.path(),
        &[
            "priorities",
            "--groups",
            "events/state/instances.json",
            "--base",
            "events/state/priorities-base.yaml",
            "--cluster",
            "demo",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("events/state/instances.json"), "{stderr}");

    let out = forewarn(state.path(), &["priorities", "--execute", "--asg"]);
    assert!(!out.status.success(), "--execute needs --kube");
}
