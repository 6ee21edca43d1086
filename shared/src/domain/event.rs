//! The event model: typed EventBridge events for every kind forewarn handles, decoded from the
//! three envelopes they arrive in (a bare EventBridge event, a Lambda SQS batch, a JSON array).
//!
//! Decoding never panics and never fails a whole input for one bad record: each record decodes to
//! its own `Result`, and an error names the record and the field that was wrong.

use std::fmt;

use aws_lambda_events::event::sqs::SqsMessage;
use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::continuation::{self, Continuation, Unwrapped};
use super::time::within_sane_range;

/// The kinds of event forewarn knows, by their stable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    SpotInterruption,
    RebalanceRecommendation,
    StateChange,
    ScheduledChange,
    AsgTermination,
    CapacityReservationInterruption,
    Unsupported,
}

impl EventKind {
    /// Every kind, in a stable order.
    pub const ALL: [EventKind; 7] = [
        EventKind::SpotInterruption,
        EventKind::RebalanceRecommendation,
        EventKind::StateChange,
        EventKind::ScheduledChange,
        EventKind::AsgTermination,
        EventKind::CapacityReservationInterruption,
        EventKind::Unsupported,
    ];

    /// The stable name (`spot-interruption`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SpotInterruption => "spot-interruption",
            EventKind::RebalanceRecommendation => "rebalance-recommendation",
            EventKind::StateChange => "state-change",
            EventKind::ScheduledChange => "scheduled-change",
            EventKind::AsgTermination => "asg-termination",
            EventKind::CapacityReservationInterruption => "capacity-reservation-interruption",
            EventKind::Unsupported => "unsupported",
        }
    }

    /// Parses a stable name.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The EventBridge `source` and `detail-type` of a supported kind.
    pub fn source_and_detail_type(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            EventKind::SpotInterruption => (SOURCE_EC2, DT_SPOT),
            EventKind::RebalanceRecommendation => (SOURCE_EC2, DT_REBALANCE),
            EventKind::StateChange => (SOURCE_EC2, DT_STATE_CHANGE),
            EventKind::ScheduledChange => (SOURCE_HEALTH, DT_HEALTH),
            EventKind::AsgTermination => (SOURCE_ASG, DT_ASG_TERMINATE),
            EventKind::CapacityReservationInterruption => (SOURCE_EC2, DT_RESERVATION),
            EventKind::Unsupported => return None,
        })
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub const SOURCE_EC2: &str = "aws.ec2";
pub const SOURCE_HEALTH: &str = "aws.health";
pub const SOURCE_ASG: &str = "aws.autoscaling";
pub const DT_SPOT: &str = "EC2 Spot Instance Interruption Warning";
pub const DT_REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
pub const DT_STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const DT_HEALTH: &str = "AWS Health Event";
pub const DT_ASG_TERMINATE: &str = "EC2 Instance-terminate Lifecycle Action";
pub const DT_RESERVATION: &str = "EC2 Capacity Reservation Instance Interruption Warning";
/// The `Service` of an Auto Scaling notification sent straight to a queue.
pub const ASG_SERVICE: &str = "AWS Auto Scaling";
/// The lifecycle transition forewarn acts on.
pub const ASG_TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";
/// What Auto Scaling sends when a hook or notification is created.
pub const ASG_TEST_NOTIFICATION: &str = "autoscaling:TEST_NOTIFICATION";

/// What a spot (or capacity reservation) interruption will do to the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceAction {
    Terminate,
    Stop,
    Hibernate,
}

/// EC2 instance states as the state-change notification names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
    #[serde(untagged)]
    Other(String),
}

impl InstanceState {
    fn parse(s: &str) -> InstanceState {
        match s {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            other => InstanceState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
            InstanceState::Other(s) => s,
        }
    }

    /// States in which the instance is going away (the ones forewarn acts on).
    pub fn is_leaving(&self) -> bool {
        matches!(
            self,
            InstanceState::Stopping
                | InstanceState::Stopped
                | InstanceState::ShuttingDown
                | InstanceState::Terminated
        )
    }
}

/// The ASG lifecycle action to complete once the node is drained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleAction {
    pub hook_name: String,
    pub asg_name: String,
    pub token: String,
    pub transition: String,
}

/// The kind-specific part of an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Detail {
    Spot {
        action: InstanceAction,
    },
    Rebalance,
    StateChange {
        state: InstanceState,
    },
    Scheduled {
        event_type_code: String,
        event_arn: Option<String>,
        start_time: Option<DateTime<Utc>>,
        end_time: Option<DateTime<Utc>>,
    },
    AsgTermination(LifecycleAction),
    CapacityReservation {
        action: InstanceAction,
        termination_time: Option<DateTime<Utc>>,
        az_id: Option<String>,
    },
    /// Valid JSON forewarn does not handle; `why` says what it was.
    Unsupported {
        why: String,
    },
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The EventBridge event id; the idempotence key.
    pub id: String,
    pub kind: EventKind,
    pub source: String,
    pub detail_type: String,
    pub time: DateTime<Utc>,
    pub region: Option<String>,
    pub account: Option<String>,
    /// The EC2 instances the event is about (in event order, no duplicates).
    pub instance_ids: Vec<String>,
    pub detail: Detail,
}

impl Event {
    /// When the instance is expected to go away, from what the event says.
    pub fn deadline_hint(&self) -> Option<DateTime<Utc>> {
        match &self.detail {
            Detail::Scheduled { start_time, .. } => *start_time,
            Detail::CapacityReservation {
                termination_time, ..
            } => *termination_time,
            _ => None,
        }
    }
}

/// Where a record came from inside an input: the file (or other label), its position in the
/// envelope and the SQS message id when there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub source: String,
    /// `None` for a bare event; the index in `Records` or in the array otherwise.
    pub index: Option<usize>,
    pub message_id: Option<String>,
    #[serde(skip)]
    envelope: EnvelopeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum EnvelopeKind {
    #[default]
    Bare,
    Sqs,
    Array,
}

impl Origin {
    /// The origin of a bare event read from `source`.
    pub fn bare(source: impl Into<String>) -> Origin {
        Origin {
            source: source.into(),
            index: None,
            message_id: None,
            envelope: EnvelopeKind::Bare,
        }
    }

    fn sqs(source: &str, index: usize, message_id: Option<String>) -> Origin {
        Origin {
            source: source.to_string(),
            index: Some(index),
            message_id,
            envelope: EnvelopeKind::Sqs,
        }
    }

    fn array(source: &str, index: usize) -> Origin {
        Origin {
            source: source.to_string(),
            index: Some(index),
            message_id: None,
            envelope: EnvelopeKind::Array,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)?;
        match (self.envelope, self.index) {
            (EnvelopeKind::Sqs, Some(i)) => {
                write!(f, ": Records[{i}]")?;
                if let Some(id) = &self.message_id {
                    write!(f, " (messageId {id})")?;
                }
                Ok(())
            }
            (_, Some(i)) => write!(f, ": [{i}]"),
            _ => Ok(()),
        }
    }
}

/// A record that could not be decoded: where, which field, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{message}", field.as_deref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct DecodeError {
    pub origin: Origin,
    /// The JSON path of the offending field, when one field is to blame.
    pub field: Option<String>,
    pub message: String,
}

