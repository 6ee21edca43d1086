//! Traffic first: before a drain's first eviction, its instance leaves every instance-mode target
//! group of its cluster, and its pods' addresses every IP-mode one, so the load balancers stop
//! sending requests to pods about to go (see `docs/concepts/traffic.md`).
//!
//! A target group is its cluster's when the AWS Load Balancer Controller tagged it
//! `elbv2.k8s.aws/cluster=<cluster>`; no other is ever touched. What a drain's instance is in a
//! target group: in an instance-mode group, a target whose id is the instance's; in an IP-mode
//! group, a target whose address is one of the instance's (its network interfaces' private
//! addresses, primary and secondary, or inside one of their delegated prefixes: the VPC CNI
//! gives pods those addresses, and IP-mode targets must be VPC addresses).
//!
//! Pure: what to deregister from what ELB and EC2 said; the calls are the adapter's.

use std::collections::{BTreeMap, BTreeSet};
// `core::net`: address types only, no sockets (the domain does no I/O).
use core::net::IpAddr;

use chrono::{DateTime, Utc};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::domain::clusters::ClusterId;
use crate::domain::event::EventKind;
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing, Unverified};

/// The tag the AWS Load Balancer Controller puts on the target groups it makes for a cluster.
pub const CLUSTER_TAG: &str = "elbv2.k8s.aws/cluster";

/// The key of `cluster`'s rounds (see `crate::ports::TrafficRounds`), which what is offered
/// to them is signed for: `TRAFFIC#<account>#<region>#<cluster>` (`-` for what its place does
/// not say).
pub fn round_of(cluster: &ClusterId) -> String {
    cluster.key("TRAFFIC")
}

/// A target registered in a target group, as `DescribeTargetHealth` lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// The instance id or the address.
    pub id: String,
    /// The port it was registered with (the node port, or the pod's port).
    pub port: Option<i32>,
}

/// An instance whose drain is about to evict: its id and its addresses (see the module doc).
/// Without addresses, only its instance-mode targets leave (see [`leaves_whole`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doomed {
    pub instance_id: String,
    /// Addresses (`10.0.1.5`) and delegated prefixes (`10.0.1.16/28`).
    pub addresses: Vec<String>,
    /// `<key id>:<HMAC-SHA256 in hex>` of what it says in its round ([`Doomed::signed`]): the
    /// rounds are kept in the pool table, which more principals may write than forewarn's
    /// functions, so a round takes off only what forewarn signed ([`Doomed::verify`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Why a round refuses an instance it was offered: nothing of it leaves a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("not signed by forewarn")]
    Unsigned,
    #[error("its signature does not verify ({0})")]
    Unverified(Unverified),
    #[error("not an EC2 instance id")]
    NotAnInstance,
    #[error(
        "{0:?} is neither a host address nor an EC2 delegated prefix (/28 for IPv4, /80 for IPv6)"
    )]
    Address(String),
}

impl Doomed {
    /// `instance_id` with `addresses`, not signed yet.
    pub fn new(instance_id: impl Into<String>, addresses: Vec<String>) -> Doomed {
        Doomed {
            instance_id: instance_id.into(),
            addresses,
            signature: None,
        }
    }

    /// What its signature covers: its round (`TRAFFIC#<account>#<region>#<cluster>`), its
    /// instance and its addresses, so that an entry copied to another round, or given another
    /// address, does not verify.
    fn signing_input(&self, round: &str) -> String {
        let (id, addresses) = (&self.instance_id, self.addresses.join(","));
        format!("forewarn-traffic-v1\n{round}\n{id}\n{addresses}")
    }

    /// Signed for `round` by `key`.
    pub fn signed(mut self, round: &str, key: &ContinuationKey) -> Doomed {
        let mac = key.sign(&self.signing_input(round));
        self.signature = Some(format!("{}:{mac}", key.id()));
        self
    }

    /// Whether a round of `round` may take it off: its instance id is one, each address is a
    /// host address or an EC2 delegated prefix, and it is signed by a key of `keys`. Otherwise
    /// why not.
    pub fn verify(&self, round: &str, keys: &KeyRing) -> Result<(), Refused> {
        if !crate::domain::event::is_instance_id(&self.instance_id) {
            return Err(Refused::NotAnInstance);
        }
        if let Some(address) = self.addresses.iter().find(|a| accepted(a).is_none()) {
            return Err(Refused::Address(address.clone()));
        }
        let signature = self.signature.as_deref().and_then(|s| s.split_once(':'));
        let (id, mac) = signature.ok_or(Refused::Unsigned)?;
        let id = id.parse::<KeyId>().map_err(|_| Unverified::NotHex);
        let input = self.signing_input(round);
        let verified = id.and_then(|id| keys.verify(Some((id, mac)), &input));
        verified.map_err(Refused::Unverified)
    }
}

