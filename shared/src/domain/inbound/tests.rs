//! Decoding through the way in: every envelope, and each source's detail as it arrives.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Config;
use crate::domain::event::autoscaling::{ASG_LAUNCHING, ASG_TERMINATING};
use crate::domain::event::{
    DT_ASG_LAUNCH, DT_ASG_TERMINATE, DT_HEALTH, DT_RESERVATION, DT_SPOT, DecodeError, Detail,
    Event, EventKind, InstanceAction, LifecycleAction, parse_time,
};
use crate::domain::plan::{Facts, Plan, decide, goes_at};

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

/// A plan, for a continuation to carry: the spot warning's, with nothing known of it.
fn a_plan() -> Plan {
    let event = one(spot("e1", json!("i-0a1b2c3d4e5f60001"))).unwrap();
    let empty = BTreeMap::new();
    decide(&event, Facts::new(&empty, &[]), &Config::default())
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
        "detail": crate::domain::fixtures::health_detail(
            &[
                "i-0a1b2c3d4e5f60002",
                "vol-0123456789abcdef0",
                "i-0a1b2c3d4e5f60002",
                "i-0a1b2c3d4e5f6000d",
            ],
            "Sat, 21 Nov 2026 10:30:00 GMT",
        )
    });
    let e = one(v).unwrap();
    assert_eq!(e.kind, EventKind::ScheduledChange);
    assert_eq!(
        e.instance_ids,
        vec!["i-0a1b2c3d4e5f60002", "i-0a1b2c3d4e5f6000d"]
    );
    assert_eq!(
        goes_at(&e, &Config::default()),
        parse_time("2026-11-21T10:30:00Z")
    );
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

/// A message triage sent back is read as the original it carries, marked triaged, its body the
/// original's (what a continuation of it carries); a bad one names what was wrong; one carried
/// inside another is not unwrapped again.
#[test]
fn a_triaged_message_is_the_original_it_carries() {
    let good = spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string();
    let triaged = sqs::triaged_body(&good, "123456789012/us-east-1/prod");
    let twice = sqs::triaged_body(&triaged, "123456789012/us-east-1/prod");
    assert_eq!(
        serde_json::from_str::<Value>(&triaged).unwrap(),
        json!({"forewarnTriaged": {"cluster": "123456789012/us-east-1/prod", "body": good}})
    );
    let v = json!({"Records": [
        {"messageId": "m1", "body": triaged},
        {"messageId": "m2", "body": good},
        {"messageId": "m3", "body": json!({"forewarnTriaged": {"body": 3}}).to_string()},
        {"messageId": "m4", "body": twice},
        {"messageId": "m5", "body": "[1, 2]"},
    ]});
    let records = decode_value("batch.json", v, received()).unwrap();
    let (read, plain) = (&records[0], &records[1]);
    assert!(read.triaged && !plain.triaged);
    assert_eq!(read.body.as_deref(), Some(good.as_str()));
    assert_eq!(read.event.as_ref().unwrap(), plain.event.as_ref().unwrap());
    let err = records[2].event.as_ref().unwrap_err();
    assert_eq!(err.field.as_deref(), Some("body.forewarnTriaged"), "{err}");
    assert!(err.to_string().contains("invalid type"), "{err}");
    // Not unwrapped twice: what it carries is no event forewarn knows.
    let inner = records[3].event.as_ref().unwrap();
    assert!(records[3].triaged && inner.kind == EventKind::Unsupported);
    assert!(!records[4].triaged && records[4].event.is_err());
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
fn objects_are_never_read_from_arrays() {
    // serde reads a struct from an array too, by position: an event and a Health entity are
    // objects alone.
    let positional = json!(["e1", "aws.ec2", DT_SPOT, "2026-11-20T10:00:00Z", null, null,
                            {"instance-id": "i-0a1b2c3d4e5f60001"}]);
    let err = one(json!([positional])).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("$"));
    assert_eq!(err.message, "expected an object, found an array");
    let mut v = health();
    v["detail"]["affectedEntities"] = json!([["i-0a1b2c3d4e5f60002", null]]);
    let err = one(v).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("detail.affectedEntities[0]"));
    assert_eq!(err.message, "expected an object, found an array");
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
    assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60009"]);
    assert_eq!(e.account.as_deref(), Some("123456789012"));
    assert_eq!(e.time, parse_time("2026-11-20T10:01:20.187Z").unwrap());
    assert_eq!(
        e.detail,
        Detail::AsgTermination(LifecycleAction {
            hook_name: "forewarn-drain".into(),
            asg_name: "eks-demo-ng-1".into(),
            token: "3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59".into(),
            // Completed in the account the notification names (its region is in the group's
            // ARN, which this notification does not give).
            account: Some("123456789012".into()),
            region: None,
        })
    );
    // A redelivery (in another SQS message) is the same event: same id.
    let body = hook_notification(ASG_TERMINATING).to_string();
    let batch =
        json!({"Records": [{"messageId": "m1", "body": body}, {"messageId": "m2", "body": body}]});
    let records = decode_value("b.json", batch, received()).unwrap();
    assert_eq!(records[0].event.as_ref().unwrap().id, e.id);
    assert_eq!(records[1].event.as_ref().unwrap().id, e.id);
}

