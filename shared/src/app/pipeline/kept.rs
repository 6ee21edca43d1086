//! Retries kept in the execution environment: a drain pass that left a pod its disruption
//! budget refused queues its next pass as always (the drain's durable chain), and keeps a copy
//! of that continuation here, due once the budget's other pods are likely gone
//! ([`BUDGET_WAIT`]). The environment's next invocation after that runs the copy first, beside
//! its batch: the eviction is tried again then, instead of behind every message queued before
//! its continuation (in a mass interruption, thousands of other nodes' first passes, which
//! would bring it after the instance is gone).
//!
//! A kept copy is this environment's own signed continuation, verified as any other; its pass
//! is quiet (`DrainRole::Quiet`): it evicts what is left and records no Event, not even the
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

/// At most this many bytes of copies are kept — the sum of their bodies' lengths, each at most
/// a continuation's (SQS's 256 KiB) — whatever their number (beyond, a refusal waits for its
/// queued continuation). 4 MiB: a few thousand ordinary continuations, and a small share of an
/// execution environment's memory however large each is.
pub const KEPT_MAX_BYTES: usize = 4 * 1024 * 1024;

/// A continuation message body and its queue's ARN, due at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub due: DateTime<Utc>,
    pub body: String,
    pub queue_arn: String,
}

impl Kept {
    /// What it weighs against [`KEPT_MAX_BYTES`]: its body's and queue ARN's lengths.
    fn bytes(&self) -> usize {
        self.body.len().saturating_add(self.queue_arn.len())
    }
}

/// The copies one execution environment keeps (see the module doc).
#[derive(Debug, Default)]
pub struct KeptRetries(Mutex<Vec<Kept>>);

impl KeptRetries {
    /// Keeps `kept`, unless it would bring the copies kept past [`KEPT_MAX_BYTES`]; whether it
    /// was.
    pub fn keep(&self, kept: Kept) -> bool {
        let mut copies = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = copies.iter().map(Kept::bytes);
        if bytes.fold(kept.bytes(), usize::saturating_add) > KEPT_MAX_BYTES {
            return false;
        }
        copies.push(kept);
        true
    }

    /// Takes out the copies due by `now`, earliest first; those for which `queued` says their
    /// twin is in the batch are dropped.
    pub fn take_due(&self, now: DateTime<Utc>, queued: impl Fn(&str) -> bool) -> Vec<Kept> {
        let mut copies = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut due: Vec<Kept> = copies.extract_if(.., |k| k.due <= now).collect();
        due.retain(|k| !queued(&k.body));
        due.sort_by_key(|k| k.due);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many copies are kept, and how many bytes they weigh (see [`KEPT_MAX_BYTES`]).
    fn held(k: &KeptRetries) -> (usize, usize) {
        let copies = k.0.lock().unwrap();
        (copies.len(), copies.iter().map(Kept::bytes).sum())
    }

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
        assert_eq!(held(&k).0, 1, "c is not due yet; the twin is gone");
        assert_eq!(k.take_due(at(60), |_| false), [kept(50, "c")]);
        assert!(held(&k).0 == 0);
    }

    /// The bound is on bytes, not count: many small copies are kept (more than the old 1,000),
    /// large ones until their bodies fill [`KEPT_MAX_BYTES`], and what is taken out makes room.
    #[test]
    fn copies_are_bounded_in_bytes_not_count() {
        let k = KeptRetries::default();
        let small = kept(0, "x");
        let weight = small.bytes();
        for _ in 0..2_000 {
            assert!(k.keep(small.clone()), "small copies are kept past a count");
        }
        assert_eq!(held(&k).1, 2_000 * weight);
        assert!(k.take_due(at(0), |_| false).len() == 2_000 && held(&k).1 == 0);

        // Continuations of SQS's largest size: as many as the bytes hold, then none.
        let big = "b".repeat(256 * 1024 - "arn:q".len());
        let fit = KEPT_MAX_BYTES / (256 * 1024);
        for i in 0..fit {
            assert!(k.keep(kept(i as i64, &big)), "{i}");
        }
        assert!(!k.keep(kept(99, &big)), "past the bound");
        assert!(held(&k).1 <= KEPT_MAX_BYTES);
        assert_eq!(held(&k).0, fit);
        // A small one may still fit in what is left, never past the bound.
        let left = KEPT_MAX_BYTES - held(&k).1;
        assert_eq!(k.keep(kept(99, "s")), weight <= left);
        assert!(held(&k).1 <= KEPT_MAX_BYTES);
        // Taking the due ones out makes room again.
        let taken = k.take_due(at(0), |_| false);
        assert_eq!(taken.len(), 1);
        assert!(k.keep(kept(100, &big)));
        assert!(held(&k).1 <= KEPT_MAX_BYTES);
    }
}
