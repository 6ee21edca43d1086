//! SQS as the event source mapping sees it, played in process: batches of visible messages
//! (up to the batch size, gathered over the batching window: see `mass::poll`); a message reported failed stays invisible for the visibility timeout (900 s)
//! unless the handler changed it; messages sent with a delay (a drain's continuations) become
//! visible when it ends.
//!
//! The queue is a fair queue, as SQS makes a standard queue whose messages carry a
//! `MessageGroupId` (the handler sends each continuation in its cluster's group). Per the SQS
//! developer guide ("How Amazon SQS fair queues work"): a group is a tenant, and a message
//! without one is a tenant of its own; a tenant is noisy when it has more than 10 % of the
//! messages in flight and at least 30 of its own in flight; while one is, a receive returns the
//! quiet tenants' visible messages first, oldest first, then the noisy tenants', the one with
//! the fewest in flight first. SQS also counts a tenant noisy by its share of the consumers'
//! processing time (more than 10 %); that measure is left out here, which can only make a
//! noisy tenant be recognised later than SQS would, never sooner. Without a noisy tenant the
//! queue is oldest first: the best effort of a standard queue, and the least favourable order
//! for a message sent behind a backlog.
//!
//! The event source mapping itself ([`pollers_at`]): 5 concurrent batches when messages
//! appear, then up to 300 more a minute, up to `MaximumConcurrency` (the Lambda developer
//! guide, "Scaling behavior for standard queues").

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use forewarn::domain::inbound::continuation::delay_seconds;
use forewarn::domain::retry::visibility_seconds;
use forewarn::ports::{ContinuationQueue, PortError, Redeliver, Redelivery};
use tokio::time::Instant;

/// The stack's visibility timeout: what a failed message waits unless the handler changes it.
pub(crate) const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(900);
/// A tenant is noisy above this share of the messages in flight...
const NOISY_SHARE: f64 = 0.10;
/// ...with at least this many of its own in flight.
const NOISY_AT_LEAST: usize = 30;
/// The event source mapping's concurrent batches when messages first appear.
const FIRST_POLLERS: usize = 5;
/// How many more concurrent batches it adds a minute.
const MORE_A_MINUTE: usize = 300;

/// How many concurrent batches the event source mapping runs `since` messages appeared, capped
/// by `maximum` (its `MaximumConcurrency`).
pub(crate) fn pollers_at(since: Duration, maximum: usize) -> usize {
    let more = (since.as_millis() * MORE_A_MINUTE as u128 / 60_000) as usize;
    (FIRST_POLLERS + more).min(maximum.max(1))
}

/// When the `n`th poller (from 0) starts, after messages appeared.
pub(crate) fn poller_starts(n: usize) -> Duration {
    let after = (n + 1).saturating_sub(FIRST_POLLERS) as u64;
    Duration::from_millis(after * 60_000 / MORE_A_MINUTE as u64)
}

struct Message {
    id: u64,
    body: String,
    /// Its tenant: the message group, else a tenant of its own.
    tenant: String,
    visible_at: Instant,
    receives: u32,
}

/// A received message: its id, body and receive count.
pub(crate) type Received = (u64, String, u32);

/// The queue (see the module's documentation).
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    /// How long the handler's `SendMessage` (a continuation, a warning sent back) takes.
    send_latency: Duration,
}

impl Queue {
    /// A queue whose `SendMessage` from the handler takes `latency`.
    pub(crate) fn sending_in(latency: Duration) -> Queue {
        Queue {
            send_latency: latency,
            ..Queue::default()
        }
    }
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Message>,
    in_flight: HashMap<u64, Message>,
    /// Visibility set by the handler for messages in flight.
    changed: HashMap<u64, Duration>,
    /// The messages watched (see [`Queue::watch`]): when each was first received.
    watched: HashMap<u64, Option<Instant>>,
    next: u64,
}

