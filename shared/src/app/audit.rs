//! What `forewarn audit` reads through: the cluster's workloads ([`WorkloadSource`]), from the
//! Kubernetes API ([`crate::adapters::workloads::KubeWorkloads`]) or a capture
//! ([`crate::adapters::snapshot`]); the audit itself is pure ([`crate::domain::audit`]).

use async_trait::async_trait;

use crate::domain::audit::ClusterView;
use crate::ports::PortError;

/// Where the cluster's workloads come from (`forewarn audit`): the Kubernetes API, or a capture.
#[async_trait]
pub trait WorkloadSource: Send + Sync {
    /// The workloads with their pods, the budgets, the nodes and the priority classes.
    async fn workloads(&self) -> Result<ClusterView, PortError>;
}