/// One record of an input: where it came from and what it decoded to.
#[derive(Debug, Clone)]
pub struct Record {
    pub origin: Origin,
    pub event: Result<Event, DecodeError>,
    /// A later pass of the event's drain (see [`crate::domain::continuation`]).
    pub continuation: Option<Continuation>,
    /// The SQS message body the event came in (what a continuation carries).
    pub body: Option<String>,
    /// The SQS queue's ARN (`eventSourceARN`), when the record came from one: where a
    /// continuation of its drain is sent.
    pub queue_arn: Option<String>,
}

impl Record {
    /// A record of `event` from `origin`, not a continuation.
    pub fn new(origin: Origin, event: Result<Event, DecodeError>) -> Record {
        Record {
            origin,
            event,
            continuation: None,
            body: None,
            queue_arn: None,
        }
    }
}

/// Decodes an input (any of the three envelopes). An `Err` means the input as a whole could not
/// be read (not JSON, or no envelope recognised); otherwise each record carries its own result.
///
/// `received` is when the input was received: the time of an event whose `time` is empty (an
/// SQS message's `SentTimestamp` comes first), and the *now* every time in the input is checked
/// against: a time more than 10 years from it, either way, is malformed (see
/// [`crate::domain::time`]). The caller passes it in, so that decoding stays pure and
/// deterministic.
pub fn decode(
    source: &str,
    input: &[u8],
    received: DateTime<Utc>,
) -> Result<Vec<Record>, DecodeError> {
    let value: Value = serde_json::from_slice(input).map_err(|e| DecodeError {
        origin: Origin::bare(source),
        field: None,
        message: format!("not valid JSON: {e}"),
    })?;
    decode_value(source, value, received)
}

/// Decodes an already-parsed input; see [`decode`].
pub fn decode_value(
    source: &str,
    value: Value,
    received: DateTime<Utc>,
) -> Result<Vec<Record>, DecodeError> {
    match value {
        Value::Array(items) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let origin = Origin::array(source, i);
                let event = parse_event(&origin, &item, received);
                Record::new(origin, event)
            })
            .collect()),
        Value::Object(ref map) if map.contains_key("Records") => {
            let records = match map.get("Records") {
                Some(Value::Array(records)) => records,
                _ => {
                    return Err(DecodeError {
                        origin: Origin::bare(source),
                        field: Some("Records".into()),
                        message: "expected an array of SQS messages".into(),
                    });
                }
            };
            Ok(records
                .iter()
                .enumerate()
                .map(|(i, raw)| decode_sqs_record(source, i, raw, received))
                .collect())
        }
        Value::Object(_) => {
            let origin = Origin::bare(source);
            let event = parse_event(&origin, &value, received);
            Ok(vec![Record::new(origin, event)])
        }
        other => Err(DecodeError {
            origin: Origin::bare(source),
            field: None,
            message: format!(
                "expected an EventBridge event, an SQS event or an array of events, found {}",
                json_type(&other)
            ),
        }),
    }
}

fn decode_sqs_record(source: &str, index: usize, raw: &Value, received: DateTime<Utc>) -> Record {
    let message_id = raw
        .get("messageId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let origin = Origin::sqs(source, index, message_id);
    match serde_json::from_value::<SqsMessage>(raw.clone()) {
        Ok(msg) => decode_sqs_message(origin, &msg, received),
        Err(e) => Record::new(
            origin.clone(),
            Err(DecodeError {
                origin,
                field: None,
                message: format!("not an SQS message: {e}"),
            }),
        ),
    }
}

/// Decodes one SQS message of a batch: its body (see [`decode_sqs_body`]), or the original body
/// a continuation message carries, with the continuation's progress.
fn decode_sqs_message(origin: Origin, msg: &SqsMessage, received: DateTime<Utc>) -> Record {
    let record = decode_sqs_message_body(origin, msg, received);
    Record {
        queue_arn: msg.event_source_arn.clone(),
        ..record
    }
}

fn decode_sqs_message_body(origin: Origin, msg: &SqsMessage, received: DateTime<Utc>) -> Record {
    let sent = sent_at(msg, received);
    // Times are checked against when the message was received (`received`), whatever dates an
    // event whose `time` is empty.
    let now = received;
    let body = msg.body.as_deref();
    let unwrapped = body
        .and_then(|b| serde_json::from_str::<Value>(b).ok())
        .and_then(|v| continuation::unwrap(&v, received));
    match unwrapped {
        None => Record {
            event: decode_body(&origin, body, sent, now),
            origin,
            continuation: None,
            body: body.map(str::to_string),
            queue_arn: None,
        },
        Some(Err((field, message))) => Record::new(
            origin.clone(),
            Err(DecodeError {
                origin,
                field: Some(format!("body.{field}")),
                message,
            }),
        ),
        // Its times were checked by `continuation::unwrap`.
        Some(Ok(Unwrapped { continuation, body })) => Record {
            event: decode_body(&origin, Some(&body), continuation.sent_at, now),
            origin,
            continuation: Some(continuation),
            body: Some(body),
            queue_arn: None,
        },
    }
}

/// Decodes the body of one SQS message (the EventBridge event JSON as a string, or an Auto
/// Scaling notification). `sent` is the time of an event whose `time` is empty, and the *now*
/// its times are checked against (see [`decode`]).
pub fn decode_sqs_body(
    origin: &Origin,
    body: Option<&str>,
    sent: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    decode_body(origin, body, sent, sent)
}

/// [`decode_sqs_body`] with a `now` of its own.
fn decode_body(
    origin: &Origin,
    body: Option<&str>,
    sent: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    let err = |message: String| DecodeError {
        origin: origin.clone(),
        field: Some("body".into()),
        message,
    };
    let body = body.ok_or_else(|| err("missing".into()))?;
    let value: Value =
        serde_json::from_str(body).map_err(|e| err(format!("not valid JSON: {e}")))?;
    parse_event_at(origin, &value, sent, now)
}

/// Decodes the records of a Lambda `SqsEvent`, keeping each message's id. An event whose `time`
/// is empty is dated by its message's `SentTimestamp`, or else `received`.
pub fn decode_sqs_event(
    source: &str,
    messages: &[SqsMessage],
    received: DateTime<Utc>,
) -> Vec<Record> {
    messages
        .iter()
        .enumerate()
        .map(|(i, msg)| {
            decode_sqs_message(
                Origin::sqs(source, i, msg.message_id.clone()),
                msg,
                received,
            )
        })
        .collect()
}

/// When SQS received a message (its `SentTimestamp` attribute, epoch milliseconds), or else
/// `received` (also when the attribute is not a time, or not one within 10 years of `received`).
fn sent_at(msg: &SqsMessage, received: DateTime<Utc>) -> DateTime<Utc> {
    msg.attributes
        .get("SentTimestamp")
        .and_then(|ms| ms.trim().parse::<i64>().ok())
        .and_then(DateTime::from_timestamp_millis)
        .and_then(|t| within_sane_range(t, received).ok())
        .unwrap_or(received)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field access with errors that name the field.
struct Fields<'a> {
    origin: &'a Origin,
    /// What times are checked against (see [`within_sane_range`]).
    now: DateTime<Utc>,
}

impl<'a> Fields<'a> {
    fn err(&self, field: &str, message: impl Into<String>) -> DecodeError {
        DecodeError {
            origin: self.origin.clone(),
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// An optional string: absent or null is `None`, any other non-string is an error.
    fn opt_str<'v>(
        &self,
        v: &'v Value,
        key: &str,
        path: &str,
    ) -> Result<Option<&'v str>, DecodeError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(
                path,
                format!("expected a string, found {}", json_type(other)),
            )),
        }
    }

    fn req_str<'v>(&self, v: &'v Value, key: &str, path: &str) -> Result<&'v str, DecodeError> {
        match self.opt_str(v, key, path)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(self.err(path, "must not be empty")),
            None => Err(self.err(path, "missing")),
        }
    }

    /// An instance id; surrounding whitespace is trimmed.
    fn instance_id(&self, v: &Value, key: &str, path: &str) -> Result<String, DecodeError> {
        let id = self.req_str(v, key, path)?.trim();
        if is_instance_id(id) {
            Ok(id.to_string())
        } else {
            Err(self.err(
                path,
                format!("`{id}` is not an EC2 instance id (i-0123456789abcdef0)"),
            ))
        }
    }

    /// An optional time, within 10 years of now.
    fn time(&self, v: &Value, key: &str, path: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
        match self.opt_str(v, key, path)? {
            None => Ok(None),
            Some(s) => {
                let t = parse_time(s).ok_or_else(|| {
                    self.err(path, format!("`{s}` is not an RFC 3339 or RFC 1123 time"))
                })?;
                within_sane_range(t, self.now)
                    .map(Some)
                    .map_err(|m| self.err(path, m))
            }
        }
    }

    /// An optional time where an empty string means absent (there is a fallback).
    fn time_or_empty(
        &self,
        v: &Value,
        key: &str,
        path: &str,
    ) -> Result<Option<DateTime<Utc>>, DecodeError> {
        match self.opt_str(v, key, path)? {
            Some(s) if s.trim().is_empty() => Ok(None),
            _ => self.time(v, key, path),
        }
    }
}

