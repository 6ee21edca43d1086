//! RBAC: `infra/k8s/`'s roles grant each function's group exactly what the adapter uses, checked
//! against every request the handler's actions and the sweeper's runs send.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use forewarn::adapters::upkeep::live_cluster;
use forewarn::domain::event::EventKind;
use forewarn::domain::fixtures::{self, node_object, pod_object};
use forewarn::ports::NodeDirectory;
use kube_fake::{KubeFake, RecordedRequest};
use serde_json::{Value, json};

use crate::delete::{machine, nodeclaim};
use crate::policy::policy_configmap;
use crate::support::{
    Cluster, Fleet, ID, Instances, Leaving, NODE, World, event, instance, node, seed_pods,
};
use crate::surge::{surge_passes, surging};

/// What an API request needs: (API group, resource, verb, namespace, the object's name when the
/// path has one). As a grant: a `None` namespace is every namespace (a ClusterRole bound by a
/// ClusterRoleBinding), a `None` name every object.
type Need = (String, String, String, Option<String>, Option<String>);

const HANDLER_GROUP: &str = "forewarn-handler";
const SWEEPER_GROUP: &str = "forewarn-sweeper";

/// What an API request needs.
fn rbac_need(r: &RecordedRequest) -> Need {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => panic!("not a resource path: {}", r.path),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        other => (None, other),
    };
    let (resource, name) = match rest {
        [resource] => (resource.to_string(), None),
        [resource, name] => (resource.to_string(), Some(name.to_string())),
        [resource, name, sub] => (format!("{resource}/{sub}"), Some(name.to_string())),
        _ => panic!("not a resource path: {}", r.path),
    };
    let verb = match (r.method.as_str(), name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        (m, _) => panic!("unexpected {m} {}", r.path),
    };
    (group, resource, verb.to_string(), namespace, name)
}

/// Whether `grant` allows the request needing `need`.
fn grants(grant: &Need, need: &Need) -> bool {
    grant.0 == need.0
        && grant.1 == need.1
        && grant.2 == need.2
        && (grant.3.is_none() || grant.3 == need.3)
        && (grant.4.is_none() || grant.4 == need.4)
}

