//! The pool sweeper: reconciles what EventBridge missed (its delivery is best effort).
//!
//! It finds this cluster's spot instances that EC2 stopped or terminated for a spot interruption
//! (state reason `Server.SpotInstanceTermination`), and nodes whose instance is gone or going,
//! and turns each finding into a synthetic event that goes through the same pipeline as the
//! handler's. Synthetic ids are stable per instance (`sweep:<kind>:<instance>`), and the handler
//! records the same key when it applies the real event, so the ledger makes a sweep after a
//! handled event (or a second sweep) change nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::event::{Origin, Record};
use crate::lambda::{Handler, SetupError};
use crate::pipeline::{Pipeline, Report};
use crate::snapshot::{ClusterState, SnapshotInstances};

use crate::event::{Detail, Event, EventKind, InstanceAction, InstanceState};
use crate::facts::{InstanceFacts, NodeFacts};
use crate::ports::DirectoryError;

/// EC2's state reason for an instance a spot interruption stopped or terminated.
pub const SPOT_TERMINATION_REASON: &str = "Server.SpotInstanceTermination";

/// The ledger key a sweep uses for `kind` on `instance_id`; the handler records it too.
pub fn sweep_key(kind: EventKind, instance_id: &str) -> String {
    format!("sweep:{kind}:{instance_id}")
}

/// The sweep keys an applied event also records, so that a later sweep is a duplicate of it.
/// Only final transitions have one (a terminating spot interruption, an instance shutting
/// down or terminated): a stopped or hibernated instance can run again and be interrupted
/// again, and that second interruption must not look like the first.
pub fn sweep_keys_of(event: &Event) -> Vec<String> {
    let kind = match &event.detail {
        Detail::Spot {
            action: InstanceAction::Terminate,
        } => EventKind::SpotInterruption,
        Detail::StateChange {
            state: InstanceState::ShuttingDown | InstanceState::Terminated,
        } => EventKind::StateChange,
        _ => return Vec::new(),
    };
    event
        .instance_ids
        .iter()
        .map(|id| sweep_key(kind, id))
        .collect()
}

/// Where a sweep looks for instances that are gone.
#[async_trait]
pub trait LeavingInstances: Send + Sync {
    /// This cluster's instances that are stopping, stopped, shutting down or terminated.
    async fn leaving(&self, cluster: &str) -> Result<Vec<InstanceFacts>, DirectoryError>;
}

/// A final state: the instance will not run again.
fn is_gone(state: Option<&str>) -> bool {
    matches!(state, Some("shutting-down" | "terminated"))
}

fn synthetic(
    kind: EventKind,
    instance_id: &str,
    detail: Detail,
    now: DateTime<Utc>,
    region: Option<&str>,
) -> Event {
    let (source, detail_type) = kind.source_and_detail_type().unwrap_or_default();
    Event {
        id: sweep_key(kind, instance_id),
        kind,
        source: source.to_string(),
        detail_type: detail_type.to_string(),
        time: now,
        region: region.map(str::to_string),
        account: None,
        instance_ids: vec![instance_id.to_string()],
        detail,
    }
}

