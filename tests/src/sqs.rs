//! The event source mapping, played by the tests as Lambda plays it: receive a batch from SQS,
//! hand it to the handler as the JSON of the `SqsEvent` Lambda would build, delete only the messages that are
//! not in `batchItemFailures`, and leave the failed ones alone: each stays invisible until its
//! visibility ends — the queue's visibility timeout, unless the handler changed it — and is then
//! received again (and moved to the DLQ by the queue's redrive policy after `maxReceiveCount`).
//! The poller waits for messages in flight and for delayed ones (a drain's continuations), up to
//! its patience: a message that only the queue's visibility timeout (900 s in the stack) would
//! bring back is not seen again by a test.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::Client;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use forewarn::app::handler::Handler;
use forewarn::domain::report::Report;

/// What one drain of the queue did.
#[derive(Debug, Default)]
pub struct Drained {
    /// Every report, in the order batches were handled.
    pub reports: Vec<Report>,
    /// Messages deleted after success.
    pub deleted: usize,
    /// Messages handed back after failure.
    pub returned: usize,
    pub batches: usize,
}

/// Converts a received message to the record Lambda passes.
pub fn lambda_message(m: &aws_sdk_sqs::types::Message, queue_arn: &str) -> SqsMessage {
    let mut out = SqsMessage::default();
    out.message_id = m.message_id().map(str::to_string);
    out.receipt_handle = m.receipt_handle().map(str::to_string);
    out.body = m.body().map(str::to_string);
    out.md5_of_body = m.md5_of_body().map(str::to_string);
    out.attributes = m
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_string(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    out.event_source = Some("aws:sqs".into());
    out.event_source_arn = Some(queue_arn.to_string());
    out.aws_region = Some("us-east-1".into());
    out
}

/// A queue and the handler its messages go to, as an event source mapping joins them: the
/// queue's URL and ARN (received from and deleted through `sqs`) and the handler.
#[derive(Clone, Copy)]
pub struct Mapping<'a> {
    pub sqs: &'a Client,
    pub queue_url: &'a str,
    pub queue_arn: &'a str,
    pub handler: &'a Handler,
}

/// Receives and handles batches until the queue answers empty twice in a row or `max_batches`
/// were handled.
pub async fn drain(
    sqs: &Client,
    queue_url: &str,
    queue_arn: &str,
    handler: &Handler,
    batch_size: i32,
    max_batches: usize,
) -> anyhow::Result<Drained> {
    let mapping = Mapping {
        sqs,
        queue_url,
        queue_arn,
        handler,
    };
    drain_within(mapping, batch_size, max_batches, None).await
}

/// How long a drain waits for messages in flight (received, failed, not yet visible again).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// [`drain`], each batch given `budget` (when set) as the Lambda's time left: the handler's
/// deadline is the moment the batch was received plus `budget`.
pub async fn drain_within(
    mapping: Mapping<'_>,
    batch_size: i32,
    max_batches: usize,
    budget: Option<Duration>,
) -> anyhow::Result<Drained> {
    drain_patiently(mapping, batch_size, max_batches, budget, PATIENCE).await
}

