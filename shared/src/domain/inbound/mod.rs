//! One way in: every message forewarn receives becomes [`Record`]s here, from plain fields (a
//! body's text, an SQS message's id, attributes and queue), whatever carried it.
//!
//! - [`decode`] and [`decode_value`]: an input as a whole, in any of three envelopes — a bare
//!   EventBridge event (or a lifecycle hook's own notification), a Lambda SQS batch
//!   (`{"Records": [...]}`) or a JSON array of events;
//! - [`sqs`]: one SQS message ([`SqsMessage`], the fields forewarn reads, as Lambda's SQS event
//!   writes them) and its body;
//! - [`eventbridge`]: the EventBridge envelope, whose `detail` the event model's file of each
//!   source reads ([`crate::domain::event`]);
//! - [`continuation`]: a drain's continuation message, its signature and its typed plan.
//!
//! Decoding is pure and deterministic: the time of receipt is passed in.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::event::{DecodeError, Origin};

pub mod continuation;
pub mod eventbridge;
pub mod record;
pub mod sqs;

pub use eventbridge::parse_event;
pub use record::Record;
pub use sqs::{SqsMessage, decode_sqs_messages};

use sqs::decode_json_message;

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
    let value: Value = serde_json::from_slice(input).map_err(|e| {
        DecodeError::new(&Origin::bare(source), None, format!("not valid JSON: {e}"))
    })?;
    decode_value(source, value, received)
}

/// Decodes an already-parsed input; see [`decode`].
pub fn decode_value(
    source: &str,
    value: Value,
    received: DateTime<Utc>,
) -> Result<Vec<Record>, DecodeError> {
    let err = |field, why: String| Err(DecodeError::new(&Origin::bare(source), field, why));
    // An event of its own, from `origin`.
    let bare = |origin: Origin, event: &Value| {
        let event = parse_event(&origin, event, received, received);
        Record::new(origin, event)
    };
    let found = match &value {
        Value::Array(items) => {
            let record = |(i, item)| bare(Origin::array(source, i), item);
            return Ok(items.iter().enumerate().map(record).collect());
        }
        Value::Object(map) => match map.get("Records") {
            Some(Value::Array(records)) => {
                let record = |(i, raw)| decode_json_message(source, i, raw, received);
                return Ok(records.iter().enumerate().map(record).collect());
            }
            Some(_) => return err(Some("Records"), "expected an array of SQS messages".into()),
            None => return Ok(vec![bare(Origin::bare(source), &value)]),
        },
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
    };
    err(
        None,
        format!("expected an EventBridge event, an SQS event or an array of events, found {found}"),
    )
}

#[cfg(test)]
mod tests;
