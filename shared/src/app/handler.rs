//! The interruption handler as a Lambda function sees it: an SQS batch (answered with a partial
//! batch response, so that only failed messages come back) or a bare EventBridge event (for rules
//! that target the function directly: a failure is an error, so Lambda retries it and sends it to
//! the on-failure destination).

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::app::pipeline::{Limits, Pipeline};
use crate::app::telemetry::observe;
use crate::domain::config::{Config, Mode};
use crate::domain::event::{self, Record};
use crate::domain::report::{Outcome, Report, Tally};
use crate::ports::{Executor, InstanceDirectory, NodeDirectory, Notifier, PoolStore};

/// A payload the handler could not take at all.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("the payload is neither an SQS batch nor an EventBridge event: {0}")]
    Payload(String),
    #[error(
        "SQS message at Records[{index}] has no messageId: it could not be reported failed alone, so the whole batch fails"
    )]
    NoMessageId { index: usize },
    #[error("event {origin} failed: {reason}")]
    EventFailed { origin: String, reason: String },
}

/// Everything the handler needs, built once per cold start (see [`Handler::from_env`] in
/// [`crate::app::wiring`]).
pub struct Handler {
    pub config: Config,
    /// What it may change: plan, dry run or act.
    pub mode: Mode,
    pub store: Arc<dyn PoolStore>,
    pub instances: Arc<dyn InstanceDirectory>,
    pub nodes: Arc<dyn NodeDirectory>,
    /// `None`: no live cluster (plan and record, no cluster action).
    pub executor: Option<Arc<dyn Executor>>,
    /// Tells people what was done (the webhook), when configured.
    pub notifier: Option<Arc<dyn Notifier>>,
    /// Events handled at once within a batch.
    pub concurrency: usize,
    /// Work stops this long before the Lambda's deadline, so the answer still gets out.
    pub safety_margin: Duration,
}

/// What one invocation did.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The answer to return to Lambda.
    pub response: Value,
    pub reports: Vec<Report>,
}

impl Handler {
    fn limits(&self, deadline: Option<tokio::time::Instant>) -> Limits {
        Limits {
            concurrency: self.concurrency,
            deadline: deadline.map(|d| d.checked_sub(self.safety_margin).unwrap_or(d)),
        }
    }

    async fn process(
        &self,
        records: &[Record],
        now: DateTime<Utc>,
        deadline: Option<tokio::time::Instant>,
    ) -> Vec<Report> {
        let pipeline = Pipeline {
            config: &self.config,
            mode: self.mode,
            store: self.store.as_ref(),
            instances: self.instances.as_ref(),
            nodes: self.nodes.as_ref(),
            executor: self.executor.as_deref(),
        };
        let limits = self.limits(deadline);
        let reports = pipeline.process_with(records, now, limits).await;
        observe(&reports);
        if let Some(notifier) = &self.notifier {
            let delivery = notifier.notify(&reports, limits.deadline).await;
            if delivery != Default::default() {
                tracing::info!(
                    sent = delivery.sent,
                    failed = delivery.failed,
                    "webhook messages"
                );
            }
        }
        reports
    }

