//! Lambda's SQS event at the edge: its messages become the plain [`SqsMessage`]s the way in
//! reads ([`crate::domain::inbound`]), so that `aws_lambda_events` stays out of the domain.

use aws_lambda_events::event::sqs as lambda;

use crate::domain::inbound::SqsMessage;

impl From<&lambda::SqsMessage> for SqsMessage {
    fn from(m: &lambda::SqsMessage) -> SqsMessage {
        SqsMessage {
            message_id: m.message_id.clone(),
            receipt_handle: m.receipt_handle.clone(),
            body: m.body.clone(),
            attributes: m
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            event_source_arn: m.event_source_arn.clone(),
        }
    }
}

/// The messages of a Lambda SQS event, in order.
pub fn messages(event: &lambda::SqsEvent) -> Vec<SqsMessage> {
    event.records.iter().map(SqsMessage::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lambda_message_reads_as_its_json_does() {
        let raw = json!({
            "messageId": "m1", "receiptHandle": "r1", "body": "{}",
            "attributes": {"SentTimestamp": "1795168900123", "ApproximateReceiveCount": "2"},
            "messageAttributes": {}, "md5OfBody": "x", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"
        });
        let event: lambda::SqsEvent = serde_json::from_value(json!({"Records": [raw]})).unwrap();
        let plain: SqsMessage = serde_json::from_value(raw).unwrap();
        assert_eq!(messages(&event), vec![plain.clone()]);
        assert_eq!(plain.attributes["ApproximateReceiveCount"], "2");
        assert_eq!(
            plain.event_source_arn.as_deref(),
            Some("arn:aws:sqs:us-east-1:123456789012:q")
        );
    }
}
