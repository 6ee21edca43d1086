//! The event source mapping, played by the tests: receive a batch from SQS, hand it to the
//! handler as the `SqsEvent` Lambda would build, delete only the messages that are not in
//! `batchItemFailures`. A failed message is made visible again at once (the tests stand in for
//! the visibility timeout running out), so redrive to the DLQ happens within the test.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageSystemAttributeName;
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
    drain_within(
        sqs,
        queue_url,
        queue_arn,
        handler,
        batch_size,
        max_batches,
        None,
    )
    .await
}

/// [`drain`], each batch given `budget` (when set) as the Lambda's time left: the handler's
/// deadline is the moment the batch was received plus `budget`.
pub async fn drain_within(
    sqs: &Client,
    queue_url: &str,
    queue_arn: &str,
    handler: &Handler,
    batch_size: i32,
    max_batches: usize,
    budget: Option<std::time::Duration>,
) -> anyhow::Result<Drained> {
    let mut drained = Drained::default();
    let mut empty = 0;
    while drained.batches < max_batches && empty < 2 {
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
            empty += 1;
            continue;
        }
        empty = 0;
        drained.batches += 1;
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|m| lambda_message(m, queue_arn))
            .collect();
        let deadline = budget.map(|b| tokio::time::Instant::now() + b);
        let (response, reports) = handler.handle_sqs(&event, deadline).await?;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for m in messages {
            let handle = m.receipt_handle().unwrap_or_default();
            if failed.contains(&m.message_id().unwrap_or_default()) {
                sqs.change_message_visibility()
                    .queue_url(queue_url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await?;
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
