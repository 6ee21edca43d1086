//! The clusters one deployment serves (the settings' clusters: a list, or `*` for every EKS
//! cluster of the account and region), each reached through services of its own: its node
//! directory, its executor (its own client, rate limit and retry budget) and its policy
//! ConfigMap (and, opaque here, what only the sweeper uses of it). A batch's records are split by the cluster of their instances
//! ([`crate::domain::clusters`]) and each cluster's share runs through the pipeline on its own
//! services, the clusters' shares at once: one cluster's outage, throttling or mass
//! interruption delays no other's cordons.
//!
//! A cluster is connected to the first time one of its records comes (and at a cold start,
//! for a list), and stays connected; a cluster that cannot be reached fails its own records
//! (they come back) and is tried again with the next batch.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

mod shared;
pub mod split;
pub mod triage;

pub use shared::{LIST_POLL, LIST_WAIT};

pub use triage::Busy;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use crate::app::policy::PolicyCache;
use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Config;
use crate::domain::event::Event;
use crate::domain::facts::InstanceFacts;
use crate::ports::{
    BoxError, Clock, ClusterCatalog, Executor, FailureKind, InstanceDirectory, NoNodes,
    NodeDirectory, PoolStore, PortError, until,
};
use std::future::Future;

/// How long the list of every cluster (`*`) is used before it is read again.
pub const RELIST: Duration = Duration::minutes(5);
/// How long a cluster whose share of a batch failed whole (its API server down, or not
/// reached) is left alone in batches that span several clusters: its records there fail at once
/// and come back, and one share tries it again after this (see [`Fleet::backing_off`]).
pub const BREAK: Duration = Duration::seconds(10);

/// How long at least between two reads of the list when an instance names a cluster the list
/// does not have (one created since): it is read again at once, then not before this.
pub const RELIST_UNKNOWN: Duration = Duration::seconds(30);

/// A mass interruption, as an execution environment sees it: at least [`MASS`] new warnings of
/// served clusters read there within [`MASS_WINDOW`] (a full batch). Each
/// of their clusters is then listed, its running instances' facts answering its lookups for
/// [`KNOWN_FOR`] (see [`Fleet::know`]).
pub const MASS: usize = 10;
pub const MASS_WINDOW: Duration = Duration::seconds(10);
/// The most `DescribeInstances` an execution environment's lists of a mass interruption start
/// at once: ten environments take an account's burst (100 at once). A cluster that is a mass
/// interruption by itself is listed in each zone at once within it, any other in one list.
pub const LIST_CALLS: usize = 10;
/// How long a cluster's instances, as an execution environment listed them, answer the
/// lookups of their warnings; instances launched since are looked up.
pub const KNOWN_FOR: Duration = Duration::seconds(60);

/// Everything forewarn reaches one cluster through.
#[derive(Clone)]
pub struct Cluster {
    /// Which it is (`None`: the one cluster of a deployment that names none).
    pub id: Option<ClusterId>,
    pub nodes: Arc<dyn NodeDirectory>,
    /// `None`: nothing is acted on (a capture, or no live cluster).
    pub executor: Option<Arc<dyn Executor>>,
    /// The cluster's policy ConfigMap, read at most once a minute (see
    /// [`crate::app::policy`]); `None`: the settings' policy as it is.
    pub policies: Option<Arc<PolicyCache>>,
    /// What only the pool sweeper and the commands use of the cluster (the way back, the
    /// placeholders' clean-up, the preflight, the priority expander: the app's `upkeep`
    /// module opens it), opaque to the interruption path, which never uses it; `None`: none.
    pub upkeep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Cluster {
    /// A cluster of these nodes, nothing else: no executor, no policy ConfigMap, no upkeep.
    pub fn new(id: Option<ClusterId>, nodes: Arc<dyn NodeDirectory>) -> Cluster {
        Cluster {
            id,
            nodes,
            executor: None,
            policies: None,
            upkeep: None,
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
        config.cluster = self.id.clone().or(config.cluster);
        if let Some(cache) = &self.policies {
            config.policy = cache.policy(clock).await;
        }
        config
    }
}

/// A served cluster that could not be reached (`cluster <id>`, its kind and why): its records
/// fail and come back.
pub fn unreachable(
    cluster: impl std::fmt::Display,
    kind: FailureKind,
    source: impl Into<BoxError>,
) -> PortError {
    PortError::new(format!("cluster {cluster}"), kind, source)
}

/// Connects to a served cluster (the wiring's: EKS `DescribeCluster` and an IAM token in the
/// cluster's own account and region, or the kubeconfig context of that name), with services of
/// its own.
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self, id: &ClusterId) -> Result<Cluster, PortError>;
}

