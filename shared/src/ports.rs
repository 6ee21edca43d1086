//! The ports the pipeline talks through (the pool store port lives in [`crate::pool`]).

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::facts::{InstanceFacts, NodeFacts};

/// A lookup that failed (EC2, the Kubernetes API).
#[derive(Debug, thiserror::Error)]
#[error("{service}: {message}")]
pub struct DirectoryError {
    pub service: &'static str,
    pub message: String,
}

/// Where facts about instances come from: EC2 `DescribeInstances`, or a capture.
#[async_trait]
pub trait InstanceDirectory: Send + Sync {
    /// Facts for the instances it knows among `instance_ids` (one call for the whole batch).
    async fn describe(
        &self,
        instance_ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, DirectoryError>;
}

/// Where facts about nodes come from: the Kubernetes API, or a capture.
#[async_trait]
pub trait NodeDirectory: Send + Sync {
    /// Candidate nodes for these instances (it may return more; resolution picks).
    async fn nodes(&self, instances: &[InstanceFacts]) -> Result<Vec<NodeFacts>, DirectoryError>;

    /// Every node of the cluster (the sweeper looks for nodes whose instance is gone).
    async fn all(&self) -> Result<Vec<NodeFacts>, DirectoryError>;
}

/// No instance facts at all (replay without `--instances`).
pub struct NoInstances;

#[async_trait]
impl InstanceDirectory for NoInstances {
    async fn describe(
        &self,
        _instance_ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, DirectoryError> {
        Ok(BTreeMap::new())
    }
}

/// No nodes at all (replay without `--cluster-state`).
pub struct NoNodes;

#[async_trait]
impl NodeDirectory for NoNodes {
    async fn nodes(&self, _instances: &[InstanceFacts]) -> Result<Vec<NodeFacts>, DirectoryError> {
        Ok(Vec::new())
    }

    async fn all(&self) -> Result<Vec<NodeFacts>, DirectoryError> {
        Ok(Vec::new())
    }
}
