//! The upkeep of a cluster over the Kubernetes API (see [`crate::app::upkeep`]): the way back's
//! undo, the clean-up of expired placeholders and the preflight, by the same executor and
//! client as the cluster's interruption work.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::adapters::expander::KubeExpander;
use crate::adapters::kube::{
    ClusterClient, KubeExecutor, delete_expired, executor_failed, get_node,
};
use crate::adapters::preflight::{PreflightScope, prove};
use crate::app::fleet::Cluster;
use crate::app::upkeep::{ClusterUpkeep, Upkeep};
use crate::domain::clusters::ClusterId;
use crate::domain::cordon_record::{Undo, UndoOutcome};
use crate::domain::preflight::{Capability, Proof};
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
