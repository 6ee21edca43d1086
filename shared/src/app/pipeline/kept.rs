//! Retries kept in the execution environment: a drain pass that left a pod its disruption
//! budget refused queues its next pass as always (the drain's durable chain), and keeps a copy
//! of that continuation here, due once the budget's other pods are likely gone
//! ([`BUDGET_WAIT`]). The environment's next invocation after that runs the copy first, beside
//! its batch: the eviction is tried again then, instead of behind every message queued before
//! its continuation (in a mass interruption, thousands of other nodes' first passes, which
//! would bring it after the instance is gone).
//!
//! A kept copy is this environment's own signed continuation, verified as any other; its pass
//! is quiet (`Pass::Drain { quiet }`): it evicts what is left and records no Event, not even the
//! drain's end when it ends the drain; and it queues nothing and keeps nothing. The queued copy
//! does all that when it comes (a second pass over a node whose pods are evicted finds nothing
//! to evict). A copy whose queued twin is in the same batch is dropped. An environment that ends
//! loses its copies and nothing else.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// How long after a budget's refusal the eviction is tried again from the environment: the
/// default grace period of the pod that holds the budget (evicted about when this one was
/// refused, it goes within its grace).
pub const BUDGET_WAIT: Duration = Duration::from_secs(30);

/// At most this many copies are kept (beyond, a refusal waits for its queued continuation).
pub const KEPT_MAX: usize = 1_000;

/// A continuation message body and its queue's ARN, due at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub due: DateTime<Utc>,
    pub body: String,
    pub queue_arn: String,
}

/// The copies one execution environment keeps (see the module doc).
#[derive(Debug, Default)]
pub struct KeptRetries(Mutex<Vec<Kept>>);

impl KeptRetries {
    /// Keeps `kept`, unless [`KEPT_MAX`] are kept already; whether it was.
    pub fn keep(&self, kept: Kept) -> bool {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= KEPT_MAX {
            return false;
        }
        all.push(kept);
        true
    }

    /// Takes out the copies due by `now`, earliest first; those for which `queued` says their
    /// twin is in the batch are dropped.
    pub fn take_due(&self, now: DateTime<Utc>, queued: impl Fn(&str) -> bool) -> Vec<Kept> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (mut due, later): (Vec<Kept>, Vec<Kept>) = all.drain(..).partition(|k| k.due <= now);
        *all = later;
        due.retain(|k| !queued(&k.body));
        due.sort_by_key(|k| k.due);
        due
    }

    /// How many copies are kept.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn kept(due: i64, body: &str) -> Kept {
        Kept {
            due: at(due),
            body: body.into(),
            queue_arn: "arn:q".into(),
        }
    }

    #[test]
    fn copies_come_out_when_due_earliest_first_and_twins_in_the_batch_are_dropped() {
        let k = KeptRetries::default();
        for (due, body) in [(30, "b"), (10, "a"), (50, "c"), (20, "twin")] {
            assert!(k.keep(kept(due, body)));
        }
        assert!(k.take_due(at(5), |_| false).is_empty());
        let due = k.take_due(at(30), |body| body == "twin");
        let bodies: Vec<&str> = due.iter().map(|k| k.body.as_str()).collect();
        assert_eq!(bodies, ["a", "b"]);
        assert_eq!(k.len(), 1, "c is not due yet; the twin is gone");
        assert_eq!(k.take_due(at(60), |_| false), [kept(50, "c")]);
        assert!(k.is_empty());
    }

    #[test]
    fn no_more_than_the_most_are_kept() {
        let k = KeptRetries::default();
        for i in 0..KEPT_MAX {
            assert!(k.keep(kept(i as i64, "x")));
        }
        assert!(!k.keep(kept(0, "one too many")));
        assert_eq!(k.len(), KEPT_MAX);
    }
}
