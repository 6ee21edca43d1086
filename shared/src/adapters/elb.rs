//! Elastic Load Balancing (v2) through the AWS SDK: a batch's doomed instances taken off the
//! target groups of their cluster before their first eviction (see [`crate::domain::traffic`]).
//!
//! The calls, economically: the cluster's target groups are found by `DescribeTargetGroups`
//! (400 a page) and `DescribeTags` (20 ARNs a call), and kept for [`GROUPS_FOR`] (a group that
//! has gone since makes them be found again); their targets are read (`DescribeTargetHealth`,
//! one call a group, all at once) and kept for [`TARGETS_FOR`]; each batch sends one
//! `DeregisterTargets` per group that holds doomed targets, for all of them. A target already
//! `draining` is left alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::error::ProvideErrorMetadata;
use aws_sdk_elasticloadbalancingv2::types::{TargetDescription, TargetHealthStateEnum};
use chrono::{DateTime, Utc};
use futures::future::join_all;

use crate::adapters::accounts::{Accounts, PerPlace};
use crate::adapters::aws::{AwsError, failure_kind};
use crate::domain::traffic::{
    Deregistered, Doomed, Target, TargetGroup, TargetKind, doomed_targets, tagged_for,
};
use crate::ports::{Clock, FailureKind, LoadBalancers, Place, TrafficError};

/// How long the target groups of a cluster, once found, are taken as they were.
pub const GROUPS_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a group's targets, once read, are taken as they were (less the ones deregistered
/// since): the batches of a mass interruption, seconds apart, read each group once; a pod that
/// became a target since is not seen until then.
pub const TARGETS_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// `DescribeTags` takes at most this many ARNs.
const TAGS_PER_CALL: usize = 20;
/// `DescribeTargetGroups`' largest page.
const GROUPS_PER_PAGE: i32 = 400;

/// [`LoadBalancers`] over the ELB API: of the own account and region, and with [`Accounts`] of
/// the account and region of each event.
#[derive(Clone)]
pub struct ElbTargets {
    places: PerPlace<Client>,
    clock: Arc<dyn Clock>,
    /// The target groups of (place, cluster), and when they were found.
    groups: Arc<Mutex<HashMap<(Place, String), Found>>>,
    /// Each group's targets (by ARN), and when they were read.
    targets: Arc<Mutex<Targets>>,
}

type Targets = HashMap<String, (DateTime<Utc>, Vec<Target>)>;

/// A cluster's target groups, as found at `at`.
#[derive(Clone)]
struct Found {
    at: DateTime<Utc>,
    groups: Vec<TargetGroup>,
    /// The `Describe*` calls finding them took (counted once, by the batch that made them).
    describes: usize,
}

impl std::fmt::Debug for ElbTargets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElbTargets").finish_non_exhaustive()
    }
}

/// A throttled or failed call is tried at most this often.
const ATTEMPTS: u32 = 2;
/// The wait before trying a call again (with jitter): the round has a budget of seconds, and in a
/// mass interruption a throttled round is better given up (the environment's rounds then pause:
/// see [`crate::app::pipeline::QUIET_FOR`]) than waited out.
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// An ELB client on `sdk` whose retries fit in a drain's budget ([`ATTEMPTS`],
/// [`FIRST_BACKOFF`]).
pub fn client(sdk: &aws_config::SdkConfig) -> Client {
    let retries = aws_config::retry::RetryConfig::standard()
        .with_max_attempts(ATTEMPTS)
        .with_initial_backoff(FIRST_BACKOFF);
    let config = aws_sdk_elasticloadbalancingv2::config::Builder::from(sdk)
        .retry_config(retries)
        .build();
    Client::from_conf(config)
}

impl ElbTargets {
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> ElbTargets {
        ElbTargets {
            places: PerPlace::single(client, self::client),
            clock,
            groups: Arc::default(),
            targets: Arc::default(),
        }
    }

    /// On the standard AWS configuration, with [`client`]'s retries.
    pub fn from_conf(sdk: &aws_config::SdkConfig, clock: Arc<dyn Clock>) -> ElbTargets {
        ElbTargets::new(client(sdk), clock)
    }

    /// Calls about other accounts and regions go through `accounts`.
    pub fn with_accounts(mut self, accounts: Accounts) -> ElbTargets {
        self.places = self.places.with_accounts(accounts);
        self
    }

