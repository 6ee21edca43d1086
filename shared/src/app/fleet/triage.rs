//! Triage by cluster (issue 59): an invocation takes on at most what its share of a cluster's
//! API server cordons in about a second ([`takes`]) of that cluster's messages (first-time
//! events and drains' continuations alike: a batch of many passes of one cluster would hold
//! one execution environment's share for as long); the batch's others of that cluster go back
//! to the queue at once, in the cluster's message group
//! (`account/region/name`, see [`crate::domain::inbound::continuation::message_group`]), so that
//! the fair queue makes the cluster a tenant of its own and no invocation waits on a busy
//! cluster's API share while another cluster's warnings wait to be read. A message sent back is
//! the message as it came (nothing it did not carry is added, so it needs no signature of its
//! own; a continuation keeps its own): read again, it is routed and triaged again like any
//! other; the ledger makes a copy also handled in the end (its invocation died after sending
//! it) a duplicate, as it does a continuation's pass run twice.

use std::collections::BTreeSet;
use std::time::Duration;

use super::split::{Destination, Share};
use crate::domain::inbound::continuation::{Tenant, message_group};
use crate::domain::report::{Outcome, Report};
use crate::ports::ContinuationQueue;

/// How far ahead an invocation takes on a cluster's cordons: what its share of the cluster's
/// API server starts within this many seconds.
const HORIZON_SECONDS: f64 = 1.0;
/// Requests of one cordon: the node read, then patched.
const REQUESTS_PER_CORDON: f64 = 2.0;

/// The messages of one cluster an invocation takes on, from the execution
/// environment's client-side limit of each cluster's API server (`(requests/s, burst)`, see
/// `FOREWARN_KUBE_QPS`): the cordons it starts within [`HORIZON_SECONDS`] (at least one).
/// Without a limit, every one (`None`).
pub fn takes(limit: Option<(f64, u32)>) -> Option<usize> {
    let (qps, burst) = limit?;
    let requests = f64::from(burst) + qps * HORIZON_SECONDS;
    Some(((requests / REQUESTS_PER_CORDON).floor() as usize).max(1))
}

/// `share`, one cluster's, split into what the invocation works on and what goes back to the
/// queue: its messages (not a kept copy, which is no message; each a whole message of the
/// batch: not a part of an event split between clusters, at a position in `parted`) past the
/// first `takes`, in batch order.
pub fn triage(share: Share, takes: usize, parted: &BTreeSet<usize>) -> (Share, Share) {
    let (mut now, mut later) = (Share::default(), Share::default());
    let mut taken = 0;
    for (record, position) in share.records.into_iter().zip(share.positions) {
        let movable = record.event.is_ok()
            && !record.kept
            && record.body.is_some()
            && record.queue_arn.is_some()
            && !parted.contains(&position);
        taken += usize::from(movable);
        let to = if movable && taken > takes {
            &mut later
        } else {
            &mut now
        };
        to.records.push(record);
        to.positions.push(position);
    }
    (now, later)
}

/// Sends each record of `later` (what [`triage`] left for later of a cluster's share, bound
/// `to`) back to the queue it came from as it came, in the cluster's message group, at once
/// (ten at a time): reported requeued once sent (its message is then deleted), failed
/// (retryable: the message comes back) when not. `takes`: what the invocation took on.
pub async fn requeue(
    queue: &dyn ContinuationQueue,
    to: &Destination,
    later: Share,
    takes: usize,
) -> (Share, Vec<Report>) {
    let cluster = match to {
        Destination::Cluster(Some(id)) => Some(id.to_string()),
        _ => None,
    };
    let group = &message_group(cluster.as_deref(), Tenant::Cluster);
    let (cluster, named) = (&cluster, cluster.as_deref().unwrap_or("served"));
    let sends = later.records.iter().map(|record| async move {
        let report = Report {
            cluster: cluster.clone(),
            ..Report::new(record)
        };
        let (Some(arn), Some(body)) = (&record.queue_arn, &record.body) else {
            return report.failed("internal: a record sent back without its message".into());
        };
        match queue.send(arn, group, body, Duration::ZERO).await {
            Ok(()) => report.ended(
                Outcome::Requeued,
                format!(
                    "cluster {named} is busy: more of its messages in this batch than an \
                     invocation takes on ({takes}); sent back to the queue in the cluster's \
                     message group {group}, to be handled there in its turn"
                ),
            ),
            Err(e) => report.failed(format!(
                "cluster {named} is busy, and the event could not be sent back to the queue in \
                 its message group {group}: {e}; the message comes back"
            )),
        }
    });
    let reports = futures::StreamExt::buffered(futures::stream::iter(sends), 10);
    let reports = futures::StreamExt::collect(reports).await;
    (later, reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fixtures;
    use crate::domain::inbound::{SqsMessage, decode_sqs_messages};

    fn share(bodies: &[String]) -> Share {
        let messages: Vec<SqsMessage> = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| SqsMessage {
                message_id: Some(format!("m{i}")),
                body: Some(body.clone()),
                event_source_arn: Some("arn:aws:sqs:us-east-1:123456789012:q".into()),
                ..SqsMessage::default()
            })
            .collect();
        let records = decode_sqs_messages("sqs", &messages, chrono::Utc::now());
        Share {
            positions: (10..10 + records.len()).collect(),
            records,
        }
    }

    fn spot(n: usize) -> String {
        let instance = format!("i-0a1b2c3d4e5f6{n:04}");
        fixtures::spot_json(&format!("e{n}"), &instance, "2026-11-26T10:00:00Z").to_string()
    }

    #[test]
    fn an_invocation_takes_what_its_share_cordons_in_a_second() {
        // The deployed share: 200 requests/s over 10 environments, 20/s and a burst of 2 each.
        assert_eq!(takes(Some((20.0, 2))), Some(11));
        assert_eq!(takes(Some((0.5, 1))), Some(1), "at least one");
        assert_eq!(takes(None), None, "no limit: every one");
    }

    #[test]
    fn first_time_events_past_what_is_taken_go_back_in_batch_order() {
        let bodies: Vec<String> = (0..5).map(spot).collect();
        let (now, later) = triage(share(&bodies), 3, &BTreeSet::new());
        assert_eq!(now.positions, [10, 11, 12]);
        assert_eq!(later.positions, [13, 14]);
        assert_eq!(later.records[0].body.as_deref(), Some(bodies[3].as_str()));
        // A part of an event split between clusters is never sent back (its message is the
        // whole event), nor is what no event came of: an undecodable message here.
        let mut bodies = bodies;
        bodies[1] = "not JSON".into();
        let (now, later) = triage(share(&bodies), 2, &BTreeSet::from([12]));
        assert_eq!(now.positions, [10, 11, 12, 13]);
        assert_eq!(later.positions, [14]);
        // A kept copy, or a record without the queue it came from, is never sent back; a
        // drain's continuation is, as any message.
        let mut s = share(&bodies[..4]);
        s.records[0].kept = true;
        s.records[2].queue_arn = None;
        s.records[3].continuation = Some(Default::default());
        let (now, later) = triage(s, 0, &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![10, 11, 12], vec![13])
        );
    }
}