/// Turns what EC2 and the cluster say into synthetic events (pure).
///
/// - a spot instance of the cluster terminated by a spot interruption → `spot-interruption`
///   (terminate);
/// - a node whose instance EC2 no longer knows, or knows as shutting down or terminated →
///   `state-change` (terminated when unknown, else its state).
///
/// Only final transitions are findings: a stopped instance may start again, so its events
/// (delivered by EventBridge) are left to the handler, and the sweep's per-instance key stays
/// unambiguous.
pub fn findings(
    leaving: &[InstanceFacts],
    nodes: &[NodeFacts],
    node_instances: &BTreeMap<String, InstanceFacts>,
    now: DateTime<Utc>,
    region: Option<&str>,
) -> Vec<Event> {
    let mut events = Vec::new();
    for i in leaving {
        let spot = i.capacity_type == Some(crate::pool::CapacityType::Spot);
        if spot
            && is_gone(i.state.as_deref())
            && i.state_reason.as_deref() == Some(SPOT_TERMINATION_REASON)
        {
            events.push(synthetic(
                EventKind::SpotInterruption,
                &i.instance_id,
                Detail::Spot {
                    action: InstanceAction::Terminate,
                },
                now,
                region,
            ));
        }
    }
    for node in nodes {
        let Some(id) = node.instance_id() else {
            continue;
        };
        let state = match node_instances.get(id) {
            None => InstanceState::Terminated,
            Some(i) if is_gone(i.state.as_deref()) => serde_json::from_value(
                serde_json::Value::String(i.state.clone().unwrap_or_default()),
            )
            .unwrap_or(InstanceState::Terminated),
            Some(_) => continue,
        };
        events.push(synthetic(
            EventKind::StateChange,
            id,
            Detail::StateChange { state },
            now,
            region,
        ));
    }
    events
}

/// A sweep that could not look.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("the sweeper needs FOREWARN_CLUSTER_NAME: it looks for this cluster's instances")]
    NoCluster,
    #[error(transparent)]
    Lookup(#[from] DirectoryError),
}

/// The sweeper: the handler's wiring plus where to find leaving instances.
pub struct Sweeper {
    pub handler: Handler,
    pub leaving: Arc<dyn LeavingInstances>,
    /// The region synthetic events carry.
    pub region: Option<String>,
}

impl Sweeper {
    /// The handler's configuration (see [`Handler::from_env`]) with EC2 for the leaving
    /// instances; `FOREWARN_CLUSTER_NAME` is required.
    pub async fn from_env() -> Result<Sweeper, SetupError> {
        let handler = Handler::from_env().await?;
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Ok(Sweeper {
            region: sdk.region().map(|r| r.to_string()),
            leaving: Arc::new(crate::ec2::Ec2Directory::from_conf(&sdk)),
            handler,
        })
    }

