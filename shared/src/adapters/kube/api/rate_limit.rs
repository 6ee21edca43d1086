//! The client-side rate limit: a token bucket like client-go's `QPS`/`Burst`, with two lanes,
//! and below them an idle turn ([`RateLimiter::idle`]) for what may be given up (pods' Events).
//! A [`super::super::ClusterClient`] owns one (shared by its clones), or none (no limit).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::ports::Clock;

/// The two lanes of the client-side rate limit. Under a limit, what a warning needs first —
/// node reads, cordons and taints, deletes, Events — goes before the drains' evictions and pod
/// lists: in a mass interruption every node is cordoned without queueing behind other nodes'
/// evictions. A request goes in its client's lane ([`super::super::ClusterClient::in_lane`]):
/// every request of a drain's passes in [`Lane::Later`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Lane {
    #[default]
    First,
    Later,
}

/// A client-side token bucket, like client-go's `QPS`/`Burst`: requests go out at `qps` on
/// average, up to `burst` at once after a quiet spell. Reservations: each request takes a
/// token now (the count may go below zero) and waits until its token would have been there,
/// so waiting requests go out in the order they asked, spaced `1/qps` apart. A `Retry-After`
/// pauses every request until it has passed. Requests of [`Lane::Later`] reserve one at a time
/// (each waits for the one before it to go out), so a [`Lane::First`] request waits behind at
/// most one of them.
///
/// Below both lanes, the idle turn ([`RateLimiter::idle`]): a request that may be given up
/// takes a token only when one is free and no request of either lane waits, so it never makes
/// one of them later.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
    later: tokio::sync::Mutex<()>,
    /// Requests of either lane between asking and going out: one clone each, held from asking
    /// to going out (also when the wait is dropped), so its count beyond this one is theirs.
    waiting: Arc<()>,
}

/// What the idle turn answers (see [`RateLimiter::idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idle {
    /// A token was free and taken: the request goes now.
    Go,
    /// No token is free for now, and the limiter is not loaded: one comes after this long, if
    /// nothing else asks meanwhile.
    After(Duration),
    /// Another request waits, every request is paused, or the limiter has been short of
    /// tokens for over [`LOADED_AFTER`]: give up.
    Busy,
}

/// A limiter short of tokens for longer than this is loaded (a mass interruption): the idle
/// turn waits for no token then, it takes only a free one.
pub(crate) const LOADED_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Bucket {
    tokens: f64,
    /// When the tokens were counted (`None`: never yet; the bucket is full).
    at: Option<DateTime<Utc>>,
    paused_until: Option<DateTime<Utc>>,
    /// When a request of either lane last found a token free (`None`: none asked yet).
    last_free: Option<DateTime<Utc>>,
}

