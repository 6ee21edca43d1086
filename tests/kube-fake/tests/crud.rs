//! Basic verbs, errors, patches and selectors, driven by the real kube client.

mod common;

use common::{api_status, node, running};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube_fake::{KubeFake, Method};
use serde_json::json;

#[tokio::test]
async fn get_of_a_missing_node_is_the_real_not_found() {
    let fake = KubeFake::start().await;
    let nodes: Api<Node> = Api::all(fake.client());

    let status = api_status(nodes.get("missing").await);

    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");
    assert_eq!(status.message, "nodes \"missing\" not found");
    assert!(status.is_not_found());
    let details = status.details.expect("details");
    assert_eq!(details.name, "missing");
    assert_eq!(details.kind, "nodes");
}

#[tokio::test]
async fn create_sets_server_fields_and_a_second_create_is_already_exists() {
    let fake = KubeFake::start().await;
    let nodes: Api<Node> = Api::all(fake.client());
    let node: Node = serde_json::from_value(node("n1")).unwrap();
    let before = fake.resource_version();

    let created = nodes.create(&PostParams::default(), &node).await.unwrap();

    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.metadata.resource_version.as_deref(),
        Some((before + 1).to_string().as_str())
    );
    let status = api_status(nodes.create(&PostParams::default(), &node).await);
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "AlreadyExists");
    assert_eq!(status.message, "nodes \"n1\" already exists");
    // The fake holds what the client sees.
    let stored = fake.get("v1", "Node", None, "n1").unwrap();
    assert_eq!(stored["metadata"]["uid"], created.metadata.uid.unwrap());
}

#[tokio::test]
async fn create_without_a_name_is_invalid() {
    let fake = KubeFake::start().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let mut pod: Pod = serde_json::from_value(running("default", "x", "n1", "web")).unwrap();
    pod.metadata.name = None;

    let status = api_status(pods.create(&PostParams::default(), &pod).await);

    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(
        status.details.unwrap().causes[0].field,
        "metadata.name".to_string()
    );
}

#[tokio::test]
async fn a_pod_created_through_the_api_starts_pending_and_lands_in_the_path_namespace() {
    let fake = KubeFake::start().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(), "team-a");
    let mut pod: Pod = serde_json::from_value(running("team-a", "p", "n1", "web")).unwrap();
    pod.metadata.namespace = None;

    let created = pods.create(&PostParams::default(), &pod).await.unwrap();

    assert_eq!(created.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));

    let elsewhere: Api<Pod> = Api::namespaced(fake.client(), "team-b");
    let mut other: Pod = serde_json::from_value(running("team-a", "q", "n1", "web")).unwrap();
    other.metadata.namespace = Some("team-a".into());
    let status = api_status(elsewhere.create(&PostParams::default(), &other).await);
    assert_eq!(status.code, 400);
    assert_eq!(status.reason, "BadRequest");
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());
    let mut stale = nodes.get("n1").await.unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();

    stale.spec.as_mut().unwrap().unschedulable = Some(true);
    let status = api_status(nodes.replace("n1", &PostParams::default(), &stale).await);

    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on nodes \"n1\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // With the current resourceVersion the replace goes through.
    let mut fresh = nodes.get("n1").await.unwrap();
    fresh.spec.as_mut().unwrap().unschedulable = Some(true);
    let replaced = nodes
        .replace("n1", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.spec.unwrap().unschedulable, Some(true));
}

#[tokio::test]
async fn merge_patch_cordons_and_replaces_the_taint_list() {
    let fake = KubeFake::start().await;
    let mut seeded = node("n1");
    seeded["spec"]["taints"] = json!([{"key": "old", "effect": "NoSchedule"}]);
    fake.insert(seeded);
    let nodes: Api<Node> = Api::all(fake.client());

    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "unschedulable": true,
                "taints": [{"key": "aws.amazon.com/spot-interruption", "effect": "NoExecute"}],
            }})),
        )
        .await
        .unwrap();

    let spec = patched.spec.unwrap();
    assert_eq!(spec.unschedulable, Some(true));
    assert_eq!(
        spec.taints.unwrap(),
        vec![Taint {
            key: "aws.amazon.com/spot-interruption".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        }]
    );
    // Untouched fields stay, status included.
    assert_eq!(spec.provider_id.as_deref(), Some("aws:///us-east-1a/i-n1"));
    assert_eq!(
        patched.status.unwrap().conditions.unwrap()[0].type_,
        "Ready"
    );
    let last = fake.writes().pop().unwrap();
    assert_eq!(last.method, Method::PATCH);
    assert_eq!(
        last.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
}

