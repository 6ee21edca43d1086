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
//! - `cordon-drain`: the cordon, then the drain (see [`super::drain`]) until the action's
//!   deadline, and a `Drained` or `DrainIncomplete` Event. Pods left at the deadline are
//!   reported, not an error: the instance goes anyway and retrying the event would not help;
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

use async_trait::async_trait;
use chrono::Utc;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use tracing::Instrument;

use super::api::in_later_lane;
use super::connect::ClusterClient;
use super::cordon::{CordonOutcome, CordonSpec, cordon, get_node};
use super::delete::{DeleteOutcome, delete_target};
use super::drain::{DrainReport, DrainSettings, drain, drain_step};
use super::error::{KubeError, Refusal};
use super::events::{EventOutcome, EventType, NodeEvent, record};
use super::node_facts::node_facts;
use crate::domain::config::{Action, Config};
use crate::domain::plan::{NodeAction, Plan, Target};
use crate::domain::report::DrainSummary;
use crate::ports::{ActionResult, ExecuteError, Executor, Pass};
use crate::ports::{LifecycleCompleter, LifecycleOutcome};

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
    /// How often evicted pods are checked for while waiting for them to go (default 2 s).
    pub poll_interval: Duration,
    /// How long one pass of a drain that does not wait retries a refused eviction (default 0:
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
            poll_interval: Duration::from_secs(2),
            pass_budget: Duration::ZERO,
            conflict_attempts: 5,
            reporting_instance: "forewarn".to_string(),
        }
    }
}

/// What was done for one node action.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOutcome {
    pub instance_id: String,
    pub node: Option<String>,
    pub action: Action,
    pub dry_run: bool,
    /// The node was not there when read: nothing to do to it.
    pub node_gone: bool,
    /// Why the action was refused: the node, as read live, failed verification (see
    /// [`KubeExecutor::run`]'s module doc).
    pub refused: Option<String>,
    pub cordon: Option<CordonOutcome>,
    /// The node was found cordoned with forewarn's taint in an event's first pass: the batch's
    /// cordon pass (or an earlier delivery) did it for this event.
    pub cordoned_before: bool,
    /// When the node was seen cordoned (by this action or before it; not in a dry run).
    pub cordoned_at: Option<chrono::DateTime<Utc>>,
    pub drain: Option<DrainReport>,
    pub delete: Option<DeleteOutcome>,
    pub lifecycle: Option<LifecycleOutcome>,
    /// The lifecycle hook completed after the action (`<asg>/<hook name>`).
    pub lifecycle_hook: Option<String>,
    /// The cordon pass ([`Pass::Cordon`]) left the drain to the drain passes.
    pub drain_pending: bool,
    /// When the lifecycle action was kept alive (a drain still pending).
    pub heartbeat_at: Option<chrono::DateTime<Utc>>,
    /// Event reasons, with what became of each.
    pub events: Vec<(String, EventOutcome)>,
    /// Events that could not be recorded (best effort).
    pub event_failures: Vec<String>,
}

impl NodeOutcome {
    fn new(a: &NodeAction, dry_run: bool) -> NodeOutcome {
        NodeOutcome {
            instance_id: a.instance_id.clone(),
            node: a.node.clone(),
            action: a.action,
            dry_run,
            node_gone: false,
            refused: None,
            cordon: None,
            cordoned_before: false,
            cordoned_at: None,
            drain: None,
            delete: None,
            lifecycle: None,
            lifecycle_hook: a
                .complete_lifecycle
                .as_ref()
                .map(|l| format!("{}/{}", l.asg_name, l.hook_name)),
            drain_pending: false,
            heartbeat_at: None,
            events: Vec::new(),
            event_failures: Vec::new(),
        }
    }

    /// The drain goes on in a later pass.
    pub fn pending(&self) -> bool {
        self.drain_pending || self.drain.as_ref().is_some_and(|d| d.pending)
    }

