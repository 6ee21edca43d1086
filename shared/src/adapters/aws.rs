//! The one AWS SDK configuration every client is built from (DynamoDB, EC2, Auto Scaling, EKS),
//! with one retry policy, and the text of an SDK error.

use aws_config::{BehaviorVersion, SdkConfig};
use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::ports::{FailureKind, PortError};

/// The SDK's attempts per request (throttling, transient errors) unless `AWS_MAX_ATTEMPTS` or the
/// profile's `max_attempts` says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// What forewarn itself makes of the AWS configuration, from the settings
/// (`crate::app::settings`); the SDK reads the rest of the environment itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AwsSettings {
    /// `AWS_MAX_ATTEMPTS` is set: the SDK's attempts per request are the user's, not
    /// [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts_set: bool,
}

/// The standard AWS configuration (environment, profile, instance or task role;
/// `AWS_ENDPOINT_URL[_<SERVICE>]` for other endpoints) with [`default_retries`]: what every
/// client of the functions and the command is built from.
pub async fn load(settings: AwsSettings) -> SdkConfig {
    default_retries(
        aws_config::load_defaults(BehaviorVersion::latest()).await,
        settings,
    )
}

/// `config` (as loaded by `aws_config`) with [`DEFAULT_MAX_ATTEMPTS`] attempts per request,
/// unless they were configured: by `AWS_MAX_ATTEMPTS` (`settings` say whether it is set), or by
/// a profile's `max_attempts` other than the SDK's default of 3 (a profile saying exactly 3
/// cannot be told from no setting, and gets 5). The retry mode (`AWS_RETRY_MODE`, standard by
/// default) is kept.
pub fn default_retries(config: SdkConfig, settings: AwsSettings) -> SdkConfig {
    let sdk_default = aws_config::retry::RetryConfig::standard().max_attempts();
    match config.retry_config() {
        Some(retry) if !settings.max_attempts_set && retry.max_attempts() == sdk_default => {
            let retry = retry.clone().with_max_attempts(DEFAULT_MAX_ATTEMPTS);
            config.into_builder().retry_config(retry).build()
        }
        _ => config,
    }
}

/// The kind of an AWS SDK error ([`FailureKind`]): from its error code when the service
/// answered with a known one, else from the HTTP status; a timeout, a connection that failed, a
/// request that could not be built by what the SDK says of it. (Every service's `SdkError` is
/// the same type: the DynamoDB crate's names serve for all.)
pub fn failure_kind<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> FailureKind {
    match e {
        SdkError::ServiceError(service) => service
            .err()
            .code()
            .and_then(kind_of_code)
            .unwrap_or_else(|| FailureKind::of_status(service.raw().status().as_u16())),
        SdkError::TimeoutError(_) => FailureKind::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => FailureKind::Timeout,
        SdkError::DispatchFailure(d) if d.is_io() => FailureKind::Connection,
        SdkError::DispatchFailure(d) if d.is_user() => FailureKind::Invalid,
        SdkError::ConstructionFailure(_) => FailureKind::Invalid,
        SdkError::ResponseError(r) => FailureKind::of_status(r.raw().status().as_u16()),
        _ => FailureKind::Unknown,
    }
}

/// The kind an AWS error code says, when it says one: the SDK's own throttling and transient
/// codes (`aws_runtime`'s, which its retries go by), Auto Scaling's `ResourceContention` a
/// throttle too.
pub fn kind_of_code(code: &str) -> Option<FailureKind> {
    let kind = match code {
        c if THROTTLING_ERRORS.contains(&c) => FailureKind::Throttled,
        "ResourceContention" => FailureKind::Throttled,
        c if TRANSIENT_ERRORS.contains(&c) => FailureKind::Timeout,
        "InternalServerError"
        | "InternalFailure"
        | "InternalError"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "Unavailable" => FailureKind::Unavailable,
        "TransactionConflictException" | "TransactionConflict" => FailureKind::Contention,
        "ConditionalCheckFailedException" | "ConditionalCheckFailed" => FailureKind::Conflict,
        // Temporary credentials that ran out: the SDK's provider fetches new ones.
        "ExpiredToken" | "ExpiredTokenException" | "RequestExpired" => FailureKind::Unauthenticated,
        "AccessDenied"
        | "AccessDeniedException"
        | "UnauthorizedOperation"
        | "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "AuthFailure"
        | "InvalidSignatureException"
        | "MissingAuthenticationToken"
        | "IncompleteSignature" => FailureKind::Forbidden,
        "ResourceNotFoundException" | "NotFoundException" | "NotFound" => FailureKind::NotFound,
        // Elastic Load Balancing: a target group deleted.
        "TargetGroupNotFound" => FailureKind::NotFound,
        // EC2: `InvalidInstanceID.NotFound`, `InvalidLaunchTemplateId.NotFound`, ...
        c if c.ends_with(".NotFound") => FailureKind::NotFound,
        // `InvalidParameterValue`, `InvalidParameterCombination`, ...
        c if c.starts_with("Invalid") => FailureKind::Invalid,
        "ValidationException" | "ValidationError" | "MissingParameter" => FailureKind::Invalid,
        "SerializationException" => FailureKind::Invalid,
        _ => return None,
    };
    Some(kind)
}

/// An SDK operation's error (of any service), as the helpers here take it.
pub trait OperationError: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static {}
impl<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static> OperationError for E {}

