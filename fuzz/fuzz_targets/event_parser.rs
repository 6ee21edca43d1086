//! Fuzzes forewarn's event parser through every public entry point and envelope.
//!
//! One input is fed, as it is, to:
//! - `decode` (bytes: a bare EventBridge event or Auto Scaling notification, an SQS batch or a
//!   JSON array),
//! - `decode_value` on the same bytes parsed by serde_json,
//! - `decode_sqs_messages` with the input (when UTF-8) as an SQS body,
//! - `decode_value` of an SQS batch (JSON) carrying it as a body,
//! - `parse_event` of real events (an Auto Scaling lifecycle hook's own notification included)
//!   with one field replaced by the input string,
//! - `parse_time`, `is_instance_id` and `EventKind`'s `FromStr`,
//! - SQS messages whose bodies are drain continuations (`{"forewarnContinuation": {...}}`): the
//!   input as the whole continuation object, merged into a valid one (so fields the format may
//!   gain, such as a `mac`, are reached too), as each of its fields, and as the original body it
//!   carries,
//! - extreme times: the input, and the number it reads as (seconds or milliseconds anywhere in
//!   chrono's range, or beyond), as every time of real events and continuations,
//!
//! and checks what must hold besides "no panic": every record's error names the record's own
//! origin, envelopes number their records, a decoded event is well formed (its kind matches its
//! detail; actionable kinds name valid, distinct instance ids), the same event decodes alike
//! bare and as an SQS body, decoding is deterministic, every time it holds (and a
//! continuation's) is within 10 years of the time of receipt, and the decision's date arithmetic
//! on it (drain deadlines, pool windows, with the longest durations the configuration takes) does
//! not overflow. Every entry point gets the same fixed time of receipt (the fallback of an empty
//! `time`, and the *now* times are checked against), so decoding stays deterministic; an SQS
//! message's `SentTimestamp` is that fallback when it is a time within 10 years of it.
#![no_main]