/// A host address (`10.0.1.5`, `2600:1f18::5`, as its own /32 or /128), or a prefix of the sizes
/// EC2 delegates to a network interface (`/28` of IPv4, `/80` of IPv6): never a wider range
/// (`0.0.0.0/0` would take every IP target of the cluster off); `None`: neither.
fn accepted(address: &str) -> Option<IpNet> {
    match address.split_once('/') {
        None => address.parse::<IpAddr>().ok().map(IpNet::from),
        Some((_, bits)) => address
            .parse::<IpNet>()
            .ok()
            .filter(|net| matches!((net, bits), (IpNet::V4(_), "28") | (IpNet::V6(_), "80"))),
    }
}

/// Whether `arn` names a target group of `place`'s account and region (what the place does not
/// say is not checked): the only groups a round of that place may be given by what the pool
/// table kept.
pub fn group_of_place(arn: &str, place: &crate::domain::clusters::Place) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ["arn", _, "elasticloadbalancing", region, account, resource] = parts[..] else {
        return false;
    };
    resource.starts_with("targetgroup/")
        && place.region.as_deref().is_none_or(|r| r == region)
        && place.account.as_deref().is_none_or(|a| a == account)
}

/// Whether a target group's tags (key, value) say it is `cluster`'s.
pub fn tagged_for<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>, cluster: &str) -> bool {
    tags.into_iter()
        .any(|(key, value)| key == CLUSTER_TAG && value == cluster)
}

/// The targets of `registered` that are doomed instances', each with the instance it is of. A
/// target's kind is read from its id: an address is an IP-mode group's, matched by the doomed
/// instances' addresses and prefixes (one that is not [`accepted`] matches nothing); anything
/// else names an instance (or, in `lambda` and `alb` groups, a function or a load balancer,
/// which no doomed instance ever matches). The groups' own `TargetType` need not be read.
pub fn doomed_targets<'a>(registered: &[Target], doomed: &'a [Doomed]) -> Vec<(Target, &'a str)> {
    registered
        .iter()
        .filter_map(|t| {
            let ip = t.id.parse::<IpAddr>().ok();
            let of = doomed.iter().find(|d| match ip {
                None => t.id == d.instance_id,
                Some(ip) => {
                    (d.addresses.iter().filter_map(|a| accepted(a))).any(|n| n.contains(&ip))
                }
            })?;
            Some((t.clone(), of.instance_id.as_str()))
        })
        .collect()
}

/// Whether a drain for an event of `kind` takes its whole node off at once, its pods' addresses
/// with it: the instance goes within minutes (a spot or capacity reservation warning, a state
/// change to `stopping` or `shutting-down`), and its pods with it whatever their disruption
/// budgets say. Any other drain (a scheduled change days ahead, an impaired instance, an ASG
/// termination kept alive by heartbeats, a Capacity Block's ten minutes, in which its pods
/// serve until there is room elsewhere and checkpoint through their grace) takes off only its
/// instance-mode targets, which other nodes still serve: a pod whose budget refuses its
/// eviction keeps its own (IP-mode) target, which the AWS Load Balancer Controller takes off
/// when the pod terminates.
pub fn leaves_whole(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::SpotInterruption
            | EventKind::CapacityReservationInterruption
            | EventKind::StateChange
    )
}

/// What the rounds did for one doomed instance: out of `left` of the cluster's `groups` target
/// groups, and the groups that failed, with why. Kept in the pool store for every batch that
/// waits on the instance (see [`crate::ports::TrafficRounds`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// When the round that took it off started.
    pub at: DateTime<Utc>,
    pub groups: usize,
    pub left: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Its pods' addresses were taken off with it (see [`leaves_whole`]).
    #[serde(default)]
    pub pods: bool,
}

