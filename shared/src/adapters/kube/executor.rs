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

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use tracing::Instrument;

use super::api::rate_limit::Lane;
use super::connect::ClusterClient;
use super::cordon::{CordonOutcome, CordonSpec, RecordKeys, cordon, get_node, uncordon};
use super::delete::{DeleteOutcome, delete_target};
use super::error::{KubeError, Refusal};
use super::events::{EventType, NodeEvent, record};
use super::node_facts::node_facts;
pub use super::outcome::NodeOutcome;

mod drain;
mod lifecycle;
mod port;
use crate::domain::config::{Action, Config};
use crate::domain::plan::{NodeAction, Plan, Target};
use crate::domain::wayback::{Undo, UndoOutcome};
use crate::ports::LifecycleCompleter;
use crate::ports::{Clock, ExecuteError, Pass, Work};

/// How many evictions run at once.
pub const ENV_EVICTION_PARALLELISM: &str = "FOREWARN_EVICTION_PARALLELISM";

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
        }
    }
}

/// What cordoning a node came to (see [`KubeExecutor::cordon_node`]).
struct Cordoning {
    /// The node is gone, or the cordon was refused: nothing more is done to it.
    gone: bool,
    /// The note of the `Cordoned` Event to record.
    note: Option<String>,
}

/// [`Executor`](crate::ports::Executor) over the Kubernetes API (and Auto Scaling for lifecycle actions). Cheap to
/// clone: each pass runs on a clone whose client carries the pass's lane and the work's
/// deadline (see [`KubeExecutor::run_in`]).
#[derive(Clone)]
pub struct KubeExecutor {
    clients: ClusterClient,
    config: Arc<Config>,
    settings: ExecutorSettings,
    lifecycle: Option<Arc<dyn LifecycleCompleter>>,
    /// What surge drains remember between passes (budgets, refused namespaces), shared by them.
    surge_memory: Arc<super::surge::SurgeMemory>,
    /// Where cordon records' keys are read (the pool store); `None`: see [`RecordKeys::Unsigned`].
    keys: Option<Arc<dyn crate::ports::PoolStore>>,
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
    pub fn with_keys(mut self, store: Arc<dyn crate::ports::PoolStore>) -> KubeExecutor {
        self.keys = Some(store);
        self
    }

