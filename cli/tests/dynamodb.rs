//! `forewarn replay --execute --table` against DynamoDB (moto server, started by the harness),
//! checked with the real AWS CLI, and `forewarn pools` showing the same pools from either store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use forewarn_tests::moto::{create_pool_table, runtime, shared, unique_name, workspace_root};
use serde_json::Value;

mod support;
use support::{Forewarn, root};

/// `forewarn` run in `dir`, whose `events/` the relative paths name, on the AWS at `endpoint`.
fn forewarn(dir: &Path, endpoint: &str, state: &Path, args: &[&str]) -> Output {
    Forewarn::new(state)
        .dir(dir)
        .aws_testing()
        .env("AWS_ENDPOINT_URL", endpoint)
        .run(args)
}

fn aws(endpoint: &str, args: &[&str]) -> Value {
    let aws: PathBuf = workspace_root().join(".venv/bin/aws");
    let out = Command::new(&aws)
        .args(args)
        .args([
            "--endpoint-url",
            endpoint,
            "--region",
            "us-east-1",
            "--output",
            "json",
        ])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/test.sh)", aws.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const REPLAY: [&str; 9] = [
    "replay",
    "--output",
    "json",
    "--cluster",
    "demo",
    "--instances",
    "events/state/instances.json",
    "--execute",
    "--table",
];

/// The pool items of a scan, by key, with their numeric attributes.
fn pool_items(scan: &Value) -> Vec<(String, Value)> {
    let mut items: Vec<(String, Value)> = scan["Items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["pk"]["S"].as_str().unwrap().starts_with("POOL#") && i["sk"]["S"] == "POOL")
        .map(|i| (i["pool"]["S"].as_str().unwrap().to_string(), i.clone()))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items
}

/// The history items (`sk` `HIST#...`), by `sk`.
fn history_items(scan: &Value) -> Vec<(String, Value)> {
    let mut items: Vec<(String, Value)> = scan["Items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["sk"]["S"].as_str().unwrap().starts_with("HIST#"))
        .map(|i| (i["sk"]["S"].as_str().unwrap().to_string(), i.clone()))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items
}

/// Items of a scan, by key.
type Items = Vec<(String, Value)>;

/// The table's items after the replay of the samples: one item per pool with every attribute,
/// the hot pool's counts, and the history items (in no index, with a TTL). The pool items and
/// the history items.
fn items_as_replayed(scan: &Value) -> (Items, Items) {
    let pools = pool_items(scan);
    assert_eq!(pools.len(), 11, "one item per pool: {pools:#?}");
    for (key, item) in &pools {
        for attr in [
            "capacity_type",
            "instance_type",
            "zone",
            "region",
            "expires_at",
            "first_seen",
            "last_seen",
            "last_event_id",
            "last_reason",
            "last_instance_id",
        ] {
            assert!(item.get(attr).is_some(), "{key}: {attr} missing in {item}");
        }
    }
    let hot = &pools
        .iter()
        .find(|(k, _)| k == "spot#m5.large#us-east-1a")
        .unwrap()
        .1;
    assert_eq!(hot["interruptions"]["N"], "3");
    // sample 22 (a rebalance recommendation in an SQS record with an empty time) is this pool's
    // third rebalance
    assert_eq!(hot["rebalances"]["N"], "3");
    assert!(hot.get("unavailable_until").is_some());
    // The history: one item per pool mark, in no index (none of their key attributes).
    let history = history_items(scan);
    let hot_history = history
        .iter()
        .filter(|(_, i)| i["pool"]["S"] == "spot#m5.large#us-east-1a")
        .count();
    assert!(
        hot_history >= 6,
        "3 interruptions and 3 rebalances at least: {history:#?}"
    );
    for (sk, item) in &history {
        for attr in ["unavailable_until", "zone", "instance_type", "last_seen"] {
            assert!(
                item.get(attr).is_none(),
                "{sk}: {attr} would put it in an index"
            );
        }
        assert!(item.get("expires_at").is_some(), "{sk}: no TTL");
    }
    (pools, history)
}

#[test]
fn replay_execute_records_one_item_per_pool_and_again_changes_nothing() {
    // The stores are read as of the tests' now (two days after the samples).
    let dir = root();
    let dir = dir.as_path();
    let endpoint = shared().endpoint();
    let table = runtime()
        .block_on(create_pool_table(
            &shared().sdk_config(),
            &unique_name("cli"),
        ))
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut args = REPLAY.to_vec();
    args.extend([table.as_str(), "events/"]);

    // Without --execute a table is only read.
    let dry: Vec<&str> = args.iter().copied().filter(|a| *a != "--execute").collect();
    let out = forewarn(dir, &endpoint, state.path(), &dry);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        aws(&endpoint, &["dynamodb", "scan", "--table-name", &table])["Items"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let out = forewarn(dir, &endpoint, state.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scan = aws(&endpoint, &["dynamodb", "scan", "--table-name", &table]);
    let (pools, history) = items_as_replayed(&scan);

    // Again: every event a duplicate, every item as it was.
    let again = forewarn(dir, &endpoint, state.path(), &args);
    assert!(again.status.success());
    for line in String::from_utf8(again.stdout).unwrap().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        assert!(
            line["outcome"] == "duplicate" || line["outcome"] == "ignored",
            "{line}"
        );
    }
    let rescan = aws(&endpoint, &["dynamodb", "scan", "--table-name", &table]);
    assert_eq!(
        pool_items(&rescan),
        pools,
        "replaying again changed an item"
    );
    assert_eq!(
        history_items(&rescan),
        history,
        "replaying again added history"
    );

    // `forewarn pools` shows the same pools from either store.
    let embedded = tempfile::tempdir().unwrap();
    let mut local: Vec<&str> = REPLAY[..7].to_vec();
    local.push("events/");
    assert!(
        forewarn(dir, &endpoint, embedded.path(), &local)
            .status
            .success()
    );
    let from_table = forewarn(
        dir,
        &endpoint,
        state.path(),
        &["pools", "--all", "--output", "json", "--table", &table],
    );
    let from_embedded = forewarn(
        dir,
        &endpoint,
        embedded.path(),
        &["pools", "--all", "--output", "json"],
    );
    let a: Value = serde_json::from_slice(&from_table.stdout).unwrap();
    let b: Value = serde_json::from_slice(&from_embedded.stdout).unwrap();
    assert_eq!(a.as_array().unwrap().len(), 11);
    assert_eq!(a, b, "the two stores disagree");
}
