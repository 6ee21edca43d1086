//! The member accounts' routes (with an organization): one stack of `infra/member-route.yaml`
//! per member account the deployment serves, in the central account, named
//! `<deployment>-route-<account>`. Each makes the rule `forewarn-route-<account>` on forewarn's
//! bus that puts that account's events on the queue in its own message group, so the queue is
//! fair between accounts. A route whose account is no longer served is deleted.

use std::collections::BTreeSet;

use anyhow::anyhow;
use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::{StackStatus, StackSummary};
use forewarn::domain::clusters::{Entry, is_account_id};

use super::stack::Param;
use forewarn::adapters::aws::aws_error_text;

/// The template of a route.
pub const TEMPLATE: &str = "infra/member-route.yaml";

/// The route stack of `account` for the deployment `deployment`.
pub fn stack_name(deployment: &str, account: &str) -> String {
    format!("{deployment}-route-{account}")
}

/// The member accounts of `clusters` (the stack's `Clusters`: names, `*`, `ACCOUNT/NAME` or
/// `ACCOUNT/*` separated by commas), each once, in order.
pub fn accounts(clusters: &str) -> BTreeSet<String> {
    (clusters.split(','))
        .filter_map(|entry| match Entry::parse(entry.trim()).ok()? {
            Entry::One(id) => id.place.account,
            Entry::Every(place) => place.account,
        })
        .collect()
}

/// The parameters of `account`'s route, from the central stack's outputs (`output`).
pub fn params(
    account: &str,
    output: impl Fn(&str) -> anyhow::Result<String>,
) -> anyhow::Result<Vec<Param>> {
    let mut params = vec![Param::new("MemberAccountId", account, false)];
    for key in ["EventBusName", "QueueArn", "DeadLetterQueueArn"] {
        params.push(Param::new(key, &output(key)?, false));
    }
    Ok(params)
}

/// The accounts whose route stacks of `deployment` exist (any status but deleted).
pub async fn existing(cfn: &Client, deployment: &str) -> anyhow::Result<BTreeSet<String>> {
    let prefix = stack_name(deployment, "");
    let stacks = cfn.list_stacks().into_paginator().items().send();
    let stacks: Vec<StackSummary> = (stacks.collect::<Result<_, _>>().await)
        .map_err(|e| anyhow!("ListStacks: {}", aws_error_text(&e)))?;
    Ok((stacks.iter())
        .filter(|s| s.stack_status() != Some(&StackStatus::DeleteComplete))
        .filter_map(|s| s.stack_name()?.strip_prefix(&prefix))
        .filter(|account| is_account_id(account))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routed_accounts_are_those_clusters_names_each_once() {
        assert_eq!(
            Vec::from_iter(accounts(
                "a,*,111122223333/prod,444455556666/*,111122223333/dev"
            )),
            ["111122223333", "444455556666"]
        );
        assert!(accounts("").is_empty());
        assert!(accounts("prod,12/x").is_empty(), "not member clusters");
        assert_eq!(
            stack_name("forewarn-prod", "111122223333"),
            "forewarn-prod-route-111122223333"
        );
    }

    #[test]
    fn a_routes_parameters_come_from_the_central_stacks_outputs() {
        let params = params("111122223333", |k| Ok(format!("<{k}>"))).unwrap();
        let pairs: Vec<(&str, &str)> = params
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("MemberAccountId", "111122223333"),
                ("EventBusName", "<EventBusName>"),
                ("QueueArn", "<QueueArn>"),
                ("DeadLetterQueueArn", "<DeadLetterQueueArn>"),
            ]
        );
        assert!(super::params("1", |_| anyhow::bail!("no output")).is_err());
    }
}
