//! `forewarn replay --kube` against the Kubernetes API fake, reached through a kubeconfig as a
//! user's would be: without --execute the plan is read from the live cluster and nothing is
//! written; with --execute the node is cordoned and drained.

use std::path::Path;
use std::process::{Command, Output};

use forewarn_tests::moto::workspace_root;
use kube_fake::KubeFake;
use serde_json::Value;

fn forewarn(kubeconfig: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forewarn"))
        .current_dir(workspace_root())
        .env("KUBECONFIG", kubeconfig)
        .env("FOREWARN_STATE_DIR", state)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("FOREWARN_EKS_CLUSTER")
        .env_remove("FOREWARN_TABLE")
        .args(args)
        .output()
        .expect("run forewarn")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `forewarn` with a fresh state dir (off the runtime, which serves the fake), checks it
/// succeeded and answers its one JSON line.
async fn replay(kubeconfig: &Path, args: Vec<&'static str>) -> Value {
    let kubeconfig = kubeconfig.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let state = tempfile::tempdir().unwrap();
        forewarn(&kubeconfig, state.path(), &args)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out).remove(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_plans_from_the_live_cluster_and_acts_only_with_execute() {
    let fake = KubeFake::start().await;
    let captured: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace_root().join("events/state/cluster.json")).unwrap(),
    )
    .unwrap();
    for item in captured["items"].as_array().unwrap() {
        let mut item = item.clone();
        if let Some(meta) = item["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
            meta.remove("uid");
        }
        fake.insert(item);
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n\
             current-context: c\n",
            fake.url()
        ),
    )
    .unwrap();
    let args = [
        "replay",
        "--output",
        "json",
        "--cluster-name",
        "demo",
        "--instances",
        "events/state/instances.json",
        "--kube",
        "events/02-spot-interruption-plain.json",
    ];
    let node = "ip-10-0-2-22.ec2.internal";
    let pods_on = |fake: &KubeFake| {
        fake.list("v1", "Pod")
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node)
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let before = pods_on(&fake);
    assert_eq!(before.len(), 7, "{before:?}");

    // Read only.
    let report = replay(&kubeconfig, args.to_vec()).await;
    assert_eq!(report["outcome"], "planned", "{report}");
    assert_eq!(report["actions"][0]["node"], node);
    assert_eq!(report["actions"][0]["action"], "cordon-drain");
    assert!(
        report["actions"][0]["result"].as_str().is_some(),
        "what would be done: {report}"
    );
    assert!(
        fake.writes().is_empty(),
        "a replay without --execute wrote: {:?}",
        fake.writes()
    );

    // Acting.
    let mut acting = args.to_vec();
    acting.insert(1, "--execute");
    let report = replay(&kubeconfig, acting).await;
    assert_eq!(report["outcome"], "acted", "{report}");
    let n = fake.get("v1", "Node", None, node).unwrap();
    assert_eq!(n["spec"]["unschedulable"], true);
    let mut left = pods_on(&fake);
    left.sort();
    assert_eq!(
        left,
        vec![
            "aws-node-c5wkn".to_string(),
            "report-29412360-zxvq8".to_string(),
            "static-healthcheck-ip-10-0-2-22.ec2.internal".to_string(),
        ],
        "the DaemonSet pod, the finished Job pod and the mirror pod stay"
    );
}