impl Outcome {
    /// Whether a batch that offered `doomed` at `offered` takes this outcome as its own: a round
    /// since then, or one of the [`OUTCOME_KEPT`] before that failed in no group (the instance
    /// left every group it was in) and took off what this batch wants off (its pods' addresses
    /// too, when it has some).
    pub fn answers(&self, doomed: &Doomed, offered: DateTime<Utc>) -> bool {
        let all = self.failed.is_empty() && (self.pods || doomed.addresses.is_empty());
        let kept = chrono::Duration::from_std(OUTCOME_KEPT).unwrap_or_default();
        self.at >= offered || (all && offered - self.at < kept)
    }

    /// What became of `instance_id`'s targets, for its record's report.
    pub fn note(&self, instance_id: &str) -> String {
        let failed = self.failed.join("; ");
        if self.groups == 0 && !failed.is_empty() {
            return format!(
                "{instance_id}: not taken off the load balancers ({failed}): evicting anyway"
            );
        }
        let not = (!failed.is_empty()).then(|| format!("; not deregistered from: {failed}"));
        format!(
            "{instance_id}: out of {} of the cluster's {} target groups before the first eviction{}",
            self.left,
            self.groups,
            not.unwrap_or_default()
        )
    }
}

/// The instances a round takes at most (the others wait for the next round): a round's calls
/// stay within the account's ELB limits however many were offered
/// meanwhile (a quiet time, thousands of cordons), one `DeregisterTargets` of 200 targets at
/// most per instance-mode group.
pub const ROUND_TAKES: usize = 200;

/// How long an outcome is kept for the batches that wait on its instance.
pub const OUTCOME_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The least time between two rounds of one place and cluster.
pub const ROUND_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// forewarn's share of each account's ELB limits, the benchmarked value: `DeregisterTargets`
/// calls a second, and calls at once in a round.
pub const ELB_RATE: usize = 3;

/// When the round after one `started` at that made `calls` deregistrations may start: at
/// [`ROUND_EVERY`] at the soonest, and never sooner than [`ELB_RATE`] of them a second allow
/// (the Load Balancer Controller needs the account's ELB limits too, to register the
/// replacement pods).
pub fn next_round(started: DateTime<Utc>, calls: usize) -> DateTime<Utc> {
    let spaced = std::time::Duration::from_secs_f64(calls as f64 / ELB_RATE as f64);
    let wait = chrono::Duration::from_std(spaced.max(ROUND_EVERY)).unwrap_or_default();
    started.checked_add_signed(wait).unwrap_or(started)
}

/// What a claim of the next round answered (see `crate::ports::TrafficRounds::claim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller makes the round, for these doomed instances (every one offered since the last
    /// round, by any batch of any execution environment), with the cluster's target groups as
    /// the last round found them (an environment that knows none yet need not find them).
    Taken(Vec<Doomed>, Vec<String>),
    /// No instance is waiting for a round.
    Nothing,
    /// A round is being made, for this long at most: its outcomes come any moment.
    Making(DateTime<Utc>),
    /// A round was made too recently: the next not before this time.
    NotYet(DateTime<Utc>),
    /// A round throttled or went unanswered at this time: no round until its quiet time ends.
    Quiet(DateTime<Utc>),
}

/// The rounds of one cluster's load balancers in one account and region, as the pool store
/// keeps them: the instances offered since the last round, when the next may start, and a quiet
/// time after a round that throttled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rounds {
    pub pending: Vec<Doomed>,
    pub next_at: Option<DateTime<Utc>>,
    /// A round is being made, its maker's until this (or its settling).
    pub making_until: Option<DateTime<Utc>>,
    /// A round throttled or went unanswered at the first time: no round until the second.
    pub quiet: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// The cluster's target groups (ARNs) as the last round knew them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Rounds {
    /// `doomed` wait for the next round (an instance offered again replaces its entry).
    pub fn offer(&mut self, doomed: &[Doomed]) {
        for d in doomed {
            self.pending.retain(|p| p.instance_id != d.instance_id);
            self.pending.push(d.clone());
        }
    }

    /// What a claim at `now` answers, and the state after it: a round due and wanted is the
    /// caller's until `now + lease` (or its settling).
    pub fn claim(&mut self, now: DateTime<Utc>, lease: std::time::Duration) -> Claim {
        // The first reason to take no round, in this order.
        let ahead = |t: &DateTime<Utc>| now < *t;
        let wait = (self.quiet.filter(|(_, until)| ahead(until)))
            .map(|(since, _)| Claim::Quiet(since))
            .or_else(|| self.making_until.filter(ahead).map(Claim::Making))
            .or_else(|| self.next_at.filter(ahead).map(Claim::NotYet))
            .or_else(|| self.pending.is_empty().then_some(Claim::Nothing));
        if let Some(wait) = wait {
            return wait;
        }
        let lease = chrono::Duration::from_std(lease).unwrap_or_default();
        self.making_until = Some(now.checked_add_signed(lease).unwrap_or(now));
        let rest = self.pending.split_off(self.pending.len().min(ROUND_TAKES));
        let taken = std::mem::replace(&mut self.pending, rest);
        Claim::Taken(taken, self.groups.clone())
    }

    /// The caller's round ended at `now`, as `settled` says (its outcomes apart).
    pub fn settle(&mut self, now: DateTime<Utc>, settled: &Settled) {
        self.next_at = settled.next;
        if let Some(groups) = &settled.groups {
            self.groups.clone_from(groups);
        }
        self.making_until = None;
        self.quiet = (settled.quiet_until.map(|until| (now, until))).or(self.quiet);
    }
}

