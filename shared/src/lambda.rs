//! The interruption handler as a Lambda function sees it: an SQS batch (answered with a partial
//! batch response, so that only failed messages come back) or a bare EventBridge event (for rules
//! that target the function directly: a failure is an error, so Lambda retries it and sends it to
//! the on-failure destination).

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::config::Config;
use crate::event::{self, Record};
use crate::pipeline::{Executor, Limits, Outcome, Pipeline, Report, Tally};
use crate::pool::PoolStore;
use crate::ports::{InstanceDirectory, NodeDirectory};

/// The handler could not be set up (a cold start fails loudly rather than drop events).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Store(#[from] crate::pool::StoreError),
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    #[error("connecting to the cluster: {0}")]
    Cluster(String),
    #[error("setting up the webhook: {0}")]
    Webhook(String),
}

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

/// Everything the handler needs, built once per cold start.
pub struct Handler {
    pub config: Config,
    pub store: Arc<dyn PoolStore>,
    pub instances: Arc<dyn InstanceDirectory>,
    pub nodes: Arc<dyn NodeDirectory>,
    /// `None`: dry run (plan and record, no cluster action).
    pub executor: Option<Arc<dyn Executor>>,
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
    /// Builds the handler from the environment (see the README's configuration table):
    /// `FOREWARN_TABLE` selects the DynamoDB pool table (else the embedded store);
    /// `FOREWARN_INSTANCES_FILE` / `FOREWARN_CLUSTER_STATE_FILE` plan against captured state
    /// instead of EC2 / the Kubernetes API; `FOREWARN_DRY_RUN=true` writes nothing anywhere.
    pub async fn from_env() -> Result<Handler, SetupError> {
        Handler::from_lookup(|name| std::env::var(name).ok()).await
    }

