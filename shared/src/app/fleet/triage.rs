//! Triage by cluster (issue 59): a busy cluster's messages do not hold an invocation while
//! another cluster's warnings wait to be read. What goes back to the queue goes at once, in the
//! message group of the cluster's continuations (the cluster's `account/region/name`, or in an
//! organization its account's; see [`crate::domain::inbound::continuation::message_group`]),
//! so that the fair queue makes the cluster (or account) a tenant of its own, its messages
//! worked on there in their turn:
//!
//! - a cluster's **new warnings while it is busy**: a burst of them (a batch whose new warnings
//!   were all that cluster's, more than one: the queue's head was its alone) was in this
//!   execution environment less than [`HOLD`] ago (see `Fleet::busy`). Batches that mix
//!   clusters' warnings make none busy: each cluster has its part of every batch already. Past
//!   what the environment's rate limit of the cluster lets out at once ([`keeps`], so that its
//!   share of the API server is not idle while the burst is read), each goes back marked as
//!   triaged ([`crate::domain::inbound::sqs::TRIAGED_KEY`]): read again, it is worked on, never
//!   sent back for this again. So a burst is read at the speed of sending it back, while the
//!   warnings already triaged keep every environment's share of the cluster's API server at
//!   work.
//! - a cluster's **drains' continuations while its triaged warnings are worked on** here (its
//!   last share here had some, less than [`HOLD`] ago: [`Busy::Backlog`]), while each drain
//!   has more than half its window left ([`held`]): behind the triaged warnings still queued
//!   in the group, so that the cluster's cordons come before its drains, as they do without
//!   triage (its new warnings, each a tenant of its own, are all read before any
//!   continuation).
//! - past **what an invocation takes on** of one cluster ([`takes`]: what its share of the
//!   cluster's API server cordons in about a second), any message of it: a batch larger than
//!   that would hold one environment's share for longer.
//!
//! A drain's continuation goes back as it came (it keeps its signature), a warning with its
//! original body inside. The ledger makes an event also handled in the end (its invocation died
//! after sending it back) a duplicate, as it does a continuation's pass run twice.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::split::Share;
use crate::domain::inbound::Record;
use crate::domain::inbound::continuation::{Tenant, message_group};
use crate::domain::inbound::sqs::triaged_body;
use crate::domain::report::{Outcome, Report};
use crate::ports::ContinuationQueue;

/// How far ahead an invocation takes on a cluster's cordons: what its share of the cluster's
/// API server starts within this many seconds.
const HORIZON_SECONDS: f64 = 1.0;
/// Requests of one cordon: the node read, then patched.
const REQUESTS_PER_CORDON: f64 = 2.0;
/// How long a cluster stays busy in an execution environment after a burst of its new warnings
/// there ended (its share of the batch worked on, or sent back).
pub const HOLD: Duration = Duration::from_secs(1);

/// The messages of one cluster an invocation takes on, from the execution
/// environment's client-side limit of each cluster's API server (`(requests/s, burst)`, see
/// `FOREWARN_KUBE_QPS`): the cordons it starts within [`HORIZON_SECONDS`] (at least one).
/// Without a limit, or unless the deployment serves `several` clusters (one has nobody behind
/// it in the queue: what it sent back would only wait behind its own messages), every one
/// (`None`).
pub fn takes(limit: Option<(f64, u32)>, several: bool) -> Option<usize> {
    let (qps, burst) = limit.filter(|_| several)?;
    let requests = f64::from(burst) + qps * HORIZON_SECONDS;
    Some(((requests / REQUESTS_PER_CORDON).floor() as usize).max(1))
}

/// A new warning: a first-time event (not a drain's continuation, not one triaged already).
fn new_warning(record: &Record) -> bool {
    record.event.is_ok() && record.continuation.is_none() && !record.triaged && !record.kept
}

/// The new warnings of `share`, one cluster's share of a batch. The share is a burst (its
/// cluster then busy in this execution environment for a while, see `Fleet::busy`) when they
/// are more than one and every new warning of the batch (`of_batch`).
pub fn new_warnings(share: &Share) -> usize {
    share.records.iter().filter(|r| new_warning(r)).count()
}

/// The new warnings a busy cluster's share works on rather than sends back: the cordons its
/// environment's rate limit of the cluster lets out at once now (`free`: its free requests), so
/// that the environment's share of the API server is not left idle while a burst is read, and
/// the reading waits for no token. Without a limit, none.
pub fn keeps(free: Option<f64>) -> usize {
    (free.unwrap_or_default() / REQUESTS_PER_CORDON).floor() as usize
}

