//! The executor: a plan's node actions carried out through the Kubernetes API, then the ASG
//! lifecycle action completed.
//!
//! Every pass reads what it acts on and verifies it before any write, whatever the plan says (a
//! plan may come from a continuation message: see [`crate::domain::continuation`]). The node is
//! read first (one `get`): a node that is gone needs nothing (a drain's chain ends; a delete of
//! its NodeClaim or Machine still happens, verified on the NodeClaim or Machine itself); a node
//! that is control-plane by its live labels or taints, whose `spec.providerID` does not name the
//! action's instance, or — in a drain pass — that no longer carries forewarn's taint, is refused
//! without any write, with the reason in the outcome and a log line. A delete's target is read
//! and verified to be the instance's too (see [`super::delete::verify_target`]). Then:
//!
//! - an Event with the plan's reason (`SpotInterrupted`, ...) records the decision;
//! - `cordon`: one merge patch (see [`super::cordon`]), and a `Cordoned` Event when it changed
//!   the node;
//! - `cordon-drain`: in the first pass ([`Pass::Cordon`]) the cordon only; in the drain passes
//!   that follow ([`Pass::Drain`]), the evictions then due (see [`super::drain`]) until the node
//!   is empty or the action's deadline has passed, then a `Drained` or `DrainIncomplete` Event.
//!   Pods left at the deadline are reported, not an error: the instance goes anyway and
//!   retrying the event would not help;
//! - `delete`: the NodeClaim, Machine or Node (see [`super::delete`]), and a `Deleted` Event;
//! - the ASG lifecycle action, when the plan has one, is completed with `CONTINUE`.
//!
//! Every step is idempotent, so an event delivered again writes nothing new. A failed API call
//! (other than the answers each step expects: 404, 409, 429) is an [`ExecuteError`], so the
//! event comes back. Events are best effort: a failure to record one is logged and reported,
//! never an error. A dry run takes the same path and reads the same objects, but sends no write;
//! its results say what would be done.
//!
//! [`KubeExecutor`] holds the clients and settings, verifies, and runs each pass's steps in
//! order; each action is its own part, made for the call from what it needs: [`Cordoner`]
//! (`cordon`), [`Drainer`] (`drain`), [`Deleter`] (`delete`), [`Lifecycle`] (the lifecycle
//! action), [`Placeholders`] (surge's room and clean-up) and [`Undoer`] (the way back), with the
//! [`Recorder`] of their Events.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use tracing::Instrument;

use super::api::rate_limit::Lane;
use super::connect::ClusterClient;
use super::cordon::{NodeWrite, get_node};
use super::error::{KubeError, Refusal};
use super::node_facts::node_facts;
pub use super::outcome::NodeOutcome;
use super::outcome::results;
use super::surge::SurgeMemory;

mod cordon;
mod delete;
mod drain;
mod events;
mod lifecycle;
mod pod_events;
mod surge;
mod undo;
use cordon::Cordoner;
use delete::{Deleter, Named};
use drain::Drainer;
use events::{Decision, Recorder};
use lifecycle::Lifecycle;
use pod_events::PodEvents;
use surge::Placeholders;
use undo::Undoer;

use crate::domain::config::{Action, Config};
use crate::domain::plan::{NodeAction, Plan};
use crate::domain::wayback::{Undo, UndoOutcome};
use crate::ports::{ActionResult, Clock, DrainRole, ExecuteError, Executor, Pass, Work};
use crate::ports::{LifecycleCompleter, PoolStore};

