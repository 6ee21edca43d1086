//! What is known about instances and nodes: the facts the decision core decides on.
//!
//! Facts come from adapters (EC2 `DescribeInstances`, the Kubernetes API, or captured state
//! files), which convert what they read into these types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::pool::CapacityType;

/// Tag keys that name the cluster an instance belongs to.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
pub const EKS_CLUSTER_TAGS: [&str; 2] = ["aws:eks:cluster-name", "eks:cluster-name"];

/// What EC2 says about one instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InstanceFacts {
    pub instance_id: String,
    pub instance_type: Option<String>,
    /// Its availability zone's name (`us-east-1a`): the account's own name, which maps to a
    /// different physical zone in each account.
    pub zone: Option<String>,
    /// Its availability zone's ID (`use1-az1`): the same physical zone in every account, what
    /// pools are keyed by. `None` where it is not known (a capture without it).
    pub zone_id: Option<String>,
    pub capacity_type: Option<CapacityType>,
    pub private_dns: Option<String>,
    /// The instance state name (`running`, `stopped`, ...).
    pub state: Option<String>,
    /// EC2's state reason code (`Server.SpotInstanceTermination`, ...), when there is one.
    pub state_reason: Option<String>,
    /// When the instance last started (it changes at every start).
    pub launch_time: Option<chrono::DateTime<chrono::Utc>>,
    pub tags: BTreeMap<String, String>,
    /// The private addresses of its network interfaces (primary and secondary, IPv4 and IPv6)
    /// and their delegated prefixes (`10.0.1.16/28`): what its pods' addresses are under the VPC
    /// CNI (see [`crate::domain::traffic`]).
    pub addresses: Vec<String>,
    /// The capacity reservation it runs in (`cr-…`: an ODCR or a Capacity Block), when it does.
    pub capacity_reservation_id: Option<String>,
}

impl InstanceFacts {
    /// The clusters the instance's tags name (`kubernetes.io/cluster/<name>`,
    /// `aws:eks:cluster-name`, `eks:cluster-name`), sorted and deduplicated.
    pub fn clusters(&self) -> Vec<&str> {
        let named = self.tags.iter().filter_map(|(key, value)| {
            let eks = EKS_CLUSTER_TAGS
                .contains(&key.as_str())
                .then_some(value.as_str());
            key.strip_prefix(CLUSTER_TAG_PREFIX).or(eks)
        });
        let mut names: Vec<&str> = named.filter(|name| !name.is_empty()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The pool the instance lives in, when its capacity type, type and zone are known.
    pub fn pool(&self) -> Option<crate::domain::pool::PoolKey> {
        self.pool_as(self.capacity_type?)
    }

    /// The pool of `capacity_type` the instance's type and zone make, when they are known: by
    /// its zone's ID (the same physical zone in every account), else its zone's name.
    pub fn pool_as(&self, capacity_type: CapacityType) -> Option<crate::domain::pool::PoolKey> {
        Some(crate::domain::pool::PoolKey::new(
            capacity_type,
            self.instance_type.as_deref()?,
            self.zone_id.as_deref().or(self.zone.as_deref())?,
        ))
    }
}

pub use crate::domain::event::BlockFacts;

impl BlockFacts {
    /// The pool its instances are of: capacity type `capacity-block`, its type and zone (by ID,
    /// else name).
    pub fn pool(&self) -> Option<crate::domain::pool::PoolKey> {
        Some(crate::domain::pool::PoolKey::new(
            CapacityType::CapacityBlock,
            self.instance_type.as_deref()?,
            self.zone_id.as_deref().or(self.zone.as_deref())?,
        ))
    }
}

/// A Capacity Block and its instances, as looked up for an event that names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapacityBlock {
    /// What EC2 says of the reservation (`None`: it could not say, a capture that has the
    /// block's instances only).
    pub facts: Option<BlockFacts>,
    /// Its instances, every state (EC2 lists a terminated one for about an hour), by id.
    pub instances: BTreeMap<String, InstanceFacts>,
}

/// The object a `delete` removes: a node's owner (a node's [`NodeFacts::owner`] is one of the
/// two owner kinds), deleting which lets its controller drain and replace the node, or else the
/// Node itself.
///
/// Displayed as what a delete removes: `node/N`, `nodeclaim/N` or `machine/NS/N`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Target {
    #[strum(to_string = "node/{name}")]
    Node { name: String },
    /// A Karpenter `karpenter.sh/v1` NodeClaim (cluster-scoped).
    #[strum(to_string = "nodeclaim/{name}")]
    NodeClaim { name: String },
    /// A Cluster API `cluster.x-k8s.io` Machine (namespaced).
    #[strum(to_string = "machine/{namespace}/{name}")]
    Machine { namespace: String, name: String },
}