/// What infra/k8s/rbac.yaml grants each group: every binding's role, resolved (a RoleBinding's
/// grants are limited to its namespace). Every subject is a group, every role is bound, and no
/// rule has a wildcard.
fn rbac_granted() -> BTreeMap<String, BTreeSet<Need>> {
    // rbac.yaml, and placeholders.yaml's grant, applied with FOREWARN_SURGE (the scenarios
    // below surge).
    let mut docs: Vec<Value> = Vec::new();
    for file in ["rbac.yaml", "placeholders.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../infra/k8s")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        docs.extend(serde_saphyr::from_multiple::<Value>(&text).unwrap());
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .collect();
    let mut bound = BTreeSet::new();
    let mut granted: BTreeMap<String, BTreeSet<Need>> = BTreeMap::new();
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let namespace = binding["metadata"]["namespace"]
            .as_str()
            .map(str::to_string);
        assert_eq!(
            namespace.is_some(),
            binding["kind"] == "RoleBinding",
            "{binding}"
        );
        let role_ref = &binding["roleRef"];
        let role = roles
            .iter()
            .find(|r| {
                r["kind"] == role_ref["kind"]
                    && r["metadata"]["name"] == role_ref["name"]
                    && (r["kind"] == "ClusterRole"
                        || r["metadata"]["namespace"].as_str() == namespace.as_deref())
            })
            .unwrap_or_else(|| panic!("the role of {binding}"));
        bound.insert((
            role["kind"].to_string(),
            role["metadata"]["name"].to_string(),
        ));
        for subject in binding["subjects"].as_array().unwrap() {
            assert_eq!(subject["kind"], "Group", "only groups are bound: {subject}");
            let group = granted
                .entry(subject["name"].as_str().unwrap().to_string())
                .or_default();
            for rule in role["rules"].as_array().unwrap() {
                let names: Vec<Option<String>> = match rule.get("resourceNames") {
                    Some(n) => strings(n).into_iter().map(Some).collect(),
                    None => vec![None],
                };
                for g in strings(&rule["apiGroups"]) {
                    for res in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            assert!(
                                g != "*" && res != "*" && verb != "*",
                                "a wildcard in {rule}"
                            );
                            for name in &names {
                                group.insert((
                                    g.clone(),
                                    res.clone(),
                                    verb.clone(),
                                    namespace.clone(),
                                    name.clone(),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(bound.len(), roles.len(), "every role is bound");
    granted
}

/// `used` (the requests of one function's code paths) is exactly what `group` is granted: each
/// request granted, each grant used.
fn assert_exactly(group: &str, used: &BTreeSet<Need>, granted: &BTreeMap<String, BTreeSet<Need>>) {
    let granted = granted
        .get(group)
        .unwrap_or_else(|| panic!("rbac.yaml binds nothing to {group}"));
    let missing: Vec<_> = used
        .iter()
        .filter(|u| !granted.iter().any(|g| grants(g, u)))
        .collect();
    assert!(
        missing.is_empty(),
        "{group}: used but not granted: {missing:?}"
    );
    let unused: Vec<_> = granted
        .iter()
        .filter(|g| !used.iter().any(|u| grants(g, u)))
        .collect();
    assert!(
        unused.is_empty(),
        "{group}: granted but never used: {unused:?}"
    );
}

/// No node groups: the priorities are the base's.
struct NoGroups;

#[async_trait]
impl forewarn::app::priorities::NodeGroupSource for NoGroups {
    async fn describe(
        &self,
    ) -> Result<Vec<forewarn::domain::priorities::AsgDescription>, forewarn::ports::PortError> {
        Ok(Vec::new())
    }
}

/// The expander ConfigMap as `kubectl create -f infra/k8s/priority-expander.yaml` makes it.
fn expander_manifest() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../infra/k8s/priority-expander.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every request a sweep and a priority update send, against a cluster where each kind of
/// finding occurs: a spot instance stopped by an interruption (cordon and drain), and nodes of
/// instances EC2 no longer knows, plain, Karpenter's and Cluster API's (deletes). The priority
/// expander is updated from the manifest's ConfigMap, and its absence is reported, not mended.
async fn sweeper_requests() -> Vec<RecordedRequest> {
    use forewarn::app::priorities::{Change, PrioritySettings};
    use forewarn::app::sweeper::{SweepPriorities, Sweeper};
    use forewarn::domain::findings::SPOT_TERMINATION_REASON;
    use forewarn::domain::pool::CapacityType;

    let mut w = World::new().await;
    // Spot drains surge (FOREWARN_SURGE): placeholders are created, listed and deleted.
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    // Stopped by a spot interruption: drained.
    w.fake.insert(node(NODE, ID));
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let stopping = fixtures::instance(ID)
        .typed("m5.large", "us-east-1a")
        .dns(NODE)
        .capacity(CapacityType::Spot)
        .state("stopping")
        .state_reason(Some(SPOT_TERMINATION_REASON))
        .launched(Utc::now() - chrono::Duration::hours(1))
        .cluster("demo")
        .build();
    let plain = seed_nodes_gone_from_ec2(&w);
    w.fake
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "forewarn-priority-base", "namespace": "kube-system"},
        "data": {"priorities": "10: ['.*']"}}));

    let dir = tempfile::tempdir().unwrap();
    let handler = w.handler(dir.path());
    // Records signed with the store's keys, as the wiring builds it.
    let executor = Arc::new(w.executor().with_keys(handler.store.clone()));
    let sweeper = Sweeper {
        handler: forewarn::app::handler::Handler {
            instances: Arc::new(Instances(BTreeMap::from([(
                ID.to_string(),
                stopping.clone(),
            )]))),
            fleet: Fleet::one(Cluster {
                policies: Some(w.policies()),
                ..live_cluster(None, w.clients.clone(), Some(executor))
            }),
            concurrency: 4,
            ..handler
        },
        leaving: Arc::new(Leaving(vec![stopping])),
        region: Some("us-east-1".into()),
        priorities: Some(SweepPriorities {
            groups: Arc::new(NoGroups),
            settings: PrioritySettings::default(),
        }),
        preflight: Default::default(),
    };
    let sweeper = sweeper.cluster(None).await.unwrap();
    let reports = sweeper.sweep(None).await.unwrap();
    // The way back reads every node (nothing of forewarn's has lost its reason here).
    assert!(sweeper.way_back().await.unwrap().is_empty());
    // The clean-up lists every placeholder (none is left: the drain deleted its own).
    assert!(sweeper.clean_placeholders().await.unwrap().is_empty());
    // The stopped spot instance is found twice: as a spot interruption (drained first) and as the
    // leaving instance of a node.
    assert_eq!(reports.len(), 5, "{reports:#?}");
    assert!(
        reports
            .iter()
            .all(|r| r.outcome == forewarn::domain::report::Outcome::Acted),
        "{reports:#?}"
    );
    assert!(w.pod("default", "web-1").is_none(), "drained");
    assert!(w.node(&plain).is_none(), "the plain node is deleted");
    assert!(
        w.fake
            .get("karpenter.sh/v1", "NodeClaim", None, "nc-s")
            .is_none()
    );
    assert!(
        w.fake
            .get(
                "cluster.x-k8s.io/v1beta1",
                "Machine",
                Some("default"),
                "m-s"
            )
            .is_none()
    );

    // No expander ConfigMap: reported, not created.
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Missing);
    assert!(
        !w.fake
            .requests()
            .iter()
            .any(|r| r.method.as_str() == "POST" && r.path.contains("configmaps")),
        "the sweeper created a ConfigMap"
    );
    // Created from the manifest: updated from the base priorities, then left alone.
    w.fake.insert(expander_manifest());
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Updated);
    let out = sweeper.update_priorities().await.unwrap().unwrap();
    assert_eq!(out.change, Change::Unchanged);
    w.fake.requests()
}

