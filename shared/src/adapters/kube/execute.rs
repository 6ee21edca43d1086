//! The executor: a plan's node actions carried out through the Kubernetes API, then the ASG
//! lifecycle action completed.
//!
//! Every pass reads what it acts on and verifies it before any write, whatever the plan says (a
//! plan may come from a continuation message: see [`crate::domain::inbound::continuation`]). The node is
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
//! (other than the answers each step expects: 404, 409, 429) is a [`PortError`], so the
//! event comes back. Events are best effort: a failure to record one is logged and reported,
//! never an error. A dry run takes the same path and reads the same objects, but sends no write;
//! its results say what would be done.
//!
//! Here: a pass run over a plan's actions, each action's node read and verified, and its
//! steps run in order; each step is a [`KubeExecutor`] method in its verb's module (`cordon`,
//! `drain`, `delete`, `events`, `launch` for the lifecycle action), which depend on
//! [`super::executor`] alone, never on this one.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use tracing::Instrument;

use super::api::rate_limit::Lane;
use super::cordon::get_node;
use super::error::{KubeError, Refusal};
use super::executor::KubeExecutor;
use super::node_facts::node_facts;
use super::outcome::NodeOutcome;
use crate::domain::config::Action;
use crate::domain::cordon_record::{Undo, UndoOutcome};
use crate::domain::plan::{NodeAction, Plan};
use crate::domain::surge::RoomSeen;
use crate::ports::{ActionResult, DrainRole, Executor, Pass, PortError, Work};

impl KubeExecutor {
    /// Carries out every node action of `plan` (concurrently) for `pass`, with what each did. An
    /// error from any means the event must come back (the others were still carried out). No
    /// deadline: see [`KubeExecutor::run_in`]. (The tests' way in: the port's is
    /// [`Executor::execute`].)
    #[cfg(any(test, feature = "fixtures"))]
    pub async fn run(&self, plan: &Plan, pass: Pass) -> Result<Vec<NodeOutcome>, PortError> {
        self.run_in(plan, pass, Work::default()).await
    }

