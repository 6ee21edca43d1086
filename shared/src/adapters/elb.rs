//! Elastic Load Balancing (v2) through the AWS SDK: doomed instances taken off the target groups
//! of their cluster before their first eviction (see [`crate::domain::traffic`]).
//!
//! The calls, economically:
//! - **Discovery by tag, outside the drain.** The cluster's target groups are found with the
//!   Resource Groups Tagging API (`GetResources` on `elasticloadbalancing:targetgroup` filtered
//!   by `elbv2.k8s.aws/cluster=<cluster>`, 100 a page): its cost is the cluster's groups, never
//!   the account's. What is found is kept per place and cluster and refreshed in the background
//!   once older than [`GROUPS_FOR`]: a round reads what is known and never waits for a refresh.
//!   An environment that knows nothing of a cluster yet takes the groups the last round of any
//!   environment knew (the `seed` of [`LoadBalancers::deregister`], from the pool store); only
//!   the very first round of a cluster finds them within itself. Each page found is kept as it
//!   comes, so a discovery cut short (a timeout, a throttle) still leaves what it found; a group
//!   gone since makes it be forgotten at once.
//! - **Targets**: each group's targets are read (`DescribeTargetHealth`) and kept for
//!   [`TARGETS_FOR`] (less what left since); a target already `draining` is left alone; a
//!   target's kind (an instance or an address) is read from its id.
//! - **Deregistration**: one `DeregisterTargets` per group that holds doomed targets, for all of
//!   them ([`DEREGISTER_CHUNK`] at most a call, as the Load Balancer Controller sends them); at
//!   most [`ELB_RATE`] groups at a time.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::types::{TargetDescription, TargetHealthStateEnum};
use aws_sdk_resourcegroupstagging::types::TagFilter;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use crate::adapters::accounts::{Accounts, PerPlace, lock};
use crate::adapters::aws::call_error;
use crate::domain::clusters::ClusterId;
use crate::domain::traffic::{
    CLUSTER_TAG, Deregistered, Doomed, ELB_RATE, Target, doomed_targets, tagged_for,
};
use crate::ports::{Clock, FailureKind, LoadBalancers, PortError};

/// How long the target groups of a cluster, once found, are taken as they are before they are
/// found again in the background.
pub const GROUPS_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a group's targets, once read, are taken as they were (less the ones deregistered
/// since): the rounds of a mass interruption, a second or two apart, read each group once; a
/// pod that became a target since is not seen until then.
pub const TARGETS_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// Targets per `DeregisterTargets`: what the AWS Load Balancer Controller sends at most in one
/// (`defaultDeregisterTargetsChunkSize`).
pub const DEREGISTER_CHUNK: usize = 200;
/// `GetResources`' largest page.
const RESOURCES_PER_PAGE: i32 = 100;
/// The resource type of target groups in the Resource Groups Tagging API.
const TARGET_GROUP_TYPE: &str = "elasticloadbalancing:targetgroup";

/// The clients of one place.
#[derive(Clone, Debug)]
struct Clients {
    elb: Client,
    tags: aws_sdk_resourcegroupstagging::Client,
}

/// [`LoadBalancers`] over the ELB and tagging APIs: of the own account and region, and with
/// [`Accounts`] of the account and region of each event.
#[derive(Clone, Debug)]
pub struct ElbTargets {
    places: PerPlace<Clients>,
    clock: Arc<dyn Clock>,
    /// The target groups of (place, cluster) as known.
    groups: Arc<Mutex<HashMap<ClusterId, Known>>>,
    /// Each group's targets (by ARN), and when they were read.
    targets: Arc<Mutex<Targets>>,
}

type Targets = HashMap<String, (DateTime<Utc>, Vec<Target>)>;

/// A cluster's target groups as known.
#[derive(Clone, Debug, Default)]
struct Known {
    /// When a discovery last went through every page (`None`: none did yet).
    at: Option<DateTime<Utc>>,
    arns: BTreeSet<String>,
    /// Held by the discovery under way, whichever way it ends (no other is started meanwhile).
    finding: Arc<tokio::sync::Mutex<()>>,
}

/// A throttled or failed call is tried at most this often.
const ATTEMPTS: u32 = 2;
/// The wait before trying a call again (with jitter): a round has a budget of seconds, and in a
/// mass interruption a throttled round is better given up (the place's rounds then pause: see
/// [`crate::app::pipeline::QUIET_FOR`]) than waited out.
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// The ELB and tagging clients on `sdk`, whose retries fit in a round's budget ([`ATTEMPTS`],
/// [`FIRST_BACKOFF`]).
fn clients(sdk: &aws_config::SdkConfig) -> Clients {
    let retries = aws_config::retry::RetryConfig::standard().with_max_attempts(ATTEMPTS);
    let retries = retries.with_initial_backoff(FIRST_BACKOFF);
    let sdk = sdk.to_builder().retry_config(retries).build();
    let tags = aws_sdk_resourcegroupstagging::Client::new(&sdk);
    let elb = Client::new(&sdk);
    Clients { elb, tags }
}

