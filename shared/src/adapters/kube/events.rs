//! Kubernetes Events (`events.k8s.io/v1`) on the nodes forewarn acts on.
//!
//! kube's `Recorder` needs its `runtime` feature, so Events are created directly, with every
//! field `ValidateEventCreate` requires of an `events.k8s.io/v1` Event (`eventTime`,
//! `reportingController`, `reportingInstance`, `action`, `reason`, `type`, `regarding`,
//! `note` ≤ 1 kB). Events about nodes live in `default`, as Events about cluster-scoped objects
//! must; Events about pods (each pod a drain evicts, [`record_once`]) in the pod's namespace.
//!
//! The name is derived from (node, event id, reason), so a redelivered event records no second
//! Event: its create answers 409 AlreadyExists, which says the Event is there. There is no read
//! first: in a mass interruption every request counts against the API server's rate limit, and
//! redeliveries are the rare case.

use ::kube::Api;
use ::kube::api::PostParams;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::api::FIELD_MANAGER;
use super::api::retry::with_retry;
use super::connect::ClusterClient;
use super::error::KubeError;

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

impl EventType {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One Event to record on a node.
#[derive(Debug, Clone)]
pub(crate) struct NodeEvent<'a> {
    pub node: &'a Node,
    /// The id of the EventBridge event that led to it (part of the Event's name).
    pub event_id: &'a str,
    pub reason: &'a str,
    pub action: &'a str,
    pub type_: EventType,
    pub note: String,
}

/// What became of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    Created,
    /// Recorded before (a redelivered event).
    Exists,
    /// Dry run.
    WouldCreate,
}

/// The Event name for (node, event id, reason): `<node>.<16 hex digits>`, like the names
/// client-go gives, a valid DNS subdomain of at most 253 characters.
pub fn event_name(node: &str, event_id: &str, reason: &str) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms (unlike std's hasher).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [node, event_id, reason] {
        for b in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let mut prefix: String = node
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253 - 17)
        .collect();
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    while prefix.starts_with(['-', '.']) {
        prefix.remove(0);
    }
    if prefix.is_empty() {
        format!("forewarn.{hash:016x}")
    } else {
        format!("{prefix}.{hash:016x}")
    }
}

/// One Event about any object: the namespace it is recorded in and what it regards.
#[derive(Debug, Clone)]
pub(crate) struct ObjectEvent<'a> {
    /// Where the Event lives: [`EVENT_NAMESPACE`] for cluster-scoped objects, else the object's.
    pub namespace: &'a str,
    pub regarding: ObjectReference,
    /// A second object it is about (a pod's node).
    pub related: Option<ObjectReference>,
    /// What led to it (part of the Event's name, with the object's name and the reason).
    pub event_id: &'a str,
    pub reason: &'a str,
    pub action: &'a str,
    pub type_: EventType,
    pub note: String,
}

impl<'a> From<&NodeEvent<'a>> for ObjectEvent<'a> {
    fn from(e: &NodeEvent<'a>) -> ObjectEvent<'a> {
        ObjectEvent {
            namespace: EVENT_NAMESPACE,
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: e.node.metadata.name.clone(),
                uid: e.node.metadata.uid.clone(),
                ..ObjectReference::default()
            },
            related: None,
            event_id: e.event_id,
            reason: e.reason,
            action: e.action,
            type_: e.type_,
            note: e.note.clone(),
        }
    }
}

pub(crate) fn build(
    event: &ObjectEvent<'_>,
    reporting_instance: &str,
    now: DateTime<Utc>,
) -> Event {
    let object = event.regarding.name.clone().unwrap_or_default();
    // Any time chrono holds fits (jiff's range is wider), so the fallback is never taken.
    let micros = k8s_openapi::jiff::Timestamp::from_microsecond(now.timestamp_micros())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(&object, event.event_id, event.reason)),
            namespace: Some(event.namespace.into()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(micros)),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(reporting_instance.chars().take(128).collect()),
        action: Some(event.action.chars().take(128).collect()),
        reason: Some(event.reason.chars().take(128).collect()),
        type_: Some(event.type_.as_str().into()),
        regarding: Some(event.regarding.clone()),
        related: event.related.clone(),
        note: Some(crate::domain::plan::pod_event::truncate(
            event.note.clone(),
            NOTE_LIMIT,
        )),
        ..Event::default()
    }
}

/// Records `event` on its node unless an Event of that name exists.
pub(crate) async fn record(
    clients: &ClusterClient,
    event: &NodeEvent<'_>,
    reporting_instance: &str,
    dry_run: bool,
) -> Result<EventOutcome, KubeError> {
    record_about(
        clients,
        &ObjectEvent::from(event),
        reporting_instance,
        dry_run,
    )
    .await
}

/// Records `event` unless an Event of that name exists.
pub(crate) async fn record_about(
    clients: &ClusterClient,
    event: &ObjectEvent<'_>,
    reporting_instance: &str,
    dry_run: bool,
) -> Result<EventOutcome, KubeError> {
    let body = build(event, reporting_instance, clients.clock().now());
    let name = body.metadata.name.clone().unwrap_or_default();
    if dry_run {
        return Ok(EventOutcome::WouldCreate);
    }
    let events: Api<Event> = Api::namespaced(clients.client().await?, event.namespace);
    let object = format!("event/{}/{name}", event.namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match with_retry(clients, "create", &object, || events.create(&params, &body)).await {
        Ok(_) => Ok(EventOutcome::Created),
        Err(e) if e.status == Some(409) => Ok(EventOutcome::Exists),
        Err(e) => Err(KubeError::Api(e)),
    }
}

/// Records `event` in one attempt, never retried (after the client's idle turn, which the
/// caller waited for): for Events that are given up rather than tried again (a pod's).
pub(crate) async fn record_once(
    clients: &ClusterClient,
    event: &ObjectEvent<'_>,
    reporting_instance: &str,
) -> Result<EventOutcome, KubeError> {
    let body = build(event, reporting_instance, clients.clock().now());
    let name = body.metadata.name.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(clients.client().await?, event.namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match events.create(&params, &body).await {
        Ok(_) => Ok(EventOutcome::Created),
        Err(e) => {
            let e = super::error::ApiError::new(
                "create",
                format!("event/{}/{name}", event.namespace),
                e,
            );
            if e.status == Some(409) {
                Ok(EventOutcome::Exists)
            } else {
                Err(KubeError::Api(e))
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
            &ObjectEvent::from(&NodeEvent {
                node: &node,
                event_id: "ev",
                reason: "SpotInterrupted",
                action: "CordonDrain",
                type_: EventType::Warning,
                note: "é".repeat(2000),
            }),
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
        assert!(v["eventTime"].as_str().unwrap().ends_with('Z'));
        assert!(v["note"].as_str().unwrap().len() <= 1024);
    }
}
