//! The clusters one deployment serves (`FOREWARN_CLUSTERS`: a list, or `*` for every EKS
//! cluster of the account and region), each reached through services of its own: its node
//! directory, its executor (its own client, rate limit and retry budget), its policy ConfigMap
//! and its priority expander. A batch's records are split by the cluster of their instances
//! ([`crate::domain::clusters`]) and each cluster's share runs through the pipeline on its own
//! services, the clusters' shares at once: one cluster's outage, throttling or mass
//! interruption delays no other's cordons.
//!
//! A cluster is connected to the first time one of its records comes (and at a cold start,
//! for a list), and stays connected; a cluster that cannot be reached fails its own records
//! (they come back) and is tried again with the next batch.

use std::collections::BTreeMap;
use std::sync::Arc;

pub mod split;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use crate::app::policy::PolicyCache;
use crate::domain::config::Config;
use crate::ports::{
    BoxError, Clock, ClusterCatalog, DirectoryError, Executor, ExpanderStore, FailureKind, NoNodes,
    NodeDirectory,
};

/// How long the list of every cluster (`*`) is used before it is read again.
pub const RELIST: Duration = Duration::minutes(5);
/// How long a cluster whose share of a batch failed whole (its API server down, or not
/// reached) is left alone in batches that span several clusters: its records there fail at once
/// and come back, and one share tries it again after this (see [`Fleet::trouble`]).
pub const BREAK: Duration = Duration::seconds(10);

/// How long at least between two reads of the list when an instance names a cluster the list
/// does not have (one created since): it is read again at once, then not before this.
pub const RELIST_UNKNOWN: Duration = Duration::seconds(30);

/// Everything forewarn reaches one cluster through.
#[derive(Clone)]
pub struct Cluster {
    /// Its name (`None`: the one cluster of a deployment that names none).
    pub name: Option<String>,
    pub nodes: Arc<dyn NodeDirectory>,
    /// `None`: nothing is acted on (a capture, or no live cluster).
    pub executor: Option<Arc<dyn Executor>>,
    /// The cluster's policy ConfigMap, read at most once a minute (see
    /// [`crate::app::policy`]); `None`: the settings' policy as it is.
    pub policies: Option<Arc<PolicyCache>>,
    /// The Cluster Autoscaler priority expander's ConfigMaps (`None`: none to update).
    pub expander: Option<Arc<dyn ExpanderStore>>,
}

impl Cluster {
    /// A cluster of these nodes, nothing else: no executor, no policy ConfigMap, no expander.
    pub fn new(name: Option<String>, nodes: Arc<dyn NodeDirectory>) -> Cluster {
        Cluster {
            name,
            nodes,
            executor: None,
            policies: None,
            expander: None,
        }
    }

    /// No cluster at all: no node is found, nothing is acted on.
    pub fn none() -> Cluster {
        Cluster::new(None, Arc::new(NoNodes))
    }

    /// The configuration to decide by in this cluster now: `base` for this cluster (its name,
    /// unless it has none), with its policy ConfigMap's policy when it has one.
    pub async fn config(&self, base: &Config, clock: &dyn Clock) -> Config {
        let mut config = base.clone();
        if self.name.is_some() {
            config.cluster_name.clone_from(&self.name);
        }
        if let Some(cache) = &self.policies {
            config.policy = cache.policy(clock).await;
        }
        config
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("executor", &self.executor.is_some())
            .field("policies", &self.policies.is_some())
            .field("expander", &self.expander.is_some())
            .finish_non_exhaustive()
    }
}

/// A served cluster that could not be reached: its records fail and come back.
#[derive(Debug, thiserror::Error)]
#[error("cluster {cluster}: {source}")]
pub struct Unreachable {
    pub cluster: String,
    /// Whether trying again may succeed.
    pub kind: FailureKind,
    #[source]
    pub source: BoxError,
}

/// Connects to a served cluster by its name (the wiring's: EKS `DescribeCluster` and an IAM
/// token, or the kubeconfig context of that name), with services of its own.
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self, name: &str) -> Result<Cluster, Unreachable>;
}

/// Which clusters are served.
enum Served {
    /// One cluster, connected already (named or not).
    One(Arc<Cluster>),
    /// These, by name.
    Named(Vec<String>),
    /// Every cluster the catalog lists.
    All(Arc<dyn ClusterCatalog>),
}

