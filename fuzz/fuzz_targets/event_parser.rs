//! Fuzzes forewarn's event parser through every public entry point and envelope.
//!
//! One input is fed, as it is, to:
//! - `decode` (bytes: a bare EventBridge event or Auto Scaling notification, an SQS batch or a
//!   JSON array),
//! - `decode_value` on the same bytes parsed by serde_json,
//! - `decode_sqs_body` and `decode_sqs_event` with the input (when UTF-8) as an SQS body,
//! - `decode_value` of an SQS batch (JSON) carrying it as a body,
//! - `parse_event` of real events (an Auto Scaling lifecycle hook's own notification included)
//!   with one field replaced by the input string,
//! - `parse_time`, `is_instance_id` and `EventKind::from_name`,
//!
//! and checks what must hold besides "no panic": every record's error names the record's own
//! origin, envelopes number their records, a decoded event is well formed (its kind matches its
//! source, detail-type and detail; actionable kinds name valid, distinct instance ids), the same
//! event decodes alike bare and as an SQS body, decoding is deterministic, and a decoded event
//! survives a serde JSON round trip unchanged. Every entry point gets the same fixed time of
//! receipt (the fallback of an empty `time`), so decoding stays deterministic; an SQS message's
//! `SentTimestamp` is that fallback when it is a time.
#![no_main]

use aws_lambda_events::event::sqs::SqsMessage;
use forewarn::domain::event::{self, DecodeError, Detail, Event, EventKind, Origin, Record, decode, decode_sqs_body, decode_sqs_event, decode_value, is_instance_id, parse_event, parse_time};
use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::sync::OnceLock;

const SOURCE: &str = "fuzz.json";

/// When every input is received (epoch milliseconds): 2026-11-20T10:05:00Z.
const RECEIVED_MS: i64 = 1_795_168_500_000;

fn received() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(RECEIVED_MS).expect("a time")
}

/// The real events whose string fields the input replaces, with the paths of those fields.
static TEMPLATES: OnceLock<Vec<(Value, Vec<Vec<PathStep>>)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    check_bytes(data);
    if let Ok(s) = std::str::from_utf8(data) {
        check_str(s);
    }
});

fn check_bytes(data: &[u8]) {
    let decoded = decode(SOURCE, data, received());
    // Deterministic (synthetic ids included).
    assert_eq!(results(&decoded), results(&decode(SOURCE, data, received())));
    match serde_json::from_slice::<Value>(data) {
        Err(_) => {
            let err = decoded
                .as_ref()
                .expect_err("input that is not JSON decodes to an input error");
            assert_eq!(err.origin, Origin::bare(SOURCE));
            assert!(err.message.starts_with("not valid JSON"), "{err}");
        }
        Ok(value) => {
            let via_value = decode_value(SOURCE, value.clone(), received());
            assert_eq!(results(&decoded), results(&via_value));
            check_envelope(&value, &decoded);
        }
    }
    if let Ok(records) = &decoded {
        for r in records {
            check_record(r);
        }
    } else if let Err(e) = &decoded {
        let _ = e.to_string();
    }
}

/// The envelope decides how many records there are and how they are numbered.
fn check_envelope(value: &Value, decoded: &Result<Vec<Record>, DecodeError>) {
    match value {
        Value::Array(items) => {
            let records = decoded.as_ref().expect("an array is an envelope");
            assert_eq!(records.len(), items.len());
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r.origin.index, Some(i));
                assert_eq!(r.origin.message_id, None);
                // An array item decodes as the same event would bare.
                assert_eq!(
                    without_origin(&r.event),
                    without_origin(&parse_event(&Origin::bare(SOURCE), &items[i], received()))
                );
            }
        }
        Value::Object(map) if map.contains_key("Records") => match map.get("Records") {
            Some(Value::Array(raw)) => {
                let records = decoded.as_ref().expect("an SQS batch is an envelope");
                assert_eq!(records.len(), raw.len());
                for (i, r) in records.iter().enumerate() {
                    assert_eq!(r.origin.index, Some(i));
                    assert_eq!(
                        r.origin.message_id.as_deref(),
                        raw[i].get("messageId").and_then(Value::as_str)
                    );
                }
            }
            _ => {
                let err = decoded
                    .as_ref()
                    .expect_err("`Records` that is not an array");
                assert_eq!(err.field.as_deref(), Some("Records"));
            }
        },
        Value::Object(_) => {
            let records = decoded.as_ref().expect("an object is a bare event");
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].origin, Origin::bare(SOURCE));
        }
        _ => {
            let err = decoded.as_ref().expect_err("a scalar is no envelope");
            assert_eq!(err.origin, Origin::bare(SOURCE));
        }
    }
}