use chrono::{DateTime, Utc};
use forewarn::domain::config::Config;
use forewarn::domain::event::autoscaling::{ASG_SERVICE, ASG_TERMINATING, ASG_TEST_NOTIFICATION};
use forewarn::domain::event::ec2::PART_MAX;
use forewarn::domain::event::{
    self, DecodeError, Detail, Event, EventKind, Origin, is_instance_id, parse_time,
};
use forewarn::domain::inbound::continuation::{CONTINUATION_KEY, Continuation};
use forewarn::domain::inbound::{
    Record, SqsMessage, decode, decode_sqs_messages, decode_value, parse_event,
};
use forewarn::domain::plan::{Facts, decide, drain_deadline, goes_at};
use forewarn::domain::time::{SANE_SPAN, within_sane_range};
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
    assert_eq!(
        results(&decoded),
        results(&decode(SOURCE, data, received()))
    );
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
                assert_eq!(r.origin, Origin::array(SOURCE, i));
                // An array item decodes as the same event would bare.
                assert_eq!(
                    without_origin(&r.event),
                    without_origin(&parse_event(
                        &Origin::bare(SOURCE),
                        &items[i],
                        received(),
                        received()
                    ))
                );
            }
        }
        Value::Object(map) if map.contains_key("Records") => match map.get("Records") {
            Some(Value::Array(raw)) => {
                let records = decoded.as_ref().expect("an SQS batch is an envelope");
                assert_eq!(records.len(), raw.len());
                for (i, r) in records.iter().enumerate() {
                    let id = raw[i].get("messageId").and_then(Value::as_str);
                    let origin = Origin::sqs(SOURCE, i, id.map(str::to_string));
                    assert_eq!(r.origin, origin);
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
    assert!(r.origin.to_string().starts_with(SOURCE));
    if let (Some(c), Ok(_)) = (&r.continuation, &r.event) {
        // A later pass adds intervals to these: each is within the sane range.
        for t in [Some(c.started_at), Some(c.sent_at), c.heartbeat_at]
            .into_iter()
            .flatten()
        {
            assert!(
                within_sane_range(t, received()).is_ok(),
                "continuation time {t}"
            );
        }
        let next = c.next(Some(received()));
        assert_eq!(next.started_at, c.started_at);
    }
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
    let part = matches!(e.detail, Detail::CapacityBlock { part: true, .. });
    match e.kind {
        // A Capacity Block's event names its reservation (its instances are looked up), under
        // either spelling; a part of a warning names 1 to PART_MAX instances and has an id of
        // its own (`<id>#<first instance>`).
        k if k.is_capacity_block() => match e.instance_ids.first() {
            Some(first) => {
                assert!(part && e.instance_ids.len() <= PART_MAX, "{e:?}");
                assert!(e.id.ends_with(&format!("#{first}")), "{}", e.id);
            }
            None => assert!(!part),
        },
        // Never an event's kind (the sweeper's), or no kind: no instance.
        EventKind::Impaired | EventKind::Unsupported => assert!(e.instance_ids.is_empty()),
        _ => {
            assert!(!e.instance_ids.is_empty(), "{:?} names no instance", e.kind);
        }
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
            | (Detail::AsgLaunch(_), EventKind::AsgLaunch)
            | (
                Detail::CapacityReservation { .. },
                EventKind::CapacityReservationInterruption
            )
            | (
                Detail::CapacityBlock { .. },
                EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered
            )
            | (Detail::Unsupported { .. }, EventKind::Unsupported)
    );
    assert!(detail_matches, "{:?} with {:?}", e.kind, e.detail);
    if !matches!(e.kind, EventKind::ScheduledChange | EventKind::Unsupported)
        && !e.kind.is_capacity_block()
    {
        assert_eq!(e.instance_ids.len(), 1, "one instance per {:?}", e.kind);
    }
    let _ = goes_at(e, &Config::default());
    check_times(e);
    assert_eq!(e.kind.as_str().parse(), Ok(e.kind));
}

/// Every time of a decoded event is within 10 years of its receipt (an unsupported event without
/// one is dated at the epoch), and the decision's date arithmetic on them cannot overflow.
fn check_times(e: &Event) {
    let mut times = vec![e.time];
    match &e.detail {
        Detail::Scheduled {
            start_time,
            end_time,
            ..
        } => times.extend(start_time.iter().chain(end_time)),
        Detail::CapacityReservation {
            termination_time, ..
        } => times.extend(termination_time.iter()),
        _ => {}
    }
    for t in times {
        if !(e.kind == EventKind::Unsupported && t == DateTime::<Utc>::UNIX_EPOCH) {
            assert!(within_sane_range(t, received()).is_ok(), "{t} in {e:?}");
        }
    }
    for config in configs() {
        let _ = drain_deadline(e, config);
        let _ = e.time + config.pool_ttl;
    }
}

/// The default configuration, and one with every duration as long as it may be (10 years) and
/// the margin too.
fn configs() -> &'static [Config] {
    static CONFIGS: OnceLock<Vec<Config>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let longest = Config {
            pool_ttl: SANE_SPAN,
            interruption_notice: SANE_SPAN,
            deadline_margin: SANE_SPAN,
            drain_timeout: SANE_SPAN,
            ..Config::default()
        };
        vec![Config::default(), longest]
    })
}

/// Times of every size from the number `s` reads as, if any: seconds and milliseconds since the
/// epoch (anywhere in chrono's range), in RFC 3339 and RFC 1123, and years of any size.
fn extreme_times(s: &str) -> Vec<String> {
    let Ok(n) = s.trim().parse::<i64>() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in [
        DateTime::from_timestamp(n, 0),
        DateTime::from_timestamp_millis(n),
    ]
    .into_iter()
    .flatten()
    {
        out.push(t.to_rfc3339());
        out.push(t.format("%a, %d %b %Y %H:%M:%S GMT").to_string());
    }
    out.push(format!("{n}-01-01T00:00:00Z"));
    out.push(format!("{:+07}-12-31T23:59:59.999999999Z", n % 1_000_000));
    out.push(format!("Fri, 31 Dec {n} 23:59:59 GMT"));
    out
}

/// A valid continuation message's state (the original body in it), as JSON: its plan is the
/// spot warning `original`'s, decided with nothing known of its instance.
fn continuation_state(original: &str) -> Value {
    let event = decode(SOURCE, original.as_bytes(), received())
        .ok()
        .and_then(|mut records| records.pop())
        .and_then(|r| r.event.ok())
        .expect("the original event decodes");
    let empty = Default::default();
    let facts = Facts::new(&empty, &[]);
    let plan = decide(&event, facts, &Config::default());
    let first = Continuation::first(received(), received(), plan, original);
    let mut state = serde_json::to_value(first).expect("a continuation serializes");
    state["heartbeatAt"] = json!(received().to_rfc3339());
    state
}

