//! The preflight (`forewarn check --kube`, the deploy's last step, the sweeper's hourly check):
//! every write forewarn makes, sent to the fake as a server-side dry run through its whole
//! admission chain (defaults, the ServiceAccount and Priority plugins, Pod Security, the
//! project's admission policies, webhooks), as each group; nothing stored.

use forewarn::adapters::kube::ClusterClient;
use forewarn::adapters::preflight::{PreflightScope, prove};
use forewarn::app::preflight::Role;
use forewarn::app::upkeep::ClusterUpkeep;
use forewarn::domain::admission::RefusedBy;
use forewarn::domain::fixtures::pod_object;
use forewarn::domain::preflight::{Capability, Proof, Verdict};
use forewarn::ports::Clock;
use kube_fake::{KubeFake, Webhook};
use serde_json::json;

use crate::support::{ID, NODE, OTHER_ID, OTHER_NODE, World, as_group, node};

/// A world whose cluster has forewarn's manifests applied (see [`World::on`]), two worker
/// nodes, a control-plane one, a ReplicaSet's pod and the priority expander's ConfigMap.
async fn cluster(fake: KubeFake) -> World {
    let w = World::on(fake);
    let mut control = node("ip-10-0-0-1.ec2.internal", "i-0a1b2c3d4e5f60000");
    control["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(control);
    w.fake.insert(node(NODE, ID));
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    w.fake
        .insert(pod_object("shop", "web-1", NODE, "web", "ReplicaSet"));
    w.fake
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-autoscaler-priority-expander", "namespace": "kube-system"},
        "data": {"priorities": "10:\n  - .*\n"}}));
    w
}

/// Every write of `role`, as `group` (impersonated).
async fn proofs(w: &World, group: &str, role: Role) -> Vec<Proof> {
    let clients = ClusterClient::new(as_group(&w.fake, group)).with_clock(w.clock.shared());
    let scope = PreflightScope {
        group,
        capabilities: role.capabilities(),
        reporting_instance: "forewarn-check",
    };
    prove(&clients, &w.config, &scope).await
}

fn verdict(proofs: &[Proof], capability: Capability) -> &Verdict {
    &proofs
        .iter()
        .find(|p| p.capability == capability)
        .unwrap_or_else(|| panic!("{capability:?} not proved: {proofs:?}"))
        .verdict
}

/// On a cluster as `forewarn deploy` leaves it, every write of both groups is admitted —
/// the placeholder of a real pod through Pod Security `restricted` and the placeholder policy
/// included — on a worker node, never the control-plane one; and nothing is stored.
#[tokio::test]
async fn every_write_of_both_groups_is_admitted_on_a_deployed_cluster_and_nothing_is_stored() {
    let w = cluster(KubeFake::builder().admission_policies().start().await).await;
    let before = (
        w.fake.list("v1", "Pod").len(),
        w.fake.list("events.k8s.io/v1", "Event").len(),
    );
    let handler = proofs(&w, "forewarn-handler", Role::Handler).await;
    assert_eq!(handler.len(), 6, "{handler:?}");
    let sweeper = proofs(&w, "forewarn-sweeper", Role::Sweeper).await;
    assert_eq!(sweeper.len(), 7, "{sweeper:?}");
    for p in handler.iter().chain(&sweeper) {
        assert!(matches!(p.verdict, Verdict::Admitted(_)), "{p}");
    }
    let Verdict::Admitted(Some(on)) = verdict(&handler, Capability::Cordon) else {
        unreachable!()
    };
    assert!(
        on.contains(NODE) || on.contains(OTHER_NODE),
        "a worker node: {on}"
    );
    // Dry runs only: no pod, Event, taint or changed ConfigMap.
    assert_eq!(
        (
            w.fake.list("v1", "Pod").len(),
            w.fake.list("events.k8s.io/v1", "Event").len()
        ),
        before
    );
    for name in [NODE, OTHER_NODE] {
        assert!(w.node(name).unwrap()["spec"].get("unschedulable").is_none());
    }
    let dry: Vec<_> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method != kube_fake::Method::GET)
        .collect();
    assert!(!dry.is_empty());
    assert!(
        dry.iter()
            .all(|r| r.query_param("dryRun").as_deref() == Some("All")),
        "every write a dry run: {dry:?}"
    );
}

/// A policy added later is seen before the next interruption: a Kyverno-like webhook denying
/// pods in namespace forewarn refuses the placeholder, named with its message; the sweeper's
/// hourly preflight sees it (and only once an hour).
#[tokio::test]
async fn a_webhook_added_later_is_named_by_the_preflight_and_the_sweepers_hourly_check() {
    let w = cluster(KubeFake::builder().admission_policies().start().await).await;
    w.fake.add_validating_webhook(
        Webhook::deny(
            "validate.kyverno.svc-fail",
            "require-team-label: label 'team' is required",
        )
        .namespace("forewarn"),
    );
    let handler = proofs(&w, "forewarn-handler", Role::Handler).await;
    match verdict(&handler, Capability::Placeholder) {
        Verdict::Refused { by, message } => {
            assert_eq!(by, &RefusedBy::Webhook("validate.kyverno.svc-fail".into()));
            assert!(message.contains("require-team-label"), "{message}");
        }
        other => panic!("{other}"),
    }
    assert!(matches!(
        verdict(&handler, Capability::Cordon),
        Verdict::Admitted(_)
    ));
    // The sweeper's executor proves its own writes, as itself.
    let executor = w.executor();
    let own = executor
        .preflight("sweeper", Role::Sweeper.capabilities())
        .await;
    assert!(verdict(&own, Capability::Placeholder).is_refused());
    // A namespace at Pod Security `restricted` refuses a pod that is not: a forged shape.
    let memory = forewarn::app::preflight::PreflightMemory::default();
    let now = w.clock.now();
    assert!(memory.due("-", now));
    assert_eq!(
        memory.record("-", now, own).len(),
        7,
        "a first check says every line"
    );
    assert!(!memory.due("-", now + chrono::Duration::minutes(30)));
}

/// A cluster without the placeholders' grant or policy: Pod Security still holds the namespace,
/// and a placeholder of the old shape (no security context) is refused by it, named.
#[tokio::test]
async fn the_old_placeholder_shape_is_refused_by_pod_security_and_named() {
    let w = cluster(KubeFake::builder().admission_policies().start().await).await;
    let client = as_group(&w.fake, "forewarn-handler");
    let pods: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
        client,
        "forewarn",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let old: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forewarn-placeholder-u", "namespace": "forewarn",
            "labels": {"forewarn.io/placeholder": "true"},
            "annotations": {"forewarn.io/pod-uid": "u"}},
        "spec": {"priorityClassName": "forewarn-placeholder", "automountServiceAccountToken": false,
            "containers": [{"name": "placeholder", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let Err(kube::Error::Api(s)) = pods.create(&params, &old).await else {
        panic!("the old shape admitted");
    };
    let verdict = Verdict::of_failure(Some(s.code), &s.reason, &s.message);
    assert_eq!(
        verdict,
        Verdict::Refused {
            by: RefusedBy::PodSecurity("restricted:latest".into()),
            message: s.message.clone()
        }
    );
    assert!(s.message.contains("runAsNonRoot != true"), "{}", s.message);
}
