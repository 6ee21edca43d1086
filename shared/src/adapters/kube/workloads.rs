//! The audit's view of the live cluster: one `list` (paged) of each kind it reads —
//! Deployments, StatefulSets, ReplicaSets, Pods, PodDisruptionBudgets (all namespaces),
//! PriorityClasses and Nodes. Read only: `infra/k8s/audit-rbac.yaml` grants exactly these lists.

use std::fmt::Debug;

use ::kube::{Api, Resource};
use async_trait::async_trait;
use serde::de::DeserializeOwned;

use super::api::retry;
use super::connect::ClusterClient;
use super::error::KubeError;
use crate::adapters::workloads::{RawWorkloads, view};
use crate::domain::audit::ClusterView;
use crate::ports::{DirectoryError, FailureKind, WorkloadSource};

const SERVICE: &str = "kubernetes";

/// [`WorkloadSource`] over the Kubernetes API.
#[derive(Debug, Clone)]
pub struct KubeWorkloads {
    clients: ClusterClient,
}

impl KubeWorkloads {
    pub fn new(clients: ClusterClient) -> KubeWorkloads {
        KubeWorkloads { clients }
    }

    /// Every object of a kind, in every namespace (see [`super::api::retry::list_all`]).
    async fn list<K>(&self, client: &::kube::Client, what: &str) -> Result<Vec<K>, DirectoryError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(client.clone());
        retry::list_all(&self.clients, &api, what)
            .await
            .map_err(error)
    }
}

/// A call that failed, with its kind.
fn error(e: impl Into<KubeError>) -> DirectoryError {
    let e = e.into();
    DirectoryError::new(SERVICE, e.kind(), e)
}

#[async_trait]
impl WorkloadSource for KubeWorkloads {
    #[tracing::instrument(skip_all, err)]
    async fn workloads(&self) -> Result<ClusterView, DirectoryError> {
        let client = self.clients.client().await.map_err(error)?;
        let raw = RawWorkloads {
            deployments: self.list(&client, "deployments").await?,
            stateful_sets: self.list(&client, "statefulsets").await?,
            replica_sets: self.list(&client, "replicasets").await?,
            pods: self.list(&client, "pods").await?,
            budgets: self.list(&client, "poddisruptionbudgets").await?,
            priority_classes: self.list(&client, "priorityclasses").await?,
            nodes: self.list(&client, "nodes").await?,
        };
        view(&raw).map_err(|e| DirectoryError::new(SERVICE, FailureKind::Invalid, e))
    }
}