impl State {
    /// Whether a tenant is noisy, by the messages in flight.
    fn noisy(&self) -> impl Fn(&str) -> bool + '_ {
        let flying = self.flying();
        let all = self.in_flight.len();
        move |tenant: &str| {
            let own = flying.get(tenant).copied().unwrap_or(0);
            own >= NOISY_AT_LEAST && own as f64 > NOISY_SHARE * all as f64
        }
    }

    /// Each tenant's messages in flight.
    fn flying(&self) -> BTreeMap<&str, usize> {
        let mut flying: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.in_flight.values() {
            *flying.entry(m.tenant.as_str()).or_insert(0) += 1;
        }
        flying
    }
}

impl Queue {
    /// Queues `body` in `group` (none: a tenant of its own, as EventBridge's deliveries),
    /// visible after `delay` in whole seconds, as SQS takes it (`DelaySeconds`, rounded up as
    /// the handler's SQS client does).
    pub(crate) fn send(&self, body: String, group: Option<&str>, delay: Duration) -> u64 {
        let delay = Duration::from_secs(delay_seconds(delay).into());
        let mut s = self.state.lock().unwrap();
        s.next += 1;
        let id = s.next;
        let tenant = group.map_or_else(|| format!("message {id}"), str::to_string);
        s.waiting.push_back(Message {
            id,
            body,
            tenant,
            visible_at: Instant::now() + delay,
            receives: 0,
        });
        id
    }

    /// The messages a new message of a quiet tenant would be received after: those visible,
    /// never received, of quiet tenants (received oldest first, see [`Queue::receive`]).
    pub(crate) fn ahead(&self) -> usize {
        let now = Instant::now();
        let s = self.state.lock().unwrap();
        let noisy = s.noisy();
        let ahead = s
            .waiting
            .iter()
            .filter(|m| m.receives == 0 && m.visible_at <= now && !noisy(&m.tenant));
        ahead.count()
    }

    /// Watches `ids`: [`Queue::first_read`] tells when each was first received.
    pub(crate) fn watch(&self, ids: &[u64]) {
        let mut s = self.state.lock().unwrap();
        s.watched.extend(ids.iter().map(|id| (*id, None)));
    }

    /// When the last of the watched `ids` was first received, once every one was.
    pub(crate) fn first_read(&self, ids: &[u64]) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        let mut reads = ids.iter().map(|id| s.watched.get(id).copied().flatten());
        reads.try_fold(None, |last: Option<Instant>, at| Some(last.max(Some(at?))))?
    }

    /// Up to `max` visible messages: the quiet tenants' first, oldest first, then the noisy
    /// tenants', the one with the fewest in flight first.
    pub(crate) fn receive(&self, max: usize) -> Vec<Received> {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap();
        let (noisy, flying) = (s.noisy(), s.flying());
        // The visible messages that could be taken: every quiet one up to `max`, and up to
        // `max` of each noisy tenant, in queue order.
        let mut quiet: Vec<usize> = Vec::new();
        let mut loud: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, m) in s.waiting.iter().enumerate() {
            if m.visible_at > now {
                continue;
            }
            if !noisy(&m.tenant) {
                if quiet.len() < max {
                    quiet.push(i);
                }
            } else {
                let of = loud.entry(m.tenant.as_str()).or_default();
                if of.len() < max {
                    of.push(i);
                }
            }
            if quiet.len() == max {
                break;
            }
        }
        drop(noisy);
        let mut loud: Vec<(usize, Vec<usize>)> = loud
            .into_iter()
            .map(|(t, v)| (flying.get(t).copied().unwrap_or(0), v))
            .collect();
        loud.sort_by_key(|(flying, _)| *flying);
        let mut chosen: Vec<usize> = quiet;
        for (_, v) in loud {
            let room = max - chosen.len();
            chosen.extend(v.into_iter().take(room));
        }
        chosen.truncate(max);
        // Take them out from the back, so the indices stay right; answer in the order chosen.
        let mut order: Vec<(usize, usize)> = chosen.iter().copied().enumerate().collect();
        order.sort_by_key(|(_, i)| std::cmp::Reverse(*i));
        let mut taken: Vec<(usize, Message)> = Vec::with_capacity(order.len());
        for (rank, i) in order {
            let mut m = s.waiting.remove(i).expect("an index of the scan");
            m.receives += 1;
            if let Some(first @ None) = s.watched.get_mut(&m.id) {
                *first = Some(now);
            }
            taken.push((rank, m));
        }
        taken.sort_by_key(|(rank, _)| *rank);
        taken
            .into_iter()
            .map(|(_, m)| {
                let out = (m.id, m.body.clone(), m.receives);
                s.in_flight.insert(m.id, m);
                out
            })
            .collect()
    }

    /// Deletes the handled messages; the failed ones come back after their visibility.
    pub(crate) fn settle(&self, ids: &[u64], failed: &[u64]) {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap();
        for id in ids {
            let Some(mut m) = s.in_flight.remove(id) else {
                continue;
            };
            if failed.contains(id) {
                let visibility = s.changed.remove(id).unwrap_or(VISIBILITY_TIMEOUT);
                m.visible_at = now + visibility;
                s.waiting.push_back(m);
            }
        }
    }

    /// Nothing visible, in flight or delayed before `until`, once some message was sent (a
    /// poller that looks before the first warnings are queued waits for them, as the event
    /// source mapping does).
    pub(crate) fn idle_until(&self, until: Instant) -> bool {
        let s = self.state.lock().unwrap();
        s.next > 0 && s.in_flight.is_empty() && s.waiting.iter().all(|m| m.visible_at > until)
    }
}

