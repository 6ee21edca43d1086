use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::domain::budget::{Budget, IntOrPercent, Operator, Requirement, Selector};
use crate::domain::config::Config;
use crate::domain::pool::{PoolKey, PoolRecord};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn spot_node(name: &str, itype: &str, zone: &str) -> AuditNode {
    AuditNode::from_labels(
        name,
        &labels(&[
            ("karpenter.sh/capacity-type", "spot"),
            ("node.kubernetes.io/instance-type", itype),
            ("topology.kubernetes.io/zone", zone),
        ]),
    )
}

fn od_node(name: &str) -> AuditNode {
    AuditNode::from_labels(
        name,
        &labels(&[
            ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
            ("node.kubernetes.io/instance-type", "m5.large"),
            ("topology.kubernetes.io/zone", "us-east-1a"),
        ]),
    )
}

/// Nodes: a1, a2 (spot m5.large 1a), b1 (spot c5.xlarge 1b), a3 (spot c5.xlarge 1a),
/// od (on-demand).
fn nodes() -> BTreeMap<String, AuditNode> {
    [
        spot_node("a1", "m5.large", "us-east-1a"),
        spot_node("a2", "m5.large", "us-east-1a"),
        spot_node("a3", "c5.xlarge", "us-east-1a"),
        spot_node("b1", "c5.xlarge", "us-east-1b"),
        od_node("od"),
    ]
    .into_iter()
    .map(|n| (n.name.clone(), n))
    .collect()
}

fn pod(name: &str, node: &str) -> AuditPod {
    AuditPod {
        name: name.into(),
        labels: labels(&[("app", "web")]),
        node: Some(node.into()),
        ..AuditPod::default()
    }
}

fn deployment(nodes: &[&str]) -> Workload {
    Workload {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: "web".into(),
        replicas: nodes.len() as i32,
        selector: Some(Selector {
            match_labels: labels(&[("app", "web")]),
            ..Selector::default()
        }),
        pods: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| pod(&format!("web-{i}"), n))
            .collect(),
    }
}

fn budget(name: &str, ma: Option<IntOrPercent>, mu: Option<IntOrPercent>) -> Budget {
    Budget {
        namespace: "shop".into(),
        name: name.into(),
        selector: Some(Selector {
            match_labels: labels(&[("app", "web")]),
            ..Selector::default()
        }),
        min_available: ma,
        max_unavailable: mu,
    }
}

fn view(w: Workload, budgets: Vec<Budget>) -> ClusterView {
    ClusterView {
        workloads: vec![w],
        budgets,
        nodes: nodes(),
        priority_classes: [("system-cluster-critical".to_string(), 2_000_000_000)].into(),
    }
}

fn ok_budget() -> Vec<Budget> {
    vec![budget("web", None, Some(IntOrPercent::Int(1)))]
}

fn codes(v: &ClusterView, hot: &BTreeMap<PoolKey, &PoolRecord>) -> Vec<&'static str> {
    audit(v, &Config::default(), hot)
        .findings
        .iter()
        .map(|f| f.code.as_str())
        .collect()
}

#[test]
fn spot_labels() {
    let cases: &[(&[(&str, &str)], bool)] = &[
        (&[("eks.amazonaws.com/capacityType", "SPOT")], true),
        (&[("eks.amazonaws.com/capacityType", "ON_DEMAND")], false),
        (&[("karpenter.sh/capacity-type", "spot")], true),
        (&[("karpenter.sh/capacity-type", "on-demand")], false),
        (&[("node.kubernetes.io/lifecycle", "spot")], true),
        (&[("node.kubernetes.io/lifecycle", "normal")], false),
        (&[("lifecycle", "Ec2Spot")], true),
        (&[("lifecycle", "OnDemand")], false),
        (&[], false),
    ];
    for (l, spot) in cases {
        assert_eq!(
            AuditNode::from_labels("n", &labels(l)).is_spot(),
            *spot,
            "{l:?}"
        );
    }
    let n = spot_node("n", "m5.large", "us-east-1a");
    assert_eq!(n.pool().unwrap().to_string(), "spot#m5.large#us-east-1a");
    let beta = AuditNode::from_labels(
        "n",
        &labels(&[
            ("beta.kubernetes.io/instance-type", "m5.large"),
            ("failure-domain.beta.kubernetes.io/zone", "us-east-1b"),
        ]),
    );
    assert_eq!(
        beta.pool().unwrap().to_string(),
        "on-demand#m5.large#us-east-1b"
    );
}

