//! The upkeep of a cluster over the Kubernetes API (see [`crate::app::upkeep`]): the way back's
//! undo, the clean-up of expired placeholders and the preflight, by the same executor and
//! client as the cluster's interruption work.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::adapters::expander::KubeExpander;
use ::kube::ResourceExt;
use ::kube::api::ListParams;
use k8s_openapi::api::core::v1::Pod;

use crate::adapters::kube::api::rate_limit::Lane;
use crate::adapters::kube::surge::{annotated_time, delete_all, list};
use crate::adapters::kube::{ClusterClient, KubeError, KubeExecutor, executor_failed, get_node};
use crate::adapters::preflight::{PreflightScope, prove};
use crate::app::fleet::Cluster;
use crate::app::upkeep::{ClusterUpkeep, Upkeep};
use crate::domain::clusters::ClusterId;
use crate::domain::cordon_record::{Undo, UndoOutcome};
use crate::domain::preflight::{Capability, Proof};
use crate::domain::surge::{ANNOTATION_EXPIRES, NAMESPACE};
use crate::ports::{Executor, PortError};

#[async_trait]
impl ClusterUpkeep for KubeExecutor {
    async fn undo(&self, undo: &Undo) -> Result<UndoOutcome, PortError> {
        let undone = match get_node(&self.clients, &undo.node).await {
            Ok(None) => Ok(UndoOutcome::NodeGone),
            Ok(Some(node)) => self.undo_cordon(node, undo).await,
            Err(e) => Err(e),
        };
        let doing = Some(format!("node {}", undo.node));
        undone.map_err(executor_failed(&undo.instance_id, doing))
    }

    async fn clean_placeholders(&self, now: DateTime<Utc>) -> Result<Vec<String>, PortError> {
        let dry_run = self.settings.dry_run;
        let cleaned = delete_expired(&self.clients, now, dry_run).await;
        cleaned.map_err(executor_failed("", Some("placeholders".into())))
    }

    async fn preflight(&self, group: &str, capabilities: &[Capability]) -> Vec<Proof> {
        let scope = PreflightScope {
            group,
            capabilities,
            reporting_instance: &self.settings.reporting_instance,
        };
        prove(&self.clients, &self.config, &scope).await
    }
}

/// Deletes the placeholders of forewarn's namespace that expired before `now` (the sweeper's
/// clean-up: a placeholder never outlives its event by more than a sweep); answers their
/// `namespace/name`. Every one is tried: a delete that fails does not stop the others, and the
/// failures are answered after them (an error naming how many). `dry_run`: deletes nothing,
/// answers the same.
async fn delete_expired(
    clients: &ClusterClient,
    now: DateTime<Utc>,
    dry_run: bool,
) -> Result<Vec<String>, KubeError> {
    // Behind any other request of the sweep, as a drain's are behind cordons.
    let clients = &clients.in_lane(Lane::Later);
    let all = list(clients, ListParams::default(), "placeholders").await?;
    // A placeholder without a readable expiry is forewarn's and of no use: it goes too.
    let expired: Vec<Pod> = (all.into_iter())
        .filter(|ph| annotated_time(ph, ANNOTATION_EXPIRES).is_none_or(|t| t < now))
        .collect();
    if !dry_run && let (_, Some(failed)) = delete_all(clients, &expired).await {
        return Err(failed);
    }
    Ok(expired
        .iter()
        .map(|ph| format!("{NAMESPACE}/{}", ph.name_any()))
        .collect())
}

/// A live cluster reached through `clients`: its nodes read through them, `executor` (when the
/// mode acts) carrying out its node actions and its upkeep, its priority expander's
/// ConfigMaps; no policy ConfigMap (the wiring adds it).
pub fn live_cluster(
    id: Option<ClusterId>,
    clients: ClusterClient,
    executor: Option<Arc<KubeExecutor>>,
) -> Cluster {
    let upkeep = Upkeep {
        actions: executor.clone().map(|e| e as Arc<dyn ClusterUpkeep>),
        expander: Arc::new(KubeExpander::new(clients.clone())),
    };
    Cluster {
        executor: executor.map(|e| e as Arc<dyn Executor>),
        upkeep: Some(Arc::new(upkeep)),
        ..Cluster::new(id, Arc::new(clients))
    }
}
