//! The admission policies of `infra/k8s/` enforced by the fake (their CEL evaluated) while
//! forewarn's clients impersonate its groups: the placeholders forewarn makes and its node
//! writes are admitted, anything else its groups could send is denied; and a placeholder never
//! lands on another node forewarn cordoned.

use std::collections::BTreeMap;
use std::time::Duration;

use forewarn::adapters::kube::ClusterClient;
use forewarn::app::upkeep::ClusterUpkeep;
use forewarn::domain::event::EventKind;
use forewarn::domain::facts::InstanceFacts;
use forewarn::domain::fixtures::{self, pod_object};
use forewarn::domain::plan::{Facts, decide};
use forewarn::ports::{Clock, NodeDirectory, Pass};
use kube_fake::KubeFake;
use serde_json::{Value, json};

use crate::support::{ID, NODE, OTHER_ID, OTHER_NODE, World, assert_said, event, instance, node};
use crate::surge::{first_drain_pass, placeholders, sized};

/// `infra/k8s/placeholders.yaml`'s PriorityClass, admission policy and binding stored in `w`'s
/// fake, which enforces the policy (its CEL evaluated), and `w`'s clients impersonating
/// `group`: what forewarn's code sends, the API server admits or denies as it would.
fn as_forewarn_under_the_policy(w: &mut World, group: &str) {
    as_forewarn_under(w, "placeholders.yaml", group);
}

/// `infra/k8s/<file>`'s PriorityClasses, admission policies and bindings stored in `w`'s fake,
/// which enforces the policies, and `w`'s clients impersonating `group`.
fn as_forewarn_under(w: &mut World, file: &str, group: &str) {
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../infra/k8s")
            .join(file),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest).unwrap();
    for doc in docs.into_iter().filter(|d| {
        [
            "PriorityClass",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        .contains(&d["kind"].as_str().unwrap_or_default())
    }) {
        w.fake.insert(doc);
    }
    let mut config = w.fake.config();
    config.auth_info.impersonate = Some(format!("arn:aws:sts::123456789012:assumed-role/{group}"));
    config.auth_info.impersonate_groups = Some(vec![group.to_string()]);
    w.clients =
        ClusterClient::new(kube::Client::try_from(config).unwrap()).with_clock(w.clock.shared());
}

/// The placeholders forewarn makes pass `infra/k8s/placeholders.yaml`'s admission policy, its
/// CEL evaluated by the fake as the API server does; anything else forewarn's groups would
/// create or delete — a pod of another namespace, another name, an extra label or annotation,
/// a probe, a lifecycle hook, a service account, a delete of a tenant's pod — is denied.
#[tokio::test]
async fn placeholders_pass_the_admission_policy_and_nothing_else_forewarns_groups_send_does() {
    let mut w = admission_world().await;
    assert_placeholders_admitted_for_each_group(&mut w).await;
    // What the policy denies forewarn's groups, however it is sent.
    let executor = w.executor();
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-admit-shape"))
        .await;
    executor.run(&plan, Pass::Cordon).await.unwrap();
    first_drain_pass(&w, &executor, &plan).await;
    let good = placeholders(&w).remove("default/web-1").unwrap();
    let client = w.clients.client().await.unwrap();
    let pods = |ns: &str| -> kube::Api<kube::core::DynamicObject> {
        kube::Api::namespaced_with(
            client.clone(),
            ns,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        )
    };
    let variant = |change: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
            v["metadata"].as_object_mut().unwrap().remove(field);
        }
        v.as_object_mut().unwrap().remove("status");
        // What the Priority plugin computed: sent again, a real server refuses it for another
        // class.
        for field in ["priority", "preemptionPolicy"] {
            v["spec"].as_object_mut().unwrap().remove(field);
        }
        let uid = "u-shape";
        v["metadata"]["name"] = json!(format!("forewarn-placeholder-{uid}"));
        v["metadata"]["annotations"]["forewarn.io/pod-uid"] = json!(uid);
        change(&mut v);
        v
    };
    // A service account other than the default, that exists: the policy refuses it.
    w.fake
        .insert(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "admin", "namespace": "forewarn"}}));
    for (what, body) in refused_by_pod_security(&variant) {
        let obj: kube::core::DynamicObject = serde_json::from_value(body).unwrap();
        match pods("forewarn")
            .create(&kube::api::PostParams::default(), &obj)
            .await
        {
            Err(kube::Error::Api(s)) => assert!(
                s.code == 403
                    && s.message
                        .contains("violates PodSecurity \"restricted:latest\""),
                "{what}: {s:?}"
            ),
            other => panic!("{what}: admitted: {other:?}"),
        }
    }
    let denied = denied_shapes(&variant);
    for (what, body) in denied {
        let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
        let obj: kube::core::DynamicObject = serde_json::from_value(body).unwrap();
        match pods(&ns)
            .create(&kube::api::PostParams::default(), &obj)
            .await
        {
            Err(kube::Error::Api(s)) => assert!(
                [403, 422].contains(&s.code) && s.message.contains("forewarn-placeholders-only"),
                "{what}: {s:?}"
            ),
            other => panic!("{what}: admitted: {other:?}"),
        }
    }
    let admitted = variant(&|_| {});
    let obj: kube::core::DynamicObject = serde_json::from_value(admitted).unwrap();
    pods("forewarn")
        .create(&kube::api::PostParams::default(), &obj)
        .await
        .expect("the placeholder's own shape, under another uid, is admitted");
    // A tenant's pod cannot be deleted by forewarn's groups.
    match pods("default")
        .delete("web-1", &kube::api::DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("a tenant's pod deleted: {other:?}"),
    }
    assert!(w.pod("default", "web-1").is_some());
}

