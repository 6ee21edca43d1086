//! The way back, as the pool sweeper and `forewarn reconcile` run it: read every node, find
//! those whose cordon (forewarn's taint and record, see [`crate::domain::wayback`]) has lost
//! its reason, and undo them through the cluster's upkeep — or, without one, say what would
//! be undone.
//!
//! One node list, one `DescribeInstances` for the instances of the nodes forewarn cordoned, one
//! read of the pools marked unavailable, and — only when some cordon is for `impaired` — one
//! paged `DescribeInstanceStatus`: an impaired instance that passes both checks again gets its
//! node back. A cordon whose time has passed is kept while its
//! instance's pool is marked unavailable in the pool store: that pool being reclaimed is a
//! reason of its own. Each undo fails alone.
//!
//! A record that does not verify with the continuation keys (the node's kubelet may rewrite its
//! annotations) is never acted on: the node is reported, refused, with the reason, and left as
//! it is.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::app::leaving::LeavingInstances;
use crate::app::pipeline::drop_unverified_records;
use crate::app::upkeep::ClusterUpkeep;
use crate::domain::clusters::Place;
use crate::domain::cordon_record::{CordonRecord, UndoOutcome, read_unverified};
use crate::domain::event::EventKind;
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::pool::{PoolKey, PoolQuery};
use crate::domain::status::InstanceStatus;
use crate::domain::wayback::undos;
use crate::ports::{InstanceDirectory, NodeDirectory, PoolStore, PortError};

/// What the way back found for one node, and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UndoReport {
    pub node: String,
    pub instance_id: String,
    /// The event whose cordon it is.
    pub event_id: String,
    /// Why the cordon goes (or, when kept, why it was a candidate).
    pub why: String,
    /// What the undo did; `None`: no upkeep (a capture, a plan), nothing was tried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<UndoOutcome>,
    /// Kept: its instance's pool is marked unavailable (a reason of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// The undo failed for this node (the others go on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the way back reads and acts through.
pub struct WayBack<'a> {
    pub nodes: &'a dyn NodeDirectory,
    pub instances: &'a dyn InstanceDirectory,
    pub store: &'a dyn PoolStore,
    /// Where cordons are undone; `None`: report only.
    pub upkeep: Option<&'a dyn ClusterUpkeep>,
    /// forewarn's own taint key (a cordon's record lists the others it put).
    pub taint_key: &'a str,
    /// Where the status checks of `impaired` cordons' instances are read (one paged
    /// `DescribeInstanceStatus`, only when there is such a cordon); `None`: not read, and those
    /// cordons are kept.
    pub statuses: Option<&'a dyn LeavingInstances>,
    /// The cluster's account and region: where its nodes' instances are described.
    pub place: &'a Place,
}

impl WayBack<'_> {
    /// Finds the cordons to undo at `now` and undoes them (see the module doc).
    pub async fn run(&self, now: DateTime<Utc>) -> Result<Vec<UndoReport>, PortError> {
        let mut nodes = self.nodes.all().await?;
        let refused = self.refuse_unverified(&mut nodes).await;
        let ids: Vec<String> = nodes
            .iter()
            .filter_map(|n| self.cordon(n).map(|r| r.instance_id))
            .collect();
        let instances = if ids.is_empty() {
            BTreeMap::new()
        } else {
            self.instances.describe(self.place, &ids).await?
        };
        let impaired = nodes.iter().any(|n| {
            self.cordon(n)
                .is_some_and(|r| r.kind == EventKind::Impaired)
        });
        let statuses: BTreeMap<String, InstanceStatus> = match self.statuses {
            Some(source) if impaired => source
                .statuses(self.place)
                .await?
                .into_iter()
                .map(|s| (s.instance_id.clone(), s))
                .collect(),
            _ => BTreeMap::new(),
        };
        let candidates = undos(&nodes, self.taint_key, &instances, &statuses, now);
        if candidates.is_empty() {
            return Ok(refused);
        }
        let mut unavailable: BTreeMap<PoolKey, DateTime<Utc>> = BTreeMap::new();
        for record in self.store.pools(&PoolQuery::default(), now).await? {
            if let Some(until) = record.unavailable_until {
                let latest = unavailable.entry(record.pool);
                latest.and_modify(|l| *l = until.max(*l)).or_insert(until);
            }
        }
        let mut reports = refused;
        for undo in candidates {
            let kept = instances
                .get(&undo.instance_id)
                .and_then(InstanceFacts::pool)
                .and_then(|pool| unavailable.get(&pool).map(|until| (pool, *until)))
                .filter(|(_, until)| *until > now)
                .map(|(pool, until)| {
                    format!(
                        "kept: pool {pool} is marked unavailable until {}",
                        until.to_rfc3339()
                    )
                });
            let mut report = UndoReport {
                node: undo.node.clone(),
                instance_id: undo.instance_id.clone(),
                event_id: undo.record.event_id.clone(),
                why: undo.why.clone(),
                kept,
                ..UndoReport::default()
            };
            if report.kept.is_none()
                && let Some(upkeep) = self.upkeep
            {
                match upkeep.undo(&undo).await {
                    Ok(outcome) => report.outcome = Some(outcome),
                    Err(e) => report.error = Some(e.to_string()),
                }
            }
            tracing::info!(
                node = %report.node,
                instance = %report.instance_id,
                event_id = %report.event_id,
                why = %report.why,
                outcome = ?report.outcome,
                kept = report.kept.as_deref().unwrap_or_default(),
                error = report.error.as_deref().unwrap_or_default(),
                "way back"
            );
            reports.push(report);
        }
        Ok(reports)
    }

    /// The verified cordon record of `node` when the node still carries a taint of it.
    fn cordon(&self, node: &NodeFacts) -> Option<CordonRecord> {
        CordonRecord::of(node).filter(|r| r.tainted(node, self.taint_key))
    }

    /// Removes from `nodes` the cordon records that do not verify; a refusal for each node with
    /// a taint of forewarn's cordon that had one (the nodes the way back would look at), logged.
    async fn refuse_unverified(&self, nodes: &mut [NodeFacts]) -> Vec<UndoReport> {
        // Read before verification, to say which refusals to report (never to decide from).
        let tainted: BTreeSet<String> = nodes
            .iter()
            .filter(|n| {
                n.has_taint(self.taint_key)
                    || read_unverified(&n.annotations)
                        .and_then(Result::ok)
                        .is_some_and(|r| r.tainted(n, self.taint_key))
            })
            .map(|n| n.name.clone())
            .collect();
        let dropped = drop_unverified_records(self.store, nodes).await;
        let refused = dropped
            .into_iter()
            .filter(|(node, _)| tainted.contains(node));
        let report = |(node, why)| UndoReport {
            node,
            why,
            outcome: Some(UndoOutcome::Refused {
                why: "refused: its cordon record does not verify".into(),
            }),
            ..UndoReport::default()
        };
        refused.map(report).collect()
    }
}
