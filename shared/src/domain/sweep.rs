//! The pool sweeper's pure part: sweep keys and findings. The sweeper itself (what it reads,
//! how it runs) is `crate::app::sweeper`; it reconciles what EventBridge missed (its delivery
//! is best effort).
//!
//! It finds this cluster's spot instances that EC2 stopped or terminated for a spot interruption
//! (state reason `Server.SpotInstanceTermination`), and nodes whose instance is gone or leaving
//! (stopping, stopped, shutting down, terminated, or unknown to EC2), and turns each finding
//! into a synthetic event that goes through the same pipeline as the handler's.
//!
//! A finding's id is a sweep key, `sweep:<kind>:<instance>@<launch time>`: stable for one run of
//! the instance (its launch time changes each time it starts), so a second sweep is a duplicate,
//! while a restarted instance's next interruption is a new finding. The handler records the same
//! key with the event it applies, so a sweep after a handled event changes nothing either.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Config;
use crate::domain::event::{Detail, Event, EventKind, InstanceAction, InstanceState};
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::pool::CapacityType;

/// EC2's state reason for an instance a spot interruption stopped or terminated.
pub const SPOT_TERMINATION_REASON: &str = "Server.SpotInstanceTermination";

/// The ledger key of `kind` for one run of an instance: `sweep:<kind>:<id>@<launch epoch
/// seconds>`, or without the launch time when it is not known.
pub fn sweep_key(kind: EventKind, instance_id: &str, launch_time: Option<DateTime<Utc>>) -> String {
    match launch_time {
        Some(t) => format!("sweep:{kind}:{instance_id}@{}", t.timestamp()),
        None => format!("sweep:{kind}:{instance_id}"),
    }
}

/// The ledger key of a Capacity Block's expiration in one cluster, the cluster whole (its
/// account, region and name: `cluster`, `None` for a deployment that names none):
/// `sweep:capacity-block-expiration:<cr-…>/<account>/<region>/<name>@<end epoch seconds>`.
/// The warning's plan records it with its event id (the cluster in the event's account and
/// region), and the sweeper's finding of the same block is this key (the cluster in its own
/// account and region): whichever comes second is a duplicate. Per cluster, since a block's
/// instances may serve several (each cluster's part of the warning is its own), and whole, so
/// that two accounts' clusters of one name are two keys.
pub fn block_key(
    reservation_id: &str,
    end_date: Option<DateTime<Utc>>,
    cluster: Option<&ClusterId>,
) -> String {
    let what = cluster.map_or(reservation_id.into(), |c| format!("{reservation_id}/{c}"));
    sweep_key(EventKind::CapacityBlockExpiration, &what, end_date)
}

/// How long before its end the sweeper makes sure a Capacity Block's expiration was handled:
/// the 40 minutes before the end at which EC2 sends the warning.
pub const BLOCK_LOOKAHEAD: chrono::Duration = chrono::Duration::minutes(40);

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

/// The sweep keys an applied event also records, so that a later sweep of the same run of the
/// instance is a duplicate of it: spot interruptions, leaving state changes and scheduled
/// changes (not those an update closes), one key per instance, with its launch time from
/// `instances`; a Capacity Block's expiration, the key of the block in `config`'s cluster
/// ([`block_key`]; a part of a warning records none: it is not the block's whole warning).
/// None is the event's own id (a sweep's finding).
pub fn sweep_keys_of(
    event: &Event,
    instances: &BTreeMap<String, InstanceFacts>,
    config: &Config,
) -> Vec<String> {
    let (kind, closed) = match &event.detail {
        Detail::Spot { .. } => (EventKind::SpotInterruption, &[][..]),
        Detail::StateChange { state } if state.is_leaving() => (EventKind::StateChange, &[][..]),
        Detail::Scheduled { closed, .. } => (EventKind::ScheduledChange, &closed[..]),
        Detail::CapacityBlock {
            reservation_id,
            end_date,
            part: false,
            ..
        } if event.kind == EventKind::CapacityBlockExpiration => {
            let place = Place::of_event(event);
            let cluster = (config.cluster.as_ref()).map(|c| ClusterId::at(&place, &c.name));
            let key = block_key(reservation_id, *end_date, cluster.as_ref());
            return (key != event.id).then_some(key).into_iter().collect();
        }
        _ => return Vec::new(),
    };
    (event.instance_ids.iter())
        .filter(|id| !closed.contains(id))
        .map(|id| sweep_key(kind, id, instances.get(id).and_then(|i| i.launch_time)))
        .filter(|k| *k != event.id)
        .collect()
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
            None if place.region.as_deref().is_some_and(|r| node.in_region(r)) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fixtures::{self, node_facts as node};

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
