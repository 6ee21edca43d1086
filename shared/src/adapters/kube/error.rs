//! The Kubernetes adapter's errors, in one place: an API call that failed ([`ApiError`]) and
//! what its answer says (whether to try again, a `Retry-After`), the adapter's error
//! ([`KubeError`]), and why an action was refused without any write ([`Refusal`]).

use std::time::Duration;

use super::executor::CONFLICT_ATTEMPTS;
use crate::domain::cordon_record::ANNOTATION_CORDON;
use crate::domain::facts::NotItsNode;
use crate::ports::{FailureKind, PortError};

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

    /// What kind of failure: the API's answer (its HTTP status), else what became of the call
    /// (a timeout, a connection that failed, an answer that did not read).
    pub fn kind(&self) -> FailureKind {
        (self.status).map_or_else(|| transport_kind(&self.source), FailureKind::of_status)
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

/// `404 NotFound: nodes "n1" not found`, or the error text of a call that got no answer.
pub(crate) fn error_text(e: &::kube::Error) -> String {
    match e {
        ::kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
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
pub(crate) fn is_retryable(e: &::kube::Error) -> bool {
    matches!(status_code(e), Some(429 | 503 | 504))
}

/// Failures that may pass by themselves: every "try again" answer, 500 and 502, and no answer
/// at all (a refused or reset connection, a timeout) — what an API server restarting or being
/// upgraded (an EKS control-plane upgrade) gives for some seconds.
pub(crate) fn is_transient(e: &::kube::Error) -> bool {
    status_code(e).is_none_or(|code| matches!(code, 429 | 500 | 502 | 503 | 504))
}

/// The `Retry-After` of a "try again" answer: the API server puts it in the `Status` details
/// (`retryAfterSeconds`, as well as in the header) of its 429s and of some 503s.
pub(crate) fn retry_after(e: &::kube::Error) -> Option<Duration> {
    let ::kube::Error::Api(s) = e else {
        return None;
    };
    let secs = u64::from(s.details.as_ref()?.retry_after_seconds);
    (is_retryable(e) && secs > 0).then(|| Duration::from_secs(secs.min(MAX_RETRY_AFTER_SECS)))
}

/// A `Retry-After` longer than this is cut to it (a drain has minutes, not hours).
pub(crate) const MAX_RETRY_AFTER_SECS: u64 = 30;

/// A Kubernetes action that failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A connection that could not be made (see [`super::connect_eks`]), or a lifecycle action
    /// that failed.
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(
        "patch node/{node}: still conflicting after {CONFLICT_ATTEMPTS} attempts (the node keeps \
         changing)"
    )]
    Conflicts { node: String },
    /// Work over many objects, each tried: some failed (the first of them named).
    #[error("{failed} of {tried} failed; the first: {first}")]
    Partly {
        failed: usize,
        tried: usize,
        #[source]
        first: Box<KubeError>,
    },
}

impl KubeError {
    /// What kind of failure (see [`FailureKind`]): a node that kept changing under the cordon is
    /// contention.
    pub fn kind(&self) -> FailureKind {
        match self {
            KubeError::Api(e) => e.kind(),
            KubeError::Port(e) => e.kind,
            KubeError::Conflicts { .. } => FailureKind::Contention,
            KubeError::Partly { first, .. } => first.kind(),
        }
    }
}

/// The kind of a call that got no API answer.
fn transport_kind(e: &::kube::Error) -> FailureKind {
    use ::kube::Error;
    match e {
        Error::HyperError(_) | Error::Service(_) | Error::ReadEvents(_) if timed_out(e) => {
            FailureKind::Timeout
        }
        Error::HyperError(_) | Error::Service(_) | Error::ReadEvents(_) => FailureKind::Connection,
        Error::SerdeError(_)
        | Error::FromUtf8(_)
        | Error::HttpError(_)
        | Error::BuildRequest(_)
        | Error::InferConfig(_)
        | Error::InferKubeconfig(_)
        | Error::Discovery(_)
        | Error::TlsRequired
        | Error::ProxyProtocolUnsupported { .. }
        | Error::ProxyProtocolDisabled { .. } => FailureKind::Invalid,
        _ => FailureKind::Unknown,
    }
}

/// Whether a timeout is among `e`'s causes (an I/O `TimedOut`, tower's or hyper's "timed out").
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |c| c.source()).any(|c| {
        let io = c.downcast_ref::<std::io::Error>();
        io.is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || c.to_string().to_ascii_lowercase().contains("timed out")
    })
}