    /// The target groups tagged for `cluster`, from the cache when recent enough; with the
    /// `Describe*` calls this took (0 from the cache).
    async fn groups(
        &self,
        client: &Client,
        place: &Place,
        cluster: &str,
    ) -> Result<Found, TrafficError> {
        let key = (place.clone(), cluster.to_string());
        let now = self.clock.now();
        let fresh = crate::ports::span(GROUPS_FOR);
        if let Some(found) = self.cached(&key)
            && now - found.at < fresh
        {
            return Ok(Found {
                describes: 0,
                ..found
            });
        }
        let found = find_groups(client, cluster, now).await?;
        self.lock().insert(key, found.clone());
        Ok(found)
    }

    fn cached(&self, key: &(Place, String)) -> Option<Found> {
        self.lock().get(key).cloned()
    }

    /// Forgets the groups of (`place`, `cluster`): one of them is gone.
    fn forget(&self, place: &Place, cluster: &str) {
        self.lock().remove(&(place.clone(), cluster.to_string()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Place, String), Found>> {
        // A poisoned cache is still a cache: at worst, groups found again.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `e`, met by `call`.
fn call_error<E>(
    call: &'static str,
    e: aws_sdk_elasticloadbalancingv2::error::SdkError<
        E,
        aws_sdk_elasticloadbalancingv2::config::http::HttpResponse,
    >,
) -> TrafficError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let text = aws_sdk_elasticloadbalancingv2::error::DisplayErrorContext(&e).to_string();
    TrafficError {
        call,
        kind: failure_kind(&e),
        source: Box::new(AwsError::new(text, e)),
    }
}

/// Every target group of the account and region (all pages), then their tags 20 at a time: the
/// instance- and IP-mode groups tagged for `cluster`.
async fn find_groups(
    client: &Client,
    cluster: &str,
    now: DateTime<Utc>,
) -> Result<Found, TrafficError> {
    let mut describes = 0;
    let mut all: Vec<TargetGroup> = Vec::new();
    let mut pages = client
        .describe_target_groups()
        .page_size(GROUPS_PER_PAGE)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        describes += 1;
        let page = page.map_err(|e| call_error("elasticloadbalancing:DescribeTargetGroups", e))?;
        all.extend(page.target_groups().iter().filter_map(|g| {
            let kind = TargetKind::from_elb(g.target_type()?.as_str())?;
            Some(TargetGroup {
                arn: g.target_group_arn()?.to_string(),
                kind,
            })
        }));
    }
    let mut groups = Vec::new();
    for chunk in all.chunks(TAGS_PER_CALL) {
        describes += 1;
        let arns: Vec<String> = chunk.iter().map(|g| g.arn.clone()).collect();
        let tags = client
            .describe_tags()
            .set_resource_arns(Some(arns))
            .send()
            .await
            .map_err(|e| call_error("elasticloadbalancing:DescribeTags", e))?;
        for described in tags.tag_descriptions() {
            let pairs = described
                .tags()
                .iter()
                .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()));
            if tagged_for(pairs, cluster)
                && let Some(group) = chunk
                    .iter()
                    .find(|g| described.resource_arn() == Some(g.arn.as_str()))
            {
                groups.push(group.clone());
            }
        }
    }
    Ok(Found {
        at: now,
        groups,
        describes,
    })
}

/// What became of one group in a batch.
enum GroupDone {
    /// Its doomed targets left (none: no call was needed), each with its instance.
    Left(Vec<String>),
    /// The group is gone.
    Gone,
    /// Why, and whether for throttling.
    Failed(String, bool),
}

/// The calls a group's round made.
#[derive(Default)]
struct Calls {
    describes: usize,
    deregisters: usize,
}

