//! [`KubeExecutor`]: the clients, settings and shared state every step of the executor uses
//! (its surge drains' memory, [`SurgeMemory`]; how a pass runs: [`super::execute`]; each verb's
//! steps: [`super::cordon`], [`super::drain`], [`super::delete`], [`super::events`],
//! [`super::launch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::connect::ClusterClient;
use crate::domain::admission::RefusedBy;
use crate::domain::config::Config;
use crate::ports::{LifecycleCompleter, PoolStore};

/// How the executor works.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// Read, decide and report, but write nothing.
    pub dry_run: bool,
    /// `reportingInstance` of the Events (default `forewarn`; the settings give the Lambda
    /// function's name or the host name).
    pub reporting_instance: String,
    /// How long a drain pass spends on the Events of the pods it evicted, after its evictions
    /// (default 1 s): those not sent by then are given up.
    pub pod_event_budget: Duration,
    /// How many pod Events a drain pass sends at most (default 100, about a node's most pods);
    /// the rest are given up.
    pub pod_events_per_pass: usize,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        ExecutorSettings {
            dry_run: false,
            reporting_instance: "forewarn".to_string(),
            pod_event_budget: Duration::from_secs(1),
            pod_events_per_pass: 100,
        }
    }
}

/// [`Executor`] over the Kubernetes API (and Auto Scaling for lifecycle actions). Cheap to
/// clone: each pass runs on a clone whose client carries the pass's lane and the work's
/// deadline (see [`KubeExecutor::run_in`]).
#[derive(Clone)]
pub struct KubeExecutor {
    pub(crate) clients: ClusterClient,
    pub(crate) config: Arc<Config>,
    pub(crate) settings: ExecutorSettings,
    /// Where lifecycle actions are completed; `None`: they are left to time out.
    pub(super) lifecycle: Option<Arc<dyn LifecycleCompleter>>,
    /// What surge drains remember between passes (budgets, refused namespaces), shared by them.
    pub(super) surge_memory: Arc<SurgeMemory>,
    /// Where cordon records' keys are read (the pool store); `None`: see
    /// [`super::cordon::RecordKeys::Unsigned`].
    pub(super) keys: Option<Arc<dyn PoolStore>>,
}

impl std::fmt::Debug for KubeExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExecutor")
            .field("clients", &self.clients)
            .field("settings", &self.settings)
            .field("lifecycle", &self.lifecycle.is_some())
            .finish_non_exhaustive()
    }
}

impl KubeExecutor {
    /// An executor with the default settings and no lifecycle completion.
    pub fn new(clients: ClusterClient, config: &Config) -> KubeExecutor {
        KubeExecutor {
            clients,
            config: Arc::new(config.clone()),
            settings: ExecutorSettings::default(),
            lifecycle: None,
            surge_memory: Arc::default(),
            keys: None,
        }
    }

    /// Signs cordon records, and verifies those on nodes, with `store`'s continuation keys.
    pub fn with_keys(mut self, store: Arc<dyn PoolStore>) -> KubeExecutor {
        self.keys = Some(store);
        self
    }

    /// The clock the executor goes by (its client's), for the tests.
    #[cfg(any(test, feature = "fixtures"))]
    pub fn clock(&self) -> &dyn crate::ports::Clock {
        self.clients.clock()
    }

    pub fn with_settings(mut self, settings: ExecutorSettings) -> KubeExecutor {
        self.settings = settings;
        self
    }

    /// Completes lifecycle actions through `lifecycle` (e.g. [`AsgLifecycle`](crate::adapters::autoscaling::AsgLifecycle)).
    pub fn with_lifecycle(mut self, lifecycle: Arc<dyn LifecycleCompleter>) -> KubeExecutor {
        self.lifecycle = Some(lifecycle);
        self
    }

    pub fn dry_run(mut self, dry_run: bool) -> KubeExecutor {
        self.settings.dry_run = dry_run;
        self
    }
}

/// Evictions in flight at once in a drain (the benchmarked value); a surge pass creates its
/// placeholders as many at once.
pub(super) const EVICTIONS_AT_ONCE: usize = 8;

/// How many times a node write is tried at most when it meets 409 Conflict.
pub(super) const CONFLICT_ATTEMPTS: u32 = 5;

/// How long a namespace's budgets, once listed, are taken as they were: a budget's selector and
/// size change rarely, and a list per drain would cost the API server a request per node.
pub(super) const BUDGETS_KEPT: chrono::Duration = chrono::Duration::seconds(60);

/// What an executor's surge drains remember from one pass to the next (one execution
/// environment's): the budgets that let their pods go only in rounds, per namespace, as last
/// listed and when (kept [`BUDGETS_KEPT`] by the executor's clock; one list at a time); and the
/// namespaces whose pods' placeholders the API did not make, until when (see [`REFUSED_KEPT`]).
#[derive(Debug, Default)]
pub(crate) struct SurgeMemory {
    pub(super) budgets: tokio::sync::Mutex<KeptBudgets>,
    refused: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// The (namespace, refusing step) pairs already reported (logged, an Event on a node): each
    /// once per execution environment.
    reported: std::sync::Mutex<BTreeSet<(String, RefusedBy)>>,
}

/// How long the pods of a namespace whose placeholder the API did not make (any answer but
/// AlreadyExists) get no other one asked for. The cause is seldom one pod's: no grant to create
/// pods in forewarn's namespace (a cluster before 1.30, where `forewarn deploy` applies no
/// placeholder grant), a Pod Security level or admission policy that refuses what the
/// namespace's pods copy into their placeholders, an admission webhook that is down. Asking
/// again for each pod of a mass interruption would cost the API server one request and the log
/// one warning per pod, for nothing. (A create that got no answer within the step's budget is
/// not remembered: the wait may be this environment's own rate limit.)
const REFUSED_KEPT: chrono::Duration = chrono::Duration::seconds(60);

impl SurgeMemory {
    /// Whether placeholders in `namespace` were refused less than [`REFUSED_KEPT`] before `now`.
    pub(crate) fn refuses(&self, namespace: &str, now: DateTime<Utc>) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(namespace).is_some_and(|until| now < *until)
    }

    /// Whether a refusal of a placeholder of `namespace` by `by` is the first this environment
    /// saw (then it is reported: the log, a Warning Event on the node); remembered.
    pub(crate) fn first_report(&self, namespace: &str, by: &RefusedBy) -> bool {
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        reported.insert((namespace.to_string(), by.clone()))
    }

    /// A placeholder for a pod of `namespace` was not made at `now`.
    pub(crate) fn refused_at(&self, namespace: &str, now: DateTime<Utc>) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.insert(namespace.to_string(), now + REFUSED_KEPT);
    }
}

/// Per namespace: when its budgets were listed, and the ones that let their pods go in rounds.
pub(super) type KeptBudgets = BTreeMap<String, (DateTime<Utc>, Vec<::kube::core::Selector>)>;
