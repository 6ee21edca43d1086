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

use serde::Deserialize;
use serde_json::Value;

use super::fields::{Fields, InstanceId, Parsed, Text};
use super::{DecodeError, Detail, EventKind, InstanceAction, InstanceState};

/// The `detail` of an event about one instance (`instance-id`). `instance-action`: older spot
/// warnings and some reservation warnings omit it, and terminate is the default.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Instance {
    instance_id: InstanceId,
    instance_action: Option<InstanceAction>,
    state: Option<Text>,
    instance_termination_time: Option<String>,
}

/// A Capacity Block's `detail`; `instance-ids` only in a part of a warning forewarn queued (see
/// [`PART_FIELD`]).
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Block {
    capacity_reservation_id: Text,
    end_date: Option<String>,
    instance_ids: Option<Vec<InstanceId>>,
}

/// An `EC2 Spot Instance Interruption Warning`, `EC2 Instance Rebalance Recommendation`, `EC2
/// Instance State-change Notification` (any state name is taken: one forewarn does not know is
/// [`InstanceState::Other`]) or `EC2 Capacity Reservation Instance Interruption Warning`.
pub(crate) fn instance(
    f: &Fields<'_>,
    detail: &Value,
    kind: EventKind,
) -> Result<Parsed, DecodeError> {
    let d: Instance = f.read(detail, "detail")?;
    let action = d.instance_action.unwrap_or(InstanceAction::Terminate);
    let detail = match kind {
        EventKind::SpotInterruption => Detail::Spot { action },
        EventKind::RebalanceRecommendation => Detail::Rebalance,
        EventKind::StateChange => {
            let Text(state) = d.state.ok_or_else(|| f.err("detail.state", "missing"))?;
            let state = state.parse().unwrap_or(InstanceState::Other(state));
            Detail::StateChange { state }
        }
        _ => Detail::CapacityReservation {
            action,
            termination_time: f.time(
                d.instance_termination_time.as_deref(),
                "detail.instance-termination-time",
            )?,
        },
    };
    Ok((kind, vec![d.instance_id.0], detail))
}

/// A Capacity Block's expiration warning or delivery (`kind`): the reservation and its end.
pub(crate) fn capacity_block(
    f: &Fields<'_>,
    detail: &Value,
    kind: EventKind,
) -> Result<Parsed, DecodeError> {
    let d: Block = f.read(detail, "detail")?;
    let reservation_id = d.capacity_reservation_id.0;
    if !is_reservation_id(&reservation_id) {
        return Err(f.err(
            "detail.capacity-reservation-id",
            format!("`{reservation_id}` is not a capacity reservation id (cr- and 17 hex digits)"),
        ));
    }
    // A delivery that says no end is still a delivery; a warning without one ends 10 minutes
    // after it was sent (see `crate::domain::plan::goes_at`).
    let end_date = f.time(d.end_date.as_deref(), "detail.end-date")?;
    // A part of a warning that forewarn queued (see `crate::app::blocks`) names 1 to
    // PART_MAX instances (in order, each once); AWS never writes the field.
    let path = "detail.instance-ids";
    let mut seen = std::collections::BTreeSet::new();
    let instances: Vec<String> = match &d.instance_ids {
        None => Vec::new(),
        Some(_) if kind != EventKind::CapacityBlockExpiration => {
            return Err(f.err(path, "only a Capacity Block's expiration warning has parts"));
        }
        Some(ids) if !(1..=PART_MAX).contains(&ids.len()) => {
            return Err(f.err(path, format!("expected 1 to {PART_MAX} instance ids")));
        }
        Some(ids) => (ids.iter().map(|id| id.0.clone()))
            .filter(|id| seen.insert(id.clone()))
            .collect(),
    };
    let detail = Detail::CapacityBlock {
        reservation_id,
        end_date,
        block: None,
        part: d.instance_ids.is_some(),
    };
    Ok((kind, instances, detail))
}

/// The most instances one part of a block's warning names (see `crate::app::blocks`).
pub const PART_MAX: usize = 10;

/// The field a part of a block's warning names its instances in.
pub const PART_FIELD: &str = "instance-ids";

/// `cr-` followed by 17 (or, for old reservations, 8) lowercase hex digits.
pub fn is_reservation_id(s: &str) -> bool {
    super::is_aws_id(s, "cr-")
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
                instance(&f, &detail, EventKind::SpotInterruption)
                    .unwrap()
                    .2,
                Detail::Spot { action },
                "{name}"
            );
            assert_eq!(action.to_string(), name);
        }
        let detail = json!({"instance-id": "i-12345678", "instance-action": "Stop"});
        let err = instance(&f, &detail, EventKind::SpotInterruption).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("detail.instance-action"));
        assert_eq!(
            err.message,
            "`Stop` is not one of terminate, stop, hibernate"
        );
        let detail = json!({"instance-id": "i-12345678", "instance-action": 3});
        let err = instance(&f, &detail, EventKind::SpotInterruption).unwrap_err();
        assert_eq!(err.message, "expected a string, found a number");
        for (name, state) in [
            ("pending", InstanceState::Pending),
            ("shutting-down", InstanceState::ShuttingDown),
            ("terminated", InstanceState::Terminated),
            ("other", InstanceState::Other("other".into())),
            ("Running", InstanceState::Other("Running".into())),
        ] {
            let detail = json!({"instance-id": "i-12345678", "state": name});
            let (_, _, parsed) = instance(&f, &detail, EventKind::StateChange).unwrap();
            assert_eq!(
                parsed,
                Detail::StateChange {
                    state: state.clone()
                }
            );
            assert_eq!(state.as_ref(), name);
            assert_eq!(state.to_string(), name);
        }
    }
}
