//! SQS, for the two things the handler does to its queue itself: bringing failed messages back
//! sooner than the queue's visibility timeout (`ChangeMessageVisibilityBatch`, at most ten
//! entries a call), and queueing the continuation of a drain (`SendMessage` with
//! `DelaySeconds`, in its cluster's or its account's message group, which makes the standard
//! queue a fair queue: see [`crate::domain::inbound::continuation::message_group`]). The queue
//! is named by the records' `eventSourceARN`; its URL is derived from the ARN, so no
//! `GetQueueUrl` call or permission is needed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;

use super::aws::{aws_error_text, call_error, failure_kind, kind_of_code};
use crate::domain::retry::visibility_seconds;
use crate::ports::{ContinuationQueue, FailureKind, PortError, Redeliver, Redelivery};

/// [`Redelivery`] (and the [`ContinuationQueue`]) through the AWS SDK's client.
#[derive(Debug, Clone)]
pub struct SqsRedelivery(pub Client);

/// The URL of the queue of `arn` (`arn:aws:sqs:us-east-1:123456789012:q` →
/// `https://sqs.us-east-1.amazonaws.com/123456789012/q`); `None` when it is not an SQS ARN.
pub fn queue_url(arn: &str) -> Option<String> {
    let parts: Vec<&str> = arn.split(':').collect();
    let [_, partition, "sqs", region, account, name] = parts.as_slice() else {
        return None;
    };
    if region.is_empty() || account.is_empty() || name.is_empty() {
        return None;
    }
    let domain = match *partition {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    Some(format!("https://sqs.{region}.{domain}/{account}/{name}"))
}

#[async_trait]
impl ContinuationQueue for SqsRedelivery {
    async fn send(
        &self,
        queue_arn: &str,
        group: &str,
        body: &str,
        delay: std::time::Duration,
    ) -> Result<(), PortError> {
        let not_sqs = || PortError::new(queue_arn, FailureKind::Invalid, "not an SQS queue ARN");
        let url = queue_url(queue_arn).ok_or_else(not_sqs)?;
        let seconds = crate::domain::inbound::continuation::delay_seconds(delay);
        self.0
            .send_message()
            .queue_url(url)
            .message_body(body)
            .message_group_id(group)
            .delay_seconds(i32::try_from(seconds).unwrap_or(900))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| call_error(queue_arn, e))
    }
}

#[async_trait]
impl Redelivery for SqsRedelivery {
    async fn redeliver(&self, messages: &[Redeliver]) -> Result<(), PortError> {
        let mut by_queue: BTreeMap<&str, Vec<&Redeliver>> = BTreeMap::new();
        for m in messages {
            by_queue.entry(m.queue_arn.as_str()).or_default().push(m);
        }
        // Each failure, of its kind.
        let mut problems: Vec<(FailureKind, String)> = Vec::new();
        for (arn, messages) in &by_queue {
            let Some(url) = queue_url(arn) else {
                let problem = format!("{arn:?} is not an SQS queue ARN");
                problems.push((FailureKind::Invalid, problem));
                continue;
            };
            for chunk in messages.chunks(10) {
                let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| {
                        let seconds = visibility_seconds(m.delay);
                        ChangeMessageVisibilityBatchRequestEntry::builder()
                            .id(format!("m{i}"))
                            .receipt_handle(&m.receipt_handle)
                            .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
                            .build()
                            .ok()
                    })
                    .collect();
                let sent = (self.0.change_message_visibility_batch())
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await;
                match sent {
                    Ok(out) => problems.extend(out.failed().iter().map(|f| {
                        let (code, said) = (f.code(), f.message().unwrap_or_default());
                        let problem = format!("{url}: entry {}: {code}: {said}", f.id());
                        (kind_of_code(code).unwrap_or_default(), problem)
                    })),
                    Err(e) => {
                        problems.push((failure_kind(&e), format!("{url}: {}", aws_error_text(&e))))
                    }
                }
            }
        }
        // The kind of every failure when they are of one kind, else `Unknown`; none: all set.
        let (kinds, problems): (Vec<FailureKind>, Vec<String>) = problems.into_iter().unzip();
        let same = |a: FailureKind, b| if a == b { a } else { FailureKind::Unknown };
        let Some(kind) = kinds.into_iter().reduce(same) else {
            return Ok(());
        };
        let queues = by_queue.into_keys().collect::<Vec<_>>().join(", ");
        Err(PortError::new(queues, kind, problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_urls_from_arns() {
        assert_eq!(
            queue_url("arn:aws:sqs:us-east-1:123456789012:forewarn-events").as_deref(),
            Some("https://sqs.us-east-1.amazonaws.com/123456789012/forewarn-events")
        );
        assert_eq!(
            queue_url("arn:aws-cn:sqs:cn-north-1:123456789012:q").as_deref(),
            Some("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q")
        );
        for bad in [
            "",
            "arn:aws:sns:us-east-1:1:t",
            "arn:aws:sqs:us-east-1::q",
            "q",
        ] {
            assert_eq!(queue_url(bad), None, "{bad}");
        }
    }
}