/// What a round settles (see `crate::ports::TrafficRounds::settle`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    pub outcomes: BTreeMap<String, Outcome>,
    /// The next round not before this.
    pub next: Option<DateTime<Utc>>,
    /// No round until this (see `crate::app::pipeline::QUIET_FOR`).
    pub quiet_until: Option<DateTime<Utc>>,
    /// The cluster's target groups, when the round knew them.
    pub groups: Option<Vec<String>>,
}

/// What taking a batch's doomed instances off their cluster's load balancers did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deregistered {
    /// The cluster's target groups (instance and IP mode) looked at, by ARN: kept for the
    /// rounds that follow (see [`Rounds::groups`]).
    pub arns: Vec<String>,
    /// Per doomed instance, the target groups it (or its pods) left, by ARN.
    pub left: BTreeMap<String, BTreeSet<String>>,
    /// Target groups whose deregistration failed, with why (the others were still done).
    pub failed: Vec<String>,
    /// Some call was throttled to the end: the account's ELB limits (shared with the Load
    /// Balancer Controller) are spent for now.
    pub throttled: bool,
    /// The Elastic Load Balancing calls made: `Describe*`, then `DeregisterTargets`.
    pub describes: usize,
    pub deregisters: usize,
}

impl Deregistered {
    /// What became of each of `doomed`'s targets in the round started `at`.
    pub fn outcomes(&self, doomed: &[Doomed], at: DateTime<Utc>) -> BTreeMap<String, Outcome> {
        let outcome = |d: &Doomed| Outcome {
            at,
            pods: !d.addresses.is_empty(),
            groups: self.arns.len(),
            left: self.left.get(&d.instance_id).map_or(0, BTreeSet::len),
            failed: self.failed.clone(),
        };
        let outcomes = doomed.iter().map(|d| (d.instance_id.clone(), outcome(d)));
        outcomes.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(id: &str, port: i32) -> Target {
        Target {
            id: id.into(),
            port: Some(port),
        }
    }

    fn doomed(id: &str, addresses: &[&str]) -> Doomed {
        Doomed::new(id, addresses.iter().map(|a| a.to_string()).collect())
    }

    /// A round takes off only what forewarn signed for that round: an entry written into the
    /// pool table by anyone else (no signature, another key, copied from another round, an
    /// address changed after signing), a forged instance id, or an address wider than EC2
    /// delegates is refused, with why.
    #[test]
    fn a_round_takes_off_only_what_forewarn_signed_for_it() {
        let key = ContinuationKey::new([7; 32]);
        let keys = KeyRing::of(key.clone());
        let round = "TRAFFIC#123456789012#us-east-1#prod";
        let id = "i-0a1b2c3d4e5f60001";
        let good = doomed(id, &["10.0.1.5", "10.0.1.16/28", "2600:1f18::/80"]).signed(round, &key);
        assert_eq!(good.verify(round, &keys), Ok(()));
        assert!(good.signature.as_deref().unwrap().starts_with("1:"));
        // Signed before a rotation: still accepted (the previous key), and after the next, not.
        let rotated = keys.rotated([8; 32]).unwrap();
        assert_eq!(good.verify(round, &rotated), Ok(()));
        let twice = rotated.rotated([9; 32]).unwrap();
        assert!(matches!(
            good.verify(round, &twice),
            Err(Refused::Unverified(Unverified::UnknownKey { .. }))
        ));
        let unsigned = doomed(id, &["10.0.1.5"]);
        assert_eq!(unsigned.verify(round, &keys), Err(Refused::Unsigned));
        let other_key = doomed(id, &["10.0.1.5"]).signed(round, &ContinuationKey::new([1; 32]));
        assert!(matches!(
            other_key.verify(round, &keys),
            Err(Refused::Unverified(Unverified::Mismatch))
        ));
        let elsewhere =
            doomed(id, &["10.0.1.5"]).signed("TRAFFIC#123456789012#us-east-1#dev", &key);
        assert!(elsewhere.verify(round, &keys).is_err(), "another round's");
        let mut widened = good.clone();
        widened.addresses.push("10.0.2.7".into());
        assert!(widened.verify(round, &keys).is_err(), "an address added");
        for forged in [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "10.0.1.16/29",
            "::/0",
            "2600:1f18::/64",
            "x",
        ] {
            let d = doomed(id, &[forged]).signed(round, &key);
            let refused = Refused::Address(forged.into());
            assert_eq!(d.verify(round, &keys), Err(refused.clone()), "{forged}");
            assert!(refused.to_string().contains("/28 for IPv4"));
        }
        let not_an_instance = doomed("i-1;x", &[]).signed(round, &key);
        assert!(matches!(
            not_an_instance.verify(round, &keys),
            Err(Refused::NotAnInstance)
        ));
        let garbled = Doomed {
            signature: Some("one:beef".into()),
            ..doomed(id, &[])
        };
        assert!(garbled.verify(round, &keys).is_err());
    }

    /// Even unverified, a prefix wider than EC2 delegates matches no IP target: `0.0.0.0/0`
    /// takes nothing off.
    #[test]
    fn a_wide_prefix_matches_no_target() {
        let registered = [target("10.0.1.5", 8080), target("10.9.9.9", 8080)];
        assert!(doomed_targets(&registered, &[doomed("i-1", &["0.0.0.0/0"])]).is_empty());
        assert!(doomed_targets(&registered, &[doomed("i-1", &["10.0.0.0/8"])]).is_empty());
        assert_eq!(
            doomed_targets(&registered, &[doomed("i-1", &["10.0.1.0/28"])]).len(),
            1
        );
    }

    /// The target groups a round is given from the pool table must be of its account and
    /// region.
    #[test]
    fn a_rounds_groups_are_of_its_own_account_and_region() {
        let place = crate::domain::clusters::Place::of("123456789012", "us-east-1");
        let arn = |region: &str, account: &str| {
            format!(
                "arn:aws:elasticloadbalancing:{region}:{account}:targetgroup/k8s-web/0123456789abcdef"
            )
        };
        assert!(group_of_place(&arn("us-east-1", "123456789012"), &place));
        assert!(!group_of_place(&arn("us-east-1", "999999999999"), &place));
        assert!(!group_of_place(&arn("eu-west-1", "123456789012"), &place));
        assert!(!group_of_place(
            "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/x/1",
            &place
        ));
        assert!(!group_of_place(
            "arn:aws:sqs:us-east-1:123456789012:targetgroup/x",
            &place
        ));
        assert!(!group_of_place("not an arn", &place));
        // A place that does not say its account (a local run) checks the region alone.
        let unnamed = crate::domain::clusters::Place {
            account: None,
            region: Some("us-east-1".into()),
        };
        assert!(group_of_place(&arn("us-east-1", "999999999999"), &unnamed));
    }

    #[test]
    fn an_instance_group_loses_the_doomed_instances_on_every_port_and_nothing_else() {
        let registered = [
            target("i-1", 30080),
            target("i-2", 30080),
            target("i-1", 30443),
        ];
        let doomed = [doomed("i-1", &["10.0.0.5"])];
        let out = doomed_targets(&registered, &doomed);
        let ids: Vec<_> = out.iter().map(|(t, of)| (t.clone(), *of)).collect();
        assert_eq!(
            ids,
            vec![(target("i-1", 30080), "i-1"), (target("i-1", 30443), "i-1")]
        );
    }

    #[test]
    fn an_ip_group_loses_the_addresses_and_prefixes_of_doomed_instances() {
        let registered = [
            target("10.0.0.5", 8080),
            target("10.0.1.17", 8080),
            target("10.0.1.33", 8080),
            target("10.0.9.9", 8080),
            target("2600:1f18::5", 8080),
        ];
        let doomed = [
            doomed("i-1", &["10.0.0.5", "10.0.1.16/28"]),
            doomed("i-2", &["2600:1f18::/80"]),
        ];
        let out = doomed_targets(&registered, &doomed);
        let ids: Vec<_> = out.iter().map(|(t, of)| (t.id.as_str(), *of)).collect();
        assert_eq!(
            ids,
            vec![
                ("10.0.0.5", "i-1"),
                ("10.0.1.17", "i-1"),
                ("2600:1f18::5", "i-2")
            ]
        );
    }

    #[test]
    fn an_instance_id_never_matches_an_address_nor_garbage_a_prefix() {
        let registered = [target("not-an-ip", 80), target("10.1.0.5", 80)];
        let garbage = [doomed("i-1", &["i-1", "10.1.0.0/99", "x/8"])];
        let doomed = [doomed("i-1", &["i-1", "10.1.0.0/99", "x/8", "0.0.0.0/0"])];
        let out = doomed_targets(&registered[..1], &doomed);
        assert!(out.is_empty(), "{out:?}");
        let out = doomed_targets(&registered, &garbage);
        assert!(out.is_empty(), "{out:?}");
        // A /0 prefix, wider than EC2 delegates, holds no address of either family.
        let v4 = [target("192.168.1.1", 80), target("::1", 80)];
        let out = doomed_targets(&v4, &doomed);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn only_the_clusters_tag_makes_a_group_its() {
        assert!(tagged_for([("elbv2.k8s.aws/cluster", "blue")], "blue"));
        assert!(!tagged_for([("elbv2.k8s.aws/cluster", "green")], "blue"));
        assert!(!tagged_for(
            [("kubernetes.io/cluster/blue", "owned")],
            "blue"
        ));
        assert!(!tagged_for([], "blue"));
    }

    /// A target's kind is read from its id: an address (of either family) is matched by
    /// addresses, anything else (an instance id, a Lambda or ALB target) by instance id alone.
    #[test]
    fn a_targets_kind_is_read_from_its_id() {
        let lambda = "arn:aws:lambda:us-east-1:123456789012:function:f";
        let registered = [
            target("i-0123456789abcdef0", 80),
            target("10.0.0.5", 80),
            target("2600:1f18::5", 80),
            target(lambda, 80),
        ];
        let both = [
            doomed("i-0123456789abcdef0", &["10.0.0.5", "2600:1f18::5"]),
            doomed(lambda, &[lambda]),
        ];
        let out = doomed_targets(&registered, &both);
        let ids: Vec<_> = out.iter().map(|(t, of)| (t.id.as_str(), *of)).collect();
        assert_eq!(
            ids,
            vec![
                ("i-0123456789abcdef0", "i-0123456789abcdef0"),
                ("10.0.0.5", "i-0123456789abcdef0"),
                ("2600:1f18::5", "i-0123456789abcdef0"),
                (lambda, lambda),
            ]
        );
        // An address never matches by instance id.
        assert!(doomed_targets(&registered[1..2], &[doomed("10.0.0.5", &[])]).is_empty());
    }

    #[test]
    fn an_outcome_names_what_was_left_and_what_failed() {
        let mut d = Deregistered {
            arns: vec!["arn:a".into(), "arn:b".into(), "arn:c".into()],
            ..Default::default()
        };
        d.left
            .insert("i-1".into(), ["arn:a".into(), "arn:b".into()].into());
        let doomed = [doomed("i-1", &[]), doomed("i-2", &[])];
        let at = DateTime::parse_from_rfc3339("2026-11-28T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let out = d.outcomes(&doomed, at);
        assert_eq!(
            out["i-1"].note("i-1"),
            "i-1: out of 2 of the cluster's 3 target groups before the first eviction"
        );
        assert_eq!(out["i-2"].left, 0);
        // A later batch takes an earlier outcome without failures as its own (the instance left
        // every group it was in), within the hour; one with failures only from a round since.
        let later = at + chrono::Duration::seconds(1);
        assert!(out["i-1"].answers(&doomed[0], later));
        assert!(!out["i-1"].answers(&doomed[0], at + chrono::Duration::hours(2)));
        // A batch that wants the pods' addresses off too: not by a round that took only the
        // instance's targets.
        let with_pods = Doomed::new("i-1", vec!["10.0.0.5".into()]);
        assert!(!out["i-1"].answers(&with_pods, later));
        assert!(out["i-1"].answers(&with_pods, at));
        let pods = d.outcomes(std::slice::from_ref(&with_pods), at);
        assert!(pods["i-1"].pods && pods["i-1"].answers(&with_pods, later));
        d.failed.push("arn:c: ThrottlingException".into());
        assert!(!d.outcomes(&doomed, at)["i-1"].answers(&doomed[0], later));
        assert!(
            d.outcomes(&doomed, at)["i-2"]
                .note("i-2")
                .ends_with("not deregistered from: arn:c: ThrottlingException")
        );
    }

    #[test]
    fn only_drains_whose_instance_goes_within_minutes_take_their_pods_off() {
        for &kind in EventKind::ALL {
            let whole = matches!(
                kind,
                EventKind::SpotInterruption
                    | EventKind::CapacityReservationInterruption
                    | EventKind::StateChange
            );
            assert_eq!(leaves_whole(kind), whole, "{kind:?}");
        }
    }

    #[test]
    fn rounds_are_a_second_apart_at_least_and_within_the_share() {
        let t = DateTime::parse_from_rfc3339("2026-11-28T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let secs = |n: usize| (next_round(t, n) - t).num_milliseconds();
        assert_eq!(ELB_RATE, 3);
        assert_eq!(secs(0), 1000);
        assert_eq!(secs(3), 1000);
        assert_eq!(secs(6), 2000);
        assert_eq!(secs(7), 2333);
    }

    #[test]
    fn a_round_takes_what_was_offered_once_and_keeps_its_spacing_and_quiet() {
        let t = |s: i64| {
            DateTime::parse_from_rfc3339("2026-11-28T00:00:00Z")
                .unwrap()
                .with_timezone(&Utc)
                + chrono::Duration::seconds(s)
        };
        let lease = std::time::Duration::from_secs(3);
        let mut r = Rounds::default();
        assert_eq!(r.claim(t(0), lease), Claim::Nothing);
        r.offer(&[doomed("i-1", &["10.0.0.1"]), doomed("i-2", &[])]);
        r.offer(&[doomed("i-1", &["10.0.0.9"])]);
        let Claim::Taken(taken, groups) = r.claim(t(0), lease) else {
            panic!("{r:?}")
        };
        let ids: Vec<_> = taken.iter().map(|d| d.instance_id.as_str()).collect();
        assert_eq!(ids, ["i-2", "i-1"]);
        assert_eq!(taken[1].addresses, ["10.0.0.9"]);
        assert!(groups.is_empty(), "no round knew them yet");
        // The round is the caller's for its lease: another waits, even with instances offered.
        r.offer(&[doomed("i-3", &[])]);
        assert_eq!(r.claim(t(1), lease), Claim::Making(t(3)));
        let settled = |next, quiet_until, groups: &[&str]| Settled {
            next,
            quiet_until,
            groups: (!groups.is_empty()).then(|| groups.iter().map(|g| g.to_string()).collect()),
            ..Settled::default()
        };
        r.settle(t(1), &settled(Some(t(2)), None, &["arn:tg"]));
        assert_eq!(r.claim(t(1), lease), Claim::NotYet(t(2)));
        assert!(
            matches!(r.claim(t(2), lease), Claim::Taken(d, g) if d.len() == 1 && g == ["arn:tg"])
        );
        // A round that throttled quiets the place and cluster.
        r.settle(t(2), &settled(Some(t(3)), Some(t(32)), &[]));
        r.offer(&[doomed("i-4", &[])]);
        assert_eq!(r.claim(t(10), lease), Claim::Quiet(t(2)));
        assert_eq!(r.claim(t(31), lease), Claim::Quiet(t(2)));
        assert!(matches!(r.claim(t(32), lease), Claim::Taken(_, g) if g == ["arn:tg"]));
        // However many were offered, a round takes the first ROUND_TAKES.
        let many: Vec<Doomed> = (0..ROUND_TAKES + 5)
            .map(|i| doomed(&format!("i-m{i}"), &[]))
            .collect();
        r.offer(&many);
        r.settle(t(40), &Settled::default());
        let Claim::Taken(first, _) = r.claim(t(40), lease) else {
            panic!("{r:?}")
        };
        assert_eq!(first.len(), ROUND_TAKES);
        assert_eq!(first[0].instance_id, "i-m0");
        r.settle(t(40), &Settled::default());
        assert!(matches!(r.claim(t(40), lease), Claim::Taken(rest, _) if rest.len() == 5));
    }
}