#[test]
fn budget_arithmetic() {
    use IntOrPercent::{Int, Percent};
    // (minAvailable, maxUnavailable, expected, allowed)
    let cases = [
        (None, Some(Int(0)), 3, 0),
        (None, Some(Int(1)), 3, 1),
        (None, Some(Percent(0)), 3, 0),
        (None, Some(Percent(10)), 3, 1), // rounds up
        (Some(Int(3)), None, 3, 0),
        (Some(Int(4)), None, 3, 0),
        (Some(Int(2)), None, 3, 1),
        (Some(Percent(100)), None, 3, 0),
        (Some(Percent(50)), None, 3, 1), // 2 desired
        (Some(Percent(50)), None, 1, 0),
        (Some(Int(0)), None, 1, 1),
        (None, None, 2, 2),
        (None, Some(Int(1)), 0, 0),
        (Some(Int(1)), Some(Int(0)), 3, 0), // maxUnavailable wins
    ];
    for (ma, mu, expected, allowed) in cases {
        let b = budget("b", ma, mu);
        assert_eq!(
            b.allowed_when_healthy(expected),
            allowed,
            "{ma:?} {mu:?} {expected}"
        );
    }
    assert_eq!(IntOrPercent::parse("25%"), Ok(Percent(25)));
    assert_eq!(IntOrPercent::parse("2"), Ok(Int(2)));
    assert_eq!(
        IntOrPercent::parse("x%").unwrap_err().to_string(),
        "`x%` is neither an integer nor a percentage"
    );
    assert!(IntOrPercent::parse("-5%").is_err());
}

#[test]
fn selectors() {
    let s = Selector {
        match_labels: labels(&[("app", "web")]),
        match_expressions: vec![
            Requirement {
                key: "tier".into(),
                operator: Operator::In,
                values: vec!["a".into(), "b".into()],
            },
            Requirement {
                key: "canary".into(),
                operator: Operator::DoesNotExist,
                values: vec![],
            },
        ],
    };
    assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
    assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
    assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")])));
    assert!(!s.matches(&labels(&[("tier", "a")])));
    let b = Budget {
        selector: Some(Selector::default()),
        ..budget("empty", None, Some(IntOrPercent::Int(1)))
    };
    assert!(
        !b.selects("shop", &labels(&[("app", "web")])),
        "empty selects nothing"
    );
    assert!(!budget("x", None, None).selects("other", &labels(&[("app", "web")])));
}

/// A small state, named, and the codes of the rules it should break.
type Case = (&'static str, ClusterView, Vec<&'static str>);

#[test]
fn each_rule_on_small_states() {
    let none = BTreeMap::new();
    for (name, v, want) in budget_cases().into_iter().chain(placement_cases()) {
        assert_eq!(codes(&v, &none), want, "{name}");
    }
}

/// States of a deployment and its budgets.
fn budget_cases() -> Vec<Case> {
    use IntOrPercent::{Int, Percent};
    let overlap = vec![
        budget("web", None, Some(Int(1))),
        budget("all", Some(Int(1)), None),
    ];
    vec![
        (
            "spread and budgeted",
            view(deployment(&["a1", "b1"]), ok_budget()),
            vec![],
        ),
        ("not on spot", view(deployment(&["od"]), vec![]), vec![]),
        ("pending pods", view(deployment(&[]), vec![]), vec![]),
        (
            "no budget",
            view(deployment(&["a1", "b1"]), vec![]),
            vec!["no-pdb"],
        ),
        (
            "maxUnavailable 0",
            view(
                deployment(&["a1", "b1"]),
                vec![budget("web", None, Some(Int(0)))],
            ),
            vec!["pdb-blocks-eviction"],
        ),
        (
            "minAvailable = replicas",
            view(
                deployment(&["a1", "b1"]),
                vec![budget("web", Some(Int(2)), None)],
            ),
            vec!["pdb-blocks-eviction"],
        ),
        (
            "minAvailable 100%",
            view(
                deployment(&["a1", "b1"]),
                vec![budget("web", Some(Percent(100)), None)],
            ),
            vec!["pdb-blocks-eviction"],
        ),
        (
            "minAvailable below replicas",
            view(
                deployment(&["a1", "b1"]),
                vec![budget("web", Some(Int(1)), None)],
            ),
            vec![],
        ),
        (
            "two budgets",
            view(deployment(&["a1", "b1"]), overlap),
            vec!["pdb-overlap"],
        ),
    ]
}