/// Which clusters are served.
enum Served {
    /// One cluster, connected already (named or not).
    One(Arc<Cluster>),
    /// These (`catalog`: and every cluster it lists in these places), each connected
    /// through `connector` when first needed.
    Many {
        catalog: Option<(Arc<dyn ClusterCatalog>, Vec<Place>)>,
        ids: Vec<ClusterId>,
        connector: Arc<dyn Connector>,
    },
}

/// The clusters a deployment serves, and their services (see the module doc).
pub struct Fleet {
    served: Served,
    /// The deployment's own account and region: what a cluster that names none is of.
    own: Place,
    connected: tokio::sync::Mutex<BTreeMap<ClusterId, Arc<Cluster>>>,
    /// The catalog's last list, and when it was read.
    listed: tokio::sync::Mutex<Option<(DateTime<Utc>, Vec<ClusterId>)>>,
    /// The clusters whose last share failed whole: since when, and whether a share is trying
    /// it again now.
    troubled: std::sync::Mutex<BTreeMap<String, (DateTime<Utc>, bool)>>,
    /// The clusters busy in this execution environment, why, and until when (see
    /// [`Fleet::busy`]).
    busy: std::sync::Mutex<BTreeMap<(String, Busy), DateTime<Utc>>>,
    /// The clusters of the new warnings read here within [`MASS_WINDOW`], and when.
    read: std::sync::Mutex<VecDeque<(DateTime<Utc>, ClusterId)>>,
    /// Clusters' running instances as this execution environment listed them, and when (see
    /// [`Fleet::know`]).
    known: Arc<std::sync::Mutex<BTreeMap<ClusterId, Listed>>>,
}

/// A cluster's running instances as listed, and when (see [`Fleet::know`]).
type Listed = (DateTime<Utc>, BTreeMap<String, InstanceFacts>);

/// Every cluster `catalog` lists in `places`, and `also`, each whole (`own` fills what they do
/// not say), sorted, none twice. A place whose list cannot be read keeps its clusters of
/// `last` (logged): one account's failure never drops another's clusters. The error when no
/// place answered and there is no last list.
async fn list(
    catalog: &dyn ClusterCatalog,
    (places, also): (&[Place], &[ClusterId]),
    own: &Place,
    last: Option<&[ClusterId]>,
) -> Result<Vec<ClusterId>, PortError> {
    let places: BTreeSet<Place> = places.iter().map(|p| p.or(own)).collect();
    let lists = futures::future::join_all(places.iter().map(|p| catalog.clusters(p))).await;
    let answered = lists.iter().any(Result::is_ok);
    let mut ids: BTreeSet<ClusterId> = also.iter().map(|id| id.or(own)).collect();
    let mut failed = None;
    for (place, names) in places.iter().zip(lists) {
        match names {
            Ok(names) => ids.extend(names.iter().map(|n| ClusterId::at(place, n))),
            Err(e) => {
                tracing::warn!(error = %e, account = ?place.account, region = ?place.region, "a place's clusters could not be listed: its last list is served");
                let kept = last.unwrap_or_default().iter();
                ids.extend(kept.filter(|id| id.place == *place).cloned());
                failed = Some(e);
            }
        }
    }
    if let Some(e) = failed.filter(|_| !answered && last.is_none()) {
        return Err(e);
    }
    Ok(ids.into_iter().collect())
}

impl Fleet {
    /// One cluster, whose services are given (a deployment of one cluster, a replay, the
    /// tests). Its name is the cluster's, else the configuration's `cluster`'s.
    pub fn one(cluster: Cluster) -> Fleet {
        Fleet::of(Served::One(Arc::new(cluster)))
    }