/// How the executor works.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// Read, decide and report, but write nothing.
    pub dry_run: bool,
    /// Evictions at once (default 8).
    pub eviction_parallelism: usize,
    /// First wait after a refused eviction (default 1 s); doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest wait between eviction attempts (default 10 s).
    pub backoff_max: Duration,
    /// How long one pass of a drain retries a refused eviction (default 0:
    /// one attempt per pass; a refusal is tried again in the next pass, seconds later, without
    /// holding the invocation meanwhile — half a second of retries held every invocation whose
    /// batch had a pod behind a budget, about half the Lambda time of a mass interruption when
    /// the API server is not the bottleneck).
    pub pass_budget: Duration,
    /// Cordon patches tried at most this often on 409 Conflict (default 5).
    pub conflict_attempts: u32,
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
            eviction_parallelism: 8,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(10),
            pass_budget: Duration::ZERO,
            conflict_attempts: 5,
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
    clients: ClusterClient,
    config: Arc<Config>,
    settings: ExecutorSettings,
    lifecycle: Option<Arc<dyn LifecycleCompleter>>,
    /// What surge drains remember between passes (budgets, refused namespaces), shared by them.
    surge_memory: Arc<SurgeMemory>,
    /// Where cordon records' keys are read (the pool store); `None`: see
    /// [`super::cordon::RecordKeys::Unsigned`].
    keys: Option<Arc<dyn PoolStore>>,
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

    /// The clock the executor goes by (its client's).
    pub fn clock(&self) -> &dyn Clock {
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

    pub fn settings(&self) -> &ExecutorSettings {
        &self.settings
    }

    /// How node writes go: tried up to the settings' conflict attempts; in a dry run, not sent.
    fn node_write(&self) -> NodeWrite {
        NodeWrite {
            attempts: self.settings.conflict_attempts,
            dry_run: self.settings.dry_run,
        }
    }

    fn events(&self) -> Recorder<'_> {
        Recorder {
            clients: &self.clients,
            reporting_instance: &self.settings.reporting_instance,
            dry_run: self.settings.dry_run,
        }
    }

    fn cordoner(&self) -> Cordoner<'_> {
        Cordoner {
            clients: &self.clients,
            config: &self.config,
            keys: self.keys.as_ref(),
            write: self.node_write(),
        }
    }

    fn drainer(&self) -> Drainer<'_> {
        Drainer {
            clients: &self.clients,
            config: &self.config,
            settings: &self.settings,
            surge_memory: &self.surge_memory,
            events: self.events(),
            pod_events: PodEvents {
                clients: &self.clients,
                config: &self.config,
                settings: &self.settings,
            },
        }
    }

    fn deleter(&self) -> Deleter<'_> {
        Deleter {
            clients: &self.clients,
            dry_run: self.settings.dry_run,
            events: self.events(),
        }
    }

    fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle {
            clients: &self.clients,
            completer: self.lifecycle.as_ref(),
            dry_run: self.settings.dry_run,
        }
    }

    fn placeholders(&self) -> Placeholders<'_> {
        Placeholders {
            clients: &self.clients,
            dry_run: self.settings.dry_run,
        }
    }

    fn undoer(&self) -> Undoer<'_> {
        Undoer {
            clients: &self.clients,
            taint_key: &self.config.taint_key,
            reporting_instance: &self.settings.reporting_instance,
            write: self.node_write(),
        }
    }

    /// Carries out every node action of `plan` (concurrently) for `pass`, with what each did. An
    /// error from any means the event must come back (the others were still carried out). No
    /// deadline: see [`KubeExecutor::run_in`].
    pub async fn run(&self, plan: &Plan, pass: Pass) -> Result<Vec<NodeOutcome>, ExecuteError> {
        self.run_in(plan, pass, Work::default()).await
    }

    /// [`KubeExecutor::run`] as part of `work`: its calls retry transient failures until the
    /// work's deadline. Every pass but the cordon runs in [`Lane::Later`] of the rate limit: a
    /// drain's node reads and Events do not go before other nodes' cordons.
    pub async fn run_in(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<NodeOutcome>, ExecuteError> {
        let lane = if pass == Pass::Cordon {
            Lane::First
        } else {
            Lane::Later
        };
        let this = self.on(self.clients.in_lane(lane).for_work(work));
        let runs = plan.actions.iter().map(|a| {
            let span = tracing::info_span!(
                "node_action",
                event_id = %plan.event_id,
                instance_id = %a.instance_id,
                node = a.node.as_deref().unwrap_or(""),
                action = %a.action,
                dry_run = this.settings.dry_run,
            );
            let this = &this;
            async move {
                this.act(plan, a, pass).await.map_err(|e| {
                    tracing::warn!(error = %e, "node action failed");
                    let doing = a.node.as_ref().map(|n| format!("node {n}"));
                    ExecuteError::new(a.instance_id.clone(), doing, e.kind(), e)
                })
            }
            .instrument(span)
        });
        join_all(runs).await.into_iter().collect()
    }

    /// The same executor on `clients` (the same cluster, in a lane or within a deadline).
    fn on(&self, clients: ClusterClient) -> KubeExecutor {
        KubeExecutor {
            clients,
            ..self.clone()
        }
    }

    async fn act(&self, plan: &Plan, a: &NodeAction, pass: Pass) -> Result<NodeOutcome, KubeError> {
        let mut out = NodeOutcome::new(a, self.settings.dry_run);
        if pass == Pass::Announce && (a.action != Action::CordonDrain || a.node.is_none()) {
            // Only a drain's node has Events left to it.
            return Ok(out);
        }
        if a.action != Action::None
            && let Some(name) = a.node.as_deref()
        {
            // Every pass reads what it acts on and verifies it first; the cordon pass of a mass
            // interruption uses the node the directory has just read.
            let recent = match (pass, a.action) {
                (Pass::Cordon, Action::CordonDrain) => self.clients.take_recent_node(name),
                _ => None,
            };
            let node = match recent {
                Some(node) => Some(node),
                None => get_node(&self.clients, name).await?,
            };
            if let Some(node) = &node
                && let Err(why) = self.verify(a, node, pass)
            {
                tracing::warn!(%why, "refusing to act");
                out.refused = Some(why.to_string());
                return Ok(out);
            }
            out.node_gone = node.is_none();
            if pass == Pass::Announce {
                // The Events a drain's first pass left to a pass that came too late to drain:
                // nothing else, not even the lifecycle action.
                if let Some(node) = &node
                    && a.action == Action::CordonDrain
                {
                    self.owed_events(plan, a, node, &mut out).await;
                }
                return Ok(out);
            }
            self.act_on(plan, a, ReadNode { name, node }, pass, &mut out)
                .await?;
        }
        self.lifecycle().step(a, pass, &mut out).await?;
        Ok(out)
    }

    /// The step of `a`'s action for `pass` on its node `read` (read and verified; `None`: gone).
    async fn act_on(
        &self,
        plan: &Plan,
        a: &NodeAction,
        read: ReadNode<'_>,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let ReadNode { name, node } = read;
        let dry_run = self.settings.dry_run;
        let later_pass = matches!(pass, Pass::Drain { .. }) && !pass.is_first_drain();
        match (a.action, node) {
            // A dry run has no later pass: its first pass says all the drain would do.
            (Action::CordonDrain, Some(node)) if pass == Pass::Cordon && !dry_run => {
                self.cordoner().cordon_first(a, node, out).await?;
            }
            (Action::CordonDrain, Some(node)) if later_pass => {
                // A later drain pass: the node was cordoned by the earlier passes, and its
                // taint was just seen; what is on it is evicted or waited for.
                self.drain_pass(plan, a, &node, pass, out).await?;
            }
            (Action::Cordon | Action::CordonDrain, Some(node)) => {
                self.cordon_drain(plan, a, node, pass, out).await?;
            }
            // The node is gone (deleted between passes, or never there): nothing is left to
            // do to it, and a drain's chain ends here.
            (Action::Cordon | Action::CordonDrain, None) => {}
            (Action::Delete, node) => {
                let named = Named {
                    name,
                    node: node.as_ref(),
                };
                self.deleter().delete(plan, a, named, out).await?;
            }
            (Action::Uncordon, node) => {
                out.undo = Some(match (node, &a.record) {
                    (None, _) => UndoOutcome::NodeGone,
                    (Some(_), None) => UndoOutcome::Refused {
                        why: "no cordon record to undo".into(),
                    },
                    (Some(node), Some(record)) => {
                        let undo = Undo {
                            node: name.to_string(),
                            instance_id: a.instance_id.clone(),
                            record: record.clone(),
                            why: a.reason.clone(),
                        };
                        self.undoer().undo(node, &undo).await?
                    }
                });
            }
            (Action::None, _) => {}
        }
        Ok(())
    }

    /// Whether `a` may act on `node` as just read for `pass`: the node runs the action's
    /// instance (its `spec.providerID`) and is not control-plane; in a drain pass, the taint of
    /// its cordon (its key, [`NodeAction::taint_key_in`]) is still on it (an operator who
    /// removed it ends the drain). Otherwise why not.
    fn verify(&self, a: &NodeAction, node: &Node, pass: Pass) -> Result<(), Refusal> {
        let facts = node_facts(node);
        facts.verify_runs(&a.instance_id)?;
        let taint = a.taint_key_in(&self.config);
        if matches!(pass, Pass::Drain { .. }) && !facts.has_taint(taint) {
            return Err(Refusal::TaintRemoved {
                taint: taint.to_string(),
                node: facts.name,
            });
        }
        Ok(())
    }

    /// A `cordon`, or a `cordon-drain` in a pass that cordons and drains (its first drain pass,
    /// a dry run): the cordon, the evictions then due, and the Events of the decision once
    /// the drain does not go on.
    async fn cordon_drain(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let announce = match pass {
            Pass::Drain { role, .. } => role == DrainRole::First,
            Pass::Cordon | Pass::Announce => true,
        };
        // The node may already be cordoned for this event (by the event's first pass): the Event
        // is recorded with the announcement (one per event and reason, so never twice).
        let cordoning = self.cordoner().cordon_node(a, &node, announce, out).await?;
        // The evictions (and placeholders) first, the Events of the decision after them: in a
        // mass interruption every request before a node's evictions delays them.
        let drainer = self.drainer();
        let mut drained = if a.action == Action::CordonDrain && !cordoning.gone {
            Some(drainer.evictions(plan, a, &node, pass).await?)
        } else {
            None
        };
        if let Some(report) = &mut drained {
            drainer.leave_late_events(a, pass, report);
        }
        // A drain that goes on leaves the Events of the decision to its next pass (`owed`): in
        // a mass interruption every request here delays the next node's evictions.
        if drained.as_ref().is_none_or(|d| !d.pending) {
            let decision = Decision {
                announce,
                cordoned: cordoning.note,
            };
            self.events().decision(plan, a, &node, decision, out).await;
        }
        if let Some(report) = drained {
            drainer.over(plan, &node, pass, report, out).await;
        }
        Ok(())
    }

    /// A later pass of the drain (see [`super::drain::drain_pass`]) on the node the pass has
    /// just read and verified: its evictions, the Events the first pass left to it (when it is
    /// the pass they are owed to), and when the drain ends, its Event (not in a dry run).
    async fn drain_pass(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let drainer = self.drainer();
        let report = drainer.evictions(plan, a, node, pass).await?;
        if matches!(
            pass,
            Pass::Drain {
                role: DrainRole::Owed,
                ..
            }
        ) {
            // The Events the first pass left to this one, after this pass's evictions.
            self.owed_events(plan, a, node, out).await;
        }
        drainer.over(plan, node, pass, report, out).await;
        Ok(())
    }

    /// The Events of the decision a drain's first pass left to a later one: the announcement
    /// and `Cordoned`.
    async fn owed_events(&self, plan: &Plan, a: &NodeAction, node: &Node, out: &mut NodeOutcome) {
        let decision = Decision {
            announce: true,
            cordoned: Some(self.cordoner().cordoned_note(a)),
        };
        self.events().decision(plan, a, node, decision, out).await;
    }
}

