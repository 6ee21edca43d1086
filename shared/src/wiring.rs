//! Which cluster adapter to use, from the environment: shared by the Lambda functions and the
//! `forewarn` command.

use std::sync::Arc;

use crate::config::Config;
use crate::kube::{
    AsgLifecycle, ClusterAccess, ClusterClient, ExecutorSettings, KubeExecutor, KubeNodeDirectory,
    connect_eks,
};
use crate::lambda::SetupError;
use crate::pipeline::Executor;
use crate::ports::{NoNodes, NodeDirectory};

/// The node directory and executor of a live cluster.
pub type Cluster = (Arc<dyn NodeDirectory>, Option<Arc<dyn Executor>>);

/// Connects to the cluster `access` names and builds the directory and the executor (a dry
/// run executor reads and reports, writes nothing). The ASG lifecycle actions are completed
/// through the SDK configuration `sdk`.
pub async fn live_cluster(
    access: &ClusterAccess,
    lookup: &impl Fn(&str) -> Option<String>,
    sdk: &aws_config::SdkConfig,
    config: &Config,
    dry_run: bool,
) -> Result<Cluster, SetupError> {
    let clients: ClusterClient = match access {
        ClusterAccess::Eks(eks) => connect_eks(eks, sdk).await,
        ClusterAccess::Kubeconfig => crate::kube::connect(access).await,
    }
    .map_err(|e| SetupError::Cluster(e.to_string()))?;
    let settings = ExecutorSettings::from_lookup(lookup)?;
    let executor = KubeExecutor::new(clients.clone(), config)
        .with_settings(settings)
        .with_lifecycle(Arc::new(AsgLifecycle::new(sdk)))
        .dry_run(dry_run);
    Ok((
        Arc::new(KubeNodeDirectory::new(clients)),
        Some(Arc::new(executor)),
    ))
}

/// The Lambda's choice: captured state when `FOREWARN_CLUSTER_STATE_FILE` names one (never any
/// action); EKS when `FOREWARN_EKS_CLUSTER` is set; kubeconfig inference when `KUBECONFIG` is
/// set or the function runs in a pod; otherwise no cluster at all (plans without nodes, with a
/// warning), which is what a local `cargo lambda watch` without a cluster gets.
pub async fn cluster(
    lookup: &impl Fn(&str) -> Option<String>,
    sdk: &aws_config::SdkConfig,
    config: &Config,
    dry_run: bool,
) -> Result<Cluster, SetupError> {
    let set = |name: &str| lookup(name).is_some_and(|v| !v.trim().is_empty());
    if let Some(path) = lookup("FOREWARN_CLUSTER_STATE_FILE").filter(|p| !p.trim().is_empty()) {
        let state = crate::snapshot::load_cluster_state(std::path::Path::new(&path))?;
        return Ok((Arc::new(state), None));
    }
    let access = ClusterAccess::from_lookup(lookup);
    let live = matches!(access, ClusterAccess::Eks(_))
        || set("KUBECONFIG")
        || set("KUBERNETES_SERVICE_HOST");
    if !live {
        tracing::warn!(
            "no cluster configured (FOREWARN_EKS_CLUSTER, KUBECONFIG, FOREWARN_CLUSTER_STATE_FILE): planning without nodes"
        );
        return Ok((Arc::new(NoNodes), None));
    }
    live_cluster(&access, lookup, sdk, config, dry_run).await
}
