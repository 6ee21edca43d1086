//! The EventBridge envelope: `id`, `source`, `detail-type`, `time`, `region`, `account` and a
//! `detail` that the file of the event's source reads ([`crate::domain::event`]'s `ec2`,
//! `health`, `autoscaling`). An SQS message's body may also be a lifecycle hook's own
//! notification, with no envelope: it is recognised here and read by `autoscaling`.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::domain::event::fields::{Fields, Obj, unsupported};
use crate::domain::event::{
    DecodeError, Detail, Event, EventKind, Origin, autoscaling, ec2, health, synthetic_id,
};

/// The envelope's fields; `detail` is read by the file of the event's source.
#[derive(Deserialize)]
struct Envelope {
    id: Option<String>,
    source: Option<String>,
    #[serde(rename = "detail-type")]
    detail_type: Option<String>,
    time: Option<String>,
    region: Option<String>,
    account: Option<String>,
    detail: Option<Map<String, Value>>,
}

/// Parses one EventBridge event: its envelope here, its `detail` by the file of its source. Valid
/// JSON of an unknown source or detail-type is an `unsupported` event, not an error.
///
/// The body of an SQS message may also be an Auto Scaling lifecycle hook's own notification (the
/// hook's notification target is the queue): see [`autoscaling::notification`].
///
/// `received` dates an event whose `time` is empty; `now` is what its times are checked against
/// (see [`super::decode`]): the time of receipt, which an SQS message's `SentTimestamp` (or a
/// continuation's `sentAt`) may precede as `received`.
pub fn parse_event(
    origin: &Origin,
    v: &Value,
    received: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    let f = Fields { origin, now };
    if autoscaling::is_notification(v) {
        return autoscaling::notification(&f, v, received);
    }
    let Obj(e): Obj<Envelope> = f.read(v, "")?;
    let source = e.source.unwrap_or_default();
    let detail_type = e.detail_type.unwrap_or_default();
    let kind = EventKind::classify(&source, &detail_type);
    // An unsupported event without an id gets a stable synthetic one.
    let id = match e.id {
        Some(id) if !id.trim().is_empty() => id,
        _ if kind == EventKind::Unsupported => synthetic_id(v),
        Some(_) => return Err(f.err("id", "must not be empty")),
        None => return Err(f.err("id", "missing")),
    };
    let time = f.event_time(e.time.as_deref(), "time", kind, received)?;
    // An unsupported event may have no `detail`.
    let detail = match e.detail {
        Some(d) => Value::Object(d),
        None if kind == EventKind::Unsupported => Value::Null,
        None => return Err(f.err("detail", "missing")),
    };
    let (kind, instance_ids, detail) = match kind {
        EventKind::SpotInterruption
        | EventKind::RebalanceRecommendation
        | EventKind::StateChange
        | EventKind::CapacityReservationInterruption => ec2::instance(&f, &detail, kind),
        EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered => {
            ec2::capacity_block(&f, &detail, kind)
        }
        EventKind::AsgTermination | EventKind::AsgLaunch => {
            let (account, region) = (e.account.clone(), e.region.clone());
            autoscaling::lifecycle_detail(&f, &detail, kind, account, region)
        }
        EventKind::ScheduledChange => health::scheduled_change(&f, &detail),
        // Never classified from an envelope (see `EventKind::classify`).
        EventKind::Impaired | EventKind::Unsupported => Ok(unsupported(
            if source.is_empty() && detail_type.is_empty() {
                "not an EventBridge event (no source or detail-type)".to_string()
            } else {
                format!("source `{source}`, detail-type `{detail_type}` is not handled")
            },
        )),
    }?;
    // A part of a block's warning has an id of its own: the warning's and its first instance's.
    let id = match (&detail, instance_ids.first()) {
        (Detail::CapacityBlock { part: true, .. }, Some(first)) => format!("{id}#{first}"),
        _ => id,
    };
    Ok(Event {
        id,
        kind,
        time,
        region: e.region,
        account: e.account,
        instance_ids,
        detail,
    })
}
