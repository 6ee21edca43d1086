//! Creating Events of both API groups, with the real validation.

mod common;

use common::api_status;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::Api;
use kube::api::PostParams;
use kube_fake::KubeFake;
use serde_json::json;

fn core_event(namespace: &str, name: &str) -> Event {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        "reason": "SpotInterruption",
        "message": "EC2 spot interruption warning for i-123",
        "type": "Warning",
        "source": {"component": "forewarn"},
        "firstTimestamp": "2025-01-01T00:00:00Z",
        "lastTimestamp": "2025-01-01T00:00:00Z",
        "count": 1,
    }))
    .unwrap()
}

fn events_v1(name: &str) -> EventV1 {
    serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "forewarn.io/controller",
        "reportingInstance": "forewarn-0",
        "action": "Cordon",
        "reason": "SpotInterruption",
        "type": "Warning",
        "note": "cordoned",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }))
    .unwrap()
}

#[tokio::test]
async fn core_event_about_a_node_is_accepted_in_default() {
    let fake = KubeFake::start().await;
    let events: Api<Event> = Api::namespaced(fake.client(), "default");

    let created = events
        .create(&PostParams::default(), &core_event("default", "n1.spot"))
        .await
        .unwrap();

    assert_eq!(created.reason.as_deref(), Some("SpotInterruption"));
    assert_eq!(fake.events().len(), 1);
    assert_eq!(fake.events()[0]["involvedObject"]["name"], "n1");
}

#[tokio::test]
async fn core_event_about_a_node_outside_default_is_invalid() {
    let fake = KubeFake::start().await;
    let events: Api<Event> = Api::namespaced(fake.client(), "forewarn");

    let status = api_status(
        events
            .create(&PostParams::default(), &core_event("forewarn", "n1.spot"))
            .await,
    );

    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "Event \"n1.spot\" is invalid: involvedObject.namespace: Invalid value: \"\": does not match event.namespace"
    );
    assert!(fake.events().is_empty());
}

#[tokio::test]
async fn events_v1_is_accepted_when_complete() {
    let fake = KubeFake::start().await;
    let events: Api<EventV1> = Api::namespaced(fake.client(), "default");

    events
        .create(&PostParams::default(), &events_v1("n1.cordon"))
        .await
        .unwrap();

    let stored = fake
        .get("events.k8s.io/v1", "Event", Some("default"), "n1.cordon")
        .unwrap();
    assert_eq!(stored["action"], "Cordon");
    assert_eq!(
        fake.writes()[0].path,
        "/apis/events.k8s.io/v1/namespaces/default/events"
    );
}

#[tokio::test]
async fn events_v1_without_the_required_fields_is_invalid() {
    let fake = KubeFake::start().await;
    let events: Api<EventV1> = Api::namespaced(fake.client(), "default");
    let mut event = events_v1("n1.cordon");
    event.event_time = None;
    event.action = None;
    event.type_ = Some("Info".into());

    let status = api_status(events.create(&PostParams::default(), &event).await);

    assert_eq!(status.code, 422);
    let causes: Vec<String> = status
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(causes, ["eventTime", "type"]);
    assert!(
        status
            .message
            .starts_with("Event.events.k8s.io \"n1.cordon\" is invalid: [eventTime: Required value, type: Invalid value"),
        "{}",
        status.message
    );

    // With an eventTime the legacy rules also want an action.
    let mut event = events_v1("n1.cordon");
    event.action = None;
    let status = api_status(events.create(&PostParams::default(), &event).await);
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "Event.events.k8s.io \"n1.cordon\" is invalid: action: Required value"
    );
}
