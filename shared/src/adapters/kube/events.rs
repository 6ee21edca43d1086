//! Kubernetes Events (`events.k8s.io/v1`) on the nodes forewarn acts on.
//!
//! kube's `Recorder` needs its `runtime` feature, so Events are created directly, with every
//! field `ValidateEventCreate` requires of an `events.k8s.io/v1` Event (`eventTime`,
//! `reportingController`, `reportingInstance`, `action`, `reason`, `type`, `regarding`,
//! `note` ≤ 1 kB). Events about nodes live in `default`, as Events about cluster-scoped objects
//! must; Events about pods (each pod a drain evicts, [`KubeExecutor::record_pod_events`]) in the pod's namespace.
//!
//! The name is derived from (node, event id, reason), so a redelivered event records no second
//! Event: its create answers 409 AlreadyExists, which says the Event is there. There is no read
//! first: in a mass interruption every request counts against the API server's rate limit, and
//! redeliveries are the rare case.

use ::kube::Api;
use ::kube::api::PostParams;
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::api::FIELD_MANAGER;
use super::api::ns_name;
use super::api::retry::with_retry;
use super::connect::ClusterClient;
use super::error::{ApiError, KubeError};
use super::executor::KubeExecutor;
use super::outcome::{DrainReport, EventOutcome, NodeOutcome};
use crate::domain::config::Action;
use crate::domain::names::fnv1a;
use crate::domain::plan::pod_event::{self, Notice};
use crate::domain::plan::{NodeAction, Plan};
use crate::ports::span;

/// `reportingController` of forewarn's Events.
pub const REPORTING_CONTROLLER: &str = "forewarn";
/// The namespace of Events about nodes.
pub(crate) const EVENT_NAMESPACE: &str = "default";
const NOTE_LIMIT: usize = 1024;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

/// The Event name for (node, event id, reason): `<node>.<16 hex digits>`, like the names
/// client-go gives, a valid DNS subdomain of at most 253 characters.
pub fn event_name(node: &str, event_id: &str, reason: &str) -> String {
    // Each part's bytes and a 0 after it: the same name for the same parts, every build.
    let parts = [node, event_id, reason].into_iter();
    let hash = fnv1a(parts.flat_map(|p| p.bytes().chain(std::iter::once(0))));
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let prefix: String = (node.to_ascii_lowercase().chars())
        .map(|c| if valid(c) { c } else { '-' })
        .take(253 - 17)
        .collect();
    // A node name with no valid character left: forewarn's own.
    let prefix = Some(prefix.trim_matches(['-', '.'])).filter(|p| !p.is_empty());
    format!("{}.{hash:016x}", prefix.unwrap_or("forewarn"))
}

/// A reference to the `kind` object (of API `v1`) of `meta`'s namespace, name and uid.
pub(crate) fn reference(kind: &str, meta: &ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.into()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..ObjectReference::default()
    }
}

/// The Event for `event_id` saying `said` about `regarding` (part of its name, with the object's
/// name and the reason), in the object's namespace ([`EVENT_NAMESPACE`] for a cluster-scoped
/// one).
pub(crate) fn build(
    regarding: ObjectReference,
    event_id: &str,
    said: Said<'_>,
    reporting_instance: &str,
    now: DateTime<Utc>,
) -> Event {
    let Said(type_, reason, action, note) = said;
    let object = regarding.name.as_deref().unwrap_or_default();
    let limited = |s: &str| s.chars().take(128).collect::<String>();
    let event = json!({
        "metadata": {
            "name": event_name(object, event_id, reason),
            "namespace": regarding.namespace.as_deref().unwrap_or(EVENT_NAMESPACE),
        },
        "eventTime": now.to_rfc3339_opts(SecondsFormat::Micros, true),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": limited(reporting_instance),
        "action": limited(action),
        "reason": limited(reason),
        "type": <&str>::from(type_),
        "regarding": regarding,
        "note": pod_event::truncate(note, NOTE_LIMIT),
    });
    // Built from Kubernetes' own types, it always reads as an Event (the tests pin its fields);
    // were it not to, an empty one is refused by the API server: an Event not recorded.
    serde_json::from_value(event).unwrap_or_default()
}

