//! Auto Scaling (source `aws.autoscaling`): the lifecycle actions of terminate and launch
//! lifecycle hooks, as EventBridge delivers them and as the hook sends them straight to a queue
//! (its notification target), and the test notifications Auto Scaling sends when a hook or
//! notification is created (ignored).
//!
//! An `EC2 Instance-terminate Lifecycle Action` through EventBridge
//! (`events/09-asg-terminate-lifecycle.json`):
//!
//! ```json
//! {
//!   "version": "0",
//!   "id": "f7516ee2-8526-462b-a740-ab81c24bf0e6",
//!   "detail-type": "EC2 Instance-terminate Lifecycle Action",
//!   "source": "aws.autoscaling",
//!   "account": "123456789012",
//!   "time": "2026-11-20T10:00:32Z",
//!   "region": "us-east-1",
//!   "resources": [
//!     "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:2a132d18-cbf4-4df4-a4ec-541cd001f118:autoScalingGroupName/eks-demo-ng-1"
//!   ],
//!   "detail": {
//!     "Origin": "AutoScalingGroup",
//!     "Destination": "EC2",
//!     "LifecycleActionToken": "168c6c3d-d370-48df-af77-8b8852e0806c",
//!     "AutoScalingGroupName": "eks-demo-ng-1",
//!     "LifecycleHookName": "forewarn-drain",
//!     "EC2InstanceId": "i-0a1b2c3d4e5f60009",
//!     "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
//!     "NotificationMetadata": "{\"cluster\":\"demo\"}"
//!   }
//! }
//! ```
//!
//! The same lifecycle action sent by the hook straight to the queue, as an SQS message's body
//! (`events/19-asg-hook-notification-sqs.json`): no envelope, the fields at the top level.
//!
//! ```json
//! {
//!   "Origin": "AutoScalingGroup",
//!   "LifecycleHookName": "forewarn-drain",
//!   "Destination": "EC2",
//!   "AccountId": "123456789012",
//!   "RequestId": "5e1f0c3a-7b2d-4e9f-a6c8-1d3b5f7e9a20",
//!   "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
//!   "AutoScalingGroupName": "eks-demo-ng-1",
//!   "Service": "AWS Auto Scaling",
//!   "Time": "2026-11-20T10:01:20.187Z",
//!   "EC2InstanceId": "i-0a1b2c3d4e5f60009",
//!   "LifecycleActionToken": "3f2a6b1c-9d4e-4c7a-8b5f-0e1d2c3b4a59",
//!   "NotificationMetadata": "{\"cluster\":\"demo\"}"
//! }
//! ```
//!
//! An `EC2 Instance-launch Lifecycle Action` (`events/23-asg-launch-lifecycle.json`) has the same
//! `detail`, with `"LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"`; a launching
//! hook's notification sent straight to the queue likewise. Its action is completed once the
//! instance's node is Ready.
//!
//! A test notification (the same fields in an EventBridge `detail`:
//! `events/20-asg-test-notification-eventbridge.json`):
//!
//! ```json
//! {
//!   "AccountId": "123456789012",
//!   "RequestId": "0d6c8e4a-2f1b-4a3c-b5d7-9e1f3a5c7e02",
//!   "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:2a132d18-cbf4-4df4-a4ec-541cd001f118:autoScalingGroupName/eks-demo-ng-1",
//!   "AutoScalingGroupName": "eks-demo-ng-1",
//!   "Service": "AWS Auto Scaling",
//!   "Event": "autoscaling:TEST_NOTIFICATION",
//!   "Time": "2026-11-20T10:01:28.015Z"
//! }
//! ```

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::fields::{Fields, InstanceId, Parsed, Text, unsupported};
use super::{
    DT_ASG_LAUNCH, DT_ASG_TERMINATE, DecodeError, Detail, Event, EventKind, LifecycleAction,
    synthetic_id,
};

/// The `Service` of an Auto Scaling notification sent straight to a queue.
pub const ASG_SERVICE: &str = "AWS Auto Scaling";
/// The lifecycle transition of a terminate hook: the node is drained, then the action completed.
pub const ASG_TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";
/// The lifecycle transition of a launch hook: the action is completed once the node is Ready.
pub const ASG_LAUNCHING: &str = "autoscaling:EC2_INSTANCE_LAUNCHING";
/// What Auto Scaling sends when a hook or notification is created.
pub const ASG_TEST_NOTIFICATION: &str = "autoscaling:TEST_NOTIFICATION";

/// What an Auto Scaling notification is (a lifecycle action, a test notification), and where
/// and when one sent straight to a queue was sent.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Head {
    event: Option<String>,
    lifecycle_transition: Option<String>,
    account_id: Option<String>,
    #[serde(rename = "AutoScalingGroupARN")]
    group_arn: Option<String>,
    time: Option<String>,
}

impl Head {
    /// Whether it is a test notification (`Event` or `LifecycleTransition` is
    /// `autoscaling:TEST_NOTIFICATION`).
    fn is_test(&self) -> bool {
        [&self.event, &self.lifecycle_transition]
            .iter()
            .any(|s| s.as_deref() == Some(ASG_TEST_NOTIFICATION))
    }