    /// The clusters `ids`, and with a `catalog` every cluster it lists in its places (read
    /// again every [`RELIST`]), each connected through `connector` when first needed.
    pub fn many(
        catalog: Option<(Arc<dyn ClusterCatalog>, Vec<Place>)>,
        ids: Vec<ClusterId>,
        connector: Arc<dyn Connector>,
    ) -> Fleet {
        Fleet::of(Served::Many {
            catalog,
            ids,
            connector,
        })
    }

    /// This fleet, of a deployment whose own account and region are `own` (what a cluster,
    /// place or event that names none is of; unknown parts take any).
    pub fn at(mut self, own: Place) -> Fleet {
        self.own = own;
        self
    }

    /// Whether the deployment serves several clusters (or a list of them), whose messages can
    /// wait behind each other's in its queue; not a deployment of one.
    pub fn several(&self) -> bool {
        !matches!(self.served, Served::One(_))
    }

    /// The deployment's own account and region.
    pub fn own(&self) -> &Place {
        &self.own
    }

    fn of(served: Served) -> Fleet {
        Fleet {
            served,
            own: Place::default(),
            connected: Default::default(),
            listed: Default::default(),
            troubled: Default::default(),
            busy: Default::default(),
            read: Default::default(),
            known: Default::default(),
        }
    }

    /// The served clusters, each whole (of the own place when it names none; empty: one
    /// cluster, named by nobody; `base` is the configuration whose `cluster` names a lone
    /// cluster that does not name itself). For every cluster of places, the catalog's lists,
    /// read again when older than [`RELIST`] or, when the batch's instances name a cluster
    /// among `seen` that the last list does not have (one created since), at most every
    /// [`RELIST_UNKNOWN`]; when they cannot be read, the last list (logged), else the error.
    pub async fn served(
        &self,
        base: &Config,
        now: DateTime<Utc>,
        seen: &[&str],
    ) -> Result<Vec<ClusterId>, PortError> {
        let own = &self.own;
        match &self.served {
            Served::One(cluster) => {
                let id = cluster.id.as_ref().or(base.cluster.as_ref());
                Ok(id.map(|id| id.or(own)).into_iter().collect())
            }
            Served::Many {
                catalog: None, ids, ..
            } => Ok(ids.iter().map(|id| id.or(own)).collect()),
            Served::Many {
                catalog: Some((catalog, places)),
                ids: also,
                ..
            } => {
                let mut listed = self.listed.lock().await;
                if let Some((at, ids)) = listed.as_ref() {
                    let unknown = seen.iter().any(|s| !ids.iter().any(|n| n.name == *s));
                    let age = now - *at;
                    if age < RELIST && (!unknown || age < RELIST_UNKNOWN) {
                        return Ok(ids.clone());
                    }
                }
                let last = listed.as_ref().map(|(_, ids)| ids.as_slice());
                let ids = list(catalog.as_ref(), (places, also), own, last).await?;
                *listed = Some((now, ids.clone()));
                Ok(ids)
            }
        }
    }

    /// The services of the served cluster `id` (`None`: the lone cluster), connected now if
    /// they were not yet.
    pub async fn cluster(&self, id: Option<&ClusterId>) -> Result<Arc<Cluster>, PortError> {
        let connector = match &self.served {
            Served::One(cluster) => return Ok(cluster.clone()),
            Served::Many { connector, .. } => connector,
        };
        let Some(id) = id else {
            let why = "this deployment serves named clusters: a record must name its own";
            return Err(unreachable("(none)", FailureKind::Invalid, why));
        };
        let id = id.or(&self.own);
        if let Some(found) = self.connected.lock().await.get(&id) {
            return Ok(found.clone());
        }
        // Connected outside the lock: a cluster slow to answer holds up no other's.
        let cluster = Arc::new(connector.connect(&id).await?);
        let mut connected = self.connected.lock().await;
        Ok(connected.entry(id).or_insert(cluster).clone())
    }

    /// Every served cluster's services (the sweeper visits each), each reached or not.
    pub async fn every(
        &self,
        base: &Config,
        now: DateTime<Utc>,
    ) -> Result<Vec<(Option<ClusterId>, Result<Arc<Cluster>, PortError>)>, PortError> {
        let ids = self.served(base, now, &[]).await?;
        if let Served::One(cluster) = &self.served {
            return Ok(vec![(ids.into_iter().next(), Ok(cluster.clone()))]);
        }
        let reached = futures::future::join_all(ids.iter().map(|n| self.cluster(Some(n)))).await;
        Ok(ids.into_iter().map(Some).zip(reached).collect())
    }