/// Why an action was refused without any write: what it would act on, as just read, failed its
/// verification (see the executor's module documentation and [`super::delete::verify_target`]),
/// or a cordon is not forewarn's to undo (any more: [`super::cordon::uncordon_patch`]).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The node is not the action's instance's, or is control-plane.
    #[error(transparent)]
    Node(#[from] NotItsNode),
    /// In a drain pass: an operator removed forewarn's taint, which ends the drain.
    #[error(
        "forewarn's taint {taint} is no longer on node/{node} (removed by someone else): the \
         drain ends"
    )]
    TaintRemoved { taint: String, node: String },
    /// An uncordon: the node carries no taint of forewarn's cordon (someone else's, or undone).
    #[error(
        "node/{node} carries no {taint} taint: not forewarn's cordon (someone else's, or undone)"
    )]
    NoTaint {
        node: String,
        /// The keys of forewarn's cordon ([`CordonRecord::taint_keys`]), joined by ` or `.
        ///
        /// [`CordonRecord::taint_keys`]: crate::domain::cordon_record::CordonRecord::taint_keys
        taint: String,
    },
    /// An uncordon: the node was cordoned again since, for a new reason.
    #[error("node/{node} was cordoned again since (its {ANNOTATION_CORDON} changed): a new reason")]
    NewRecord { node: String },
    /// A delete's target is a control-plane Machine.
    #[error("{target} is a control-plane Machine (label {label})")]
    ControlPlaneMachine { target: String, label: &'static str },
    /// A delete's target names another instance as its provider id.
    #[error("{target} is instance {other}'s (provider id), not the event's {instance_id}")]
    OtherInstance {
        target: String,
        other: String,
        instance_id: String,
    },
    /// A delete's target, without a provider id, is another node's.
    #[error(
        "{target} is node/{name}'s, not the event's instance {instance_id}'s{}",
        .node.as_ref().map(|n| format!(" (node/{n})")).unwrap_or_default()
    )]
    OtherNode {
        target: String,
        /// The node the target names.
        name: String,
        instance_id: String,
        /// The instance's live node, when there is one.
        node: Option<String>,
    },
    /// A delete's target names neither a provider id nor a node.
    #[error(
        "{target} names neither a provider id nor a node: it cannot be verified to be instance \
         {instance_id}'s"
    )]
    Unverifiable { target: String, instance_id: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> ApiError {
        let status: ::kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "m", "reason": "r", "code": code
        }))
        .unwrap();
        ApiError::new("get", "node/n", ::kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn api_answers_say_whether_to_retry() {
        for (code, kind) in [
            (429, FailureKind::Throttled),
            (500, FailureKind::Unavailable),
            (503, FailureKind::Unavailable),
            (504, FailureKind::Timeout),
            (400, FailureKind::Invalid),
            (401, FailureKind::Unauthenticated),
            (403, FailureKind::Forbidden),
            (404, FailureKind::NotFound),
            (409, FailureKind::Conflict),
        ] {
            let e = KubeError::from(api(code));
            assert_eq!(e.kind(), kind, "{code}");
        }
        assert!(KubeError::from(api(503)).kind().retryable());
        assert!(!KubeError::from(api(403)).kind().retryable());
        // An expired token: the next client signs a new one.
        assert!(KubeError::from(api(401)).kind().retryable());
    }

    #[test]
    fn failures_without_an_answer() {
        let unread = ApiError::new(
            "get",
            "node/n",
            ::kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err()),
        );
        assert_eq!(unread.kind(), FailureKind::Invalid);
        let timed_out = ApiError::new(
            "get",
            "node/n",
            ::kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "read",
            ))),
        );
        assert_eq!(timed_out.kind(), FailureKind::Timeout);
        let refused = ApiError::new(
            "get",
            "node/n",
            ::kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "refused",
            ))),
        );
        assert_eq!(refused.kind(), FailureKind::Connection);
        assert!(refused.kind().retryable());
        let conflicts = KubeError::Conflicts { node: "n".into() };
        assert_eq!(conflicts.kind(), FailureKind::Contention);
        assert!(conflicts.kind().retryable());
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
