//! Delete: the Karpenter NodeClaim (`karpenter.sh/v1`, cluster-scoped) or the Cluster API
//! Machine (`cluster.x-k8s.io/v1beta1`, namespaced) that owns the node — their controllers drain
//! the node and replace it — otherwise the Node itself.
//!
//! The object is read first: when it is gone, or already being deleted (`deletionTimestamp`,
//! finalizers at work), nothing is sent, so a redelivered event writes nothing. A 404 on the
//! delete itself is success too.

use ::kube::Api;
use ::kube::api::{ApiResource, DeleteParams, DynamicObject};
use ::kube::core::GroupVersionKind;

use super::api::with_retry;
use super::connect::ClusterClient;
use super::error::KubeError;
use crate::domain::plan::Target;

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted (`nodeclaim/x`, `machine/ns/x`, `node/x`).
    Deleted { target: String },
    /// Nothing of that name: deleted before.
    AlreadyGone { target: String },
    /// Deletion under way (`deletionTimestamp` set): nothing sent.
    AlreadyDeleting { target: String },
    /// Dry run.
    WouldDelete { target: String },
}

impl DeleteOutcome {
    pub fn summary(&self) -> String {
        match self {
            DeleteOutcome::Deleted { target } => format!("deleted {target}"),
            DeleteOutcome::AlreadyGone { target } => format!("{target} already gone"),
            DeleteOutcome::AlreadyDeleting { target } => format!("{target} already being deleted"),
            DeleteOutcome::WouldDelete { target } => format!("would delete {target}"),
        }
    }
}

pub(crate) fn nodeclaim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
        "nodeclaims",
    )
}

pub(crate) fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"),
        "machines",
    )
}

/// Deletes `target` unless it is gone or going.
pub(crate) async fn delete_target(
    clients: &ClusterClient,
    target: &Target,
    dry_run: bool,
) -> Result<DeleteOutcome, KubeError> {
    let described = target.to_string();
    let client = clients.client().await?;
    let api: Api<DynamicObject> = match target {
        Target::Node { .. } => Api::all_with(
            client,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        ),
        Target::NodeClaim { .. } => Api::all_with(client, &nodeclaim_resource()),
        Target::Machine { namespace, .. } => {
            Api::namespaced_with(client, namespace, &machine_resource())
        }
    };
    let name = match target {
        Target::Node { name } | Target::NodeClaim { name } | Target::Machine { name, .. } => name,
    };
    let existing = with_retry("get", &described, || api.get_opt(name)).await?;
    let Some(existing) = existing else {
        return Ok(DeleteOutcome::AlreadyGone { target: described });
    };
    if existing.metadata.deletion_timestamp.is_some() {
        return Ok(DeleteOutcome::AlreadyDeleting { target: described });
    }
    if dry_run {
        return Ok(DeleteOutcome::WouldDelete { target: described });
    }
    // Only the object read: if it was replaced by one of the same name meanwhile, leave that be.
    let params = DeleteParams {
        preconditions: existing
            .metadata
            .uid
            .clone()
            .map(|uid| ::kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
        ..DeleteParams::default()
    };
    match with_retry("delete", &described, || api.delete(name, &params)).await {
        Ok(_) => {
            tracing::info!(target = %described, "deleted");
            Ok(DeleteOutcome::Deleted { target: described })
        }
        Err(e) if e.is_not_found() => Ok(DeleteOutcome::AlreadyGone { target: described }),
        // The uid precondition failed: the object of that name is a new one.
        Err(e) if e.is_conflict() => Ok(DeleteOutcome::AlreadyGone { target: described }),
        Err(e) => Err(KubeError::Api(e)),
    }
}
