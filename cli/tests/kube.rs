//! `forewarn replay --kube` against the Kubernetes API fake, reached through a kubeconfig as a
//! user's would be: without --execute the plan is read from the live cluster and nothing is
//! written; with --execute the node is cordoned and drained. And `forewarn check --kube`, the
//! preflight, through the fake's admission chain.

use std::path::Path;
use std::process::Output;

use kube_fake::KubeFake;
use serde_json::Value;

mod support;
use support::{Forewarn, kubeconfig_for, root};

/// `forewarn` on the cluster of `kubeconfig`.
fn forewarn(kubeconfig: &Path, state: &Path, args: &[&str]) -> Output {
    Forewarn::new(state)
        .env("KUBECONFIG", kubeconfig)
        .aws_testing()
        .env_remove("FOREWARN_EKS_CLUSTER")
        .run(args)
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
    // As a cluster forewarn was deployed to (its namespace, PriorityClass, admission policies).
    let fake = forewarn_tests::cluster::deployed().await;
    let captured: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("events/state/cluster.json")).unwrap(),
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
    let kubeconfig = kubeconfig_for(&fake.url(), dir.path());
    let args = [
        "replay",
        "--output",
        "json",
        "--cluster",
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

// ---------------------------------------------------------------------------------------------
// forewarn audit --kube

/// (group, resource, verb) of a request (lists and creates only: what the audit and this test
/// send).
fn rbac_need(r: &kube_fake::RecordedRequest) -> (String, String, String) {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest),
        ["apis", group, _v, rest @ ..] => (group.to_string(), rest),
        _ => panic!("not a resource path: {}", r.path),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    let (resource, verb) = match (rest, r.method.as_str()) {
        ([resource], "GET") => (resource.to_string(), "list"),
        ([resource, _name], "GET") => (resource.to_string(), "get"),
        _ => (rest.join("/"), r.method.as_str()),
    };
    (group, resource, verb.to_string())
}

/// What infra/k8s/audit-rbac.yaml grants.
fn audit_rbac() -> std::collections::BTreeSet<(String, String, String)> {
    let text = std::fs::read_to_string(root().join("infra/k8s/audit-rbac.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut granted = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for g in strings(&rule["apiGroups"]) {
            for res in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    assert_ne!(verb, "*");
                    granted.insert((g.clone(), res.clone(), verb));
                }
            }
        }
    }
    granted
}

async fn run_audit(kubeconfig: &Path, args: Vec<&'static str>) -> Output {
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let state = tempfile::tempdir().unwrap();
        forewarn(&kubeconfig, state.path(), &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_reads_the_live_cluster_within_its_rbac_and_its_budgets_are_valid() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::Api;
    use kube::api::{EvictParams, PostParams};

    // As a cluster forewarn was deployed to (its namespace, PriorityClass, admission policies).
    let fake = forewarn_tests::cluster::deployed().await;
    let captured: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("events/state/audit.json")).unwrap(),
    )
    .unwrap();
    for item in captured["items"].as_array().unwrap() {
        let mut item = item.clone();
        if let Some(meta) = item["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        fake.insert(item);
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(&fake.url(), dir.path());

    // The live read finds what the capture holds, and only reads.
    let live = run_audit(&kubeconfig, vec!["audit", "--kube", "--output", "json"]).await;
    assert!(
        live.status.success(),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );
    let snapshot = tokio::task::spawn_blocking(move || {
        let state = tempfile::tempdir().unwrap();
        Forewarn::new(state.path()).run(&[
            "audit",
            "--cluster-state",
            "events/state/audit.json",
            "--output",
            "json",
        ])
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&live.stdout),
        String::from_utf8_lossy(&snapshot.stdout)
    );
    assert!(
        fake.writes().is_empty(),
        "the audit wrote: {:?}",
        fake.writes()
    );
    let used: std::collections::BTreeSet<_> = fake.requests().iter().map(rbac_need).collect();
    let granted = audit_rbac();
    assert_eq!(
        used, granted,
        "infra/k8s/audit-rbac.yaml grants exactly what the audit lists"
    );

    // Every budget it suggests is accepted, and then allows one eviction of its workload's pods.
    let yaml = run_audit(&kubeconfig, vec!["audit", "--kube", "--output", "yaml"]).await;
    assert!(yaml.status.success());
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(yaml.stdout).unwrap()).unwrap();
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert_eq!(docs.len(), 4);
    let client = fake.client();
    for doc in docs {
        let pdb: PodDisruptionBudget = serde_json::from_value(doc.clone()).unwrap();
        let ns = pdb.metadata.namespace.clone().unwrap();
        let name = pdb.metadata.name.clone().unwrap();
        Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pdb)
            .await
            .unwrap_or_else(|e| panic!("{ns}/{name} refused: {e}"));
        let stored = fake
            .get("policy/v1", "PodDisruptionBudget", Some(&ns), &name)
            .unwrap();
        assert!(
            stored["status"]["disruptionsAllowed"].as_i64().unwrap() >= 1,
            "{ns}/{name}: {}",
            stored["status"]
        );
        let app = doc["spec"]["selector"]["matchLabels"]["app"]
            .as_str()
            .unwrap();
        let pod = fake
            .list("v1", "Pod")
            .into_iter()
            .find(|p| {
                p["metadata"]["namespace"] == ns.as_str() && p["metadata"]["labels"]["app"] == app
            })
            .unwrap_or_else(|| panic!("no pod of {ns}/{name}"));
        let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
        Api::<Pod>::namespaced(client.clone(), &ns)
            .evict(&pod_name, &EvictParams::default())
            .await
            .unwrap_or_else(|e| panic!("{ns}/{name}: evicting {pod_name}: {e}"));
    }
}