/// Why a cluster is busy in an execution environment, for a while (see `Fleet::busy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Busy {
    /// A burst of its new warnings was read here: its new warnings go back.
    Burst,
    /// Its last share here had triaged warnings: its drains' continuations go back ([`held`])
    /// until a share without any.
    Backlog,
}

/// How one cluster's share of a batch is triaged (see [`triage`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    /// The messages of the cluster an invocation takes on ([`takes`]).
    pub takes: usize,
    /// While a burst of the cluster's is read here ([`Busy::Burst`]): the new warnings its
    /// share keeps ([`keeps`]).
    pub keeps: Option<usize>,
    /// While the cluster's triaged warnings are worked on here ([`Busy::Backlog`]): now.
    pub backlog: Option<DateTime<Utc>>,
}

/// Whether `record`, a drain's continuation, waits while its cluster's triaged warnings are
/// worked on (`now`): while its drain has more than half its window left (from its event's time
/// to the plan's first deadline, not yet past). No drain waits past that, nor a continuation
/// without a deadline. What decides is the message's own plan, before its signature is verified: a forged
/// one is sent back as it came, then refused when worked on.
pub fn held(record: &Record, now: DateTime<Utc>) -> bool {
    let Some(continuation) = &record.continuation else {
        return false;
    };
    let plan = &continuation.plan;
    let due = plan.actions.iter().filter_map(|a| a.deadline).min();
    due.is_some_and(|due| due > now && due - now > (due - plan.time) / 2)
}

/// `share`, one cluster's, split into what the invocation works on and what goes back to the
/// queue, in batch order: while a burst of the cluster's is read (`keeps`), its new warnings
/// past the first `keeps`; while its triaged warnings are worked on (`backlog`), its drains'
/// continuations that wait ([`held`]); of the rest, its messages past the first `takes`. Only
/// whole messages of the batch go back: not a kept copy (no message), not a part of an event
/// split between clusters (at a position in `parted`), not what is not from a queue or decoded
/// to no event.
pub fn triage(share: Share, turn: &Turn, parted: &BTreeSet<usize>) -> (Share, Share) {
    let (mut now, mut later) = (Share::default(), Share::default());
    let (mut taken, mut kept) = (0, 0);
    for (record, position) in share.records.into_iter().zip(share.positions) {
        let movable = record.event.is_ok()
            && !record.kept
            && record.body.is_some()
            && record.queue_arn.is_some()
            && !parted.contains(&position);
        let mut take = || {
            taken += 1;
            taken > turn.takes
        };
        let waits = turn.backlog.is_some_and(|now| held(&record, now));
        let back = movable
            && (waits
                || match turn.keeps {
                    Some(keeps) if new_warning(&record) => {
                        kept += 1;
                        kept > keeps || take()
                    }
                    _ => take(),
                });
        let to = if back { &mut later } else { &mut now };
        to.records.push(record);
        to.positions.push(position);
    }
    (now, later)
}

