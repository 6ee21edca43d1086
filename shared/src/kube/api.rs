//! API call errors and the small retry every call gets for "try again" answers.

use std::future::Future;
use std::time::Duration;

/// One Kubernetes API call that failed: what was asked, of which object, and the answer.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {object}: {}", describe(.source))]
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

fn describe(e: &::kube::Error) -> String {
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

/// How many times a call is tried when the answer says "try again".
pub(crate) const CALL_ATTEMPTS: u32 = 3;
const CALL_BACKOFF: Duration = Duration::from_millis(200);

/// Runs `call` until it succeeds, fails for good, or was tried [`CALL_ATTEMPTS`] times on
/// retryable answers.
pub(crate) async fn with_retry<T, F, Fut>(
    verb: &'static str,
    object: &str,
    mut call: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let status = status_code(&e);
                if attempt >= CALL_ATTEMPTS || !is_retryable(status) {
                    return Err(ApiError::new(verb, object, e));
                }
                tracing::debug!(verb, object, ?status, attempt, "retrying API call");
                tokio::time::sleep(jittered(CALL_BACKOFF * 2u32.pow(attempt - 1))).await;
                attempt += 1;
            }
        }
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

    #[test]
    fn jitter_stays_within_the_delay() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(100));
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100));
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
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