/// Nodes of instances EC2 no longer knows, for the sweep to delete, each through its owner: a
/// plain node, a Karpenter node (its NodeClaim) and a Cluster API node (its Machine). Answers the
/// plain node's name.
fn seed_nodes_gone_from_ec2(w: &World) -> String {
    // Gone from EC2: deleted, each through its owner.
    let gone = |n: u32| {
        (
            format!("ip-10-0-7-{n}.ec2.internal"),
            format!("i-0a1b2c3d4e5f7000{n}"),
        )
    };
    let (plain, plain_id) = gone(1);
    w.fake.insert(node(&plain, &plain_id));
    let (karpenter, karpenter_id) = gone(2);
    w.fake.insert(
        node_object(&karpenter, &karpenter_id)
            .nodeclaim("nc-s")
            .kubelet()
            .build(),
    );
    w.fake.insert(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "nc-s"},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"providerID": format!("aws:///us-east-1a/{karpenter_id}"), "nodeName": karpenter},
    }));
    let (capi, capi_id) = gone(3);
    let mut n = node(&capi, &capi_id);
    n["metadata"]["annotations"] = json!({"cluster.x-k8s.io/machine": "m-s",
        "cluster.x-k8s.io/cluster-namespace": "default"});
    w.fake.insert(n);
    let mut m = machine("default", "m-s", false);
    m["spec"]["providerID"] = json!(format!("aws:///us-east-1a/{capi_id}"));
    m["status"] = json!({"nodeRef": {"kind": "Node", "name": capi}});
    w.fake.insert(m);
    plain
}