/// States of where a workload's pods run and what they hold.
fn placement_cases() -> Vec<Case> {
    let with_grace = |g: i64| {
        let mut w = deployment(&["a1", "b1"]);
        w.pods[1].grace_seconds = Some(g);
        w
    };
    let with_empty_dir = {
        let mut w = deployment(&["a1", "b1"]);
        w.pods[0].empty_dirs = vec!["cache".into()];
        w
    };
    let critical = {
        let mut w = deployment(&["a1", "b1"]);
        w.pods[0].priority_class = Some("system-cluster-critical".into());
        w
    };
    let critical_by_value = {
        let mut w = deployment(&["a1", "b1"]);
        w.pods[0].priority = Some(2_000_001_000);
        w
    };
    let bare = Workload {
        kind: WorkloadKind::Pod,
        replicas: 1,
        selector: None,
        ..deployment(&["a1"])
    };
    vec![
        (
            "one replica",
            view(deployment(&["a1"]), ok_budget()),
            vec!["single-replica"],
        ),
        (
            "one node",
            view(deployment(&["a1", "a1"]), ok_budget()),
            vec!["one-node"],
        ),
        (
            "one pool",
            view(deployment(&["a1", "a2"]), ok_budget()),
            vec!["one-pool"],
        ),
        (
            "one zone",
            view(deployment(&["a1", "a3"]), ok_budget()),
            vec!["one-zone"],
        ),
        (
            "one spot pool and on-demand",
            view(deployment(&["a1", "od"]), ok_budget()),
            vec!["one-zone"],
        ),
        ("grace 105", view(with_grace(105), ok_budget()), vec![]),
        (
            "grace 106",
            view(with_grace(106), ok_budget()),
            vec!["grace-too-long"],
        ),
        (
            "emptyDir",
            view(with_empty_dir, ok_budget()),
            vec!["local-storage"],
        ),
        (
            "critical class",
            view(critical, ok_budget()),
            vec!["critical-on-spot"],
        ),
        (
            "critical value",
            view(critical_by_value, ok_budget()),
            vec!["critical-on-spot"],
        ),
        ("bare pod", view(bare, vec![]), vec!["no-controller"]),
    ]
}

#[test]
fn hot_pools_from_the_pool_table() {
    let now: DateTime<Utc> = "2026-11-20T12:00:00Z".parse().unwrap();
    let record = |pool: &str, n: u64, age_h: i64| PoolRecord {
        pool: pool.parse().unwrap(),
        region: None,
        unavailable_until: None,
        expires_at: now + Duration::days(30),
        counters: [("interruptions".to_string(), n)].into(),
        first_seen: now - Duration::hours(age_h),
        last_seen: now - Duration::hours(age_h),
        last_event_id: "e".into(),
        last_reason: "r".into(),
        last_instance_id: "i".into(),
    };
    let records = vec![
        record("spot#c5.xlarge#us-east-1b", 2, 1),
        record("spot#m5.large#us-east-1a", 1, 24 * 30),
    ];
    let hot = hot_pools(&records, now, Duration::days(7));
    assert_eq!(hot.len(), 1, "the old one is not recent");
    let v = view(deployment(&["a1", "b1"]), ok_budget());
    let report = audit(&v, &Config::default(), &hot);
    assert_eq!(report.findings.len(), 1);
    assert_eq!(report.findings[0].code, Code::HotPool);
    assert_eq!(report.findings[0].level, Level::Warning);
    assert!(
        report.findings[0]
            .message
            .contains("1 replica in spot#c5.xlarge#us-east-1b (2 interruptions"),
        "{}",
        report.findings[0].message
    );
}

