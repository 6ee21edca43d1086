//! Property tests across the decoding and the decision (test builds only): no input panics.
//! Times of any size in every time field of every kind, continuations, and durations of any
//! size in the configuration: decoding returns, what it takes is within the sane range
//! ([`crate::domain::time`]), and the decision's date arithmetic on it does not overflow.
//!
//! A module of its own, since it imports both the event model and the decision (which imports
//! the event model): no file imports this one.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::domain::config::Config;
use crate::domain::event::autoscaling::ASG_TERMINATING;
use crate::domain::event::{DT_HEALTH, DT_RESERVATION, Detail, EventKind};
use crate::domain::fixtures::{self, instance, node_facts};
use crate::domain::inbound::continuation::Continuation;
use crate::domain::inbound::decode_value;
use crate::domain::plan::{Facts, decide, drain_deadline};
use crate::domain::pool::{CapacityType, Retention};
use crate::domain::time::parse_duration;
use crate::domain::time::within_sane_range;

/// When the inputs are received: 2026-11-20T10:05:00Z.
fn received() -> DateTime<Utc> {
    DateTime::from_timestamp(1_795_168_700, 0).unwrap()
}

/// Every time field of every kind: (event, JSON path of the time).
fn time_fields() -> Vec<(Value, Vec<&'static str>)> {
    let spot = fixtures::spot_json("e1", "i-0a1b2c3d4e5f60001", "2026-11-20T10:00:00Z");
    let mut health_detail = fixtures::health_detail(
        &["i-0a1b2c3d4e5f60002", "i-0a1b2c3d4e5f60003"],
        "Sat, 21 Nov 2026 10:30:00 GMT",
    );
    health_detail["endTime"] = json!("2026-11-21T11:30:00Z");
    let health = json!({
        "id": "h1", "source": "aws.health", "detail-type": DT_HEALTH,
        "time": "2026-11-20T10:00:00Z", "detail": health_detail
    });
    let reservation = json!({
        "id": "r1", "source": "aws.ec2", "detail-type": DT_RESERVATION,
        "time": "2026-11-20T10:00:00Z",
        "detail": {"instance-id": "i-0a1b2c3d4e5f60001", "instance-action": "terminate",
                   "instance-termination-time": "2026-11-20T10:02:00Z"}
    });
    let hook = json!({
        "Origin": "AutoScalingGroup", "LifecycleHookName": "h", "Destination": "EC2",
        "LifecycleTransition": ASG_TERMINATING, "AutoScalingGroupName": "g",
        "Service": "AWS Auto Scaling", "Time": "2026-11-20T10:01:20.187Z",
        "EC2InstanceId": "i-0a1b2c3d4e5f60009", "LifecycleActionToken": "t"
    });
    vec![
        (spot, vec!["time"]),
        (health.clone(), vec!["time"]),
        (health.clone(), vec!["detail", "startTime"]),
        (health, vec!["detail", "endTime"]),
        (reservation.clone(), vec!["time"]),
        (reservation, vec!["detail", "instance-termination-time"]),
        (hook, vec!["Time"]),
    ]
}

fn set_path(v: &mut Value, path: &[&str], new: Value) {
    let mut at = v;
    for key in path {
        at = &mut at[*key];
    }
    *at = new;
}

/// Times of every size: anywhere in chrono's range, near now, in RFC 3339 and RFC 1123, and
/// made-up strings with years of up to 7 digits.
fn arb_time() -> impl Strategy<Value = String> {
    let all = DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp();
    let r = received().timestamp();
    let near = r - 20 * 366 * 86_400..=r + 20 * 366 * 86_400;
    let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    prop_oneof![
        all.clone().prop_map(move |s| at(s).to_rfc3339()),
        near.clone().prop_map(move |s| at(s).to_rfc3339()),
        near.prop_map(move |s| at(s).format("%a, %d %b %Y %H:%M:%S GMT").to_string()),
        all.prop_map(move |s| at(s).format("%a, %-d %b %Y %H:%M:%S%.3f GMT").to_string()),
        "[+-]?[0-9]{1,7}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})",
        "([A-Z][a-z]{2}, )?[0-9]{1,2} [A-Z][a-z]{2} [0-9]{1,7} [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,10})? (GMT|[+-][0-9]{4})",
    ]
}