fn check_record(r: &Record) {
    assert_eq!(r.origin.source, SOURCE);
    let _ = r.origin.to_string();
    match &r.event {
        Ok(e) => check_event(e),
        Err(err) => {
            assert_eq!(err.origin, r.origin, "an error names its own record");
            assert!(!err.message.is_empty());
            let shown = err.to_string();
            assert!(shown.starts_with(SOURCE), "{shown}");
        }
    }
}

/// What every decoded event satisfies.
fn check_event(e: &Event) {
    assert!(!e.id.trim().is_empty(), "an event has an id");
    match e.kind.source_and_detail_type() {
        Some((source, detail_type)) => {
            assert_eq!(
                (e.source.as_str(), e.detail_type.as_str()),
                (source, detail_type)
            );
            assert!(!e.instance_ids.is_empty(), "{:?} names no instance", e.kind);
        }
        None => assert!(e.instance_ids.is_empty()),
    }
    for (i, id) in e.instance_ids.iter().enumerate() {
        assert!(is_instance_id(id), "{id}");
        assert!(!e.instance_ids[..i].contains(id), "duplicate {id}");
    }
    let detail_matches = matches!(
        (&e.detail, e.kind),
        (Detail::Spot { .. }, EventKind::SpotInterruption)
            | (Detail::Rebalance, EventKind::RebalanceRecommendation)
            | (Detail::StateChange { .. }, EventKind::StateChange)
            | (Detail::Scheduled { .. }, EventKind::ScheduledChange)
            | (Detail::AsgTermination(_), EventKind::AsgTermination)
            | (
                Detail::CapacityReservation { .. },
                EventKind::CapacityReservationInterruption
            )
            | (Detail::Unsupported { .. }, EventKind::Unsupported)
    );
    assert!(detail_matches, "{:?} with {:?}", e.kind, e.detail);
    if !matches!(e.kind, EventKind::ScheduledChange | EventKind::Unsupported) {
        assert_eq!(e.instance_ids.len(), 1, "one instance per {:?}", e.kind);
    }
    let _ = e.deadline_hint();
    assert_eq!(EventKind::from_name(e.kind.as_str()), Some(e.kind));
    // A decoded event is stored and reported as JSON: it must come back the same.
    let json = serde_json::to_string(e).expect("an event serializes");
    let back: Event = serde_json::from_str(&json).expect("a serialized event deserializes");
    assert_eq!(&back, e, "serde round trip of {json}");
}

