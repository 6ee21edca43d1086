//! API call errors and the small retry every call gets for "try again" answers.

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::ports::{Clock, span};

/// The name forewarn uses as field manager, Event reporting controller and RBAC group.
pub const FIELD_MANAGER: &str = "forewarn";

/// One Kubernetes API call that failed: what was asked, of which object, and the answer.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {object}: {}", error_text(.source))]
pub struct ApiError {
    /// `get`, `list`, `patch`, `delete`, `evict`, `create`.
    pub verb: &'static str,
    /// The object, as `node/<name>`, `pod/<ns>/<name>`, `nodeclaim/<name>`, ...
    pub object: String,
    /// The HTTP status of the API's answer (`None` for transport failures and timeouts).
    pub status: Option<u16>,
    #[source]
    pub source: ::kube::Error,
}

impl ApiError {
    pub(crate) fn new(
        verb: &'static str,
        object: impl Into<String>,
        source: ::kube::Error,
    ) -> Self {
        ApiError {
            verb,
            object: object.into(),
            status: status_code(&source),
            source,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.status == Some(409)
    }

    /// The API's `Status` message, or the error text.
    pub fn message(&self) -> String {
        match &self.source {
            ::kube::Error::Api(status) => status.message.clone(),
            other => other.to_string(),
        }
    }
}

fn error_text(e: &::kube::Error) -> String {
    match e {
        ::kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() { "" } else { &s.reason };
            format!("{} {reason}: {}", s.code, s.message)
        }
        other => other.to_string(),
    }
}