/// Sends each record of `later` (what [`triage`] left for later of a cluster's share, of
/// `cluster` (`None`: the one cluster of a deployment that names none), by `turn`) back to the
/// queue it came from, at once (ten at a time), in the message group of the cluster's
/// continuations (`tenant`'s: the cluster's, or in an organization its account's, so that the
/// account's cordons keep coming before its drains): a continuation as it came, a warning as
/// triaged. Each is reported requeued once sent, saying why (its message
/// is then deleted), failed (retryable: the message comes back) when not.
pub async fn requeue(
    queue: &dyn ContinuationQueue,
    (cluster, tenant): (Option<&str>, Tenant),
    later: Share,
    turn: &Turn,
) -> (Share, Vec<Report>) {
    let group = &message_group(cluster, tenant);
    let named = cluster.unwrap_or("served");
    let sends = later.records.iter().map(|record| async move {
        let report = Report {
            cluster: cluster.map(str::to_string),
            ..Report::new(record)
        };
        let (Some(arn), Some(body)) = (&record.queue_arn, &record.body) else {
            return report.failed("internal: a record sent back without its message".into());
        };
        let why = if turn.keeps.is_some() && new_warning(record) {
            format!("a burst of its new warnings was here less than {HOLD:?} ago")
        } else if turn.backlog.is_some_and(|now| held(record, now)) {
            "its triaged warnings are worked on here: its drain waits behind them while it \
             has more than half its window left"
                .to_string()
        } else {
            format!(
                "more of its messages in this batch than an invocation takes on ({})",
                turn.takes
            )
        };
        let sent = match record.continuation {
            Some(_) => body.clone(),
            None => triaged_body(body, named),
        };
        match queue.send(arn, group, &sent, Duration::ZERO).await {
            Ok(()) => report.ended(
                Outcome::Requeued,
                format!(
                    "cluster {named} is busy ({why}): sent back to the queue in the message \
                     group {group}, to be worked on there in its turn"
                ),
            ),
            Err(e) => report.failed(format!(
                "cluster {named} is busy ({why}), and the event could not be sent back to the \
                 queue in its message group {group}: {e}; the message comes back"
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
    use crate::ports::RecordingQueue;

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

    fn turn(takes: usize, keeps: Option<usize>) -> Turn {
        Turn {
            takes,
            keeps,
            backlog: None,
        }
    }

    fn spot(n: usize) -> String {
        let instance = format!("i-0a1b2c3d4e5f6{n:04}");
        fixtures::spot_json(&format!("e{n}"), &instance, "2026-11-26T10:00:00Z").to_string()
    }

    #[test]
    fn an_invocation_takes_what_its_share_cordons_in_a_second() {
        // The deployed share: 200 requests/s over 10 environments, 20/s and a burst of 2 each.
        assert_eq!(takes(Some((20.0, 2)), true), Some(11));
        assert_eq!(takes(Some((0.5, 1)), true), Some(1), "at least one");
        assert_eq!(takes(None, true), None, "no limit: every one");
        // 200/s over 20 environments: five in a deployment of several; in one of one cluster
        // (nobody behind it), every one.
        assert_eq!(takes(Some((10.0, 1)), true), Some(5));
        assert_eq!(
            takes(Some((10.0, 1)), false),
            None,
            "one cluster: every one"
        );
    }

    #[test]
    fn first_time_events_past_what_is_taken_go_back_in_batch_order() {
        let bodies: Vec<String> = (0..5).map(spot).collect();
        let (now, later) = triage(share(&bodies), &turn(3, None), &BTreeSet::new());
        assert_eq!(now.positions, [10, 11, 12]);
        assert_eq!(later.positions, [13, 14]);
        assert_eq!(later.records[0].body.as_deref(), Some(bodies[3].as_str()));
        // A part of an event split between clusters is never sent back (its message is the
        // whole event), nor is what no event came of: an undecodable message here.
        let mut bodies = bodies;
        bodies[1] = "not JSON".into();
        let (now, later) = triage(share(&bodies), &turn(2, None), &BTreeSet::from([12]));
        assert_eq!(now.positions, [10, 11, 12, 13]);
        assert_eq!(later.positions, [14]);
        // A kept copy, or a record without the queue it came from, is never sent back; a
        // drain's continuation is, as any message.
        let mut s = share(&bodies[..4]);
        s.records[0].kept = true;
        s.records[2].queue_arn = None;
        s.records[3].continuation = Some(Default::default());
        let (now, later) = triage(s, &turn(0, None), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![10, 11, 12], vec![13])
        );
    }

    /// While its cluster is busy, a share's new warnings go back past the first it keeps
    /// (what its rate limit lets out at once), whatever it takes on; its continuations and what
    /// was triaged already are worked on (up to what it takes on).
    #[test]
    fn a_busy_clusters_new_warnings_go_back_and_what_was_triaged_is_worked_on() {
        let bodies: Vec<String> = (0..5).map(spot).collect();
        let mut s = share(&bodies);
        s.records[1].continuation = Some(Default::default());
        s.records[3].triaged = true;
        assert_eq!(new_warnings(&s), 3);
        let (now, later) = triage(s.clone(), &turn(11, Some(0)), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![11, 13], vec![10, 12, 14])
        );
        let (now, later) = triage(
            s.clone(),
            &turn(11, Some(keeps(Some(2.5)))),
            &BTreeSet::new(),
        );
        assert_eq!(
            (now.positions, later.positions),
            (vec![10, 11, 13], vec![12, 14]),
            "one cordon's requests free: one kept"
        );
        let (now, later) = triage(s.clone(), &turn(1, Some(0)), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![11], vec![10, 12, 13, 14])
        );
        let (now, later) = triage(s.clone(), &turn(2, Some(1)), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![10, 11], vec![12, 13, 14]),
            "a kept one is taken on too"
        );
        assert_eq!(keeps(None), 0, "no limit: none kept");
        let (now, later) = triage(s.clone(), &turn(11, None), &BTreeSet::new());
        assert_eq!(
            (now.positions.len(), later.positions.len()),
            (5, 0),
            "not busy"
        );
        // What was triaged already, or a continuation, is no new warning.
        s.records[0].continuation = Some(Default::default());
        s.records[4].triaged = true;
        assert_eq!(new_warnings(&s), 1);
    }

    /// While its triaged warnings are worked on here, a cluster's drains' continuations go back
    /// while each has more than half its window left (not one without a deadline); its warnings
    /// are worked on.
    #[tokio::test]
    async fn a_clusters_drains_wait_behind_its_triaged_warnings_for_half_their_window() {
        use crate::domain::inbound::continuation::Continuation;
        use crate::domain::plan::{NodeAction, Plan};
        let t0 = crate::domain::event::parse_time("2026-11-26T10:00:00Z").unwrap();
        let secs = chrono::Duration::seconds;
        let drain = |deadline: Option<i64>| Continuation {
            plan: Plan {
                time: t0,
                actions: vec![NodeAction {
                    deadline: deadline.map(|s| t0 + secs(s)),
                    ..NodeAction::default()
                }],
                ..Plan::default()
            },
            ..Continuation::default()
        };
        let bodies: Vec<String> = (0..4).map(spot).collect();
        let mut s = share(&bodies);
        s.records[0].triaged = true;
        s.records[1].continuation = Some(drain(Some(105)));
        s.records[2].continuation = Some(drain(None));
        s.records[3].continuation = Some(drain(Some(300)));
        let at = |s: i64| Turn {
            backlog: Some(t0 + secs(s)),
            ..turn(11, None)
        };
        let (now, later) = triage(s.clone(), &at(52), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions),
            (vec![10, 12], vec![11, 13])
        );
        let (now, later) = triage(s.clone(), &at(53), &BTreeSet::new());
        assert_eq!(
            (now.positions, later.positions.clone()),
            (vec![10, 11, 12], vec![13]),
            "past half its window, a drain waits no longer"
        );
        let (now, _) = triage(s.clone(), &turn(11, None), &BTreeSet::new());
        assert_eq!(now.positions.len(), 4, "no backlog: none waits");
        s.records[1].continuation = Some(drain(Some(-10)));
        assert!(!held(&s.records[1], t0 - secs(8)), "its deadline past");
        let queue = RecordingQueue::default();
        let (_, reports) = requeue(&queue, (None, Tenant::Cluster), later, &at(53)).await;
        let why = reports[0].reason.as_deref().unwrap_or_default();
        assert!(why.contains("its triaged warnings are worked on"), "{why}");
        assert_eq!(
            queue.sent.into_inner().unwrap()[0].1,
            bodies[3],
            "as it came"
        );
    }

    /// A warning goes back triaged, a continuation as it came, each in the group of the
    /// cluster's continuations: the cluster's, or in an organization its account's.
    #[tokio::test]
    async fn what_goes_back_goes_in_the_group_of_the_clusters_continuations() {
        let bodies: Vec<String> = (0..2).map(spot).collect();
        let mut later = share(&bodies);
        later.records[1].continuation = Some(Default::default());
        let prod = "123456789012/us-east-1/prod";
        for (tenant, group) in [(Tenant::Cluster, prod), (Tenant::Account, "123456789012")] {
            let queue = RecordingQueue::default();
            let from = (Some(prod), tenant);
            let (_, reports) = requeue(&queue, from, later.clone(), &turn(11, Some(0))).await;
            assert!(
                reports.iter().all(|r| r.outcome == Outcome::Requeued),
                "{reports:#?}"
            );
            let why = reports[0].reason.as_deref().unwrap_or_default();
            assert!(
                why.contains("a burst of its new warnings") && why.contains(group),
                "{why}"
            );
            let why = reports[1].reason.as_deref().unwrap_or_default();
            assert!(
                why.contains("more of its messages in this batch than"),
                "{why}"
            );
            let sent = queue.sent.into_inner().unwrap();
            let expected = [
                (group.to_string(), triaged_body(&bodies[0], prod)),
                (group.to_string(), bodies[1].clone()),
            ];
            assert_eq!(sent, expected);
        }
    }
}