/// A world whose fake enforces the admission policies stored in it, spot drains surging, with a
/// web pod (anti-affine, tolerating every taint) on the node.
async fn admission_world() -> World {
    let fake = KubeFake::builder().admission_policies().start().await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    let mut web = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    web["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    web["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    w.fake.insert(web);
    w
}

/// As each of forewarn's groups, under the placeholders' policy: the drain's placeholder is
/// admitted, and so is its delete by the sweeper once expired.
async fn assert_placeholders_admitted_for_each_group(w: &mut World) {
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        as_forewarn_under_the_policy(w, group);
        let plan = w
            .plan(&event(
                EventKind::SpotInterruption,
                &format!("ev-admit-{group}"),
            ))
            .await;
        let executor = w.executor();
        executor.run(&plan, Pass::Cordon).await.unwrap();
        let out = first_drain_pass(w, &executor, &plan).await;
        let drain = out.drain.unwrap();
        assert_eq!(
            drain.placeholders_created, 1,
            "{group}: admitted: {drain:?}"
        );
        assert_eq!(drain.waiting, ["default/web-1"]);
        // Deleted by the sweeper once expired: admitted too.
        let later = plan.actions[0].deadline.unwrap() + chrono::Duration::seconds(1);
        assert_eq!(executor.clean_placeholders(later).await.unwrap().len(), 1);
        assert!(placeholders(w).is_empty());
    }
}