impl ElbTargets {
    /// On the standard AWS configuration `sdk`, with [`clients`]' retries.
    pub fn from_conf(sdk: &aws_config::SdkConfig, clock: Arc<dyn Clock>) -> ElbTargets {
        ElbTargets {
            places: PerPlace::single(clients(sdk), clients),
            clock,
            groups: Arc::default(),
            targets: Arc::default(),
        }
    }

    /// Calls about other accounts and regions go through `accounts`.
    pub fn with_accounts(mut self, accounts: Accounts) -> ElbTargets {
        self.places = self.places.with_accounts(accounts);
        self
    }

    /// The target groups of `key` (place, cluster) as known, else as `seed` says (see
    /// [`LoadBalancers::deregister`]), with the discovery calls made waiting for them (only when
    /// nothing is known yet); a discovery is started in the background when what is known is
    /// older than [`GROUPS_FOR`].
    async fn known_groups(
        &self,
        tags: &aws_sdk_resourcegroupstagging::Client,
        key: &ClusterId,
        seed: &[String],
    ) -> Result<(BTreeSet<String>, usize), PortError> {
        // The seed comes from the pool table: only the place's own account and region's.
        let (seed, foreign): (BTreeSet<String>, BTreeSet<String>) = (seed.iter().cloned())
            .partition(|arn| crate::domain::traffic::group_of_place(arn, &key.place));
        if !foreign.is_empty() {
            tracing::warn!(
                account = ?key.place.account,
                region = ?key.place.region,
                refused = ?foreign,
                "target groups kept for a round that are not of its account and region: not used"
            );
        }
        let now = self.clock.now();
        let known = self.known(key, |known| {
            if known.at.is_none() && known.arns.is_empty() {
                known.arns = seed;
            }
            known.clone()
        });
        let fresh = (known.at).is_some_and(|at| now - at < crate::ports::span(GROUPS_FOR));
        let start = (!fresh).then(|| known.finding.clone().try_lock_owned().ok());
        let Some(finding) = start.flatten() else {
            return Ok((known.arns, 0));
        };
        // Nothing known: found now (or by the discovery under way, whose pages land here).
        if known.at.is_none() && known.arns.is_empty() {
            return self.discover(tags, key, finding).await;
        }
        let (this, tags, key) = (self.clone(), tags.clone(), key.clone());
        tokio::spawn(async move {
            if let Err(e) = this.discover(&tags, &key, finding).await {
                tracing::warn!(cluster = %key, error = %e, "target groups not found again");
            }
        });
        Ok((known.arns, 0))
    }

