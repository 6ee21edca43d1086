//! Server-side apply (`Patch::Apply`), driven by the real kube client: the options it needs,
//! create when absent, the managers' field ownership, conflicts and `force`.

mod common;

use common::api_status;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fake::KubeFake;
use serde_json::{Value, json};

fn config_map(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "c", "namespace": "ns"}, "data": data})
}

async fn apply(api: &Api<ConfigMap>, manager: &str, body: &Value) -> kube::Result<ConfigMap> {
    api.patch("c", &PatchParams::apply(manager), &Patch::Apply(body))
        .await
}

/// The managers of the stored ConfigMap, with their operations and fields.
fn managers(fake: &KubeFake) -> Vec<(String, String, Value)> {
    let stored = fake.get("v1", "ConfigMap", Some("ns"), "c").unwrap();
    stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

/// A PATCH of the ConfigMap `c` with `query` and `content_type`, sent raw (kube's client
/// refuses these before sending them).
async fn raw_patch(fake: &KubeFake, query: &str, content_type: &str) -> kube::Error {
    let request = http::Request::patch(format!("/api/v1/namespaces/ns/configmaps/c?{query}"))
        .header("content-type", content_type)
        .body(serde_json::to_vec(&config_map(json!({}))).unwrap())
        .unwrap();
    fake.client()
        .request::<ConfigMap>(request)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn an_apply_without_a_field_manager_is_the_real_422() {
    let fake = KubeFake::start().await;
    let status = api_status::<()>(Err(
        raw_patch(&fake, "", "application/apply-patch+yaml").await
    ));
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required \
         for apply patch"
    );
    // `force` belongs to apply alone.
    let status = api_status::<()>(Err(raw_patch(
        &fake,
        "force=true&fieldManager=me",
        "application/merge-patch+json",
    )
    .await));
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .ends_with("force: Forbidden: may not be specified for non-apply patch"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn the_configuration_must_name_the_urls_type_and_object() {
    let fake = KubeFake::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let mut wrong_version = config_map(json!({}));
    wrong_version["apiVersion"] = json!("v2");
    let status = api_status(apply(&api, "me", &wrong_version).await);
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1"
    );
    let mut wrong_kind = config_map(json!({}));
    wrong_kind["kind"] = json!("Secret");
    assert_eq!(api_status(apply(&api, "me", &wrong_kind).await).code, 400);
    let mut wrong_name = config_map(json!({}));
    wrong_name["metadata"]["name"] = json!("other");
    let status = api_status(apply(&api, "me", &wrong_name).await);
    assert_eq!(status.code, 400);
    assert!(
        status
            .message
            .contains("does not match the name on the URL"),
        "{}",
        status.message
    );
    assert!(fake.get("v1", "ConfigMap", Some("ns"), "c").is_none());
}

#[tokio::test]
async fn an_apply_creates_an_absent_object_as_a_create_would() {
    let fake = KubeFake::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let created = apply(&api, "me", &config_map(json!({"a": "1"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.resource_version.is_some());
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(created.data.unwrap()["a"], "1");
    assert_eq!(
        managers(&fake),
        [(
            "me".to_string(),
            "Apply".to_string(),
            json!({"f:data": {"f:a": {}}})
        )]
    );
    // Applied again unchanged: not a write.
    let again = apply(&api, "me", &config_map(json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, meta.resource_version);
    assert_eq!(again.metadata.managed_fields, meta.managed_fields);
    // A dry run stores nothing.
    let dry = api
        .patch(
            "c",
            &PatchParams::apply("me").dry_run(),
            &Patch::Apply(config_map(json!({"a": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(dry.data.unwrap()["a"], "2");
    let stored = fake.get("v1", "ConfigMap", Some("ns"), "c").unwrap();
    assert_eq!(stored["data"]["a"], "1");
}

/// A field the manager applied before and leaves out now is removed, unless another manager
/// owns it too; a field it never applied is left alone.
#[tokio::test]
async fn fields_an_applier_drops_are_removed_unless_another_owns_them() {
    let fake = KubeFake::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    apply(
        &api,
        "me",
        &config_map(json!({"a": "1", "b": "2", "c": "3"})),
    )
    .await
    .unwrap();
    // Another applier shares b, with the same value: no conflict.
    apply(&api, "other", &config_map(json!({"b": "2", "d": "4"})))
        .await
        .unwrap();
    let applied = apply(&api, "me", &config_map(json!({"c": "3"})))
        .await
        .unwrap();
    let data = applied.data.unwrap();
    let keys: Vec<&String> = data.keys().collect();
    assert_eq!(keys, ["b", "c", "d"], "a removed, b kept for other");
    assert_eq!(
        managers(&fake),
        [
            (
                "me".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:c": {}}})
            ),
            (
                "other".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:b": {}, "f:d": {}}})
            ),
        ]
    );
}

/// A value another manager owns, applied with another value: the real 409 naming the manager
/// and the field, nothing written; with `force`, the value is written and its ownership moves.
#[tokio::test]
async fn a_conflict_names_the_manager_and_force_takes_the_field() {
    let fake = KubeFake::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    apply(&api, "owner", &config_map(json!({"a": "1", "b": "2"})))
        .await
        .unwrap();
    let status = api_status(apply(&api, "me", &config_map(json!({"a": "9"}))).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"owner\": .data.a"
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.a");
    let status = api_status(apply(&api, "me", &config_map(json!({"a": "9", "b": "8"}))).await);
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"owner\":\n- .data.a\n- .data.b"
    );
    let stored = fake.get("v1", "ConfigMap", Some("ns"), "c").unwrap();
    assert_eq!(stored["data"], json!({"a": "1", "b": "2"}));

    let forced = api
        .patch(
            "c",
            &PatchParams::apply("me").force(),
            &Patch::Apply(config_map(json!({"a": "9"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "9");
    assert_eq!(
        managers(&fake),
        [
            (
                "owner".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:b": {}}})
            ),
            (
                "me".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:a": {}}})
            ),
        ]
    );
}

/// Once an object is applied, a non-apply write records its manager (operation Update) for
/// the values it changed: an apply that would change them back conflicts with it, named with
/// its API version.
#[tokio::test]
async fn an_update_after_an_apply_owns_what_it_changed() {
    let fake = KubeFake::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    apply(&api, "me", &config_map(json!({"a": "1"})))
        .await
        .unwrap();
    let params = PatchParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    api.patch("c", &params, &Patch::Merge(json!({"data": {"a": "2"}})))
        .await
        .unwrap();
    let status = api_status(apply(&api, "me", &config_map(json!({"a": "1"}))).await);
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.a"
    );
    // An object never applied records no managers.
    let plain: Api<ConfigMap> = Api::namespaced(fake.client(), "ns");
    let created = plain
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(created.metadata.managed_fields.is_none());
}

/// Lists are atomic: applying a list replaces it whole.
#[tokio::test]
async fn a_list_is_applied_as_one_value() {
    let fake = KubeFake::start().await;
    let roles: Api<k8s_openapi::api::core::v1::Node> = Api::all(fake.client());
    let node = |taints: Value| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
               "spec": {"taints": taints}})
    };
    let params = PatchParams::apply("me");
    roles
        .patch(
            "n",
            &params,
            &Patch::Apply(node(json!([{"key": "a", "effect": "NoSchedule"},
                                       {"key": "b", "effect": "NoSchedule"}]))),
        )
        .await
        .unwrap();
    let applied = roles
        .patch(
            "n",
            &params,
            &Patch::Apply(node(json!([{"key": "b", "effect": "NoSchedule"}]))),
        )
        .await
        .unwrap();
    let taints = applied.spec.unwrap().taints.unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].key, "b");
}