/// What a duration variable may be set to, huge numbers included.
fn arb_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| format!("{n}s")),
        "([0-9]{1,20}[smhd]){1,3}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any time in any time field, in a bare event and in an SQS body with any `SentTimestamp`:
    /// decoding returns, a decoded event's times are within ten years of now, and the decision's
    /// date arithmetic on them (deadlines, windows, expiries), with any durations the
    /// configuration takes, does not overflow.
    #[test]
    fn arbitrary_times_never_panic_and_plans_on_them_never_overflow(
        which in 0usize..7,
        time in arb_time(),
        durations in prop::collection::vec(arb_duration(), 4),
        sent in any::<i64>(),
    ) {
        let (mut v, path) = time_fields().swap_remove(which);
        set_path(&mut v, &path, json!(time));
        let batch = json!({"Records": [{"messageId": "m", "body": v.to_string(),
            "attributes": {"SentTimestamp": sent.to_string()}}]});
        let _ = decode_value("p.json", batch, received()).unwrap();
        let Ok(e) = decode_value("p.json", v, received()).unwrap().remove(0).event else {
            return Ok(());
        };
        let mut times = vec![e.time];
        match &e.detail {
            Detail::Scheduled { start_time, end_time, .. } => {
                times.extend(start_time.iter().chain(end_time));
            }
            Detail::CapacityReservation { termination_time, .. } => {
                times.extend(termination_time.iter());
            }
            _ => {}
        }
        for t in times {
            prop_assert!(within_sane_range(t, received()).is_ok(), "{t}");
        }
        let d = |s: &str| parse_duration(s).unwrap_or_default();
        let config = Config {
            pool_ttl: d(&durations[0]),
            interruption_notice: d(&durations[1]),
            deadline_margin: d(&durations[2]),
            drain_timeout: d(&durations[3]),
            unavailable_kinds: EventKind::ALL.iter().copied().collect(),
            ..Config::default()
        };
        let instances = e
            .instance_ids
            .iter()
            .map(|id| {
                let facts = instance(id)
                    .typed("m5.large", "us-east-1a")
                    .capacity(CapacityType::OnDemand)
                    .build();
                (id.clone(), facts)
            })
            .collect();
        let nodes: Vec<_> = e
            .instance_ids
            .iter()
            .map(|id| node_facts(&format!("node-{id}"), id))
            .collect();
        let _ = drain_deadline(&e, &config);
        let plan = decide(&e, Facts::new(&instances, &nodes), &config);
        let retention = Retention::default();
        for m in &plan.pools {
            let _ = retention.pool_expiry(plan.time, m.unavailable_until);
        }
        let _ = crate::domain::fold::history(&plan, &retention);
    }

    /// Any time in a continuation's times: decoding returns, and a continuation it takes has
    /// every time within ten years of now.
    #[test]
    fn continuation_times_of_any_size_never_panic(
        which in 0usize..3,
        time in arb_time(),
    ) {
        let event = time_fields().swap_remove(0).0;
        let body = event.to_string();
        let Ok(event) = decode_value("p.json", event, received()).unwrap().remove(0).event else {
            panic!("the first time field's event decodes");
        };
        let empty = Default::default();
        let facts = Facts::new(&empty, &[]);
        let plan = decide(&event, facts, &Config::default());
        let mut state =
            serde_json::to_value(Continuation::first(received(), received(), plan, &body)).unwrap();
        state["heartbeatAt"] = json!(received());
        state[["startedAt", "sentAt", "heartbeatAt"][which]] = json!(time);
        let batch = json!({"Records": [{"messageId": "m",
            "body": json!({"forewarnContinuation": state}).to_string()}]});
        let record = decode_value("p.json", batch, received()).unwrap().remove(0);
        if let (Ok(_), Some(c)) = (&record.event, &record.continuation) {
            for t in [Some(c.started_at), Some(c.sent_at), c.heartbeat_at].into_iter().flatten() {
                prop_assert!(within_sane_range(t, received()).is_ok(), "{t}");
            }
            let _ = c.next(Some(received()));
        }
    }
}
