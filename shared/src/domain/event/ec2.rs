//! The `detail` of EC2's events (source `aws.ec2`): spot interruption warnings, rebalance
//! recommendations, instance state changes and capacity reservation interruption warnings.
//!
//! A spot interruption warning (`events/02-spot-interruption-plain.json`), two minutes before the
//! instance goes:
//!
//! ```json
//! {
//!   "version": "0",
//!   "id": "02ff0bbf-6da4-4bfa-9316-63dde9a6ca80",
//!   "detail-type": "EC2 Spot Instance Interruption Warning",
//!   "source": "aws.ec2",
//!   "account": "123456789012",
//!   "time": "2026-11-20T10:00:04Z",
//!   "region": "us-east-1",
//!   "resources": [
//!     "arn:aws:ec2:us-east-1:123456789012:instance/i-0a1b2c3d4e5f60002"
//!   ],
//!   "detail": {
//!     "instance-id": "i-0a1b2c3d4e5f60002",
//!     "instance-action": "terminate"
//!   }
//! }
//! ```
//!
//! The others carry the same envelope and the instance in `detail.instance-id`: a rebalance
//! recommendation (`EC2 Instance Rebalance Recommendation`) nothing else, a state change
//! (`EC2 Instance State-change Notification`) its `state` (`"state": "terminated"`), and a
//! capacity reservation warning (`EC2 Capacity Reservation Instance Interruption Warning`,
//! `events/10-capacity-reservation-interruption.json`) its action, when and where:
//!
//! ```json
//! "detail": {
//!   "instance-id": "i-0a1b2c3d4e5f6000a",
//!   "instance-action": "terminate",
//!   "instance-termination-time": "2026-11-20T10:02:36Z",
//!   "azId": "use1-az6"
//! }
//! ```
//!
//! A Capacity Block's expiration warning (`Capacity Block Expiration Warning`, or as other pages
//! of EC2's guide spell it `Capacity Block Reservation Expiration Warning`;
//! `events/24-capacity-block-expiration.json`), forty minutes before the block ends, names the
//! reservation, not its instances (they are looked up: `crate::app::blocks`); its delivery
//! (`Capacity Block Delivered`) the same way:
//!
//! ```json
//! "resources": ["arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0a1b2c3d4e5f60001"],
//! "detail": {
//!   "capacity-reservation-id": "cr-0a1b2c3d4e5f60001",
//!   "end-date": "2026-11-20T11:30:00Z"
//! }
//! ```

use serde_json::Value;

use super::fields::{Fields, Parsed};
use super::{DecodeError, Detail, EventKind, InstanceAction, InstanceState};

/// The instance a `detail` is about (`detail.instance-id`).
fn instance(f: &Fields<'_>, detail: &Value) -> Result<String, DecodeError> {
    f.instance_id(detail, "instance-id", "detail.instance-id")
}

/// An `EC2 Spot Instance Interruption Warning`.
pub(crate) fn spot(f: &Fields<'_>, detail: &Value) -> Result<Parsed, DecodeError> {
    let id = instance(f, detail)?;
    let action = instance_action(f, detail)?;
    Ok((
        EventKind::SpotInterruption,
        vec![id],
        Detail::Spot { action },
    ))
}

/// An `EC2 Instance Rebalance Recommendation`.
pub(crate) fn rebalance(f: &Fields<'_>, detail: &Value) -> Result<Parsed, DecodeError> {
    let id = instance(f, detail)?;
    Ok((
        EventKind::RebalanceRecommendation,
        vec![id],
        Detail::Rebalance,
    ))
}

/// An `EC2 Instance State-change Notification`: any state name is taken (one forewarn does not
/// know is [`InstanceState::Other`]).
pub(crate) fn state_change(f: &Fields<'_>, detail: &Value) -> Result<Parsed, DecodeError> {
    let id = instance(f, detail)?;
    let state = f.req_str(detail, "state", "detail.state")?;
    let state = state
        .parse()
        .unwrap_or_else(|_| InstanceState::Other(state.to_string()));
    Ok((
        EventKind::StateChange,
        vec![id],
        Detail::StateChange { state },
    ))
}

/// An `EC2 Capacity Reservation Instance Interruption Warning`.
pub(crate) fn reservation(f: &Fields<'_>, detail: &Value) -> Result<Parsed, DecodeError> {
    let id = instance(f, detail)?;
    let action = instance_action(f, detail)?;
    let termination_time = f.time(
        detail,
        "instance-termination-time",
        "detail.instance-termination-time",
    )?;
    let az_id = f
        .opt_str(detail, "azId", "detail.azId")?
        .map(str::to_string);
    Ok((
        EventKind::CapacityReservationInterruption,
        vec![id],
        Detail::CapacityReservation {
            action,
            termination_time,
            az_id,
        },
    ))
}

