//! The small retry every API call gets for "try again" answers, and, within work that has a
//! deadline, for every failure that may pass by itself: [`with_retry`], on the one backoff
//! ([`crate::adapters::backoff`]).

use std::future::Future;
use std::time::Duration;

use backon::Retryable;

use crate::adapters::backoff::backoff;
use crate::adapters::kube::connect::ClusterClient;
use crate::adapters::kube::error::{
    ApiError, is_retryable, is_transient, retry_after, status_code,
};
use crate::ports::span;
use backon::ExponentialBuilder;

/// Page size of the lists of every object of a kind ([`list_all`]).
const LIST_PAGE: u32 = 500;
/// How many times a call is tried when the answer says "try again" and no work deadline is
/// set (see [`with_retry`]).
pub(crate) const CALL_ATTEMPTS: u32 = 3;
/// The waits between two attempts of a call: at most 200 ms, doubling, at most
/// [`MAX_CALL_BACKOFF`] (equal jitter). The longest wait is what bounds how late a call retried
/// until the work's deadline goes through after the API server is back.
const CALL_BACKOFF: ExponentialBuilder = backoff(Duration::from_millis(200), MAX_CALL_BACKOFF);
/// The longest wait between two attempts of a call retried until the work's deadline: a call
/// goes through at most this long after the API server is back.
const MAX_CALL_BACKOFF: Duration = Duration::from_secs(2);

/// Runs `call` until it succeeds or fails for good, in the client's lane of its rate limit (see
/// [`ClusterClient::in_lane`]). Within work that has a deadline (the client's, see
/// [`ClusterClient::for_work`]: a Lambda invocation), a transient failure ([`is_transient`]) is
/// retried with backoff (200 ms doubling, at most [`MAX_CALL_BACKOFF`], jittered) for as long as
/// the deadline allows, so that an API server outage of tens of seconds is ridden out inside the
/// invocation instead of spending the message's receives; without one, a "try again" answer is
/// tried [`CALL_ATTEMPTS`] times. A `Retry-After` is waited (when longer than the backoff) and
/// holds back every request of the client's rate limit.
pub(crate) async fn with_retry<T, F, Fut>(
    clients: &ClusterClient,
    verb: &'static str,
    object: &str,
    mut call: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let until = clients.work.deadline;
    let backoff = match until {
        Some(_) => CALL_BACKOFF,
        None => CALL_BACKOFF.with_max_times(CALL_ATTEMPTS as usize - 1),
    };
    let attempt = || {
        let answer = call();
        async move {
            clients.throttle().await;
            answer.await
        }
    };
    attempt
        .retry(backoff)
        .sleep(clients.sleeper())
        .when(|e| match until {
            // Impatient work waits a throttle out, never an outage (the event comes back).
            Some(_) if clients.work.fail_fast => status_code(e) == Some(429),
            Some(_) => is_transient(e),
            None => is_retryable(e),
        })
        .adjust(|e, backoff| {
            let after = heed_retry_after(clients, e);
            let backoff = backoff?;
            let delay = after.map_or(backoff, |after| after.max(backoff));
            match until {
                Some(until) if clients.clock().now() + span(delay) >= until => None,
                _ => Some(delay),
            }
        })
        .notify(|e, delay| {
            tracing::debug!(verb, object, status = ?status_code(e), ?delay, "retrying API call");
        })
        .await
        .map_err(|e| ApiError::new(verb, object, e))
}

/// The `Retry-After` of answer `e` ([`retry_after`]), when it says one: the server said when,
/// so every request of the client's rate limit waits that long ([`ClusterClient::pause_all`]).
pub(crate) fn heed_retry_after(clients: &ClusterClient, e: &::kube::Error) -> Option<Duration> {
    let after = retry_after(e)?;
    clients.pause_all(after);
    Some(after)
}