fn check_str(s: &str) {
    // Helpers on arbitrary strings.
    if let Some(t) = parse_time(s) {
        assert_eq!(parse_time(&t.to_rfc3339()), Some(t));
    }
    if is_instance_id(s) {
        assert!(s.starts_with("i-") && s.is_ascii());
    }
    if let Some(k) = EventKind::from_name(s) {
        assert_eq!(k.as_str(), s);
    }

    // The input as the body of one SQS message, through every SQS path.
    let origin = sqs_origin();
    let body = decode_sqs_body(&origin, Some(s), received());
    match serde_json::from_str::<Value>(s) {
        Err(_) => {
            let err = body.as_ref().expect_err("a body that is not JSON");
            assert_eq!(err.field.as_deref(), Some("body"));
        }
        Ok(v) => {
            // A lifecycle hook's own notification (no EventBridge envelope) that decodes to an
            // asg-termination takes its id from its token: a redelivery is a duplicate.
            if let Ok(e) = &body
                && let Detail::AsgTermination(l) = &e.detail
                && v.get("source").is_none()
            {
                assert_eq!(e.id, format!("lifecycle-action:{}", l.token));
            }
            // The same JSON decodes alike bare and in a body.
            assert_eq!(
                without_origin(&body),
                without_origin(&parse_event(&Origin::bare(SOURCE), &v, received()))
            );
        }
    }
    if let Ok(e) = &body {
        check_event(e);
    }
    let mut msg = SqsMessage::default();
    msg.message_id = Some("m-0".into());
    msg.body = Some(s.to_string());
    let mut missing = SqsMessage::default();
    missing.message_id = Some("m-1".into());
    let lambda = decode_sqs_event(SOURCE, &[msg, missing], received());
    assert_eq!(lambda.len(), 2);
    assert_eq!(lambda[0].origin, origin);
    assert_eq!(lambda[0].event, body);
    assert_eq!(
        lambda[1].event.as_ref().map_err(|e| e.field.as_deref()),
        Err(Some("body"))
    );
    for r in &lambda {
        check_record(r);
    }
    let batch = json!({"Records": [
        {"messageId": "m-0", "body": s},
        {"messageId": "m-1", "body": Value::Null},
        {"messageId": s},
    ]});
    let from_json = decode_value(SOURCE, batch, received()).expect("a batch is an envelope");
    assert_eq!(from_json.len(), 3);
    assert_eq!(from_json[0].event, body);
    assert_eq!(from_json[1].event, lambda[1].event);
    assert_eq!(from_json[2].origin.message_id.as_deref(), Some(s));
    assert!(from_json[2].event.is_err());
    for r in &from_json {
        check_record(r);
    }

    // The input as the `SentTimestamp` of a message whose event has an empty `time`: the event
    // is dated by it when it is epoch milliseconds of a year up to 9999, else by the receipt.
    let empty_time = json!({"id": "e-1", "source": event::SOURCE_EC2, "detail-type": event::DT_SPOT,
        "time": "", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}})
    .to_string();
    let mut msg = SqsMessage::default();
    msg.message_id = Some("m-0".into());
    msg.body = Some(empty_time);
    msg.attributes.insert("SentTimestamp".into(), s.to_string());
    let dated = decode_sqs_event(SOURCE, &[msg], received());
    let time = dated[0].event.as_ref().expect("a spot warning with an empty time decodes").time;
    let sent = s
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)));
    assert_eq!(time, sent.unwrap_or_else(received));

    // The input in each string field of real events: the parser's field paths.
    // One template per input (by its length) keeps an execution cheap; the fuzzer reaches the
    // others by growing or shrinking the input.
    let templates = TEMPLATES.get_or_init(|| {
        templates()
            .into_iter()
            .map(|t| {
                let fields = string_fields(&t);
                (t, fields)
            })
            .collect()
    });
    let (template, fields) = &templates[s.len() % templates.len()];
    for path in fields {
        let mut v = template.clone();
        set(&mut v, path, Value::String(s.to_string()));
        let r = parse_event(&Origin::bare(SOURCE), &v, received());
        match &r {
            Ok(e) => check_event(e),
            Err(err) => {
                assert_eq!(err.origin, Origin::bare(SOURCE));
                let _ = err.to_string();
            }
        }
    }
}

fn sqs_origin() -> Origin {
    // The origin decode_sqs_event gives its first message.
    let mut m = SqsMessage::default();
    m.message_id = Some("m-0".into());
    decode_sqs_event(SOURCE, &[m], received()).remove(0).origin
}

fn results(
    r: &Result<Vec<Record>, DecodeError>,
) -> Result<Vec<Result<Event, DecodeError>>, DecodeError> {
    r.as_ref()
        .map(|records| records.iter().map(|r| r.event.clone()).collect())
        .map_err(Clone::clone)
}

