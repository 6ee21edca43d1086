//! Builders for tests and benchmarks (the test-only feature `fixtures`, and the crate's own unit
//! tests): events (typed and as EventBridge JSON), instance and node facts, and the Kubernetes
//! objects (nodes, pods, disruption budgets) the tests put in the API fake, as JSON.
//!
//! Each builder starts from the smallest valid value and adds what a test asks for, so a test
//! says what matters to it and nothing else.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::event::{
    Detail, Event, EventKind, InstanceAction, InstanceState, LifecycleAction, SOURCE_EC2,
};
use super::facts::{InstanceFacts, NodeFacts};
use super::pool::CapacityType;

/// The time the fixtures' events happen by default: 2026-11-20T10:00:00Z.
pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Events

/// A typed event: [`event`] gives one of `kind` about one instance, at [`t0`], in `us-east-1`.
#[derive(Debug, Clone)]
pub struct EventBuilder(Event);

/// An event of `kind` with id `id` about `instance_id` (none for `unsupported`), with the
/// kind's usual detail: a spot or reservation warning to terminate, an instance terminated, an
/// EC2 retirement two hours later, an ASG termination of `asg/hook`.
pub fn event(kind: EventKind, id: &str, instance_id: &str) -> EventBuilder {
    let detail = match kind {
        EventKind::SpotInterruption => Detail::Spot {
            action: InstanceAction::Terminate,
        },
        EventKind::RebalanceRecommendation => Detail::Rebalance,
        EventKind::StateChange => Detail::StateChange {
            state: InstanceState::Terminated,
        },
        EventKind::ScheduledChange => Detail::Scheduled {
            event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
            event_arn: None,
            start_time: Some(t0() + chrono::Duration::hours(2)),
            end_time: None,
            closed: Vec::new(),
        },
        EventKind::AsgTermination => Detail::AsgTermination(lifecycle("asg", "hook")),
        EventKind::AsgLaunch => Detail::AsgLaunch(lifecycle("asg", "hook")),
        EventKind::Impaired => Detail::Impaired {
            checks: "system".into(),
        },
        EventKind::CapacityReservationInterruption => Detail::CapacityReservation {
            action: InstanceAction::Terminate,
            termination_time: Some(t0() + chrono::Duration::seconds(120)),
        },
        EventKind::CapacityBlockExpiration | EventKind::CapacityBlockDelivered => {
            Detail::CapacityBlock {
                reservation_id: "cr-0b1c2d3e4f5a60001".into(),
                end_date: Some(t0() + chrono::Duration::minutes(40)),
                block: None,
                part: false,
            }
        }
        EventKind::Unsupported => Detail::Unsupported { why: "x".into() },
    };
    EventBuilder(Event {
        id: id.into(),
        kind,
        time: t0(),
        region: Some("us-east-1".into()),
        account: None,
        instance_ids: if kind == EventKind::Unsupported {
            Vec::new()
        } else {
            vec![instance_id.into()]
        },
        detail,
    })
}

/// A lifecycle action (a terminate or a launch one, as its event says) of hook `hook` of group
/// `asg`.
pub fn lifecycle(asg: &str, hook: &str) -> LifecycleAction {
    LifecycleAction {
        hook_name: hook.into(),
        asg_name: asg.into(),
        token: "168c6c3d-d370-48df-af77-8b8852e0806c".into(),
        account: None,
        region: None,
    }
}

impl EventBuilder {
    pub fn time(mut self, time: DateTime<Utc>) -> Self {
        self.0.time = time;
        self
    }

    pub fn account(mut self, account: &str) -> Self {
        self.0.account = Some(account.into());
        self
    }

    pub fn detail(mut self, detail: Detail) -> Self {
        self.0.detail = detail;
        self
    }

    pub fn build(self) -> Event {
        self.0
    }
}

/// A spot interruption warning (terminate) as EventBridge delivers it, as JSON.
pub fn spot_json(id: &str, instance_id: &str, time: &str) -> Value {
    event_json(
        super::event::DT_SPOT,
        id,
        instance_id,
        time,
        json!({"instance-action": "terminate"}),
    )
}