/// Every object `api` lists, page by page ([`LIST_PAGE`] a page), each page a [`with_retry`].
pub(crate) async fn list_all<K>(
    clients: &ClusterClient,
    api: &::kube::Api<K>,
    what: &str,
) -> Result<Vec<K>, ApiError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ::kube::api::ListParams::default().limit(LIST_PAGE);
    loop {
        let page = with_retry(clients, "list", what, || api.list(&params)).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::adapters::clock::ManualClock;
    use crate::ports::Clock;

    fn t0() -> DateTime<Utc> {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    fn answer(code: u16, retry_after_seconds: u32) -> ::kube::Error {
        let mut status = ::kube::core::Status::failure("m", "r").with_code(code);
        status.details =
            serde_json::from_value(serde_json::json!({ "retryAfterSeconds": retry_after_seconds }))
                .ok();
        ::kube::Error::Api(Box::new(status))
    }

    /// A client that needs no server: the calls below never reach it.
    fn clients(clock: &ManualClock) -> ClusterClient {
        let config = ::kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = ::kube::Client::try_from(config).unwrap();
        ClusterClient::new(client).with_clock(clock.shared())
    }

    #[tokio::test]
    async fn without_a_deadline_a_try_again_answer_is_tried_three_times() {
        let clock = ManualClock::at(t0());
        let clients = clients(&clock);
        let calls = AtomicU32::new(0);
        let result: Result<(), ApiError> = with_retry(&clients, "get", "node/n", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(answer(503, 0)) }
        })
        .await;
        assert_eq!(result.unwrap_err().status, Some(503));
        assert_eq!(calls.load(Ordering::SeqCst), CALL_ATTEMPTS);
        let slept = clock.slept();
        assert_eq!(slept.len(), 2, "{slept:?}");
        assert!(slept[0] >= Duration::from_millis(100) && slept[0] <= Duration::from_millis(200));
        assert!(slept[1] >= Duration::from_millis(200) && slept[1] <= Duration::from_millis(400));
        // Any other answer is not tried again.
        calls.store(0, Ordering::SeqCst);
        let _ = with_retry(&clients, "get", "node/n", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(answer(500, 0)) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn within_a_deadline_transient_failures_are_tried_until_it() {
        let clock = ManualClock::at(t0());
        let deadline = t0() + chrono::Duration::seconds(10);
        let work = crate::ports::Work {
            deadline: Some(deadline),
            fail_fast: false,
        };
        let clients = clients(&clock).for_work(work);
        let calls = AtomicU32::new(0);
        let result: Result<(), ApiError> = with_retry(&clients, "get", "node/n", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(answer(500, 0)) }
        })
        .await;
        assert_eq!(result.unwrap_err().status, Some(500));
        assert!(calls.load(Ordering::SeqCst) > CALL_ATTEMPTS);
        assert!(clock.now() < deadline, "no wait goes past the deadline");
        assert!(clock.slept().iter().all(|d| *d <= MAX_CALL_BACKOFF));
    }

    #[tokio::test]
    async fn impatient_work_waits_a_throttle_out_but_no_outage() {
        let clock = ManualClock::at(t0());
        let work = crate::ports::Work {
            deadline: Some(t0() + chrono::Duration::seconds(10)),
            fail_fast: true,
        };
        let clients = clients(&clock).for_work(work);
        let calls = AtomicU32::new(0);
        let down: Result<(), ApiError> = with_retry(&clients, "get", "node/n", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(answer(503, 0)) }
        })
        .await;
        assert_eq!(down.unwrap_err().status, Some(503));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "an outage is not ridden out"
        );
        let throttled = AtomicU32::new(0);
        let result = with_retry(&clients, "get", "node/n", || {
            let n = throttled.fetch_add(1, Ordering::SeqCst);
            async move { if n < 3 { Err(answer(429, 1)) } else { Ok(n) } }
        })
        .await;
        assert_eq!(result.unwrap(), 3, "a throttle is waited out");
    }

    #[tokio::test]
    async fn a_retry_after_is_waited_and_pauses_the_clients_rate_limit() {
        let clock = ManualClock::at(t0());
        let clients = clients(&clock).with_rate_limit(Some((1000.0, 10)));
        let calls = AtomicU32::new(0);
        let result = with_retry(&clients, "get", "node/n", || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(answer(429, 3)),
                    _ => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 1);
        // The server's 3 s, not the backoff's 200 ms.
        assert_eq!(clock.slept(), vec![Duration::from_secs(3)]);
        // The pause holds back every request of the limit: a clone of the client shares it.
        let other = clients.clone();
        clients.pause_all(Duration::from_secs(5));
        other.throttle().await;
        assert_eq!(clock.now(), t0() + chrono::Duration::seconds(8));
        // A client built with a limit of its own does not.
        let own = other.with_rate_limit(Some((1000.0, 10)));
        clients.pause_all(Duration::from_secs(5));
        own.throttle().await;
        assert_eq!(clock.now(), t0() + chrono::Duration::seconds(8));
    }
}