    /// For people: `cordoned node/x; evicted 3 pods; completed lifecycle action asg/hook`.
    pub fn detail(&self) -> String {
        let node = self.node.as_deref().unwrap_or("?");
        let mut parts: Vec<String> = Vec::new();
        if self.dry_run {
            parts.push("dry run".into());
        }
        if let Some(why) = &self.refused {
            parts.push(format!("refused: {why}"));
        }
        if self.node_gone && self.delete.is_none() {
            parts.push(format!("node/{node} is gone"));
        }
        match &self.cordon {
            Some(CordonOutcome::Cordoned { .. }) => parts.push(format!("cordoned node/{node}")),
            Some(CordonOutcome::AlreadyCordoned) if self.cordoned_before => {
                parts.push(format!("cordoned node/{node}"))
            }
            Some(CordonOutcome::AlreadyCordoned) => {
                parts.push(format!("node/{node} already cordoned"))
            }
            Some(CordonOutcome::WouldCordon { .. }) => {
                parts.push(format!("would cordon and taint node/{node}"))
            }
            Some(CordonOutcome::NodeGone) => parts.push(format!("node/{node} is gone")),
            None => {}
        }
        if let Some(d) = &self.drain {
            parts.push(d.summary());
        } else if self.drain_pending {
            parts.push("drain in the next pass".into());
        }
        if let Some(d) = &self.delete {
            parts.push(d.summary());
        }
        if let (Some(l), Some(hook)) = (&self.lifecycle, &self.lifecycle_hook) {
            parts.push(l.summary(hook));
        }
        let would: Vec<&str> = self
            .events
            .iter()
            .filter(|(_, o)| *o == EventOutcome::WouldCreate)
            .map(|(r, _)| r.as_str())
            .collect();
        if !would.is_empty() {
            parts.push(format!("would record Events {}", would.join(", ")));
        }
        for f in &self.event_failures {
            parts.push(format!("Event not recorded: {f}"));
        }
        if parts.is_empty() || (self.dry_run && parts.len() == 1) {
            parts.push("nothing to do".into());
        }
        parts.join("; ")
    }
}

