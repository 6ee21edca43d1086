//! Auto Scaling: completing the ASG lifecycle action once the node is handled, so the instance
//! terminates without waiting for the hook's heartbeat timeout; and the node groups
//! ([`AsgNodeGroups`]): `DescribeAutoScalingGroups`, with EC2 `DescribeLaunchTemplateVersions` for
//! a launch template's instance type and market type.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use aws_sdk_autoscaling::types::AutoScalingGroup;

use super::accounts::{AccountError, Accounts, PerPlace};
use super::aws::call_error;
use crate::app::priorities::NodeGroupSource;
use crate::domain::event::LifecycleAction;
use crate::domain::priorities::AsgDescription;
use crate::ports::{LifecycleCompleter, Place, PortError};

/// `autoscaling:CompleteLifecycleAction` (and `RecordLifecycleActionHeartbeat`) through the AWS
/// SDK, in the account and region of the action (see [`LifecycleAction::account`]): the own
/// client for the own ones, with [`Accounts`] one on a member account's role for the others.
#[derive(Debug, Clone)]
pub struct AsgLifecycle {
    clients: PerPlace<aws_sdk_autoscaling::Client>,
}

impl AsgLifecycle {
    pub fn new(sdk: &SdkConfig) -> AsgLifecycle {
        AsgLifecycle::from_client(aws_sdk_autoscaling::Client::new(sdk))
    }

    pub fn from_client(client: aws_sdk_autoscaling::Client) -> AsgLifecycle {
        AsgLifecycle {
            clients: PerPlace::single(client, aws_sdk_autoscaling::Client::new),
        }
    }

    /// Completes the actions of other accounts and regions through `accounts`.
    pub fn with_accounts(mut self, accounts: Accounts) -> AsgLifecycle {
        self.clients = self.clients.with_accounts(accounts);
        self
    }

    /// The client for `action`'s account and region.
    async fn client(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<aws_sdk_autoscaling::Client, PortError> {
        let place = Place {
            account: action.account.clone(),
            region: action.region.clone(),
        };
        self.clients
            .client(&place)
            .await
            .map_err(|e| place_error(instance_id, action, e))
    }
}

/// A lifecycle action whose place cannot be served.
fn place_error(instance_id: &str, action: &LifecycleAction, e: AccountError) -> PortError {
    PortError::new(lifecycle_call(instance_id, action), e.kind(), e)
}

/// `CompleteLifecycleAction <asg>/<hook> for <instance>`: what a lifecycle error is about.
fn lifecycle_call(instance_id: &str, action: &LifecycleAction) -> String {
    let LifecycleAction {
        asg_name,
        hook_name,
        ..
    } = action;
    format!("CompleteLifecycleAction {asg_name}/{hook_name} for {instance_id}")
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
    ) -> Result<bool, PortError> {
        let mut request = self
            .client(instance_id, action)
            .await?
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
                Ok(true)
            }
            Err(e) if is_no_active_action(e.code(), e.message()) => {
                let message = e.message().unwrap_or_default();
                tracing::info!(%message, "no active lifecycle action: completed before or timed out");
                Ok(false)
            }
            Err(e) => Err(call_error(lifecycle_call(instance_id, action), e)),
        }
    }

    #[tracing::instrument(skip_all, fields(instance_id, asg = %action.asg_name, hook = %action.hook_name))]
    async fn heartbeat(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, PortError> {
        let mut request = self
            .client(instance_id, action)
            .await?
            .record_lifecycle_action_heartbeat()
            .auto_scaling_group_name(&action.asg_name)
            .lifecycle_hook_name(&action.hook_name)
            .instance_id(instance_id);
        if !action.token.is_empty() {
            request = request.lifecycle_action_token(&action.token);
        }
        match request.send().await {
            Ok(_) => {
                tracing::debug!("kept the lifecycle action alive");
                Ok(true)
            }
            Err(e) if is_no_active_action(e.code(), e.message()) => Ok(false),
            Err(e) => Err(call_error(lifecycle_call(instance_id, action), e)),
        }
    }
}

/// The node groups through the AWS SDK: `autoscaling:DescribeAutoScalingGroups` (every page),
/// and `ec2:DescribeLaunchTemplateVersions` once per launch template version whose instance type
/// or market type the group does not say.
#[derive(Debug, Clone)]
pub struct AsgNodeGroups {
    places: PerPlace<GroupClients>,
}

/// The clients of one place.
#[derive(Debug, Clone)]
struct GroupClients {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
}

impl AsgNodeGroups {
    pub fn new(sdk: &SdkConfig) -> AsgNodeGroups {
        AsgNodeGroups {
            places: PerPlace::single(GroupClients::new(sdk), GroupClients::new),
        }
    }

    /// Describes the groups of other accounts and regions through `accounts`.
    pub fn with_accounts(mut self, accounts: Accounts) -> AsgNodeGroups {
        self.places = self.places.with_accounts(accounts);
        self
    }
}

