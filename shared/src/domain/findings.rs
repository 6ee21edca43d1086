//! The pool sweeper's findings: what EC2 and the cluster say, turned into the events AWS would
//! have sent, which go through the same pipeline as the handler's. The sweeper reconciles what
//! EventBridge missed (its delivery is best effort); what it reads and how it runs is
//! `crate::app::sweeper`.
//!
//! It finds this cluster's spot instances that EC2 stopped or terminated for a spot interruption
//! (state reason `Server.SpotInstanceTermination`), nodes whose instance is gone or leaving
//! (stopping, stopped, shutting down, terminated, or unknown to EC2) and Capacity Blocks about to
//! end ([`block_finding`]); EC2's status checks and scheduled events are
//! [`crate::domain::status`]'s. Each finding's id is its sweep key
//! ([`crate::domain::sweep`]): a finding the handler already handled is a duplicate.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::clusters::{ClusterId, Place};
use crate::domain::event::{Detail, Event, EventKind, InstanceAction, InstanceState};
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::pool::CapacityType;
use crate::domain::sweep::{block_key, sweep_key};

/// EC2's state reason for an instance a spot interruption stopped or terminated.
pub const SPOT_TERMINATION_REASON: &str = "Server.SpotInstanceTermination";

/// The sweeper's finding of a Capacity Block ending within [`BLOCK_LOOKAHEAD`] whose instances
/// `instance_ids` are of the cluster `cluster`: the expiration warning EC2 sends, keyed by
/// [`block_key`] (a duplicate of the warning when it was handled).
pub fn block_finding(
    block: &crate::domain::facts::BlockFacts,
    instance_ids: Vec<String>,
    cluster: &str,
    now: DateTime<Utc>,
    place: &Place,
) -> Event {
    let cluster = ClusterId::at(place, cluster);
    let detail = Detail::CapacityBlock {
        reservation_id: block.reservation_id.clone(),
        end_date: block.end_date,
        block: Some(block.clone()),
        part: false,
    };
    Event {
        id: block_key(&block.reservation_id, block.end_date, Some(&cluster)),
        instance_ids,
        ..found(EventKind::CapacityBlockExpiration, detail, now, place)
    }
}

/// A finding of the sweeper: the event of `kind` that AWS would have sent, at `now`, in
/// `place`; its id and instances are the caller's to set.
fn found(kind: EventKind, detail: Detail, now: DateTime<Utc>, place: &Place) -> Event {
    Event {
        id: String::new(),
        kind,
        time: now,
        region: place.region.clone(),
        account: place.account.clone(),
        instance_ids: Vec::new(),
        detail,
    }
}

/// The instance is leaving or gone: stopping, stopped, shutting down or terminated.
fn leaving_state(state: Option<&str>) -> Option<InstanceState> {
    state?.parse().ok().filter(InstanceState::is_leaving)
}

/// The event the sweeper makes up for what it found of one run of an instance (its id, and its
/// launch time when known: a stopped and started instance runs again under the same id), keyed
/// by that run (see [`sweep_key`]).
pub(crate) fn synthetic(
    kind: EventKind,
    (instance_id, launch_time): (&str, Option<DateTime<Utc>>),
    detail: Detail,
    now: DateTime<Utc>,
    place: &Place,
) -> Event {
    Event {
        id: sweep_key(kind, instance_id, launch_time),
        instance_ids: vec![instance_id.to_string()],
        ..found(kind, detail, now, place)
    }
}