/// The placeholder's shape changed as the policy denies forewarn's groups, each `variant` of the
/// good one (under another uid), with what was changed.
fn denied_shapes(variant: &impl Fn(&dyn Fn(&mut Value)) -> Value) -> Vec<(&'static str, Value)> {
    let denied: Vec<(&str, Value)> = vec![
        (
            "another namespace",
            variant(&|v| v["metadata"]["namespace"] = json!("default")),
        ),
        (
            "another name",
            variant(&|v| v["metadata"]["name"] = json!("forewarn-placeholder-x")),
        ),
        (
            "an extra label",
            variant(&|v| v["metadata"]["labels"]["app"] = json!("web")),
        ),
        (
            "an extra annotation",
            variant(&|v| v["metadata"]["annotations"]["x"] = json!("y")),
        ),
        (
            "a probe",
            variant(&|v| {
                v["spec"]["containers"][0]["livenessProbe"] =
                    json!({"exec": {"command": ["sh", "-c", "curl evil"]}})
            }),
        ),
        (
            "a lifecycle hook",
            variant(&|v| {
                v["spec"]["containers"][0]["lifecycle"] =
                    json!({"postStart": {"exec": {"command": ["sh"]}}})
            }),
        ),
        (
            "a service account",
            variant(&|v| v["spec"]["serviceAccountName"] = json!("admin")),
        ),
        (
            "another image",
            variant(&|v| v["spec"]["containers"][0]["image"] = json!("busybox")),
        ),
        (
            "another class",
            variant(&|v| v["spec"]["priorityClassName"] = json!("system-node-critical")),
        ),
        (
            "an owner other than a Node",
            variant(&|v| {
                v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "y"}])
            }),
        ),
        // Pod Security `restricted` admits each of these; only the placeholder policy refuses.
        (
            "another non-root user",
            variant(&|v| v["spec"]["securityContext"]["runAsUser"] = json!(1000)),
        ),
        (
            "a capability added",
            variant(&|v| {
                v["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                    json!(["NET_BIND_SERVICE"])
            }),
        ),
        (
            "a writable root filesystem",
            variant(&|v| {
                v["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] =
                    json!(false)
            }),
        ),
        (
            "an SELinux label",
            variant(&|v| {
                v["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "container_t"})
            }),
        ),
        (
            "a runtime class",
            variant(&|v| v["spec"]["runtimeClassName"] = json!("runc")),
        ),
        (
            "supplemental groups",
            variant(&|v| v["spec"]["securityContext"]["supplementalGroups"] = json!([0])),
        ),
    ];
    denied
}

/// What Pod Security `restricted` (namespace forewarn's level, `infra/k8s/rbac.yaml`) refuses
/// before the placeholder policy is asked: the placeholder's old shape, without a security
/// context, and a privileged or root one.
fn refused_by_pod_security(
    variant: &impl Fn(&dyn Fn(&mut Value)) -> Value,
) -> Vec<(&'static str, Value)> {
    vec![
        (
            "the old shape, without a security context",
            variant(&|v| {
                v["spec"].as_object_mut().unwrap().remove("securityContext");
                v["spec"]["containers"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("securityContext");
            }),
        ),
        (
            "root",
            variant(&|v| {
                v["spec"]["securityContext"]["runAsUser"] = json!(0);
                v["spec"]["securityContext"]["runAsNonRoot"] = json!(false);
            }),
        ),
        (
            "privileged",
            variant(&|v| v["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true)),
        ),
        (
            "privilege escalation",
            variant(&|v| {
                v["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
                    json!(true)
            }),
        ),
    ]
}

/// A placeholder refused at run time is explained: a mutating webhook that adds a sidecar to
/// every pod of namespace forewarn (a service mesh's injector, as a cluster may run one) makes
/// the placeholder policy refuse the placeholders (one container only). Their pods are evicted
/// at once, as without surge; the refusals are counted in the drain's report (the
/// `PlaceholdersRefused` metric), and said once per namespace and refusing step: one Warning
/// Event `PlaceholderRefused` on the node, naming the namespace, the policy and its message,
/// and none again for the same refusal on the next node.
#[tokio::test]
async fn a_placeholder_refused_by_admission_is_said_once_and_its_pods_evicted_at_once() {
    let sidecar = kube_fake::Webhook::patch(
        "inject.mesh.example",
        json!([{"op": "add", "path": "/spec/containers/-", "value": {
            "name": "proxy", "image": "mesh/proxy:1",
            "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true}}}]),
    )
    .namespace("forewarn");
    let fake = KubeFake::builder()
        .admission_policies()
        .mutating_webhook(sidecar)
        .start()
        .await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    for (name, on) in [("web-1", NODE), ("web-2", NODE), ("web-3", OTHER_NODE)] {
        w.fake
            .insert(pod_object("default", name, on, "web", "ReplicaSet"));
    }
    let executor = w.executor();
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-refused"))
        .await;
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let out = first_drain_pass(&w, &executor, &plan).await;
    let drain = out.drain.as_ref().unwrap();
    assert_eq!(drain.placeholders_refused, 2, "{drain:?}");
    assert_eq!(drain.placeholders_created, 0);
    for pod in ["web-1", "web-2"] {
        assert!(w.pod("default", pod).is_none(), "{pod} evicted at once");
    }
    let refused = |w: &World| -> Vec<Value> {
        w.fake
            .list("events.k8s.io/v1", "Event")
            .into_iter()
            .filter(|e| e["reason"] == "PlaceholderRefused")
            .collect()
    };
    let events = refused(&w);
    assert_eq!(
        events.len(),
        1,
        "once per namespace and refusal: {events:?}"
    );
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["regarding"]["kind"], "Node");
    assert_eq!(e["regarding"]["name"], NODE);
    let note = e["note"].as_str().unwrap();
    assert!(
        note.contains("namespace default")
            && note.contains("ValidatingAdmissionPolicy 'forewarn-placeholders-only'")
            && note.contains("one pause container"),
        "{note}"
    );
    // The same refusal on the next node, past the minute a refused namespace is not asked
    // again: counted, not said again.
    w.clock.sleep(Duration::from_secs(61)).await;
    let other = plan_for_other(&w, "ev-refused-2").await;
    executor.run(&other, Pass::Cordon).await.unwrap();
    let out = first_drain_pass(&w, &executor, &other).await;
    assert_eq!(out.drain.as_ref().unwrap().placeholders_refused, 1);
    assert!(w.pod("default", "web-3").is_none());
    assert_eq!(refused(&w).len(), 1, "said once");
}

/// A placeholder never counts as room on another doomed node: a pod that tolerates every taint
/// (the cordon's included) has its placeholder kept off a node forewarn cordoned — the fake's
/// scheduler honours the placeholder's required node affinity — so it stays pending, and the
/// pod is not evicted for room that is going away too.
#[tokio::test]
async fn a_placeholder_never_lands_on_another_node_forewarn_cordoned() {
    let fake = KubeFake::builder()
        .scheduler(kube_fake::SchedulerSettings::default())
        .start()
        .await;
    let mut w = World::on(fake);
    w.config.surge_kinds = forewarn::domain::surge::SURGE_KINDS.into();
    w.fake.insert(sized(NODE, ID, "1"));
    w.fake.insert(sized(OTHER_NODE, OTHER_ID, "4"));
    let mut web = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    web["spec"]["nodeSelector"] = json!({"pool": "general"});
    web["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    web["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500m"}});
    w.fake.insert(web);
    let executor = w.executor();
    // The other node's instance is warned first: forewarn cordons it (and labels it).
    let other = plan_for_other(&w, "ev-other").await;
    executor.run(&other, Pass::Cordon).await.unwrap();
    let labels = w.node(OTHER_NODE).unwrap()["metadata"]["labels"].clone();
    assert_eq!(labels["forewarn.io/cordoned"], "true", "{labels}");
    // Then this node: its placeholder finds no room but on the other doomed node.
    let plan = w.plan(&event(EventKind::SpotInterruption, "ev-this")).await;
    executor.run(&plan, Pass::Cordon).await.unwrap();
    let out = first_drain_pass(&w, &executor, &plan).await;
    assert_eq!(out.drain.unwrap().waiting, ["default/web-1"]);
    w.clock.advance(Duration::from_secs(5));
    w.fake.settle();
    let ph = placeholders(&w).remove("default/web-1").unwrap();
    assert!(
        ph["spec"]["nodeName"].is_null(),
        "not bound to a doomed node: {ph}"
    );
    let plan_again = first_drain_pass(&w, &executor, &plan).await;
    assert!(
        w.pod("default", "web-1").is_some(),
        "still serving, its room not there yet: {plan_again:?}"
    );
}

/// `infra/k8s/node-writes.yaml`'s policy, enforced by the fake (its CEL evaluated), admits what
/// forewarn's cordon (with its own taint key or NTH's) and its way back write on a Node, as
/// either group, and denies any other change forewarn's groups could send: another label,
/// another taint removed, the provider id.
#[tokio::test]
async fn forewarns_node_writes_pass_the_node_policy_and_nothing_else_does() {
    let fake = KubeFake::builder().admission_policies().start().await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    let mut n = w.node(NODE).unwrap();
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    w.fake.insert(n);
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        as_forewarn_under(&mut w, "node-writes.yaml", group);
        let plan = w
            .plan(&event(
                EventKind::SpotInterruption,
                &format!("ev-nodes-{group}"),
            ))
            .await;
        let out = w
            .executor()
            .run(&plan, Pass::Cordon)
            .await
            .unwrap()
            .remove(0);
        assert_said(&out, &format!("cordoned node/{NODE}"));
        let cordoned = w.node(NODE).unwrap();
        assert_eq!(cordoned["spec"]["unschedulable"], true, "{group}: admitted");
        assert_eq!(
            cordoned["metadata"]["labels"]["forewarn.io/cordoned"],
            "true"
        );
        let mut back = cordoned.clone();
        back["spec"]["unschedulable"] = json!(false);
        back["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        back["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("forewarn.io/cordoned");
        w.fake.insert(back);
    }
    // Under FOREWARN_TAINT_KEYS=nth, NTH's key instead of forewarn's: admitted too.
    w.config.taint_keys = forewarn::domain::config::TaintKeys::Nth;
    let plan = w
        .plan(&event(EventKind::SpotInterruption, "ev-nodes-nth"))
        .await;
    let out = w.executor().run(&plan, Pass::Cordon).await.unwrap();
    let cordoned = w.node(NODE).unwrap();
    assert_eq!(cordoned["spec"]["unschedulable"], true, "{out:?}");
    assert_eq!(
        cordoned["spec"]["taints"][1]["key"],
        forewarn::domain::config::NTH_TAINT_SPOT
    );
    let client = w.clients.client().await.unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let params = kube::api::PatchParams::default();
    for (what, patch) in [
        (
            "another label",
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/pool": "x"}}}),
        ),
        ("another taint removed", json!({"spec": {"taints": []}})),
        (
            "the provider id",
            json!({"spec": {"providerID": "aws:///us-east-1a/i-0fffffffffffffff0"}}),
        ),
    ] {
        match nodes
            .patch(NODE, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) => {
                assert!(s.message.contains("forewarn-node-writes"), "{what}: {s:?}")
            }
            other => panic!("{what}: admitted: {other:?}"),
        }
    }
}

/// `infra/k8s/node-writes.yaml`'s delete policy, enforced by the fake: a holder of forewarn's
/// groups (which RBAC lets delete Nodes) cannot delete a control-plane node, whatever the
/// executor would have refused first; a worker node's delete is admitted.
#[tokio::test]
async fn forewarns_groups_cannot_delete_a_control_plane_node() {
    let fake = KubeFake::builder().admission_policies().start().await;
    let mut w = World::on(fake);
    w.fake.insert(node(NODE, ID));
    let mut control = node(OTHER_NODE, OTHER_ID);
    control["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(control);
    as_forewarn_under(&mut w, "node-writes.yaml", "forewarn-handler");
    let client = w.clients.client().await.unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let params = kube::api::DeleteParams::default();
    match nodes.delete(OTHER_NODE, &params).await {
        Err(kube::Error::Api(s)) => {
            assert!(s.message.contains("forewarn-node-deletes"), "{s:?}");
            assert!(s.message.contains("control-plane"), "{s:?}");
        }
        other => panic!("a control-plane node deleted: {other:?}"),
    }
    assert!(w.node(OTHER_NODE).is_some());
    nodes
        .delete(NODE, &params)
        .await
        .expect("a worker node's delete");
    assert!(w.node(NODE).is_none());
}

/// The plan of a spot warning `id` for the other node's instance.
async fn plan_for_other(w: &World, id: &str) -> forewarn::domain::plan::Plan {
    let instances = BTreeMap::from([(OTHER_ID.to_string(), instance(OTHER_ID, OTHER_NODE))]);
    let known: Vec<InstanceFacts> = instances.values().cloned().collect();
    let nodes = w
        .clients
        .clone()
        .nodes(&known, Default::default())
        .await
        .unwrap();
    let warning = fixtures::event(EventKind::SpotInterruption, id, OTHER_ID)
        .time(w.clock.now())
        .build();
    decide(&warning, Facts::new(&instances, &nodes), &w.config)
}
