//! The `forewarn` binary on the samples of `events/`: what a user sees.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod support;
use support::{Forewarn, forewarn, forewarn_in, root};

const WITH_STATE: [&str; 6] = [
    "--instances",
    "events/state/instances.json",
    "--cluster-state",
    "events/state/cluster.json",
    "--cluster",
    "demo",
];

fn replay_json(state: &Path, extra: &[&str]) -> (Output, Vec<Value>) {
    replay_json_in(&root(), state, extra)
}

fn replay_json_in(dir: &Path, state: &Path, extra: &[&str]) -> (Output, Vec<Value>) {
    let mut args = vec!["replay", "--output", "json"];
    args.extend_from_slice(extra);
    let out = forewarn_in(dir, state, &args);
    let lines = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    (out, lines)
}

fn by_origin<'a>(lines: &'a [Value], origin: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["origin"].as_str().is_some_and(|o| o.ends_with(origin)))
        .unwrap_or_else(|| panic!("no line for {origin}"))
}

#[test]
fn replay_of_the_samples_plans_every_event() {
    plans_every_event(&root(), |t| t.to_string());
}

/// Replays the samples in `dir`/events, whose times are those of `events/` as `at` gives them.
fn plans_every_event(dir: &Path, at: impl Fn(&str) -> String) {
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.push("events/");
    let (out, lines) = replay_json_in(dir, state.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines.len(),
        31,
        "26 files, the SQS batches hold 3, 3 and 1 records and the array 2"
    );
    for line in &lines {
        for key in [
            "event_id",
            "kind",
            "instance_ids",
            "outcome",
            "pools",
            "actions",
            "reason",
        ] {
            assert!(line.get(key).is_some(), "{key} missing in {line}");
        }
    }
    plans_as_expected(&lines);
    lifecycle_and_tests_as_expected(&lines, &at);
    dates_as_expected(&lines, &at);
}

type Expected = (
    &'static str,
    &'static str,
    &'static [(&'static str, Option<&'static str>)],
    &'static [&'static str],
);

/// What the replay of each sample plans: (origin suffix, outcome, [(action, target)], pool keys).
const EXPECTED: &[Expected] = &[
    (
        "01-spot-interruption-karpenter.json",
        "planned",
        &[("delete", Some("nodeclaim/default-x7k2p"))],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "02-spot-interruption-plain.json",
        "planned",
        &[("cordon-drain", None)],
        &["spot#c5.xlarge#us-east-1b"],
    ),
    (
        "03-spot-interruption-capi-stop.json",
        "planned",
        &[("delete", Some("machine/default/demo-md-0-abcde"))],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "04-spot-interruption-other-cluster.json",
        "planned",
        &[("none", None)],
        &["spot#r5.large#us-east-1c"],
    ),
    (
        "05-state-change-stopping-control-plane.json",
        "planned",
        &[("none", None)],
        &["on-demand#m5.xlarge#us-east-1a"],
    ),
    (
        "06-rebalance-recommendation.json",
        "planned",
        &[("cordon", None)],
        &["spot#m5.large#us-east-1b"],
    ),
    (
        "07-state-change-terminated.json",
        "planned",
        &[("delete", Some("node/i-0a1b2c3d4e5f60007.ec2.internal"))],
        &["on-demand#t3.large#us-east-1c"],
    ),
    (
        "08-health-scheduled-change-rfc1123.json",
        "planned",
        &[("cordon-drain", None)],
        &["on-demand#m5.2xlarge#us-east-1a"],
    ),
    (
        "09-asg-terminate-lifecycle.json",
        "planned",
        &[("cordon-drain", None)],
        &["on-demand#m5.large#us-east-1b"],
    ),
    (
        "10-capacity-reservation-interruption.json",
        "planned",
        &[("cordon-drain", None)],
        &["reserved#g5.xlarge#us-east-1c"],
    ),
    (
        "11-rebalance-already-cordoned.json",
        "planned",
        &[("none", None)],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "12-spot-interruption-no-node.json",
        "planned",
        &[("none", None)],
        &["spot#c5.large#us-east-1b"],
    ),
    ("13-state-change-running-ignored.json", "ignored", &[], &[]),
    ("14-health-non-ec2-ignored.json", "ignored", &[], &[]),
    (
        "15-health-scheduled-change-rfc3339.json",
        "planned",
        &[("cordon-drain", None), ("cordon-drain", None)],
        &["spot#c5.xlarge#us-east-1b", "spot#m5.large#us-east-1a"],
    ),
    ("16-unsupported-ami-state-change.json", "ignored", &[], &[]),
    (
        "Records[2] (messageId 6036e51d-cc4b-4892-857b-93410de6bcda)",
        "duplicate",
        &[("delete", Some("nodeclaim/default-x7k2p"))],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "18-array-of-events.json: [0]",
        "planned",
        // Shutting down: drained, not deleted (its containers may still run).
        &[("cordon-drain", None)],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "18-array-of-events.json: [1]",
        "planned",
        &[("cordon-drain", None)],
        &["spot#m5.large#us-east-1b"],
    ),
    (
        "Records[0] (messageId 9b2f4d6e-1c3a-4e5b-8f7d-0a2c4e6f8b10)",
        "planned",
        &[("cordon-drain", None)],
        &["on-demand#m5.large#us-east-1b"],
    ),
    (
        "Records[1] (messageId 4e6a8c0d-3b5f-4d7e-9a1c-2e4f6a8b0c21)",
        "planned",
        &[("none", None)],
        &[],
    ),
    (
        "Records[2] (messageId c1e3a5f7-9b2d-4f6a-8c0e-3d5b7f9a1c32)",
        "ignored",
        &[],
        &[],
    ),
    (
        "20-asg-test-notification-eventbridge.json",
        "ignored",
        &[],
        &[],
    ),
    (
        "21-health-scheduled-change-aws-dates.json",
        "planned",
        &[("cordon-drain", None)],
        &["reserved#g5.xlarge#us-east-1c"],
    ),
    (
        "Records[0] (messageId 2a4c6e8f-0b1d-4f3a-9c5e-7b9d1f3a5c94)",
        "planned",
        &[("cordon", None)],
        &["spot#m5.large#us-east-1a"],
    ),
    (
        "23-asg-launch-lifecycle.json",
        "planned",
        &[("none", None)],
        &[],
    ),
    // The block's instances, looked up: one with a node, one without.
    (
        "24-capacity-block-expiration.json",
        "planned",
        &[("cordon-drain", None), ("none", None)],
        &["capacity-block#p5.48xlarge#us-east-1a"],
    ),
    // The same block's warning under the other spelling: the block was handled.
    (
        "25-capacity-block-expiration-long-name.json",
        "duplicate",
        &[("cordon-drain", None), ("none", None)],
        &["capacity-block#p5.48xlarge#us-east-1a"],
    ),
    (
        "26-capacity-block-delivered.json",
        "planned",
        &[],
        &["capacity-block#p5.48xlarge#us-east-1a"],
    ),
];

