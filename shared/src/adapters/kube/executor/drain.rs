//! The executor's drain step for a node: one pass of its drain (see
//! [`super::super::drain::drain_pass`]), and the `Drained` or `DrainIncomplete` Event when the
//! drain is over.

use k8s_openapi::api::core::v1::Node;

use super::super::drain::{DrainReport, DrainSettings, drain_pass};
use super::super::error::KubeError;
use super::super::events::EventType;
use super::super::surge::SurgeSettings;
use super::{KubeExecutor, NodeOutcome};
use crate::domain::plan::{NodeAction, Plan};
use crate::ports::Pass;

impl KubeExecutor {
    /// One pass of the drain (see [`super::super::drain::drain_pass`]) on the node the pass has just
    /// read and verified; when the drain ends, its Event (not in a dry run).
    pub(super) async fn drain_pass(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let report = self.drain_only(plan, a, node, pass).await?;
        if matches!(
            pass,
            Pass::Drain {
                owed: true,
                quiet: false,
                ..
            }
        ) {
            // The Events the first pass left to this one, after this pass's evictions.
            let note = Some(self.cordoned_note(a));
            self.decision_events(plan, a, node, (true, note), out).await;
        }
        self.drain_over(plan, node, pass, report, out).await;
        Ok(())
    }

    /// The evictions of one drain pass (see [`super::super::drain::drain_pass`]).
    pub(super) async fn drain_only(
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
                first: matches!(pass, Pass::Drain { announce: true, .. }),
                memory: self.surge_memory.clone(),
            }),
        };
        drain_pass(
            &self.clients,
            name,
            started_at,
            deadline,
            &settings,
            self.settings.dry_run,
        )
        .await
    }

    /// A drain pass's report put in `out`; when the drain ended, its Event (not in a dry run,
    /// nor in a quiet pass).
    pub(super) async fn drain_over(
        &self,
        plan: &Plan,
        node: &Node,
        pass: Pass,
        report: DrainReport,
        out: &mut NodeOutcome,
    ) {
        let quiet = matches!(pass, Pass::Drain { quiet: true, .. });
        if !report.pending && !self.settings.dry_run && !quiet {
            let later = matches!(
                pass,
                Pass::Drain {
                    announce: false,
                    ..
                }
            );
            self.drain_ended(plan, node, &report, later, out).await;
        }
        out.drain = Some(report);
    }

    /// The `Drained` or `DrainIncomplete` Event of a drain that ended (in a `later` pass: one
    /// after the pass that evicted).
    async fn drain_ended(
        &self,
        plan: &Plan,
        node: &Node,
        report: &DrainReport,
        later: bool,
        out: &mut NodeOutcome,
    ) {
        if report.complete() {
            let summary = if later {
                report.later_summary()
            } else {
                report.summary()
            };
            let note = format!("Drained: {summary}");
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
}