#[test]
fn findings_are_ordered_and_summarised() {
    let mut w = deployment(&["a1", "a1", "od"]);
    w.pods[0].empty_dirs = vec!["tmp".into()];
    let mut v = view(w, vec![]);
    v.workloads.push(Workload {
        name: "solo".into(),
        selector: None,
        ..deployment(&["od"])
    });
    let report = audit(&v, &Config::default(), &BTreeMap::new());
    let got: Vec<(&str, Level)> = report
        .findings
        .iter()
        .map(|f| (f.code.as_str(), f.level))
        .collect();
    assert_eq!(
        got,
        vec![
            ("no-pdb", Level::Warning),
            ("one-zone", Level::Info),
            ("local-storage", Level::Info)
        ]
    );
    assert_eq!(report.findings[0].workload, "shop/Deployment/web");
    let s = &report.summary;
    assert_eq!((s.workloads, s.checked), (2, 1));
    assert_eq!(
        s.findings,
        Counts {
            error: 0,
            warning: 1,
            info: 2
        }
    );
    // Both spot replicas share a pool, the on-demand one survives it.
    assert_eq!((s.spot_replicas, s.surviving_replicas), (2, 2));
    assert_eq!(report.worst(), Some(Level::Warning));

    let v = view(deployment(&["a1", "a2"]), ok_budget());
    let s = audit(&v, &Config::default(), &BTreeMap::new()).summary;
    assert_eq!((s.spot_replicas, s.surviving_replicas), (2, 0));
    assert_eq!(s.survival(), 0.0);
    assert_eq!(Summary::default().survival(), 1.0);
}

#[test]
fn suggested_budgets_and_their_yaml() {
    let mut v = view(
        deployment(&["a1", "b1", "a2", "a3", "b1", "a1", "a2", "a3"]),
        vec![],
    );
    v.budgets.push(Budget {
        name: "web".into(),
        selector: Some(Selector {
            match_labels: labels(&[("app", "other")]),
            ..Selector::default()
        }),
        ..budget("web", None, None)
    });
    v.workloads[0]
        .selector
        .as_mut()
        .unwrap()
        .match_expressions
        .push(Requirement {
            key: "tier".into(),
            operator: Operator::NotIn,
            values: vec!["a\"b".into()],
        });
    v.workloads.push(Workload {
        name: "od-only".into(),
        ..deployment(&["od"])
    });
    let budgets = suggested_budgets(&v);
    assert_eq!(budgets.len(), 1);
    let b = &budgets[0];
    assert_eq!(b.name, "web-pdb", "the name `web` is taken");
    assert_eq!(b.max_unavailable, 2);
    let yaml = budget_yaml(b);
    assert_eq!(
        yaml,
        "# shop/Deployment/web: 8 replicas, no PodDisruptionBudget selects them\n\
         apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web-pdb\n\
         \x20 namespace: shop\n  labels:\n    app.kubernetes.io/managed-by: forewarn\n\
         spec:\n  maxUnavailable: 2\n  selector:\n    matchLabels:\n      app: web\n\
         \x20   matchExpressions:\n    - key: tier\n      operator: NotIn\n      values:\n\
         \x20     - a\"b\n"
    );
    // It reads back as the budget it describes, whatever the strings hold.
    let odd = SuggestedBudget {
        name: "x\ny\u{1}: 'z'".into(),
        namespace: "true".into(),
        ..b.clone()
    };
    let doc: serde_json::Value = serde_saphyr::from_str(&budget_yaml(&odd)).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": "x\ny\u{1}: 'z'",
                "namespace": "true",
                "labels": {"app.kubernetes.io/managed-by": "forewarn"},
            },
            "spec": {
                "maxUnavailable": 2,
                "selector": {
                    "matchLabels": {"app": "web"},
                    "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a\"b"]}],
                },
            },
        })
    );
    assert_eq!(suggested_max_unavailable(1), 1);
    assert_eq!(suggested_max_unavailable(3), 1);
    assert!(budgets_yaml(&budgets).starts_with("---\n# shop"));
    // Budgeted or bare: nothing to suggest.
    assert!(suggested_budgets(&view(deployment(&["a1"]), ok_budget())).is_empty());
    let bare = Workload {
        kind: WorkloadKind::Pod,
        selector: None,
        ..deployment(&["a1"])
    };
    assert!(suggested_budgets(&view(bare, vec![])).is_empty());
}