    /// How cordons treat records (see [`RecordKeys`]); keys that cannot be read are logged and
    /// the cordon still goes on, its record unsigned (never acted on, replaced by the next one).
    async fn record_keys(&self) -> RecordKeys {
        let Some(store) = self.keys.as_ref() else {
            return RecordKeys::Unsigned;
        };
        match store.continuation_keys().await {
            Ok(keys) => RecordKeys::Signed(keys),
            Err(e) => {
                tracing::warn!(error = %e, "the continuation keys cannot be read: the cordon record is written unsigned");
                RecordKeys::Unreadable
            }
        }
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
        let this = self.on(self.clients.in_lane(lane).within(work.deadline));
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
                    ExecuteError {
                        instance_id: a.instance_id.clone(),
                        message: match &a.node {
                            Some(n) => format!("node {n}: {e}"),
                            None => e.to_string(),
                        },
                        kind: e.kind(),
                    }
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
        let dry_run = self.settings.dry_run;
        let mut out = NodeOutcome::new(a, dry_run);
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
                    let note = Some(self.cordoned_note(a));
                    self.decision_events(plan, a, node, (true, note), &mut out)
                        .await;
                }
                return Ok(out);
            }
            let later_pass = matches!(
                pass,
                Pass::Drain {
                    announce: false,
                    ..
                }
            );
            match (a.action, node) {
                // A dry run has no later pass: its first pass says all the drain would do.
                (Action::CordonDrain, Some(node)) if pass == Pass::Cordon && !dry_run => {
                    self.cordon_first(a, node, &mut out).await?;
                }
                (Action::CordonDrain, Some(node)) if later_pass => {
                    // A later drain pass: the node was cordoned by the earlier passes, and its
                    // taint was just seen; what is on it is evicted or waited for.
                    self.drain_pass(plan, a, &node, pass, &mut out).await?;
                }
                (Action::Cordon | Action::CordonDrain, Some(node)) => {
                    self.cordon_drain(plan, a, node, pass, &mut out).await?;
                }
                // The node is gone (deleted between passes, or never there): nothing is left to
                // do to it, and a drain's chain ends here.
                (Action::Cordon | Action::CordonDrain, None) => {}
                (Action::Delete, node) => {
                    self.delete(plan, a, name, node.as_ref(), &mut out).await?;
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
                            self.undo_cordon(node, &undo).await?
                        }
                    });
                }
                (Action::None, _) => {}
            }
        }
        self.lifecycle(a, pass, &mut out).await?;
        Ok(out)
    }

    /// Whether `a` may act on `node` as just read for `pass`: the node runs the action's
    /// instance (its `spec.providerID`) and is not control-plane; in a drain pass, forewarn's
    /// taint is still on it (an operator who removed it ends the drain). Otherwise why not.
    fn verify(&self, a: &NodeAction, node: &Node, pass: Pass) -> Result<(), Refusal> {
        let facts = node_facts(node);
        facts.verify_runs(&a.instance_id)?;
        if matches!(pass, Pass::Drain { .. }) && !facts.has_taint(&self.config.taint_key) {
            return Err(Refusal::TaintRemoved {
                taint: self.config.taint_key.clone(),
                node: facts.name,
            });
        }
        Ok(())
    }

    async fn cordon_drain(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let announce = match pass {
            Pass::Drain { announce, .. } => announce,
            Pass::Cordon | Pass::Announce => true,
        };
        // The node may already be cordoned for this event (by the event's first pass): the Event
        // is recorded with the announcement (one per event and reason, so never twice).
        let cordoning = self.cordon_node(a, &node, announce, out).await?;
        // The evictions (and placeholders) first, the Events of the decision after them: in a
        // mass interruption every request before a node's evictions delays them.
        let mut drained = if a.action == Action::CordonDrain && !cordoning.gone {
            Some(self.drain_only(plan, a, &node, pass).await?)
        } else {
            None
        };
        if let Some(report) = &mut drained {
            self.leave_late_events(a, pass, report);
        }
        // A drain that goes on leaves the Events of the decision to its next pass (`owed`): in
        // a mass interruption every request here delays the next node's evictions.
        if drained.as_ref().is_none_or(|d| !d.pending) {
            self.decision_events(plan, a, &node, (announce, cordoning.note), out)
                .await;
        }
        if let Some(report) = drained {
            self.drain_over(plan, &node, pass, report, out).await;
        }
        Ok(())
    }

    /// The Events of the decision: with `announce`, what forewarn does and why (see
    /// [`Self::announce`]); with a note, `Cordoned`.
    async fn decision_events(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        (announce, cordoned): (bool, Option<String>),
        out: &mut NodeOutcome,
    ) {
        if announce {
            self.announce(plan, a, node, out).await;
        }
        if let Some(note) = cordoned {
            let normal = EventType::Normal;
            self.event(plan, node, "Cordoned", "Cordon", normal, note, out)
                .await;
        }
    }

    /// The Event that says what forewarn is about to do and why (with the drain's deadline).
    async fn announce(&self, plan: &Plan, a: &NodeAction, node: &Node, out: &mut NodeOutcome) {
        let action_name = if a.action == Action::Cordon {
            "Cordon"
        } else {
            "CordonDrain"
        };
        let mut note = a.reason.clone();
        if let Some(deadline) = a.deadline {
            note.push_str(&format!(" (drain deadline {})", deadline.to_rfc3339()));
        }
        self.event(
            plan,
            node,
            &a.event_reason,
            action_name,
            EventType::Warning,
            note,
            out,
        )
        .await;
    }

    /// Cordons and taints the node; says whether it was gone (or the cordon refused), and the
    /// note of the `Cordoned` Event to record when the cordon changed it (or, with
    /// `already_ours`, when it was found cordoned with forewarn's taint).
    async fn cordon_node(
        &self,
        a: &NodeAction,
        node: &Node,
        already_ours: bool,
        out: &mut NodeOutcome,
    ) -> Result<Cordoning, KubeError> {
        let keys = self.record_keys().await;
        let spec = CordonSpec::new(&self.config, &a.taint_value, a.record.as_ref(), keys);
        let verify = |n: &Node| self.verify(a, n, Pass::Cordon);
        let cordoned = cordon(
            &self.clients,
            node.clone(),
            &spec,
            self.settings.conflict_attempts,
            self.settings.dry_run,
            &verify,
        )
        .await?;
        if let CordonOutcome::Refused { why } = &cordoned {
            out.refused = Some(why.clone());
            return Ok(Cordoning {
                gone: true,
                note: None,
            });
        }
        let gone = cordoned == CordonOutcome::NodeGone;
        if matches!(
            cordoned,
            CordonOutcome::Cordoned { .. } | CordonOutcome::AlreadyCordoned
        ) {
            out.cordoned_at = Some(self.clients.clock().now());
        }
        out.cordoned_before = already_ours && cordoned == CordonOutcome::AlreadyCordoned;
        let note = (matches!(cordoned, CordonOutcome::Cordoned { .. }) || out.cordoned_before)
            .then(|| self.cordoned_note(a));
        out.cordon = Some(cordoned);
        Ok(Cordoning { gone, note })
    }

    /// A first drain pass that came after the drain's deadline evicted what was left at once,
    /// and so ended the drain; when the notice says when the instance goes, its Events (of the
    /// decision, and the drain's end) would come before the instance goes, in a mass
    /// interruption ahead of other nodes' evictions. Then the drain stays pending until the
    /// instance's end: its next pass, refused as late, records the Events of the decision alone
    /// (`Pass::Announce`); the drain's end gets no Event.
    fn leave_late_events(
        &self,
        a: &NodeAction,
        pass: Pass,
        report: &mut super::drain::DrainReport,
    ) {
        let first = matches!(pass, Pass::Drain { announce: true, .. });
        let now = self.clients.clock().now();
        if let (true, false, true, Some(deadline)) =
            (first, report.pending, a.grace_to_deadline, a.deadline)
            && now >= deadline
            && !self.settings.dry_run
        {
            report.pending = true;
            report.wait_until =
                Some(deadline + self.config.deadline_margin + chrono::Duration::seconds(1));
        }
    }

    /// The note of the `Cordoned` Event of `a`'s cordon.
    fn cordoned_note(&self, a: &NodeAction) -> String {
        let spec = CordonSpec::new(
            &self.config,
            &a.taint_value,
            a.record.as_ref(),
            RecordKeys::Unsigned,
        );
        format!(
            "Marked unschedulable and tainted {}={}:{}",
            spec.taint_key,
            spec.taint_value,
            spec.taint_effect.as_str()
        )
    }

    /// The first pass of a `cordon-drain`: the cordon only (one patch, no Event), so that a
    /// mass interruption's first deliveries are short and every node is cordoned early; the
    /// Events and the evictions follow in the drain passes.
    async fn cordon_first(
        &self,
        a: &NodeAction,
        node: Node,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let keys = self.record_keys().await;
        let spec = CordonSpec::new(&self.config, &a.taint_value, a.record.as_ref(), keys);
        let verify = |n: &Node| self.verify(a, n, Pass::Cordon);
        let cordoned = cordon(
            &self.clients,
            node,
            &spec,
            self.settings.conflict_attempts,
            false,
            &verify,
        )
        .await?;
        if let CordonOutcome::Refused { why } = &cordoned {
            out.refused = Some(why.clone());
        } else if cordoned != CordonOutcome::NodeGone {
            out.cordoned_at = Some(self.clients.clock().now());
            out.drain_pending = true;
        }
        out.cordon = Some(cordoned);
        Ok(())
    }

    async fn delete(
        &self,
        plan: &Plan,
        a: &NodeAction,
        name: &str,
        node: Option<&Node>,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let target = a.target.clone().unwrap_or_else(|| Target::Node {
            name: name.to_string(),
        });
        let deleted = if node.is_none() && matches!(target, Target::Node { .. }) {
            DeleteOutcome::AlreadyGone {
                target: target.to_string(),
            }
        } else {
            delete_target(
                &self.clients,
                &target,
                &a.instance_id,
                node.map(|_| name),
                self.settings.dry_run,
            )
            .await?
        };
        if let Some(node) = node
            && !matches!(deleted, DeleteOutcome::Refused { .. })
        {
            let note = a.reason.clone();
            self.event(
                plan,
                node,
                &a.event_reason,
                "Delete",
                EventType::Warning,
                note,
                out,
            )
            .await;
        }
        if let (Some(node), DeleteOutcome::Deleted { target }) = (node, &deleted) {
            let note = format!("Deleted {target}");
            self.event(
                plan,
                node,
                "Deleted",
                "Delete",
                EventType::Normal,
                note,
                out,
            )
            .await;
        }
        out.delete = Some(deleted);
        Ok(())
    }

    /// The way back: undoes forewarn's cordon of `node` (read live) as `undo` says, with an
    /// `Uncordoned` Event saying why (see [`Executor::undo`]).
    async fn undo_cordon(&self, node: Node, undo: &Undo) -> Result<UndoOutcome, KubeError> {
        let verify = |n: &Node| -> Result<(), Refusal> {
            node_facts(n).verify_runs(&undo.instance_id)?;
            Ok(())
        };
        let outcome = uncordon(
            &self.clients,
            node.clone(),
            &self.config.taint_key,
            &undo.record,
            (self.settings.conflict_attempts, self.settings.dry_run),
            &verify,
        )
        .await?;
        if matches!(outcome, UndoOutcome::Undone | UndoOutcome::WouldUndo) {
            let event = NodeEvent {
                node: &node,
                event_id: &undo.record.event_id,
                reason: "Uncordoned",
                action: "Uncordon",
                type_: EventType::Normal,
                note: format!("forewarn's cordon undone: {}", undo.why),
            };
            let recorded = record(
                &self.clients,
                &event,
                &self.settings.reporting_instance,
                self.settings.dry_run,
            )
            .await;
            if let Err(e) = recorded {
                tracing::warn!(error = %e, "could not record the Uncordoned Event");
            }
        }
        Ok(outcome)
    }

    /// Records an Event, best effort.
    #[allow(clippy::too_many_arguments)]
    async fn event(
        &self,
        plan: &Plan,
        node: &Node,
        reason: &str,
        action: &str,
        type_: EventType,
        note: String,
        out: &mut NodeOutcome,
    ) {
        let event = NodeEvent {
            node,
            event_id: &plan.event_id,
            reason,
            action,
            type_,
            note,
        };
        match record(
            &self.clients,
            &event,
            &self.settings.reporting_instance,
            self.settings.dry_run,
        )
        .await
        {
            Ok(outcome) => out.events.push((reason.to_string(), outcome)),
            Err(e) => {
                tracing::warn!(reason, error = %e, "could not record the Event");
                out.event_failures.push(format!("{reason}: {e}"));
            }
        }
    }
}