/// A launch template version: (id or name, version).
type TemplateRef = (Option<String>, Option<String>, String);

fn template_ref(
    spec: Option<&aws_sdk_autoscaling::types::LaunchTemplateSpecification>,
) -> Option<TemplateRef> {
    let spec = spec?;
    Some((
        spec.launch_template_id().map(str::to_string),
        spec.launch_template_name().map(str::to_string),
        spec.version().unwrap_or("$Default").to_string(),
    ))
}

#[async_trait]
impl NodeGroupSource for AsgNodeGroups {
    /// In the own account and region; another place's through its configuration in
    /// [`Accounts`] (a member account's read-only role), refused as [`Accounts`] refuses it.
    async fn describe_at(&self, place: &Place) -> Result<Vec<AsgDescription>, PortError> {
        let clients = self.places.client_for(place, "autoscaling").await?;
        clients.describe().await
    }

    async fn describe(&self) -> Result<Vec<AsgDescription>, PortError> {
        self.places.own().describe().await
    }
}

impl GroupClients {
    fn new(sdk: &SdkConfig) -> GroupClients {
        GroupClients {
            autoscaling: aws_sdk_autoscaling::Client::new(sdk),
            ec2: aws_sdk_ec2::Client::new(sdk),
        }
    }

    /// (instance type, market type) of a launch template version.
    async fn template(
        &self,
        (id, name, version): &TemplateRef,
    ) -> Result<(Option<String>, Option<String>), PortError> {
        let out = self
            .ec2
            .describe_launch_template_versions()
            .set_launch_template_id(id.clone())
            .set_launch_template_name(if id.is_some() { None } else { name.clone() })
            .versions(version)
            .send()
            .await
            .map_err(|e| call_error("ec2 DescribeLaunchTemplateVersions", e))?;
        let data = out
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data());
        Ok((
            data.and_then(|d| d.instance_type())
                .map(|t| t.as_str().to_string()),
            Some(
                data.and_then(|d| d.instance_market_options())
                    .and_then(|m| m.market_type())
                    .map_or_else(String::new, |m| m.as_str().to_string()),
            ),
        ))
    }

    async fn describe(&self) -> Result<Vec<AsgDescription>, PortError> {
        let mut groups = Vec::new();
        let mut templates: BTreeMap<TemplateRef, (Option<String>, Option<String>)> =
            BTreeMap::new();
        let mut pages = self
            .autoscaling
            .describe_auto_scaling_groups()
            .into_paginator()
            .items()
            .send();
        while let Some(g) = pages.next().await {
            let g = g.map_err(|e| call_error("autoscaling DescribeAutoScalingGroups", e))?;
            let mut desc = description(&g);
            let lt = g
                .mixed_instances_policy()
                .and_then(|m| m.launch_template())
                .and_then(|l| l.launch_template_specification())
                .or(g.launch_template());
            if (desc.override_types.is_empty() || !desc.mixed)
                && let Some(r) = template_ref(lt)
            {
                let resolved = match templates.get(&r) {
                    Some(known) => known.clone(),
                    None => {
                        let found = self.template(&r).await?;
                        templates.insert(r, found.clone());
                        found
                    }
                };
                (desc.template_instance_type, desc.template_market) = resolved;
            }
            if desc.template_instance_type.is_none() && desc.override_types.is_empty() {
                // A launch configuration, or a template without a type: what runs.
                desc.template_instance_type = g
                    .instances()
                    .iter()
                    .find_map(|i| i.instance_type().map(str::to_string));
            }
            groups.push(desc);
        }
        // The account's zone IDs: the groups' pools are keyed by them, as the instances' are.
        match crate::adapters::ec2::zones_of(&self.ec2).await {
            Ok(zones) => groups
                .iter_mut()
                .for_each(|g| g.zone_ids.clone_from(&zones.ids)),
            Err(e) => {
                tracing::warn!(error = %e, "the zone IDs could not be read: node groups' pools keyed by zone name");
            }
        }
        Ok(groups)
    }
}

/// What a group says of itself (its launch template's types aside).
fn description(g: &AutoScalingGroup) -> AsgDescription {
    let mixed = g.mixed_instances_policy();
    AsgDescription {
        name: g.auto_scaling_group_name().unwrap_or_default().to_string(),
        tags: g
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
            .collect(),
        zones: g.availability_zones().to_vec(),
        override_types: mixed
            .and_then(|m| m.launch_template())
            .map(|l| {
                l.overrides()
                    .iter()
                    .filter_map(|o| o.instance_type().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        on_demand_percentage: mixed
            .and_then(|m| m.instances_distribution())
            .and_then(|d| d.on_demand_percentage_above_base_capacity()),
        mixed: mixed.is_some(),
        ..AsgDescription::default()
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
