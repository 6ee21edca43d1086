//! The Kubernetes adapter's error type.

use super::api::ApiError;
use super::connect::ConnectError;
use crate::domain::facts::NotItsNode;
use crate::ports::LifecycleError;

/// A Kubernetes action that failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(
        "patch node/{node}: still conflicting after {attempts} attempts (the node keeps changing)"
    )]
    Conflicts { node: String, attempts: u32 },
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
}

/// Why an action was refused without any write: what it would act on, as just read, failed its
/// verification (see the executor's module documentation and [`super::delete::verify_target`]).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The node is not the action's instance's, or is control-plane.
    #[error(transparent)]
    Node(#[from] NotItsNode),
    /// In a drain pass: an operator removed forewarn's taint, which ends the drain.
    #[error(
        "forewarn's taint {taint} is no longer on node/{node} (removed by someone else): the \
         drain ends"
    )]
    TaintRemoved { taint: String, node: String },
    /// A delete's target is a control-plane Machine.
    #[error("{target} is a control-plane Machine (label {label})")]
    ControlPlaneMachine { target: String, label: &'static str },
    /// A delete's target names another instance as its provider id.
    #[error("{target} is instance {other}'s (provider id), not the event's {instance_id}")]
    OtherInstance {
        target: String,
        other: String,
        instance_id: String,
    },
    /// A delete's target, without a provider id, is another node's.
    #[error(
        "{target} is node/{name}'s, not the event's instance {instance_id}'s{}",
        .node.as_ref().map(|n| format!(" (node/{n})")).unwrap_or_default()
    )]
    OtherNode {
        target: String,
        /// The node the target names.
        name: String,
        instance_id: String,
        /// The instance's live node, when there is one.
        node: Option<String>,
    },
    /// A delete's target names neither a provider id nor a node.
    #[error(
        "{target} names neither a provider id nor a node: it cannot be verified to be instance \
         {instance_id}'s"
    )]
    Unverifiable { target: String, instance_id: String },
    /// A Node target that does not read as a Node.
    #[error("{target} could not be read as a Node: {source}")]
    NotANode {
        target: String,
        #[source]
        source: ::kube::core::dynamic::ParseDynamicObjectError,
    },
}
