//! What the pool sweeper (and `forewarn reconcile`, `forewarn priorities`) does in a cluster
//! beside the handler's work: the way back's undo of a cordon, the clean-up of placeholders
//! left by drains, the preflight of forewarn's writes, and the priority expander's ConfigMaps.
//! None of it is on the interruption path: a cluster of the fleet carries it opaque
//! ([`Cluster::upkeep`]), and only these callers open it ([`Upkeep::of`]).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::app::fleet::Cluster;
use crate::app::priorities::ExpanderStore;
use crate::domain::cordon_record::{Undo, UndoOutcome};
use crate::domain::preflight::{Capability, Proof};
use crate::ports::PortError;

/// The writes of the upkeep (the Kubernetes API).
#[async_trait]
pub trait ClusterUpkeep: Send + Sync {
    /// Undoes forewarn's cordon of `undo.node` (the way back, see [`crate::domain::wayback`]):
    /// the taints forewarn put (its own key and those the record lists), the cordon, the
    /// load-balancer label forewarn added and the record go, and an Event says why — only when,
    /// read live, the node still runs `undo.instance_id`, is not control-plane, and carries one
    /// of those taints and exactly the record `undo.record`;
    /// otherwise it is left as it is ([`UndoOutcome::Refused`]). Idempotent.
    async fn undo(&self, undo: &Undo) -> Result<UndoOutcome, PortError>;

    /// Deletes the placeholders (see [`crate::domain::surge`]) that expired before `now`: the
    /// sweeper's clean-up of what a drain could not delete itself. Answers their
    /// `namespace/name` (in a dry run, those it would delete).
    async fn clean_placeholders(&self, now: DateTime<Utc>) -> Result<Vec<String>, PortError>;

    /// The preflight (see [`crate::domain::admission`]): each of `capabilities` sent to the
    /// cluster as a server-side dry run, as the upkeep's own identity (named `group` in the
    /// proofs), and what the API server's chain said. Nothing is stored.
    async fn preflight(&self, group: &str, capabilities: &[Capability]) -> Vec<Proof>;
}

/// A cluster's upkeep services.
#[derive(Clone)]
pub struct Upkeep {
    /// `None`: nothing is acted on (the mode only plans): the way back reports only, no
    /// placeholder is deleted, no preflight runs.
    pub actions: Option<Arc<dyn ClusterUpkeep>>,
    /// The Cluster Autoscaler priority expander's ConfigMaps.
    pub expander: Arc<dyn ExpanderStore>,
}

impl Upkeep {
    /// The upkeep `cluster` carries, when it has one (a live cluster).
    pub fn of(cluster: &Cluster) -> Option<Arc<Upkeep>> {
        cluster.upkeep.clone()?.downcast::<Upkeep>().ok()
    }

    /// The upkeep's actions in `cluster`, when it has any.
    pub fn actions_of(cluster: &Cluster) -> Option<Arc<dyn ClusterUpkeep>> {
        Upkeep::of(cluster)?.actions.clone()
    }
}