/// Records `event` unless an Event of that name exists (409: there already). `retried`: with the
/// usual retry; else in one attempt, never retried, after the client's idle turn the caller
/// waited for (an Event given up rather than tried again: a pod's).
pub(crate) async fn record(
    clients: &ClusterClient,
    event: &Event,
    retried: bool,
) -> Result<EventOutcome, KubeError> {
    let (namespace, name) = ns_name(&event.metadata);
    let object = format!("event/{namespace}/{name}");
    let events: Api<Event> = Api::namespaced(clients.client().await?, &namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let created = if retried {
        with_retry(clients, "create", &object, || events.create(&params, event)).await
    } else {
        let created = events.create(&params, event).await;
        created.map_err(|e| ApiError::new("create", &object, e))
    };
    match created {
        Ok(_) => Ok(EventOutcome::Created),
        Err(e) if e.is_conflict() => Ok(EventOutcome::Exists),
        Err(e) => Err(e.into()),
    }
}

/// What an Event says: its type, reason, action and note.
pub(crate) struct Said<'a>(pub EventType, pub &'a str, pub &'a str, pub String);

impl KubeExecutor {
    /// Records an Event about `node` for event `event_id`, now, best effort (in a dry run, sends
    /// nothing): what became of it, or the failure (logged, and said in its detail), goes in
    /// `out`.
    pub(super) async fn event(
        &self,
        event_id: &str,
        node: &Node,
        said: Said<'_>,
        out: &mut NodeOutcome,
    ) {
        let reason = said.1.to_string();
        let regarding = reference("Node", &node.metadata);
        let (reporting, clock) = (&self.settings.reporting_instance, self.clients.clock());
        let event = build(regarding, event_id, said, reporting, clock.now());
        let recorded = match self.settings.dry_run {
            true => Ok(EventOutcome::WouldCreate),
            false => record(&self.clients, &event, true).await,
        };
        match recorded {
            Ok(outcome) => out.events.push((reason, outcome)),
            Err(e) => {
                tracing::warn!(reason, error = %e, "could not record the Event");
                out.say(format!("Event not recorded: {reason}: {e}"));
            }
        }
    }

    /// The Events of the decision a pass records: with `announce`, the one that says what
    /// forewarn is about to do and why (with the drain's deadline); with `cordoned`, the
    /// `Cordoned` Event of `a`'s cordon.
    pub(super) async fn decision_events(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        (announce, cordoned): (bool, bool),
        out: &mut NodeOutcome,
    ) {
        if announce {
            let action = if a.action == Action::Cordon {
                "Cordon"
            } else {
                "CordonDrain"
            };
            let deadline = a.deadline.map(|d| d.to_rfc3339());
            let deadline = deadline.map(|d| format!(" (drain deadline {d})"));
            let note = format!("{}{}", a.reason, deadline.unwrap_or_default());
            let said = Said(EventType::Warning, &plan.event_reason, action, note);
            self.event(&plan.event_id, node, said, out).await;
        }
        if cordoned {
            let (key, kind, effect) = (&a.taint_key, plan.kind, self.config.taint_effect.as_str());
            let note = format!("Marked unschedulable and tainted {key}={kind}:{effect}");
            let said = Said(EventType::Normal, "Cordoned", "Cordon", note);
            self.event(&plan.event_id, node, said, out).await;
        }
    }

    /// The Event on each pod `report`'s pass evicted: in the pod's namespace, `regarding` the pod
    /// (`related`: its node), with the note of [`crate::domain::plan::pod_event`]; what became of
    /// them in `report.pod_events`. They never delay a cordon or an eviction: sent last in the
    /// pass, one at a time, each in the rate limit's idle turn
    /// ([`super::api::rate_limit::RateLimiter::idle`]), in one attempt. What the pass's budget
    /// (time and count) does not cover is given up, and so is the rest once the limit is busy
    /// or an Event fails: counted, logged once per pass. A redelivered event's Event answers 409:
    /// there already. A dry run evicts nothing and so records none (its detail says what it
    /// would, see [`NodeOutcome::finish`]).
    pub(super) async fn record_pod_events(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        report: &mut DrainReport,
    ) {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        if report.evicted.is_empty() {
            return;
        }
        let reason = plan.pod_event_reason.as_str();
        let goes_at = a.deadline.filter(|_| a.grace_to_deadline);
        let note = pod_event::note(&Notice {
            instance_id: &a.instance_id,
            node: node_name,
            summary: &plan.summary,
            goes_at: goes_at.map(|d| d + self.config.deadline_margin),
            drain_by: a.deadline,
        });
        let related = reference("Node", &node.metadata);
        let until = self.clients.clock().now() + span(self.settings.pod_event_budget);
        let until = self.clients.work.deadline.map_or(until, |d| d.min(until));
        let counts = &mut report.pod_events;
        for (i, pod) in report.evicted.iter().enumerate() {
            let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod.as_str()));
            let sendable = i < self.settings.pod_events_per_pass
                && self.clients.clock().now() < until
                && self.clients.idle_turn(until).await;
            if !sendable {
                // The rest of the pass's Events are given up.
                counts.given_up = report.evicted.len() - i;
                tracing::debug!(
                    reason,
                    given_up = counts.given_up,
                    "pod Events given up (the pass's budget, or the rate limit busy)"
                );
                break;
            }
            let regarding = ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                uid: report.uids.get(pod).cloned(),
                ..related.clone()
            };
            let said = Said(EventType::Warning, reason, "Evict", note.clone());
            let reporting = &self.settings.reporting_instance;
            let now = self.clients.clock().now();
            let event = Event {
                related: Some(related.clone()),
                ..build(regarding, &plan.event_id, said, reporting, now)
            };
            match record(&self.clients, &event, false).await {
                Ok(EventOutcome::Exists) => counts.existed += 1,
                Ok(_) => counts.recorded += 1,
                Err(error) => {
                    // Given up with the rest of the pass's Events, logged once per pass.
                    counts.given_up = report.evicted.len() - i;
                    let given_up = counts.given_up;
                    tracing::warn!(reason, %error, given_up, "could not record a pod's Event; the pass's other pod Events given up");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_unique_and_valid() {
        let a = event_name("ip-10-0-1-11.ec2.internal", "ev-1", "SpotInterrupted");
        assert_eq!(
            a,
            event_name("ip-10-0-1-11.ec2.internal", "ev-1", "SpotInterrupted")
        );
        assert!(a.starts_with("ip-10-0-1-11.ec2.internal."));
        assert_eq!(a.len(), "ip-10-0-1-11.ec2.internal.".len() + 16);
        assert_ne!(
            a,
            event_name("ip-10-0-1-11.ec2.internal", "ev-2", "SpotInterrupted")
        );
        assert_ne!(
            a,
            event_name("ip-10-0-1-11.ec2.internal", "ev-1", "Drained")
        );
        // The parts cannot run into each other.
        assert_ne!(event_name("n", "ab", "c"), event_name("n", "a", "bc"));
        let long = "a".repeat(253);
        assert!(event_name(&long, "e", "r").len() <= 253);
        assert!(event_name("-", "e", "r").starts_with("forewarn."));
    }

    #[test]
    fn events_carry_the_fields_the_api_validates() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u-1"}
        }))
        .unwrap();
        let ev = build(
            reference("Node", &node.metadata),
            "ev",
            Said(
                EventType::Warning,
                "SpotInterrupted",
                "CordonDrain",
                "é".repeat(2000),
            ),
            "forewarn-lambda",
            "2026-11-24T10:00:00Z".parse().unwrap(),
        );
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["reportingController"], "forewarn");
        assert_eq!(v["reportingInstance"], "forewarn-lambda");
        assert_eq!(v["regarding"]["kind"], "Node");
        assert_eq!(v["regarding"]["uid"], "u-1");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["eventTime"], "2026-11-24T10:00:00.000000Z");
        assert_eq!(v["action"], "CordonDrain");
        assert_eq!(v["reason"], "SpotInterrupted");
        assert!(v["metadata"]["name"].as_str().unwrap().starts_with("n1."));
        assert!(v["note"].as_str().unwrap().len() <= 1024);
    }
}