/// The clusters a deployment serves, and their services (see the module doc).
pub struct Fleet {
    served: Served,
    connector: Option<Arc<dyn Connector>>,
    connected: tokio::sync::Mutex<BTreeMap<String, Arc<Cluster>>>,
    /// The catalog's last list, and when it was read.
    listed: tokio::sync::Mutex<Option<(DateTime<Utc>, Vec<String>)>>,
    /// The clusters whose last share failed whole: since when, and whether a share is trying
    /// it again now.
    troubled: std::sync::Mutex<BTreeMap<String, Trouble>>,
}

/// A cluster in trouble (see [`Fleet::trouble`]).
#[derive(Debug, Clone, Copy)]
struct Trouble {
    since: DateTime<Utc>,
    probing: bool,
}

impl Fleet {
    /// One cluster, whose services are given (a deployment of one cluster, a replay, the
    /// tests). Its name is the cluster's, else the configuration's `cluster_name`.
    pub fn one(cluster: Cluster) -> Fleet {
        Fleet::of(Served::One(Arc::new(cluster)), None)
    }

    /// The clusters `names`, each connected through `connector` when first needed.
    pub fn named(names: Vec<String>, connector: Arc<dyn Connector>) -> Fleet {
        Fleet::of(Served::Named(names), Some(connector))
    }

    /// Every cluster `catalog` lists (read again every [`RELIST`]), each connected through
    /// `connector` when first needed.
    pub fn all(catalog: Arc<dyn ClusterCatalog>, connector: Arc<dyn Connector>) -> Fleet {
        Fleet::of(Served::All(catalog), Some(connector))
    }

    fn of(served: Served, connector: Option<Arc<dyn Connector>>) -> Fleet {
        Fleet {
            served,
            connector,
            connected: Default::default(),
            listed: Default::default(),
            troubled: Default::default(),
        }
    }

