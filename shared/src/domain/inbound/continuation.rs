//! Continuations: the later passes of a drain that must wait.
//!
//! A warning's first delivery cordons and taints its node and returns; the drain — the Events of
//! the decision, the evictions, the pods still terminating, evictions refused by a disruption
//! budget, the lifecycle action to complete after the drain, the drain's closing Event — is done
//! by later passes. Each pass that leaves work sends a **continuation message**
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
//! **Authenticated.** A continuation carries a plan that later passes act on, so a forged one
//! would be obeyed: every continuation is signed with HMAC-SHA256 ([`ContinuationKey`]) over the
//! whole message (progress, plan and original body), and a pass whose signature does not verify
//! is refused. The key is 32 random bytes kept in the pool table (created on first use, read once
//! per cold start): forging a continuation takes both read access to the table and
//! `sqs:SendMessage` on the queue, which the stack's queue policy leaves to the handler's role
//! alone (docs/security.md). A signature proves only that forewarn wrote the message, not that it
//! is still true: a redriven or duplicated continuation is genuine but may be stale, so every pass
//! also verifies live what it acts on (the executor) and ends a chain past its deadline (the
//! pipeline).
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
use sha2::Sha256;

use crate::domain::event::{DecodeError, Origin};
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing, Unverified};
use crate::domain::plan::Plan;
use crate::domain::surge::RoomWait;
use crate::domain::time::within_sane_range;

/// The key of a continuation message's body.
pub const CONTINUATION_KEY: &str = "forewarnContinuation";

/// The format of continuations this version writes and reads (2: signed; 1 was unsigned and is
/// refused).
pub const VERSION: u32 = 2;

/// What a continuation message carries: the drain's progress, its plan and the original body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Continuation {
    /// The format of this object ([`VERSION`]).
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
    /// The drain only waited for room when this was sent (see [`RoomWait`]): while its
    /// placeholders still wait and nothing is due, the pass needs no other request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomWait>,
    /// The plan of the first delivery: later passes act on it, after verifying live that it
    /// still holds (see the module doc). It is signed as it serializes: a decoded plan serializes
    /// to the JSON that was signed (its fields are all known, and JSON maps serialize in one
    /// order).
    pub plan: Plan,
    /// The original message body: the event the drain is of. Signed with the rest.
    pub body: String,
    /// The id of the key the message is signed with ([`KeyId`]; none: not signed). Signed with
    /// the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<KeyId>,
    /// HMAC-SHA256 of the rest of the message, in hex (see [`Continuation::signing_input`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl Continuation {
    /// The first continuation of an event whose first pass ran at `started_at`, carrying its
    /// message's `body`.
    pub fn first(
        started_at: DateTime<Utc>,
        sent_at: DateTime<Utc>,
        plan: Plan,
        body: &str,
    ) -> Continuation {
        Continuation {
            version: VERSION,
            pass: 1,
            started_at,
            sent_at,
            plan,
            body: body.into(),
            ..Continuation::default()
        }
    }

    /// Whether this pass records the Events of the decision that the drain's first pass left
    /// to it: the first pass records them only when the drain ends in it, so any second pass
    /// follows a first that left them.
    pub fn owes_decision_events(&self) -> bool {
        self.pass == 2
    }

    /// The continuation after this one.
    pub fn next(&self, heartbeat_at: Option<DateTime<Utc>>) -> Continuation {
        Continuation {
            pass: self.pass.saturating_add(1),
            heartbeat_at: heartbeat_at.or(self.heartbeat_at),
            key_id: None,
            mac: None,
            ..self.clone()
        }
    }

    /// What the signature covers: every field but `mac`, as compact JSON with its keys in
    /// order. A decoded continuation gives the same text as the one that was signed (its fields
    /// are all known, and JSON maps serialize in one order), so nothing in the message escapes
    /// the signature.
    pub fn signing_input(&self) -> String {
        let unsigned = Continuation {
            mac: None,
            ..self.clone()
        };
        serde_json::to_value(unsigned)
            .unwrap_or_default()
            .to_string()
    }

    /// The message body, signed with `key` (its id in `keyId`):
    /// `{"forewarnContinuation": {..., "keyId": <id>, "body": <original body>, "mac": <hex>}}`.
    pub fn body(&self, key: &ContinuationKey) -> String {
        let mut signed = self.clone();
        signed.key_id = Some(key.id());
        signed.mac = Some(key.sign(&signed.signing_input()));
        let state = serde_json::to_value(signed).unwrap_or_default();
        serde_json::json!({ CONTINUATION_KEY: state }).to_string()
    }

    /// Whether the message was signed with a key of `keys` (constant-time), or why not: an id
    /// that is not the ring's is [`Unverified::UnknownKey`] (the caller may read the keys again,
    /// once, and retry).
    pub fn verify(&self, keys: &KeyRing) -> Result<(), Unverified> {
        keys.verify(self.key_id.zip(self.mac.as_deref()), &self.signing_input())
    }
}