/// A failed SDK call (every service's `SdkError` is the same type).
pub type CallError<E> = SdkError<E, HttpResponse>;

/// `call` (of any AWS SDK: their errors are the same types), failed with `e`: of the kind it
/// says ([`failure_kind`]), kept whole ([`AwsError`]).
pub fn call_error<E: OperationError>(call: impl Into<String>, e: CallError<E>) -> PortError {
    PortError::new(call, failure_kind(&e), AwsError(e.into()))
}

/// An AWS SDK error with its causes (the SDK's `Display` alone says "service error").
pub fn aws_error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let chain = std::iter::successors(Some(e), |e| e.source());
    chain
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// An AWS SDK error, kept whole as the source of a port's error: it says its own text and every
/// source's ([`aws_error_text`]: the SDK's own Display says little more than `service error`),
/// and [`std::error::Error::source`] gives the SDK's error.
#[derive(Debug, thiserror::Error)]
#[error("{}", aws_error_text(&**.0))]
pub struct AwsError(#[source] pub crate::ports::BoxError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_attempts_unless_configured() {
        let loaded = |attempts: u32| {
            SdkConfig::builder()
                .retry_config(
                    aws_config::retry::RetryConfig::standard().with_max_attempts(attempts),
                )
                .build()
        };
        let attempts = |c: SdkConfig, max_attempts_set| {
            let c = default_retries(c, AwsSettings { max_attempts_set });
            c.retry_config().map(|r| r.max_attempts())
        };
        assert_eq!(attempts(loaded(3), false), Some(5));
        assert_eq!(attempts(loaded(3), true), Some(3));
        assert_eq!(attempts(loaded(7), false), Some(7));
    }

    type GetItemSdkError =
        SdkError<aws_sdk_dynamodb::operation::get_item::GetItemError, HttpResponse>;

    /// A service error answered with `status` and, when given, `code`.
    fn answered(status: u16, code: Option<&str>) -> GetItemSdkError {
        let mut meta = aws_sdk_dynamodb::error::ErrorMetadata::builder();
        if let Some(code) = code {
            meta = meta.code(code);
        }
        let err = aws_sdk_dynamodb::operation::get_item::GetItemError::generic(meta.build());
        SdkError::service_error(
            err,
            HttpResponse::new(status.try_into().unwrap(), "".into()),
        )
    }

    #[test]
    fn kinds_of_service_errors() {
        let kinds = [
            (400, Some("ThrottlingException"), FailureKind::Throttled),
            (
                400,
                Some("ProvisionedThroughputExceededException"),
                FailureKind::Throttled,
            ),
            (503, Some("RequestLimitExceeded"), FailureKind::Throttled),
            (400, Some("ResourceContention"), FailureKind::Throttled),
            (500, Some("InternalServerError"), FailureKind::Unavailable),
            (
                400,
                Some("TransactionConflictException"),
                FailureKind::Contention,
            ),
            (
                400,
                Some("ConditionalCheckFailedException"),
                FailureKind::Conflict,
            ),
            (400, Some("ValidationException"), FailureKind::Invalid),
            (400, Some("ValidationError"), FailureKind::Invalid),
            (400, Some("InvalidParameterValue"), FailureKind::Invalid),
            (
                400,
                Some("InvalidInstanceID.NotFound"),
                FailureKind::NotFound,
            ),
            (
                400,
                Some("ResourceNotFoundException"),
                FailureKind::NotFound,
            ),
            (403, Some("AccessDeniedException"), FailureKind::Forbidden),
            (400, Some("UnauthorizedOperation"), FailureKind::Forbidden),
            (
                400,
                Some("ExpiredTokenException"),
                FailureKind::Unauthenticated,
            ),
            // An unknown code: the status decides.
            (503, Some("SomethingNew"), FailureKind::Unavailable),
            (400, Some("SomethingNew"), FailureKind::Invalid),
            (429, None, FailureKind::Throttled),
            (502, None, FailureKind::Unavailable),
        ];
        for (status, code, kind) in kinds {
            assert_eq!(
                failure_kind(&answered(status, code)),
                kind,
                "{status} {code:?}"
            );
        }
        assert!(failure_kind(&answered(400, Some("ThrottlingException"))).retryable());
        assert!(!failure_kind(&answered(400, Some("ValidationException"))).retryable());
        assert!(!failure_kind(&answered(400, Some("ConditionalCheckFailedException"))).retryable());
    }

    #[test]
    fn kinds_of_failures_without_an_answer() {
        use aws_sdk_dynamodb::error::ConnectorError;
        let timeout = GetItemSdkError::timeout_error("took too long");
        assert_eq!(failure_kind(&timeout), FailureKind::Timeout);
        let io = GetItemSdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
        assert_eq!(failure_kind(&io), FailureKind::Connection);
        assert!(failure_kind(&io).retryable());
        let slow = GetItemSdkError::dispatch_failure(ConnectorError::timeout("slow".into()));
        assert_eq!(failure_kind(&slow), FailureKind::Timeout);
        let unbuilt = GetItemSdkError::construction_failure("no table name");
        assert_eq!(failure_kind(&unbuilt), FailureKind::Invalid);
        assert!(!failure_kind(&unbuilt).retryable());
        let garbled = GetItemSdkError::response_error(
            "not JSON",
            HttpResponse::new(500.try_into().unwrap(), "<html>".into()),
        );
        assert_eq!(failure_kind(&garbled), FailureKind::Unavailable);
    }
}
