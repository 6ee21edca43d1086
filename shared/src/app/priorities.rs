//! Priorities from pools: the Cluster Autoscaler's priority expander ConfigMap written from the
//! user's base priorities, with the node groups whose pools are being reclaimed moved below the
//! lowest base priority until their pools' windows end (see [`crate::domain::priorities`]). Run
//! by the pool sweeper on its schedule and by `forewarn priorities`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::expander::{
    ANNOTATION, BASE_CONFIGMAP, EXPANDER_CONFIGMAP, ExpanderConfig, MANAGED_BY_LABEL, NAMESPACE,
};
use crate::domain::pool::PoolQuery;
use crate::domain::priorities::{
    AsgDescription, BasePriorities, HotGroup, HotShare, NodeGroup, PriorityError, demote,
    hot_groups, node_group,
};
use crate::ports::{BoxError, FailureKind, Place, PoolStore, PortError};

/// Where node groups come from: Auto Scaling `DescribeAutoScalingGroups`, or a capture.
#[async_trait]
pub trait NodeGroupSource: Send + Sync {
    /// Every Auto Scaling group it knows (the caller picks this cluster's), with the instance
    /// type and market type of their launch templates resolved where it can.
    async fn describe(&self) -> Result<Vec<AsgDescription>, PortError>;

    /// [`NodeGroupSource::describe`] in the account and region of `place` (a cluster's: a
    /// member account's groups through its role); a source of one place (a capture) answers as
    /// `describe`.
    async fn describe_at(&self, place: &Place) -> Result<Vec<AsgDescription>, PortError> {
        let _ = place;
        self.describe().await
    }
}

/// The expander ConfigMap as read, with its resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredExpander {
    pub config: ExpanderConfig,
    pub resource_version: String,
}

/// A read or write of the expander's ConfigMaps that failed.
#[derive(Debug, thiserror::Error)]
pub enum ExpanderError {
    /// Someone else wrote it since it was read (HTTP 409): read again.
    #[error("{verb} configmap/{object}: conflict (changed since it was read)")]
    Conflict { verb: &'static str, object: String },
    #[error("{verb} configmap/{object}: {message}")]
    Api {
        verb: &'static str,
        object: String,
        /// What the API server (or the client) said.
        message: String,
        /// What kind of failure: whether the call is worth trying again.
        kind: FailureKind,
        /// The client's error.
        #[source]
        source: Option<BoxError>,
    },
}

/// The Cluster Autoscaler's priority expander ConfigMap and the user's base priorities.
#[async_trait]
pub trait ExpanderStore: Send + Sync {
    /// The base priorities' text (`forewarn-priority-base`, key `priorities`), when there is one.
    async fn base(&self) -> Result<Option<String>, ExpanderError>;

    /// The expander ConfigMap, when there is one.
    async fn current(&self) -> Result<Option<StoredExpander>, ExpanderError>;

    /// Creates the expander ConfigMap.
    async fn create(&self, config: &ExpanderConfig) -> Result<(), ExpanderError>;

    /// Replaces the expander ConfigMap read at `resource_version`.
    async fn replace(
        &self,
        config: &ExpanderConfig,
        resource_version: &str,
    ) -> Result<(), ExpanderError>;
}

/// How often a write is tried again after a conflict (someone wrote in between).
pub const WRITE_ATTEMPTS: u32 = 4;

/// The manifest the expander ConfigMap is created from when forewarn may not create it (the
/// sweeper: its Kubernetes group has no `create` on ConfigMaps).
pub const EXPANDER_MANIFEST: &str = "infra/k8s/priority-expander.yaml";

/// How the priorities are computed and written.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PrioritySettings {
    /// The share of a group's pools that must be unavailable for it to be demoted.
    pub hot_share: HotShare,
    /// Overwrite an expander ConfigMap forewarn did not create.
    pub take_over: bool,
}

/// Where the base priorities come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseSource {
    /// Text holding the expander's `priorities` YAML; `name` says where it came from.
    Text { text: String, name: String },
    /// The ConfigMap `kube-system/forewarn-priority-base`, key `priorities`.
    ConfigMap,
}

/// One run's inputs.
pub struct Priorities<'a> {
    pub cluster: &'a str,
    /// The cluster's account and region: where its node groups are described.
    pub place: crate::domain::clusters::Place,
    pub groups: &'a dyn NodeGroupSource,
    pub store: &'a dyn PoolStore,
    /// The cluster's ConfigMaps; `None`: compute and show only.
    pub expander: Option<&'a dyn ExpanderStore>,
    pub base: BaseSource,
    pub settings: PrioritySettings,
    /// Write the ConfigMap (else say what would change).
    pub write: bool,
    /// Create the ConfigMap when there is none: the `forewarn priorities` command, run with a
    /// person's credentials. The sweeper does not (its Kubernetes group may not create
    /// ConfigMaps: a create cannot be limited by name): it reports [`Change::Missing`].
    pub create: bool,
}

/// What became of the expander ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// No base priorities: nothing computed, nothing written.
    NoBase,
    /// No cluster to compare with: computed only.
    NotCompared,
    Unchanged,
    Created,
    Updated,
    WouldCreate,
    WouldUpdate,
    /// There is no expander ConfigMap and this run may not create it: it must be created from
    /// [`EXPANDER_MANIFEST`].
    Missing,
}

