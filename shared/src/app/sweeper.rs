//! The pool sweeper: reconciles what EventBridge missed (its delivery is best effort). It reads
//! this cluster's leaving instances and nodes, turns them into synthetic events
//! ([`findings`]) and puts them through the handler's pipeline; likewise the instances whose EC2
//! status checks fail or whose scheduled events retire them ([`status_findings`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::adapters::snapshot::{ClusterState, SnapshotInstances};
use crate::app::handler::Handler;
use crate::app::pipeline::{Limits, Passes, Pipeline};
use crate::app::priorities::{
    BaseSource, Priorities, PriorityOutcome, PriorityRunError, PrioritySettings,
};
use crate::app::wayback::{UndoReport, WayBack, WayBackError};
use crate::domain::event::Origin;
use crate::domain::inbound::Record;
use crate::domain::report::Report;
use crate::domain::status::status_findings;
use crate::domain::sweep::findings;
use crate::ports::{DirectoryError, ExpanderStore, LeavingInstances, NodeGroupSource};

/// A sweep that could not look.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("the sweeper needs FOREWARN_CLUSTER_NAME: it looks for this cluster's instances")]
    NoCluster,
    #[error(transparent)]
    Lookup(#[from] DirectoryError),
    #[error("priorities: {0}")]
    Priorities(#[from] PriorityRunError),
}

/// What one run of the sweeper did ([`Sweeper::run`]), step by step.
pub struct SweepRun {
    pub findings: Result<Vec<Report>, SweepError>,
    pub way_back: Result<Vec<UndoReport>, WayBackError>,
    pub placeholders: Result<Vec<String>, crate::ports::ExecuteError>,
    pub priorities: Result<Option<PriorityOutcome>, SweepError>,
}

impl SweepRun {
    /// Every step that failed, in one sentence each (a failed finding, a cordon that was not
    /// undone, placeholders not deleted, the priorities not updated): the run fails when any
    /// did, after every step ran.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.findings {
            Err(e) => out.push(format!("sweep: {e}")),
            Ok(reports) => {
                let failed: Vec<&Report> = reports
                    .iter()
                    .filter(|r| r.outcome == crate::domain::report::Outcome::Failed)
                    .collect();
                if let Some(first) = failed.first() {
                    out.push(format!(
                        "{} of {} findings failed; first: {}: {}",
                        failed.len(),
                        reports.len(),
                        first.origin,
                        first.reason.as_deref().unwrap_or("failed")
                    ));
                }
            }
        }
        match &self.way_back {
            Err(e) => out.push(format!("way back: {e}")),
            Ok(undone) => out.extend(undone.iter().filter_map(|u| {
                let e = u.error.as_deref()?;
                Some(format!("undoing the cordon of node/{} failed: {e}", u.node))
            })),
        }
        if let Err(e) = &self.placeholders {
            out.push(format!("placeholders: {e}"));
        }
        if let Err(e) = &self.priorities {
            out.push(e.to_string());
        }
        out
    }

    /// The run's answer: what each step did (a failed step: its error).
    pub fn answer(&self) -> serde_json::Value {
        use serde_json::json;
        let err = |e: &dyn std::fmt::Display| json!({ "error": e.to_string() });
        let findings = match &self.findings {
            Ok(reports) => json!({ "count": reports.len(),
                                   "outcomes": crate::domain::report::Tally::of(reports) }),
            Err(e) => err(e),
        };
        let way_back = match &self.way_back {
            Ok(undone) => json!(undone),
            Err(e) => err(e),
        };
        let placeholders = match &self.placeholders {
            Ok(gone) => json!(gone),
            Err(e) => err(e),
        };
        let priorities = match &self.priorities {
            Ok(p) => json!(p.as_ref().map(|p| json!({
                "change": p.change,
                "hot": p.hot.iter().map(|h| &h.group).collect::<Vec<_>>()
            }))),
            Err(e) => err(e),
        };
        json!({ "findings": findings, "way_back": way_back,
                "placeholders_deleted": placeholders, "priorities": priorities })
    }
}

/// The sweeper: the handler's wiring plus where to find leaving instances.
pub struct Sweeper {
    pub handler: Handler,
    pub leaving: Arc<dyn LeavingInstances>,
    /// The region synthetic events carry.
    pub region: Option<String>,
    /// Where the priority expander's node groups and ConfigMaps are (`None`: left alone).
    pub priorities: Option<SweepPriorities>,
}

/// What the sweeper updates the priority expander through.
pub struct SweepPriorities {
    pub groups: Arc<dyn NodeGroupSource>,
    pub expander: Arc<dyn ExpanderStore>,
    pub settings: PrioritySettings,
}