/// A cluster as `forewarn deploy` leaves it, with a worker node and a pod of a controller on it
/// (what the preflight builds its writes from), and a kubeconfig for it in a folder of its own.
async fn a_cluster_to_check() -> (KubeFake, tempfile::TempDir, std::path::PathBuf) {
    use forewarn::domain::fixtures::{node_object, pod_object};
    let fake = forewarn_tests::cluster::deployed().await;
    fake.insert(
        node_object("ip-10-0-1-11.ec2.internal", "i-0a1b2c3d4e5f60001")
            .kubelet()
            .ready()
            .build(),
    );
    fake.insert(pod_object(
        "shop",
        "web-1",
        "ip-10-0-1-11.ec2.internal",
        "web",
        "ReplicaSet",
    ));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(&fake.url(), dir.path());
    (fake, dir, kubeconfig)
}

/// `forewarn check --kube` with `kubeconfig`, off the runtime (which serves the fake).
fn check(kubeconfig: std::path::PathBuf) -> tokio::task::JoinHandle<Output> {
    tokio::task::spawn_blocking(move || {
        let state = tempfile::tempdir().unwrap();
        forewarn(&kubeconfig, state.path(), &["check", "--kube"])
    })
}

/// `forewarn check --kube` on a cluster as `forewarn deploy` leaves it: every write of both
/// groups admitted (exit 0); once a Kyverno-like webhook refuses pods in namespace forewarn, the
/// placeholder's line names it with its message, and the exit code is 2 (surge is on by
/// default, so the configuration uses it).
#[tokio::test(flavor = "multi_thread")]
async fn check_proves_every_write_and_names_what_refuses_one() {
    let (fake, _dir, kubeconfig) = a_cluster_to_check().await;
    let out = check(kubeconfig.clone()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "cordon",
        "evict",
        "placeholder",
        "pod-event",
        "node-event",
        "way-back",
    ] {
        assert!(
            text.contains(&format!("ok      {line}")) && text.contains("as forewarn-handler"),
            "{line}: {text}"
        );
    }
    assert!(
        text.contains("expander") && text.contains("as forewarn-sweeper"),
        "{text}"
    );
    // Nothing was stored: the placeholder's dry run left no pod in namespace forewarn.
    assert!(
        fake.list("v1", "Pod")
            .iter()
            .all(|p| p["metadata"]["namespace"] != "forewarn")
    );
    fake.add_validating_webhook(
        kube_fake::Webhook::deny("validate.kyverno.svc-fail", "label 'team' is required")
            .namespace("forewarn"),
    );
    let out = check(kubeconfig).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("REFUSED placeholder")
            && text.contains("admission webhook \"validate.kyverno.svc-fail\"")
            && text.contains("label 'team' is required"),
        "{text}"
    );
}

/// Issue 57, item 5: a preflight that could not check must not pass. The API server refuses
/// the node and pod lists (an RBAC edit that dropped them): every write that needs a node or a
/// pod is refused as much, said on its line, and the exit code is 2. The API server answering
/// no list at all (500), on a cluster without the priority expander's ConfigMap: nothing could
/// be checked, the command says so and fails (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn check_fails_when_it_could_not_check() {
    use kube_fake::{Fault, Method};
    let (fake, _dir, kubeconfig) = a_cluster_to_check().await;
    let refuse = |status: u16| {
        for path in ["/api/v1/nodes", "/api/v1/pods"] {
            fake.inject(
                Fault::new(status)
                    .method(Method::GET)
                    .path_contains(path)
                    .times(1000),
            );
        }
    };
    refuse(403);
    let out = check(kubeconfig.clone()).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(2), "{text}");
    for line in [
        "cordon",
        "evict",
        "placeholder",
        "pod-event",
        "node-event",
        "way-back",
    ] {
        assert!(text.contains(&format!("REFUSED {line}")), "{line}: {text}");
    }
    assert!(text.contains("listing the nodes is refused"), "{text}");

    // Only the pods' list refused: the node's writes are proved, the pods' refused.
    let (fake2, _dir2, kubeconfig2) = a_cluster_to_check().await;
    fake2.inject(
        Fault::new(403)
            .method(Method::GET)
            .path_contains("/api/v1/pods")
            .times(1000),
    );
    let out = check(kubeconfig2).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("ok      cordon"), "{text}");
    assert!(
        text.contains("REFUSED evict") && text.contains("listing the pods of node"),
        "{text}"
    );

    // No list answered at all, and no expander ConfigMap: nothing checked, exit 1.
    fake.clear_faults();
    refuse(500);
    let out = check(kubeconfig).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(!text.contains("ok      "), "{text}");
    assert!(err.contains("nothing could be checked"), "{err}");
}
