//! Continuations: the later passes of a drain that must wait.
//!
//! An invocation does a warning's API work (cordon and taint, evict every evictable pod, record
//! Events) and returns; what must wait — pods still terminating, evictions refused by a
//! disruption budget, the lifecycle action to complete after the drain, the drain's closing
//! Event — is done by later passes. Each pass that leaves work sends a **continuation message**
//! to the queue the event came from, delayed by a few seconds (`DelaySeconds`): a new message
//! carrying the original message body and the drain's progress ([`Continuation`]). The original
//! message is then answered as handled, so its receive count (and the queue's `maxReceiveCount`)
//! is not spent on waiting.
//!
//! Why a new message and not the same one kept with a short visibility: every receive of the
//! same message counts toward `maxReceiveCount`, so a 100 s drain checked every 5 s would send a
//! healthy event to the dead-letter queue. A continuation is a message of its own, and a failed
//! pass comes back through the ordinary retry path (and ends in the dead-letter queue like any
//! other message).
//!
//! Idempotence: the first pass records the event (ledger and pools) only after its continuation
//! is queued, so an event is never recorded with its drain dropped; a continuation pass re-reads
//! the node and its pods and repeats nothing that is done (evicting a terminating pod is not
//! repeated, Events have one name per event and reason, a completed lifecycle action answers
//! "already completed"). A duplicated continuation makes a second chain that converges on the same
//! node state and ends with it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of a continuation message's body.
pub const CONTINUATION_KEY: &str = "forewarnContinuation";

/// The progress a continuation message carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Continuation {
    /// The format of this object (1).
    pub version: u32,
    /// Which pass this message asks for: 1 for the first continuation.
    pub pass: u32,
    /// When the first pass ran.
    pub started_at: DateTime<Utc>,
    /// When the lifecycle action was last kept alive (`RecordLifecycleActionHeartbeat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When the original message was sent (dates an event whose `time` is empty).
    pub sent_at: DateTime<Utc>,
    /// The plan of the first delivery (a [`crate::domain::plan::Plan`] as JSON, kept as such so
    /// that the event model, which decodes continuations, does not depend on the decision): later
    /// passes act on it, without looking the instance and the node up again.
    pub plan: Value,
}

impl Continuation {
    /// The first continuation of an event whose first pass ran at `started_at`.
    pub fn first(started_at: DateTime<Utc>, sent_at: DateTime<Utc>, plan: Value) -> Continuation {
        Continuation {
            version: 1,
            pass: 1,
            started_at,
            heartbeat_at: None,
            sent_at,
            plan,
        }
    }

    /// The continuation after this one.
    pub fn next(&self, heartbeat_at: Option<DateTime<Utc>>) -> Continuation {
        Continuation {
            pass: self.pass.saturating_add(1),
            heartbeat_at: heartbeat_at.or(self.heartbeat_at),
            ..self.clone()
        }
    }

    /// The message body: `{"forewarnContinuation": {..., "body": <original body>}}`.
    pub fn body(&self, original_body: &str) -> String {
        let mut state = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut state {
            map.insert("body".into(), Value::String(original_body.to_string()));
        }
        serde_json::json!({ CONTINUATION_KEY: state }).to_string()
    }
}

/// The `DelaySeconds` a continuation is sent with: SQS delays are whole seconds from 0 to 900,
/// and a fraction is rounded up (a pass timed to when terminating pods are due to be gone must
/// not come before they are).
pub fn delay_seconds(delay: std::time::Duration) -> u32 {
    let whole = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    u32::try_from(whole.min(900)).unwrap_or(900)
}

/// A continuation message taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwrapped {
    pub continuation: Continuation,
    /// The original message body.
    pub body: String,
}