    /// Whether a share of cluster `name` in a batch spanning several clusters should be left
    /// alone now: `Some(since)` when its last share failed whole (every record failed, none for
    /// good) less than [`BREAK`] ago, or while another share tries it again; `None`: go ahead
    /// (after [`BREAK`], this share is the one that tries it again). A share that goes ahead
    /// tells how it went with [`Fleet::record_outcome`].
    pub fn backing_off(&self, name: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut troubled = self.troubled.lock().unwrap_or_else(|p| p.into_inner());
        let (since, probing) = troubled.get_mut(name)?;
        if *probing || now - *since < BREAK {
            return Some(*since);
        }
        *probing = true;
        None
    }

    /// Whether cluster `name` is busy in this execution environment `now`, and `why`: a burst
    /// of its new warnings ended here, or its last share here had triaged warnings, less than
    /// [`triage::HOLD`] ago ([`Fleet::mark`]), so that its new warnings, or its drains'
    /// continuations, go back to the queue (see [`triage`]). Never in a deployment of one
    /// cluster, where no other cluster's warnings wait behind them.
    pub fn busy(&self, name: &str, why: Busy, now: DateTime<Utc>) -> bool {
        let busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        let until = busy.get(&(name.to_string(), why));
        self.several() && until.is_some_and(|until| now < *until)
    }

    /// Cluster `name` is busy for `why` until [`triage::HOLD`] after `now` (`busy`), or is no
    /// longer (see [`Fleet::busy`]).
    pub fn mark(&self, name: &str, why: Busy, now: DateTime<Utc>, busy: bool) {
        let mut marks = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        marks.retain(|_, until| now < *until);
        let key = (name.to_string(), why);
        if busy {
            marks.insert(key, now + crate::ports::span(triage::HOLD));
        } else {
            marks.remove(&key);
        }
    }

