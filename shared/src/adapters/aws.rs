//! The one AWS SDK configuration every client is built from (DynamoDB, EC2, Auto Scaling, EKS),
//! with one retry policy, and the text of an SDK error.

use aws_config::{BehaviorVersion, SdkConfig};

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
    with_default_attempts(config, settings.max_attempts_set)
}

fn with_default_attempts(config: SdkConfig, explicit: bool) -> SdkConfig {
    let sdk_default = aws_config::retry::RetryConfig::standard().max_attempts();
    match config.retry_config() {
        Some(retry) if !explicit && retry.max_attempts() == sdk_default => {
            let retry = retry.clone().with_max_attempts(DEFAULT_MAX_ATTEMPTS);
            config.into_builder().retry_config(retry).build()
        }
        _ => config,
    }
}

/// An AWS SDK error with its causes (the SDK's `Display` alone says "service error").
pub fn aws_error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

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
        let attempts = |c: SdkConfig| c.retry_config().map(|r| r.max_attempts());
        assert_eq!(attempts(with_default_attempts(loaded(3), false)), Some(5));
        assert_eq!(attempts(with_default_attempts(loaded(3), true)), Some(3));
        assert_eq!(attempts(with_default_attempts(loaded(7), false)), Some(7));
    }
}
