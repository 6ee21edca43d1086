//! The pool sweeper: reconciles what EventBridge missed (its delivery is best effort).
//!
//! It finds this cluster's spot instances that EC2 stopped or terminated for a spot interruption
//! (state reason `Server.SpotInstanceTermination`), and nodes whose instance is gone or going,
//! and turns each finding into a synthetic event that goes through the same pipeline as the
//! handler's. Synthetic ids are stable per instance (`sweep:<kind>:<instance>`), and the handler
//! records the same key when it applies the real event, so the ledger makes a sweep after a
//! handled event (or a second sweep) change nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::event::{Detail, Event, EventKind, InstanceAction, InstanceState};
use crate::facts::{InstanceFacts, NodeFacts};
use crate::ports::DirectoryError;

/// EC2's state reason for an instance a spot interruption stopped or terminated.
pub const SPOT_TERMINATION_REASON: &str = "Server.SpotInstanceTermination";

/// The ledger key a sweep uses for `kind` on `instance_id`; the handler records it too.
pub fn sweep_key(kind: EventKind, instance_id: &str) -> String {
    format!("sweep:{kind}:{instance_id}")
}

/// The sweep keys an applied event also records, so that a later sweep is a duplicate of it.
pub fn sweep_keys_of(event: &Event) -> Vec<String> {
    let kind = match &event.detail {
        Detail::Spot { .. } => EventKind::SpotInterruption,
        Detail::StateChange { state } if state.is_leaving() => EventKind::StateChange,
        _ => return Vec::new(),
    };
    event
        .instance_ids
        .iter()
        .map(|id| sweep_key(kind, id))
        .collect()
}

/// Where a sweep looks for instances that are gone.
#[async_trait]
pub trait LeavingInstances: Send + Sync {
    /// This cluster's instances that are stopping, stopped, shutting down or terminated.
    async fn leaving(&self, cluster: &str) -> Result<Vec<InstanceFacts>, DirectoryError>;
}

fn is_gone(state: Option<&str>) -> bool {
    matches!(
        state,
        Some("stopping" | "stopped" | "shutting-down" | "terminated")
    )
}

fn synthetic(
    kind: EventKind,
    instance_id: &str,
    detail: Detail,
    now: DateTime<Utc>,
    region: Option<&str>,
) -> Event {
    let (source, detail_type) = kind.source_and_detail_type().unwrap_or_default();
    Event {
        id: sweep_key(kind, instance_id),
        kind,
        source: source.to_string(),
        detail_type: detail_type.to_string(),
        time: now,
        region: region.map(str::to_string),
        account: None,
        instance_ids: vec![instance_id.to_string()],
        detail,
    }
}

/// Turns what EC2 and the cluster say into synthetic events (pure).
///
/// - a spot instance of the cluster stopped or terminated by a spot interruption →
///   `spot-interruption` (stop when stopped, terminate otherwise);
/// - a node whose instance EC2 no longer knows, or knows as leaving → `state-change`
///   (terminated when unknown, else its state).
pub fn findings(
    leaving: &[InstanceFacts],
    nodes: &[NodeFacts],
    node_instances: &BTreeMap<String, InstanceFacts>,
    now: DateTime<Utc>,
    region: Option<&str>,
) -> Vec<Event> {
    let mut events = Vec::new();
    for i in leaving {
        let spot = i.capacity_type == Some(crate::pool::CapacityType::Spot);
        if spot && i.state_reason.as_deref() == Some(SPOT_TERMINATION_REASON) {
            let action = match i.state.as_deref() {
                Some("stopping" | "stopped") => InstanceAction::Stop,
                _ => InstanceAction::Terminate,
            };
            events.push(synthetic(
                EventKind::SpotInterruption,
                &i.instance_id,
                Detail::Spot { action },
                now,
                region,
            ));
        }
    }
    for node in nodes {
        let Some(id) = node.instance_id() else {
            continue;
        };
        let state = match node_instances.get(id) {
            None => InstanceState::Terminated,
            Some(i) if is_gone(i.state.as_deref()) => serde_json::from_value(
                serde_json::Value::String(i.state.clone().unwrap_or_default()),
            )
            .unwrap_or(InstanceState::Terminated),
            Some(_) => continue,
        };
        events.push(synthetic(
            EventKind::StateChange,
            id,
            Detail::StateChange { state },
            now,
            region,
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::CapacityType;

    fn instance(id: &str, state: &str, reason: Option<&str>, ct: CapacityType) -> InstanceFacts {
        InstanceFacts {
            instance_id: id.into(),
            state: Some(state.into()),
            state_reason: reason.map(str::to_string),
            capacity_type: Some(ct),
            ..InstanceFacts::default()
        }
    }

    fn node(name: &str, id: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            provider_id: Some(format!("aws:///us-east-1a/{id}")),
            ..NodeFacts::default()
        }
    }

    #[test]
    fn spot_terminations_and_orphaned_nodes() {
        let now = Utc::now();
        let leaving = vec![
            instance(
                "i-00000001",
                "terminated",
                Some(SPOT_TERMINATION_REASON),
                CapacityType::Spot,
            ),
            instance(
                "i-00000002",
                "stopped",
                Some(SPOT_TERMINATION_REASON),
                CapacityType::Spot,
            ),
            instance(
                "i-00000003",
                "stopped",
                Some("Client.UserInitiatedShutdown"),
                CapacityType::Spot,
            ),
            instance(
                "i-00000004",
                "terminated",
                Some(SPOT_TERMINATION_REASON),
                CapacityType::OnDemand,
            ),
        ];
        let nodes = vec![
            node("gone", "i-00000005"),
            node("stopping", "i-00000006"),
            node("fine", "i-00000007"),
            NodeFacts {
                name: "fargate".into(),
                ..NodeFacts::default()
            },
        ];
        let known = BTreeMap::from([
            (
                "i-00000006".to_string(),
                instance("i-00000006", "stopping", None, CapacityType::OnDemand),
            ),
            (
                "i-00000007".to_string(),
                instance("i-00000007", "running", None, CapacityType::OnDemand),
            ),
        ]);
        let events = findings(&leaving, &nodes, &known, now, Some("us-east-1"));
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            vec![
                "sweep:spot-interruption:i-00000001",
                "sweep:spot-interruption:i-00000002",
                "sweep:state-change:i-00000005",
                "sweep:state-change:i-00000006",
            ]
        );
        assert_eq!(
            events[1].detail,
            Detail::Spot {
                action: InstanceAction::Stop
            }
        );
        assert_eq!(
            events[2].detail,
            Detail::StateChange {
                state: InstanceState::Terminated
            }
        );
        assert_eq!(
            events[3].detail,
            Detail::StateChange {
                state: InstanceState::Stopping
            }
        );
        assert_eq!(events[0].source, "aws.ec2");
    }

    #[test]
    fn handled_events_carry_the_sweep_keys() {
        let e = findings(
            &[instance(
                "i-00000001",
                "terminated",
                Some(SPOT_TERMINATION_REASON),
                CapacityType::Spot,
            )],
            &[],
            &BTreeMap::new(),
            Utc::now(),
            None,
        );
        assert_eq!(
            sweep_keys_of(&e[0]),
            vec!["sweep:spot-interruption:i-00000001"]
        );
        let mut running = e[0].clone();
        running.detail = Detail::StateChange {
            state: InstanceState::Running,
        };
        assert!(sweep_keys_of(&running).is_empty());
    }
}