/// What the Kubernetes API says about one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeFacts {
    pub name: String,
    pub provider_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The keys of its taints (`spec.taints`).
    pub taints: Vec<String>,
    pub unschedulable: bool,
    /// Who owns the node ([`Target::NodeClaim`] or [`Target::Machine`]), if anyone.
    pub owner: Option<Target>,
    /// DNS names and hostnames from `status.addresses`.
    pub dns_names: Vec<String>,
}

pub const LABEL_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
pub const LABEL_MASTER: &str = "node-role.kubernetes.io/master";
pub const ANNOTATION_CAPI_MACHINE: &str = "cluster.x-k8s.io/machine";
pub const ANNOTATION_CAPI_NAMESPACE: &str = "cluster.x-k8s.io/cluster-namespace";
pub const KARPENTER_GROUP: &str = "karpenter.sh";
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

impl NodeFacts {
    /// The EC2 instance id in `spec.providerID` (`aws:///<zone>/<instance-id>`).
    pub fn instance_id(&self) -> Option<&str> {
        instance_id_from_provider_id(self.provider_id.as_deref()?)
    }

    /// A control-plane node: forewarn never touches one.
    pub fn is_control_plane(&self) -> bool {
        self.labels.contains_key(LABEL_CONTROL_PLANE)
            || self.labels.contains_key(LABEL_MASTER)
            || (self.taints.iter()).any(|t| t == LABEL_CONTROL_PLANE || t == LABEL_MASTER)
    }

    pub fn has_taint(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t == key)
    }

    /// Whether an action for instance `instance_id` may touch this node, as read live just
    /// before acting: it is not control-plane, and its `spec.providerID` names that instance (a
    /// node whose name was reused by a new instance, or a plan naming another node, is refused).
    /// Otherwise why not.
    pub fn verify_runs(&self, instance_id: &str) -> Result<(), NotItsNode> {
        let (node, instance_id) = (self.name.clone(), instance_id.to_string());
        match self.instance_id() {
            _ if self.is_control_plane() => Err(NotItsNode::ControlPlane { node }),
            Some(id) if id == instance_id => Ok(()),
            Some(runs) => Err(NotItsNode::OtherInstance {
                node,
                runs: runs.into(),
                instance_id,
            }),
            None => Err(NotItsNode::Unverifiable { node, instance_id }),
        }
    }
}

/// Why a node, as read live, may not be touched by an action for an instance (see
/// [`NodeFacts::verify_runs`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotItsNode {
    #[error("node/{node} is a control-plane node (live labels or taints)")]
    ControlPlane { node: String },
    #[error("node/{node} runs instance {runs} (spec.providerID), not the event's {instance_id}")]
    OtherInstance {
        node: String,
        runs: String,
        instance_id: String,
    },
    #[error(
        "node/{node} has no spec.providerID naming an EC2 instance: it cannot be verified to run \
         {instance_id}"
    )]
    Unverifiable { node: String, instance_id: String },
}

/// The instance id of an AWS provider id (`aws:///us-east-1a/i-0123...`, also the older
/// `aws://us-east-1a/i-...` and fargate-free forms); `None` when it names no instance.
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let last = rest.rsplit('/').next()?;
    crate::domain::event::is_instance_id(last).then_some(last)
}

