//! Completing the ASG lifecycle action once the node is handled, so the instance terminates
//! without waiting for the hook's heartbeat timeout.

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_autoscaling::error::ProvideErrorMetadata;

use super::aws::aws_error_text;
use crate::domain::event::LifecycleAction;
use crate::ports::{LifecycleCompleter, LifecycleError, LifecycleOutcome};

/// `autoscaling:CompleteLifecycleAction` through the AWS SDK.
#[derive(Debug, Clone)]
pub struct AsgLifecycle {
    client: aws_sdk_autoscaling::Client,
}

impl AsgLifecycle {
    pub fn new(sdk: &SdkConfig) -> AsgLifecycle {
        AsgLifecycle::from_client(aws_sdk_autoscaling::Client::new(sdk))
    }

    pub fn from_client(client: aws_sdk_autoscaling::Client) -> AsgLifecycle {
        AsgLifecycle { client }
    }
}

/// Whether a `ValidationError` says the action is not pending any more. AWS says
/// `No active Lifecycle Action found with instance ID i-...` (or `with token ...`).
pub(crate) fn is_no_active_action(code: Option<&str>, message: Option<&str>) -> bool {
    code == Some("ValidationError")
        && message.is_some_and(|m| {
            m.to_ascii_lowercase()
                .contains("no active lifecycle action")
        })
}

#[async_trait]
impl LifecycleCompleter for AsgLifecycle {
    #[tracing::instrument(skip_all, fields(instance_id, asg = %action.asg_name, hook = %action.hook_name))]
    async fn complete(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<LifecycleOutcome, LifecycleError> {
        let mut request = self
            .client
            .complete_lifecycle_action()
            .auto_scaling_group_name(&action.asg_name)
            .lifecycle_hook_name(&action.hook_name)
            .lifecycle_action_result("CONTINUE")
            .instance_id(instance_id);
        if !action.token.is_empty() {
            request = request.lifecycle_action_token(&action.token);
        }
        match request.send().await {
            Ok(_) => {
                tracing::info!("completed the lifecycle action");
                Ok(LifecycleOutcome::Completed)
            }
            Err(e) if is_no_active_action(e.code(), e.message()) => {
                let message = e.message().unwrap_or_default().to_string();
                tracing::info!(%message, "no active lifecycle action: completed before or timed out");
                Ok(LifecycleOutcome::AlreadyCompleted { message })
            }
            Err(e) => Err(LifecycleError {
                asg: action.asg_name.clone(),
                hook: action.hook_name.clone(),
                instance_id: instance_id.to_string(),
                code: e.code().map(str::to_string),
                message: match e.message() {
                    Some(m) => m.to_string(),
                    None => aws_error_text(&e),
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_active_action_is_recognised() {
        assert!(is_no_active_action(
            Some("ValidationError"),
            Some("No active Lifecycle Action found with instance ID i-0123456789abcdef0")
        ));
        assert!(!is_no_active_action(
            Some("ValidationError"),
            Some("1 validation error detected")
        ));
        assert!(!is_no_active_action(
            Some("ResourceContention"),
            Some("No active Lifecycle Action")
        ));
    }
}