/// Every sample's line has the outcome, actions and pools [`EXPECTED`] says.
fn plans_as_expected(lines: &[Value]) {
    for (origin, outcome, actions, pools) in EXPECTED {
        let line = by_origin(lines, origin);
        assert_eq!(line["outcome"], *outcome, "{origin}: {line}");
        let got: Vec<(String, Option<String>)> = line["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["action"].as_str().unwrap().to_string(),
                    a["target"].as_str().map(str::to_string),
                )
            })
            .collect();
        let want: Vec<(String, Option<String>)> = actions
            .iter()
            .map(|(a, t)| (a.to_string(), t.map(str::to_string)))
            .collect();
        assert_eq!(got, want, "{origin}");
        let got_pools: Vec<String> = line["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}#{}#{}",
                    p["capacity_type"].as_str().unwrap(),
                    p["instance_type"].as_str().unwrap(),
                    p["zone"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(got_pools, *pools, "{origin}");
    }
}

/// Lifecycle hooks' and test notifications' lines (and an ignored one's reason).
fn lifecycle_and_tests_as_expected(lines: &[Value], at: &impl Fn(&str) -> String) {
    let ignored = by_origin(lines, "13-state-change-running-ignored.json");
    assert!(ignored["reason"].as_str().unwrap().contains("running"));
    let asg = by_origin(lines, "09-asg-terminate-lifecycle.json");
    assert_eq!(
        asg["actions"][0]["complete_lifecycle"],
        "eks-demo-ng-1/forewarn-drain"
    );
    // A lifecycle hook's own notification, straight to the queue: planned like 09, its id from
    // its token.
    let hook = by_origin(
        lines,
        "Records[0] (messageId 9b2f4d6e-1c3a-4e5b-8f7d-0a2c4e6f8b10)",
    );
    assert_eq!(hook["kind"], "asg-termination");
    assert_eq!(
        hook["event_id"],
        "lifecycle-action:3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59"
    );
    assert_eq!(
        hook["instance_ids"],
        serde_json::json!(["i-0a1b2c3d4e5f60009"])
    );
    assert_eq!(
        hook["actions"][0]["complete_lifecycle"],
        "eks-demo-ng-1/forewarn-drain"
    );
    assert_eq!(hook["time"], at("2026-11-20T10:01:20.187Z"));
    // A launching hook's notification of an instance EC2 does not know: not this cluster's to
    // answer. The launch sample's instance is tagged for the cluster and has no node yet: its
    // hook is completed once the node (by its private DNS name) is Ready.
    let launching = by_origin(
        lines,
        "Records[1] (messageId 4e6a8c0d-3b5f-4d7e-9a1c-2e4f6a8b0c21)",
    );
    assert_eq!(launching["kind"], "asg-launch");
    assert_eq!(launching["actions"][0]["complete_lifecycle"], Value::Null);
    let reason = launching["actions"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("not tagged for this cluster"),
        "{launching}"
    );
    let launch = by_origin(lines, "23-asg-launch-lifecycle.json");
    assert_eq!(launch["kind"], "asg-launch");
    assert_eq!(
        launch["actions"][0]["complete_lifecycle"],
        "eks-demo-ng-1/forewarn-joined"
    );
    assert_eq!(launch["actions"][0]["node"], "ip-10-0-2-120.ec2.internal");
    assert_eq!(
        launch["actions"][0]["deadline"],
        at("2026-11-20T10:11:44Z"),
        "event time + the launch timeout (10 minutes)"
    );
    for origin in [
        "Records[2] (messageId c1e3a5f7-9b2d-4f6a-8c0e-3d5b7f9a1c32)",
        "20-asg-test-notification-eventbridge.json",
    ] {
        let test = by_origin(lines, origin);
        assert!(
            test["reason"]
                .as_str()
                .unwrap()
                .contains("test notification"),
            "{test}"
        );
        assert_eq!(test["instance_ids"], serde_json::json!([]), "{test}");
    }
}