/// Turns what EC2 and the cluster say into synthetic events (pure).
///
/// - a spot instance of the cluster stopped or terminated by a spot interruption →
///   `spot-interruption` (stop when stopping or stopped, terminate otherwise);
/// - a node whose instance EC2 no longer knows, or knows as leaving → `state-change`
///   (terminated when unknown, else its state).
pub fn findings(
    leaving: &[InstanceFacts],
    nodes: &[NodeFacts],
    node_instances: &BTreeMap<String, InstanceFacts>,
    now: DateTime<Utc>,
    place: &Place,
) -> Vec<Event> {
    let spot = leaving.iter().filter_map(|i| {
        let state = leaving_state(i.state.as_deref())?;
        let action = match state {
            InstanceState::Stopping | InstanceState::Stopped => InstanceAction::Stop,
            _ => InstanceAction::Terminate,
        };
        let run = (i.instance_id.as_str(), i.launch_time);
        let spot = i.capacity_type == Some(CapacityType::Spot)
            && i.state_reason.as_deref() == Some(SPOT_TERMINATION_REASON);
        let detail = Detail::Spot { action };
        spot.then(|| synthetic(EventKind::SpotInterruption, run, detail, now, place))
    });
    let gone = nodes.iter().filter_map(|node| {
        let id = node.instance_id()?;
        let (state, launch_time) = match node_instances.get(id) {
            // Not found counts as gone only where the sweeper looked: the node's instance in
            // the region described (its providerID's zone). A node of another region, or of
            // none known, is never taken for gone on an answer from elsewhere.
            None if place.region.as_deref().is_some_and(|r| in_region(node, r)) => {
                (InstanceState::Terminated, None)
            }
            None => return None,
            Some(i) => (leaving_state(i.state.as_deref())?, i.launch_time),
        };
        let (run, detail) = ((id, launch_time), Detail::StateChange { state });
        Some(synthetic(EventKind::StateChange, run, detail, now, place))
    });
    spot.chain(gone).collect()
}

