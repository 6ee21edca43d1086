//! The Kubernetes adapter's error type.

use super::api::ApiError;
use super::connect::ConnectError;
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