    /// One sweep: one EC2 query per cluster tag form for leaving instances, one node list, one
    /// DescribeInstances for the nodes' instances, then the findings through the pipeline (on
    /// what was just read: no second lookup).
    pub async fn sweep(
        &self,
        now: DateTime<Utc>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<Report>, SweepError> {
        let h = &self.handler;
        let cluster = h
            .config
            .cluster_name
            .as_deref()
            .ok_or(SweepError::NoCluster)?;
        let leaving = self.leaving.leaving(cluster).await?;
        let nodes = h.nodes.all().await?;
        let ids: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.instance_id().map(str::to_string))
            .collect();
        let node_instances = if ids.is_empty() {
            BTreeMap::new()
        } else {
            h.instances.describe(&ids).await?
        };
        let events = findings(
            &leaving,
            &nodes,
            &node_instances,
            now,
            self.region.as_deref(),
        );
        tracing::info!(
            leaving = leaving.len(),
            nodes = nodes.len(),
            findings = events.len(),
            "sweep looked"
        );
        let mut known = node_instances;
        known.extend(leaving.into_iter().map(|i| (i.instance_id.clone(), i)));
        let instances = SnapshotInstances(known);
        let state = ClusterState {
            nodes,
            pods: Vec::new(),
        };
        let records: Vec<Record> = events
            .into_iter()
            .map(|e| Record {
                origin: Origin::bare(format!("sweep {}", e.instance_ids.join(","))),
                event: Ok(e),
            })
            .collect();
        let pipeline = Pipeline {
            config: &h.config,
            store: h.store.as_ref(),
            instances: &instances,
            nodes: &state,
            executor: h.executor.as_deref(),
        };
        let limits = crate::pipeline::Limits {
            concurrency: h.concurrency,
            deadline,
        };
        Ok(pipeline.process_with(&records, now, limits).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::CapacityType;

    fn instance(id: &str, state: &str, reason: Option<&str>, ct: CapacityType) -> InstanceFacts {
        InstanceFacts {
            instance_id: id.into(),
            state: Some(state.into()),
            state_reason: reason.map(str::to_string),
            capacity_type: Some(ct),
            ..InstanceFacts::default()
        }
    }

    fn node(name: &str, id: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            provider_id: Some(format!("aws:///us-east-1a/{id}")),
            ..NodeFacts::default()
        }
    }

    const SPOT: Option<&str> = Some(SPOT_TERMINATION_REASON);

    #[test]
    fn spot_terminations_and_orphaned_nodes() {
        let leaving = vec![
            instance("i-00000001", "terminated", SPOT, CapacityType::Spot),
            instance("i-00000002", "stopped", SPOT, CapacityType::Spot),
            instance(
                "i-00000003",
                "terminated",
                Some("Client.UserInitiatedShutdown"),
                CapacityType::Spot,
            ),
            instance("i-00000004", "terminated", SPOT, CapacityType::OnDemand),
            instance("i-00000009", "shutting-down", SPOT, CapacityType::Spot),
        ];
        let nodes = vec![
            node("gone", "i-00000005"),
            node("stopping", "i-00000006"),
            node("fine", "i-00000007"),
            node("leaving", "i-00000008"),
            NodeFacts {
                name: "fargate".into(),
                ..NodeFacts::default()
            },
        ];
        let known = BTreeMap::from([
            (
                "i-00000006".to_string(),
                instance("i-00000006", "stopping", None, CapacityType::OnDemand),
            ),
            (
                "i-00000007".to_string(),
                instance("i-00000007", "running", None, CapacityType::OnDemand),
            ),
            (
                "i-00000008".to_string(),
                instance("i-00000008", "shutting-down", None, CapacityType::OnDemand),
            ),
        ]);
        let events = findings(&leaving, &nodes, &known, Utc::now(), Some("us-east-1"));
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            vec![
                "sweep:spot-interruption:i-00000001",
                "sweep:spot-interruption:i-00000009",
                "sweep:state-change:i-00000005",
                "sweep:state-change:i-00000008",
            ],
            "stopped instances may run again, user terminations and on-demand are no spot findings"
        );
        let terminate = Detail::Spot {
            action: InstanceAction::Terminate,
        };
        assert_eq!(events[0].detail, terminate);
        assert_eq!(
            events[2].detail,
            Detail::StateChange {
                state: InstanceState::Terminated
            }
        );
        assert_eq!(
            events[3].detail,
            Detail::StateChange {
                state: InstanceState::ShuttingDown
            }
        );
        assert_eq!(events[0].source, "aws.ec2");
        assert_eq!(events[0].region.as_deref(), Some("us-east-1"));
    }

    #[test]
    fn only_final_transitions_carry_sweep_keys() {
        let e = findings(
            &[instance(
                "i-00000001",
                "terminated",
                SPOT,
                CapacityType::Spot,
            )],
            &[],
            &BTreeMap::new(),
            Utc::now(),
            None,
        );
        assert_eq!(
            sweep_keys_of(&e[0]),
            vec!["sweep:spot-interruption:i-00000001"]
        );
        let mut other = e[0].clone();
        for detail in [
            Detail::StateChange {
                state: InstanceState::Running,
            },
            Detail::StateChange {
                state: InstanceState::Stopped,
            },
            Detail::Spot {
                action: InstanceAction::Hibernate,
            },
            Detail::Spot {
                action: InstanceAction::Stop,
            },
            Detail::Rebalance,
        ] {
            other.detail = detail;
            assert!(sweep_keys_of(&other).is_empty(), "{:?}", other.detail);
        }
        other.detail = Detail::StateChange {
            state: InstanceState::Terminated,
        };
        assert_eq!(sweep_keys_of(&other), vec!["sweep:state-change:i-00000001"]);
    }
}