impl RateLimiter {
    /// `qps` > 0 and finite, `burst` ≥ 1 (callers validate; out-of-range values are clamped).
    pub(crate) fn new(qps: f64, burst: u32) -> RateLimiter {
        let valid = qps.is_finite() && qps > 0.0;
        let qps = if valid { qps } else { 1.0 };
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                ..Bucket::default()
            }),
            later: tokio::sync::Mutex::new(()),
            waiting: Arc::default(),
        }
    }

    /// Waits until a request of `lane` may go out.
    pub(crate) async fn wait(&self, clock: &dyn Clock, lane: Lane) {
        // Counted from asking to going out (also when the wait is dropped), so that the idle
        // turn sees it.
        let _waiting = Arc::clone(&self.waiting);
        let _turn = match lane {
            Lane::First => None,
            Lane::Later => Some(self.later.lock().await),
        };
        let wait = self.reserve(clock.now());
        if !wait.is_zero() {
            clock.sleep(wait).await;
        }
    }

    /// The idle turn, below both lanes, for a request that may be given up (a pod's Event):
    /// at `now`, it takes a token only when a whole one is free, no request of either lane is
    /// waiting and nothing is paused. Never a reservation ahead: a request of either lane that
    /// asks after it waits for no more than the one token it took. When no token is free,
    /// [`Idle::After`] says when one would be — unless the limiter is loaded (short of tokens for
    /// over [`LOADED_AFTER`]: [`Idle::Busy`]).
    pub(crate) fn idle(&self, now: DateTime<Utc>) -> Idle {
        if Arc::strong_count(&self.waiting) > 1 {
            return Idle::Busy;
        }
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if b.paused_until.is_some_and(|until| until > now) {
            return Idle::Busy;
        }
        let at = b.at.unwrap_or(now);
        let elapsed = (now - at).to_std().unwrap_or_default().as_secs_f64();
        let tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        if tokens >= 1.0 {
            b.tokens = tokens - 1.0;
            b.at = Some(at.max(now));
            return Idle::Go;
        }
        let loaded = b
            .last_free
            .is_some_and(|free| (now - free).to_std().unwrap_or_default() > LOADED_AFTER);
        if loaded {
            Idle::Busy
        } else {
            Idle::After(Duration::from_secs_f64((1.0 - tokens) / self.qps))
        }
    }

    /// Waits for the idle turn ([`RateLimiter::idle`]) until `until` at the latest: `true` when
    /// the request may go out, `false` when it is to be given up (another request waits, the
    /// limiter is loaded, or no token would be free before `until`).
    pub(crate) async fn idle_turn(&self, clock: &dyn Clock, until: DateTime<Utc>) -> bool {
        loop {
            let now = clock.now();
            match self.idle(now) {
                Idle::Go => return true,
                Idle::Busy => return false,
                Idle::After(wait) if now + crate::ports::span(wait) > until => return false,
                Idle::After(wait) => clock.sleep(wait).await,
            }
        }
    }

    /// The tokens free at `now` for requests that go out at once, taking none: none while a
    /// request waits or every request is paused.
    pub(crate) fn free(&self, now: DateTime<Utc>) -> f64 {
        let b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&self.waiting) > 1 || b.paused_until.is_some_and(|u| u > now) {
            return 0.0;
        }
        let elapsed = b.at.map(|at| (now - at).to_std().unwrap_or_default());
        (b.tokens + elapsed.unwrap_or_default().as_secs_f64() * self.qps).min(self.burst)
    }

    /// Takes a token at `now`; the answer is how long to wait before sending.
    pub(crate) fn reserve(&self, now: DateTime<Utc>) -> Duration {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let at = b.at.unwrap_or(now);
        let elapsed = (now - at).to_std().unwrap_or_default().as_secs_f64();
        let tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        if tokens >= 1.0 {
            b.last_free = Some(now);
        }
        b.tokens = tokens - 1.0;
        b.at = Some(at.max(now));
        // In debt: the wait until its token would have been there.
        let wait = Duration::from_secs_f64((-b.tokens).max(0.0) / self.qps);
        let paused = b.paused_until.map_or(Duration::ZERO, |until| {
            (until - now).to_std().unwrap_or_default()
        });
        wait.max(paused)
    }

    /// No request goes out before `until`.
    pub(crate) fn pause_until(&self, until: DateTime<Utc>) {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        b.paused_until = Some(b.paused_until.map_or(until, |p| p.max(until)));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::adapters::clock::SystemClock;
    use crate::ports::span;

    fn t0() -> DateTime<Utc> {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_bucket_lets_a_burst_through_then_spaces_requests_by_the_rate() {
        let t0 = t0();
        let limiter = RateLimiter::new(100.0, 3);
        // The burst goes at once.
        for _ in 0..3 {
            assert_eq!(limiter.reserve(t0), Duration::ZERO);
        }
        // Then one every 10 ms, queued in order.
        let waits: Vec<u128> = (0..3).map(|_| limiter.reserve(t0).as_millis()).collect();
        assert_eq!(waits, vec![10, 20, 30]);
        // 100 ms later the debt (3 tokens) is paid and 7 more came back, capped at the burst.
        let later = t0 + span(ms(100));
        for _ in 0..3 {
            assert_eq!(limiter.reserve(later), Duration::ZERO);
        }
        assert_eq!(limiter.reserve(later).as_millis(), 10);
    }

    /// Twenty evictions queue for a 10/s limit; a cordon asked after them goes out behind at
    /// most one of them, not behind all twenty.
    /// (On the runtime's paused clock: the waits pass at once, in the order they end.)
    #[tokio::test(start_paused = true)]
    async fn the_first_lane_goes_before_the_later_lane() {
        let clock = SystemClock::default();
        let limiter = Arc::new(RateLimiter::new(10.0, 1));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let (limiter, order) = (limiter.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                limiter.wait(&clock, Lane::Later).await;
                order.lock().unwrap().push(format!("evict-{i}"));
            }));
            tokio::task::yield_now().await;
        }
        clock.sleep(ms(50)).await;
        let (l, o, c) = (limiter.clone(), order.clone(), clock);
        tasks.push(tokio::spawn(async move {
            l.wait(&c, Lane::First).await;
            o.lock().unwrap().push("cordon".to_string());
        }));
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 21);
        let at = order.iter().position(|o| o == "cordon").unwrap();
        assert!(at <= 2, "the cordon went out {at}th: {order:?}");
        // the later lane still keeps its own order
        let evictions: Vec<&String> = order.iter().filter(|o| *o != "cordon").collect();
        let expected: Vec<String> = (0..20).map(|i| format!("evict-{i}")).collect();
        assert_eq!(evictions, expected.iter().collect::<Vec<_>>());
    }

    #[test]
    fn the_idle_turn_takes_only_a_free_token() {
        let t0 = t0();
        let limiter = RateLimiter::new(10.0, 2);
        // A full bucket: free tokens, taken.
        assert_eq!(limiter.idle(t0), Idle::Go);
        assert_eq!(limiter.idle(t0), Idle::Go);
        // None free: one comes in 100 ms; nothing was reserved ahead.
        assert_eq!(limiter.idle(t0), Idle::After(ms(100)));
        assert_eq!(limiter.reserve(t0 + span(ms(100))), Duration::ZERO);
        // A request of a lane in debt: the idle turn waits for the debt to be paid and a token.
        assert_eq!(limiter.reserve(t0 + span(ms(100))), ms(100));
        assert_eq!(limiter.idle(t0 + span(ms(100))), Idle::After(ms(200)));
        // Paused: busy.
        limiter.pause_until(t0 + span(ms(5000)));
        assert_eq!(limiter.idle(t0 + span(ms(4000))), Idle::Busy);
        // Short of tokens for over a second (a request found none free since t0 + 100 ms):
        // loaded, busy.
        let late = t0 + span(ms(5000));
        assert_eq!(limiter.reserve(late), Duration::ZERO, "the bucket refilled");
        assert_eq!(limiter.reserve(late), Duration::ZERO);
        assert_eq!(limiter.reserve(late), ms(100));
        assert_eq!(limiter.idle(late + span(ms(50))), Idle::After(ms(150)));
        for i in 1..=12 {
            limiter.reserve(late + span(ms(100 * i)));
        }
        assert_eq!(limiter.idle(late + span(ms(1300))), Idle::Busy);
    }

    /// An idle request waiting for its token gives way to a cordon asked meanwhile: the cordon
    /// goes out first (the idle request, when it wakes, is given up if the cordon still waits, or
    /// waits for a token of its own).
    #[tokio::test(start_paused = true)]
    async fn the_idle_turn_gives_way_to_any_request() {
        let clock = SystemClock::default();
        let limiter = Arc::new(RateLimiter::new(10.0, 1));
        let order = Arc::new(Mutex::new(Vec::new()));
        // The one token goes to an eviction.
        limiter.wait(&clock, Lane::Later).await;
        let (l, o, c) = (limiter.clone(), order.clone(), clock);
        let idle = tokio::spawn(async move {
            let until = c.now() + span(Duration::from_secs(1));
            if l.idle_turn(&c, until).await {
                o.lock().unwrap().push("pod event");
            }
        });
        tokio::task::yield_now().await;
        let (l, o, c) = (limiter.clone(), order.clone(), clock);
        let cordon = tokio::spawn(async move {
            l.wait(&c, Lane::First).await;
            o.lock().unwrap().push("cordon");
        });
        idle.await.unwrap();
        cordon.await.unwrap();
        let order = order.lock().unwrap().clone();
        assert_eq!(order.first(), Some(&"cordon"), "{order:?}");
        // With nothing else asking, the idle request waits for its token within its budget...
        let until = clock.now() + span(Duration::from_secs(1));
        assert!(limiter.idle_turn(&clock, until).await);
        // ...and is given up when none would come before it.
        let until = clock.now() + span(ms(50));
        assert!(!limiter.idle_turn(&clock, until).await);
    }

    #[test]
    fn a_pause_holds_every_request_until_it_ends() {
        let t0 = t0();
        let limiter = RateLimiter::new(1000.0, 10);
        limiter.pause_until(t0 + span(ms(1000)));
        // An earlier pause does not shorten a later one.
        limiter.pause_until(t0 + span(ms(500)));
        assert_eq!(limiter.reserve(t0), ms(1000));
        assert_eq!(limiter.reserve(t0 + span(ms(400))), ms(600));
        assert_eq!(limiter.reserve(t0 + span(ms(1000))), Duration::ZERO);
    }

    #[test]
    fn the_free_tokens_are_counted_without_taking_one() {
        let limiter = RateLimiter::new(10.0, 2);
        assert_eq!(limiter.free(t0()), 2.0);
        limiter.reserve(t0());
        limiter.reserve(t0());
        assert_eq!(limiter.free(t0()), 0.0);
        assert_eq!(
            limiter.free(t0() + chrono::Duration::milliseconds(150)),
            1.5
        );
        assert_eq!(limiter.free(t0() + chrono::Duration::seconds(9)), 2.0);
        limiter.pause_until(t0() + chrono::Duration::seconds(10));
        assert_eq!(limiter.free(t0() + chrono::Duration::seconds(9)), 0.0);
    }

    #[test]
    fn bad_settings_are_clamped_not_panicked_on() {
        let t0 = t0();
        let limiter = RateLimiter::new(f64::NAN, 0);
        assert_eq!(limiter.reserve(t0), Duration::ZERO);
        assert_eq!(limiter.reserve(t0), Duration::from_secs(1));
    }
}