impl ElbTargets {
    /// `group`'s targets (read, or as read within [`TARGETS_FOR`]), and the doomed ones
    /// deregistered in one call; with the calls made.
    async fn clear_group(
        &self,
        client: &Client,
        group: &TargetGroup,
        doomed: &[Doomed],
    ) -> (GroupDone, Calls) {
        let mut calls = Calls::default();
        let registered = match self.targets_of(client, group, &mut calls).await {
            Ok(Some(registered)) => registered,
            Ok(None) => return (GroupDone::Gone, calls),
            Err(e) => {
                let throttled = e.kind == FailureKind::Throttled;
                return (
                    GroupDone::Failed(format!("{}: {e}", group.arn), throttled),
                    calls,
                );
            }
        };
        let leaving = doomed_targets(group.kind, &registered, doomed);
        if leaving.is_empty() {
            return (GroupDone::Left(Vec::new()), calls);
        }
        let targets: Vec<TargetDescription> = leaving
            .iter()
            .map(|(t, _)| {
                TargetDescription::builder()
                    .id(&t.id)
                    .set_port(t.port)
                    .build()
            })
            .collect();
        calls.deregisters += 1;
        let done = client
            .deregister_targets()
            .target_group_arn(&group.arn)
            .set_targets(Some(targets))
            .send()
            .await;
        match done {
            Ok(_) => {
                let gone: Vec<&Target> = leaving.iter().map(|(t, _)| t).collect();
                self.forget_targets(&group.arn, &gone);
                let of = leaving.iter().map(|(_, of)| (*of).to_string()).collect();
                (GroupDone::Left(of), calls)
            }
            Err(e) if e.code() == Some("TargetGroupNotFound") => (GroupDone::Gone, calls),
            Err(e) => {
                let e = call_error("elasticloadbalancing:DeregisterTargets", e);
                let throttled = e.kind == FailureKind::Throttled;
                (
                    GroupDone::Failed(format!("{}: {e}", group.arn), throttled),
                    calls,
                )
            }
        }
    }

    /// The targets registered in `group` and not draining: as read within [`TARGETS_FOR`], else
    /// read now (`DescribeTargetHealth`); `None`: the group is gone.
    async fn targets_of(
        &self,
        client: &Client,
        group: &TargetGroup,
        calls: &mut Calls,
    ) -> Result<Option<Vec<Target>>, TrafficError> {
        let now = self.clock.now();
        if let Some((at, targets)) = self.lock_targets().get(&group.arn)
            && now - *at < crate::ports::span(TARGETS_FOR)
        {
            return Ok(Some(targets.clone()));
        }
        calls.describes += 1;
        let health = match client
            .describe_target_health()
            .target_group_arn(&group.arn)
            .send()
            .await
        {
            Ok(h) => h,
            Err(e) if e.code() == Some("TargetGroupNotFound") => return Ok(None),
            Err(e) => return Err(call_error("elasticloadbalancing:DescribeTargetHealth", e)),
        };
        let registered: Vec<Target> = health
            .target_health_descriptions()
            .iter()
            .filter(|d| {
                d.target_health().and_then(|h| h.state()) != Some(&TargetHealthStateEnum::Draining)
            })
            .filter_map(|d| {
                let t = d.target()?;
                Some(Target {
                    id: t.id()?.to_string(),
                    port: t.port(),
                })
            })
            .collect();
        self.lock_targets()
            .insert(group.arn.clone(), (now, registered.clone()));
        Ok(Some(registered))
    }

    /// `gone` left `arn`: no longer among its targets as read.
    fn forget_targets(&self, arn: &str, gone: &[&Target]) {
        if let Some((_, targets)) = self.lock_targets().get_mut(arn) {
            targets.retain(|t| !gone.contains(&t));
        }
    }

    fn lock_targets(&self) -> std::sync::MutexGuard<'_, Targets> {
        self.targets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl LoadBalancers for ElbTargets {
    async fn deregister(
        &self,
        place: &Place,
        cluster: &str,
        doomed: &[Doomed],
    ) -> Result<Deregistered, TrafficError> {
        let client = self.places.client(place).await.map_err(|e| TrafficError {
            call: "elasticloadbalancing:DescribeTargetGroups",
            kind: e.kind(),
            source: Box::new(e),
        })?;
        let found = self.groups(&client, place, cluster).await?;
        let mut out = Deregistered {
            groups: found.groups.len(),
            describes: found.describes,
            ..Default::default()
        };
        let rounds = found
            .groups
            .iter()
            .map(|g| self.clear_group(&client, g, doomed));
        let done = join_all(rounds).await;
        let mut left: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (group, (done, calls)) in found.groups.iter().zip(done) {
            out.describes += calls.describes;
            out.deregisters += calls.deregisters;
            match done {
                GroupDone::Left(of) => {
                    for instance in of {
                        let arns = left.entry(instance).or_default();
                        if !arns.contains(&group.arn) {
                            arns.push(group.arn.clone());
                        }
                    }
                }
                GroupDone::Gone => self.forget(place, cluster),
                GroupDone::Failed(why, throttled) => {
                    out.failed.push(why);
                    out.throttled |= throttled;
                }
            }
        }
        out.left = left;
        Ok(out)
    }
}