/// Finds the node of an instance: by `spec.providerID`, else — only among nodes that have no
/// `spec.providerID` at all — by the instance's private DNS name (node name or a DNS address of
/// the node), else by an instance-id hostname (`i-0123...` or `i-0123....<domain>`). A node with
/// any providerID (another instance's, another cloud's, a Fargate one) is never matched by a
/// name: names are reused across clusters and accounts (`ip-10-0-1-11.ec2.internal` exists in
/// every VPC using that range), provider ids are not.
pub fn resolve_node<'a>(
    instance_id: &str,
    instance: Option<&InstanceFacts>,
    nodes: &'a [NodeFacts],
) -> Option<&'a NodeFacts> {
    let dns = (instance.and_then(|i| i.private_dns.as_deref())).filter(|d| !d.is_empty());
    // Fallbacks only for nodes that have no providerID at all.
    let unproven = || (nodes.iter()).filter(|n| n.provider_id.as_deref().is_none_or(str::is_empty));
    let by_dns = |dns: &str, n: &NodeFacts| {
        n.name.eq_ignore_ascii_case(dns) || n.dns_names.iter().any(|d| d.eq_ignore_ascii_case(dns))
    };
    // `i-0123...` or `i-0123....<domain>`.
    let by_id = |n: &&NodeFacts| {
        (n.name.strip_prefix(instance_id)).is_some_and(|r| r.is_empty() || r.starts_with('.'))
    };
    (nodes.iter().find(|n| n.instance_id() == Some(instance_id)))
        .or_else(|| dns.and_then(|dns| unproven().find(|n| by_dns(dns, n))))
        .or_else(|| unproven().find(by_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each account names zones in its own way; zone IDs name the same physical zone in every
    /// account. Pools are keyed by ID: one account's `us-east-1a` and another's are two pools
    /// when their IDs differ, and one pool when their IDs agree whatever their names.
    #[test]
    fn pools_are_keyed_by_zone_id_whatever_each_account_names_the_zone() {
        use crate::domain::pool::CapacityType;
        let facts = |zone: &str, id: &str| InstanceFacts {
            instance_type: Some("m5.large".into()),
            capacity_type: Some(CapacityType::Spot),
            zone: Some(zone.into()),
            zone_id: Some(id.into()),
            ..InstanceFacts::default()
        };
        let own = facts("us-east-1a", "use1-az6");
        let theirs_same_name = facts("us-east-1a", "use1-az1");
        let theirs_same_zone = facts("us-east-1c", "use1-az6");
        assert_ne!(own.pool(), theirs_same_name.pool());
        assert_eq!(own.pool(), theirs_same_zone.pool());
        assert_eq!(own.pool().unwrap().to_string(), "spot#m5.large#use1-az6");
        // No ID known (a capture): the zone's name.
        let named = InstanceFacts {
            zone_id: None,
            ..own.clone()
        };
        assert_eq!(
            named.pool().unwrap().to_string(),
            "spot#m5.large#us-east-1a"
        );
    }

    fn node(name: &str, provider: Option<&str>) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            provider_id: provider.map(str::to_string),
            ..NodeFacts::default()
        }
    }

    #[test]
    fn a_node_is_verified_by_its_provider_id_and_never_control_plane() {
        let id = "i-0a1b2c3d4e5f60001";
        let mine = node("n1", Some("aws:///us-east-1a/i-0a1b2c3d4e5f60001"));
        assert_eq!(mine.verify_runs(id), Ok(()));
        let other = node("n1", Some("aws:///us-east-1a/i-0a1b2c3d4e5f69999"));
        assert_eq!(
            other.verify_runs(id).unwrap_err().to_string(),
            "node/n1 runs instance i-0a1b2c3d4e5f69999 (spec.providerID), not the event's \
             i-0a1b2c3d4e5f60001"
        );
        assert_eq!(
            node("n1", None).verify_runs(id).unwrap_err().to_string(),
            "node/n1 has no spec.providerID naming an EC2 instance: it cannot be verified to \
             run i-0a1b2c3d4e5f60001"
        );
        let mut control_plane = mine.clone();
        control_plane
            .labels
            .insert(LABEL_CONTROL_PLANE.into(), String::new());
        assert_eq!(
            control_plane.verify_runs(id),
            Err(NotItsNode::ControlPlane { node: "n1".into() })
        );
    }

    #[test]
    fn provider_ids() {
        assert_eq!(
            instance_id_from_provider_id("aws:///us-east-1a/i-0a1b2c3d4e5f60001"),
            Some("i-0a1b2c3d4e5f60001")
        );
        assert_eq!(
            instance_id_from_provider_id("aws://us-east-1a/i-0a1b2c3d4e5f60001"),
            Some("i-0a1b2c3d4e5f60001")
        );
        assert_eq!(
            instance_id_from_provider_id("aws:///us-east-1a/fargate-ip-10-0-0-1"),
            None
        );
        assert_eq!(
            instance_id_from_provider_id("gce://p/z/i-0a1b2c3d4e5f60001"),
            None
        );
    }

    #[test]
    fn resolution_order() {
        let id = "i-0a1b2c3d4e5f60001";
        let inst = InstanceFacts {
            instance_id: id.into(),
            private_dns: Some("ip-10-0-1-11.ec2.internal".into()),
            ..InstanceFacts::default()
        };
        // provider id wins over a DNS match
        let nodes = vec![
            node(
                "ip-10-0-1-11.ec2.internal",
                Some("aws:///us-east-1a/i-0a1b2c3d4e5f69999"),
            ),
            node("custom-name", Some("aws:///us-east-1a/i-0a1b2c3d4e5f60001")),
        ];
        assert_eq!(
            resolve_node(id, Some(&inst), &nodes).unwrap().name,
            "custom-name"
        );
        // DNS name when there is no provider id; a node naming another instance is not taken
        let nodes = vec![
            node(
                "ip-10-0-1-11.ec2.internal",
                Some("aws:///us-east-1a/i-0a1b2c3d4e5f69999"),
            ),
            node("IP-10-0-1-11.EC2.INTERNAL", None),
        ];
        assert_eq!(
            resolve_node(id, Some(&inst), &nodes).unwrap().name,
            "IP-10-0-1-11.EC2.INTERNAL"
        );
        // a DNS address of the node
        let mut n = node("custom", None);
        n.dns_names = vec!["ip-10-0-1-11.ec2.internal".into()];
        assert_eq!(resolve_node(id, Some(&inst), &[n]).unwrap().name, "custom");
        // instance-id hostnames
        let nodes = vec![node("i-0a1b2c3d4e5f60001.ec2.internal", None)];
        assert!(resolve_node(id, None, &nodes).is_some());
        let nodes = vec![node("i-0a1b2c3d4e5f600011", None)];
        assert!(resolve_node(id, None, &nodes).is_none());
        assert!(resolve_node(id, None, &[]).is_none());
        // A node with any providerID is never matched by a name: not by its name, nor by a DNS
        // address, nor by an instance-id hostname.
        for provider in [
            "kind://docker/demo/ip-10-0-1-11",
            "aws:///us-east-1a/fargate-ip-10-0-1-11",
        ] {
            let mut n = node("ip-10-0-1-11.ec2.internal", Some(provider));
            n.dns_names = vec!["ip-10-0-1-11.ec2.internal".into()];
            assert!(resolve_node(id, Some(&inst), &[n]).is_none(), "{provider}");
            let by_id = node("i-0a1b2c3d4e5f60001.ec2.internal", Some(provider));
            assert!(resolve_node(id, None, &[by_id]).is_none(), "{provider}");
        }
    }

    #[test]
    fn cluster_tags() {
        let mut i = InstanceFacts::default();
        i.tags
            .insert("kubernetes.io/cluster/demo".into(), "owned".into());
        i.tags.insert("eks:cluster-name".into(), "demo".into());
        i.tags.insert("aws:eks:cluster-name".into(), "other".into());
        i.tags.insert("Name".into(), "x".into());
        assert_eq!(i.clusters(), vec!["demo", "other"]);
    }
}
