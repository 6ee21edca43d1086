//! The executor's drain of a node: one pass of its drain (see
//! [`super::super::drain::drain_pass`]), and the `Drained` or `DrainIncomplete` Event when the
//! drain is over.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::super::connect::ClusterClient;
use super::super::drain::{DrainReport, DrainSettings, drain_pass};
use super::super::error::KubeError;
use super::super::events::EventType;
use super::super::surge::{PlaceholderRefusal, SurgeMemory, SurgeSettings};
use super::events::{Recorder, Said};
use super::pod_events::PodEvents;
use super::{ExecutorSettings, NodeOutcome};
use crate::domain::config::Config;
use crate::domain::plan::{NodeAction, Plan};
use crate::ports::{DrainRole, Pass};

/// Drains nodes, a pass at a time.
pub(super) struct Drainer<'a> {
    pub clients: &'a ClusterClient,
    pub config: &'a Config,
    pub settings: &'a ExecutorSettings,
    /// What surge drains remember between passes (budgets, refused namespaces), shared by them.
    pub surge_memory: &'a Arc<SurgeMemory>,
    /// Where the drain's end is recorded.
    pub events: Recorder<'a>,
    /// The Events on the pods each pass evicts.
    pub pod_events: PodEvents<'a>,
}

impl Drainer<'_> {
    /// The evictions of one drain pass (see [`super::super::drain::drain_pass`]).
    pub async fn evictions(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
    ) -> Result<DrainReport, KubeError> {
        let started_at = match pass {
            Pass::Drain { started_at, .. } => started_at,
            Pass::Cordon | Pass::Announce => self.clients.clock().now(),
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let deadline = a
            .deadline
            .unwrap_or_else(|| started_at + self.config.drain_timeout);
        let settings = DrainSettings {
            parallelism: self.settings.eviction_parallelism,
            backoff_initial: self.settings.backoff_initial,
            backoff_max: self.settings.backoff_max,
            pass_budget: self.settings.pass_budget,
            grace_until: a.grace_to_deadline.then_some(deadline),
            surge: a.surge.then(|| SurgeSettings {
                event_id: plan.event_id.clone(),
                deadline,
                node_uid: node.metadata.uid.clone(),
                parallelism: self.settings.eviction_parallelism,
                first: pass.is_first_drain(),
                memory: self.surge_memory.clone(),
            }),
        };
        drain_pass(
            self.clients,
            name,
            started_at,
            deadline,
            &settings,
            self.settings.dry_run,
        )
        .await
    }

    /// A first drain pass that came after the drain's deadline evicted what was left at once,
    /// and so ended the drain; when the notice says when the instance goes, its Events (of the
    /// decision, and the drain's end) would come before the instance goes, in a mass
    /// interruption ahead of other nodes' evictions. Then the drain stays pending until the
    /// instance's end: its next pass, refused as late, records the Events of the decision alone
    /// (`Pass::Announce`); the drain's end gets no Event.
    pub fn leave_late_events(&self, a: &NodeAction, pass: Pass, report: &mut DrainReport) {
        let first = pass.is_first_drain();
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

    /// A drain pass's report put in `out`; when the drain ended, its Event (not in a dry run,
    /// nor in a quiet pass). Then, last of the pass, the Events on the pods it evicted (see
    /// [`PodEvents`]).
    pub async fn over(
        &self,
        plan: &Plan,
        node: &Node,
        pass: Pass,
        report: DrainReport,
        out: &mut NodeOutcome,
    ) {
        let quiet = matches!(
            pass,
            Pass::Drain {
                role: DrainRole::Quiet,
                ..
            }
        );
        if !report.pending && !self.settings.dry_run && !quiet {
            let later = matches!(pass, Pass::Drain { .. }) && !pass.is_first_drain();
            self.ended(plan, node, &report, later, out).await;
        }
        if !report.new_refusals.is_empty() {
            self.refused(plan, node, &report.new_refusals, out).await;
        }
        let drain = out.drain.insert(report);
        if let Some(a) = plan
            .actions
            .iter()
            .find(|a| a.instance_id == out.instance_id)
        {
            self.pod_events.record(plan, a, node, drain).await;
        }
    }

    /// The `PlaceholderRefused` Warning Event on `node`: the placeholders the API server
    /// refused, first seen in this environment (one line per namespace and refusing step),
    /// with the server's message.
    async fn refused(
        &self,
        plan: &Plan,
        node: &Node,
        refusals: &[PlaceholderRefusal],
        out: &mut NodeOutcome,
    ) {
        let lines: Vec<String> = refusals
            .iter()
            .map(|r| {
                format!(
                    "placeholders for pods of namespace {} refused by {}: {}",
                    r.namespace, r.by, r.message
                )
            })
            .collect();
        let said = Said {
            reason: "PlaceholderRefused",
            action: "Surge",
            type_: EventType::Warning,
            note: format!(
                "{}. Those pods are evicted at once, without waiting for room (forewarn check \
                 --kube proves every write forewarn makes).",
                lines.join("; ")
            ),
        };
        self.events.event(plan, node, said, out).await;
    }

    /// The `Drained` or `DrainIncomplete` Event of a drain that ended (in a `later` pass: one
    /// after the pass that evicted).
    async fn ended(
        &self,
        plan: &Plan,
        node: &Node,
        report: &DrainReport,
        later: bool,
        out: &mut NodeOutcome,
    ) {
        let said = if report.complete() {
            let summary = if later {
                report.later_summary()
            } else {
                report.summary()
            };
            Said {
                reason: "Drained",
                action: "Drain",
                type_: EventType::Normal,
                note: format!("Drained: {summary}"),
            }
        } else {
            let left: Vec<String> = report
                .left
                .iter()
                .map(|l| format!("{}: {}", l.pod, l.reason))
                .collect();
            Said {
                reason: "DrainIncomplete",
                action: "Drain",
                type_: EventType::Warning,
                note: format!(
                    "Drain incomplete at the deadline: {}. Refused: {}",
                    report.summary(),
                    left.join("; ")
                ),
            }
        };
        self.events.event(plan, node, said, out).await;
    }
}