/// [`Executor`] over the Kubernetes API (and Auto Scaling for lifecycle actions).
pub struct KubeExecutor {
    clients: ClusterClient,
    config: Config,
    settings: ExecutorSettings,
    lifecycle: Option<Arc<dyn LifecycleCompleter>>,
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
            config: config.clone(),
            settings: ExecutorSettings::default(),
            lifecycle: None,
        }
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
    /// error from any means the event must come back (the others were still carried out).
    pub async fn run(&self, plan: &Plan, pass: Pass) -> Result<Vec<NodeOutcome>, ExecuteError> {
        let runs = plan.actions.iter().map(|a| {
            let span = tracing::info_span!(
                "node_action",
                event_id = %plan.event_id,
                instance_id = %a.instance_id,
                node = a.node.as_deref().unwrap_or(""),
                action = %a.action,
                dry_run = self.settings.dry_run,
            );
            async move {
                let work = self.act(plan, a, pass);
                let done = if matches!(pass, Pass::Drain { .. }) {
                    in_later_lane(work).await
                } else {
                    work.await
                };
                done.map_err(|e| {
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

    /// Cordons and taints the nodes of `plan`'s cordon actions (a `get` and at most one patch
    /// each, nothing else: no Event, no eviction). Control-plane nodes and gone nodes are left to
    /// [`KubeExecutor::run`], which refuses or reports them.
    pub async fn cordon_only(&self, plan: &Plan) -> Result<Vec<NodeOutcome>, ExecuteError> {
        let runs = plan
            .actions
            .iter()
            .filter(|a| matches!(a.action, Action::Cordon | Action::CordonDrain))
            .map(|a| async move {
                let mut out = NodeOutcome::new(a, self.settings.dry_run);
                let Some(name) = a.node.as_deref() else {
                    return Ok(out);
                };
                let fail = |e: KubeError| ExecuteError {
                    instance_id: a.instance_id.clone(),
                    message: format!("node {name}: {e}"),
                    kind: e.kind(),
                };
                match get_node(&self.clients, name).await.map_err(fail)? {
                    // A node that fails verification is left to the event's own pass, which
                    // refuses it with the reason.
                    Some(node) if node_facts(&node).verify_runs(&a.instance_id).is_ok() => {
                        let spec = CordonSpec::new(&self.config, &a.taint_value);
                        let cordoned = cordon(
                            &self.clients,
                            node,
                            &spec,
                            self.settings.conflict_attempts,
                            self.settings.dry_run,
                        )
                        .await
                        .map_err(fail)?;
                        if matches!(
                            cordoned,
                            CordonOutcome::Cordoned { .. } | CordonOutcome::AlreadyCordoned
                        ) {
                            out.cordoned_at = Some(Utc::now());
                        }
                        out.cordon = Some(cordoned);
                    }
                    _ => {}
                }
                Ok(out)
            });
        join_all(runs).await.into_iter().collect()
    }

    async fn act(&self, plan: &Plan, a: &NodeAction, pass: Pass) -> Result<NodeOutcome, KubeError> {
        let dry_run = self.settings.dry_run;
        let mut out = NodeOutcome::new(a, dry_run);
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
            let later_pass = matches!(
                pass,
                Pass::Drain {
                    announce: false,
                    ..
                }
            );
            match (a.action, node) {
                (Action::CordonDrain, Some(node)) if pass == Pass::Cordon => {
                    // The cordon only; the Events and the drain follow in the drain passes.
                    let spec = CordonSpec::new(&self.config, &a.taint_value);
                    let cordoned = cordon(
                        &self.clients,
                        node,
                        &spec,
                        self.settings.conflict_attempts,
                        dry_run,
                    )
                    .await?;
                    if cordoned != CordonOutcome::NodeGone {
                        out.cordoned_at = Some(Utc::now());
                        out.drain_pending = !dry_run;
                    }
                    out.cordon = Some(cordoned);
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
                (Action::None, _) => {}
            }
        }
        let pending = out.pending();
        if let (Some(lifecycle), true) = (&a.complete_lifecycle, pending) {
            let heartbeat = match pass {
                Pass::Drain { heartbeat, .. } => heartbeat,
                Pass::Whole | Pass::Cordon => false,
            };
            if heartbeat
                && let Some(completer) = &self.lifecycle
                && completer.heartbeat(&a.instance_id, lifecycle).await?
            {
                out.heartbeat_at = Some(Utc::now());
            }
        } else if let Some(lifecycle) = &a.complete_lifecycle {
            out.lifecycle = Some(if dry_run {
                LifecycleOutcome::WouldComplete
            } else if let Some(completer) = &self.lifecycle {
                completer.complete(&a.instance_id, lifecycle).await?
            } else {
                tracing::warn!("no Auto Scaling client: the lifecycle action is left to time out");
                LifecycleOutcome::NotConfigured
            });
        }
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
            Pass::Whole | Pass::Cordon => true,
        };
        if announce {
            self.announce(plan, a, &node, out).await;
        }
        // The node may already be cordoned for this event (by the batch's cordon pass or the
        // event's cordon pass): the Event is recorded with the announcement (one per event and
        // reason, so never twice).
        let gone = self.cordon_node(plan, a, &node, announce, out).await?;
        if a.action != Action::CordonDrain || gone {
            return Ok(());
        }
        self.drain_node(plan, a, &node, pass, out).await
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

    /// Cordons and taints the node, with a `Cordoned` Event when that changed it (or, with
    /// `already_ours`, when it was found cordoned with forewarn's taint). True when the node was
    /// gone.
    async fn cordon_node(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        already_ours: bool,
        out: &mut NodeOutcome,
    ) -> Result<bool, KubeError> {
        let spec = CordonSpec::new(&self.config, &a.taint_value);
        let cordoned = cordon(
            &self.clients,
            node.clone(),
            &spec,
            self.settings.conflict_attempts,
            self.settings.dry_run,
        )
        .await?;
        let gone = cordoned == CordonOutcome::NodeGone;
        if matches!(
            cordoned,
            CordonOutcome::Cordoned { .. } | CordonOutcome::AlreadyCordoned
        ) {
            out.cordoned_at = Some(Utc::now());
        }
        out.cordoned_before = already_ours && cordoned == CordonOutcome::AlreadyCordoned;
        if matches!(cordoned, CordonOutcome::Cordoned { .. }) || out.cordoned_before {
            let note = format!(
                "Marked unschedulable and tainted {}={}:{}",
                spec.taint_key,
                spec.taint_value,
                spec.taint_effect.as_str()
            );
            self.event(
                plan,
                node,
                "Cordoned",
                "Cordon",
                EventType::Normal,
                note,
                out,
            )
            .await;
        }
        out.cordon = Some(cordoned);
        Ok(gone)
    }

    /// A later pass of a drain that does not wait, on the node the pass has just read and
    /// verified; when the drain ends, its Event.
    async fn drain_pass(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let Pass::Drain { started_at, .. } = pass else {
            return Ok(());
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let deadline = a
            .deadline
            .unwrap_or_else(|| started_at + self.config.drain_timeout);
        let report = drain_step(
            &self.clients,
            name,
            started_at,
            deadline,
            &self.drain_settings(),
            self.settings.dry_run,
        )
        .await?;
        if !report.pending && !self.settings.dry_run {
            self.drain_ended(plan, node, &report, out).await;
        }
        out.drain = Some(report);
        Ok(())
    }

    fn drain_settings(&self) -> DrainSettings {
        DrainSettings {
            parallelism: self.settings.eviction_parallelism,
            backoff_initial: self.settings.backoff_initial,
            backoff_max: self.settings.backoff_max,
            poll_interval: self.settings.poll_interval,
            pass_budget: self.settings.pass_budget,
        }
    }

    /// Drains the node: until the action's deadline ([`Pass::Whole`]), or one pass that does not
    /// wait. When the drain ends, records a `Drained` or `DrainIncomplete` Event (not in a dry
    /// run).
    async fn drain_node(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let deadline = a
            .deadline
            .unwrap_or_else(|| Utc::now() + self.config.drain_timeout);
        let settings = self.drain_settings();
        let dry_run = self.settings.dry_run;
        let report = match pass {
            Pass::Whole | Pass::Cordon => {
                drain(&self.clients, &name, deadline, &settings, dry_run).await?
            }
            Pass::Drain { started_at, .. } => {
                drain_step(
                    &self.clients,
                    &name,
                    started_at,
                    deadline,
                    &settings,
                    dry_run,
                )
                .await?
            }
        };
        if !dry_run && !report.pending {
            self.drain_ended(plan, node, &report, out).await;
        }
        out.drain = Some(report);
        Ok(())
    }

    /// The `Drained` or `DrainIncomplete` Event of a drain that ended.
    async fn drain_ended(
        &self,
        plan: &Plan,
        node: &Node,
        report: &DrainReport,
        out: &mut NodeOutcome,
    ) {
        if report.complete() {
            let note = format!("Drained: {}", report.summary());
            self.event(plan, node, "Drained", "Drain", EventType::Normal, note, out)
                .await;
        } else {
            let left: Vec<String> = report
                .left
                .iter()
                .map(|l| format!("{}: {}", l.pod, l.reason))
                .collect();
            let note = format!(
                "Drain incomplete at the deadline: {}. Refused: {}",
                report.summary(),
                left.join("; ")
            );
            self.event(
                plan,
                node,
                "DrainIncomplete",
                "Drain",
                EventType::Warning,
                note,
                out,
            )
            .await;
        }
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

#[async_trait]
impl Executor for KubeExecutor {
    async fn cordon(&self, plan: &Plan) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.cordon_only(plan).await?))
    }

    async fn execute(&self, plan: &Plan, pass: Pass) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.run(plan, pass).await?))
    }
}

/// What the executor reports to the pipeline of each node's outcome.
fn results(outcomes: &[NodeOutcome]) -> Vec<ActionResult> {
    outcomes
        .iter()
        .map(|o| ActionResult {
            instance_id: o.instance_id.clone(),
            detail: o.detail(),
            cordoned_at: o.cordoned_at,
            drain: o
                .drain
                .as_ref()
                .filter(|_| !o.dry_run)
                .map(|d| DrainSummary {
                    evicted: d.evicted.len(),
                    left: d.left.len(),
                    complete: d.complete(),
                    pending: d.pending,
                }),
            pending: o.pending(),
            wait_until: o.drain.as_ref().and_then(|d| d.wait_until),
            heartbeat_at: o.heartbeat_at,
            refused: o.refused.clone().or_else(|| match &o.delete {
                Some(DeleteOutcome::Refused { why, .. }) => Some(why.clone()),
                _ => None,
            }),
        })
        .collect()
}