/// The `detail` of an AWS Health scheduled instance retirement of `instance_ids` starting at
/// `start_time`, as JSON.
pub fn health_detail(instance_ids: &[&str], start_time: &str) -> Value {
    let entities: Vec<Value> = instance_ids
        .iter()
        .map(|id| json!({"entityValue": id}))
        .collect();
    json!({
        "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "service": "EC2", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange", "startTime": start_time,
        "affectedEntities": entities
    })
}

/// An `aws.ec2` event of `detail_type` as EventBridge delivers it, as JSON; `detail` gets the
/// instance id.
pub fn event_json(
    detail_type: &str,
    id: &str,
    instance_id: &str,
    time: &str,
    detail: Value,
) -> Value {
    let mut detail = detail;
    detail["instance-id"] = json!(instance_id);
    json!({
        "version": "0", "id": id, "detail-type": detail_type, "source": SOURCE_EC2,
        "account": "123456789012", "time": time, "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}")],
        "detail": detail
    })
}

// ---------------------------------------------------------------------------------------------
// Facts

/// Instance facts: [`instance`] gives only the id.
#[derive(Debug, Clone)]
pub struct InstanceBuilder(InstanceFacts);

pub fn instance(id: &str) -> InstanceBuilder {
    InstanceBuilder(InstanceFacts {
        instance_id: id.into(),
        ..InstanceFacts::default()
    })
}

impl InstanceBuilder {
    /// Its pool's instance type and zone.
    pub fn typed(mut self, instance_type: &str, zone: &str) -> Self {
        self.0.instance_type = Some(instance_type.into());
        self.0.zone = Some(zone.into());
        self
    }

    pub fn capacity(mut self, capacity_type: CapacityType) -> Self {
        self.0.capacity_type = Some(capacity_type);
        self
    }

    pub fn dns(mut self, private_dns: &str) -> Self {
        self.0.private_dns = Some(private_dns.into());
        self
    }

    pub fn state(mut self, state: &str) -> Self {
        self.0.state = Some(state.into());
        self
    }

    pub fn state_reason(mut self, reason: Option<&str>) -> Self {
        self.0.state_reason = reason.map(str::to_string);
        self
    }

    pub fn launched(mut self, at: DateTime<Utc>) -> Self {
        self.0.launch_time = Some(at);
        self
    }

    /// Tagged `kubernetes.io/cluster/<cluster>=owned`.
    pub fn cluster(mut self, cluster: &str) -> Self {
        self.0
            .tags
            .insert(format!("kubernetes.io/cluster/{cluster}"), "owned".into());
        self
    }

    pub fn build(self) -> InstanceFacts {
        self.0
    }
}

/// Node facts of node `name` with the provider id of `instance_id` in `us-east-1a`.
pub fn node_facts(name: &str, instance_id: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        provider_id: Some(format!("aws:///us-east-1a/{instance_id}")),
        ..NodeFacts::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes objects, as JSON

/// A Node object: [`node_object`] gives its name and provider id only.
#[derive(Debug, Clone)]
pub struct NodeObject(Value);

/// Node `name` of instance `instance_id` in `us-east-1a` (see [`NodeObject::zone`]).
pub fn node_object(name: &str, instance_id: &str) -> NodeObject {
    NodeObject(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"providerID": format!("aws:///us-east-1a/{instance_id}")}
    }))
}

impl NodeObject {
    /// In `zone`: the provider id says so, and so does the `topology.kubernetes.io/zone` label.
    pub fn zone(mut self, zone: &str) -> Self {
        let id = self.0["spec"]["providerID"]
            .as_str()
            .and_then(|p| p.rsplit('/').next())
            .unwrap_or_default()
            .to_string();
        self.0["spec"]["providerID"] = json!(format!("aws:///{zone}/{id}"));
        self.label("topology.kubernetes.io/zone", zone)
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["labels"][key] = json!(value);
        self
    }