fn without_origin(r: &Result<Event, DecodeError>) -> Result<Event, (Option<String>, String)> {
    r.clone().map_err(|e| (e.field, e.message))
}

/// One real event of each kind the parser handles.
fn templates() -> Vec<Value> {
    let head = |dt: &str, source: &str, detail: Value| {
        json!({
            "version": "0", "id": "e-1", "detail-type": dt, "source": source,
            "account": "123456789012", "time": "2026-11-20T10:00:00Z", "region": "us-east-1",
            "resources": [], "detail": detail
        })
    };
    vec![
        head(
            event::DT_SPOT,
            event::SOURCE_EC2,
            json!({"instance-id": "i-0a1b2c3d4e5f60001", "instance-action": "stop"}),
        ),
        head(
            event::DT_STATE_CHANGE,
            event::SOURCE_EC2,
            json!({"instance-id": "i-0a1b2c3d4e5f60001", "state": "stopping"}),
        ),
        head(
            event::DT_RESERVATION,
            event::SOURCE_EC2,
            json!({"instance-id": "i-0a1b2c3d4e5f60001", "instance-action": "terminate",
                   "instance-termination-time": "2026-11-20T10:02:00Z", "azId": "use1-az1"}),
        ),
        head(
            event::DT_ASG_TERMINATE,
            event::SOURCE_ASG,
            json!({"EC2InstanceId": "i-0a1b2c3d4e5f60001", "LifecycleHookName": "h",
                   "AutoScalingGroupName": "g", "LifecycleActionToken": "t",
                   "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"}),
        ),
        head(
            event::DT_HEALTH,
            event::SOURCE_HEALTH,
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "eventArn": "arn",
                   "startTime": "Sat, 21 Nov 2026 10:30:00 GMT",
                   "endTime": "2026-11-21T11:30:00Z",
                   "affectedEntities": [{"entityValue": "i-0a1b2c3d4e5f60002"},
                                        {"entityValue": "i-0a1b2c3d4e5f60003"}]}),
        ),
        // A lifecycle hook's own notification, sent straight to the queue.
        json!({"Origin": "AutoScalingGroup", "LifecycleHookName": "h", "Destination": "EC2",
               "AccountId": "123456789012", "RequestId": "r-1",
               "LifecycleTransition": event::ASG_TERMINATING, "AutoScalingGroupName": "g",
               "Service": event::ASG_SERVICE, "Time": "2026-11-20T10:00:00.123Z",
               "EC2InstanceId": "i-0a1b2c3d4e5f60001", "LifecycleActionToken": "t",
               "NotificationMetadata": "{}",
               "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:u:autoScalingGroupName/g"}),
        // Its test notification, and the EventBridge form of one.
        json!({"AccountId": "123456789012", "RequestId": "r-2", "AutoScalingGroupName": "g",
               "Service": event::ASG_SERVICE, "Event": event::ASG_TEST_NOTIFICATION,
               "Time": "2026-11-20T10:00:00Z"}),
        head(
            event::DT_ASG_TERMINATE,
            event::SOURCE_ASG,
            json!({"AutoScalingGroupName": "g", "Event": event::ASG_TEST_NOTIFICATION,
                   "Service": event::ASG_SERVICE, "Time": "2026-11-20T10:00:00Z"}),
        ),
    ]
}

/// The JSON paths (object keys, array indices) of every string in `v`.
fn string_fields(v: &Value) -> Vec<Vec<PathStep>> {
    fn walk(v: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
        match v {
            Value::String(_) => out.push(at.clone()),
            Value::Object(map) => {
                for (k, child) in map {
                    at.push(PathStep::Key(k.clone()));
                    walk(child, at, out);
                    at.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    at.push(PathStep::Index(i));
                    walk(child, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn set(v: &mut Value, path: &[PathStep], new: Value) {
    let mut at = v;
    for step in path {
        at = match step {
            PathStep::Key(k) => &mut at[k.as_str()],
            PathStep::Index(i) => &mut at[*i],
        };
    }
    *at = new;
}