#[tokio::test]
async fn rbac_grants_exactly_what_the_adapter_uses() {
    let granted = rbac_granted();
    assert_eq!(
        granted.keys().map(String::as_str).collect::<Vec<_>>(),
        vec![HANDLER_GROUP, SWEEPER_GROUP],
        "one group per function"
    );
    for (group, needs) in &granted {
        assert!(
            !needs.iter().any(|n| n.1 == "configmaps" && n.2 == "create"),
            "{group} may create ConfigMaps (any name, aws-auth included)"
        );
    }

    // The handler: every action, every lookup path.
    let mut handler = BTreeSet::new();
    let mut collect = |fake: &KubeFake| {
        for r in fake.requests() {
            handler.insert(rbac_need(&r));
        }
    };
    {
        let w = World::plain().await;
        seed_pods(&w);
        let directory = w.clients.clone();
        directory
            .nodes(
                &[instance("i-0a1b2c3d4e5f60002", "ip-10-0-9-9.ec2.internal")],
                Default::default(),
            )
            .await
            .unwrap();
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-1"))
            .await;
        w.run(&plan).await;
        let plan = w.plan(&event(EventKind::StateChange, "ev-rbac-2")).await;
        w.run(&plan).await;
        // The policy ConfigMap, refused: an Event on it.
        w.fake.insert(policy_configmap("forewarn", "rules: [oops"));
        w.policies().policy(&w.clock).await;
        collect(&w.fake);
    }
    {
        let w = World::plain().await;
        let mut n = node(NODE, ID);
        n["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim", "name": "nc-1", "uid": "u"}]);
        w.fake.insert(n);
        w.fake.insert(nodeclaim("nc-1"));
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-3"))
            .await;
        w.run(&plan).await;
        collect(&w.fake);
    }
    {
        let w = World::plain().await;
        let mut n = node(NODE, ID);
        n["metadata"]["annotations"] = json!({"cluster.x-k8s.io/machine": "m-1"});
        w.fake.insert(n);
        w.fake.insert(machine("default", "m-1", false));
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-4"))
            .await;
        w.run(&plan).await;
        collect(&w.fake);
    }
    {
        // Surge: placeholders listed, created, and deleted once their pod is gone.
        let w = surging().await;
        let plan = w
            .plan(&event(EventKind::SpotInterruption, "ev-rbac-5"))
            .await;
        surge_passes(&w, &w.executor(), &plan, |_, _| {}).await;
        collect(&w.fake);
    }
    assert_exactly(HANDLER_GROUP, &handler, &granted);
    assert_pods_only_evicted(HANDLER_GROUP, &handler);

    // The sweeper: a sweep with every kind of finding, and the priority expander.
    let sweeper: BTreeSet<Need> = sweeper_requests().await.iter().map(rbac_need).collect();
    assert_exactly(SWEEPER_GROUP, &sweeper, &granted);
    assert_pods_only_evicted(SWEEPER_GROUP, &sweeper);
}

/// A pod of the cluster's is only ever evicted (`pods/eviction`, so Kubernetes sets its
/// `DisruptionTarget` condition and its budgets are honoured), never deleted, patched or updated:
/// the only pods forewarn creates or deletes are its own placeholders, in its namespace (and
/// the scenarios did delete some, so the check is not empty).
fn assert_pods_only_evicted(group: &str, used: &BTreeSet<Need>) {
    let placeholders = Some(forewarn::domain::surge::NAMESPACE.to_string());
    let writes: Vec<&Need> = used
        .iter()
        .filter(|n| n.0.is_empty() && n.1 == "pods" && n.2 != "list")
        .collect();
    assert!(
        writes.iter().all(|n| n.3 == placeholders),
        "{group}: pods written outside forewarn's namespace: {writes:?}"
    );
    assert!(
        writes.iter().any(|n| n.2 == "delete"),
        "{group}: no placeholder deleted: {writes:?}"
    );
    assert!(
        used.iter()
            .any(|n| n.0.is_empty() && n.1 == "pods/eviction" && n.2 == "create"),
        "{group}: no eviction"
    );
}