#[test]
fn launching_hook_notification_is_an_asg_launch() {
    let e = one(hook_notification(ASG_LAUNCHING)).unwrap();
    assert_eq!(e.kind, EventKind::AsgLaunch);
    assert_eq!(e.instance_ids, ["i-0a1b2c3d4e5f60009"]);
    match e.detail {
        Detail::AsgLaunch(l) => assert_eq!(l.asg_name, "eks-demo-ng-1", "{l:?}"),
        other => panic!("{other:?}"),
    }
    // Any other transition is still ignored, with the reason.
    let e = one(hook_notification("autoscaling:EC2_INSTANCE_WARMED")).unwrap();
    assert_eq!(e.kind, EventKind::Unsupported);
    match e.detail {
        Detail::Unsupported { why } => assert!(why.contains("EC2_INSTANCE_WARMED"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn launch_lifecycle_action_through_eventbridge() {
    let mut v = json!({
        "version": "0", "id": "5e0a3c1d-launch", "detail-type": DT_ASG_LAUNCH,
        "source": "aws.autoscaling", "time": "2026-11-20T10:00:32Z", "region": "us-east-1",
        "detail": {"Origin": "EC2", "Destination": "AutoScalingGroup",
                   "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
                   "AutoScalingGroupName": "eks-demo-ng-1", "LifecycleHookName": "joined",
                   "EC2InstanceId": "i-0a1b2c3d4e5f60009",
                   "LifecycleTransition": ASG_LAUNCHING}
    });
    let e = one(v.clone()).unwrap();
    assert_eq!(e.kind, EventKind::AsgLaunch);
    assert_eq!(e.id, "5e0a3c1d-launch");
    assert!(matches!(&e.detail, Detail::AsgLaunch(l) if l.hook_name == "joined"));
    // A launch event that says it is a termination contradicts itself: an error naming it.
    v["detail"]["LifecycleTransition"] = json!(ASG_TERMINATING);
    let err = one(v).unwrap_err().to_string();
    assert!(err.contains("detail.LifecycleTransition"), "{err}");
    assert!(
        err.contains("expected autoscaling:EC2_INSTANCE_LAUNCHING"),
        "{err}"
    );
}

#[test]
fn lifecycle_action_is_placed_in_the_envelopes_account_and_region() {
    let v = json!({
        "version": "0", "id": "7c1e-member", "detail-type": DT_ASG_TERMINATE,
        "source": "aws.autoscaling", "account": "111111111111", "time": "2026-11-20T10:00:32Z",
        "region": "eu-west-1",
        "detail": {"LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
                   "AutoScalingGroupName": "eks-demo-ng-1", "LifecycleHookName": "drain",
                   "EC2InstanceId": "i-0a1b2c3d4e5f60009",
                   "LifecycleTransition": ASG_TERMINATING}
    });
    let e = one(v.clone()).unwrap();
    let Detail::AsgTermination(action) = &e.detail else {
        panic!("{:?}", e.detail)
    };
    assert_eq!(action.account.as_deref(), Some("111111111111"));
    assert_eq!(action.region.as_deref(), Some("eu-west-1"));
    // Kept in the plan a continuation carries, and read back.
    let json = serde_json::to_value(action).unwrap();
    assert_eq!(json["account"], "111111111111");
    let back: LifecycleAction = serde_json::from_value(json).unwrap();
    assert_eq!(&back, action);
    // An envelope without them: none, and none written, so the JSON is what it was before.
    let mut bare = v;
    bare.as_object_mut().unwrap().remove("account");
    bare.as_object_mut().unwrap().remove("region");
    let Detail::AsgTermination(action) = one(bare).unwrap().detail else {
        panic!("not a termination")
    };
    assert_eq!(
        (action.account.as_deref(), action.region.as_deref()),
        (None, None)
    );
    let json = serde_json::to_value(&action).unwrap();
    assert!(
        json.get("account").is_none() && json.get("region").is_none(),
        "{json}"
    );
    // A plan written before the fields existed still reads.
    let old = json!({"hook_name": "drain", "asg_name": "eks-demo-ng-1", "token": "t"});
    let read: LifecycleAction = serde_json::from_value(old).unwrap();
    assert_eq!((read.account, read.region), (None, None));
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
    let lambda = decode_sqs_messages("sqs", &[msg], received());
    assert_eq!(lambda[0].event, records[0].event);
    // A missing time is still an error.
    v.as_object_mut().unwrap().remove("time");
    assert_eq!(one(v).unwrap_err().field.as_deref(), Some("time"));
}

#[test]
fn empty_health_times_are_absent_and_instance_ids_trimmed() {
    let mut v = json!({
        "id": "h1", "source": "aws.health", "detail-type": "AWS Health Event",
        "time": "2026-11-20T10:00:00Z",
        "detail": crate::domain::fixtures::health_detail(&[" i-0a1b2c3d4e5f60002\n"], " ")
    });
    v["detail"]["endTime"] = json!("");
    let e = one(v).unwrap();
    assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60002"]);
    assert_eq!(goes_at(&e, &Config::default()), None);
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
    use crate::domain::inbound::continuation::Continuation;
    use crate::domain::keys::ContinuationKey;
    let body = spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string();
    let key = ContinuationKey::new([1; 32]);
    let record = |c: &Continuation| {
        let batch = json!({"Records": [{"messageId": "m1", "body": c.body(&key)}]});
        decode_value("b.json", batch, received()).unwrap().remove(0)
    };
    let ok = Continuation::first(received(), received(), a_plan(), &body);
    let r = record(&ok);
    assert!(r.event.is_ok() && r.continuation.is_some());
    let far = parse_time("2999-01-01T00:00:00Z").unwrap();
    let cases = [
        (
            Continuation::first(far, received(), a_plan(), &body),
            "startedAt",
        ),
        (
            Continuation::first(received(), far, a_plan(), &body),
            "sentAt",
        ),
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
            "version": 2, "pass": 1, "startedAt": t, "sentAt": t, "plan": a_plan(), "body": body
        }})
        .to_string();
        let batch = json!({"Records": [{"messageId": "m1", "body": body}]});
        let r = decode_value("b.json", batch, received()).unwrap().remove(0);
        assert!(r.event.is_err(), "{t}");
    }
}

#[test]
fn a_continuation_whose_plan_is_not_a_plan_is_malformed_naming_the_field() {
    use crate::domain::inbound::continuation::Continuation;
    use crate::domain::keys::ContinuationKey;
    let body = spot("e1", json!("i-0a1b2c3d4e5f60001")).to_string();
    let signed = Continuation::first(received(), received(), a_plan(), &body)
        .body(&ContinuationKey::new([1; 32]));
    let mut message: Value = serde_json::from_str(&signed).unwrap();
    for plan in [json!({}), json!("a plan"), json!({"event_id": 3})] {
        message["forewarnContinuation"]["plan"] = plan.clone();
        let batch = json!({"Records": [{"messageId": "m1", "body": message.to_string()}]});
        let r = decode_value("b.json", batch, received()).unwrap().remove(0);
        let err = r.event.unwrap_err();
        assert_eq!(
            err.field.as_deref(),
            Some("body.forewarnContinuation.plan"),
            "{plan}: {err}"
        );
        assert!(err.message.starts_with("not a plan: "), "{err}");
        assert!(r.continuation.is_none());
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

fn block_event(detail_type: &str, detail: Value) -> Value {
    json!({
        "version": "0", "id": "cb1", "detail-type": detail_type, "source": "aws.ec2",
        "account": "123456789012", "time": "2026-11-20T10:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0b1c2d3e4f5a60001"],
        "detail": detail
    })
}

#[test]
fn capacity_block_warnings_in_both_spellings_name_the_reservation_and_its_end() {
    let detail = json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001",
                        "end-date": "2026-11-20T10:40:00Z"});
    for detail_type in [
        "Capacity Block Expiration Warning",
        "Capacity Block Reservation Expiration Warning",
    ] {
        let e = one(block_event(detail_type, detail.clone())).unwrap();
        assert_eq!(e.kind, EventKind::CapacityBlockExpiration, "{detail_type}");
        assert!(
            e.instance_ids.is_empty(),
            "looked up, never taken from the event"
        );
        assert_eq!(
            e.detail,
            Detail::CapacityBlock {
                reservation_id: "cr-0b1c2d3e4f5a60001".into(),
                end_date: parse_time("2026-11-20T10:40:00Z"),
                block: None,
                part: false,
            }
        );
        // The instances begin to terminate 30 minutes before the end.
        assert_eq!(
            goes_at(&e, &Config::default()),
            parse_time("2026-11-20T10:10:00Z")
        );
    }
    // Without an end: 10 minutes after the warning.
    let e = one(block_event(
        "Capacity Block Expiration Warning",
        json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001"}),
    ))
    .unwrap();
    assert_eq!(
        goes_at(&e, &Config::default()),
        parse_time("2026-11-20T10:10:00Z")
    );
    for detail_type in [
        "Capacity Block Delivered",
        "Capacity Block Reservation Delivered",
    ] {
        let e = one(block_event(detail_type, detail.clone())).unwrap();
        assert_eq!(e.kind, EventKind::CapacityBlockDelivered, "{detail_type}");
        assert_eq!(
            goes_at(&e, &Config::default()),
            parse_time("2026-11-20T10:10:00Z")
        );
    }
}