/// [`drain_within`], waiting at most `patience` in all for messages in flight to come back: the
/// drain ends when nothing is visible and nothing is in flight, or when `patience` has passed.
pub async fn drain_patiently(
    mapping: Mapping<'_>,
    batch_size: i32,
    max_batches: usize,
    budget: Option<Duration>,
    patience: Duration,
) -> anyhow::Result<Drained> {
    let Mapping {
        sqs,
        queue_url,
        queue_arn,
        handler,
    } = mapping;
    let started = Instant::now();
    let mut drained = Drained::default();
    while drained.batches < max_batches {
        let received = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(batch_size)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .wait_time_seconds(0)
            .send()
            .await?;
        let messages = received.messages();
        if messages.is_empty() {
            // Visible ones count too: one may have become visible since the receive. SQS's
            // counts are approximate (moto's too, as a message's visibility changes): the queue
            // is taken for empty only when two readings a second apart say so.
            if started.elapsed() >= patience || settled_empty(sqs, queue_url).await? {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        drained.batches += 1;
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| lambda_message(m, queue_arn))
            .collect();
        let deadline = budget.map(|b| handler.clock.now() + forewarn::ports::span(b));
        let payload = serde_json::to_value(&event)?;
        let invocation = handler.invoke(payload, deadline).await?;
        let (response, reports) = (invocation.response, invocation.reports);
        let failures = response["batchItemFailures"].as_array().cloned();
        let failures = failures.unwrap_or_default();
        let failed: Vec<&str> = failures
            .iter()
            .filter_map(|f| f["itemIdentifier"].as_str())
            .collect();
        for m in messages {
            let handle = m.receipt_handle().unwrap_or_default();
            if failed.contains(&m.message_id().unwrap_or_default()) {
                // Left alone, as the event source mapping does.
                drained.returned += 1;
            } else {
                sqs.delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await?;
                drained.deleted += 1;
            }
        }
        drained.reports.extend(reports);
    }
    Ok(drained)
}

/// The queue's approximate counts: (visible, in flight, delayed). One call asking for every
/// attribute, so no count is missed.
async fn counts(sqs: &Client, queue_url: &str) -> anyhow::Result<(usize, usize, usize)> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await?;
    let count = |name: QueueAttributeName| {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    Ok((
        count(QueueAttributeName::ApproximateNumberOfMessages),
        count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// Messages received and not yet deleted or visible again, and messages sent with a delay not
/// yet over (a drain's continuations).
pub async fn in_flight(sqs: &Client, queue_url: &str) -> anyhow::Result<usize> {
    let (_, in_flight, delayed) = counts(sqs, queue_url).await?;
    Ok(in_flight + delayed)
}

/// Every message of the queue: visible, in flight or delayed.
/// Whether the queue holds nothing, by two readings of its approximate counts a second apart.
async fn settled_empty(sqs: &Client, queue_url: &str) -> anyhow::Result<bool> {
    if left(sqs, queue_url).await? != 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(left(sqs, queue_url).await? == 0)
}

pub async fn left(sqs: &Client, queue_url: &str) -> anyhow::Result<usize> {
    let (visible, in_flight, delayed) = counts(sqs, queue_url).await?;
    Ok(visible + in_flight + delayed)
}

/// The bodies of every message now in a queue (received with visibility 0 so they stay).
pub async fn peek_bodies(sqs: &Client, queue_url: &str) -> anyhow::Result<Vec<String>> {
    let received = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .wait_time_seconds(0)
        .send()
        .await?;
    Ok(received
        .messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_string))
        .collect())
}

/// `events` (EventBridge events) as one SQS batch of Lambda's event source mapping: messages
/// `m0`, `m1`, ... in order, each delivered once.
pub fn lambda_batch(events: &[serde_json::Value]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            serde_json::json!({"messageId": format!("m{i}"), "body": e.to_string(),
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:forewarn",
                "attributes": {"ApproximateReceiveCount": "1"}})
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// An event queue as the stack makes it: `<name>-events`, with the stack's visibility timeout
/// (900 s: what a message no handler changed waits), redriven to `<name>-dlq` after
/// `max_receives` receives.
pub struct EventQueue {
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
}

/// The stack's visibility timeout of the event queue, for the default function timeout.
pub const VISIBILITY_TIMEOUT: &str = "900";

impl EventQueue {
    pub async fn create(
        sqs: &Client,
        name: &str,
        max_receives: usize,
    ) -> anyhow::Result<EventQueue> {
        let dlq_url = sqs
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .send()
            .await?
            .queue_url()
            .unwrap_or_default()
            .to_string();
        let dlq_arn = queue_arn(sqs, &dlq_url).await?;
        let redrive =
            serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receives});
        let url = sqs
            .create_queue()
            .queue_name(format!("{name}-events"))
            .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
            .attributes(QueueAttributeName::VisibilityTimeout, VISIBILITY_TIMEOUT)
            .send()
            .await?
            .queue_url()
            .unwrap_or_default()
            .to_string();
        let arn = queue_arn(sqs, &url).await?;
        Ok(EventQueue { url, arn, dlq_url })
    }

    /// The queue and `handler`, as the event source mapping joins them.
    pub fn mapping<'a>(&'a self, sqs: &'a Client, handler: &'a Handler) -> Mapping<'a> {
        Mapping {
            sqs,
            queue_url: &self.url,
            queue_arn: &self.arn,
            handler,
        }
    }
}

/// A queue's ARN.
pub async fn queue_arn(sqs: &Client, url: &str) -> anyhow::Result<String> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?;
    attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("{url}: no QueueArn"))
}