/// A GPU pod of `shop/Deployment/web` on `node`: one container `trainer` asking 8 GPUs, with a
/// `preStop` hook when `hook`, and a container `log` asking none.
fn gpu_pod(name: &str, node: &str, hook: bool) -> AuditPod {
    AuditPod {
        containers: vec![
            AuditContainer {
                name: "trainer".into(),
                extended: [("nvidia.com/gpu".to_string(), 8)].into(),
                pre_stop: hook,
            },
            AuditContainer {
                name: "log".into(),
                pre_stop: true,
                ..AuditContainer::default()
            },
        ],
        ..pod(name, node)
    }
}

/// The deployment `web` with a GPU pod on each of `nodes` (on-demand `od` or nodes the view
/// does not know: not spot), each with a hook when `hook`.
fn gpu_deployment(nodes: &[&str], hook: bool) -> Workload {
    let mut w = deployment(nodes);
    for (i, n) in nodes.iter().enumerate() {
        w.pods[i] = gpu_pod(&format!("web-{i}"), n, hook);
    }
    w
}

/// The Capacity Block finding of a view (its code and message).
fn block_finding(v: &ClusterView) -> (&'static str, String) {
    let report = audit(v, &Config::default(), &BTreeMap::new());
    let f: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.code.as_str().starts_with("block-"))
        .collect();
    assert_eq!(
        f.len(),
        1,
        "one finding per GPU workload: {:?}",
        report.findings
    );
    (f[0].code.as_str(), f[0].message.clone())
}

#[test]
fn a_gpu_workload_that_leaves_a_capacity_block_in_time_is_ready() {
    use IntOrPercent::Int;
    let mut w = gpu_deployment(&["g1", "g2"], true);
    w.pods[1].grace_seconds = Some(300);
    let v = view(w, vec![budget("web", None, Some(Int(1)))]);
    let (code, message) = block_finding(&v);
    assert_eq!(code, "block-ready");
    assert_eq!(
        message,
        "shop/Deployment/web (2 GPU pods, 16 nvidia.com/gpu) has 585 s to leave a Capacity \
         Block (its instances terminate 600 s after the expiration warning; forewarn's margin \
         is 15 s): budget fits: PodDisruptionBudget shop/web (maxUnavailable: 1, 2 pods \
         expected) lets the 1 pod on node g1 go at once; grace fits: 300 s, done 300 s in; \
         checkpoint hook: preStop on its GPU containers"
    );
    let report = audit(&v, &Config::default(), &BTreeMap::new());
    assert_eq!(report.findings[0].level, Level::Info);
    assert_eq!(report.findings[0].workload, "shop/Deployment/web");
    assert_eq!(
        (report.summary.checked, report.summary.findings.info),
        (0, 1),
        "checked whatever its capacity type; not counted as on spot"
    );
    // A workload asking no accelerator gets no such finding.
    assert!(
        audit(
            &view(deployment(&["od"]), vec![]),
            &Config::default(),
            &BTreeMap::new()
        )
        .findings
        .is_empty()
    );
}

#[test]
fn a_budget_that_stalls_a_capacity_block_drain_is_an_error() {
    use IntOrPercent::{Int, Percent};
    let stalled =
        |budgets: Vec<Budget>| block_finding(&view(gpu_deployment(&["g1"], true), budgets));
    let (code, message) = stalled(vec![budget("web", None, Some(Int(0)))]);
    assert_eq!(code, "block-drain-stalls");
    assert!(
        message.contains(
            "budget does not fit: PodDisruptionBudget shop/web (maxUnavailable: 0, 1 pod \
             expected) allows no eviction: the 1 pod on node g1 cannot leave before the \
             instance terminates"
        ),
        "{message}"
    );
    let (code, _) = stalled(vec![budget("web", Some(Percent(100)), None)]);
    assert_eq!(code, "block-drain-stalls");
    let (code, message) = stalled(vec![
        budget("web", None, Some(Int(1))),
        budget("all", Some(Int(0)), None),
    ]);
    assert_eq!(code, "block-drain-stalls");
    assert!(
        message.contains(
            "several PodDisruptionBudgets (all, web) select one pod: the eviction API answers 500"
        ),
        "{message}"
    );
    // Its level is an error, as a budget that blocks a spot drain.
    let report = audit(
        &view(
            gpu_deployment(&["g1"], true),
            vec![budget("web", None, Some(Int(0)))],
        ),
        &Config::default(),
        &BTreeMap::new(),
    );
    assert_eq!(report.findings[0].level, Level::Error);
}

