//! Captured state: the JSON `aws ec2 describe-instances` prints and the JSON
//! `kubectl get nodes,pods -A -o json` prints, read into facts for offline planning; and the
//! JSON `kubectl get deploy,sts,rs,pods,pdb,priorityclasses,nodes -A -o json` prints, read into
//! the audit's view of the workloads.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::kube::node_facts;
use super::workloads::{RawWorkloads, view};
use crate::app::audit::WorkloadSource;
use crate::app::priorities::NodeGroupSource;
use crate::domain::audit::ClusterView;
use crate::domain::facts::{BlockFacts, CapacityBlock, InstanceFacts, NodeFacts};
use crate::domain::pool::CapacityType;
use crate::domain::priorities::AsgDescription;
use crate::ports::{InstanceDirectory, NodeDirectory, Place, PortError, Work};

/// A captured-state file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SnapshotError {
    pub path: String,
    /// What is wrong with it (the underlying error's text included).
    pub message: String,
    /// The underlying error (JSON, I/O), when there is one.
    #[source]
    pub source: Option<crate::ports::BoxError>,
}

impl SnapshotError {
    /// What is wrong with the file at `path` (`source`, the error that says it, if any).
    fn new(path: &str, message: String, source: Option<crate::ports::BoxError>) -> SnapshotError {
        let path = path.to_string();
        SnapshotError {
            path,
            message,
            source,
        }
    }
}