/// Deadlines and times as the samples' dates give them.
fn dates_as_expected(lines: &[Value], at: &impl Fn(&str) -> String) {
    // Health's dates as AWS writes them: the weekday of `Sat, 3 Dec 2026` is wrong (a Thursday),
    // a single-digit day, fractional seconds; the empty endTime is absent; the padded entity is
    // trimmed.
    let health = by_origin(lines, "21-health-scheduled-change-aws-dates.json");
    assert_eq!(
        health["instance_ids"],
        serde_json::json!(["i-0a1b2c3d4e5f6000a"])
    );
    assert_eq!(
        health["actions"][0]["deadline"],
        at("2026-12-03T05:59:45.500Z"),
        "start time - 15 s"
    );
    // An empty time: the SQS message's SentTimestamp (1795168900123 ms in the samples).
    let empty_time = by_origin(
        lines,
        "Records[0] (messageId 2a4c6e8f-0b1d-4f3a-9c5e-7b9d1f3a5c94)",
    );
    assert_eq!(empty_time["time"], at("2026-11-20T10:01:40.123Z"));
    assert_eq!(
        empty_time["instance_ids"],
        serde_json::json!(["i-0a1b2c3d4e5f60001"])
    );
    let spot = by_origin(lines, "02-spot-interruption-plain.json");
    assert_eq!(
        spot["actions"][0]["deadline"],
        at("2026-11-20T10:01:49Z"),
        "event time + 120 s - 15 s"
    );
    assert_eq!(
        spot["pools"][0]["unavailable_until"],
        at("2026-11-20T11:00:04Z"),
        "event time + 1 h"
    );
}