    /// Handles an SQS batch: every failed record's message id goes in `batchItemFailures`.
    pub async fn handle_sqs(
        &self,
        batch: &SqsEvent,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(SqsBatchResponse, Vec<Report>), HandlerError> {
        if let Some(index) = batch
            .records
            .iter()
            .position(|m| m.message_id.as_deref().is_none_or(str::is_empty))
        {
            return Err(HandlerError::NoMessageId { index });
        }
        let now = Utc::now();
        let records = event::decode_sqs_event("sqs", &batch.records, now);
        let reports = self.process(&records, now, deadline).await;
        let mut response = SqsBatchResponse::default();
        for report in reports.iter().filter(|r| r.outcome == Outcome::Failed) {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = report.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
        let tally = Tally::of(&reports);
        tracing::info!(
            records = reports.len(),
            acted = tally.acted,
            planned = tally.planned,
            ignored = tally.ignored,
            duplicate = tally.duplicate,
            failed = tally.failed,
            "batch handled"
        );
        Ok((response, reports))
    }

    /// Handles whatever Lambda passed: an SQS batch or a bare EventBridge event.
    pub async fn invoke(
        &self,
        payload: Value,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Invocation, HandlerError> {
        if payload.get("Records").is_some() {
            let batch: SqsEvent = serde_json::from_value(payload)
                .map_err(|e| HandlerError::Payload(format!("not an SQS event: {e}")))?;
            let (response, reports) = self.handle_sqs(&batch, deadline).await?;
            let response = serde_json::to_value(&response)
                .map_err(|e| HandlerError::Payload(e.to_string()))?;
            return Ok(Invocation { response, reports });
        }
        if !payload.is_object() {
            return Err(HandlerError::Payload("expected a JSON object".to_string()));
        }
        let now = Utc::now();
        let records = event::decode_value("eventbridge", payload, now)
            .map_err(|e| HandlerError::Payload(e.to_string()))?;
        let reports = self.process(&records, now, deadline).await;
        if let Some(failed) = reports.iter().find(|r| r.outcome == Outcome::Failed) {
            return Err(HandlerError::EventFailed {
                origin: failed
                    .event_id
                    .clone()
                    .unwrap_or_else(|| failed.origin.clone()),
                reason: failed.reason.clone().unwrap_or_default(),
            });
        }
        let response =
            serde_json::to_value(&reports).map_err(|e| HandlerError::Payload(e.to_string()))?;
        Ok(Invocation { response, reports })
    }
}

/// Epoch milliseconds before this are not an epoch deadline (2001-09-09).
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// The deadline of a Lambda invocation (epoch milliseconds) as a tokio instant. Lambda sends an
/// epoch time; cargo-lambda's local emulator sends the timeout itself (e.g. `600000`), which is
/// taken as time left from now, so that a local replay is bounded the same way.
pub fn deadline_from_epoch_ms(deadline_ms: u64) -> tokio::time::Instant {
    let left = if deadline_ms < EPOCH_MS_FLOOR {
        Duration::from_millis(deadline_ms)
    } else {
        let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
        Duration::from_millis(deadline_ms.saturating_sub(now_ms))
    };
    tracing::debug!(
        deadline_ms,
        time_left_ms = left.as_millis() as u64,
        "invocation deadline"
    );
    tokio::time::Instant::now() + left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::embedded::EmbeddedStore;
    use crate::ports::{NoInstances, NoNodes};
    use serde_json::json;

    fn handler(dir: &std::path::Path) -> Handler {
        Handler {
            config: Config::default(),
            store: Arc::new(EmbeddedStore::open(dir).unwrap()),
            instances: Arc::new(NoInstances),
            nodes: Arc::new(NoNodes),
            executor: None,
            notifier: None,
            mode: Mode::Act,
            concurrency: 4,
            safety_margin: Duration::from_secs(1),
        }
    }

    fn spot(id: &str) -> String {
        json!({"id": id, "source": "aws.ec2", "detail-type": crate::domain::event::DT_SPOT,
               "time": "2026-11-20T10:00:00Z", "detail": {"instance-id": "i-0a1b2c3d4e5f60001"}})
        .to_string()
    }

    #[test]
    fn deadlines_from_lambda_and_from_the_local_emulator() {
        let now = tokio::time::Instant::now();
        let in_a_minute = u64::try_from(Utc::now().timestamp_millis()).unwrap() + 60_000;
        let left = deadline_from_epoch_ms(in_a_minute) - now;
        assert!(
            left > Duration::from_secs(58) && left <= Duration::from_secs(61),
            "{left:?}"
        );
        let past = deadline_from_epoch_ms(in_a_minute - 120_000) - now;
        assert!(
            past < Duration::from_secs(1),
            "a past deadline leaves no time: {past:?}"
        );
        let relative = deadline_from_epoch_ms(600_000) - now;
        assert!(relative >= Duration::from_secs(599) && relative <= Duration::from_secs(601));
    }

    #[tokio::test]
    async fn partial_batch_response_names_only_failed_messages() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let payload = json!({"Records": [
            {"messageId": "ok", "body": spot("e1")},
            {"messageId": "bad", "body": "{oops"},
            {"messageId": "other", "body": "{\"detail-type\": \"Something\"}"},
        ]});
        let inv = h.invoke(payload, None).await.unwrap();
        assert_eq!(
            inv.response,
            json!({"batchItemFailures": [{"itemIdentifier": "bad"}]})
        );
        assert_eq!(inv.reports[2].outcome, Outcome::Ignored);
    }

    fn hook_notification(event: &str, token: Option<&str>) -> String {
        let mut v = json!({
            "Origin": "AutoScalingGroup", "LifecycleHookName": "forewarn-drain",
            "Destination": "EC2", "AccountId": "123456789012", "RequestId": "5e1f0c3a",
            "AutoScalingGroupName": "eks-demo-ng-1", "Service": "AWS Auto Scaling",
            "Time": "2026-11-20T10:01:20.187Z", "EC2InstanceId": "i-0a1b2c3d4e5f60009",
        });
        if event == crate::domain::event::ASG_TEST_NOTIFICATION {
            v["Event"] = json!(event);
        } else {
            v["LifecycleTransition"] = json!(event);
        }
        if let Some(token) = token {
            v["LifecycleActionToken"] = json!(token);
        }
        v.to_string()
    }

    #[tokio::test]
    async fn partial_batch_response_on_hook_notifications_test_notifications_and_warnings() {
        use crate::domain::event::{ASG_TERMINATING, ASG_TEST_NOTIFICATION, EventKind};
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let eventbridge_test = json!({
            "version": "0", "id": "d3f5a7c9", "source": "aws.autoscaling",
            "detail-type": crate::domain::event::DT_ASG_TERMINATE,
            "time": "2026-11-20T10:01:32Z",
            "detail": {"AutoScalingGroupName": "eks-demo-ng-1", "Event": ASG_TEST_NOTIFICATION}
        })
        .to_string();
        let payload = json!({"Records": [
            {"messageId": "hook", "body": hook_notification(ASG_TERMINATING, Some("tok-1")),
             "attributes": {"SentTimestamp": "1795168880214"}},
            {"messageId": "test", "body": hook_notification(ASG_TEST_NOTIFICATION, None)},
            {"messageId": "eb-test", "body": eventbridge_test},
            {"messageId": "warning", "body": spot("e1")},
            {"messageId": "launch", "body": hook_notification("autoscaling:EC2_INSTANCE_LAUNCHING", Some("tok-2"))},
            {"messageId": "no-token", "body": hook_notification(ASG_TERMINATING, None)},
        ]});
        let inv = h.invoke(payload.clone(), None).await.unwrap();
        assert_eq!(
            inv.response,
            json!({"batchItemFailures": [{"itemIdentifier": "no-token"}]}),
            "only the hook notification without a token comes back"
        );
        let outcomes: Vec<(Option<&str>, Outcome)> = inv
            .reports
            .iter()
            .map(|r| (r.message_id.as_deref(), r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            vec![
                (Some("hook"), Outcome::Planned),
                (Some("test"), Outcome::Ignored),
                (Some("eb-test"), Outcome::Ignored),
                (Some("warning"), Outcome::Planned),
                (Some("launch"), Outcome::Ignored),
                (Some("no-token"), Outcome::Failed),
            ]
        );
        let hook = &inv.reports[0];
        assert_eq!(hook.kind, Some(EventKind::AsgTermination));
        assert_eq!(hook.event_id.as_deref(), Some("lifecycle-action:tok-1"));
        for r in &inv.reports[1..3] {
            let reason = r.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("test notification"), "{reason}");
        }
        let launch = inv.reports[4].reason.as_deref().unwrap_or_default();
        assert!(launch.contains("EC2_INSTANCE_LAUNCHING"), "{launch}");
        let failed = inv.reports[5].reason.as_deref().unwrap_or_default();
        assert!(
            failed.contains("field `LifecycleActionToken`: missing"),
            "{failed}"
        );
        assert!(failed.contains("messageId no-token"), "{failed}");

        // Delivered again: the hook notification is a duplicate (its id is its token's).
        let again = h.invoke(payload, None).await.unwrap();
        assert_eq!(again.reports[0].outcome, Outcome::Duplicate);
    }

    #[tokio::test]
    async fn a_message_without_id_fails_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let payload = json!({"Records": [{"body": spot("e1")}]});
        let err = h.invoke(payload, None).await.unwrap_err();
        assert!(
            matches!(err, HandlerError::NoMessageId { index: 0 }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn bare_eventbridge_events() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let inv = h
            .invoke(serde_json::from_str(&spot("e9")).unwrap(), None)
            .await
            .unwrap();
        assert_eq!(inv.reports[0].outcome, Outcome::Planned);
        let err = h
            .invoke(json!({"id": "x", "source": "aws.ec2", "detail-type": crate::domain::event::DT_SPOT, "time": "2026-11-20T10:00:00Z", "detail": {}}), None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("detail.instance-id"), "{err}");
        assert!(h.invoke(json!([1]), None).await.is_err());
    }
}
