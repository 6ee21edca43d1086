//! Elastic Load Balancing on moto, for the tests of traffic first.

use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::types::TargetHealthStateEnum;

/// The ids of the targets registered in the group `arn` and not leaving it, sorted.
pub async fn registered(elb: &Client, arn: &str) -> Vec<String> {
    let health = elb
        .describe_target_health()
        .target_group_arn(arn)
        .send()
        .await
        .unwrap_or_else(|e| panic!("DescribeTargetHealth of {arn}: {e:?}"));
    let mut ids: Vec<String> = health
        .target_health_descriptions()
        .iter()
        .filter(|d| {
            d.target_health().and_then(|h| h.state()) != Some(&TargetHealthStateEnum::Draining)
        })
        .filter_map(|d| d.target()?.id().map(str::to_string))
        .collect();
    ids.sort();
    ids
}