    /// The `kubernetes.io/hostname` label, and the node's name as its InternalDNS address (what
    /// a kubelet on EC2 reports, the node being named after the instance's private DNS name).
    pub fn kubelet(self) -> Self {
        let name = self.0["metadata"]["name"].clone();
        let name = name.as_str().unwrap_or_default();
        self.label("kubernetes.io/hostname", name)
            .address("InternalDNS", name)
    }

    pub fn address(mut self, kind: &str, address: &str) -> Self {
        let addresses = &mut self.0["status"]["addresses"];
        if !addresses.is_array() {
            *addresses = json!([]);
        }
        if let Some(list) = addresses.as_array_mut() {
            list.push(json!({"type": kind, "address": address}));
        }
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let taints = &mut self.0["spec"]["taints"];
        if !taints.is_array() {
            *taints = json!([]);
        }
        if let Some(list) = taints.as_array_mut() {
            list.push(json!({"key": key, "value": value, "effect": effect}));
        }
        self
    }

    /// The `Ready` condition, true.
    pub fn ready(mut self) -> Self {
        self.0["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        self
    }

    /// Owned by the Karpenter NodeClaim `claim`.
    pub fn nodeclaim(mut self, claim: &str) -> Self {
        self.0["metadata"]["ownerReferences"] = json!([
            {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim, "uid": "u"}
        ]);
        self
    }

    pub fn build(self) -> Value {
        self.0
    }
}

/// The node of an EC2 instance as a kubelet registers it: named `name` (its private DNS name),
/// in `zone`.
pub fn ec2_node(name: &str, instance_id: &str, zone: &str) -> Value {
    node_object(name, instance_id).zone(zone).kubelet().build()
}

/// A running, ready pod `shop/<name>` on `node`, labelled `app=<name>`, controlled by an owner of
/// kind `owner_kind`.
pub fn app_pod(name: &str, node: &str, owner_kind: &str) -> Value {
    pod_object("shop", name, node, name, owner_kind)
}

/// A running, ready pod `ns/name` on `node`, labelled `app=<app>` and controlled by the
/// `owner_kind` named `<app>-<suffix>` (e.g. `ReplicaSet`, `DaemonSet`).
pub fn pod_object(ns: &str, name: &str, node: &str, app: &str, owner_kind: &str) -> Value {
    let suffix = match owner_kind {
        "ReplicaSet" => "rs",
        _ => "owner",
    };
    let owner = format!("{app}-{suffix}");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner,
                                 "uid": format!("uid-{owner}"), "controller": true}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// A PodDisruptionBudget `ns/name` over `app=<app>` with `minAvailable`.
pub fn pdb_object(ns: &str, name: &str, app: &str, min_available: i64) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    })
}

/// Tags as a map, for instance facts built by hand.
pub fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_what_they_say() {
        let e = event(EventKind::AsgTermination, "e1", "i-0a1b2c3d4e5f60001")
            .account("123456789012")
            .build();
        assert!(matches!(e.detail, Detail::AsgTermination(_)));
        assert_eq!(e.instance_ids, vec!["i-0a1b2c3d4e5f60001"]);
        assert_eq!(e.time, t0());
        let n = node_object("n1", "i-0a1b2c3d4e5f60001")
            .zone("us-east-1b")
            .kubelet()
            .taint("a", "b", "NoSchedule")
            .build();
        assert_eq!(
            n["spec"]["providerID"],
            "aws:///us-east-1b/i-0a1b2c3d4e5f60001"
        );
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
        assert_eq!(n["status"]["addresses"].as_array().map(Vec::len), Some(1));
        let i = instance("i-1")
            .typed("m5.large", "us-east-1a")
            .cluster("demo")
            .build();
        assert_eq!(i.clusters(), vec!["demo"]);
        let j = spot_json("e", "i-1", "2026-11-20T10:00:00Z");
        assert_eq!(j["detail"]["instance-id"], "i-1");
    }
}