/// `i-` followed by 8 or 17 lowercase hex digits.
pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Parses the time forms AWS events use: RFC 3339 ("2026-06-05T15:10:09Z") and RFC 1123 as AWS
/// Health writes it ("Sat, 05 Jun 2026 15:10:09 GMT").
///
/// Only years 0 to 9999 (in UTC) are times: the RFC 2822 parser takes years of any length, and
/// a time near chrono's limits would overflow (and panic) when a deadline is added to it.
///
/// RFC 1123 dates are also taken as AWS writes them in its own examples: a weekday that does not
/// match the date (the date is authoritative, the weekday redundant), single-digit days and
/// fractional seconds (`Thu, 3 Dec 2026 06:00:00.500 GMT`).
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    DateTime::parse_from_rfc3339(s)
        .or_else(|_| DateTime::parse_from_rfc2822(s))
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| parse_rfc1123_as_aws_writes_it(s))
        .filter(|t| (0..=9999).contains(&t.year()))
}

/// RFC 1123 with a weekday that may not match the date, and fractional seconds.
fn parse_rfc1123_as_aws_writes_it(s: &str) -> Option<DateTime<Utc>> {
    let (weekday, rest) = match s.split_once(',') {
        Some((w, rest)) => (Some(w.trim().parse::<Weekday>().ok()?), rest),
        None => (None, s),
    };
    // day month year time zone
    let mut parts: Vec<&str> = rest.split_ascii_whitespace().collect();
    if parts.len() != 5 {
        return None;
    }
    let mut nanos = 0;
    if let Some((hms, fraction)) = parts[3].split_once('.') {
        if fraction.is_empty()
            || fraction.len() > 9
            || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let digits = u32::try_from(fraction.len()).ok()?;
        nanos = fraction.parse::<u32>().ok()? * 10u32.pow(9 - digits);
        parts[3] = hms;
    }
    let t = DateTime::parse_from_rfc2822(&parts.join(" "))
        .ok()?
        .with_timezone(&Utc)
        .with_nanosecond(nanos)?;
    if let Some(weekday) = weekday
        && weekday != t.weekday()
    {
        tracing::debug!(
            time = s,
            weekday = %weekday,
            date_weekday = %t.weekday(),
            "RFC 1123 time whose weekday does not match its date: the date is taken"
        );
    }
    Some(t)
}

/// Parses one EventBridge event. Valid JSON of an unknown source or detail-type is an
/// `unsupported` event, not an error.
///
/// The body of an SQS message may also be an Auto Scaling lifecycle hook's own notification (the
/// hook's notification target is the queue): see [`parse_autoscaling_notification`].
///
/// `received` dates an event whose `time` is empty, and is the *now* its times are checked
/// against (see [`decode`]).
pub fn parse_event(
    origin: &Origin,
    v: &Value,
    received: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    parse_event_at(origin, v, received, received)
}