/// A retired variable in the environment stops the command at its start, naming its new home
/// (the upgrade page's table); a retired flag is no flag at all.
#[test]
fn a_retired_name_stops_the_command_naming_its_home() {
    let state = tempfile::tempdir().unwrap();
    let out = Forewarn::new(state.path())
        .dir(&root())
        .env("FOREWARN_SURGE", "spot-interruption")
        .run(&["replay", "events/"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("FOREWARN_SURGE") && err.contains("a policy rule's `surge`"),
        "{err}"
    );
    let mut retired = WITH_STATE.to_vec();
    retired[4] = "--cluster-name";
    retired.push("events/");
    let (out, _) = replay_json_in(&root(), state.path(), &retired);
    assert_eq!(out.status.code(), Some(1), "a usage error");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--cluster-name'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn replaying_again_is_duplicate_and_changes_nothing() {
    // The store is read as of the tests' now (two days after the samples): their records not expired.
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.push("events/");
    let (first, _) = replay_json_in(&root(), state.path(), &args);
    assert!(first.status.success());
    let pools = |s: &Path| forewarn_in(&root(), s, &["pools", "--all", "--output", "json"]).stdout;
    let before = pools(state.path());
    let (second, lines) = replay_json_in(&root(), state.path(), &args);
    assert!(second.status.success());
    for line in &lines {
        let outcome = line["outcome"].as_str().unwrap();
        assert!(outcome == "duplicate" || outcome == "ignored", "{line}");
    }
    assert_eq!(
        before,
        pools(state.path()),
        "the second replay changed the store"
    );
    let listed: Value = serde_json::from_slice(&before).unwrap();
    assert_eq!(
        listed.as_array().unwrap().len(),
        11,
        "one record per distinct pool: {listed}"
    );
}

#[test]
fn malformed_input_is_reported_and_the_rest_still_processed() {
    let state = tempfile::tempdir().unwrap();
    let (out, lines) = replay_json(
        state.path(),
        &[
            "events/malformed/",
            "events/06-rebalance-recommendation.json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("events/malformed/wrong-type.json: field `detail.instance-id`: expected a string, found a number"), "{stderr}");
    assert!(
        stderr.contains(
            "events/malformed/missing-instance-id.json: field `detail.instance-id`: missing"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("events/malformed/not-json.json: not valid JSON"),
        "{stderr}"
    );
    assert!(
        stderr.contains("events/malformed/bad-time.json: field `time`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sqs-bad-record.json: Records[1]"),
        "{stderr}"
    );
    // Strict where no fallback exists: the id of a hook notification is its token, a made-up
    // instance id is no instance id, a template's placeholders are no times.
    assert!(
        stderr.contains(
            "events/malformed/hook-missing-token.json: field `LifecycleActionToken`: missing"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("events/malformed/hook-made-up-instance-id.json: field `EC2InstanceId`: `i-123e4567e89b12d3` is not an EC2 instance id"),
        "{stderr}"
    );
    assert!(
        stderr.contains("events/malformed/health-template-placeholders.json: field `detail.startTime`: `{{start_time}}` is not an RFC 3339 or RFC 1123 time"),
        "{stderr}"
    );
    let failed = lines.iter().filter(|l| l["outcome"] == "failed").count();
    assert_eq!(failed, 8, "5, and the 3 strict cases of issue 15");
    let planned: Vec<&Value> = lines.iter().filter(|l| l["outcome"] == "planned").collect();
    assert_eq!(
        planned.len(),
        2,
        "the good SQS record and the rebalance file still go through"
    );
}

#[test]
fn a_redelivered_hook_notification_is_a_duplicate() {
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.push("events/19-asg-hook-notification-sqs.json");
    let (first, lines) = replay_json(state.path(), &args);
    assert!(first.status.success());
    assert_eq!(lines[0]["outcome"], "planned", "{}", lines[0]);
    let (second, lines) = replay_json(state.path(), &args);
    assert!(second.status.success());
    assert_eq!(lines[0]["outcome"], "duplicate", "{}", lines[0]);
    assert_eq!(
        lines[0]["event_id"],
        "lifecycle-action:3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59"
    );
}

#[test]
fn without_captured_state_nothing_is_known() {
    let state = tempfile::tempdir().unwrap();
    let (out, lines) = replay_json(state.path(), &["events/02-spot-interruption-plain.json"]);
    assert!(out.status.success());
    assert_eq!(lines[0]["outcome"], "planned");
    assert_eq!(lines[0]["pools"], serde_json::json!([]));
    assert_eq!(lines[0]["actions"][0]["node"], Value::Null);
    assert_eq!(lines[0]["actions"][0]["action"], "none");
}

#[test]
fn text_output_and_pools_table() {
    // The store is read as of the tests' now (two days after the samples): their records not expired.
    let forewarn = |state: &Path, args: &[&str]| forewarn_in(&root(), state, args);
    let state = tempfile::tempdir().unwrap();
    let mut args = vec!["replay"];
    args.extend_from_slice(&WITH_STATE);
    args.push("events/");
    let out = forewarn(state.path(), &args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("[planned]   events/01-spot-interruption-karpenter.json"),
        "{text}"
    );
    assert!(
        text.contains(
            "i-0a1b2c3d4e5f60001 → ip-10-0-1-11.ec2.internal: delete nodeclaim/default-x7k2p"
        ),
        "{text}"
    );
    assert!(
        text.contains("31 records: 24 planned, 0 acted, 5 ignored, 2 duplicate, 0 failed"),
        "{text}"
    );
    assert!(
        text.contains(
            "i-0a1b2c3d4e5f6000c → ip-10-0-2-120.ec2.internal: complete lifecycle action \
             eks-demo-ng-1/forewarn-joined once the node is Ready (looked at until 2026-11-20 \
             10:11:44Z)\n"
        ),
        "{text}"
    );

    let table = forewarn(state.path(), &["pools", "--all", "--zone", "us-east-1c"]);
    let table = String::from_utf8(table.stdout).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert!(rows[0].starts_with("POOL"), "{table}");
    assert_eq!(rows.len(), 4, "header + 3 pools in us-east-1c: {table}");
    assert!(
        rows.iter()
            .all(|r| r.starts_with("POOL") || r.contains("us-east-1c"))
    );

    let json = forewarn(
        state.path(),
        &[
            "pools",
            "--all",
            "--instance-type",
            "m5.large",
            "--output",
            "json",
        ],
    );
    let pools: Value = serde_json::from_slice(&json.stdout).unwrap();
    let pools = pools.as_array().unwrap();
    assert_eq!(pools.len(), 3, "{pools:?}");
    for p in pools {
        assert_eq!(p["instance_type"], "m5.large");
        for key in [
            "capacity_type",
            "zone",
            "unavailable_until",
            "interruptions",
            "last_event_id",
            "last_reason",
        ] {
            assert!(p.get(key).is_some(), "{key} missing in {p}");
        }
    }
    let hot = pools
        .iter()
        .find(|p| p["capacity_type"] == "spot" && p["zone"] == "us-east-1a")
        .unwrap();
    assert_eq!(hot["interruptions"], 3, "01, 03 and the SQS spot warning");

    // The sample events are days old: their windows are over, so the default view is empty.
    let current = forewarn(state.path(), &["pools", "--output", "json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&current.stdout).unwrap(),
        serde_json::json!([])
    );
}

#[test]
fn bad_configuration_is_a_clear_error() {
    let state = tempfile::tempdir().unwrap();
    let out = Forewarn::new(state.path())
        .env("FOREWARN_POOL_TTL", "an hour")
        .run(&["replay", "events/01-spot-interruption-karpenter.json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FOREWARN_POOL_TTL=\"an hour\""), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// forewarn audit

const AUDIT: [&str; 3] = ["audit", "--cluster-state", "events/state/audit.json"];

fn audit(state: &Path, extra: &[&str]) -> Output {
    let mut args = AUDIT.to_vec();
    args.extend_from_slice(extra);
    forewarn(state, &args)
}

/// (workload, code) of every finding line, and the summary line.
fn audit_json(out: &Output) -> (Vec<(String, String)>, Value) {
    let mut lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["summary"], true, "{summary}");
    let findings = lines
        .iter()
        .map(|l| {
            assert!(l["message"].as_str().is_some_and(|m| !m.is_empty()), "{l}");
            assert!(["error", "warning", "info"].contains(&l["level"].as_str().unwrap()));
            (
                l["workload"].as_str().unwrap().to_string(),
                l["code"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (findings, summary)
}

#[test]
fn audit_of_the_sample_finds_what_would_hurt() {
    let state = tempfile::tempdir().unwrap();
    let out = audit(state.path(), &["--output", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (findings, summary) = audit_json(&out);
    let has = |w: &str, c: &str| findings.iter().any(|(fw, fc)| fw == w && fc == c);
    for (w, c) in [
        ("shop/Deployment/cart", "pdb-blocks-eviction"),
        ("shop/Deployment/cart", "one-pool"),
        ("shop/Deployment/checkout", "single-replica"),
        ("shop/Deployment/checkout", "no-pdb"),
        ("shop/Deployment/checkout", "grace-too-long"),
        ("shop/Deployment/search", "pdb-overlap"),
        ("shop/StatefulSet/redis", "one-node"),
        ("shop/StatefulSet/redis", "local-storage"),
        ("ml/ReplicaSet/batch-worker", "no-pdb"),
        ("ml/ReplicaSet/batch-worker", "one-zone"),
        ("kube-system/Deployment/metrics-server", "critical-on-spot"),
        ("shop/Pod/debug-aaaaa", "no-controller"),
    ] {
        assert!(has(w, c), "no {c} for {w}: {findings:?}");
    }
    assert!(
        !findings.iter().any(|(w, _)| w == "shop/Deployment/web"),
        "web is spread and budgeted: {findings:?}"
    );
    assert!(
        !findings
            .iter()
            .any(|(w, _)| w.contains("coredns") || w.contains("aws-node")),
        "on-demand workloads and DaemonSets are not reported: {findings:?}"
    );
    assert_eq!(summary["workloads"], 9);
    assert_eq!(summary["checked"], 8);
    assert_eq!(summary["findings"]["error"], 5);
    assert_eq!(summary["spot_replicas"], 15);
    assert_eq!(summary["surviving_replicas"], 7);
    assert_eq!(summary["budgets_to_add"], 4);

    let text = audit(state.path(), &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("shop/Deployment/cart\n  error    pdb-blocks-eviction"),
        "{text}"
    );
    assert!(
        text.contains("7 of 15 spot-hosted replicas (47%) would survive"),
        "{text}"
    );
}

#[test]
fn audit_fail_on_sets_the_exit_code() {
    let state = tempfile::tempdir().unwrap();
    for (level, code) in [("error", 2), ("warning", 2), ("info", 2)] {
        let out = audit(state.path(), &["--output", "json", "--fail-on", level]);
        assert_eq!(out.status.code(), Some(code), "--fail-on {level}");
    }
    // Only the clean workload: nothing at any level.
    let dir = tempfile::tempdir().unwrap();
    let sample: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("events/state/audit.json")).unwrap(),
    )
    .unwrap();
    let items: Vec<&Value> = sample["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            let name = i["metadata"]["name"].as_str().unwrap();
            i["kind"] == "Node" || name.starts_with("web")
        })
        .collect();
    let clean = dir.path().join("clean.json");
    std::fs::write(
        &clean,
        serde_json::to_string(&serde_json::json!({"kind": "List", "items": items})).unwrap(),
    )
    .unwrap();
    let clean = clean.to_str().unwrap();
    let out = forewarn(
        state.path(),
        &["audit", "--cluster-state", clean, "--fail-on", "info"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn audit_bad_input_exits_1_naming_what_is_wrong() {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"kind":"List","items":[{"apiVersion":"policy/v1","kind":"PodDisruptionBudget",
            "metadata":{"name":"b","namespace":"shop"},"spec":{"minAvailable":"most"}}]}"#,
    )
    .unwrap();
    let bad = bad.to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["audit", "--cluster-state", &bad],
            format!("{bad}: poddisruptionbudget/shop/b: spec.minAvailable: `most`"),
        ),
        (
            vec!["audit", "--cluster-state", "events/state/nope.json"],
            "events/state/nope.json: cannot read".into(),
        ),
        (
            vec![
                "audit",
                "--cluster-state",
                "events/02-spot-interruption-plain.json",
            ],
            "not the JSON `kubectl get deploy".into(),
        ),
        (vec!["audit"], "--kube".into()),
        (
            vec![
                "audit",
                "--cluster-state",
                "events/state/audit.json",
                "--fail-on",
                "bad",
            ],
            "invalid value 'bad'".into(),
        ),
    ];
    for (args, want) in cases {
        let out = forewarn(state.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
}

#[test]
fn audit_sees_pools_the_table_saw_interrupted() {
    // The store is read as of the tests' now (two days after the samples): their records not expired.
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.push("events/02-spot-interruption-plain.json");
    let (out, _) = replay_json_in(&root(), state.path(), &args);
    assert!(out.status.success());
    // The sample is two days old: a window wide enough to keep it recent.
    let mut args = AUDIT.to_vec();
    args.extend(["--output", "json", "--hot-days", "14"]);
    let out = forewarn_in(&root(), state.path(), &args);
    let (findings, summary) = audit_json(&out);
    let hot: Vec<&str> = findings
        .iter()
        .filter(|(_, c)| c == "hot-pool")
        .map(|(w, _)| w.as_str())
        .collect();
    assert_eq!(
        hot,
        [
            "ml/ReplicaSet/batch-worker",
            "shop/Deployment/checkout",
            "shop/Deployment/web"
        ],
        "the replicas on spot#c5.xlarge#us-east-1b"
    );
    assert_eq!(summary["findings"]["warning"], 11);
}

#[test]
fn audit_yaml_and_fix_give_the_budgets_to_add() {
    let state = tempfile::tempdir().unwrap();
    let out = audit(state.path(), &["--output", "yaml"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
    let names: Vec<String> = docs
        .iter()
        .map(|d| {
            assert_eq!(d["apiVersion"], "policy/v1");
            assert_eq!(d["kind"], "PodDisruptionBudget");
            assert!(d["spec"]["maxUnavailable"].as_i64().unwrap() >= 1);
            format!(
                "{}/{}",
                d["metadata"]["namespace"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "kube-system/metrics-server",
            "ml/batch-worker",
            "shop/checkout",
            "shop/redis"
        ]
    );
    assert_eq!(docs[3]["spec"]["selector"]["matchLabels"]["app"], "redis");

    let fix = tempfile::tempdir().unwrap();
    let dir = fix.path().join("pdbs");
    let out = audit(state.path(), &["--fix", dir.to_str().unwrap()]);
    assert!(out.status.success());
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "kube-system.metrics-server.yaml",
            "ml.batch-worker.yaml",
            "shop.checkout.yaml",
            "shop.redis.yaml"
        ]
    );
    let one: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("shop.redis.yaml")).unwrap())
            .unwrap();
    assert_eq!(*docs[3], one);
}

#[test]
fn pool_statistics_come_from_the_history_the_replays_wrote() {
    // The history is read as of the tests' now (two days after the samples): their history not expired.
    let forewarn = |state: &Path, args: &[&str]| forewarn_in(&root(), state, args);
    let replay_json = |state: &Path, args: &[&str]| replay_json_in(&root(), state, args);
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.extend(["--execute", "events/"]);
    let (first, _) = replay_json(state.path(), &args);
    assert!(first.status.success());
    let stats = |s: &Path| {
        let out = forewarn(
            s,
            &["pools", "--stats", "--since", "3650d", "--output", "json"],
        );
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let before = stats(state.path());
    let pools = before["pools"].as_array().unwrap();
    let hot = pools
        .iter()
        .find(|p| p["pool"] == "spot#m5.large#us-east-1a")
        .unwrap_or_else(|| panic!("{before:#}"));
    assert_eq!(hot["interruptions"], 3, "01, 03 and the SQS spot warning");
    assert_eq!(hot["events"]["spot-interruption"], 3, "{hot}");
    let share = hot["unavailable_share"].as_f64().unwrap();
    assert!(
        share > 0.0 && share < 0.01,
        "an hour or so in ten years: {share}"
    );
    assert!(hot["seconds_since_last"].as_i64().unwrap() > 0);
    assert!(pools[0]["interruptions"].as_u64() >= pools.last().unwrap()["interruptions"].as_u64());
    let zone = before["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["name"] == "us-east-1a")
        .unwrap();
    assert!(zone["interruptions"].as_u64().unwrap() >= 3, "{zone}");
    assert!(!before["instance_types"].as_array().unwrap().is_empty());

    // Replaying again adds nothing: the history is written with the event, once. (The time
    // since each pool's last event has grown meanwhile, by a second now and then.)
    let (second, _) = replay_json(state.path(), &args);
    assert!(second.status.success());
    let counts = |stats: &Value| -> Vec<Value> {
        stats["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.as_object_mut().unwrap().remove("seconds_since_last");
                p
            })
            .collect()
    };
    assert_eq!(counts(&stats(state.path())), counts(&before));

    let table = forewarn(state.path(), &["pools", "--stats", "--since", "3650d"]);
    let text = String::from_utf8(table.stdout).unwrap();
    for header in ["POOL", "ZONE", "INSTANCE TYPE", "UNAVAILABLE"] {
        assert!(text.contains(header), "{text}");
    }
    // The default period (7 days) is measured back from now.
    let recent = forewarn(state.path(), &["pools", "--stats", "--output", "json"]);
    assert!(recent.status.success());

    let bad = forewarn(state.path(), &["pools", "--stats", "--since", "soon"]);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert!(stderr.contains("--since soon"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Policies and the way back

#[test]
fn a_policy_chooses_per_node_group_and_the_report_names_the_rule() {
    let state = tempfile::tempdir().unwrap();
    let mut args = WITH_STATE.to_vec();
    args.extend([
        "--policy",
        "events/policy.yaml",
        "events/06-rebalance-recommendation.json",
    ]);
    let (out, lines) = replay_json(state.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let action = &lines[0]["actions"][0];
    assert_eq!(action["action"], "cordon", "{action}");
    let reason = action["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("rule spot: cordon-for 30m; "),
        "{reason}"
    );
    assert!(
        reason.contains("until 2026-11-20T10:30:20+00:00"),
        "{reason}"
    );
    // Without the policy: the default, no rule.
    let (_, lines) = replay_json(
        tempfile::tempdir().unwrap().path(),
        &[
            &WITH_STATE[..],
            &["events/06-rebalance-recommendation.json"],
        ]
        .concat(),
    );
    let reason = lines[0]["actions"][0]["reason"].as_str().unwrap();
    assert!(!reason.contains("rule"), "{reason}");
}

#[test]
fn a_bad_policy_is_refused_naming_the_field_and_nothing_is_done() {
    let state = tempfile::tempdir().unwrap();
    let policy = state.path().join("bad.yaml");
    std::fs::write(
        &policy,
        "rules:\n- name: a\n  nodes: {}\n  actions: {spot-interruption: evaporate}\n",
    )
    .unwrap();
    let out = forewarn(
        state.path(),
        &[
            "replay",
            "--policy",
            policy.to_str().unwrap(),
            "events/02-spot-interruption-plain.json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rules[0].actions.spot-interruption: unknown action \"evaporate\""),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing replayed");
    let pools = forewarn(state.path(), &["pools", "--all", "--output", "json"]);
    assert_eq!(String::from_utf8_lossy(&pools.stdout).trim(), "[]");
}

/// A captured cluster with four cordoned nodes: forewarn's `cordon-for` that ran out, one
/// still running, one cordoned by someone else (no forewarn taint), and one whose record ran out
/// but was not signed by forewarn (its kubelet wrote it). forewarn's records are signed with the
/// key of the embedded store in `dir`.
fn cordoned_cluster(dir: &Path) -> std::path::PathBuf {
    let keys = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(forewarn::ports::PoolStore::continuation_keys(
            &forewarn::adapters::embedded::EmbeddedStore::open(dir).unwrap(),
        ))
        .unwrap();
    let unsigned = |event: &str, instance: &str, until: &str| {
        serde_json::json!({"kind": "rebalance-recommendation", "event-id": event,
            "instance-id": instance, "at": "2026-11-22T09:00:00Z", "until": until})
    };
    let record = |event: &str, instance: &str, until: &str| {
        serde_json::from_value::<forewarn::domain::cordon_record::CordonRecord>(unsigned(
            event, instance, until,
        ))
        .unwrap()
        .signed(&keys.current)
        .to_annotation()
    };
    let node = |name: &str, instance: &str, taint: bool, record: Option<String>| {
        let mut annotations = serde_json::Map::new();
        if let Some(r) = record {
            annotations.insert("forewarn.io/cordon".into(), r.into());
        }
        let taints = if taint {
            serde_json::json!([{"key": "forewarn.io/interruption", "value": "rebalance-recommendation", "effect": "NoSchedule"}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"providerID": format!("aws:///us-east-1a/{instance}"), "unschedulable": true, "taints": taints}})
    };
    let state = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        node("ran-out", "i-0a1b2c3d4e5f60001", true, Some(record("e-1", "i-0a1b2c3d4e5f60001", "2026-11-22T09:30:00Z"))),
        node("still-on", "i-0a1b2c3d4e5f60002", true, Some(record("e-2", "i-0a1b2c3d4e5f60002", "2026-11-22T12:00:00Z"))),
        node("theirs", "i-0a1b2c3d4e5f60003", false, Some(record("e-3", "i-0a1b2c3d4e5f60003", "2026-11-22T09:30:00Z"))),
        node("forged", "i-0a1b2c3d4e5f60004", true, Some(unsigned("e-4", "i-0a1b2c3d4e5f60004", "2026-11-22T09:30:00Z").to_string())),
    ]});
    let path = dir.join("cordoned.json");
    std::fs::write(&path, state.to_string()).unwrap();
    path
}

#[test]
fn reconcile_says_which_cordons_lost_their_reason_and_changes_nothing_without_execute() {
    let state = tempfile::tempdir().unwrap();
    let cluster = cordoned_cluster(state.path());
    // The samples' clock: 2026-11-22T10:00:00Z.
    let out = forewarn(
        state.path(),
        &["reconcile", "--cluster-state", cluster.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    // A record forewarn did not sign is never acted on, and is reported.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("node/forged: left cordoned: refused")
                && l.contains("not one forewarn signed")),
        "{stdout}"
    );
    let stdout = stdout
        .lines()
        .find(|l| l.starts_with("node/ran-out"))
        .unwrap_or_default();
    assert!(
        stdout.starts_with("node/ran-out: would undo the cordon"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ran until 2026-11-22T09:30:00+00:00"),
        "{stdout}"
    );
    let json = forewarn(
        state.path(),
        &[
            "reconcile",
            "--cluster-state",
            cluster.to_str().unwrap(),
            "--output",
            "json",
        ],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let line = lines.iter().find(|l| l["node"] == "ran-out").unwrap();
    assert_eq!(line["node"], "ran-out");
    assert_eq!(line["event_id"], "e-1");
    assert!(line.get("outcome").is_none(), "nothing was tried: {line}");
    // --execute changes a live cluster: it needs --kube.
    let out = forewarn(
        state.path(),
        &[
            "reconcile",
            "--cluster-state",
            cluster.to_str().unwrap(),
            "--execute",
        ],
    );
    assert!(!out.status.success());
}

/// `forewarn key rotate`: nothing changes without --execute (it says which key would become
/// which); with it, a new current key of the next id, the current one still accepted.
#[test]
fn key_rotate_changes_the_key_only_with_execute() {
    let state = tempfile::tempdir().unwrap();
    let text = |out: &Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let dry = text(&forewarn(state.path(), &["key", "rotate"]));
    assert!(
        dry.ends_with("no continuation key yet; --execute creates key 1"),
        "{dry}"
    );
    let dry = text(&forewarn(state.path(), &["key", "rotate"]));
    assert!(
        dry.contains("no continuation key yet"),
        "a dry run created none: {dry}"
    );
    let first = text(&forewarn(state.path(), &["key", "rotate", "--execute"]));
    assert!(first.ends_with("key 1 is current"), "{first}");
    let second = text(&forewarn(state.path(), &["key", "rotate", "--execute"]));
    assert!(
        second.ends_with("key 2 is current, key 1 still accepted"),
        "{second}"
    );
    let dry = text(&forewarn(state.path(), &["key", "rotate"]));
    assert!(
        dry.ends_with(
            "key 2 is current, key 1 still accepted; --execute makes key 3 current, keeps key 2 \
             accepted and no longer accepts key 1"
        ),
        "{dry}"
    );
}

/// `forewarn migrate --from-nth`: NTH's Helm values in, a policy `forewarn replay --policy`
/// takes on stdout, the variables to set and the keys not carried over on stderr; values that
/// are not a mapping are refused, named.
#[test]
fn nth_values_become_a_policy_replay_takes() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("nth-values.yaml");
    std::fs::write(
        &values,
        "enableSqsTerminationDraining: true\nqueueURL: https://sqs.us-east-1.amazonaws.com/123456789012/nth\n\
         cordonOnly: false\nworkers: 16\ntaintNode: true\nwebhookURL: https://hooks.example.com/x\n\
         tolerations:\n  - operator: Exists\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let out = forewarn(&state, &["migrate", "--from-nth", values.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let policy = String::from_utf8(out.stdout).unwrap();
    assert!(
        policy.contains("spot-interruption: cordon-drain"),
        "{policy}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    for line in [
        "workers: set FOREWARN_CONCURRENCY=16",
        "webhookURL: set FOREWARN_WEBHOOK_URL=https://hooks.example.com/x",
        "queueURL: not carried over",
        "taintNode: set FOREWARN_TAINT_KEY=nth (a variable of the functions): the nodes \
         forewarn cordons get NTH's taint keys",
        "tolerations: not carried over",
    ] {
        assert!(stderr.contains(line), "{line} not in: {stderr}");
    }
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, &policy).unwrap();
    let (out, lines) = replay_json(&state, &["--policy", file.to_str().unwrap(), "events/"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!lines.is_empty());

    std::fs::write(&values, "- a list\n").unwrap();
    let out = forewarn(&state, &["migrate", "--from-nth", values.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("not Helm values"), "{stderr}");
}
