//! SQS messages: the fields forewarn reads of one ([`SqsMessage`]), and the record each becomes —
//! the event of its body (an EventBridge event, or a lifecycle hook's own notification), or the
//! original body and progress of a drain's continuation; a message that triage sent back
//! ([`TRIAGED_KEY`]) is read as the original it carries.
//!
//! A message comes as Lambda hands it over (the `Records` of its SQS event, read by
//! `app::handler::Handler::invoke`) or as JSON in a file (`{"Records": [...]}`, read by
//! [`super::decode`]): the same JSON, read by the same derive.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::continuation;
use super::eventbridge::parse_event;
use super::record::Record;
use crate::domain::event::{DecodeError, Origin};
use crate::domain::time::within_sane_range;

/// The fields of one SQS message that forewarn reads, named as Lambda's SQS event writes them
/// (`messageId`, `body`, `attributes`, `eventSourceARN`, `receiptHandle`); other fields are left
/// alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SqsMessage {
    pub message_id: Option<String>,
    pub receipt_handle: Option<String>,
    pub body: Option<String>,
    /// The message's system attributes (`SentTimestamp`, `ApproximateReceiveCount`, ...); null
    /// is none.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// The queue's ARN.
    #[serde(default, rename = "eventSourceARN")]
    pub event_source_arn: Option<String>,
}

/// The key of a message that triage sent back to the queue as its cluster was busy (see
/// `crate::app::fleet::triage`): `{"forewarnTriaged": {"cluster": …, "body": …}}`, the message's
/// original body inside, its cluster's name for whoever reads the queue. Read, it is the
/// original's record, marked [`Record::triaged`]. It is not signed: it changes only when its
/// event is worked on (at once, not sent back again for its cluster being busy), never what is
/// done with it, which is verified live as for any event; whoever could forge it could send
/// the original as well.
pub const TRIAGED_KEY: &str = "forewarnTriaged";

#[derive(serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Triaged {
    cluster: String,
    body: String,
}

/// The body of a message sent back by triage: `body` (the original's) of `cluster`.
pub fn triaged_body(body: &str, cluster: &str) -> String {
    let triaged = Triaged {
        cluster: cluster.into(),
        body: body.into(),
    };
    serde_json::json!({ TRIAGED_KEY: triaged }).to_string()
}

fn null_is_empty<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    Ok(Option::deserialize(d)?.unwrap_or_default())
}

impl SqsMessage {
    /// When SQS received the message (its `SentTimestamp` attribute, epoch milliseconds), or else
    /// `received` (also when the attribute is not a time, or not one within 10 years of
    /// `received`).
    pub fn sent_at(&self, received: DateTime<Utc>) -> DateTime<Utc> {
        self.attributes
            .get("SentTimestamp")
            .and_then(|ms| ms.trim().parse::<i64>().ok())
            .and_then(DateTime::from_timestamp_millis)
            .and_then(|t| within_sane_range(t, received).ok())
            .unwrap_or(received)
    }
}

/// Decodes the messages of an SQS batch, keeping each message's id. An event whose `time` is
/// empty is dated by its message's `SentTimestamp`, or else `received`.
pub fn decode_sqs_messages(
    source: &str,
    messages: &[SqsMessage],
    received: DateTime<Utc>,
) -> Vec<Record> {
    let record = |(i, msg): (usize, &SqsMessage)| {
        let origin = Origin::sqs(source, i, msg.message_id.clone());
        decode_message(origin, msg, received)
    };
    messages.iter().enumerate().map(record).collect()
}

/// Decodes the message at `index` of an SQS batch read as JSON from `source`.
pub(super) fn decode_json_message(
    source: &str,
    index: usize,
    raw: &Value,
    received: DateTime<Utc>,
) -> Record {
    let message_id = raw
        .get("messageId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let origin = Origin::sqs(source, index, message_id);
    match SqsMessage::deserialize(raw) {
        Ok(msg) => decode_message(origin, &msg, received),
        Err(e) => {
            let error = DecodeError::new(&origin, None, format!("not an SQS message: {e}"));
            Record::new(origin, Err(error))
        }
    }
}

/// Decodes one SQS message of a batch: its body (the EventBridge event JSON as a string, or an
/// Auto Scaling notification), or the original body a continuation message carries, with the
/// continuation's progress. An event whose `time` is empty is dated when the message was sent;
/// times are checked against when it was received (`received`). A message triage sent back is
/// the original it carries (once: one carried inside is not unwrapped again).
fn decode_message(origin: Origin, msg: &SqsMessage, received: DateTime<Utc>) -> Record {
    let mut body = msg.body.clone();
    let mut json = body_json(&origin, body.as_deref());
    let wrapped =
        (json.as_mut().ok().and_then(Value::as_object_mut)).and_then(|m| m.remove(TRIAGED_KEY));
    let triaged = wrapped.is_some();
    if let Some(v) = wrapped {
        let field = format!("body.{TRIAGED_KEY}");
        let original = serde_json::from_value::<Triaged>(v)
            .map_err(|e| DecodeError::new(&origin, Some(&field), e.to_string()));
        body = original.as_ref().ok().map(|t| t.body.clone());
        json = original.and_then(|t| body_json(&origin, Some(&t.body)));
    }
    let (event, continuation) = match json {
        Err(error) => (Err(error), None),
        Ok(value) => match continuation::unwrap(&origin, &value, received) {
            Ok(None) => {
                let event = parse_event(&origin, &value, msg.sent_at(received), received);
                (event, None)
            }
            Err(error) => (Err(error), None),
            // Its times were checked by `continuation::unwrap`.
            Ok(Some(c)) => {
                let event = body_json(&origin, Some(&c.body))
                    .and_then(|v| parse_event(&origin, &v, c.sent_at, received));
                (event, Some(c))
            }
        },
    };
    Record {
        continuation,
        body,
        queue_arn: msg.event_source_arn.clone(),
        triaged,
        ..Record::new(origin, event)
    }
}

/// The JSON of a message's body; an error names the field `body`.
fn body_json(origin: &Origin, body: Option<&str>) -> Result<Value, DecodeError> {
    let err = |message: String| DecodeError::new(origin, Some("body"), message);
    serde_json::from_str(body.ok_or_else(|| err("missing".into()))?)
        .map_err(|e| err(format!("not valid JSON: {e}")))
}