    /// The kind of the lifecycle action it names, or why it names none to handle (a test
    /// notification, another transition).
    fn kind(&self) -> Result<EventKind, String> {
        match self.lifecycle_transition.as_deref() {
            _ if self.is_test() => Err(format!(
                "Auto Scaling test notification ({ASG_TEST_NOTIFICATION}), sent when a lifecycle hook or notification is created: nothing to do"
            )),
            Some(ASG_TERMINATING) => Ok(EventKind::AsgTermination),
            Some(ASG_LAUNCHING) => Ok(EventKind::AsgLaunch),
            Some(other) => Err(format!(
                "Auto Scaling lifecycle transition `{other}`: only {ASG_TERMINATING} and \
                 {ASG_LAUNCHING} are handled"
            )),
            None => Err(format!(
                "Auto Scaling notification `{}` is not a lifecycle action",
                self.event.as_deref().unwrap_or_default()
            )),
        }
    }
}

/// The lifecycle action of a hook's notification.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Action {
    #[serde(rename = "EC2InstanceId")]
    instance: InstanceId,
    lifecycle_hook_name: Text,
    auto_scaling_group_name: Text,
    lifecycle_action_token: Text,
}

impl Action {
    /// The instance and its lifecycle action of `kind` (a launch or a termination), completed
    /// in `account` and `region` (where the group is; `None`: the deployment's own).
    fn parsed(self, kind: EventKind, account: Option<String>, region: Option<String>) -> Parsed {
        let action = LifecycleAction {
            hook_name: self.lifecycle_hook_name.0,
            asg_name: self.auto_scaling_group_name.0,
            token: self.lifecycle_action_token.0,
            account,
            region,
        };
        let detail = match kind {
            EventKind::AsgLaunch => Detail::AsgLaunch(action),
            _ => Detail::AsgTermination(action),
        };
        (kind, vec![self.instance.0], detail)
    }
}

/// The `detail` of an EventBridge `EC2 Instance-terminate Lifecycle Action` or `EC2
/// Instance-launch Lifecycle Action` (`kind`) whose envelope names `account` and `region`: a
/// lifecycle action, or a test notification (unsupported, with the reason). A
/// `LifecycleTransition` that is not the detail-type's is an error: the event contradicts
/// itself.
pub(crate) fn lifecycle_detail(
    f: &Fields<'_>,
    detail: &Value,
    kind: EventKind,
    account: Option<String>,
    region: Option<String>,
) -> Result<Parsed, DecodeError> {
    let head: Head = f.read(detail, "detail")?;
    if let Err(why) = head.kind()
        && head.is_test()
    {
        return Ok(unsupported(why));
    }
    let action: Action = f.read(detail, "detail")?;
    let (expected, detail_type) = match kind {
        EventKind::AsgLaunch => (ASG_LAUNCHING, DT_ASG_LAUNCH),
        _ => (ASG_TERMINATING, DT_ASG_TERMINATE),
    };
    if let Some(other) = head.lifecycle_transition.filter(|t| t != expected) {
        return Err(f.err(
            "detail.LifecycleTransition",
            format!("`{other}` in an event of detail-type `{detail_type}` (expected {expected})"),
        ));
    }
    Ok(action.parsed(kind, account, region))
}

/// An Auto Scaling notification sent straight to the queue (a lifecycle hook whose notification
/// target is the queue): no `source` or `detail-type`, and the `Service` of Auto Scaling or the
/// fields of a lifecycle action or a test notification at the top level.
pub(crate) fn is_notification(v: &Value) -> bool {
    v.get("source").is_none()
        && v.get("detail-type").is_none()
        && (v.get("Service").and_then(Value::as_str) == Some(ASG_SERVICE)
            || ["LifecycleTransition", "LifecycleActionToken", "Event"]
                .iter()
                .any(|k| v.get(*k).is_some()))
}

/// Parses a lifecycle hook's own notification. A terminating transition is an `asg-termination`,
/// a launching one an `asg-launch`, each with an id derived from the `LifecycleActionToken` (so
/// a redelivery is a duplicate), completed in the notification's account and its group's
/// region; a test notification (or any other transition) is unsupported, ignored with the
/// reason. It takes the EventBridge kind's `source` and `detail-type`, so that it is planned
/// alike.
pub(crate) fn notification(
    f: &Fields<'_>,
    v: &Value,
    received: DateTime<Utc>,
) -> Result<Event, DecodeError> {
    let head: Head = f.read(v, "")?;
    let region = (head.group_arn.as_deref())
        .and_then(|arn| arn.split(':').nth(3))
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let (id, (kind, instance_ids, detail)) = match head.kind() {
        Err(why) => (synthetic_id(v), unsupported(why)),
        Ok(kind) => {
            let action: Action = f.read(v, "")?;
            let id = format!("lifecycle-action:{}", action.lifecycle_action_token.0);
            (
                id,
                action.parsed(kind, head.account_id.clone(), region.clone()),
            )
        }
    };
    let time = f.event_time(head.time.as_deref(), "Time", kind, received)?;
    Ok(Event {
        id,
        kind,
        time,
        region,
        account: head.account_id,
        instance_ids,
        detail,
    })
}