    /// Carries out every node action of `plan` (concurrently) for `pass`, with what each did,
    /// as part of `work`: its calls retry transient failures until the
    /// work's deadline. Every pass but the cordon runs in [`Lane::Later`] of the rate limit: a
    /// drain's node reads and Events do not go before other nodes' cordons.
    pub async fn run_in(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<NodeOutcome>, PortError> {
        let lane = if pass == Pass::Cordon {
            Lane::First
        } else {
            Lane::Later
        };
        // The same executor, its client in the pass's lane and within the work's deadline.
        let this = KubeExecutor {
            clients: self.clients.in_lane(lane).for_work(work),
            ..self.clone()
        };
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
                let done = this.act(plan, a, pass).await.map(NodeOutcome::finish);
                done.map_err(|e| {
                    tracing::warn!(error = %e, "node action failed");
                    failed(&a.instance_id, a.node.as_ref().map(|n| format!("node {n}")))(e)
                })
            }
            .instrument(span)
        });
        join_all(runs).await.into_iter().collect()
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
            let cordoning = pass == Pass::Cordon && a.action == Action::CordonDrain;
            let recent = cordoning.then(|| self.clients.take_recent_node(name));
            let node = match recent.flatten() {
                Some(node) => Some(node),
                None => get_node(&self.clients, name).await?,
            };
            if let Some(node) = &node
                && let Err(why) = self.verify(a, node, pass)
            {
                tracing::warn!(%why, "refusing to act");
                out.refuse(why.to_string());
                return Ok(out);
            }
            // A delete and an uncordon say what became of a node gone in their own words.
            if node.is_none() && !matches!(a.action, Action::Delete | Action::Uncordon) {
                out.say(format!("node/{name} is gone"));
            }
            if pass == Pass::Announce {
                // The Events a drain's first pass left to a pass that came too late to drain:
                // nothing else, not even the lifecycle action.
                if let Some(node) = &node {
                    self.owed_events(plan, a, node, &mut out).await;
                }
                return Ok(out);
            }
            self.act_on(plan, a, (name, node), pass, &mut out).await?;
        }
        self.lifecycle_step(plan, a, pass, &mut out).await?;
        Ok(out)
    }

    /// The step of `a`'s action for `pass` on its node (its name, and the node as just read and
    /// verified; `None`: gone).
    async fn act_on(
        &self,
        plan: &Plan,
        a: &NodeAction,
        (name, node): (&str, Option<Node>),
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let dry_run = self.settings.dry_run;
        let later_pass = matches!(pass, Pass::Drain { .. }) && !pass.is_first_drain();
        match (a.action, node) {
            // The first pass of a `cordon-drain`: the cordon only (one patch, no Event), so that
            // a mass interruption's first deliveries are short and every node is cordoned early;
            // the Events and the evictions follow in the drain passes. (A dry run has no later
            // pass: its first pass says all the drain would do.)
            (Action::CordonDrain, Some(node)) if pass == Pass::Cordon && !dry_run => {
                if !self.cordon_node(plan.kind, a, &node, false, out).await?.0 {
                    out.result.pending = true;
                    out.say("drain in the next pass");
                }
            }
            (Action::CordonDrain, Some(node)) if later_pass => {
                // A later drain pass: the node was cordoned by the earlier passes, and its
                // taint was just seen; what is on it is evicted or waited for, then the Events
                // the first pass left to this one (when they are owed to it), and when the
                // drain ends, its Event (not in a dry run).
                let report = self.evictions(plan, a, &node, pass).await?;
                if pass.role() == Some(DrainRole::Owed) {
                    self.owed_events(plan, a, &node, out).await;
                }
                self.drain_over((plan, a), &node, pass, report, out).await;
            }
            (Action::Cordon | Action::CordonDrain, Some(node)) => {
                self.cordon_drain(plan, a, node, pass, out).await?;
            }
            // The node is gone (deleted between passes, or never there): nothing is left to
            // do to it, and a drain's chain ends here.
            (Action::Cordon | Action::CordonDrain, None) => {}
            (Action::Delete, node) => self.delete(plan, a, name, node.as_ref(), out).await?,
            (Action::Uncordon, node) => {
                let undo = match (node, &a.record) {
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
                };
                out.say(match undo {
                    UndoOutcome::Undone => format!("undid forewarn's cordon of node/{name}"),
                    UndoOutcome::WouldUndo => {
                        format!("would undo forewarn's cordon of node/{name}")
                    }
                    UndoOutcome::NodeGone => format!("node/{name} is gone"),
                    UndoOutcome::Refused { why } => format!("left cordoned: {why}"),
                });
            }
            (Action::None, _) => {}
        }
        Ok(())
    }

    /// Whether `a` may act on `node` as just read for `pass`: the node runs the action's
    /// instance (its `spec.providerID`) and is not control-plane; in a drain pass, the taint of
    /// its cordon (its key, [`NodeAction::taint_key`]) is still on it (an operator who
    /// removed it ends the drain). Otherwise why not.
    fn verify(&self, a: &NodeAction, node: &Node, pass: Pass) -> Result<(), Refusal> {
        let facts = node_facts(node);
        facts.verify_runs(&a.instance_id)?;
        let taint = &a.taint_key;
        if matches!(pass, Pass::Drain { .. }) && !facts.has_taint(taint) {
            return Err(Refusal::TaintRemoved {
                taint: taint.clone(),
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
        // Every pass but a drain's later ones announces.
        let announce = pass.role().is_none_or(|role| role == DrainRole::First);
        // The node may already be cordoned for this event (by the event's first pass): the Event
        // is recorded with the announcement (one per event and reason, so never twice).
        let (gone, cordoned) = self.cordon_node(plan.kind, a, &node, announce, out).await?;
        // The evictions (and placeholders) first, the Events of the decision after them: in a
        // mass interruption every request before a node's evictions delays them.
        let drained = if a.action == Action::CordonDrain && !gone {
            Some(self.evictions(plan, a, &node, pass).await?)
        } else {
            None
        };
        // A drain that goes on leaves the Events of the decision to its next pass (`owed`): in
        // a mass interruption every request here delays the next node's evictions.
        if drained.as_ref().is_none_or(|d| !d.pending) {
            self.decision_events(plan, a, &node, (announce, cordoned), out)
                .await;
        }
        if let Some(report) = drained {
            self.drain_over((plan, a), &node, pass, report, out).await;
        }
        Ok(())
    }

    /// The Events of the decision a drain's first pass left to a later one: the announcement
    /// and `Cordoned`.
    async fn owed_events(&self, plan: &Plan, a: &NodeAction, node: &Node, out: &mut NodeOutcome) {
        self.decision_events(plan, a, node, (true, true), out).await;
    }
}

#[async_trait]
impl Executor for KubeExecutor {
    async fn execute(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<ActionResult>, PortError> {
        let outcomes = self.run_in(plan, pass, work).await?;
        Ok(outcomes.into_iter().map(|o| o.result).collect())
    }

    async fn room(
        &self,
        nodes: &[String],
        work: Work,
    ) -> Result<BTreeMap<String, RoomSeen>, PortError> {
        let clients = self.clients.in_lane(Lane::Later).for_work(work);
        let doing = format!("placeholders of {} nodes", nodes.len());
        let room = super::surge::room_of(&clients, nodes).await;
        room.map_err(failed("", Some(doing)))
    }

    fn free_requests(&self) -> Option<f64> {
        self.clients.free_requests()
    }
}

/// The port's error of a step for `instance_id` (none: the executor's own work) that failed
/// `doing` something.
pub(crate) fn failed(
    instance_id: &str,
    doing: Option<String>,
) -> impl FnOnce(KubeError) -> PortError {
    move |e| PortError {
        doing,
        ..PortError::new(instance_id, e.kind(), e)
    }
}
