//! The Event on each pod a drain pass evicted: in the pod's namespace, `regarding` the pod
//! (`related`: its node), with the reason of the event's kind and a note naming the instance,
//! the node and when the instance goes ([`crate::domain::plan::pod_event`]).
//!
//! They never make a cordon or an eviction later: they are sent last in the pass, after its
//! evictions and the node's Events, one at a time, each in the idle turn of the client's rate
//! limit (a token only when one is free and no other request waits, see
//! [`super::super::api::rate_limit::RateLimiter::idle`]), in one attempt, never retried. What the
//! pass's budget (its time and count) does not cover is given up, and so is the rest after the
//! limit is busy or an Event fails: counted, logged once per pass, never the drain's outcome. A
//! redelivered event's Event answers 409 (its name comes from the pod, the event and the
//! reason): there already. A dry run counts what it would record and sends nothing.

use k8s_openapi::api::core::v1::{Node, ObjectReference};

use super::super::connect::ClusterClient;
use super::super::drain::DrainReport;
use super::super::events::{EventOutcome, EventType, ObjectEvent, record_once};
use super::ExecutorSettings;
use crate::domain::config::Config;
use crate::domain::plan::pod_event::{self, Notice};
use crate::domain::plan::{NodeAction, Plan};
use crate::ports::span;

/// Records the Events on the pods drain passes evict.
pub(super) struct PodEvents<'a> {
    pub clients: &'a ClusterClient,
    pub config: &'a Config,
    pub settings: &'a ExecutorSettings,
}

impl PodEvents<'_> {
    /// The Events on the pods `report`'s pass evicted (in a dry run, those it would evict: only
    /// counted), what became of them in `report.pod_events`.
    pub async fn record(&self, plan: &Plan, a: &NodeAction, node: &Node, report: &mut DrainReport) {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        if self.settings.dry_run {
            report.pod_events.would_record = report.would_evict.len();
            return;
        }
        if report.evicted.is_empty() {
            return;
        }
        let reason = pod_event::reason(plan.kind, &a.event_reason);
        let goes_at = a
            .deadline
            .filter(|_| a.grace_to_deadline)
            .map(|d| d + self.config.deadline_margin);
        let note = pod_event::note(&Notice {
            instance_id: &a.instance_id,
            node: node_name,
            summary: &plan.summary,
            goes_at,
            drain_by: a.deadline,
        });
        let related = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: node.metadata.name.clone(),
            uid: node.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let now = self.clients.clock().now();
        let mut until = now + span(self.settings.pod_event_budget);
        if let Some(deadline) = self.clients.deadline() {
            until = until.min(deadline);
        }
        let counts = &mut report.pod_events;
        let mut failure = None;
        for (i, pod) in report.evicted.iter().enumerate() {
            let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod.as_str()));
            let sendable = i < self.settings.pod_events_per_pass
                && failure.is_none()
                && self.clients.clock().now() < until
                && self.clients.idle_turn(until).await;
            if !sendable {
                // The rest of the pass's Events are given up.
                counts.given_up = report.evicted.len() - i;
                break;
            }
            let event = ObjectEvent {
                namespace,
                regarding: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(namespace.into()),
                    name: Some(name.into()),
                    uid: report.uids.get(pod).cloned(),
                    ..ObjectReference::default()
                },
                related: Some(related.clone()),
                event_id: &plan.event_id,
                reason,
                action: "Evict",
                type_: EventType::Warning,
                note: note.clone(),
            };
            match record_once(self.clients, &event, &self.settings.reporting_instance).await {
                Ok(EventOutcome::Created | EventOutcome::WouldCreate) => counts.recorded += 1,
                Ok(EventOutcome::Exists) => counts.existed += 1,
                Err(e) => {
                    counts.failed += 1;
                    failure = Some(e.to_string());
                }
            }
        }
        counts.given_up += counts.failed;
        if let Some(error) = failure {
            // Once per pass, whatever the number of pods.
            tracing::warn!(
                reason,
                %error,
                given_up = counts.given_up,
                "could not record a pod's Event; the pass's other pod Events given up"
            );
        } else if counts.given_up > 0 {
            tracing::debug!(
                reason,
                given_up = counts.given_up,
                "pod Events given up (the pass's budget, or the rate limit busy)"
            );
        }
    }
}