#[async_trait]
impl ContinuationQueue for Queue {
    async fn send(
        &self,
        _queue_arn: &str,
        group: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), PortError> {
        tokio::time::sleep(self.send_latency).await;
        self.send(body.to_string(), Some(group), delay);
        Ok(())
    }
}

#[async_trait]
impl Redelivery for Queue {
    async fn redeliver(&self, messages: &[Redeliver]) -> Result<(), PortError> {
        let mut s = self.state.lock().unwrap();
        for m in messages {
            if let Ok(id) = m.message_id.trim_start_matches("m-").parse::<u64>() {
                // A visibility timeout is whole seconds, as the handler's SQS client sends it.
                s.changed
                    .insert(id, Duration::from_secs(visibility_seconds(m.delay).into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_idle_only_once_its_messages_are_gone_never_before_the_first() {
        let q = Queue::default();
        let later = Instant::now() + Duration::from_secs(10);
        assert!(!q.idle_until(later), "no warning queued yet: pollers wait");
        q.send("a".into(), None, Duration::ZERO);
        assert!(!q.idle_until(later));
        let got = q.receive(10);
        assert!(!q.idle_until(later), "in flight");
        q.settle(&[got[0].0], &[]);
        assert!(q.idle_until(later));
    }

    #[tokio::test]
    async fn failed_messages_stay_invisible_unless_changed_and_sends_are_delayed() {
        let q = Queue::default();
        q.send("a".into(), None, Duration::ZERO);
        q.send("b".into(), None, Duration::from_secs(60));
        q.send("c".into(), None, Duration::from_millis(1));
        let got = q.receive(10);
        assert_eq!(got.len(), 1);
        assert!(
            q.receive(10).is_empty(),
            "b is delayed; c too, by a whole second"
        );
        q.settle(&[got[0].0], &[got[0].0]);
        assert!(
            q.receive(10).is_empty(),
            "a failed: invisible for the visibility timeout"
        );
        assert!(!q.idle_until(Instant::now() + Duration::from_secs(1000)));
        let q = Queue::default();
        q.send("c".into(), None, Duration::ZERO);
        let got = q.receive(10);
        q.redeliver(&[Redeliver {
            queue_arn: "arn:aws:sqs:us-east-1:123456789012:q".into(),
            receipt_handle: String::new(),
            message_id: format!("m-{}", got[0].0),
            delay: Duration::ZERO,
        }])
        .await
        .unwrap();
        q.settle(&[got[0].0], &[got[0].0]);
        assert_eq!(
            q.receive(10).len(),
            1,
            "the handler brought it back at once"
        );
    }

    #[tokio::test]
    async fn a_quiet_groups_messages_pass_a_noisy_groups_backlog() {
        let q = Queue::default();
        for n in 0..200 {
            q.send(format!("a{n}"), Some("A"), Duration::ZERO);
        }
        // 30 of A in flight: A is noisy (all of the messages in flight, and 30 of them).
        let first: Vec<String> = (0..3).flat_map(|_| q.receive(10)).map(|m| m.1).collect();
        assert!(first.iter().all(|b| b.starts_with('a')));
        q.send("b0".into(), Some("B"), Duration::ZERO);
        q.send("b1".into(), Some("B"), Duration::ZERO);
        q.send("e".into(), None, Duration::ZERO);
        let next: Vec<String> = q.receive(10).into_iter().map(|m| m.1).collect();
        assert_eq!(&next[..3], ["b0", "b1", "e"], "{next:?}");
        assert!(
            next[3..].iter().all(|b| b.starts_with('a')),
            "then A's, to fill the batch"
        );
    }

    #[tokio::test]
    async fn without_a_noisy_tenant_the_queue_is_oldest_first() {
        let q = Queue::default();
        for n in 0..40 {
            q.send(format!("a{n}"), Some("A"), Duration::ZERO);
        }
        let _ = (q.receive(10), q.receive(10));
        q.send("b".into(), Some("B"), Duration::ZERO);
        // 20 of A in flight: fewer than 30, so A is not noisy yet.
        let next: Vec<String> = q.receive(10).into_iter().map(|m| m.1).collect();
        assert_eq!(next[0], "a20");
        assert_eq!(next.len(), 10);
        assert!(!next.contains(&"b".to_string()));
    }

    #[test]
    fn what_is_ahead_of_a_new_quiet_message_and_when_watched_ones_are_first_read() {
        let q = Queue::default();
        for n in 0..200 {
            q.send(format!("a{n}"), Some("A"), Duration::ZERO);
        }
        for n in 0..5 {
            q.send(format!("e{n}"), None, Duration::ZERO);
        }
        q.send("later".into(), None, Duration::from_secs(60));
        assert_eq!(q.ahead(), 205, "every visible message never received");
        // 30 of A in flight: A is noisy, its messages are not ahead of a quiet one.
        let _flying: Vec<Received> = (0..3).flat_map(|_| q.receive(10)).collect();
        assert_eq!(q.ahead(), 5, "the messages of tenants of their own only");
        let w0 = q.send("w0".into(), None, Duration::ZERO);
        let w1 = q.send("w1".into(), None, Duration::ZERO);
        q.watch(&[w0, w1]);
        assert_eq!(q.ahead(), 7);
        assert_eq!(q.first_read(&[w0, w1]), None, "not read yet");
        let next: Vec<String> = q.receive(6).into_iter().map(|m| m.1).collect();
        assert_eq!(next, ["e0", "e1", "e2", "e3", "e4", "w0"]);
        assert_eq!(q.first_read(&[w0, w1]), None, "w1 not read yet");
        let read = q.first_read(&[w0]).expect("w0 read");
        let _ = q.receive(1);
        let last = q.first_read(&[w0, w1]).expect("both read");
        assert!(last >= read);
        assert_eq!(q.ahead(), 0);
    }

    #[test]
    fn the_mapping_starts_with_5_batches_and_adds_300_a_minute_up_to_its_maximum() {
        assert_eq!(pollers_at(Duration::ZERO, 10), 5);
        assert_eq!(pollers_at(Duration::from_millis(400), 10), 7);
        assert_eq!(pollers_at(Duration::from_secs(60), 10), 10);
        assert_eq!(pollers_at(Duration::from_secs(60), 1000), 305);
        assert_eq!(pollers_at(Duration::ZERO, 2), 2);
        assert_eq!(poller_starts(4), Duration::ZERO);
        assert_eq!(poller_starts(5), Duration::from_millis(200));
        assert_eq!(poller_starts(9), Duration::from_secs(1));
        for n in 0..20 {
            assert_eq!(
                pollers_at(poller_starts(n), 1000),
                n.max(4) + 1,
                "poller {n}"
            );
        }
    }
}