#[test]
fn a_capacity_block_warning_without_a_reservation_fails_naming_the_field() {
    for (detail, field, message) in [
        (json!({}), "detail.capacity-reservation-id", "missing"),
        (
            json!({"capacity-reservation-id": "i-0a1b2c3d4e5f60001"}),
            "detail.capacity-reservation-id",
            "`i-0a1b2c3d4e5f60001` is not a capacity reservation id (cr- and 17 hex digits)",
        ),
        (
            json!({"capacity-reservation-id": 7}),
            "detail.capacity-reservation-id",
            "expected a string, found a number",
        ),
        (
            json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001", "end-date": "soon"}),
            "detail.end-date",
            "`soon` is not an RFC 3339 or RFC 1123 time",
        ),
    ] {
        let e = one(block_event("Capacity Block Expiration Warning", detail)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field));
        assert!(e.message.contains(message), "{}", e.message);
    }
}

#[test]
fn a_capacity_block_plan_drains_by_the_termination_start_and_refuses_an_odcr() {
    use crate::domain::facts::{BlockFacts, InstanceFacts};
    let mut e = one(block_event(
        "Capacity Block Expiration Warning",
        json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001", "end-date": "2026-11-20T10:40:00Z"}),
    ))
    .unwrap();
    let facts = BlockFacts {
        reservation_id: "cr-0b1c2d3e4f5a60001".into(),
        instance_type: Some("p5.48xlarge".into()),
        zone: Some("us-east-1a".into()),
        zone_id: Some("use1-az1".into()),
        end_date: parse_time("2026-11-20T10:40:00Z"),
        state: Some("active".into()),
        capacity_block: Some(true),
    };
    e.instance_ids = vec!["i-0a1b2c3d4e5f60010".into()];
    let instance = InstanceFacts {
        instance_id: "i-0a1b2c3d4e5f60010".into(),
        instance_type: Some("p5.48xlarge".into()),
        zone_id: Some("use1-az1".into()),
        capacity_type: Some(crate::domain::pool::CapacityType::OnDemand),
        ..Default::default()
    };
    let instances = BTreeMap::from([(instance.instance_id.clone(), instance)]);
    let config = Config {
        cluster: Some(ClusterId::at(&Place::default(), "demo")),
        ..Config::default()
    };
    if let Detail::CapacityBlock { block, .. } = &mut e.detail {
        *block = Some(facts.clone());
    }
    let plan = decide(&e, Facts::new(&instances, &[]), &config);
    assert_eq!(plan.ignored, None);
    // The event says the capacity: a block's pool, whatever the instance's facts say.
    assert_eq!(
        plan.pools[0].pool.to_string(),
        "capacity-block#p5.48xlarge#use1-az1"
    );
    assert!(plan.pools[0].unavailable_until.is_some());
    assert_eq!(
        plan.also_keys,
        [
            "sweep:capacity-block-expiration:cr-0b1c2d3e4f5a60001/123456789012/us-east-1/demo@1795171200"
        ]
    );
    assert_eq!(
        crate::domain::plan::drain_deadline(&e, &config),
        parse_time("2026-11-20T10:10:00Z").unwrap() - config.deadline_margin
    );
    // A reservation EC2 says is no Capacity Block: refused, nothing planned.
    if let Detail::CapacityBlock { block, .. } = &mut e.detail {
        *block = Some(BlockFacts {
            capacity_block: Some(false),
            ..facts.clone()
        });
    }
    let plan = decide(&e, Facts::new(&instances, &[]), &config);
    assert!(
        plan.ignored
            .as_deref()
            .unwrap()
            .contains("is not a Capacity Block")
    );
    assert!(plan.actions.is_empty() && plan.pools.is_empty());
    // A delivery records the block's pool, available.
    let d = one(block_event(
        "Capacity Block Delivered",
        json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001"}),
    ))
    .unwrap();
    let mut d = d;
    if let Detail::CapacityBlock { block, .. } = &mut d.detail {
        *block = Some(facts);
    }
    let plan = decide(&d, Facts::new(&instances, &[]), &config);
    assert!(plan.actions.is_empty());
    assert_eq!(plan.pools.len(), 1);
    assert_eq!(plan.pools[0].unavailable_until, None);
}