pub(crate) fn status_code(e: &::kube::Error) -> Option<u16> {
    match e {
        ::kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Answers that say "try again": API priority and fairness (429), unavailable (503), gateway
/// timeout (504). kube's own retry layer is off for forewarn's clients (it would retry eviction
/// refusals for minutes), so calls retry these themselves, briefly.
pub(crate) fn is_retryable(status: Option<u16>) -> bool {
    matches!(status, Some(429 | 503 | 504))
}

/// Failures that may pass by themselves: every "try again" answer, 500 and 502, and no answer
/// at all (a refused or reset connection, a timeout) — what an API server restarting or being
/// upgraded (an EKS control-plane upgrade) gives for some seconds.
pub(crate) fn is_transient(e: &::kube::Error) -> bool {
    match status_code(e) {
        Some(code) => is_retryable(Some(code)) || matches!(code, 500 | 502),
        None => true,
    }
}

/// How many times a call is tried when the answer says "try again" and no work deadline is
/// set (see [`with_retry_in`]).
pub(crate) const CALL_ATTEMPTS: u32 = 3;
const CALL_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts of a call retried until the work's deadline: a call
/// goes through at most this long after the API server is back.
const MAX_CALL_BACKOFF: Duration = Duration::from_secs(2);

/// Runs `call` until it succeeds, fails for good, or was tried [`CALL_ATTEMPTS`] times on
/// retryable answers, in [`Lane::First`].
pub(crate) async fn with_retry<T, F, Fut>(
    clock: &dyn Clock,
    verb: &'static str,
    object: &str,
    call: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    with_retry_in(clock, Lane::First, verb, object, call).await
}

/// [`with_retry`] in `lane`. Within work that has a deadline ([`crate::ports::within_deadline`]:
/// a Lambda invocation), a transient failure ([`is_transient`]) is retried with backoff (200 ms
/// doubling, at most [`MAX_CALL_BACKOFF`], jittered) for as long as the deadline allows, so
/// that an API server outage of tens of seconds is ridden out inside the invocation instead of
/// spending the message's receives; without one, a "try again" answer is tried
/// [`CALL_ATTEMPTS`] times.
pub(crate) async fn with_retry_in<T, F, Fut>(
    clock: &dyn Clock,
    lane: Lane,
    verb: &'static str,
    object: &str,
    mut call: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let until = crate::ports::work_deadline();
    let mut attempt: u32 = 1;
    loop {
        throttle(clock, lane).await;
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let status = status_code(&e);
                let backoff =
                    jittered((CALL_BACKOFF * 2u32.pow((attempt - 1).min(4))).min(MAX_CALL_BACKOFF));
                let delay = match retry_after(&e) {
                    Some(after) => {
                        // The server said when: every call of the process waits that long.
                        pause_all(clock.now(), after);
                        after.max(backoff)
                    }
                    None => backoff,
                };
                let again = match until {
                    Some(until) => is_transient(&e) && clock.now() + span(delay) < until,
                    None => attempt < CALL_ATTEMPTS && is_retryable(status),
                };
                if !again {
                    return Err(ApiError::new(verb, object, e));
                }
                tracing::debug!(verb, object, ?status, attempt, ?delay, "retrying API call");
                clock.sleep(delay).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// One attempt of `call` in `lane` (after the lane's rate limit), never retried: for a call
/// whose failure is itself the answer (a placeholder's create: its pod is evicted at once).
pub(crate) async fn once_in<T>(
    clock: &dyn Clock,
    lane: Lane,
    verb: &'static str,
    object: &str,
    call: impl Future<Output = Result<T, ::kube::Error>>,
) -> Result<T, ApiError> {
    throttle(clock, lane).await;
    call.await.map_err(|e| ApiError::new(verb, object, e))
}

/// The `Retry-After` of a "try again" answer: the API server puts it in the `Status` details
/// (`retryAfterSeconds`, as well as in the header) of its 429s and of some 503s.
pub(crate) fn retry_after(e: &::kube::Error) -> Option<Duration> {
    match e {
        ::kube::Error::Api(s) if is_retryable(Some(s.code)) => s
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|secs| *secs > 0)
            .map(|secs| Duration::from_secs(u64::from(secs).min(MAX_RETRY_AFTER_SECS))),
        _ => None,
    }
}

/// A `Retry-After` longer than this is cut to it (a drain has minutes, not hours).
const MAX_RETRY_AFTER_SECS: u64 = 30;

/// The two lanes of the client-side rate limit. Under a limit, what a warning needs first —
/// node reads, cordons and taints, deletes, Events — goes before the drains' evictions and pod
/// lists: in a mass interruption every node is cordoned without queueing behind other nodes'
/// evictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
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
#[derive(Debug)]
pub(crate) struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
    later: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    /// When the tokens were counted (`None`: never yet; the bucket is full).
    at: Option<DateTime<Utc>>,
    paused_until: Option<DateTime<Utc>>,
}

impl RateLimiter {
    /// `qps` > 0 and finite, `burst` ≥ 1 (callers validate; out-of-range values are clamped).
    pub(crate) fn new(qps: f64, burst: u32) -> RateLimiter {
        let qps = if qps.is_finite() && qps > 0.0 {
            qps
        } else {
            1.0
        };
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                at: None,
                paused_until: None,
            }),
            later: tokio::sync::Mutex::new(()),
        }
    }

    /// Waits until a request of `lane` may go out.
    pub(crate) async fn wait(&self, clock: &dyn Clock, lane: Lane) {
        let _turn = match lane {
            Lane::First => None,
            Lane::Later => Some(self.later.lock().await),
        };
        let wait = self.reserve(clock.now());
        if !wait.is_zero() {
            clock.sleep(wait).await;
        }
    }

    /// Takes a token at `now`; the answer is how long to wait before sending.
    pub(crate) fn reserve(&self, now: DateTime<Utc>) -> Duration {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let at = b.at.unwrap_or(now);
        let elapsed = (now - at).to_std().unwrap_or_default().as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        b.at = Some(at.max(now));
        let wait = if b.tokens < 0.0 {
            Duration::from_secs_f64(-b.tokens / self.qps)
        } else {
            Duration::ZERO
        };
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

/// The process's limiter: every call of every client shares it (one Lambda execution
/// environment talks to one API server). `None`: no client-side limit.
static LIMITER: RwLock<Option<Arc<RateLimiter>>> = RwLock::new(None);

/// Sets (or with `None` removes) the process's client-side rate limit.
pub(crate) fn set_rate_limit(limit: Option<(f64, u32)>) {
    let limiter = limit.map(|(qps, burst)| Arc::new(RateLimiter::new(qps, burst)));
    *LIMITER.write().unwrap_or_else(|p| p.into_inner()) = limiter;
}

fn limiter() -> Option<Arc<RateLimiter>> {
    if let Ok(own) = OWN_LIMITER.try_with(Arc::clone) {
        return Some(own);
    }
    LIMITER.read().unwrap_or_else(|p| p.into_inner()).clone()
}

tokio::task_local! {
    /// Set by [`OwnRateLimit::scope`]: the limiter of this work instead of the process's.
    static OWN_LIMITER: Arc<RateLimiter>;
}

/// A rate limit of its own, for work that stands for another process: a benchmark that plays
/// several Lambda execution environments in one process gives each of them one, as each
/// environment has its own limiter in Lambda. Its state (tokens, a `Retry-After` pause) lasts
/// from one [`OwnRateLimit::scope`] to the next.
#[derive(Debug, Clone)]
pub struct OwnRateLimit(Arc<RateLimiter>);

impl OwnRateLimit {
    /// `qps` requests per second on average, `burst` at once (as
    /// [`super::ClusterClient::set_rate_limit`]).
    pub fn new(qps: f64, burst: u32) -> OwnRateLimit {
        OwnRateLimit(Arc::new(RateLimiter::new(qps, burst)))
    }

    /// Runs `work` with every Kubernetes request it makes (in this task) under this limit
    /// instead of the process's.
    pub async fn scope<F: std::future::Future>(&self, work: F) -> F::Output {
        OWN_LIMITER.scope(Arc::clone(&self.0), work).await
    }
}

tokio::task_local! {
    /// Set by [`in_later_lane`]: every request of the future goes in [`Lane::Later`].
    static LATER_LANE: ();
}

/// Runs `work` with every request it makes in [`Lane::Later`]: a drain's later passes, whose
/// node reads and Events must not go before other nodes' cordons.
pub(crate) async fn in_later_lane<F: std::future::Future>(work: F) -> F::Output {
    LATER_LANE.scope((), work).await
}

/// Waits for the process's rate limit (if any) before a request of `lane` goes out. Every
/// request to the API server calls it once per attempt.
pub(crate) async fn throttle(clock: &dyn Clock, lane: Lane) {
    let lane = if LATER_LANE.try_with(|_| ()).is_ok() {
        Lane::Later
    } else {
        lane
    };
    if let Some(limiter) = limiter() {
        limiter.wait(clock, lane).await;
    }
}

/// A `Retry-After` seen by one call holds back every call of the process (when limited).
pub(crate) fn pause_all(now: DateTime<Utc>, after: Duration) {
    if let Some(limiter) = limiter() {
        limiter.pause_until(now + span(after));
    }
}

/// "Equal jitter": half the delay, plus a random part of the other half.
pub(crate) fn jittered(delay: Duration) -> Duration {
    let half = delay / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return delay;
    }
    half + Duration::from_nanos(rand::random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::clock::SystemClock;

    #[test]
    fn jitter_stays_within_the_delay() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(100));
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100));
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }

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
        tokio::time::sleep(ms(50)).await;
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

    #[tokio::test]
    async fn work_with_a_limit_of_its_own_uses_it_and_keeps_its_state_between_scopes() {
        let own = OwnRateLimit::new(1.0, 1);
        let other = OwnRateLimit::new(1.0, 1);
        let is = |l: &OwnRateLimit| limiter().is_some_and(|x| Arc::ptr_eq(&x, &l.0));
        assert!(own.scope(async { is(&own) }).await);
        assert!(!own.scope(async { is(&other) }).await);
        assert!(!is(&own), "outside the scope: the process's limit (if any)");
        // The one token is taken in one scope; the next scope of the same limit has none left.
        let first = own.scope(async { limiter().unwrap().reserve(t0()) }).await;
        let second = own.scope(async { limiter().unwrap().reserve(t0()) }).await;
        assert_eq!(first, Duration::ZERO);
        assert!(second > ms(900), "{second:?}");
        // Another environment's limit is untouched.
        let third = other
            .scope(async { limiter().unwrap().reserve(t0()) })
            .await;
        assert_eq!(third, Duration::ZERO);
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
    fn bad_settings_are_clamped_not_panicked_on() {
        let t0 = t0();
        let limiter = RateLimiter::new(f64::NAN, 0);
        assert_eq!(limiter.reserve(t0), Duration::ZERO);
        assert_eq!(limiter.reserve(t0), Duration::from_secs(1));
    }

    fn details(retry_after_seconds: u32) -> ::kube::core::response::StatusDetails {
        serde_json::from_value(serde_json::json!({ "retryAfterSeconds": retry_after_seconds }))
            .unwrap()
    }

    #[test]
    fn retry_after_comes_from_the_status_details_of_retryable_answers() {
        let mut status =
            ::kube::core::Status::failure("slow down", "TooManyRequests").with_code(429);
        status.details = Some(details(2));
        let e = ::kube::Error::Api(Box::new(status.clone()));
        assert_eq!(retry_after(&e), Some(Duration::from_secs(2)));
        status.details = Some(details(3600));
        let long = ::kube::Error::Api(Box::new(status.clone()));
        assert_eq!(
            retry_after(&long),
            Some(Duration::from_secs(MAX_RETRY_AFTER_SECS))
        );
        // Not for answers that are not "try again", nor without the detail.
        let conflict = ::kube::Error::Api(Box::new(status.clone().with_code(409)));
        assert_eq!(retry_after(&conflict), None);
        status.details = None;
        assert_eq!(retry_after(&::kube::Error::Api(Box::new(status))), None);
    }

    #[test]
    fn errors_name_the_object_and_the_status() {
        let status =
            ::kube::core::Status::failure("nodes \"n1\" not found", "NotFound").with_code(404);
        let e = ApiError::new("get", "node/n1", ::kube::Error::Api(Box::new(status)));
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "get node/n1: 404 NotFound: nodes \"n1\" not found"
        );
    }
}