impl Sweeper {
    /// Updates the priority expander from the pool table (written only in [`Mode::Act`]);
    /// `None` when the sweeper has no priorities configured. It never creates the expander
    /// ConfigMap: when there is none, it logs a warning and answers [`Change::Missing`].
    ///
    /// [`Change::Missing`]: crate::app::priorities::Change::Missing
    ///
    /// [`Mode::Act`]: crate::domain::config::Mode::Act
    pub async fn update_priorities(&self) -> Result<Option<PriorityOutcome>, SweepError> {
        let Some(p) = &self.priorities else {
            return Ok(None);
        };
        let h = &self.handler;
        let cluster = h
            .config
            .cluster_name
            .as_deref()
            .ok_or(SweepError::NoCluster)?;
        let run = Priorities {
            cluster,
            groups: p.groups.as_ref(),
            store: h.store.as_ref(),
            expander: Some(p.expander.as_ref()),
            base: BaseSource::ConfigMap,
            settings: p.settings,
            write: h.mode.writes_cluster(),
            // The sweeper's Kubernetes group may not create ConfigMaps: a missing expander
            // ConfigMap is reported (`Change::Missing`), to be created from its manifest.
            create: false,
        };
        Ok(Some(run.run(h.clock.now()).await?))
    }

    /// The way back (see [`crate::app::wayback`]): undoes the cordons whose reason is gone —
    /// through the executor in [`Mode::Act`] and a dry run, reported only otherwise.
    ///
    /// [`Mode::Act`]: crate::domain::config::Mode::Act
    pub async fn way_back(&self) -> Result<Vec<UndoReport>, WayBackError> {
        let h = &self.handler;
        WayBack {
            nodes: h.nodes.as_ref(),
            instances: h.instances.as_ref(),
            store: h.store.as_ref(),
            executor: h.executor.as_deref(),
            taint_key: &h.config.taint_key,
            statuses: Some(self.leaving.as_ref()),
        }
        .run(h.clock.now())
        .await
    }

    /// Deletes the placeholders that outlived their drain (see [`crate::domain::surge`]): a
    /// placeholder never outlives its event by more than one sweep. Nothing without an executor
    /// (a capture); only reported in a dry run.
    pub async fn clean_placeholders(&self) -> Result<Vec<String>, crate::ports::ExecuteError> {
        let h = &self.handler;
        match h.executor.as_deref() {
            Some(executor) if h.mode.runs_actions() => {
                executor.clean_placeholders(h.clock.now()).await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// One scheduled run: the sweep, the way back, the clean-up of placeholders left by drains
    /// and the priority expander's update — each step runs whatever became of the others (a
    /// sweep that cannot look still lets the way back and the clean-up run).
    pub async fn run(&self, deadline: Option<DateTime<Utc>>) -> SweepRun {
        SweepRun {
            findings: self.sweep(deadline).await,
            way_back: self.way_back().await,
            placeholders: self.clean_placeholders().await,
            priorities: self.update_priorities().await,
        }
    }

    /// One sweep: one EC2 query per cluster tag form for leaving instances, one node list, one
    /// DescribeInstances for the nodes' instances, one paged DescribeInstanceStatus (impaired
    /// instances, scheduled retirements and stops: [`status_findings`]), then the findings
    /// through the pipeline (on what was just read: no second lookup).
    pub async fn sweep(&self, deadline: Option<DateTime<Utc>>) -> Result<Vec<Report>, SweepError> {
        let h = &self.handler;
        let now = h.clock.now();
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
        let config = h.config().await;
        let mut events = findings(
            &leaving,
            &nodes,
            &node_instances,
            now,
            self.region.as_deref(),
        );
        // Status checks and scheduled events: a failure (a stack without the grant of
        // `ec2:DescribeInstanceStatus`) costs these findings only, not the sweep's others.
        let statuses = match self.leaving.statuses().await {
            Ok(statuses) => statuses,
            Err(e) => {
                tracing::error!(error = %e, "no status checks this sweep: impaired instances and EC2 scheduled events are not looked for");
                Vec::new()
            }
        };
        events.extend(status_findings(
            &statuses,
            &node_instances,
            config.impaired_after,
            now,
            self.region.as_deref(),
        ));
        tracing::info!(
            leaving = leaving.len(),
            nodes = nodes.len(),
            statuses = statuses.len(),
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
            .map(|e| {
                Record::new(
                    Origin::bare(format!("sweep {}", e.instance_ids.join(","))),
                    Ok(e),
                )
            })
            .collect();
        // A finding has no queue to come back on: its drain's passes run here.
        let passes = Passes::in_process(h.passes.interval);
        let pipeline = Pipeline {
            config: &config,
            mode: h.mode,
            store: h.store.as_ref(),
            instances: &instances,
            nodes: &state,
            executor: h.executor.as_deref(),
            passes: &passes,
            clock: h.clock.as_ref(),
        };
        let limits = Limits {
            concurrency: h.concurrency,
            deadline,
        };
        let reports = pipeline.process_with(&records, limits).await;
        h.telemetry.observe(&reports, h.clock.now());
        Ok(reports)
    }
}
