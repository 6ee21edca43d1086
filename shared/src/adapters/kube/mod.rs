//! The Kubernetes adapter: the connection to the API server, the [`NodeDirectory`] that finds
//! the nodes of a batch of instances, and the [`Executor`] that carries out a plan's node actions
//! (cordon, drain, delete, Kubernetes Events) and completes ASG lifecycle actions.
//!
//! - [`connect`]: kubeconfig inference locally; on EKS an IAM authentication token
//!   ([`eks_token`]) refreshed before it expires ([`ClusterClient`]).
//! - [`ClusterClient`] is the [`NodeDirectory`] (`directory`): one `get` per instance by
//!   private DNS name, at most one `list`.
//! - [`KubeExecutor`]: each action idempotent; a dry run takes the same path without writing.
//!
//! Every request the adapter sends, and so every RBAC rule it needs, is listed in
//! `infra/k8s/rbac.yaml` (the integration tests check the two agree).
//!
//! [`NodeDirectory`]: crate::ports::NodeDirectory
//! [`Executor`]: crate::ports::Executor

pub(crate) mod api;
mod connect;
pub(crate) mod cordon;
mod delete;
mod directory;
pub(crate) mod drain;
mod eks;
mod error;
pub(crate) mod events;
mod execute;
mod executor;
mod launch;
mod node_facts;
mod outcome;
// The audit reads quantities as placeholders do (`adapters::workloads`).
pub(crate) mod placeholder;
mod policy;
pub(crate) mod surge;

pub use api::FIELD_MANAGER;
pub use connect::{
    ClusterAccess, ClusterClient, EksAccess, EksClusters, Impersonation, KUBE_SHARE,
    KubeconfigContexts, connect, connect_eks, has_context,
};
pub(crate) use cordon::get_node;
pub use eks::TOKEN_CACHE_LIFETIME;
#[cfg(any(test, feature = "fixtures"))]
pub use eks::url_from_token;
pub use error::{ApiError, KubeError};
pub use events::{REPORTING_CONTROLLER, event_name};
pub(crate) use execute::failed as executor_failed;
pub use executor::{ExecutorSettings, KubeExecutor};
pub use node_facts::node_facts;
pub use outcome::{DrainReport, EventOutcome, NodeOutcome};
pub use policy::{KubePolicy, POLICY_CONFIGMAP, POLICY_KEY, POLICY_NAMESPACE};
