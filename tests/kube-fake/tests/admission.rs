//! ValidatingAdmissionPolicy enforcement (src/admission.rs), through the real kube client: the
//! identity is what the client impersonates.

use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use kube_fake::KubeFake;
use serde_json::{Value, json};

async fn fake(enforced: bool) -> KubeFake {
    let fake = KubeFake::builder()
        .admission_policies()
        .admission(enforced)
        .start()
        .await;
    // Pods of group `builders` must be named `ok-*` and carry no label but `app`; a delete
    // only of such a pod.
    fake.insert(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "only-ok"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "DELETE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "builders",
                "expression": "request.userInfo.groups.exists(g, g == 'builders')"}],
            "variables": [{"name": "pod",
                "expression": "request.operation == 'DELETE' ? oldObject : object"}],
            "validations": [
                {"expression": "variables.pod.metadata.name.startsWith('ok-')",
                 "message": "builders may touch ok- pods only"},
                {"expression": "request.operation != 'CREATE' || !has(object.metadata.labels) || object.metadata.labels.all(k, k in ['app'])",
                 "reason": "Forbidden"}
            ]
        }
    }));
    fake.insert(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "only-ok-binding"},
        "spec": {"policyName": "only-ok", "validationActions": ["Deny"]}
    }));
    fake
}

fn pods_as(fake: &KubeFake, groups: &[&str]) -> Api<DynamicObject> {
    let mut config = fake.config();
    config.auth_info.impersonate = Some("someone".into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    let client = kube::Client::try_from(config).unwrap();
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    Api::namespaced_with(client, "default", &resource)
}

fn pod(name: &str, labels: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}))
    .unwrap()
}

fn refused(result: Result<DynamicObject, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("admitted: {other:?}"),
    }
}

#[tokio::test]
async fn a_policy_denies_what_its_validations_refuse_for_the_groups_it_matches() {
    let fake = fake(true).await;
    let builders = pods_as(&fake, &["builders"]);
    let params = PostParams::default();
    builders
        .create(&params, &pod("ok-1", json!({"app": "a"})))
        .await
        .expect("a pod the policy allows");
    let (code, message) = refused(builders.create(&params, &pod("bad-1", json!({}))).await);
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "ValidatingAdmissionPolicy 'only-ok' with binding 'only-ok-binding' denied request: builders may touch ok- pods only"
    );
    let (code, message) = refused(
        builders
            .create(&params, &pod("ok-2", json!({"team": "x"})))
            .await,
    );
    assert_eq!(code, 403, "the validation's reason");
    assert!(message.contains("failed expression"), "{message}");
    // A dry run is admitted or denied the same way, and stores nothing.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    refused(builders.create(&dry, &pod("bad-2", json!({}))).await);
    builders
        .create(&dry, &pod("ok-3", json!({})))
        .await
        .unwrap();
    assert!(fake.get("v1", "Pod", Some("default"), "ok-3").is_none());
    // Another group, or no identity: the policy does not apply.
    pods_as(&fake, &["others"])
        .create(&params, &pod("bad-3", json!({})))
        .await
        .unwrap();
    let anyone = Api::<DynamicObject>::namespaced_with(
        fake.client(),
        "default",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    anyone
        .create(&params, &pod("bad-4", json!({})))
        .await
        .unwrap();
    // A delete: of an ok- pod only.
    let err = builders
        .delete("bad-3", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    assert!(fake.get("v1", "Pod", Some("default"), "bad-3").is_some());
    builders
        .delete("ok-1", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_cluster_that_does_not_enforce_admits_everything() {
    let fake = fake(false).await;
    pods_as(&fake, &["builders"])
        .create(&PostParams::default(), &pod("bad-1", json!({"team": "x"})))
        .await
        .expect("stored, not enforced");
}