/// [`parse_event`] with a `now` of its own.
fn parse_event_at(
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
    if is_autoscaling_notification(v) {
        return parse_autoscaling_notification(&f, v, received);
    }
    let (source, detail_type, kind) = envelope_kind(&f, v)?;
    let id = event_id(&f, v, kind)?;
    let time = event_time(&f, v, "time", kind, received)?;
    let region = f.opt_str(v, "region", "region")?.map(str::to_string);
    let account = f.opt_str(v, "account", "account")?.map(str::to_string);
    let detail = detail_object(&f, v, kind)?;
    let (kind, instance_ids, detail) = parse_detail(&f, kind, detail, &source, &detail_type)?;
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
    let kind = classify(&source, &detail_type);
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

/// The event time (field `key`). An empty one falls back to `received` (which must be within
/// 10 years of now too); an unsupported event without one is dated at the epoch.
fn event_time(
    f: &Fields<'_>,
    v: &Value,
    key: &str,
    kind: EventKind,
    received: DateTime<Utc>,
) -> Result<DateTime<Utc>, DecodeError> {
    if f.opt_str(v, key, key)?.is_some_and(|s| s.trim().is_empty()) {
        return within_sane_range(received, f.now)
            .map_err(|m| f.err(key, format!("empty, and the time it falls back to, {m}")));
    }
    match f.time(v, key, key)? {
        Some(t) => Ok(t),
        None if kind == EventKind::Unsupported => Ok(DateTime::<Utc>::UNIX_EPOCH),
        None => Err(f.err(key, "missing")),
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

/// The kind-specific part: the instances the event is about and its [`Detail`].
fn parse_detail(
    f: &Fields<'_>,
    kind: EventKind,
    detail: &Value,
    source: &str,
    detail_type: &str,
) -> Result<(EventKind, Vec<String>, Detail), DecodeError> {
    Ok(match kind {
        EventKind::SpotInterruption => {
            let id = f.instance_id(detail, "instance-id", "detail.instance-id")?;
            let action = instance_action(f, detail)?;
            (kind, vec![id], Detail::Spot { action })
        }
        EventKind::RebalanceRecommendation => {
            let id = f.instance_id(detail, "instance-id", "detail.instance-id")?;
            (kind, vec![id], Detail::Rebalance)
        }
        EventKind::StateChange => {
            let id = f.instance_id(detail, "instance-id", "detail.instance-id")?;
            let state = InstanceState::parse(f.req_str(detail, "state", "detail.state")?);
            (kind, vec![id], Detail::StateChange { state })
        }
        EventKind::CapacityReservationInterruption => parse_reservation(f, detail)?,
        EventKind::AsgTermination => match autoscaling_test_notification(f, detail, "detail.")? {
            Some(why) => (
                EventKind::Unsupported,
                Vec::new(),
                Detail::Unsupported { why },
            ),
            None => parse_lifecycle_detail(f, detail)?,
        },
        EventKind::ScheduledChange => parse_health(f, detail)?,
        EventKind::Unsupported => (
            kind,
            Vec::new(),
            Detail::Unsupported {
                why: if source.is_empty() && detail_type.is_empty() {
                    "not an EventBridge event (no source or detail-type)".to_string()
                } else {
                    format!("source `{source}`, detail-type `{detail_type}` is not handled")
                },
            },
        ),
    })
}

fn parse_reservation(
    f: &Fields<'_>,
    detail: &Value,
) -> Result<(EventKind, Vec<String>, Detail), DecodeError> {
    let id = f.instance_id(detail, "instance-id", "detail.instance-id")?;
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

/// The `detail` of an EventBridge `EC2 Instance-terminate Lifecycle Action`.
fn parse_lifecycle_detail(
    f: &Fields<'_>,
    detail: &Value,
) -> Result<(EventKind, Vec<String>, Detail), DecodeError> {
    let (id, lifecycle) = lifecycle_action(f, detail, "detail.")?;
    Ok((
        EventKind::AsgTermination,
        vec![id],
        Detail::AsgTermination(lifecycle),
    ))
}

/// The instance and the lifecycle action of a lifecycle hook's notification (the `detail` of an
/// EventBridge event, paths under `prefix`, or a notification sent straight to a queue).
fn lifecycle_action(
    f: &Fields<'_>,
    v: &Value,
    prefix: &str,
) -> Result<(String, LifecycleAction), DecodeError> {
    let path = |key: &str| format!("{prefix}{key}");
    let id = f.instance_id(v, "EC2InstanceId", &path("EC2InstanceId"))?;
    let lifecycle = LifecycleAction {
        hook_name: f
            .req_str(v, "LifecycleHookName", &path("LifecycleHookName"))?
            .to_string(),
        asg_name: f
            .req_str(v, "AutoScalingGroupName", &path("AutoScalingGroupName"))?
            .to_string(),
        token: f
            .req_str(v, "LifecycleActionToken", &path("LifecycleActionToken"))?
            .to_string(),
        transition: f
            .opt_str(v, "LifecycleTransition", &path("LifecycleTransition"))?
            .unwrap_or(ASG_TERMINATING)
            .to_string(),
    };
    Ok((id, lifecycle))
}

/// Why an Auto Scaling notification (fields under `prefix`) is a test notification to ignore,
/// when it is one (`Event` or `LifecycleTransition` is `autoscaling:TEST_NOTIFICATION`).
fn autoscaling_test_notification(
    f: &Fields<'_>,
    v: &Value,
    prefix: &str,
) -> Result<Option<String>, DecodeError> {
    let event = f.opt_str(v, "Event", &format!("{prefix}Event"))?;
    let transition = f.opt_str(
        v,
        "LifecycleTransition",
        &format!("{prefix}LifecycleTransition"),
    )?;
    Ok(
        (event == Some(ASG_TEST_NOTIFICATION) || transition == Some(ASG_TEST_NOTIFICATION)).then(
            || {
                format!(
                    "Auto Scaling test notification ({ASG_TEST_NOTIFICATION}), sent when a lifecycle hook or notification is created: nothing to do"
                )
            },
        ),
    )
}

/// An Auto Scaling notification sent straight to the queue (a lifecycle hook whose notification
/// target is the queue): no `source` or `detail-type`, and the `Service` of Auto Scaling or the
/// fields of a lifecycle action or a test notification at the top level.
fn is_autoscaling_notification(v: &Value) -> bool {
    v.get("source").is_none()
        && v.get("detail-type").is_none()
        && (v.get("Service").and_then(Value::as_str) == Some(ASG_SERVICE)
            || ["LifecycleTransition", "LifecycleActionToken", "Event"]
                .iter()
                .any(|k| v.get(*k).is_some()))
}

/// Parses a lifecycle hook's own notification. A terminating transition is an `asg-termination`
/// whose id is derived from the `LifecycleActionToken` (so a redelivery is a duplicate); a test
/// notification, a launching transition (or any other) is unsupported, ignored with the reason.
/// It takes the EventBridge kind's `source` and `detail-type`, so that it is planned alike.
fn parse_autoscaling_notification(
    f: &Fields<'_>,
    v: &Value,
    received: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    let account = f.opt_str(v, "AccountId", "AccountId")?.map(str::to_string);
    let region = f
        .opt_str(v, "AutoScalingGroupARN", "AutoScalingGroupARN")?
        .and_then(|arn| arn.split(':').nth(3))
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let transition = f.opt_str(v, "LifecycleTransition", "LifecycleTransition")?;
    let why = match (autoscaling_test_notification(f, v, "")?, transition) {
        (Some(why), _) => Some(why),
        (None, Some(ASG_TERMINATING)) => None,
        (None, Some(other)) => Some(format!(
            "Auto Scaling lifecycle transition `{other}`: only {ASG_TERMINATING} is handled"
        )),
        (None, None) => Some(format!(
            "Auto Scaling notification `{}` is not a lifecycle action",
            f.opt_str(v, "Event", "Event")?.unwrap_or_default()
        )),
    };
    if let Some(why) = why {
        return Ok(Event {
            id: synthetic_id(v),
            kind: EventKind::Unsupported,
            source: SOURCE_ASG.to_string(),
            detail_type: transition
                .or(f.opt_str(v, "Event", "Event")?)
                .unwrap_or_default()
                .to_string(),
            time: event_time(f, v, "Time", EventKind::Unsupported, received)?,
            region,
            account,
            instance_ids: Vec::new(),
            detail: Detail::Unsupported { why },
        });
    }
    let token = f.req_str(v, "LifecycleActionToken", "LifecycleActionToken")?;
    let time = event_time(f, v, "Time", EventKind::AsgTermination, received)?;
    let (instance, lifecycle) = lifecycle_action(f, v, "")?;
    Ok(Event {
        id: format!("lifecycle-action:{token}"),
        kind: EventKind::AsgTermination,
        source: SOURCE_ASG.to_string(),
        detail_type: DT_ASG_TERMINATE.to_string(),
        time,
        region,
        account,
        instance_ids: vec![instance],
        detail: Detail::AsgTermination(lifecycle),
    })
}

fn classify(source: &str, detail_type: &str) -> EventKind {
    EventKind::ALL
        .into_iter()
        .find(|k| k.source_and_detail_type() == Some((source, detail_type)))
        .unwrap_or(EventKind::Unsupported)
}

fn instance_action(f: &Fields<'_>, detail: &Value) -> Result<InstanceAction, DecodeError> {
    let path = "detail.instance-action";
    match f.opt_str(detail, "instance-action", path)? {
        // Older spot warnings and some reservation warnings omit it: terminate is the default.
        None => Ok(InstanceAction::Terminate),
        Some("terminate") => Ok(InstanceAction::Terminate),
        Some("stop") => Ok(InstanceAction::Stop),
        Some("hibernate") => Ok(InstanceAction::Hibernate),
        Some(other) => Err(f.err(
            path,
            format!("`{other}` is not one of terminate, stop, hibernate"),
        )),
    }
}

fn parse_health(
    f: &Fields<'_>,
    detail: &Value,
) -> Result<(EventKind, Vec<String>, Detail), DecodeError> {
    let service = f
        .opt_str(detail, "service", "detail.service")?
        .unwrap_or_default();
    let category = f
        .opt_str(detail, "eventTypeCategory", "detail.eventTypeCategory")?
        .unwrap_or_default();
    if service != "EC2" || category != "scheduledChange" {
        return Ok((
            EventKind::Unsupported,
            Vec::new(),
            Detail::Unsupported {
                why: format!(
                    "AWS Health event for service `{service}`, category `{category}`: only EC2 scheduledChange events are handled"
                ),
            },
        ));
    }
    let event_type_code = f
        .opt_str(detail, "eventTypeCode", "detail.eventTypeCode")?
        .unwrap_or_default()
        .to_string();
    let event_arn = f
        .opt_str(detail, "eventArn", "detail.eventArn")?
        .map(str::to_string);
    // Empty is absent: the drain deadline then falls back as for events that give none.
    let start_time = f.time_or_empty(detail, "startTime", "detail.startTime")?;
    let end_time = f.time_or_empty(detail, "endTime", "detail.endTime")?;
    let mut ids: Vec<String> = Vec::new();
    match detail.get("affectedEntities") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entities)) => {
            for (i, entity) in entities.iter().enumerate() {
                let path = format!("detail.affectedEntities[{i}].entityValue");
                if !entity.is_object() {
                    return Err(f.err(
                        &format!("detail.affectedEntities[{i}]"),
                        format!("expected an object, found {}", json_type(entity)),
                    ));
                }
                if let Some(value) = f.opt_str(entity, "entityValue", &path)?.map(str::trim)
                    && is_instance_id(value)
                    && !ids.iter().any(|x| x == value)
                {
                    ids.push(value.to_string());
                }
            }
        }
        Some(other) => {
            return Err(f.err(
                "detail.affectedEntities",
                format!("expected an array, found {}", json_type(other)),
            ));
        }
    }
    if ids.is_empty() {
        return Err(f.err(
            "detail.affectedEntities",
            "no entityValue is an EC2 instance id",
        ));
    }
    Ok((
        EventKind::ScheduledChange,
        ids,
        Detail::Scheduled {
            event_type_code,
            event_arn,
            start_time,
            end_time,
        },
    ))
}

/// A stable id for an unsupported event that carries none (FNV-1a of its canonical JSON).
fn synthetic_id(v: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_string().bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("unidentified-{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spot(id: &str, instance: Value) -> Value {
        json!({
            "version": "0", "id": id, "detail-type": DT_SPOT, "source": "aws.ec2",
            "account": "123456789012", "time": "2026-11-20T10:00:00Z", "region": "us-east-1",
            "resources": [], "detail": {"instance-id": instance, "instance-action": "terminate"}
        })
    }

    /// When the test inputs were received.
    fn received() -> DateTime<Utc> {
        parse_time("2026-11-20T10:05:00Z").unwrap()
    }

    fn one(v: Value) -> Result<Event, DecodeError> {
        let mut records = decode_value("t.json", v, received()).unwrap();
        assert_eq!(records.len(), 1);
        records.remove(0).event
    }

    #[test]
    fn spot_warning_decodes() {
        let e = one(spot("e1", json!("i-0a1b2c3d4e5f60001"))).unwrap();
        assert_eq!(e.kind, EventKind::SpotInterruption);
        assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60001"]);
        assert_eq!(
            e.detail,
            Detail::Spot {
                action: InstanceAction::Terminate
            }
        );
        assert_eq!(e.region.as_deref(), Some("us-east-1"));
    }

    #[test]
    fn wrong_type_names_file_and_field() {
        let err = one(spot("e1", json!(42))).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("detail.instance-id"));
        let msg = err.to_string();
        assert!(
            msg.starts_with("t.json: field `detail.instance-id`: expected a string"),
            "{msg}"
        );
    }

    #[test]
    fn missing_instance_id_is_an_error() {
        let mut v = spot("e1", json!("x"));
        v["detail"].as_object_mut().unwrap().remove("instance-id");
        let err = one(v).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("detail.instance-id"));
        assert_eq!(err.message, "missing");
    }

    #[test]
    fn bad_instance_id_is_an_error() {
        let err = one(spot("e1", json!("vol-123"))).unwrap_err();
        assert!(err.message.contains("not an EC2 instance id"));
    }

    #[test]
    fn bad_time_is_an_error() {
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["time"] = json!("yesterday");
        let err = one(v).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("time"));
    }

    #[test]
    fn health_times_in_rfc1123_and_rfc3339() {
        let t1 = parse_time("Sat, 21 Nov 2026 10:30:00 GMT").unwrap();
        let t2 = parse_time("2026-11-21T10:30:00Z").unwrap();
        assert_eq!(t1, t2);
        assert!(parse_time("yesterday").is_none());
    }

    #[test]
    fn times_beyond_year_9999_are_not_times() {
        // Found by fuzzing (fuzz/): RFC 2822 years of five or more digits parsed, and did not
        // come back from RFC 3339; near chrono's last year adding a deadline would panic.
        assert!(parse_time("Sat, 21 Nov 20263 10:30\nr").is_none());
        assert!(parse_time("Fri, 31 Dec 262143 23:59:59 GMT").is_none());
        assert!(parse_time("Fri, 31 Dec 9999 23:59:59 -1200").is_none());
        let last = parse_time("Fri, 31 Dec 9999 23:59:59 GMT").unwrap();
        assert_eq!(parse_time(&last.to_rfc3339()), Some(last));
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["time"] = json!("Sat, 21 Nov 20263 10:30:00 GMT");
        assert_eq!(one(v).unwrap_err().field.as_deref(), Some("time"));
    }

    #[test]
    fn health_event_keeps_only_instance_entities() {
        let v = json!({
            "id": "h1", "source": "aws.health", "detail-type": "AWS Health Event",
            "time": "2026-11-20T10:00:00Z",
            "detail": {
                "service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": "Sat, 21 Nov 2026 10:30:00 GMT",
                "affectedEntities": [
                    {"entityValue": "i-0a1b2c3d4e5f60002"},
                    {"entityValue": "vol-0123456789abcdef0"},
                    {"entityValue": "i-0a1b2c3d4e5f60002"},
                    {"entityValue": "i-0a1b2c3d4e5f6000d"}
                ]
            }
        });
        let e = one(v).unwrap();
        assert_eq!(e.kind, EventKind::ScheduledChange);
        assert_eq!(
            e.instance_ids,
            vec!["i-0a1b2c3d4e5f60002", "i-0a1b2c3d4e5f6000d"]
        );
        assert_eq!(e.deadline_hint(), parse_time("2026-11-21T10:30:00Z"));
    }

    #[test]
    fn health_event_for_other_service_is_unsupported() {
        let v = json!({
            "id": "h2", "source": "aws.health", "detail-type": "AWS Health Event",
            "time": "2026-11-20T10:00:00Z",
            "detail": {"service": "RDS", "eventTypeCategory": "issue"}
        });
        let e = one(v).unwrap();
        assert_eq!(e.kind, EventKind::Unsupported);
    }

    #[test]
    fn unknown_json_is_unsupported_not_an_error() {
        let e = one(json!({"hello": "world"})).unwrap();
        assert_eq!(e.kind, EventKind::Unsupported);
        assert!(e.id.starts_with("unidentified-"));
        let e2 = one(json!({"hello": "world"})).unwrap();
        assert_eq!(e.id, e2.id, "synthetic ids are stable");
    }

    #[test]
    fn sqs_batch_keeps_going_past_a_bad_record() {
        let good = spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string();
        let v = json!({"Records": [
            {"messageId": "m1", "body": good},
            {"messageId": "m2", "body": "{not json"},
        ]});
        let records = decode_value("batch.json", v, received()).unwrap();
        assert!(records[0].event.is_ok());
        let err = records[1].event.as_ref().unwrap_err();
        assert_eq!(err.to_string().split(':').next(), Some("batch.json"));
        assert!(
            err.to_string().contains("Records[1] (messageId m2)"),
            "{err}"
        );
        assert_eq!(err.field.as_deref(), Some("body"));
    }

    #[test]
    fn array_envelope() {
        let v = json!([spot("a", json!("i-0a1b2c3d4e5f60001")), 7]);
        let records = decode_value("arr.json", v, received()).unwrap();
        assert!(records[0].event.is_ok());
        assert!(
            records[1]
                .event
                .as_ref()
                .unwrap_err()
                .to_string()
                .starts_with("arr.json: [1]")
        );
    }

    #[test]
    fn not_json_is_an_input_error() {
        let err = decode("x.json", b"{\"id\": ", received()).unwrap_err();
        assert!(
            err.to_string().starts_with("x.json: not valid JSON"),
            "{err}"
        );
        let err = decode("y.json", b"42", received()).unwrap_err();
        assert!(err.message.contains("found a number"));
    }

    #[test]
    fn asg_lifecycle_action() {
        let v = json!({
            "id": "a1", "source": "aws.autoscaling",
            "detail-type": "EC2 Instance-terminate Lifecycle Action",
            "time": "2026-11-20T10:00:00Z",
            "detail": {
                "LifecycleActionToken": "tok", "AutoScalingGroupName": "asg",
                "LifecycleHookName": "hook", "EC2InstanceId": "i-0a1b2c3d4e5f60009",
                "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"
            }
        });
        let e = one(v).unwrap();
        assert_eq!(e.kind, EventKind::AsgTermination);
        match e.detail {
            Detail::AsgTermination(l) => {
                assert_eq!(
                    (l.hook_name.as_str(), l.asg_name.as_str(), l.token.as_str()),
                    ("hook", "asg", "tok")
                )
            }
            other => panic!("{other:?}"),
        }
    }

    fn hook_notification(transition: &str) -> Value {
        json!({
            "Origin": "AutoScalingGroup", "LifecycleHookName": "forewarn-drain",
            "Destination": "EC2", "AccountId": "123456789012",
            "RequestId": "5e1f0c3a-7b2d-4e9f-a6c8-1d3b5f7e9a20",
            "LifecycleTransition": transition, "AutoScalingGroupName": "eks-demo-ng-1",
            "Service": "AWS Auto Scaling", "Time": "2026-11-20T10:01:20.187Z",
            "EC2InstanceId": "i-0a1b2c3d4e5f60009",
            "LifecycleActionToken": "3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59",
            "NotificationMetadata": "{\"cluster\":\"demo\"}"
        })
    }

    #[test]
    fn lifecycle_hook_notification_sent_straight_to_the_queue() {
        let e = one(hook_notification(ASG_TERMINATING)).unwrap();
        assert_eq!(e.kind, EventKind::AsgTermination);
        assert_eq!(
            e.id,
            "lifecycle-action:3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59"
        );
        assert_eq!(
            (e.source.as_str(), e.detail_type.as_str()),
            (SOURCE_ASG, DT_ASG_TERMINATE)
        );
        assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60009"]);
        assert_eq!(e.account.as_deref(), Some("123456789012"));
        assert_eq!(e.time, parse_time("2026-11-20T10:01:20.187Z").unwrap());
        assert_eq!(
            e.detail,
            Detail::AsgTermination(LifecycleAction {
                hook_name: "forewarn-drain".into(),
                asg_name: "eks-demo-ng-1".into(),
                token: "3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59".into(),
                transition: ASG_TERMINATING.into(),
            })
        );
        // A redelivery (in another SQS message) is the same event: same id.
        let body = hook_notification(ASG_TERMINATING).to_string();
        let batch = json!({"Records": [{"messageId": "m1", "body": body}, {"messageId": "m2", "body": body}]});
        let records = decode_value("b.json", batch, received()).unwrap();
        assert_eq!(records[0].event.as_ref().unwrap().id, e.id);
        assert_eq!(records[1].event.as_ref().unwrap().id, e.id);
    }

    #[test]
    fn launching_hook_notification_is_ignored() {
        let e = one(hook_notification("autoscaling:EC2_INSTANCE_LAUNCHING")).unwrap();
        assert_eq!(e.kind, EventKind::Unsupported);
        assert!(e.instance_ids.is_empty());
        match e.detail {
            Detail::Unsupported { why } => {
                assert!(why.contains("autoscaling:EC2_INSTANCE_LAUNCHING"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn test_notifications_are_ignored_directly_and_in_eventbridge() {
        let direct = json!({
            "AccountId": "123456789012", "RequestId": "0d6c8e4a-2f1b-4a3c-b5d7-9e1f3a5c7e02",
            "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:2a132d18-cbf4-4df4-a4ec-541cd001f118:autoScalingGroupName/eks-demo-ng-1",
            "AutoScalingGroupName": "eks-demo-ng-1", "Service": "AWS Auto Scaling",
            "Event": "autoscaling:TEST_NOTIFICATION", "Time": "2026-11-20T10:01:28.015Z"
        });
        let eventbridge = json!({
            "version": "0", "id": "d3f5a7c9", "detail-type": DT_ASG_TERMINATE,
            "source": "aws.autoscaling", "time": "2026-11-20T10:01:32Z", "region": "us-east-1",
            "detail": {"AccountId": "123456789012", "AutoScalingGroupName": "eks-demo-ng-1",
                       "Event": "autoscaling:TEST_NOTIFICATION", "Service": "AWS Auto Scaling",
                       "Time": "2026-11-20T10:01:31.877Z"}
        });
        for (v, id) in [(direct, None), (eventbridge, Some("d3f5a7c9"))] {
            let e = one(v).unwrap();
            assert_eq!(e.kind, EventKind::Unsupported);
            assert!(e.instance_ids.is_empty());
            if let Some(id) = id {
                assert_eq!(e.id, id);
            } else {
                assert_eq!(
                    e.region.as_deref(),
                    Some("us-east-1"),
                    "from the group's ARN"
                );
            }
            match e.detail {
                Detail::Unsupported { why } => assert!(why.contains("test notification"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn lifecycle_notifications_stay_strict() {
        let mut v = hook_notification(ASG_TERMINATING);
        v.as_object_mut().unwrap().remove("LifecycleActionToken");
        let err = one(v).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("LifecycleActionToken"));
        assert_eq!(
            err.to_string(),
            "t.json: field `LifecycleActionToken`: missing"
        );
        let mut v = hook_notification(ASG_TERMINATING);
        v["EC2InstanceId"] = json!("i-123e4567e89b12d3");
        let err = one(v).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("EC2InstanceId"));
        assert!(err.message.contains("not an EC2 instance id"), "{err}");
        let mut v = hook_notification(ASG_TERMINATING);
        v["Time"] = json!("{{time}}");
        assert_eq!(one(v).unwrap_err().field.as_deref(), Some("Time"));
        // The EventBridge form without an instance that is no test notification is an error.
        let v = json!({
            "id": "a1", "source": "aws.autoscaling", "detail-type": DT_ASG_TERMINATE,
            "time": "2026-11-20T10:00:00Z",
            "detail": {"LifecycleActionToken": "tok", "AutoScalingGroupName": "asg",
                       "LifecycleHookName": "hook"}
        });
        assert_eq!(
            one(v).unwrap_err().field.as_deref(),
            Some("detail.EC2InstanceId")
        );
    }

    #[test]
    fn rfc1123_as_aws_writes_it() {
        // 5 June 2016 was a Sunday: the weekday of AWS Health's own example is wrong.
        assert_eq!(
            parse_time("Sat, 05 Jun 2016 15:10:09 GMT"),
            parse_time("2016-06-05T15:10:09Z")
        );
        assert_eq!(
            parse_time("Thu, 3 Dec 2026 06:00:00 GMT"),
            parse_time("2026-12-03T06:00:00Z")
        );
        assert_eq!(
            parse_time("Sat, 3 Dec 2026 06:00:00.5 GMT"),
            parse_time("2026-12-03T06:00:00.500Z")
        );
        assert_eq!(
            parse_time("3 Dec 2026 06:00:00.123456789 +0100"),
            parse_time("2026-12-03T05:00:00.123456789Z")
        );
        for bad in [
            "Xyz, 3 Dec 2026 06:00:00 GMT",
            "Thu, 3 Dec 2026 06:00:00. GMT",
            "Thu, 3 Dec 2026 06:00:00.1234567890 GMT",
            "Thu, 3 Dec 2026 06:00:00.12a GMT",
            "Thu, 32 Dec 2026 06:00:00 GMT",
            "Sat, 21 Nov 20263 10:30:00.5 GMT",
            "{{start_time}}",
            "",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn empty_time_falls_back_to_sent_timestamp_or_receipt() {
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["time"] = json!("");
        assert_eq!(one(v.clone()).unwrap().time, received());
        let batch = json!({"Records": [
            {"messageId": "m1", "body": v.to_string(), "attributes": {"SentTimestamp": "1795168900123"}},
            {"messageId": "m2", "body": v.to_string(), "attributes": {"SentTimestamp": "soon"}},
        ]});
        let records = decode_value("b.json", batch, received()).unwrap();
        assert_eq!(
            records[0].event.as_ref().unwrap().time,
            DateTime::from_timestamp_millis(1_795_168_900_123).unwrap()
        );
        assert_eq!(records[1].event.as_ref().unwrap().time, received());
        let msg: SqsMessage = serde_json::from_value(json!({
            "messageId": "m1", "body": v.to_string(), "attributes": {"SentTimestamp": "1795168900123"}
        }))
        .unwrap();
        let lambda = decode_sqs_event("sqs", &[msg], received());
        assert_eq!(lambda[0].event, records[0].event);
        // A missing time is still an error.
        v.as_object_mut().unwrap().remove("time");
        assert_eq!(one(v).unwrap_err().field.as_deref(), Some("time"));
    }

    #[test]
    fn empty_health_times_are_absent_and_instance_ids_trimmed() {
        let v = json!({
            "id": "h1", "source": "aws.health", "detail-type": "AWS Health Event",
            "time": "2026-11-20T10:00:00Z",
            "detail": {
                "service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": " ", "endTime": "",
                "affectedEntities": [{"entityValue": " i-0a1b2c3d4e5f60002\n"}]
            }
        });
        let e = one(v).unwrap();
        assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60002"]);
        assert_eq!(e.deadline_hint(), None);
        let e = one(spot("e1", json!("  i-0a1b2c3d4e5f60001 "))).unwrap();
        assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60001"]);
        // Whitespace alone is no instance id, and a made-up one stays an error.
        assert_eq!(
            one(spot("e1", json!("  "))).unwrap_err().message,
            "must not be empty"
        );
        assert!(one(spot("e1", json!("i-instance1"))).is_err());
        // An empty id is still an error.
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["id"] = json!("");
        assert_eq!(one(v).unwrap_err().field.as_deref(), Some("id"));
    }

    #[test]
    fn instance_ids() {
        assert!(is_instance_id("i-0a1b2c3d4e5f60001"));
        assert!(is_instance_id("i-12345678"));
        assert!(!is_instance_id("i-0A1B2C3D4E5F60001"));
        assert!(!is_instance_id("i-123"));
        assert!(!is_instance_id("vol-0a1b2c3d4e5f60001"));
    }

    /// A Health scheduled change and a capacity reservation warning: the events with times in
    /// their detail.
    fn health() -> Value {
        json!({
            "id": "h1", "source": "aws.health", "detail-type": DT_HEALTH,
            "time": "2026-11-20T10:00:00Z",
            "detail": {
                "service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": "Sat, 21 Nov 2026 10:30:00 GMT", "endTime": "2026-11-21T11:30:00Z",
                "affectedEntities": [{"entityValue": "i-0a1b2c3d4e5f60002"}]
            }
        })
    }

    fn reservation() -> Value {
        json!({
            "id": "r1", "source": "aws.ec2", "detail-type": DT_RESERVATION,
            "time": "2026-11-20T10:00:00Z",
            "detail": {"instance-id": "i-0a1b2c3d4e5f60001", "instance-action": "terminate",
                       "instance-termination-time": "2026-11-20T10:02:00Z"}
        })
    }

    /// Every time field of every kind, as (event, JSON path, field the error names).
    fn time_fields() -> Vec<(Value, Vec<&'static str>, &'static str)> {
        vec![
            (
                spot("e1", json!("i-0a1b2c3d4e5f60001")),
                vec!["time"],
                "time",
            ),
            (health(), vec!["detail", "startTime"], "detail.startTime"),
            (health(), vec!["detail", "endTime"], "detail.endTime"),
            (health(), vec!["time"], "time"),
            (
                reservation(),
                vec!["detail", "instance-termination-time"],
                "detail.instance-termination-time",
            ),
            (hook_notification(ASG_TERMINATING), vec!["Time"], "Time"),
            (
                hook_notification("autoscaling:EC2_INSTANCE_LAUNCHING"),
                vec!["Time"],
                "Time",
            ),
        ]
    }

    fn set_path(v: &mut Value, path: &[&str], new: Value) {
        let mut at = v;
        for key in path {
            at = &mut at[*key];
        }
        *at = new;
    }

    #[test]
    fn times_more_than_ten_years_from_now_are_malformed_naming_the_field() {
        // Found in review: a time up to the year +262142 was taken, and date arithmetic on it
        // (a deadline, a window) panicked later.
        let far = [
            (
                "2999-01-01T00:00:00Z",
                "2999-01-01T00:00:00Z is more than 10 years from now",
            ),
            (
                "Tue, 01 Jan 2999 00:00:00 GMT",
                "2999-01-01T00:00:00Z is more than 10 years from now",
            ),
            (
                "9999-12-31T23:59:59.5Z",
                "9999-12-31T23:59:59.500Z is more than 10 years from now",
            ),
            (
                "2036-11-24T10:05:00Z",
                "2036-11-24T10:05:00Z is more than 10 years from now",
            ),
            (
                "1970-01-01T00:00:00Z",
                "1970-01-01T00:00:00Z is more than 10 years ago",
            ),
            (
                "0000-01-01T00:00:00Z",
                "0000-01-01T00:00:00Z is more than 10 years ago",
            ),
            (
                "2016-11-17T10:05:00+00:00",
                "2016-11-17T10:05:00Z is more than 10 years ago",
            ),
        ];
        for (event, path, field) in time_fields() {
            for (time, message) in far {
                let mut v = event.clone();
                set_path(&mut v, &path, json!(time));
                let err = one(v).unwrap_err();
                assert_eq!(err.field.as_deref(), Some(field), "{time}: {err}");
                assert_eq!(err.message, message, "{field}");
            }
            // Within ten years, either way, it is a time.
            for time in [
                "2036-11-19T10:05:00Z",
                "2016-11-21T10:05:00Z",
                "2026-11-20T10:05:00Z",
            ] {
                let mut v = event.clone();
                set_path(&mut v, &path, json!(time));
                assert!(one(v).is_ok(), "{field} = {time}");
            }
        }
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["time"] = json!("2999-01-01T00:00:00Z");
        assert_eq!(
            one(v).unwrap_err().to_string(),
            "t.json: field `time`: 2999-01-01T00:00:00Z is more than 10 years from now"
        );
    }

    #[test]
    fn a_far_time_fails_its_record_alone() {
        let mut far = spot("e2", json!("i-0a1b2c3d4e5f60002"));
        far["time"] = json!("+262142-01-01T00:00:00Z");
        let mut rfc2822 = spot("e3", json!("i-0a1b2c3d4e5f60003"));
        rfc2822["time"] = json!("Fri, 31 Dec 262142 23:59:59 GMT");
        let batch = json!({"Records": [
            {"messageId": "m1", "body": spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string()},
            {"messageId": "m2", "body": far.to_string()},
            {"messageId": "m3", "body": rfc2822.to_string()},
        ]});
        let records = decode_value("b.json", batch, received()).unwrap();
        assert!(records[0].event.is_ok());
        for r in &records[1..] {
            assert_eq!(r.event.as_ref().unwrap_err().field.as_deref(), Some("time"));
        }
    }

    #[test]
    fn a_sent_timestamp_far_from_now_is_not_the_time() {
        let mut v = spot("e1", json!("i-0a1b2c3d4e5f60001"));
        v["time"] = json!("");
        for sent in ["32503680000000", "-62135596800000", "8210266876799999", "0"] {
            let batch = json!({"Records": [
                {"messageId": "m1", "body": v.to_string(), "attributes": {"SentTimestamp": sent}},
            ]});
            let records = decode_value("b.json", batch, received()).unwrap();
            assert_eq!(
                records[0].event.as_ref().unwrap().time,
                received(),
                "{sent}"
            );
        }
    }

    #[test]
    fn continuation_times_far_from_now_are_malformed() {
        use crate::domain::continuation::{Continuation, ContinuationKey};
        let body = spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string();
        let key = ContinuationKey::new([1; 32]);
        let record = |c: &Continuation| {
            let batch = json!({"Records": [{"messageId": "m1", "body": c.body(&key, &body)}]});
            decode_value("b.json", batch, received()).unwrap().remove(0)
        };
        let ok = Continuation::first(received(), received(), json!({}));
        let r = record(&ok);
        assert!(r.event.is_ok() && r.continuation.is_some());
        let far = parse_time("2999-01-01T00:00:00Z").unwrap();
        let cases = [
            (Continuation::first(far, received(), json!({})), "startedAt"),
            (Continuation::first(received(), far, json!({})), "sentAt"),
            (ok.next(Some(far)), "heartbeatAt"),
        ];
        for (c, field) in cases {
            let err = record(&c).event.unwrap_err();
            assert_eq!(
                err.field,
                Some(format!("body.forewarnContinuation.{field}")),
                "{err}"
            );
            assert_eq!(
                err.message,
                "2999-01-01T00:00:00Z is more than 10 years from now"
            );
        }
        // chrono's own limits, written as a sender could write them.
        for t in ["+262142-12-31T23:59:59Z", "-262143-01-01T00:00:00Z"] {
            let body = json!({"forewarnContinuation": {
                "version": 2, "pass": 1, "startedAt": t, "sentAt": t, "plan": {}, "body": body
            }})
            .to_string();
            let batch = json!({"Records": [{"messageId": "m1", "body": body}]});
            let r = decode_value("b.json", batch, received()).unwrap().remove(0);
            assert!(r.event.is_err(), "{t}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                prop_oneof![
                    "[a-z-]{0,12}",
                    Just("aws.ec2".to_string()),
                    Just("aws.health".to_string()),
                    Just(DT_SPOT.to_string()),
                    Just(DT_HEALTH.to_string()),
                    Just("i-0a1b2c3d4e5f60001".to_string()),
                    Just("Sat, 21 Nov 2026 10:30:00 GMT".to_string()),
                ]
                .prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("id".to_string()),
                            Just("source".to_string()),
                            Just("detail-type".to_string()),
                            Just("detail".to_string()),
                            Just("time".to_string()),
                            Just("instance-id".to_string()),
                            Just("Records".to_string()),
                            Just("body".to_string()),
                            Just("affectedEntities".to_string()),
                            "[a-zA-Z]{1,8}",
                        ],
                        inner,
                        0..6
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
                let _ = decode("p.json", &bytes, received());
            }

            #[test]
            fn never_panics_on_json(v in arb_json()) {
                let _ = decode_value("p.json", v.clone(), received());
                // also as the body of an SQS record
                let _ = decode_value("p.json", json!({"Records": [{"messageId": "m", "body": v.to_string()}]}), received());
            }

            #[test]
            fn mutated_real_events_never_panic(
                field in prop_oneof![Just("id"), Just("time"), Just("detail"), Just("source"), Just("detail-type")],
                replacement in arb_json(),
            ) {
                let mut v = spot("e", json!("i-0a1b2c3d4e5f60001"));
                v[field] = replacement;
                let _ = decode_value("p.json", v, received());
            }
        }
    }
}