    /// [`Handler::from_env`] through `lookup`.
    pub async fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Handler, SetupError> {
        use crate::config::{ConfigError, parse_duration};
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let config = Config::from_lookup(&lookup)?;
        let dry_run = match get("FOREWARN_DRY_RUN").as_deref().map(str::trim) {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => {
                return Err(ConfigError {
                    variable: "FOREWARN_DRY_RUN".into(),
                    value: other.into(),
                    message: "not a boolean (true or false)".into(),
                }
                .into());
            }
        };
        let number = |name: &str, default: usize| -> Result<usize, ConfigError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v.trim().parse().ok().filter(|n| *n > 0).ok_or(ConfigError {
                    variable: name.into(),
                    value: v.clone(),
                    message: "not a positive whole number".into(),
                }),
            }
        };
        let concurrency = number("FOREWARN_CONCURRENCY", 8)?;
        let safety_margin = match get("FOREWARN_SAFETY_MARGIN") {
            None => Duration::from_secs(3),
            Some(v) => parse_duration(&v)
                .ok()
                .and_then(|d| d.to_std().ok())
                .ok_or(ConfigError {
                    variable: "FOREWARN_SAFETY_MARGIN".into(),
                    value: v.clone(),
                    message: "not a duration (e.g. 3s)".into(),
                })?,
        };
        // Throttling and transient errors are retried by the SDK (5 attempts unless
        // AWS_MAX_ATTEMPTS says otherwise), for every client built from this configuration.
        let sdk = crate::store::dynamo::default_retries(
            aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await,
        );
        let store: Arc<dyn PoolStore> = match get("FOREWARN_TABLE") {
            Some(table) => Arc::new(crate::store::dynamo::DynamoStore::new(
                aws_sdk_dynamodb::Client::new(&sdk),
                table,
            )),
            None => {
                let dir = get("FOREWARN_STATE_DIR")
                    .map(std::path::PathBuf::from)
                    .unwrap_or_else(crate::store::embedded::default_state_dir);
                Arc::new(crate::store::embedded::EmbeddedStore::open(&dir)?)
            }
        };
        let store: Arc<dyn PoolStore> = if dry_run {
            Arc::new(crate::pool::ReadOnlyStore(store))
        } else {
            store
        };
        let instances: Arc<dyn InstanceDirectory> = match get("FOREWARN_INSTANCES_FILE") {
            Some(path) => Arc::new(crate::snapshot::SnapshotInstances(
                crate::snapshot::load_instances(std::path::Path::new(&path))?,
            )),
            None => Arc::new(crate::ec2::Ec2Directory::from_conf(&sdk)),
        };
        let (nodes, executor) = crate::wiring::cluster(&lookup, &sdk, &config, dry_run).await?;
        if config.webhook.is_some() {
            crate::webhook::warm_up().map_err(SetupError::Webhook)?;
        }
        Ok(Handler {
            config,
            store,
            instances,
            nodes,
            executor,
            concurrency,
            safety_margin,
        })
    }

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
            store: self.store.as_ref(),
            instances: self.instances.as_ref(),
            nodes: self.nodes.as_ref(),
            executor: self.executor.as_deref(),
        };
        let limits = self.limits(deadline);
        let reports = pipeline.process_with(records, now, limits).await;
        observe(&reports);
        if let Some(webhook) = &self.config.webhook {
            let cluster = self.config.cluster_name.as_deref();
            let delivery =
                crate::webhook::deliver(webhook, &reports, cluster, limits.deadline).await;
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
        let records = event::decode_sqs_event("sqs", &batch.records);
        let reports = self.process(&records, Utc::now(), deadline).await;
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
        let records = event::decode_value("eventbridge", payload)
            .map_err(|e| HandlerError::Payload(e.to_string()))?;
        let reports = self.process(&records, Utc::now(), deadline).await;
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

/// Logs each record and, running as a Lambda function (or under cargo-lambda's emulator), writes
/// its EMF metric documents; the tests and the command line get the logs only.
pub(crate) fn observe(reports: &[Report]) {
    let done = Utc::now();
    let metrics = std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some();
    for report in reports {
        log_report(report);
        if metrics {
            for doc in crate::telemetry::emf_documents(report, done) {
                // EMF documents are log lines of their own, on stdout.
                println!("{doc}");
            }
        }
    }
}

/// One log line per record, with the fields that identify it.
fn log_report(report: &Report) {
    let kind = report.kind.map(|k| k.as_str()).unwrap_or("undecodable");
    let event_id = report.event_id.as_deref().unwrap_or("");
    let instances = report.instance_ids.join(",");
    let nodes = report
        .actions
        .iter()
        .filter_map(|a| a.node.as_deref())
        .collect::<Vec<_>>()
        .join(",");
    let pools = report
        .pools
        .iter()
        .map(|p| format!("{}#{}#{}", p.capacity_type, p.instance_type, p.zone))
        .collect::<Vec<_>>()
        .join(",");
    let actions = report
        .actions
        .iter()
        .map(|a| a.action.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let reason = report.reason.as_deref().unwrap_or("");
    if report.outcome == Outcome::Failed {
        tracing::warn!(
            event_id,
            kind,
            instances,
            nodes,
            pools,
            actions,
            outcome = report.outcome.as_str(),
            message_id = report.message_id.as_deref().unwrap_or(""),
            reason,
            "event failed"
        );
    } else {
        tracing::info!(
            event_id,
            kind,
            instances,
            nodes,
            pools,
            actions,
            outcome = report.outcome.as_str(),
            reason,
            "event handled"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{NoInstances, NoNodes};
    use crate::store::embedded::EmbeddedStore;
    use serde_json::json;

    fn handler(dir: &std::path::Path) -> Handler {
        Handler {
            config: Config::default(),
            store: Arc::new(EmbeddedStore::open(dir).unwrap()),
            instances: Arc::new(NoInstances),
            nodes: Arc::new(NoNodes),
            executor: None,
            concurrency: 4,
            safety_margin: Duration::from_secs(1),
        }
    }

    fn spot(id: &str) -> String {
        json!({"id": id, "source": "aws.ec2", "detail-type": crate::event::DT_SPOT,
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
            .invoke(json!({"id": "x", "source": "aws.ec2", "detail-type": crate::event::DT_SPOT, "time": "2026-11-20T10:00:00Z", "detail": {}}), None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("detail.instance-id"), "{err}");
        assert!(h.invoke(json!([1]), None).await.is_err());
    }
}
