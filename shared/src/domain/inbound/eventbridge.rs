//! The EventBridge envelope: `id`, `source`, `detail-type`, `time`, `region`, `account` and a
//! `detail` that the file of the event's source reads ([`crate::domain::event`]'s `ec2`,
//! `health`, `autoscaling`). An SQS message's body may also be a lifecycle hook's own
//! notification, with no envelope: it is recognised here and read by `autoscaling`.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::event::fields::{Fields, Parsed, json_type};
use crate::domain::event::{
    DecodeError, Detail, Event, EventKind, Origin, autoscaling, ec2, health, synthetic_id,
};

/// Parses one EventBridge event. Valid JSON of an unknown source or detail-type is an
/// `unsupported` event, not an error.
///
/// The body of an SQS message may also be an Auto Scaling lifecycle hook's own notification (the
/// hook's notification target is the queue): see [`autoscaling::notification`].
///
/// `received` dates an event whose `time` is empty, and is the *now* its times are checked
/// against (see [`super::decode`]).
pub fn parse_event(
    origin: &Origin,
    v: &Value,
    received: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    parse_event_at(origin, v, received, received)
}

/// [`parse_event`] with a `now` of its own.
pub(super) fn parse_event_at(
    origin: &Origin,
    v: &Value,
    received: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    let f = Fields { origin, now };
    if !v.is_object() {
        return Err(f.err(
            "$",
            format!(
                "expected an EventBridge event object, found {}",
                json_type(v)
            ),
        ));
    }
    if autoscaling::is_notification(v) {
        return autoscaling::notification(&f, v, received);
    }
    let (source, detail_type, kind) = envelope_kind(&f, v)?;
    let id = event_id(&f, v, kind)?;
    let time = f.event_time(v, "time", kind, received)?;
    let region = f.opt_str(v, "region", "region")?.map(str::to_string);
    let account = f.opt_str(v, "account", "account")?.map(str::to_string);
    let detail = detail_object(&f, v, kind)?;
    let (kind, instance_ids, detail) = parse_detail(&f, kind, detail, &source, &detail_type)?;
    let detail = detail.placed(account.as_deref(), region.as_deref());
    // A part of a block's warning has an id of its own: the warning's and its first instance's.
    let id = match (&detail, instance_ids.first()) {
        (Detail::CapacityBlock { part: true, .. }, Some(first)) => format!("{id}#{first}"),
        _ => id,
    };
    Ok(Event {
        id,
        kind,
        source,
        detail_type,
        time,
        region,
        account,
        instance_ids,
        detail,
    })
}

/// The envelope's `source` and `detail-type` (empty when absent) and the kind they name.
fn envelope_kind(f: &Fields<'_>, v: &Value) -> Result<(String, String, EventKind), DecodeError> {
    let source = f
        .opt_str(v, "source", "source")?
        .unwrap_or_default()
        .to_string();
    let detail_type = f
        .opt_str(v, "detail-type", "detail-type")?
        .unwrap_or_default()
        .to_string();
    let kind = EventKind::classify(&source, &detail_type);
    Ok((source, detail_type, kind))
}

/// The event id; an unsupported event without one gets a stable synthetic id.
fn event_id(f: &Fields<'_>, v: &Value, kind: EventKind) -> Result<String, DecodeError> {
    match (f.opt_str(v, "id", "id")?, kind) {
        (Some(id), _) if !id.trim().is_empty() => Ok(id.to_string()),
        (_, EventKind::Unsupported) => Ok(synthetic_id(v)),
        (Some(_), _) => Err(f.err("id", "must not be empty")),
        (None, _) => Err(f.err("id", "missing")),
    }
}

/// No `detail` at all (only acceptable for an unsupported event).
static NO_DETAIL: Value = Value::Null;

/// The `detail` object; an unsupported event may have none.
fn detail_object<'v>(
    f: &Fields<'_>,
    v: &'v Value,
    kind: EventKind,
) -> Result<&'v Value, DecodeError> {
    match v.get("detail") {
        Some(d @ Value::Object(_)) => Ok(d),
        None | Some(Value::Null) if kind == EventKind::Unsupported => Ok(&NO_DETAIL),
        None => Err(f.err("detail", "missing")),
        Some(other) => Err(f.err(
            "detail",
            format!("expected an object, found {}", json_type(other)),
        )),
    }
}

/// The kind-specific part: the instances the event is about and its [`Detail`], read by the
/// file of the event's source.
fn parse_detail(
    f: &Fields<'_>,
    kind: EventKind,
    detail: &Value,
    source: &str,
    detail_type: &str,
) -> Result<Parsed, DecodeError> {
    match kind {
        EventKind::SpotInterruption => ec2::spot(f, detail),
        EventKind::RebalanceRecommendation => ec2::rebalance(f, detail),
        EventKind::StateChange => ec2::state_change(f, detail),
        EventKind::CapacityReservationInterruption => ec2::reservation(f, detail),
        EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered => {
            ec2::capacity_block(f, detail, kind)
        }
        EventKind::AsgTermination | EventKind::AsgLaunch => {
            autoscaling::lifecycle_detail(f, detail, kind)
        }
        EventKind::ScheduledChange => health::scheduled_change(f, detail),
        // Never classified from an envelope (see `EventKind::source_and_detail_type`).
        EventKind::Impaired | EventKind::Unsupported => Ok((
            EventKind::Unsupported,
            Vec::new(),
            Detail::Unsupported {
                why: if source.is_empty() && detail_type.is_empty() {
                    "not an EventBridge event (no source or detail-type)".to_string()
                } else {
                    format!("source `{source}`, detail-type `{detail_type}` is not handled")
                },
            },
        )),
    }
}