/// The input in drain continuations, each the body of an SQS message, decoded through
/// `decode_value` (a JSON batch) and `decode_sqs_messages` (the messages as Lambda hands them
/// over, converted).
fn check_continuations(s: &str, parsed: Option<&Value>) {
    let original = json!({"id": "e-1", "source": event::SOURCE_EC2, "detail-type": event::DT_SPOT,
        "time": "2026-11-20T10:00:00Z", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}})
    .to_string();
    let valid = || continuation_state(&original);
    let mut bodies: Vec<Value> = Vec::new();
    // The input as the original body a continuation carries.
    let mut carried = valid();
    carried["body"] = json!(s);
    bodies.push(json!({ CONTINUATION_KEY: carried }));
    // The input as each field.
    let fields: Vec<String> = valid()
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let field = &fields[s.len() % fields.len()];
    let mut one = valid();
    one[field.as_str()] = json!(s);
    bodies.push(json!({ CONTINUATION_KEY: one }));
    if let Some(v) = parsed {
        // The input as the whole continuation object, and merged into a valid one (a field the
        // format may gain, e.g. `mac`, and any value of the known ones).
        bodies.push(json!({ CONTINUATION_KEY: v }));
        let mut merged = valid();
        if let (Some(m), Value::Object(extra)) = (merged.as_object_mut(), v) {
            for (k, x) in extra {
                m.insert(k.clone(), x.clone());
            }
        }
        bodies.push(json!({ CONTINUATION_KEY: merged }));
        bodies.push(json!({ CONTINUATION_KEY: {"mac": v, "body": original} }));
    }
    // Extreme times in each time field.
    for t in extreme_times(s) {
        for key in ["startedAt", "sentAt", "heartbeatAt"] {
            let mut c = valid();
            c[key] = json!(t);
            bodies.push(json!({ CONTINUATION_KEY: c }));
        }
    }
    let batch: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"messageId": format!("c-{i}"), "body": b.to_string()}))
        .collect();
    let records = decode_value(SOURCE, json!({ "Records": batch }), received())
        .expect("a batch is an envelope");
    assert_eq!(records.len(), bodies.len());
    let messages: Vec<SqsMessage> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| message(&format!("c-{i}"), Some(b.to_string())))
        .collect();
    let lambda = decode_sqs_messages(SOURCE, &messages, received());
    for (from_json, from_lambda) in records.iter().zip(&lambda) {
        check_record(from_json);
        check_record(from_lambda);
        assert_eq!(from_json.event, from_lambda.event);
        assert_eq!(from_json.continuation, from_lambda.continuation);
        if from_json.event.is_ok() && from_json.continuation.is_some() {
            assert!(
                from_json.body.is_some(),
                "a continuation carries its original body"
            );
        }
    }
}

fn check_str(s: &str) {
    // Helpers on arbitrary strings.
    if let Some(t) = parse_time(s) {
        assert_eq!(parse_time(&t.to_rfc3339()), Some(t));
    }
    if is_instance_id(s) {
        assert!(s.starts_with("i-") && s.is_ascii());
    }
    if let Ok(k) = s.parse::<EventKind>() {
        assert_eq!(k.as_str(), s);
    }

    let parsed = serde_json::from_str::<Value>(s).ok();
    check_continuations(s, parsed.as_ref());
    // A continuation's body is taken apart (the original body it carries is decoded); any other
    // body decodes as the same JSON would bare.
    let continuation = parsed
        .as_ref()
        .and_then(|v| {
            let origin = Origin::bare(SOURCE);
            forewarn::domain::inbound::continuation::unwrap(&origin, v, received()).transpose()
        })
        .is_some();

    // The input as the body of one SQS message, through every SQS path.
    let origin = sqs_origin();
    let body = decode_sqs_messages(SOURCE, &[message("m-0", Some(s.into()))], received())
        .remove(0)
        .event;
    match serde_json::from_str::<Value>(s) {
        Err(_) => {
            let err = body.as_ref().expect_err("a body that is not JSON");
            assert_eq!(err.field.as_deref(), Some("body"));
        }
        Ok(_) if continuation => {}
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
                without_origin(&parse_event(
                    &Origin::bare(SOURCE),
                    &v,
                    received(),
                    received()
                ))
            );
        }
    }
    if let Ok(e) = &body {
        check_event(e);
    }
    check_batches(s, &body, &origin, continuation);
    check_sent_timestamp(s);
    check_template_fields(s);
}