#[test]
fn a_part_of_a_blocks_warning_names_its_instances_and_has_an_id_of_its_own() {
    let part = json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001",
                      "end-date": "2026-11-20T10:40:00Z",
                      "instance-ids": ["i-0a1b2c3d4e5f60010"]});
    let e = one(block_event("Capacity Block Expiration Warning", part)).unwrap();
    assert_eq!(e.id, "cb1#i-0a1b2c3d4e5f60010");
    assert_eq!(e.instance_ids, ["i-0a1b2c3d4e5f60010"]);
    assert!(matches!(e.detail, Detail::CapacityBlock { part: true, .. }));
    let many: Vec<String> = (0..11)
        .map(|n| format!("i-0a1b2c3d4e5f600{n:02}"))
        .collect();
    for (detail_type, ids, field, message) in [
        (
            "Capacity Block Expiration Warning",
            json!([]),
            "detail.instance-ids",
            "expected 1 to 10 instance ids",
        ),
        (
            "Capacity Block Expiration Warning",
            json!(many),
            "detail.instance-ids",
            "expected 1 to 10 instance ids",
        ),
        (
            "Capacity Block Expiration Warning",
            json!("i-0a1b2c3d4e5f60010"),
            "detail.instance-ids",
            "expected an array, found a string",
        ),
        (
            "Capacity Block Expiration Warning",
            json!(["vol-1"]),
            "detail.instance-ids[0]",
            "`vol-1` is not an EC2 instance id",
        ),
        (
            "Capacity Block Delivered",
            json!(["i-0a1b2c3d4e5f60010"]),
            "detail.instance-ids",
            "only a Capacity Block's expiration warning has parts",
        ),
    ] {
        let detail =
            json!({"capacity-reservation-id": "cr-0b1c2d3e4f5a60001", "instance-ids": ids});
        let err = one(block_event(detail_type, detail)).unwrap_err();
        assert_eq!(err.field.as_deref(), Some(field), "{err}");
        assert!(err.message.contains(message), "{}", err.message);
    }
}

#[test]
fn a_message_of_lambdas_sqs_event_reads_every_field_used_and_leaves_the_rest() {
    let raw = json!({
        "messageId": "m1", "receiptHandle": "r1", "body": "{}",
        "attributes": {"SentTimestamp": "1795168900123", "ApproximateReceiveCount": "2"},
        "messageAttributes": {}, "md5OfBody": "x", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"
    });
    let msg: SqsMessage = serde_json::from_value(raw).unwrap();
    assert_eq!(msg.message_id.as_deref(), Some("m1"));
    assert_eq!(msg.receipt_handle.as_deref(), Some("r1"));
    assert_eq!(msg.body.as_deref(), Some("{}"));
    assert_eq!(msg.attributes["ApproximateReceiveCount"], "2");
    let arn = msg.event_source_arn.as_deref();
    assert_eq!(arn, Some("arn:aws:sqs:us-east-1:123456789012:q"));
    let sent = DateTime::from_timestamp_millis(1_795_168_900_123).unwrap();
    assert_eq!(msg.sent_at(received()), sent);
    let null = json!({"messageId": "m2", "attributes": null});
    let msg: SqsMessage = serde_json::from_value(null).unwrap();
    assert!(msg.attributes.is_empty());
}