/// `input` read as the JSON `what` prints, or an error naming the file and the command.
fn json<T: DeserializeOwned>(label: &str, input: &[u8], what: &str) -> Result<T, SnapshotError> {
    serde_json::from_slice(input).map_err(|e| {
        let message = format!("not the JSON `{what}` prints: {e}");
        SnapshotError::new(label, message, Some(Box::new(e)))
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeInstances {
    #[serde(default)]
    reservations: Vec<Reservation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Reservation {
    #[serde(default)]
    instances: Vec<Ec2Instance>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Ec2Instance {
    instance_id: String,
    instance_type: Option<String>,
    placement: Option<Placement>,
    private_dns_name: Option<String>,
    instance_lifecycle: Option<String>,
    capacity_reservation_id: Option<String>,
    state: Option<Ec2State>,
    state_reason: Option<StateReason>,
    launch_time: Option<String>,
    #[serde(default)]
    tags: Vec<Ec2Tag>,
    #[serde(default)]
    network_interfaces: Vec<NetworkInterface>,
}

/// What of an instance's network interface says which addresses are its (and its pods'): its
/// addresses and delegated prefixes (see [`InstanceFacts::addresses`]), in that order.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NetworkInterface {
    #[serde(default)]
    private_ip_addresses: Vec<Address>,
    #[serde(default)]
    ipv4_prefixes: Vec<Address>,
    #[serde(default)]
    ipv6_addresses: Vec<Address>,
    #[serde(default)]
    ipv6_prefixes: Vec<Address>,
}

/// An entry of one of [`NetworkInterface`]'s lists: the address or prefix it names.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Address {
    #[serde(
        alias = "PrivateIpAddress",
        alias = "Ipv4Prefix",
        alias = "Ipv6Address"
    )]
    #[serde(alias = "Ipv6Prefix")]
    address: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Placement {
    availability_zone: Option<String>,
    /// Given by EC2 where it knows it (`use1-az1`).
    availability_zone_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Ec2State {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StateReason {
    code: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Ec2Tag {
    key: String,
    #[serde(default)]
    value: String,
}

/// Reads the output of `aws ec2 describe-instances --output json`.
pub fn instances_from_describe(
    label: &str,
    input: &[u8],
) -> Result<BTreeMap<String, InstanceFacts>, SnapshotError> {
    let parsed: DescribeInstances = json(label, input, "aws ec2 describe-instances")?;
    let facts = |i: Ec2Instance| {
        let (zone, zone_id) = i.placement.map_or((None, None), |p| {
            (p.availability_zone, p.availability_zone_id)
        });
        let interfaces = i.network_interfaces.into_iter();
        let addresses = interfaces.flat_map(|n| {
            let lists = [
                n.private_ip_addresses,
                n.ipv4_prefixes,
                n.ipv6_addresses,
                n.ipv6_prefixes,
            ];
            lists.into_iter().flatten().filter_map(|a| a.address)
        });
        InstanceFacts {
            capacity_type: Some(CapacityType::of_ec2(
                i.instance_lifecycle.as_deref(),
                i.capacity_reservation_id.as_deref(),
            )),
            instance_type: i.instance_type,
            zone,
            zone_id,
            private_dns: i.private_dns_name.filter(|d| !d.is_empty()),
            state: i.state.and_then(|s| s.name),
            state_reason: i.state_reason.and_then(|s| s.code),
            launch_time: (i.launch_time.as_deref()).and_then(crate::domain::event::parse_time),
            tags: i.tags.into_iter().map(|t| (t.key, t.value)).collect(),
            addresses: addresses.collect(),
            capacity_reservation_id: i.capacity_reservation_id,
            instance_id: i.instance_id,
        }
    };
    let instances = parsed.reservations.into_iter().flat_map(|r| r.instances);
    Ok(instances
        .map(facts)
        .map(|f| (f.instance_id.clone(), f))
        .collect())
}

/// What `kubectl get nodes,pods -A -o json` captured.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub nodes: Vec<NodeFacts>,
    pub pods: Vec<Pod>,
}

/// Reads the output of `kubectl get nodes,pods -A -o json` (a `List`); a single Node or a
/// `NodeList`/`PodList` is accepted too. Items of other kinds are skipped.
pub fn cluster_state_from_kubectl(
    label: &str,
    input: &[u8],
) -> Result<ClusterState, SnapshotError> {
    let what = "kubectl get nodes,pods -A -o json";
    let raw = kubectl_objects(label, input, what, &["Node", "Pod"])?;
    let nodes = raw.nodes.iter().map(node_facts).collect();
    Ok(ClusterState {
        nodes,
        pods: raw.pods,
    })
}

/// The objects of a capture of `kubectl get -o json` (a `List`, a typed list, or a single
/// object), the output of `what`, of the kinds `kinds` names (every kind [`RawWorkloads`]
/// holds, when empty); items of other kinds are skipped.
fn kubectl_objects(
    label: &str,
    input: &[u8],
    what: &str,
    kinds: &[&str],
) -> Result<RawWorkloads, SnapshotError> {
    let err = |message: String| SnapshotError::new(label, message, None);
    let value: Value =
        serde_json::from_slice(input).map_err(|e| err(format!("not valid JSON: {e}")))?;
    let items: Vec<Value> = match value.get("items") {
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err(err("`items` is not an array".into())),
        None if value.get("kind").is_some() => vec![value.clone()],
        None => return Err(err(format!("not the JSON `{what}` prints"))),
    };
    let kind = |v: &Value| v.get("kind").and_then(Value::as_str).map(str::to_string);
    let list_kind = kind(&value).unwrap_or_default();
    let list_kind = list_kind.trim_end_matches("List");
    let mut raw = RawWorkloads::default();
    for (i, value) in items.into_iter().enumerate() {
        let kind = kind(&value).unwrap_or_else(|| list_kind.to_string());
        let k = kind.as_str();
        if !kinds.is_empty() && !kinds.contains(&k) {
            continue;
        }
        match k {
            "Deployment" => raw.deployments.push(item(label, i, k, value)?),
            "StatefulSet" => raw.stateful_sets.push(item(label, i, k, value)?),
            "ReplicaSet" => raw.replica_sets.push(item(label, i, k, value)?),
            "Pod" => raw.pods.push(item(label, i, k, value)?),
            "PodDisruptionBudget" => raw.budgets.push(item(label, i, k, value)?),
            "PriorityClass" => raw.priority_classes.push(item(label, i, k, value)?),
            "Node" => raw.nodes.push(item(label, i, k, value)?),
            _ => {}
        }
    }
    Ok(raw)
}

/// Item `i` of a capture, of `kind`, read as a `T`.
fn item<T: DeserializeOwned>(
    label: &str,
    i: usize,
    kind: &str,
    item: Value,
) -> Result<T, SnapshotError> {
    serde_json::from_value(item).map_err(|e| {
        let message = format!("items[{i}] is not a valid {kind}: {e}");
        SnapshotError::new(label, message, Some(Box::new(e)))
    })
}

/// The command whose output [`workloads_from_kubectl`] reads.
pub const AUDIT_CAPTURE: &str =
    "kubectl get deploy,sts,rs,pods,pdb,priorityclasses,nodes -A -o json";

/// Reads the output of [`AUDIT_CAPTURE`] (PriorityClasses are optional). Items of other kinds
/// (DaemonSets, Services, ...) are skipped.
pub fn workloads_from_kubectl(label: &str, input: &[u8]) -> Result<RawWorkloads, SnapshotError> {
    kubectl_objects(label, input, AUDIT_CAPTURE, &[])
}

/// Loads an [`AUDIT_CAPTURE`] capture into the audit's view.
pub fn load_workloads(path: &Path) -> Result<ClusterView, SnapshotError> {
    let label = path.display().to_string();
    let raw = workloads_from_kubectl(&label, &read(path)?)?;
    view(&raw).map_err(|e| SnapshotError::new(&label, e.to_string(), Some(Box::new(e))))
}

/// A [`WorkloadSource`] over a capture.
#[derive(Debug, Clone, Default)]
pub struct SnapshotWorkloads(pub ClusterView);

#[async_trait]
impl WorkloadSource for SnapshotWorkloads {
    async fn workloads(&self) -> Result<ClusterView, PortError> {
        Ok(self.0.clone())
    }
}

fn read(path: &Path) -> Result<Vec<u8>, SnapshotError> {
    std::fs::read(path).map_err(|e| {
        let (path, message) = (path.display().to_string(), format!("cannot read: {e}"));
        SnapshotError::new(&path, message, Some(Box::new(e)))
    })
}

/// Loads a `describe-instances` capture.
pub fn load_instances(path: &Path) -> Result<BTreeMap<String, InstanceFacts>, SnapshotError> {
    instances_from_describe(&path.display().to_string(), &read(path)?)
}

/// Loads a `kubectl get nodes,pods -A -o json` capture.
pub fn load_cluster_state(path: &Path) -> Result<ClusterState, SnapshotError> {
    cluster_state_from_kubectl(&path.display().to_string(), &read(path)?)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeGroups {
    auto_scaling_groups: Vec<CapturedGroup>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CapturedGroup {
    auto_scaling_group_name: String,
    #[serde(default)]
    availability_zones: Vec<String>,
    #[serde(default)]
    tags: Vec<Ec2Tag>,
    mixed_instances_policy: Option<CapturedMixed>,
    #[serde(default)]
    instances: Vec<OfType>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CapturedMixed {
    launch_template: Option<CapturedMixedTemplate>,
    instances_distribution: Option<CapturedDistribution>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CapturedMixedTemplate {
    #[serde(default)]
    overrides: Vec<OfType>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CapturedDistribution {
    on_demand_percentage_above_base_capacity: Option<i32>,
}

/// A group's instance, or an instance type override of its mixed instances policy.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct OfType {
    instance_type: Option<String>,
}

/// The groups of an `aws autoscaling describe-auto-scaling-groups` capture. A capture does not
/// hold launch templates: a group without instance type overrides takes the type of its
/// instances, and counts as spot only through a mixed instances policy.
pub fn groups_from_describe(
    label: &str,
    input: &[u8],
) -> Result<Vec<AsgDescription>, SnapshotError> {
    let parsed: DescribeGroups =
        json(label, input, "aws autoscaling describe-auto-scaling-groups")?;
    let group = |g: CapturedGroup| {
        let mixed = g.mixed_instances_policy;
        let template = mixed.as_ref().and_then(|m| m.launch_template.as_ref());
        let distribution = mixed
            .as_ref()
            .and_then(|m| m.instances_distribution.as_ref());
        let overrides = template.into_iter().flat_map(|l| &l.overrides);
        AsgDescription {
            name: g.auto_scaling_group_name,
            tags: g.tags.into_iter().map(|t| (t.key, t.value)).collect(),
            zones: g.availability_zones,
            // A capture says no zone ID: its pools are keyed by zone name.
            zone_ids: Default::default(),
            template_instance_type: g.instances.into_iter().find_map(|i| i.instance_type),
            template_market: None,
            override_types: overrides.filter_map(|o| o.instance_type.clone()).collect(),
            on_demand_percentage: distribution
                .and_then(|d| d.on_demand_percentage_above_base_capacity),
            mixed: mixed.is_some(),
        }
    };
    Ok(parsed.auto_scaling_groups.into_iter().map(group).collect())
}

/// Loads a `describe-auto-scaling-groups` capture.
pub fn load_groups(path: &Path) -> Result<SnapshotGroups, SnapshotError> {
    groups_from_describe(&path.display().to_string(), &read(path)?).map(SnapshotGroups)
}

/// Node groups from a capture.
#[derive(Debug, Clone, Default)]
pub struct SnapshotGroups(pub Vec<AsgDescription>);

#[async_trait]
impl NodeGroupSource for SnapshotGroups {
    async fn describe(&self) -> Result<Vec<AsgDescription>, PortError> {
        Ok(self.0.clone())
    }
}

/// An instance directory over a capture (instances it does not hold are unknown).
#[derive(Debug, Clone, Default)]
pub struct SnapshotInstances(pub BTreeMap<String, InstanceFacts>);

/// The facts of `instance_ids` that `known` holds (the others are unknown): what a directory
/// over facts already found answers.
pub fn known_of(
    known: &BTreeMap<String, InstanceFacts>,
    instance_ids: &[String],
) -> BTreeMap<String, InstanceFacts> {
    instance_ids
        .iter()
        .filter_map(|id| known.get(id).map(|f| (id.clone(), f.clone())))
        .collect()
}

#[async_trait]
impl InstanceDirectory for SnapshotInstances {
    async fn describe(
        &self,
        _place: &Place,
        instance_ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        Ok(known_of(&self.0, instance_ids))
    }

    /// The captured instances tagged for `cluster`, in one page.
    async fn cluster_instances(
        &self,
        _place: &Place,
        cluster: &str,
        _at_once: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), PortError> {
        let tag = format!("{}{cluster}", crate::domain::facts::CLUSTER_TAG_PREFIX);
        let ours = self.0.iter().filter(|(_, i)| i.tags.contains_key(&tag));
        found(ours.map(|(id, i)| (id.clone(), i.clone())).collect());
        Ok(())
    }

    /// The captured instances that run in the reservation, and the block's type and zone as
    /// theirs (its end and state are not captured).
    async fn capacity_block(
        &self,
        _place: &crate::ports::Place,
        reservation_id: &str,
    ) -> Result<CapacityBlock, PortError> {
        let ours = |(_, i): &(&String, &InstanceFacts)| {
            i.capacity_reservation_id.as_deref() == Some(reservation_id)
        };
        let instances: BTreeMap<String, InstanceFacts> = (self.0.iter().filter(ours))
            .map(|(id, i)| (id.clone(), i.clone()))
            .collect();
        // A block's instances are all of its type and zone: what the capture can tell of it.
        let facts = instances.values().next().map(|i| BlockFacts {
            reservation_id: reservation_id.to_string(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            zone_id: i.zone_id.clone(),
            end_date: None,
            state: None,
            capacity_block: None,
        });
        Ok(CapacityBlock { facts, instances })
    }
}

#[async_trait]
impl NodeDirectory for ClusterState {
    async fn nodes(&self, _: &[InstanceFacts], _: Work) -> Result<Vec<NodeFacts>, PortError> {
        Ok(self.nodes.clone())
    }

    async fn all(&self) -> Result<Vec<NodeFacts>, PortError> {
        Ok(self.nodes.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_instances_capture() {
        let json = br#"{"Reservations":[{"Instances":[
            {"InstanceId":"i-0a1b2c3d4e5f60001","InstanceType":"m5.large","InstanceLifecycle":"spot",
             "Placement":{"AvailabilityZone":"us-east-1a"},"PrivateDnsName":"ip-10-0-1-11.ec2.internal",
             "State":{"Code":16,"Name":"running"},"LaunchTime":"2026-11-20T09:00:00+00:00",
             "Tags":[{"Key":"kubernetes.io/cluster/demo","Value":"owned"}]},
            {"InstanceId":"i-0a1b2c3d4e5f6000a","InstanceType":"g5.xlarge","CapacityReservationId":"cr-1",
             "Placement":{"AvailabilityZone":"us-east-1c"},"PrivateDnsName":""},
            {"InstanceId":"i-0a1b2c3d4e5f60005","InstanceType":"m5.xlarge",
             "StateReason":{"Code":"Server.SpotInstanceTermination","Message":"x"}}
        ]}]}"#;
        let m = instances_from_describe("x.json", json).unwrap();
        let a = &m["i-0a1b2c3d4e5f60001"];
        assert_eq!(a.pool().unwrap().to_string(), "spot#m5.large#us-east-1a");
        assert_eq!(a.clusters(), vec!["demo"]);
        assert_eq!(a.state.as_deref(), Some("running"));
        assert_eq!(a.launch_time.map(|t| t.timestamp()), Some(1_795_165_200));
        let b = &m["i-0a1b2c3d4e5f6000a"];
        assert_eq!(b.capacity_type, Some(CapacityType::Reserved));
        assert_eq!(b.private_dns, None);
        let c = &m["i-0a1b2c3d4e5f60005"];
        assert_eq!(c.capacity_type, Some(CapacityType::OnDemand));
        assert_eq!(
            c.state_reason.as_deref(),
            Some("Server.SpotInstanceTermination")
        );
        assert_eq!(c.pool(), None, "no zone, no pool");
    }

    #[test]
    fn bad_captures_name_the_file() {
        let e = instances_from_describe("x.json", b"{\"Reservations\": 3}").unwrap_err();
        assert!(e.to_string().starts_with("x.json: not the JSON"), "{e}");
        let e = cluster_state_from_kubectl("k.json", b"[]").unwrap_err();
        assert!(e.to_string().starts_with("k.json:"), "{e}");
        let e = cluster_state_from_kubectl(
            "k.json",
            br#"{"kind":"List","items":[{"kind":"Node","spec":{"taints":7}}]}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("items[0] is not a valid Node"), "{e}");
    }

    #[test]
    fn audit_capture() {
        let json = br#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"},
             "spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{}}},
            {"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"ds","namespace":"a"}},
            {"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"web","namespace":"a"},
             "spec":{"maxUnavailable":1,"selector":{"matchLabels":{"app":"web"}}}},
            {"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"high"},"value":1000}
        ]}"#;
        let raw = workloads_from_kubectl("a.json", json).unwrap();
        assert_eq!(
            (
                raw.deployments.len(),
                raw.budgets.len(),
                raw.priority_classes.len()
            ),
            (1, 1, 1)
        );
        let e = workloads_from_kubectl(
            "a.json",
            br#"{"kind":"List","items":[{"kind":"StatefulSet","spec":{"replicas":"x"}}]}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("a.json: items[0] is not a valid StatefulSet"),
            "{e}"
        );
        let e = workloads_from_kubectl("a.json", b"{}").unwrap_err();
        assert!(
            e.to_string().contains("not the JSON `kubectl get deploy"),
            "{e}"
        );
    }

    #[test]
    fn kubectl_list() {
        let json = br#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"spec":{"providerID":"aws:///us-east-1a/i-0a1b2c3d4e5f60001"}},
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"a"},"spec":{"nodeName":"n1","containers":[]}},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}
        ]}"#;
        let s = cluster_state_from_kubectl("k.json", json).unwrap();
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.pods.len(), 1);
        let node = s.pods[0].spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert_eq!(node, Some("n1"));
    }

    #[test]
    fn describe_auto_scaling_groups_capture() {
        use crate::domain::priorities::node_group;
        let bytes = include_bytes!("../../../events/state/asgs.json");
        let groups = groups_from_describe("asgs.json", bytes).unwrap();
        let demo: Vec<_> = groups
            .iter()
            .filter_map(|g| node_group(g, "demo"))
            .collect();
        assert_eq!(demo.len(), 3);
        let general = &demo[0];
        assert_eq!(general.name, "demo-spot-general");
        assert_eq!(general.capacity_type, CapacityType::Spot);
        assert_eq!(general.instance_types, vec!["m5.large", "m5a.large"]);
        assert_eq!(general.zones, vec!["us-east-1a", "us-east-1b"]);
        let od = demo.iter().find(|g| g.name == "demo-on-demand").unwrap();
        assert_eq!(od.capacity_type, CapacityType::OnDemand);
        assert_eq!(od.instance_types, vec!["m5.large"], "from its instances");
        let e = groups_from_describe("i.json", br#"{"Reservations": []}"#).unwrap_err();
        assert!(e.to_string().contains("i.json"), "{e}");
        assert!(
            e.to_string().contains("describe-auto-scaling-groups"),
            "{e}"
        );
    }
}