/// An SQS message with `id` and `body`.
fn message(id: &str, body: Option<String>) -> SqsMessage {
    SqsMessage {
        message_id: Some(id.into()),
        body,
        ..SqsMessage::default()
    }
}

/// The input as the body of a message beside one without a body, through the Lambda runtime's
/// messages and a JSON batch alike; and as a message id.
fn check_batches(s: &str, body: &Result<Event, DecodeError>, origin: &Origin, continuation: bool) {
    let msg = message("m-0", Some(s.to_string()));
    let missing = message("m-1", None);
    let lambda = decode_sqs_messages(SOURCE, &[msg, missing], received());
    assert_eq!(lambda.len(), 2);
    assert_eq!(&lambda[0].origin, origin);
    if !continuation {
        assert_eq!(&lambda[0].event, body);
    }
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
    if !continuation {
        assert_eq!(&from_json[0].event, body);
    } else {
        assert_eq!(from_json[0].event, lambda[0].event);
    }
    assert_eq!(from_json[1].event, lambda[1].event);
    assert_eq!(from_json[2].origin.message_id.as_deref(), Some(s));
    assert!(from_json[2].event.is_err());
    for r in &from_json {
        check_record(r);
    }
}

/// The input as the `SentTimestamp` of a message: see below.
fn check_sent_timestamp(s: &str) {
    // The input as the `SentTimestamp` of a message whose event has an empty `time`: the event
    // is dated by it when it is epoch milliseconds within 10 years of the receipt, else by the
    // receipt.
    let empty_time =
        json!({"id": "e-1", "source": event::SOURCE_EC2, "detail-type": event::DT_SPOT,
        "time": "", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}})
        .to_string();
    let mut msg = message("m-0", Some(empty_time));
    msg.attributes.insert("SentTimestamp".into(), s.to_string());
    let dated = decode_sqs_messages(SOURCE, &[msg], received());
    let time = dated[0]
        .event
        .as_ref()
        .expect("a spot warning with an empty time decodes")
        .time;
    let sent = s
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .filter(|t| within_sane_range(*t, received()).is_ok());
    assert_eq!(time, sent.unwrap_or_else(received));
}

/// The input in every string field of a real event.
fn check_template_fields(s: &str) {
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
    // The input, and the extreme times it reads as, in each string field (every time field).
    let mut values = vec![s.to_string()];
    values.extend(extreme_times(s));
    for (path, value) in fields
        .iter()
        .flat_map(|p| values.iter().map(move |v| (p, v)))
    {
        let mut v = template.clone();
        set(&mut v, path, Value::String(value.clone()));
        let r = parse_event(&Origin::bare(SOURCE), &v, received(), received());
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
    decode_sqs_messages(SOURCE, &[message("m-0", None)], received())
        .remove(0)
        .origin
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
               "LifecycleTransition": ASG_TERMINATING, "AutoScalingGroupName": "g",
               "Service": ASG_SERVICE, "Time": "2026-11-20T10:00:00.123Z",
               "EC2InstanceId": "i-0a1b2c3d4e5f60001", "LifecycleActionToken": "t",
               "NotificationMetadata": "{}",
               "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:u:autoScalingGroupName/g"}),
        // Its test notification, and the EventBridge form of one.
        json!({"AccountId": "123456789012", "RequestId": "r-2", "AutoScalingGroupName": "g",
               "Service": ASG_SERVICE, "Event": ASG_TEST_NOTIFICATION,
               "Time": "2026-11-20T10:00:00Z"}),
        head(
            event::DT_ASG_TERMINATE,
            event::SOURCE_ASG,
            json!({"AutoScalingGroupName": "g", "Event": ASG_TEST_NOTIFICATION,
                   "Service": ASG_SERVICE, "Time": "2026-11-20T10:00:00Z"}),
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