/// Whether `node`'s instance lives in `region`, by the availability zone its `spec.providerID`
/// names (`aws:///<zone>/<instance-id>`): `us-east-1a`, a Local Zone's `us-west-2-lax-1a`, a
/// Wavelength Zone's `us-east-1-wl1-bos-wlz-1` all start with their region's name and a letter
/// or `-`. A providerID that names no zone is of no region.
fn in_region(node: &NodeFacts, region: &str) -> bool {
    let rest = node
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("aws://"));
    let zone = rest.and_then(|r| r.trim_start_matches('/').split('/').next());
    let zone = zone.filter(|z| !z.is_empty() && !crate::domain::event::is_instance_id(z));
    let after = zone
        .and_then(|z| z.strip_prefix(region))
        .and_then(|r| r.chars().next());
    after.is_some_and(|c| c.is_ascii_lowercase() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::config::Config;
    use crate::domain::fixtures::{self, node_facts as node};
    use crate::domain::sweep::sweep_keys_of;

    fn launched() -> DateTime<Utc> {
        crate::domain::event::parse_time("2026-11-20T09:00:00Z").unwrap()
    }

    /// An instance launched at 09:00, in `state` for `reason`.
    fn instance(id: &str, state: &str, reason: Option<&str>, ct: CapacityType) -> InstanceFacts {
        fixtures::instance(id)
            .state(state)
            .state_reason(reason)
            .capacity(ct)
            .launched(launched())
            .build()
    }

    const SPOT: Option<&str> = Some(SPOT_TERMINATION_REASON);
    const AT: i64 = 1_795_165_200; // 2026-11-20T09:00:00Z

    #[test]
    fn spot_interruptions_and_orphaned_nodes() {
        let leaving = vec![
            instance("i-00000001", "terminated", SPOT, CapacityType::Spot),
            instance("i-00000002", "stopped", SPOT, CapacityType::Spot),
            instance(
                "i-00000003",
                "terminated",
                Some("Client.UserInitiatedShutdown"),
                CapacityType::Spot,
            ),
            instance("i-00000004", "terminated", SPOT, CapacityType::OnDemand),
            instance("i-0000000a", "running", SPOT, CapacityType::Spot),
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
        let place = Place::of("111111111111", "us-east-1");
        let events = findings(&leaving, &nodes, &known, Utc::now(), &place);
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let want = [
            format!("sweep:spot-interruption:i-00000001@{AT}"),
            format!("sweep:spot-interruption:i-00000002@{AT}"),
            "sweep:state-change:i-00000005".to_string(),
            format!("sweep:state-change:i-00000006@{AT}"),
        ];
        assert_eq!(
            ids, want,
            "user terminations, on-demand and running instances are no spot findings"
        );
        assert_eq!(
            events[0].detail,
            Detail::Spot {
                action: InstanceAction::Terminate
            }
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
        assert_eq!(events[0].region.as_deref(), Some("us-east-1"));
        assert_eq!(
            events[0].account.as_deref(),
            Some("111111111111"),
            "a finding is of its cluster's account: its lifecycle action is completed there"
        );
    }

    /// A node counts as gone only where the sweeper looked: its instance not found in the
    /// region described says nothing of a node whose providerID's zone is in another region
    /// (or names none), nor does any answer when the sweeper does not know its region.
    #[test]
    fn a_node_is_gone_only_on_an_answer_from_its_own_region() {
        let mut west = node("west", "i-00000008");
        west.provider_id = Some("aws:///us-west-2a/i-00000008".into());
        let mut local = node("local", "i-00000009");
        local.provider_id = Some("aws:///us-east-1-bos-1a/i-00000009".into());
        let mut zoneless = node("zoneless", "i-0000000b");
        zoneless.provider_id = Some("aws:///i-0000000b".into());
        let nodes = [node("here", "i-00000005"), west, local, zoneless];
        let none = BTreeMap::new();
        let ids = |region: Option<&str>| -> Vec<String> {
            let place = Place {
                account: None,
                region: region.map(str::to_string),
            };
            findings(&[], &nodes, &none, Utc::now(), &place)
                .into_iter()
                .map(|e| e.instance_ids[0].clone())
                .collect()
        };
        assert_eq!(ids(Some("us-east-1")), ["i-00000005", "i-00000009"]);
        assert_eq!(ids(Some("us-west-2")), ["i-00000008"]);
        assert!(ids(Some("us-east-2")).is_empty());
        assert!(ids(None).is_empty(), "no region known: nothing is gone");
    }

    #[test]
    fn handled_events_carry_the_sweep_key_of_the_instance_run() {
        let i = instance("i-00000001", "stopped", SPOT, CapacityType::Spot);
        let facts = BTreeMap::from([(i.instance_id.clone(), i.clone())]);
        let found = findings(
            std::slice::from_ref(&i),
            &[],
            &BTreeMap::new(),
            Utc::now(),
            &Place::default(),
        );
        // The real warning carries the key the sweep's finding has as id.
        let mut warning = found[0].clone();
        warning.id = "eventbridge-id".into();
        warning.detail = Detail::Spot {
            action: InstanceAction::Hibernate,
        };
        assert_eq!(
            sweep_keys_of(&warning, &facts, &Config::default()),
            vec![found[0].id.clone()]
        );
        // After a restart the launch time differs: a new key, a new interruption.
        let mut restarted = i.clone();
        restarted.launch_time = Some(launched() + chrono::Duration::days(1));
        let later = BTreeMap::from([(i.instance_id.clone(), restarted)]);
        assert_ne!(
            sweep_keys_of(&warning, &later, &Config::default()),
            sweep_keys_of(&warning, &facts, &Config::default())
        );
        // Unknown instance: the key without launch time.
        assert_eq!(
            sweep_keys_of(&warning, &BTreeMap::new(), &Config::default()),
            vec!["sweep:spot-interruption:i-00000001"]
        );
        // Kinds with no sweep counterpart carry none.
        for detail in [
            Detail::StateChange {
                state: InstanceState::Running,
            },
            Detail::Rebalance,
        ] {
            warning.detail = detail;
            assert!(
                sweep_keys_of(&warning, &facts, &Config::default()).is_empty(),
                "{:?}",
                warning.detail
            );
        }
        warning.detail = Detail::StateChange {
            state: InstanceState::Stopped,
        };
        assert_eq!(
            sweep_keys_of(&warning, &facts, &Config::default()),
            vec![format!("sweep:state-change:i-00000001@{AT}")]
        );
    }
}