    /// Finds the target groups tagged for the cluster of `key`, keeping each page as it comes;
    /// with the calls it made; however it ends (done, failed, dropped), its `_finding` is let
    /// go, and another discovery may start.
    async fn discover(
        &self,
        tags: &aws_sdk_resourcegroupstagging::Client,
        key: &ClusterId,
        _finding: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<(BTreeSet<String>, usize), PortError> {
        let cluster = key.name.as_str();
        let (mut found, mut calls) = (BTreeSet::new(), 0);
        let filter = TagFilter::builder().key(CLUSTER_TAG).values(cluster);
        let get = tags.get_resources().tag_filters(filter.build());
        let get = get.resource_type_filters(TARGET_GROUP_TYPE);
        let get = get.resources_per_page(RESOURCES_PER_PAGE);
        let mut pages = get.into_paginator().send();
        while let Some(page) = pages.next().await {
            calls += 1;
            let page = page.map_err(|e| call_error("tag:GetResources", e))?;
            // What the filter asked for, checked again: only a target group of the cluster.
            let ours = (page.resource_tag_mapping_list().iter())
                .filter(|m| tagged_for(m.tags().iter().map(|t| (t.key(), t.value())), cluster));
            let arns =
                (ours.filter_map(|m| m.resource_arn())).filter(|a| a.contains(":targetgroup/"));
            let arns: Vec<String> = arns.map(String::from).collect();
            // Partial results are kept: what a cut-short discovery found is known.
            self.known(key, |known| known.arns.extend(arns.iter().cloned()));
            found.extend(arns);
        }
        let now = self.clock.now();
        self.known(key, |known| {
            (known.arns, known.at) = (found.clone(), Some(now))
        });
        Ok((found, calls))
    }

    /// `change` made to the target groups of `key` as known (none known yet: an empty entry).
    fn known<T>(&self, key: &ClusterId, change: impl FnOnce(&mut Known) -> T) -> T {
        change(lock(&self.groups).entry(key.clone()).or_default())
    }

    /// `group`'s doomed targets (of its targets read, or as read within [`TARGETS_FOR`])
    /// deregistered, [`DEREGISTER_CHUNK`] at most a call, each counted in `out` with the
    /// instance it is of; an error of [`FailureKind::NotFound`]: the group is gone.
    async fn clear_group(
        &self,
        client: &Client,
        group: &str,
        doomed: &[Doomed],
        out: &Mutex<Deregistered>,
    ) -> Result<(), PortError> {
        let registered = self.targets_of(client, group, out).await?;
        for chunk in doomed_targets(&registered, doomed).chunks(DEREGISTER_CHUNK) {
            let targets = chunk.iter().map(|(t, _)| {
                let target = TargetDescription::builder().id(&t.id);
                target.set_port(t.port).build()
            });
            lock(out).deregisters += 1;
            (client.deregister_targets().target_group_arn(group))
                .set_targets(Some(targets.collect()))
                .send()
                .await
                .map_err(|e| call_error("elasticloadbalancing:DeregisterTargets", e))?;
            // Gone from the group's targets as read.
            if let Some((_, targets)) = lock(&self.targets).get_mut(group) {
                targets.retain(|t| !chunk.iter().any(|(gone, _)| gone == t));
            }
            let mut out = lock(out);
            for (_, of) in chunk {
                let left = out.left.entry(of.to_string()).or_default();
                left.insert(group.to_string());
            }
        }
        Ok(())
    }

    /// The targets registered in `group` and not draining: as read within [`TARGETS_FOR`], else
    /// read now (`DescribeTargetHealth`, counted in `out`).
    async fn targets_of(
        &self,
        client: &Client,
        group: &str,
        out: &Mutex<Deregistered>,
    ) -> Result<Vec<Target>, PortError> {
        let now = self.clock.now();
        if let Some((at, targets)) = lock(&self.targets).get(group)
            && now - *at < crate::ports::span(TARGETS_FOR)
        {
            return Ok(targets.clone());
        }
        lock(out).describes += 1;
        let read = client.describe_target_health().target_group_arn(group);
        let health = (read.send().await)
            .map_err(|e| call_error("elasticloadbalancing:DescribeTargetHealth", e))?;
        let draining = Some(&TargetHealthStateEnum::Draining);
        let registered: Vec<Target> = (health.target_health_descriptions().iter())
            .filter(|d| d.target_health().and_then(|h| h.state()) != draining)
            .filter_map(|d| {
                let t = d.target()?;
                let (id, port) = (t.id()?.to_string(), t.port());
                Some(Target { id, port })
            })
            .collect();
        lock(&self.targets).insert(group.to_string(), (now, registered.clone()));
        Ok(registered)
    }
}

#[async_trait]
impl LoadBalancers for ElbTargets {
    async fn deregister(
        &self,
        key: &ClusterId,
        doomed: &[Doomed],
        seed: &[String],
    ) -> Result<Deregistered, PortError> {
        let clients = self.places.client(&key.place).await;
        let clients = clients.map_err(|e| PortError::new("tag:GetResources", e.kind(), e))?;
        let (groups, describes) = self.known_groups(&clients.tags, key, seed).await?;
        let out = Mutex::new(Deregistered {
            arns: groups.iter().cloned().collect(),
            describes,
            ..Default::default()
        });
        let (out_, elb) = (&out, &clients.elb);
        let clear = |group: String| async move {
            match self.clear_group(elb, &group, doomed, out_).await {
                Ok(()) => {}
                // Gone: forgotten among the cluster's groups.
                Err(e) if e.kind == FailureKind::NotFound => {
                    self.known(key, |known| known.arns.remove(&group));
                }
                Err(e) => {
                    let mut out = lock(out_);
                    out.failed.push(format!("{group}: {e}"));
                    out.throttled |= e.kind == FailureKind::Throttled;
                }
            }
        };
        let rounds = futures::stream::iter(groups).map(clear);
        rounds.buffer_unordered(ELB_RATE).collect::<()>().await;
        let mut out = out.into_inner().unwrap_or_else(|p| p.into_inner());
        out.failed.sort();
        Ok(out)
    }
}