/// What a run found and did.
#[derive(Debug, Clone)]
pub struct PriorityOutcome {
    /// This cluster's node groups.
    pub groups: Vec<NodeGroup>,
    pub hot: Vec<HotGroup>,
    /// What forewarn wants the ConfigMap to hold (`None` without base priorities).
    pub desired: Option<ExpanderConfig>,
    pub change: Change,
}

/// A run that could not complete.
#[derive(Debug, thiserror::Error)]
pub enum PriorityRunError {
    #[error("reading the node groups: {0}")]
    Groups(#[source] PortError),
    #[error(transparent)]
    Store(#[from] PortError),
    #[error(transparent)]
    Base(#[from] PriorityError),
    #[error(transparent)]
    Expander(#[from] ExpanderError),
    #[error(
        "configmap {NAMESPACE}/{EXPANDER_CONFIGMAP} exists and was not created by forewarn (no label {MANAGED_BY_LABEL}=forewarn): not overwriting it; take it over with --take-over (the sweeper: its priorities setting's take-over)"
    )]
    NotOurs,
    #[error(
        "configmap {NAMESPACE}/{EXPANDER_CONFIGMAP}: still conflicting after {WRITE_ATTEMPTS} attempts (it keeps changing)"
    )]
    Conflicts,
}

impl Priorities<'_> {
    /// Reads the base, the groups and the unavailable pools at `now`, computes the priorities
    /// and writes them when they differ from the ConfigMap's (re-reading it after a conflict).
    pub async fn run(&self, now: DateTime<Utc>) -> Result<PriorityOutcome, PriorityRunError> {
        let configmap = || format!("configmap {NAMESPACE}/{BASE_CONFIGMAP}");
        let (text, name) = match (&self.base, self.expander) {
            (BaseSource::Text { text, name }, _) => (Some(text.clone()), name.clone()),
            (BaseSource::ConfigMap, Some(e)) => (e.base().await?, configmap()),
            (BaseSource::ConfigMap, None) => (None, configmap()),
        };
        let base = BasePriorities::parse(text.as_deref().unwrap_or(""), &name)?;
        if base.is_empty() {
            tracing::info!(
                source = %name,
                "no base priorities: the priority expander is left alone"
            );
            return Ok(PriorityOutcome {
                groups: Vec::new(),
                hot: Vec::new(),
                desired: None,
                change: Change::NoBase,
            });
        }
        let described = self
            .groups
            .describe_at(&self.place)
            .await
            .map_err(PriorityRunError::Groups)?;
        let groups: Vec<NodeGroup> = described
            .iter()
            .filter_map(|asg| node_group(asg, self.cluster))
            .collect();
        for g in groups.iter().filter(|g| g.instance_types.is_empty()) {
            tracing::warn!(group = %g.name, "node group without a known instance type: never demoted");
        }
        let records = self.store.pools(&PoolQuery::default(), now).await?;
        let hot = hot_groups(&groups, &records, self.settings.hot_share, now);
        let (map, demotion) = demote(&base, &groups, &hot);
        for g in &demotion.unranked {
            tracing::info!(group = %g, "hot node group without a base priority: left alone");
        }
        let desired = ExpanderConfig::new(&map, &demotion);
        let change = match self.expander {
            None => Change::NotCompared,
            Some(expander) => self.reconcile(expander, &desired).await?,
        };
        tracing::info!(
            groups = groups.len(),
            hot = hot.len(),
            demoted = demotion.groups.len(),
            ?change,
            "priorities"
        );
        Ok(PriorityOutcome {
            groups,
            hot,
            desired: Some(desired),
            change,
        })
    }

    async fn reconcile(
        &self,
        expander: &dyn ExpanderStore,
        desired: &ExpanderConfig,
    ) -> Result<Change, PriorityRunError> {
        for _ in 0..WRITE_ATTEMPTS {
            let result = match expander.current().await? {
                None if !self.create => {
                    tracing::warn!(
                        configmap = %format!("{NAMESPACE}/{EXPANDER_CONFIGMAP}"),
                        manifest = EXPANDER_MANIFEST,
                        "the priority expander ConfigMap does not exist and is not created here \
                         (forewarn's Kubernetes groups may not create ConfigMaps): create it once \
                         with `kubectl create -f {EXPANDER_MANIFEST}`"
                    );
                    return Ok(Change::Missing);
                }
                None if !self.write => return Ok(Change::WouldCreate),
                None => expander.create(desired).await.map(|()| Change::Created),
                Some(current) => {
                    if !current.config.owned() && !self.settings.take_over {
                        return Err(PriorityRunError::NotOurs);
                    }
                    if !desired.differs_from(&current.config) {
                        return Ok(Change::Unchanged);
                    }
                    if !self.write {
                        return Ok(Change::WouldUpdate);
                    }
                    // Keep the labels and annotations of others; ours win.
                    let mut merged = current.config.clone();
                    merged.annotations.remove(ANNOTATION);
                    merged.labels.extend(desired.labels.clone());
                    merged.annotations.extend(desired.annotations.clone());
                    merged.priorities = desired.priorities.clone();
                    expander
                        .replace(&merged, &current.resource_version)
                        .await
                        .map(|()| Change::Updated)
                }
            };
            match result {
                Ok(change) => return Ok(change),
                Err(ExpanderError::Conflict { .. }) => {
                    tracing::info!("the expander ConfigMap changed meanwhile: reading it again");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(PriorityRunError::Conflicts)
    }
}