#[tokio::test]
async fn strategic_patch_treats_taints_as_atomic_and_merges_labels() {
    let fake = KubeFake::start().await;
    let mut seeded = node("n1");
    seeded["spec"]["taints"] =
        json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]);
    fake.insert(seeded);
    let nodes: Api<Node> = Api::all(fake.client());

    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"labels": {"forewarn/cordoned": "true"}},
                "spec": {"taints": [{"key": "c", "effect": "NoExecute"}]},
            })),
        )
        .await
        .unwrap();

    let taints = patched.spec.unwrap().taints.unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].key, "c");
    let labels = patched.metadata.labels.unwrap();
    assert_eq!(labels["forewarn/cordoned"], "true");
    assert_eq!(labels["kubernetes.io/hostname"], "n1");
    assert_eq!(
        fake.writes()[0].content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
}

#[tokio::test]
async fn json_patch_with_a_failing_test_is_unprocessable_and_changes_nothing() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());
    let rv = fake.get("v1", "Node", None, "n1").unwrap()["metadata"]["resourceVersion"].clone();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/unschedulable", "value": true},
        {"op": "add", "path": "/spec/unschedulable", "value": false},
    ]))
    .unwrap();

    let status = api_status(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Json::<()>(patch))
            .await,
    );

    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "the server rejected our request due to an error in our request"
    );
    let stored = fake.get("v1", "Node", None, "n1").unwrap();
    assert_eq!(stored["metadata"]["resourceVersion"], rv);
    assert!(stored["spec"].get("unschedulable").is_none());

    // A passing test applies.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/name", "value": "n1"},
        {"op": "add", "path": "/spec/unschedulable", "value": true},
    ]))
    .unwrap();
    let patched = nodes
        .patch("n1", &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
}

#[tokio::test]
async fn patch_carrying_a_stale_resource_version_conflicts_and_a_missing_object_is_404() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());

    let status = api_status(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": true}}),
                ),
            )
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");

    let status = api_status(
        nodes
            .patch(
                "ghost",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await,
    );
    assert_eq!(status.code, 404);
    assert_eq!(status.message, "nodes \"ghost\" not found");
}

#[tokio::test]
async fn unknown_patch_content_type_is_unsupported_media_type() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let client = fake.client();
    let request = axum::http::Request::patch("/api/v1/nodes/n1")
        .header("content-type", "application/x-forewarn")
        .body(br#"{"spec":{"unschedulable":true}}"#.to_vec())
        .unwrap();

    let status = api_status(client.request_text(request).await);

    assert_eq!(status.code, 415);
    assert_eq!(status.reason, "UnsupportedMediaType");
    assert_eq!(
        status.message,
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    );
    assert_eq!(
        fake.requests()[0].content_type.as_deref(),
        Some("application/x-forewarn")
    );
    assert!(
        fake.get("v1", "Node", None, "n1").unwrap()["spec"]
            .get("unschedulable")
            .is_none()
    );
}

#[tokio::test]
async fn field_and_label_selectors_filter_pods_across_namespaces() {
    let fake = KubeFake::start().await;
    fake.insert(running("a", "web-1", "n1", "web"));
    fake.insert(running("b", "web-2", "n1", "web"));
    fake.insert(running("a", "db-1", "n1", "db"));
    fake.insert(running("a", "web-3", "n2", "web"));
    fake.insert(common::pod("a", "done", "n1", "web", "Succeeded", false));
    let all: Api<Pod> = Api::all(fake.client());

    let names = |list: kube::api::ObjectList<Pod>| {
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let on_n1_web = all
        .list(
            &ListParams::default()
                .fields("spec.nodeName=n1")
                .labels("app=web"),
        )
        .await
        .unwrap();
    assert_eq!(names(on_n1_web), ["done", "web-1", "web-2"]);

    let running_on_n1 = all
        .list(
            &ListParams::default()
                .fields("spec.nodeName==n1,status.phase!=Succeeded")
                .labels("app in (web, db),!missing"),
        )
        .await
        .unwrap();
    assert_eq!(names(running_on_n1), ["db-1", "web-1", "web-2"]);

    let in_a: Api<Pod> = Api::namespaced(fake.client(), "a");
    let not_web = in_a
        .list(&ListParams::default().labels("app notin (web)"))
        .await
        .unwrap();
    assert_eq!(names(not_web), ["db-1"]);

    let list = in_a.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(list.items.len(), 4, "limit is ignored, lists are complete");
    assert_eq!(
        list.metadata.resource_version,
        Some(fake.resource_version().to_string())
    );
}

#[tokio::test]
async fn unsupported_field_selector_is_a_bad_request() {
    let fake = KubeFake::start().await;
    let pods: Api<Pod> = Api::all(fake.client());
    let nodes: Api<Node> = Api::all(fake.client());

    let status = api_status(
        pods.list(&ListParams::default().fields("spec.priority=1"))
            .await,
    );
    assert_eq!(status.code, 400);
    assert_eq!(status.reason, "BadRequest");
    assert_eq!(status.message, "field label not supported: spec.priority");

    // Nodes support spec.unschedulable.
    fake.insert(node("n1"));
    let mut cordoned = node("n2");
    cordoned["spec"]["unschedulable"] = json!(true);
    fake.insert(cordoned);
    let list = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("n1"));
}