/// The `DelaySeconds` a continuation is sent with: SQS delays are whole seconds from 0 to 900,
/// and a fraction is rounded up (a pass timed to when terminating pods are due to be gone must
/// not come before they are).
pub fn delay_seconds(delay: std::time::Duration) -> u32 {
    let whole = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    u32::try_from(whole.min(900)).unwrap_or(900)
}

/// The SQS message group a continuation is sent in: its plan's `cluster`, named whole
/// (`account/region/name`), or its account (see [`Tenant`]); `forewarn` for a deployment
/// naming no cluster (a first-time event a busy cluster's invocation sends back goes in its
/// cluster's, see [`crate::app::fleet::triage`]). On a standard queue a message group makes the queue fair (SQS fair
/// queues): a tenant whose messages keep many in flight is a noisy one, and every other
/// tenant's messages are delivered before its backlog, so one cluster's (or account's) mass
/// interruption does not hold up another's drains. A group is at most 128 characters of
/// letters, digits and ASCII punctuation; a name that does not fit (never one of EKS's) is
/// replaced by a digest of itself, so it still keeps its tenant's messages together.
pub fn message_group(cluster: Option<&str>, tenant: Tenant) -> String {
    use sha2::Digest;
    let name = match tenant {
        Tenant::Cluster => cluster.unwrap_or("forewarn"),
        // `account/region/name`: the account. A cluster is named bare only while the own
        // account is unknown, which an organization's deployment never is.
        Tenant::Account => cluster
            .and_then(|c| c.split_once('/'))
            .map_or("forewarn", |(account, _)| account),
    };
    let fits = !name.is_empty()
        && name.len() <= MAX_GROUP_CHARS
        && name.chars().all(|c| c.is_ascii_graphic());
    if fits {
        return name.to_string();
    }
    format!("cluster-{}", hex::encode(Sha256::digest(name)))
}

/// Whose tenant of the fair queue a continuation is (see [`message_group`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tenant {
    /// Its cluster's: a deployment without an organization, whose warnings come in no group
    /// (each a tenant of its own, read before any noisy tenant: cordons first), while each
    /// cluster's drains are a tenant of their own.
    #[default]
    Cluster,
    /// Its account's, the group its warning came in (an organization's rules and routes put
    /// each account's events in the account's group): an account's continuations queue behind
    /// its own warnings, so that its cordons still come before its drains, and every account
    /// is one tenant.
    Account,
}

/// The longest `MessageGroupId` SQS takes.
const MAX_GROUP_CHARS: usize = 128;

/// The largest message body SQS takes: 256 KiB.
pub const MAX_MESSAGE_BYTES: usize = 262_144;

/// A continuation too large for SQS: never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the drain's continuation would be {bytes} bytes, more than the {MAX_MESSAGE_BYTES} an SQS \
     message holds: it is not sent"
)]
pub struct TooLarge {
    pub bytes: usize,
}

/// `body` when SQS takes it ([`MAX_MESSAGE_BYTES`]), else how large it is. What a continuation
/// carries does not grow with the node's pods (its plan is per instance, its wait for room a
/// count), but its original body and its plan's instances are the event's: an event near SQS's
/// limit whose body escapes to more (quotes) would not fit, and is failed, not sent.
pub fn within_sqs_limit(body: String) -> Result<String, TooLarge> {
    match body.len() {
        bytes if bytes > MAX_MESSAGE_BYTES => Err(TooLarge { bytes }),
        _ => Ok(body),
    }
}