    /// A batch's new warnings read here `now`, each its served cluster (`read`). When they
    /// make a mass interruption here (at least [`MASS`] within [`MASS_WINDOW`]), each of their
    /// clusters not listed here within [`KNOWN_FOR`] is to have its running instances listed
    /// from `instances`, or read from the list another execution environment claimed within
    /// `KNOWN_FOR` and shares through `store` (see [`shared`]): the lists (at once), for the
    /// caller to run in the background, until `clock` says `KNOWN_FOR` is over. Their facts
    /// answer the lookups of the clusters' warnings for a while ([`Fleet::listed`]), each page
    /// as it comes, so that a mass interruption's lookups cost EC2 a page per 1,000 instances,
    /// not a call per batch. A list that fails is logged, and is not tried again within
    /// [`KNOWN_FOR`]: the warnings it did not find are looked up as any.
    pub fn know(
        &self,
        read: Vec<ClusterId>,
        (instances, store): (Arc<dyn InstanceDirectory>, Option<Arc<dyn PoolStore>>),
        clock: Arc<dyn Clock>,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let now = clock.now();
        let mut window = self.read.lock().unwrap_or_else(|p| p.into_inner());
        window.extend(read.into_iter().map(|id| (now, id)));
        window.retain(|(at, _)| now - *at < MASS_WINDOW);
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|_, (at, _)| now - *at < KNOWN_FOR);
        let mut ids: BTreeSet<ClusterId> = window.iter().map(|(_, id)| id.clone()).collect();
        ids.retain(|id| !known.contains_key(id));
        if window.len() < MASS || ids.is_empty() {
            return None;
        }
        // A call each for the clusters not a mass by themselves; the rest of LIST_CALLS shared.
        let masses = |id: &ClusterId| window.iter().filter(|(_, w)| w == id).count() >= MASS;
        let others = ids.iter().filter(|id| !masses(id)).count();
        let spare = LIST_CALLS.saturating_sub(others) / (ids.len() - others).max(1);
        let at_once: Vec<usize> = ids
            .iter()
            .map(|id| if masses(id) { spare.max(1) } else { 1 })
            .collect();
        // Marked listed: a list under way or failed is not tried again for a while.
        known.extend(ids.iter().map(|id| (id.clone(), (now, BTreeMap::new()))));
        let known = self.known.clone();
        let lease = KNOWN_FOR.to_std().unwrap_or_default();
        Some(async move {
            let (known, instances) = (&known, instances.as_ref());
            let (store, clock) = (store.as_deref(), clock.as_ref());
            let lists = ids.iter().zip(at_once).map(|(id, at_once)| async move {
                // Each page answers lookups as it comes.
                let found = |page: BTreeMap<_, _>| {
                    let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
                    known.entry(id.clone()).and_modify(|(_, facts)| facts.extend(page));
                };
                let list = shared::list(store, instances, (id, at_once, lease), clock, &found);
                if let Err(e) = list.await {
                    tracing::warn!(cluster = %id, error = %e, "a cluster's instances could not all be listed: the others are looked up")
                }
            });
            until(clock, now + KNOWN_FOR, futures::future::join_all(lists)).await;
        })
    }

    /// The facts of the instances of `events` that a cluster's running instances, as listed
    /// here within [`KNOWN_FOR`] (see [`Fleet::know`]), hold: in that cluster's account and
    /// region (see [`Place::holds`]), by each event's place and instance.
    pub fn listed(
        &self,
        events: &[&Event],
        now: DateTime<Utc>,
    ) -> BTreeMap<(Place, String), InstanceFacts> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let lists: Vec<_> = (known.iter())
            .filter(|(_, (at, _))| now - *at < KNOWN_FOR)
            .collect();
        let wanted = (events.iter())
            .flat_map(|e| (e.instance_ids.iter()).map(|i| (Place::of_event(e), i.clone())));
        wanted
            .filter_map(|(place, i)| {
                let facts = lists.iter().find_map(|(id, (_, facts))| {
                    facts.get(&i).filter(|_| id.place.holds(&place, &self.own))
                })?;
                Some(((place, i), facts.clone()))
            })
            .collect()
    }

    /// How a share of cluster `name` went: `failed_whole` (every record failed, and may pass)
    /// puts the cluster in trouble as of `now`; anything done clears it.
    pub fn record_outcome(&self, name: &str, failed_whole: bool, now: DateTime<Utc>) {
        let mut troubled = self.troubled.lock().unwrap_or_else(|p| p.into_inner());
        if failed_whole {
            // Said when it falls into trouble, not at each share failed since.
            if troubled.insert(name.to_string(), (now, false)).is_none() {
                tracing::warn!(
                    cluster = name,
                    "a cluster's share failed whole: left alone in mixed batches for a while"
                );
            }
        } else if troubled.remove(name).is_some() {
            tracing::info!(cluster = name, "a cluster in trouble answers again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::clock::ManualClock;
    use crate::domain::event::EventKind;
    use crate::domain::fixtures;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MEMBER: &str = "111111111111";

    /// The deployment's own account and region.
    pub(super) fn own() -> Place {
        Place::of("123456789012", "eu-west-1")
    }

    fn member() -> Place {
        Place::of(MEMBER, "eu-west-1")
    }

    /// Each place's list (`Err`: that place's `ListClusters` fails), and how many were read.
    struct Listed(Mutex<BTreeMap<Place, Result<Vec<String>, ()>>>, AtomicUsize);

    impl Listed {
        fn set(&self, place: Place, list: Result<&[&str], ()>) {
            let list = list.map(|l| l.iter().map(|s| s.to_string()).collect());
            self.0.lock().unwrap().insert(place, list);
        }
    }

    #[async_trait]
    impl ClusterCatalog for Listed {
        async fn clusters(&self, place: &Place) -> Result<Vec<String>, PortError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let lists = self.0.lock().unwrap();
            let list = lists.get(place).cloned().unwrap_or(Ok(Vec::new()));
            list.map_err(|()| PortError::new("eks", FailureKind::Unavailable, "down"))
        }
    }

    struct Connects(AtomicUsize);

    #[async_trait]
    impl Connector for Connects {
        async fn connect(&self, id: &ClusterId) -> Result<Cluster, PortError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            if id.name == "down" {
                return Err(unreachable(id, FailureKind::Connection, "refused"));
            }
            Ok(Cluster::new(Some(id.clone()), Arc::new(NoNodes)))
        }
    }

    fn shown(ids: &[ClusterId]) -> Vec<String> {
        ids.iter().map(ToString::to_string).collect()
    }

    fn id(s: &str) -> ClusterId {
        ClusterId::parse(s).unwrap()
    }

    /// A burst, or a share of triaged warnings, makes a cluster busy for [`triage::HOLD`]
    /// after it ended (or until it is no longer), for that reason, that cluster only; never in
    /// a deployment of one cluster.
    #[test]
    fn a_burst_makes_its_cluster_busy_for_a_while() {
        let now = crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap();
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fleet = Fleet::many(None, vec![id("a"), id("b")], connects);
        fleet.mark("a", Busy::Burst, now, true);
        let hold = crate::ports::span(triage::HOLD);
        let ms = chrono::Duration::milliseconds(1);
        let busy = |name, why, at| fleet.busy(name, why, at);
        assert!(busy("a", Busy::Burst, now) && busy("a", Busy::Burst, now + hold - ms));
        assert!(!busy("a", Busy::Burst, now + hold) && !busy("b", Busy::Burst, now));
        assert!(!busy("a", Busy::Backlog, now), "a reason of its own");
        fleet.mark("b", Busy::Backlog, now, true);
        assert!(busy("b", Busy::Backlog, now) && !busy("b", Busy::Burst, now));
        fleet.mark("b", Busy::Backlog, now, false);
        assert!(!busy("b", Busy::Backlog, now), "no longer");
        let one = Fleet::one(Cluster::none());
        one.mark("a", Busy::Burst, now, true);
        assert!(!one.busy("a", Busy::Burst, now));
    }

    /// What lists a cluster's instances (cluster `a` of the own place has `i-1` and `i-2`, a
    /// page each; a member's cluster fails after a page of `i-9`; any other has none), keeping
    /// each list's calls it may start at once.
    pub(super) struct Lists(pub(super) Mutex<Vec<usize>>);

    #[async_trait]
    impl InstanceDirectory for Lists {
        async fn describe(
            &self,
            _: &Place,
            _: &[String],
        ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
            unreachable!("a list is no lookup")
        }

        async fn cluster_instances(
            &self,
            place: &Place,
            cluster: &str,
            at_once: usize,
            found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
        ) -> Result<(), PortError> {
            self.0.lock().unwrap().push(at_once);
            let page =
                |id: &str| BTreeMap::from([(id.to_string(), fixtures::instance(id).build())]);
            if *place == member() {
                found(page("i-9"));
                return Err(PortError::new("ec2", FailureKind::Throttled, "slow down"));
            }
            if (place, cluster) == (&own(), "a") {
                found(page("i-1"));
                found(page("i-2"));
            }
            Ok(())
        }
    }

    /// A mass interruption's clusters (MASS new warnings read here within MASS_WINDOW) are
    /// listed, each at most once within KNOWN_FOR (a failed list too), and their lists answer
    /// the lookups of their instances, in their own place only, for KNOWN_FOR.
    #[tokio::test]
    async fn a_mass_interruptions_clusters_are_listed_and_answer_their_lookups_for_a_while() {
        let clock = ManualClock::at(fixtures::t0());
        let now = clock.now();
        let fleet = Fleet::many(None, vec![], Arc::new(Connects(AtomicUsize::new(0)))).at(own());
        let (a, b) = (ClusterId::at(&own(), "a"), ClusterId::at(&member(), "b"));
        let lists = Arc::new(Lists(Mutex::default()));
        let listed = |n| lists.0.lock().unwrap().len() == n;
        // What a batch's new warnings of `read` start (the lists, run here to their end).
        let know = async |read: Vec<ClusterId>| {
            if let Some(lists) = fleet.know(read, (lists.clone(), None), clock.shared()) {
                lists.await;
            }
        };
        let event = |place: &Place, instance: &str| {
            let mut event = fixtures::event(EventKind::SpotInterruption, "e", instance).build();
            (event.account, event.region) = (place.account.clone(), place.region.clone());
            event
        };
        let found = |events: &[Event], at| {
            let events: Vec<&Event> = events.iter().collect();
            let found = fleet.listed(&events, at);
            found.into_keys().map(|(_, i)| i).collect::<Vec<_>>()
        };
        let mine = [event(&own(), "i-1"), event(&own(), "i-3")];
        know(vec![a.clone(); MASS - 1]).await;
        assert!(listed(0) && found(&mine, now).is_empty(), "no mass yet");
        know(vec![a.clone()]).await;
        assert!(listed(1));
        assert_eq!(found(&mine, now), ["i-1"]);
        assert!(
            found(&[event(&member(), "i-1")], now).is_empty(),
            "another place"
        );
        know(vec![a.clone(); MASS]).await;
        assert!(listed(1), "listed once within KNOWN_FOR");
        // A failed list is not tried again within KNOWN_FOR either; its pages found answer.
        know(vec![b.clone(); MASS]).await;
        know(vec![b.clone(); MASS]).await;
        assert!(listed(2));
        let theirs = [event(&member(), "i-9"), event(&member(), "i-8")];
        assert_eq!(found(&theirs, now), ["i-9"]);
        clock.advance(KNOWN_FOR.to_std().unwrap());
        let later = clock.now();
        assert!(found(&mine, later).is_empty(), "stale");
        know(vec![a.clone()]).await;
        assert!(listed(2), "the mass was over");
        know(vec![a.clone(); MASS]).await;
        assert!(listed(3) && found(&mine, later) == ["i-1"]);
        // A cluster that is a mass interruption by itself may start LIST_CALLS at once; ten
        // clusters of a warning each, one each.
        clock.advance(KNOWN_FOR.to_std().unwrap());
        let ten = (0..MASS).map(|n| ClusterId::at(&own(), &format!("c{n}")));
        know(ten.collect()).await;
        let at_once = lists.0.lock().unwrap().clone();
        assert_eq!(at_once[..3], [LIST_CALLS; 3]);
        assert_eq!(at_once[3..], [1; MASS]);
    }

    #[tokio::test]
    async fn every_cluster_is_listed_again_after_a_while_and_the_last_list_outlives_an_outage() {
        let clock =
            ManualClock::at(crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap());
        let catalog = Arc::new(Listed(Mutex::default(), AtomicUsize::new(0)));
        catalog.set(own(), Ok(&["b", "a", "a"]));
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fleet = Fleet::many(
            Some((catalog.clone(), vec![Place::default()])),
            vec![],
            connects,
        )
        .at(own());
        let base = Config::default();
        let both = ["123456789012/eu-west-1/a", "123456789012/eu-west-1/b"];
        assert_eq!(
            shown(&fleet.served(&base, clock.now(), &[]).await.unwrap()),
            both
        );
        clock.advance(std::time::Duration::from_secs(60));
        fleet.served(&base, clock.now(), &[]).await.unwrap();
        assert_eq!(
            catalog.1.load(Ordering::SeqCst),
            1,
            "read once within RELIST"
        );
        catalog.set(own(), Err(()));
        clock.advance(std::time::Duration::from_secs(300));
        assert_eq!(
            shown(&fleet.served(&base, clock.now(), &[]).await.unwrap()),
            both
        );
        assert_eq!(catalog.1.load(Ordering::SeqCst), 2);
        // An instance of a cluster created since: the list is read again at once, and not
        // again within RELIST_UNKNOWN.
        catalog.set(own(), Ok(&["a", "b", "c"]));
        clock.advance(std::time::Duration::from_secs(31));
        let seen = fleet.served(&base, clock.now(), &["c"]).await.unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(catalog.1.load(Ordering::SeqCst), 3);
        fleet.served(&base, clock.now(), &["d"]).await.unwrap();
        assert_eq!(catalog.1.load(Ordering::SeqCst), 3, "not again within 30 s");
        catalog.set(own(), Err(()));
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fresh =
            Fleet::many(Some((catalog, vec![Place::default()])), vec![], connects).at(own());
        assert!(
            fresh.served(&base, clock.now(), &[]).await.is_err(),
            "no list at all"
        );
    }

    /// Every cluster of several accounts: each place listed on its own, a cluster of the same
    /// name in two accounts two clusters, and one account whose list fails keeps its last list
    /// without dropping another's.
    #[tokio::test]
    async fn every_cluster_of_each_account_and_one_accounts_outage_drops_no_other() {
        let clock =
            ManualClock::at(crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap());
        let catalog = Arc::new(Listed(Mutex::default(), AtomicUsize::new(0)));
        catalog.set(own(), Ok(&["prod"]));
        catalog.set(member(), Ok(&["prod", "dev"]));
        let places = vec![Place::default(), member()];
        let also = vec![id("222222222222/us-east-2/edge")];
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fleet = Fleet::many(Some((catalog.clone(), places)), also, connects).at(own());
        let base = Config::default();
        let want = [
            "111111111111/eu-west-1/dev",
            "111111111111/eu-west-1/prod",
            "123456789012/eu-west-1/prod",
            "222222222222/us-east-2/edge",
        ];
        assert_eq!(
            shown(&fleet.served(&base, clock.now(), &[]).await.unwrap()),
            want
        );
        catalog.set(member(), Err(()));
        catalog.set(own(), Ok(&["prod", "new"]));
        clock.advance(std::time::Duration::from_secs(301));
        let now = shown(&fleet.served(&base, clock.now(), &[]).await.unwrap());
        assert_eq!(
            now,
            [
                "111111111111/eu-west-1/dev",
                "111111111111/eu-west-1/prod",
                "123456789012/eu-west-1/new",
                "123456789012/eu-west-1/prod",
                "222222222222/us-east-2/edge",
            ]
        );
    }

    #[tokio::test]
    async fn a_cluster_is_connected_once_and_one_that_cannot_be_is_tried_again() {
        let connects = Arc::new(Connects(AtomicUsize::new(0)));
        let fleet = Fleet::many(None, vec![id("up"), id("down")], connects.clone()).at(own());
        let up = fleet.cluster(Some(&id("up"))).await.unwrap();
        assert_eq!(
            up.id.as_ref().map(ToString::to_string).as_deref(),
            Some("123456789012/eu-west-1/up")
        );
        fleet.cluster(Some(&id("123456789012/up"))).await.unwrap();
        assert_eq!(connects.0.load(Ordering::SeqCst), 1, "the same cluster");
        let e = fleet.cluster(Some(&id("down"))).await.err().unwrap();
        assert_eq!(
            e.to_string(),
            "cluster 123456789012/eu-west-1/down: refused"
        );
        assert!(fleet.cluster(Some(&id("down"))).await.is_err());
        assert_eq!(connects.0.load(Ordering::SeqCst), 3, "tried again");
        assert!(fleet.cluster(None).await.is_err(), "named clusters only");
    }

    #[test]
    fn a_cluster_in_trouble_is_left_alone_then_tried_by_one_share() {
        let fleet = Fleet::one(Cluster::none());
        let t0 = crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap();
        assert_eq!(fleet.backing_off("blue", t0), None);
        fleet.record_outcome("blue", true, t0);
        assert_eq!(
            fleet.backing_off("blue", t0 + Duration::seconds(5)),
            Some(t0)
        );
        let later = t0 + BREAK;
        assert_eq!(
            fleet.backing_off("blue", later),
            None,
            "one share tries again"
        );
        assert_eq!(fleet.backing_off("blue", later), Some(t0), "only one");
        fleet.record_outcome("blue", true, later);
        assert_eq!(fleet.backing_off("blue", later), Some(later));
        fleet.record_outcome("blue", false, later + BREAK);
        assert_eq!(fleet.backing_off("blue", later + BREAK), None);
        assert_eq!(fleet.backing_off("green", later), None);
    }

    #[tokio::test]
    async fn a_lone_cluster_is_named_by_the_configuration_when_it_names_none() {
        let fleet = Fleet::one(Cluster::none()).at(own());
        let base = Config {
            cluster: Some(ClusterId::at(&Place::default(), "demo")),
            ..Config::default()
        };
        let now = Utc::now();
        let served = fleet.served(&base, now, &[]).await.unwrap();
        assert_eq!(shown(&served), ["123456789012/eu-west-1/demo"]);
        assert!(
            fleet
                .served(&Config::default(), now, &[])
                .await
                .unwrap()
                .is_empty()
        );
        let every = fleet.every(&base, now).await.unwrap();
        assert_eq!(every[0].0.as_ref(), Some(&served[0]));
        let config = fleet
            .cluster(Some(&id("anything")))
            .await
            .unwrap()
            .config(&base, &ManualClock::at(now))
            .await;
        assert_eq!(config.cluster, base.cluster);
    }
}