    /// The served clusters' names (empty: one cluster, named by nobody; `base` is the
    /// configuration whose `cluster_name` names a lone cluster that does not name itself). For
    /// `*`, the catalog's list, read again when older than [`RELIST`]; when it cannot be read,
    /// the last list (logged), else the error.
    pub async fn served(
        &self,
        base: &Config,
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, DirectoryError> {
        self.served_seeing(base, now, &[]).await
    }

    /// [`Fleet::served`], when the batch's instances name the clusters `seen`: for `*`, a
    /// cluster among them the last list does not have (one created since) has the list read
    /// again, at most every [`RELIST_UNKNOWN`].
    pub async fn served_seeing(
        &self,
        base: &Config,
        now: DateTime<Utc>,
        seen: &[&str],
    ) -> Result<Vec<String>, DirectoryError> {
        match &self.served {
            Served::One(cluster) => Ok(cluster
                .name
                .clone()
                .or_else(|| base.cluster_name.clone())
                .into_iter()
                .collect()),
            Served::Named(names) => Ok(names.clone()),
            Served::All(catalog) => {
                let mut listed = self.listed.lock().await;
                if let Some((at, names)) = listed.as_ref() {
                    let unknown = seen.iter().any(|s| !names.iter().any(|n| n == s));
                    let age = now - *at;
                    if age < RELIST && (!unknown || age < RELIST_UNKNOWN) {
                        return Ok(names.clone());
                    }
                }
                match catalog.clusters().await {
                    Ok(mut names) => {
                        names.sort();
                        names.dedup();
                        *listed = Some((now, names.clone()));
                        Ok(names)
                    }
                    Err(e) => match listed.as_ref() {
                        Some((_, names)) => {
                            tracing::warn!(error = %e, "the clusters could not be listed again: serving the last list");
                            Ok(names.clone())
                        }
                        None => Err(e),
                    },
                }
            }
        }
    }

    /// The services of the served cluster `name` (`None`: the lone cluster), connected now if
    /// they were not yet.
    pub async fn cluster(&self, name: Option<&str>) -> Result<Arc<Cluster>, Unreachable> {
        if let Served::One(cluster) = &self.served {
            return Ok(cluster.clone());
        }
        let Some(name) = name else {
            return Err(Unreachable {
                cluster: "(none)".into(),
                kind: FailureKind::Invalid,
                source: "this deployment serves named clusters: a record must name its own".into(),
            });
        };
        if let Some(found) = self.connected.lock().await.get(name) {
            return Ok(found.clone());
        }
        let Some(connector) = &self.connector else {
            return Err(Unreachable {
                cluster: name.into(),
                kind: FailureKind::Invalid,
                source: "no way to connect to it".into(),
            });
        };
        // Connected outside the lock: a cluster slow to answer holds up no other's.
        let cluster = Arc::new(connector.connect(name).await?);
        let mut connected = self.connected.lock().await;
        Ok(connected.entry(name.to_string()).or_insert(cluster).clone())
    }

    /// Every served cluster's services (the sweeper visits each), each reached or not.
    pub async fn every(
        &self,
        base: &Config,
        now: DateTime<Utc>,
    ) -> Result<Vec<(Option<String>, Result<Arc<Cluster>, Unreachable>)>, DirectoryError> {
        if let Served::One(cluster) = &self.served {
            let name = cluster.name.clone().or_else(|| base.cluster_name.clone());
            return Ok(vec![(name, Ok(cluster.clone()))]);
        }
        let names = self.served(base, now).await?;
        let reached = futures::future::join_all(names.iter().map(|n| self.cluster(Some(n)))).await;
        Ok(names.into_iter().map(Some).zip(reached).collect())
    }

    /// Whether a share of cluster `name` in a batch spanning several clusters should be left
    /// alone now: `Some(since)` when its last share failed whole (every record failed, none for
    /// good) less than [`BREAK`] ago, or while another share tries it again; `None`: go ahead
    /// (after [`BREAK`], this share is the one that tries it again). A share that goes ahead
    /// tells how it went with [`Fleet::went`].
    pub fn trouble(&self, name: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut troubled = self.troubled.lock().unwrap_or_else(|p| p.into_inner());
        let trouble = troubled.get_mut(name)?;
        if trouble.probing || now - trouble.since < BREAK {
            return Some(trouble.since);
        }
        trouble.probing = true;
        None
    }

    /// How a share of cluster `name` went: `failed_whole` (every record failed, and may pass)
    /// puts the cluster in trouble as of `now`; anything done clears it.
    pub fn went(&self, name: &str, failed_whole: bool, now: DateTime<Utc>) {
        let mut troubled = self.troubled.lock().unwrap_or_else(|p| p.into_inner());
        if failed_whole {
            if !troubled.contains_key(name) {
                tracing::warn!(
                    cluster = name,
                    "a cluster's share failed whole: left alone in mixed batches for a while"
                );
            }
            troubled.insert(
                name.to_string(),
                Trouble {
                    since: now,
                    probing: false,
                },
            );
        } else if troubled.remove(name).is_some() {
            tracing::info!(cluster = name, "a cluster in trouble answers again");
        }
    }

    /// Whether the fleet is one cluster whose services are given (no instance lookup is needed
    /// to route a record).
    pub fn is_lone(&self) -> bool {
        matches!(self.served, Served::One(_))
    }

    /// The lone cluster's services, when the fleet is one cluster (`forewarn replay`, the
    /// command's `--kube`); `None` for a fleet of named clusters.
    pub fn lone(&self) -> Option<&Arc<Cluster>> {
        match &self.served {
            Served::One(cluster) => Some(cluster),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::clock::ManualClock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Listed(std::sync::Mutex<Result<Vec<String>, ()>>, AtomicUsize);

    #[async_trait]
    impl ClusterCatalog for Listed {
        async fn clusters(&self) -> Result<Vec<String>, DirectoryError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0
                .lock()
                .unwrap()
                .clone()
                .map_err(|()| DirectoryError::new("eks", FailureKind::Unavailable, "down"))
        }
    }

    struct Connects(AtomicUsize);

    #[async_trait]
    impl Connector for Connects {
        async fn connect(&self, name: &str) -> Result<Cluster, Unreachable> {
            self.0.fetch_add(1, Ordering::SeqCst);
            if name == "down" {
                return Err(Unreachable {
                    cluster: name.into(),
                    kind: FailureKind::Connection,
                    source: "refused".into(),
                });
            }
            Ok(Cluster::new(Some(name.into()), Arc::new(NoNodes)))
        }
    }

    #[tokio::test]
    async fn every_cluster_is_listed_again_after_a_while_and_the_last_list_outlives_an_outage() {
        let clock =
            ManualClock::at(crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap());
        let catalog = Arc::new(Listed(
            std::sync::Mutex::new(Ok(vec!["b".into(), "a".into(), "a".into()])),
            AtomicUsize::new(0),
        ));
        let fleet = Fleet::all(catalog.clone(), Arc::new(Connects(AtomicUsize::new(0))));
        let base = Config::default();
        assert_eq!(fleet.served(&base, clock.now()).await.unwrap(), ["a", "b"]);
        clock.advance(std::time::Duration::from_secs(60));
        fleet.served(&base, clock.now()).await.unwrap();
        assert_eq!(
            catalog.1.load(Ordering::SeqCst),
            1,
            "read once within RELIST"
        );
        *catalog.0.lock().unwrap() = Err(());
        clock.advance(std::time::Duration::from_secs(300));
        assert_eq!(fleet.served(&base, clock.now()).await.unwrap(), ["a", "b"]);
        assert_eq!(catalog.1.load(Ordering::SeqCst), 2);
        // An instance of a cluster created since: the list is read again at once, and not
        // again within RELIST_UNKNOWN.
        *catalog.0.lock().unwrap() = Ok(vec!["a".into(), "b".into(), "c".into()]);
        clock.advance(std::time::Duration::from_secs(31));
        let seen = fleet
            .served_seeing(&base, clock.now(), &["c"])
            .await
            .unwrap();
        assert_eq!(seen, ["a", "b", "c"]);
        assert_eq!(catalog.1.load(Ordering::SeqCst), 3);
        fleet
            .served_seeing(&base, clock.now(), &["d"])
            .await
            .unwrap();
        assert_eq!(catalog.1.load(Ordering::SeqCst), 3, "not again within 30 s");
        *catalog.0.lock().unwrap() = Err(());
        let fresh = Fleet::all(catalog, Arc::new(Connects(AtomicUsize::new(0))));
        assert!(
            fresh.served(&base, clock.now()).await.is_err(),
            "no list at all"
        );
    }

    #[tokio::test]
    async fn a_cluster_is_connected_once_and_one_that_cannot_be_is_tried_again() {
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fleet = Fleet::named(vec!["up".into(), "down".into()], connects.clone());
        let up = fleet.cluster(Some("up")).await.unwrap();
        assert_eq!(up.name.as_deref(), Some("up"));
        fleet.cluster(Some("up")).await.unwrap();
        assert_eq!(connects.0.load(Ordering::SeqCst), 1);
        let e = fleet.cluster(Some("down")).await.unwrap_err();
        assert_eq!(e.to_string(), "cluster down: refused");
        fleet.cluster(Some("down")).await.unwrap_err();
        assert_eq!(connects.0.load(Ordering::SeqCst), 3, "tried again");
        assert!(fleet.cluster(None).await.is_err(), "named clusters only");
    }

    #[test]
    fn a_cluster_in_trouble_is_left_alone_then_tried_by_one_share() {
        let fleet = Fleet::one(Cluster::none());
        let t0 = crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap();
        assert_eq!(fleet.trouble("blue", t0), None);
        fleet.went("blue", true, t0);
        assert_eq!(fleet.trouble("blue", t0 + Duration::seconds(5)), Some(t0));
        let later = t0 + BREAK;
        assert_eq!(fleet.trouble("blue", later), None, "one share tries again");
        assert_eq!(fleet.trouble("blue", later), Some(t0), "only one");
        fleet.went("blue", true, later);
        assert_eq!(fleet.trouble("blue", later), Some(later));
        fleet.went("blue", false, later + BREAK);
        assert_eq!(fleet.trouble("blue", later + BREAK), None);
        assert_eq!(fleet.trouble("green", later), None);
    }

    #[tokio::test]
    async fn a_lone_cluster_is_named_by_the_configuration_when_it_names_none() {
        let fleet = Fleet::one(Cluster::none());
        let base = Config {
            cluster_name: Some("demo".into()),
            ..Config::default()
        };
        let now = Utc::now();
        assert_eq!(fleet.served(&base, now).await.unwrap(), ["demo"]);
        assert!(
            fleet
                .served(&Config::default(), now)
                .await
                .unwrap()
                .is_empty()
        );
        let every = fleet.every(&base, now).await.unwrap();
        assert_eq!(every[0].0.as_deref(), Some("demo"));
        let config = fleet
            .cluster(Some("anything"))
            .await
            .unwrap()
            .config(&base, &ManualClock::at(now))
            .await;
        assert_eq!(config.cluster_name.as_deref(), Some("demo"));
    }
}