/// When `value` is a continuation message's body received at `now`: the continuation (its
/// progress, its plan and the original body), or what is wrong with it; `Ok(None)` when it is
/// not a continuation at all. Its signature is not checked here (that needs the key: the
/// pipeline does it), but its plan must be a plan and its times are checked: each within the
/// sane range of `now` ([`crate::domain::time::within_sane_range`]; a later pass adds intervals
/// to them).
///
/// What is wrong names the field under the message's `body` (`body.forewarnContinuation.plan`).
pub fn unwrap(
    origin: &Origin,
    value: &Value,
    now: DateTime<Utc>,
) -> Result<Option<Continuation>, DecodeError> {
    let Some(state) = value.as_object().and_then(|m| m.get(CONTINUATION_KEY)) else {
        return Ok(None);
    };
    let err = |field: &str, message: String| {
        let field = format!("body.{CONTINUATION_KEY}{field}");
        DecodeError::new(origin, Some(&field), message)
    };
    let Value::Object(map) = state else {
        return Err(err("", "expected an object".into()));
    };
    // The original body is named first, whatever else is wrong.
    match map.get("body") {
        Some(Value::String(_)) => {}
        Some(_) => return Err(err(".body", "expected a string".into())),
        None => return Err(err(".body", "missing".into())),
    }
    let continuation = Continuation::deserialize(state).map_err(|e| {
        // A plan that is not a plan is named as such; any other error names the object.
        match map.get("plan").map(Plan::deserialize) {
            Some(Err(plan)) => err(".plan", format!("not a plan: {plan}")),
            _ => err("", e.to_string()),
        }
    })?;
    if continuation.version != VERSION {
        return Err(err(
            ".version",
            format!(
                "version {} is not known ({VERSION} is; continuations of version 1 were not \
                 signed and are refused)",
                continuation.version
            ),
        ));
    }
    let times = [
        (".startedAt", Some(continuation.started_at)),
        (".sentAt", Some(continuation.sent_at)),
        (".heartbeatAt", continuation.heartbeat_at),
        (".room.until", continuation.room.map(|r| r.until)),
    ];
    for (name, time) in times {
        if let Some(time) = time {
            within_sane_range(time, now).map_err(|m| err(name, m.to_string()))?;
        }
    }
    Ok(Some(continuation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn unwrap(value: &Value, now: DateTime<Utc>) -> Option<Result<Continuation, DecodeError>> {
        super::unwrap(&Origin::bare("t.json"), value, now).transpose()
    }

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_795_000_000 + s, 0).unwrap()
    }

    fn plan() -> Plan {
        serde_json::from_value(plan_json()).unwrap()
    }

    fn plan_json() -> Value {
        serde_json::json!({
            "event_id": "e1", "kind": "spot-interruption", "time": "2026-11-20T10:00:00Z",
            "region": null, "ignored": null, "pools": [],
            "actions": [{"instance_id": "i-1", "node": "n1", "action": "cordon-drain",
                         "target": null, "reason": "r",
                         // Written before the taint value was the plan's kind: still read.
                         "taint_value": "spot-interruption",
                         "deadline": "2026-11-20T10:01:45Z", "complete_lifecycle": null}],
            "summary": "spot-interruption", "also_keys": [], "event_reason": "SpotInterrupted",
            "pod_event_reason": "SpotInterruption"
        })
    }

    #[test]
    fn a_continuations_message_group_is_its_cluster_named_whole() {
        let mut p = plan();
        let group = |p: &Plan| message_group(p.cluster.as_deref(), Tenant::Cluster);
        assert_eq!(group(&p), "forewarn", "a deployment naming no cluster");
        assert_eq!(
            message_group(p.cluster.as_deref(), Tenant::Account),
            "forewarn"
        );
        p.cluster = Some("123456789012/us-east-1/prod".into());
        assert_eq!(group(&p), "123456789012/us-east-1/prod");
        assert_eq!(
            message_group(p.cluster.as_deref(), Tenant::Account),
            "123456789012"
        );
        // The longest EKS name in the longest region still fits in 128.
        let longest = format!("123456789012/ap-southeast-4/{}", "c".repeat(100));
        p.cluster = Some(longest.clone());
        assert_eq!(group(&p), longest);
        // What SQS would refuse becomes a digest, the same for the same cluster.
        p.cluster = Some(format!("{longest}x"));
        let long = group(&p);
        p.cluster = Some("a b\u{e9}".into());
        let spaced = group(&p);
        for g in [&long, &spaced] {
            assert!(g.starts_with("cluster-") && g.len() <= 128, "{g}");
            assert!(g.chars().all(|c| c.is_ascii_graphic()), "{g}");
        }
        assert_ne!(long, spaced);
        assert_eq!(spaced, group(&p));
    }

    /// A plan's taint key and load-balancer exclusion travel with it: a later pass cordons as
    /// the first one decided.
    #[test]
    fn a_continuations_plan_keeps_its_taint_key_and_exclusion() {
        let old = plan();
        assert_eq!(old.actions[0].taint_key, "");
        assert!(!old.actions[0].exclude_from_load_balancers);
        let mut json = plan_json();
        json["actions"][0]["taint_key"] = "aws-node-termination-handler/spot-itn".into();
        json["actions"][0]["exclude_from_load_balancers"] = true.into();
        let new: Plan = serde_json::from_value(json).unwrap();
        assert_eq!(
            new.actions[0].taint_key,
            "aws-node-termination-handler/spot-itn"
        );
        assert!(new.actions[0].exclude_from_load_balancers);
        let back: Plan = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
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

    fn key(byte: u8) -> ContinuationKey {
        ContinuationKey::new([byte; 32])
    }

    fn ring(byte: u8) -> KeyRing {
        KeyRing::of(key(byte))
    }

    #[test]
    fn a_continuation_round_trips_with_the_original_body_and_its_signature() {
        let original = r#"{"id":"e1","detail":{"instance-id":"i-1"}}"#;
        let c = Continuation::first(at(0), at(-1), plan(), original);
        let body = c.body(&key(7));
        let value: Value = serde_json::from_str(&body).unwrap();
        // The message is the state, its keys in order and the original body among them, and the
        // mac of that state without it, as compact JSON.
        assert!(body.starts_with(r#"{"forewarnContinuation":{"body":"{\"id\":\"e1\","#));
        let mut state = value[CONTINUATION_KEY].as_object().unwrap().clone();
        let mac = state.remove("mac").unwrap();
        assert_eq!(mac, key(7).sign(&Value::Object(state).to_string()));
        let back = unwrap(&value, at(5)).unwrap().unwrap();
        assert_eq!(back.body, original);
        assert_eq!(back.verify(&ring(7)), Ok(()));
        assert!(back.mac.is_some());
        assert_eq!(
            Continuation {
                key_id: None,
                mac: None,
                ..back.clone()
            },
            c
        );
        let next = back.next(Some(at(30)));
        assert_eq!(next.pass, 2);
        assert_eq!(next.started_at, at(0));
        assert_eq!(next.heartbeat_at, Some(at(30)));
        assert_eq!(next.mac, None, "a new pass is signed anew");
        assert_eq!(next.next(None).heartbeat_at, Some(at(30)));
    }

    #[test]
    fn forged_or_altered_continuations_do_not_verify() {
        let original = r#"{"id":"e1","detail":{"instance-id":"i-1"}}"#;
        let c = Continuation::first(at(0), at(-1), plan(), original);
        let signed: Value = serde_json::from_str(&c.body(&key(7))).unwrap();
        let decode = |v: &Value| unwrap(v, at(5)).unwrap().unwrap();
        // Another key: another forewarn, or a guess.
        let back = decode(&signed);
        assert!(back.verify(&ring(8)).is_err());
        // The node swapped in the plan, the body swapped, the pass or the start moved.
        let edits: [(&str, Value); 4] = [
            ("plan", {
                let mut p = plan_json();
                p["actions"][0]["node"] = "n2".into();
                p
            }),
            (
                "body",
                r#"{"id":"e1","detail":{"instance-id":"i-2"}}"#.into(),
            ),
            ("pass", 9.into()),
            ("startedAt", "2030-01-01T00:00:00Z".into()),
        ];
        for (field, value) in edits {
            let mut forged = signed.clone();
            forged[CONTINUATION_KEY][field] = value;
            let back = decode(&forged);
            let why = back.verify(&ring(7)).unwrap_err();
            assert_eq!(why, Unverified::Mismatch, "{field}");
        }
        // Unsigned, or a signature that is not even hex.
        let mut unsigned = signed.clone();
        unsigned[CONTINUATION_KEY]
            .as_object_mut()
            .unwrap()
            .remove("mac");
        let back = decode(&unsigned);
        assert_eq!(back.verify(&ring(7)), Err(Unverified::NotSigned));
        let mut garbage = signed.clone();
        garbage[CONTINUATION_KEY]["mac"] = "zz".into();
        let back = decode(&garbage);
        assert!(back.verify(&ring(7)).is_err());
    }

    #[test]
    fn keys_come_from_exactly_32_bytes_and_never_print() {
        assert!(ContinuationKey::from_slice(3, &[1; 31]).is_none());
        assert!(ContinuationKey::from_slice(3, &[1; 33]).is_none());
        let k = ContinuationKey::from_slice(3, &[1; 32]).unwrap();
        assert_eq!(k.bytes(), &[1; 32]);
        assert_eq!(k.id(), 3);
        assert_eq!(format!("{k:?}"), "ContinuationKey(id 3, ..)");
    }

    #[test]
    fn the_current_and_the_previous_key_verify_an_older_one_does_not() {
        let original = r#"{"id":"e1","detail":{"instance-id":"i-1"}}"#;
        let c = Continuation::first(at(0), at(-1), plan(), original);
        let first = ring(7);
        let decode = |body: &str| {
            let v: Value = serde_json::from_str(body).unwrap();
            unwrap(&v, at(5)).unwrap().unwrap()
        };
        let signed = decode(&c.body(&first.current));
        assert_eq!(signed.key_id, Some(1), "the key id is in the message");
        let once = first.rotated([8; 32]).unwrap();
        assert_eq!(once.current.id(), 2);
        let twice = once.rotated([9; 32]).unwrap();
        // Signed by the key before the rotation: still accepted after it, not after a second.
        assert_eq!(signed.verify(&first), Ok(()));
        assert_eq!(signed.verify(&once), Ok(()));
        assert_eq!(
            signed.verify(&twice),
            Err(Unverified::UnknownKey { id: 1, current: 3 })
        );
        // Signed by a key newer than the ring: unknown to it (the caller reads the keys again).
        let newer = decode(&c.body(&twice.current));
        assert_eq!(
            newer.verify(&first),
            Err(Unverified::UnknownKey { id: 3, current: 1 })
        );
        assert_eq!(newer.verify(&twice), Ok(()));
        // The id is signed: naming the other accepted key does not verify.
        let mut moved: Value = serde_json::from_str(&c.body(&once.current)).unwrap();
        moved[CONTINUATION_KEY]["keyId"] = 1.into();
        let moved = unwrap(&moved, at(5)).unwrap().unwrap();
        assert_eq!(moved.verify(&once), Err(Unverified::Mismatch));
        // A message naming no key (signed by one of id 0, say, its keyId then taken out): not
        // signed, whatever its mac.
        let zero = KeyRing::of(ContinuationKey::with_id(0, [7; 32]));
        let mut old: Value = serde_json::from_str(&c.body(&zero.current)).unwrap();
        let state = old[CONTINUATION_KEY].as_object_mut().unwrap();
        state.remove("keyId");
        let mut unsigned = state.clone();
        unsigned.remove("mac");
        old[CONTINUATION_KEY]["mac"] = zero
            .current
            .sign(&Value::Object(unsigned).to_string())
            .into();
        let old = unwrap(&old, at(5)).unwrap().unwrap();
        assert_eq!(old.verify(&zero), Err(Unverified::NotSigned));
    }

    #[test]
    fn times_far_from_now_are_malformed() {
        let state = |started: &str| {
            serde_json::json!({CONTINUATION_KEY: {"version": VERSION, "pass": 1,
                "startedAt": started, "sentAt": "2026-11-20T10:00:00Z", "body": "{}",
                "plan": plan()}})
        };
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert!(unwrap(&state("2026-11-20T09:59:00Z"), now).unwrap().is_ok());
        for far in [
            "+262142-01-01T00:00:00Z",
            "2040-01-01T00:00:00Z",
            "1990-01-01T00:00:00Z",
        ] {
            let e = unwrap(&state(far), now).unwrap().unwrap_err();
            let field = e.field.as_deref();
            assert_eq!(field, Some("body.forewarnContinuation.startedAt"), "{far}");
            assert!(e.message.contains("10 years"), "{e:?}");
        }
    }

    #[test]
    fn a_wait_for_room_round_trips_and_a_bad_one_is_named() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let state = |room: Value| {
            serde_json::json!({CONTINUATION_KEY: {"version": VERSION, "pass": 2,
                "startedAt": "2026-11-20T10:00:00Z", "sentAt": "2026-11-20T10:00:00Z",
                "room": room, "body": "{}", "plan": plan()}})
        };
        let ok = unwrap(
            &state(serde_json::json!({"until": "2026-11-20T10:01:05Z", "placeholders": 2})),
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            ok.room,
            Some(RoomWait {
                until: now + chrono::Duration::seconds(65),
                placeholders: 2
            })
        );
        let next = ok.next(None);
        assert_eq!(next.room, ok.room, "carried to the next pass");
        let far = unwrap(
            &state(serde_json::json!({"until": "2040-01-01T00:00:00Z", "placeholders": 2})),
            now,
        )
        .unwrap()
        .unwrap_err();
        let field = far.field.as_deref();
        assert_eq!(field, Some("body.forewarnContinuation.room.until"));
        let unknown = unwrap(
            &state(
                serde_json::json!({"until": "2026-11-20T10:01:05Z", "placeholders": 2,
                "evictNow": true}),
            ),
            now,
        )
        .unwrap()
        .unwrap_err();
        assert!(unknown.message.contains("evictNow"), "{unknown:?}");
    }

    #[test]
    fn other_bodies_are_not_continuations_and_bad_ones_say_why() {
        let unwrap = |v: &Value| unwrap(v, at(0));
        assert!(unwrap(&serde_json::json!({"id": "e1"})).is_none());
        assert!(unwrap(&serde_json::json!([1])).is_none());
        let missing = unwrap(&serde_json::json!({CONTINUATION_KEY: {"version": 1}}))
            .unwrap()
            .unwrap_err();
        let field = missing.field.as_deref();
        assert_eq!(field, Some("body.forewarnContinuation.body"));
        let wrong = unwrap(
            &serde_json::json!({CONTINUATION_KEY: {"version": 1, "pass": 1,
            "startedAt": "2026-11-20T10:00:00Z", "sentAt": "2026-11-20T10:00:00Z", "body": "{}",
            "plan": plan()}}),
        )
        .unwrap()
        .unwrap_err();
        let field = wrong.field.as_deref();
        assert_eq!(field, Some("body.forewarnContinuation.version"));
        let not_object = unwrap(&serde_json::json!({CONTINUATION_KEY: 3}))
            .unwrap()
            .unwrap_err();
        assert!(not_object.message.contains("object"));
    }

    #[test]
    fn a_body_past_sqs_limit_is_refused_naming_its_size() {
        let fits = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(within_sqs_limit(fits.clone()).unwrap(), fits);
        let e = within_sqs_limit("x".repeat(MAX_MESSAGE_BYTES + 1)).unwrap_err();
        assert_eq!(e.bytes, MAX_MESSAGE_BYTES + 1);
        assert!(
            e.to_string().contains("262145 bytes, more than the 262144"),
            "{e}"
        );
    }
}