#[tokio::test]
async fn delete_answers_like_the_real_registries() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    fake.insert(running("default", "p", "n1", "web"));
    let nodes: Api<Node> = Api::all(fake.client());
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");

    let uid = fake.get("v1", "Node", None, "n1").unwrap()["metadata"]["uid"].clone();
    let status = nodes
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a node delete answers a Status");
    assert!(status.is_success());
    let details = status.details.unwrap();
    assert_eq!(details.name, "n1");
    assert_eq!(details.kind, "nodes");
    assert_eq!(json!(details.uid), uid);
    assert!(fake.get("v1", "Node", None, "n1").is_none());

    let pod = pods
        .delete("p", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a pod delete answers the pod");
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));
    assert!(fake.get("v1", "Pod", Some("default"), "p").is_none());

    let status = api_status(nodes.delete("n1", &DeleteParams::default()).await);
    assert_eq!(status.code, 404);
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: None,
            uid: Some("not-the-uid".into()),
        }),
        ..DeleteParams::default()
    };

    let status = api_status(nodes.delete("n1", &params).await);

    assert_eq!(status.code, 409);
    assert!(
        status
            .message
            .starts_with("Operation cannot be fulfilled on nodes \"n1\": Precondition failed: UID in precondition: not-the-uid"),
        "{}",
        status.message
    );
    assert!(fake.get("v1", "Node", None, "n1").is_some());
}

#[tokio::test]
async fn status_subresource_and_main_resource_write_separate_parts() {
    let fake = KubeFake::start().await;
    fake.insert(node("n1"));
    let nodes: Api<Node> = Api::all(fake.client());

    let patched = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.status.unwrap().conditions.unwrap()[0].status,
        "False"
    );

    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}, "spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
    assert_eq!(
        patched.status.unwrap().conditions.unwrap().len(),
        1,
        "status is kept on writes to the main resource"
    );
}

#[tokio::test]
async fn unknown_paths_and_verbs_answer_statuses() {
    let fake = KubeFake::start().await;
    let client = fake.client();

    // A kind the fake does not serve (ConfigMaps it does, for the priority expander).
    let request = axum::http::Request::get("/api/v1/secrets")
        .body(Vec::new())
        .unwrap();
    let status = api_status(client.request_text(request).await);
    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");

    let request = axum::http::Request::put("/api/v1/nodes")
        .body(b"{}".to_vec())
        .unwrap();
    let status = api_status(client.request_text(request).await);
    assert_eq!(status.code, 405);
    assert_eq!(status.reason, "MethodNotAllowed");

    let request = axum::http::Request::delete("/api/v1/nodes")
        .body(Vec::new())
        .unwrap();
    assert_eq!(api_status(client.request_text(request).await).code, 405);
}

#[tokio::test]
async fn version_and_discovery_documents_satisfy_kube() {
    let fake = KubeFake::start().await;
    let client = fake.client();

    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    assert_eq!(info.minor, "33");

    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let (claims, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "NodeClaim")
        .expect("nodeclaims are discovered");
    assert_eq!(claims.plural, "nodeclaims");
    assert_eq!(claims.api_version, "karpenter.sh/v1");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(discovery.has_group("policy"));
    let core = discovery.get("").expect("core group");
    assert!(
        core.recommended_resources()
            .iter()
            .any(|(ar, _)| ar.plural == "pods")
    );
}

#[tokio::test]
async fn many_concurrent_writes_get_distinct_resource_versions() {
    let fake = KubeFake::start().await;
    let nodes: Api<Node> = Api::all(fake.client());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let nodes = nodes.clone();
        tasks.spawn(async move {
            let node: Node = serde_json::from_value(node(&format!("n{i}"))).unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap()
        });
    }
    let mut versions: Vec<String> = tasks
        .join_all()
        .await
        .into_iter()
        .map(|n| n.metadata.resource_version.unwrap())
        .collect();
    versions.sort();
    versions.dedup();

    assert_eq!(versions.len(), 64);
    assert_eq!(fake.list("v1", "Node").len(), 64);
    assert_eq!(fake.counters().requests, 64);
}
