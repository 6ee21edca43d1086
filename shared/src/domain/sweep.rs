//! Sweep keys: the ledger keys that make the pool sweeper's findings and the events the handler
//! applies duplicates of each other. The findings themselves are [`crate::domain::findings`]'s;
//! the sweeper (what it reads, how it runs) is `crate::app::sweeper`.
//!
//! A finding's id is a sweep key, `sweep:<kind>:<instance>@<launch time>`: stable for one run of
//! the instance (its launch time changes each time it starts), so a second sweep is a duplicate,
//! while a restarted instance's next interruption is a new finding. The handler records the same
//! key with the event it applies, so a sweep after a handled event changes nothing either.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Config;
use crate::domain::event::{Detail, Event, EventKind};
use crate::domain::facts::InstanceFacts;

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