#[test]
fn a_capacity_block_drain_counts_the_rounds_of_the_busiest_node() {
    use IntOrPercent::Int;
    // n pods on node g1 (one GPU pod each), a budget letting one go at a time: n rounds of
    // 15 s, the last starting 15 × (n − 1) s in, which must be within 585 s with its grace.
    let on_one_node = |n: usize, grace: i64| {
        let nodes = vec!["g1"; n];
        let mut w = gpu_deployment(&nodes, true);
        for p in &mut w.pods {
            p.grace_seconds = Some(grace);
        }
        block_finding(&view(w, vec![budget("web", None, Some(Int(1)))]))
    };
    let (code, message) = on_one_node(40, 0);
    assert_eq!(code, "block-ready", "{message}");
    assert!(
        message.contains(
            "lets the 40 pods on node g1 go 1 at a time: 40 rounds of 15 s, the last starting \
             585 s in; grace fits: 0 s after the last round's start, done 585 s in"
        ),
        "{message}"
    );
    let (code, message) = on_one_node(41, 0);
    assert_eq!(code, "block-drain-stalls");
    assert!(
        message.contains("41 rounds of 15 s, the last starting 600 s in, past the 585 s"),
        "{message}"
    );
    let (code, message) = on_one_node(8, 500);
    assert_eq!(code, "block-grace-long");
    assert!(
        message.contains(
            "grace does not fit: 500 s after the last round's start, done 605 s in, past the \
             585 s: killed mid-shutdown"
        ),
        "{message}"
    );
    // Two at a time: 8 pods in 4 rounds.
    let w = gpu_deployment(&["g1"; 8], true);
    let (_, message) = block_finding(&view(w, vec![budget("web", None, Some(Int(2)))]));
    assert!(message.contains("go 2 at a time: 4 rounds of 15 s, the last starting 45 s in"));
}

#[test]
fn a_long_grace_or_no_checkpoint_hook_is_a_warning() {
    let (code, message) = {
        let mut w = gpu_deployment(&["g1", "g2"], true);
        w.pods[0].grace_seconds = Some(900);
        block_finding(&view(w, vec![]))
    };
    assert_eq!(code, "block-grace-long");
    assert!(
        message.contains(
            "budget fits: no PodDisruptionBudget selects its pods: the 1 pod on node g1 may go \
             at once; grace does not fit: 900 s, done 900 s in, past the 585 s: killed \
             mid-shutdown"
        ),
        "{message}"
    );
    // A hook on the container without GPUs is not a checkpoint of the GPUs' work.
    let (code, message) = block_finding(&view(gpu_deployment(&["g1", "g1"], false), vec![]));
    assert_eq!(code, "block-no-checkpoint");
    assert!(
        message.ends_with(
            "no checkpoint hook: no preStop on its GPU containers (trainer), so each pod gets \
             only SIGTERM and its 30 s grace"
        ),
        "{message}"
    );
    assert!(
        message.contains("the 2 pods on node g1 may go at once"),
        "{message}"
    );
    let report = audit(
        &view(gpu_deployment(&["g1"], false), vec![]),
        &Config::default(),
        &BTreeMap::new(),
    );
    assert_eq!(report.findings[0].level, Level::Warning);
    // Neuron devices count as accelerators; pending pods are counted one a node.
    let mut w = gpu_deployment(&["g1"], true);
    w.pods[0].node = None;
    w.pods[0].containers[0].extended = [("aws.amazon.com/neuron".to_string(), 2)].into();
    let (code, message) = block_finding(&view(w, vec![]));
    assert_eq!(code, "block-ready");
    assert!(
        message.starts_with("shop/Deployment/web (1 GPU pod, 2 aws.amazon.com/neuron)")
            && message.contains("its pods (none on a node yet) may go at once"),
        "{message}"
    );
}

#[test]
fn a_gpu_workload_on_spot_gets_the_spot_findings_and_the_block_finding() {
    let w = gpu_deployment(&["a1", "b1"], false);
    let v = view(w, ok_budget());
    assert_eq!(
        codes(&v, &BTreeMap::new()),
        vec!["block-no-checkpoint"],
        "spread and budgeted on spot; no hook"
    );
    let w = gpu_deployment(&["a1"], true);
    assert_eq!(
        codes(&view(w, vec![]), &BTreeMap::new()),
        vec!["single-replica", "no-pdb", "block-ready"],
        "most severe first"
    );
}