/// When `value` is a continuation message's body: its progress and the original body, or what is
/// wrong with it (field and message); `None` when it is not a continuation at all.
pub fn unwrap(value: &Value) -> Option<Result<Unwrapped, (String, String)>> {
    let state = value.as_object()?.get(CONTINUATION_KEY)?;
    let field = |f: &str| format!("{CONTINUATION_KEY}.{f}");
    Some((|| {
        let Value::Object(map) = state else {
            return Err((
                CONTINUATION_KEY.to_string(),
                "expected an object".to_string(),
            ));
        };
        let mut map = map.clone();
        let body = match map.remove("body") {
            Some(Value::String(body)) => body,
            Some(_) => return Err((field("body"), "expected a string".into())),
            None => return Err((field("body"), "missing".into())),
        };
        let continuation: Continuation = serde_json::from_value(Value::Object(map))
            .map_err(|e| (CONTINUATION_KEY.to_string(), e.to_string()))?;
        if continuation.version != 1 {
            return Err((
                field("version"),
                format!("version {} is not known (1 is)", continuation.version),
            ));
        }
        Ok(Unwrapped { continuation, body })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_795_000_000 + s, 0).unwrap()
    }

    fn plan() -> Value {
        serde_json::json!({
            "event_id": "e1", "kind": "spot-interruption", "time": "2026-11-20T10:00:00Z",
            "region": null, "instance_ids": ["i-1"], "ignored": null, "pools": [],
            "actions": [{"instance_id": "i-1", "node": "n1", "action": "cordon-drain",
                         "target": null, "reason": "r", "event_reason": "SpotInterrupted",
                         "taint_value": "spot-interruption",
                         "deadline": "2026-11-20T10:01:45Z", "complete_lifecycle": null}],
            "summary": "spot-interruption", "also_keys": []
        })
    }

    #[test]
    fn delays_are_whole_seconds_rounded_up_and_at_most_900() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(delay_seconds(ms(0)), 0);
        assert_eq!(delay_seconds(ms(1)), 1);
        assert_eq!(delay_seconds(ms(1000)), 1);
        assert_eq!(delay_seconds(ms(29_300)), 30);
        assert_eq!(delay_seconds(ms(5_000_000)), 900);
    }

    #[test]
    fn a_continuation_round_trips_with_the_original_body() {
        let original = r#"{"id":"e1","detail":{"instance-id":"i-1"}}"#;
        let c = Continuation::first(at(0), at(-1), plan());
        let body = c.body(original);
        let value: Value = serde_json::from_str(&body).unwrap();
        let back = unwrap(&value).unwrap().unwrap();
        assert_eq!(back.body, original);
        assert_eq!(back.continuation, c);
        let next = back.continuation.next(Some(at(30)));
        assert_eq!(next.pass, 2);
        assert_eq!(next.started_at, at(0));
        assert_eq!(next.heartbeat_at, Some(at(30)));
        assert_eq!(next.next(None).heartbeat_at, Some(at(30)));
    }

    #[test]
    fn other_bodies_are_not_continuations_and_bad_ones_say_why() {
        assert!(unwrap(&serde_json::json!({"id": "e1"})).is_none());
        assert!(unwrap(&serde_json::json!([1])).is_none());
        let missing = unwrap(&serde_json::json!({CONTINUATION_KEY: {"version": 1}}))
            .unwrap()
            .unwrap_err();
        assert_eq!(missing.0, "forewarnContinuation.body");
        let wrong = unwrap(
            &serde_json::json!({CONTINUATION_KEY: {"version": 2, "pass": 1,
            "startedAt": "2026-11-20T10:00:00Z", "sentAt": "2026-11-20T10:00:00Z", "body": "{}",
            "plan": plan()}}),
        )
        .unwrap()
        .unwrap_err();
        assert_eq!(wrong.0, "forewarnContinuation.version");
        let not_object = unwrap(&serde_json::json!({CONTINUATION_KEY: 3}))
            .unwrap()
            .unwrap_err();
        assert!(not_object.1.contains("object"));
    }
}