/// A node action's node: its name, and the node as just read and verified (`None`: gone).
struct ReadNode<'a> {
    name: &'a str,
    node: Option<Node>,
}

#[async_trait]
impl Executor for KubeExecutor {
    async fn execute(&self, plan: &Plan, pass: Pass) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.run(plan, pass).await?))
    }

    async fn execute_in(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.run_in(plan, pass, work).await?))
    }

    async fn undo(&self, undo: &Undo) -> Result<UndoOutcome, ExecuteError> {
        let fail = |e: KubeError| {
            let doing = Some(format!("node {}", undo.node));
            ExecuteError::new(undo.instance_id.clone(), doing, e.kind(), e)
        };
        match get_node(&self.clients, &undo.node).await.map_err(fail)? {
            None => Ok(UndoOutcome::NodeGone),
            Some(node) => self.undoer().undo(node, undo).await.map_err(fail),
        }
    }

    async fn room(
        &self,
        nodes: &[String],
    ) -> Result<std::collections::BTreeMap<String, crate::domain::surge::RoomSeen>, ExecuteError>
    {
        self.room_in(nodes, Work::default()).await
    }

    async fn room_in(
        &self,
        nodes: &[String],
        work: Work,
    ) -> Result<std::collections::BTreeMap<String, crate::domain::surge::RoomSeen>, ExecuteError>
    {
        let clients = self.clients.in_lane(Lane::Later).for_work(work);
        super::surge::room_of(&clients, nodes).await.map_err(|e| {
            let doing = Some(format!("placeholders of {} nodes", nodes.len()));
            ExecuteError::new(String::new(), doing, e.kind(), e)
        })
    }

    async fn preflight(
        &self,
        group: &str,
        capabilities: &[crate::domain::admission::Capability],
    ) -> Vec<crate::domain::admission::Proof> {
        let scope = super::preflight::PreflightScope {
            group,
            capabilities,
            reporting_instance: &self.settings.reporting_instance,
        };
        super::preflight::prove(&self.clients, &self.config, &scope).await
    }

    async fn clean_placeholders(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, ExecuteError> {
        self.placeholders().clean(now).await.map_err(|e| {
            let doing = Some("placeholders".to_string());
            ExecuteError::new(String::new(), doing, e.kind(), e)
        })
    }
}
