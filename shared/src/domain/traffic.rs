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

use std::collections::BTreeMap;
// `core::net`: address types only, no sockets (the domain does no I/O).
use core::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The tag the AWS Load Balancer Controller puts on the target groups it makes for a cluster.
pub const CLUSTER_TAG: &str = "elbv2.k8s.aws/cluster";

/// How a target group names its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// By instance id (the controller's `instance` target type: a node port on every node).
    Instance,
    /// By IP address (the controller's `ip` target type: each pod's address).
    Ip,
}

impl TargetKind {
    /// The kind ELB's `TargetType` names (`instance`, `ip`); `None` for those forewarn never
    /// deregisters from (`lambda`, `alb`).
    pub fn from_elb(target_type: &str) -> Option<TargetKind> {
        match target_type {
            "instance" => Some(TargetKind::Instance),
            "ip" => Some(TargetKind::Ip),
            _ => None,
        }
    }
}

/// A target group of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetGroup {
    pub arn: String,
    pub kind: TargetKind,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    pub instance_id: String,
    /// Addresses (`10.0.1.5`) and delegated prefixes (`10.0.1.16/28`).
    pub addresses: Vec<String>,
}

/// Whether a target group's tags (key, value) say it is `cluster`'s.
pub fn tagged_for<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>, cluster: &str) -> bool {
    tags.into_iter()
        .any(|(key, value)| key == CLUSTER_TAG && value == cluster)
}

/// The targets of `registered` (in a group of `kind`) that are doomed instances', each with the
/// instance it is of.
pub fn doomed_targets<'a>(
    kind: TargetKind,
    registered: &[Target],
    doomed: &'a [Doomed],
) -> Vec<(Target, &'a str)> {
    registered
        .iter()
        .filter_map(|t| {
            let of = doomed.iter().find(|d| match kind {
                TargetKind::Instance => t.id == d.instance_id,
                TargetKind::Ip => holds(&d.addresses, &t.id),
            })?;
            Some((t.clone(), of.instance_id.as_str()))
        })
        .collect()
}

/// Whether `address` is one of `addresses` or inside one of their prefixes; an address or prefix
/// that does not parse matches nothing.
fn holds(addresses: &[String], address: &str) -> bool {
    let Ok(ip) = address.parse::<IpAddr>() else {
        return false;
    };
    addresses.iter().any(|a| match a.split_once('/') {
        None => a.parse::<IpAddr>().is_ok_and(|own| own == ip),
        Some((base, bits)) => match (base.parse::<IpAddr>(), bits.parse::<u32>()) {
            (Ok(base), Ok(bits)) => within(base, bits, ip),
            _ => false,
        },
    })
}

/// Whether `ip` is in the prefix `base/bits` (of the same family).
fn within(base: IpAddr, bits: u32, ip: IpAddr) -> bool {
    let (base, ip, width) = match (base, ip) {
        (IpAddr::V4(b), IpAddr::V4(i)) => (u128::from(u32::from(b)), u128::from(u32::from(i)), 32),
        (IpAddr::V6(b), IpAddr::V6(i)) => (u128::from(b), u128::from(i), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    let host = width - bits;
    // `checked_shr` is `None` for a shift of the whole width (a /0 prefix of IPv6).
    let keep = |v: u128| v.checked_shr(host).unwrap_or(0);
    keep(base) == keep(ip)
}

/// What taking a batch's doomed instances off their cluster's load balancers did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deregistered {
    /// The cluster's target groups (instance and IP mode) looked at.
    pub groups: usize,
    /// Per doomed instance, the target groups it (or its pods) left, by ARN.
    pub left: BTreeMap<String, Vec<String>>,
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
    /// What became of `instance_id`'s targets, for its record's report.
    pub fn note_for(&self, instance_id: &str) -> String {
        let left = self.left.get(instance_id).map_or(0, Vec::len);
        let mut note = format!(
            "{instance_id}: out of {left} of the cluster's {} target groups before the first eviction",
            self.groups
        );
        if !self.failed.is_empty() {
            note.push_str(&format!(
                "; not deregistered from: {}",
                self.failed.join("; ")
            ));
        }
        note
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
        Doomed {
            instance_id: id.into(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn an_instance_group_loses_the_doomed_instances_on_every_port_and_nothing_else() {
        let registered = [
            target("i-1", 30080),
            target("i-2", 30080),
            target("i-1", 30443),
        ];
        let doomed = [doomed("i-1", &["10.0.0.5"])];
        let out = doomed_targets(TargetKind::Instance, &registered, &doomed);
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
            doomed("i-2", &["2600:1f18::/64"]),
        ];
        let out = doomed_targets(TargetKind::Ip, &registered, &doomed);
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
        let registered = [target("i-1", 80), target("not-an-ip", 80)];
        let doomed = [doomed("i-1", &["i-1", "10.0.0.0/99", "x/8", "0.0.0.0/0"])];
        let out = doomed_targets(TargetKind::Ip, &registered, &doomed);
        assert!(out.is_empty(), "{out:?}");
        // A /0 prefix holds every address of its family (and none of the other).
        let v4 = [target("192.168.1.1", 80), target("::1", 80)];
        let out = doomed_targets(TargetKind::Ip, &v4, &doomed);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.id, "192.168.1.1");
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

    #[test]
    fn the_kinds_forewarn_deregisters_from() {
        assert_eq!(TargetKind::from_elb("instance"), Some(TargetKind::Instance));
        assert_eq!(TargetKind::from_elb("ip"), Some(TargetKind::Ip));
        assert_eq!(TargetKind::from_elb("lambda"), None);
        assert_eq!(TargetKind::from_elb("alb"), None);
    }

    #[test]
    fn a_note_names_what_was_left_and_what_failed() {
        let mut d = Deregistered {
            groups: 3,
            ..Default::default()
        };
        d.left
            .insert("i-1".into(), vec!["arn:a".into(), "arn:b".into()]);
        assert_eq!(
            d.note_for("i-1"),
            "i-1: out of 2 of the cluster's 3 target groups before the first eviction"
        );
        d.failed.push("arn:c: ThrottlingException".into());
        assert!(
            d.note_for("i-2")
                .ends_with("not deregistered from: arn:c: ThrottlingException")
        );
    }
}