/// A Capacity Block's expiration warning or delivery (`kind`): the reservation and its end.
pub(crate) fn capacity_block(
    f: &Fields<'_>,
    detail: &Value,
    kind: EventKind,
) -> Result<Parsed, DecodeError> {
    let path = "detail.capacity-reservation-id";
    let reservation_id = f.req_str(detail, "capacity-reservation-id", path)?;
    if !is_reservation_id(reservation_id) {
        return Err(f.err(
            path,
            format!("`{reservation_id}` is not a capacity reservation id (cr- and 17 hex digits)"),
        ));
    }
    // A delivery that says no end is still a delivery; a warning without one ends 10 minutes
    // after it was sent (see `block_termination_start`).
    let end_date = f.time(detail, "end-date", "detail.end-date")?;
    let instances = part_instances(f, detail, kind)?;
    Ok((
        kind,
        instances.clone().unwrap_or_default(),
        Detail::CapacityBlock {
            reservation_id: reservation_id.to_string(),
            end_date,
            block: None,
            part: instances.is_some(),
        },
    ))
}

/// The most instances one part of a block's warning names (see `crate::app::blocks`).
pub const PART_MAX: usize = 10;

/// `detail.instance-ids` of a part of a block's warning that forewarn queued: 1 to
/// [`PART_MAX`] instance ids (only a warning has parts; AWS never writes the field).
fn part_instances(
    f: &Fields<'_>,
    detail: &Value,
    kind: EventKind,
) -> Result<Option<Vec<String>>, DecodeError> {
    let path = "detail.instance-ids";
    let Some(v) = detail.get(PART_FIELD).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    if kind != EventKind::CapacityBlockExpiration {
        return Err(f.err(path, "only a Capacity Block's expiration warning has parts"));
    }
    let ids = v
        .as_array()
        .filter(|ids| (1..=PART_MAX).contains(&ids.len()))
        .ok_or_else(|| f.err(path, format!("expected 1 to {PART_MAX} instance ids")))?;
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            id.as_str()
                .filter(|id| super::is_instance_id(id))
                .map(str::to_string)
                .ok_or_else(|| {
                    f.err(
                        &format!("{path}[{i}]"),
                        format!("`{id}` is not an instance id"),
                    )
                })
        })
        .collect::<Result<Vec<String>, _>>()
        .map(|mut ids| {
            // In order, each once.
            let mut seen = std::collections::BTreeSet::new();
            ids.retain(|id| seen.insert(id.clone()));
            Some(ids)
        })
}

/// The field a part of a block's warning names its instances in.
pub const PART_FIELD: &str = "instance-ids";

/// `cr-` followed by 17 (or, for old reservations, 8) lowercase hex digits.
pub fn is_reservation_id(s: &str) -> bool {
    s.strip_prefix("cr-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `detail.instance-action`: older spot warnings and some reservation warnings omit it, and
/// terminate is the default.
fn instance_action(f: &Fields<'_>, detail: &Value) -> Result<InstanceAction, DecodeError> {
    let path = "detail.instance-action";
    match f.opt_str(detail, "instance-action", path)? {
        None => Ok(InstanceAction::Terminate),
        Some(name) => name.parse().map_err(|_| {
            f.err(
                path,
                format!("`{name}` is not one of terminate, stop, hibernate"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::Origin;
    use chrono::{DateTime, Utc};
    use serde_json::json;

    fn fields(origin: &Origin) -> Fields<'_> {
        Fields {
            origin,
            now: DateTime::<Utc>::from_timestamp(1_795_168_500, 0).unwrap(),
        }
    }

    #[test]
    fn actions_and_states_keep_their_names() {
        let origin = Origin::bare("t.json");
        let f = fields(&origin);
        for (name, action) in [
            ("terminate", InstanceAction::Terminate),
            ("stop", InstanceAction::Stop),
            ("hibernate", InstanceAction::Hibernate),
        ] {
            let detail = json!({"instance-id": "i-12345678", "instance-action": name});
            assert_eq!(
                spot(&f, &detail).unwrap().2,
                Detail::Spot { action },
                "{name}"
            );
            assert_eq!(action.to_string(), name);
        }
        let detail = json!({"instance-id": "i-12345678", "instance-action": "Stop"});
        assert_eq!(
            spot(&f, &detail).unwrap_err().message,
            "`Stop` is not one of terminate, stop, hibernate"
        );
        for (name, state) in [
            ("pending", InstanceState::Pending),
            ("shutting-down", InstanceState::ShuttingDown),
            ("terminated", InstanceState::Terminated),
            ("other", InstanceState::Other("other".into())),
            ("Running", InstanceState::Other("Running".into())),
        ] {
            let detail = json!({"instance-id": "i-12345678", "state": name});
            let (_, _, parsed) = state_change(&f, &detail).unwrap();
            assert_eq!(
                parsed,
                Detail::StateChange {
                    state: state.clone()
                }
            );
            assert_eq!(state.as_str(), name);
            assert_eq!(state.to_string(), name);
        }
    }
}
