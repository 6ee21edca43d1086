//! NodeClaims and Machines through `Api<DynamicObject>`.

mod common;

use common::api_status;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube_fake::KubeFake;
use serde_json::json;

fn nodeclaims() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
        "nodeclaims",
    )
}

fn machines() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"),
        "machines",
    )
}

fn claim(name: &str, node: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "spot"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": node, "providerID": format!("aws:///us-east-1a/i-{node}")},
    }))
    .unwrap()
}

#[tokio::test]
async fn nodeclaims_are_cluster_scoped_and_drop_status_on_create() {
    let fake = KubeFake::start().await;
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());

    let created = api
        .create(&PostParams::default(), &claim("spot-abc", "n1"))
        .await
        .unwrap();

    assert_eq!(created.types.as_ref().unwrap().kind, "NodeClaim");
    assert!(created.metadata.uid.is_some());
    assert!(
        created.data.get("status").is_none(),
        "a CRD with a status subresource drops status on create"
    );
    assert_eq!(fake.writes()[0].path, "/apis/karpenter.sh/v1/nodeclaims");
    let listed = api
        .list(&ListParams::default().labels("karpenter.sh/nodepool=spot"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].types.as_ref().unwrap().api_version,
        "karpenter.sh/v1",
        "items of a custom resource list carry their TypeMeta"
    );
}

#[tokio::test]
async fn seeded_nodeclaim_keeps_status_and_can_be_found_by_name() {
    let fake = KubeFake::start().await;
    fake.insert(claim("spot-abc", "n1"));
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());

    let got = api.get("spot-abc").await.unwrap();
    assert_eq!(got.data["status"]["nodeName"], "n1");

    let by_name = api
        .list(&ListParams::default().fields("metadata.name=spot-abc"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);

    let status = api_status(
        api.list(&ListParams::default().fields("status.nodeName=n1"))
            .await,
    );
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "\"status.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
}

#[tokio::test]
async fn strategic_merge_patch_on_a_custom_resource_is_415() {
    let fake = KubeFake::start().await;
    fake.insert(claim("spot-abc", "n1"));
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());

    let status = api_status(
        api.patch(
            "spot-abc",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await,
    );
    assert_eq!(status.code, 415);
    assert_eq!(
        status.message,
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );

    let patched = api
        .patch(
            "spot-abc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.annotations.unwrap()["a"], "b");
}

#[tokio::test]
async fn replacing_a_custom_resource_requires_a_resource_version() {
    let fake = KubeFake::start().await;
    fake.insert(claim("spot-abc", "n1"));
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());
    let mut obj = api.get("spot-abc").await.unwrap();
    obj.metadata.resource_version = None;

    let status = api_status(api.replace("spot-abc", &PostParams::default(), &obj).await);

    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "NodeClaim.karpenter.sh \"spot-abc\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
}

#[tokio::test]
async fn deleting_a_nodeclaim_with_a_finalizer_waits_for_the_finalizer() {
    let fake = KubeFake::start().await;
    let mut seeded = serde_json::to_value(claim("spot-abc", "n1")).unwrap();
    seeded["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    fake.insert(seeded);
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());

    let pending = api
        .delete("spot-abc", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a deletion held by finalizers answers the object");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(api.get("spot-abc").await.is_ok());

    api.patch(
        "spot-abc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_status(api.get("spot-abc").await).code, 404);
}

#[tokio::test]
async fn deleting_a_nodeclaim_without_finalizers_answers_a_status() {
    let fake = KubeFake::start().await;
    fake.insert(claim("spot-abc", "n1"));
    let api: Api<DynamicObject> = Api::all_with(fake.client(), &nodeclaims());

    let status = api
        .delete("spot-abc", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("Status");
    let details = status.details.unwrap();
    assert_eq!(details.group, "karpenter.sh");
    assert_eq!(details.kind, "nodeclaims");
    assert!(
        fake.get("karpenter.sh/v1", "NodeClaim", None, "spot-abc")
            .is_none()
    );
}

#[tokio::test]
async fn machines_are_namespaced() {
    let fake = KubeFake::start().await;
    fake.insert(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "md-0-abc", "namespace": "capi", "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
        "spec": {"clusterName": "prod"},
        "status": {"nodeRef": {"kind": "Node", "name": "n1"}},
    }));
    let in_capi: Api<DynamicObject> = Api::namespaced_with(fake.client(), "capi", &machines());
    let in_default: Api<DynamicObject> =
        Api::namespaced_with(fake.client(), "default", &machines());
    let everywhere: Api<DynamicObject> = Api::all_with(fake.client(), &machines());

    assert_eq!(
        in_capi.get("md-0-abc").await.unwrap().data["status"]["nodeRef"]["name"],
        "n1"
    );
    let status = api_status(in_default.get("md-0-abc").await);
    assert_eq!(status.code, 404);
    assert_eq!(
        status.message,
        "machines.cluster.x-k8s.io \"md-0-abc\" not found"
    );
    assert_eq!(
        everywhere
            .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=prod"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    in_capi
        .delete("md-0-abc", &DeleteParams::default())
        .await
        .unwrap();
    assert!(fake.list("cluster.x-k8s.io/v1beta1", "Machine").is_empty());
}
