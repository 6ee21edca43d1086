//! The pool sweeper: reconciles what EventBridge missed (its delivery is best effort). It reads
//! this cluster's leaving instances and nodes, turns them into synthetic events
//! ([`findings`]) and puts them through the handler's pipeline; likewise the instances whose EC2
//! status checks fail or whose scheduled events retire them ([`status_findings`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::adapters::snapshot::ClusterState;
use crate::app::fleet::Cluster;
use crate::app::handler::Handler;
use crate::app::leaving::LeavingInstances;
use crate::app::pipeline::{Described, Pipeline};
use crate::app::preflight::{PreflightMemory, Role};
use crate::app::priorities::{
    BaseSource, NodeGroupSource, Priorities, PriorityOutcome, PriorityRunError, PrioritySettings,
};
use crate::app::upkeep::Upkeep;
use crate::app::wayback::{UndoReport, WayBack};
use crate::domain::clusters::{ClusterId, Place};
use crate::domain::config::Config;
use crate::domain::event::{Detail, Event, Origin};
use crate::domain::facts::InstanceFacts;
use crate::domain::inbound::Record;
use crate::domain::preflight::Proof;
use crate::domain::report::Report;
use crate::domain::status::status_findings;
use crate::domain::sweep::findings;
use crate::ports::PortError;

/// A sweep that could not look.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(
        "the sweeper needs the cluster's name (the served clusters): it looks for this cluster's instances"
    )]
    NoCluster,
    #[error(transparent)]
    Lookup(#[from] PortError),
    #[error("priorities: {0}")]
    Priorities(#[from] PriorityRunError),
}

/// What one run of the sweeper did in one cluster, step by step.
pub struct SweepRun {
    /// The cluster (`None`: the lone cluster of a deployment naming none).
    pub cluster: Option<String>,
    pub findings: Result<Vec<Report>, SweepError>,
    pub way_back: Result<Vec<UndoReport>, PortError>,
    pub placeholders: Result<Vec<String>, crate::ports::PortError>,
    pub priorities: Result<Option<PriorityOutcome>, SweepError>,
    /// The preflight of forewarn's writes, when this cluster was due one (once an hour).
    pub preflight: Option<Vec<Proof>>,
}

/// What one run of the sweeper did: each served cluster's [`SweepRun`], the clusters it could
/// not reach, or why it could not tell which clusters to visit.
pub struct SweepRuns {
    pub runs: Vec<SweepRun>,
    /// The clusters not reached, by name, and why.
    pub unreachable: Vec<(String, PortError)>,
    /// The served clusters could not be listed (`*`): nothing was visited.
    pub unlisted: Option<PortError>,
}

impl SweepRuns {
    /// Every step that failed, in every cluster (named first when the deployment names its
    /// clusters), and every cluster not reached: the run fails when any did, after every
    /// cluster's every step ran.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .unlisted
            .iter()
            .map(|e| format!("clusters: {e}"))
            .collect();
        out.extend(self.unreachable.iter().map(|(_, e)| e.to_string()));
        for run in &self.runs {
            out.extend(run.failures().into_iter().map(|f| match &run.cluster {
                Some(cluster) => format!("cluster {cluster}: {f}"),
                None => f,
            }));
        }
        out
    }

    /// The run's answer: each cluster's (see [`SweepRun::answer`]), by name (`-` for a lone
    /// cluster naming none); the clusters not reached, with why.
    pub fn answer(&self) -> serde_json::Value {
        use serde_json::json;
        let clusters: serde_json::Map<String, serde_json::Value> = self
            .runs
            .iter()
            .map(|run| {
                (
                    run.cluster.clone().unwrap_or_else(|| "-".into()),
                    run.answer(),
                )
            })
            .collect();
        let unreachable: serde_json::Map<String, serde_json::Value> = self
            .unreachable
            .iter()
            .map(|(cluster, e)| (cluster.clone(), json!(e.source.to_string())))
            .collect();
        json!({ "clusters": clusters, "unreachable": unreachable,
                "unlisted": self.unlisted.as_ref().map(|e| e.to_string()) })
    }
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
        use serde_json::{Value, json};
        fn step<T, E: std::fmt::Display>(r: &Result<T, E>, ok: impl Fn(&T) -> Value) -> Value {
            r.as_ref()
                .map_or_else(|e| json!({ "error": e.to_string() }), ok)
        }
        let findings = |reports: &Vec<Report>| json!({ "count": reports.len(), "outcomes": crate::domain::report::Tally::of(reports) });
        let priorities = |p: &Option<PriorityOutcome>| {
            json!(p.as_ref().map(|p| json!({
                "change": p.change,
                "hot": p.hot.iter().map(|h| &h.group).collect::<Vec<_>>()
            })))
        };
        let preflight = self.preflight.as_ref().map(|proofs| {
            let verdicts = proofs.iter().map(|p| {
                let verdict = json!(p.verdict.to_string());
                (p.capability.as_str().to_string(), verdict)
            });
            verdicts.collect::<serde_json::Map<String, Value>>()
        });
        json!({ "findings": step(&self.findings, findings),
                "way_back": step(&self.way_back, |u| json!(u)),
                "placeholders_deleted": step(&self.placeholders, |g| json!(g)),
                "priorities": step(&self.priorities, priorities),
                "preflight": preflight })
    }
}

/// The sweeper: the handler's wiring plus where to find leaving instances.
pub struct Sweeper {
    pub handler: Handler,
    pub leaving: Arc<dyn LeavingInstances>,
    /// The region synthetic events carry.
    pub region: Option<String>,
    /// Where the priority expander's node groups are (`None`: every expander left alone);
    /// each cluster's expander ConfigMaps are its own ([`Upkeep::expander`]).
    pub priorities: Option<SweepPriorities>,
    /// When each cluster's preflight last ran and what it found (see [`crate::app::preflight`]).
    pub preflight: Arc<PreflightMemory>,
}

/// Where the sweeper reads the node groups the priority expander ranks.
pub struct SweepPriorities {
    pub groups: Arc<dyn NodeGroupSource>,
    pub settings: PrioritySettings,
}

impl Sweeper {
    /// One scheduled run: every served cluster visited at once, each on its own services;
    /// in each, the sweep, the way back, the clean-up of placeholders left by drains and the
    /// priority expander's update — each step runs whatever became of the others (a sweep that
    /// cannot look still lets the way back and the clean-up run), each cluster whatever became
    /// of the others.
    pub async fn run(&self, deadline: Option<DateTime<Utc>>) -> SweepRuns {
        let h = &self.handler;
        let every = match h.fleet.every(&h.config, h.clock.now()).await {
            Ok(every) => every,
            Err(e) => {
                return SweepRuns {
                    runs: Vec::new(),
                    unreachable: Vec::new(),
                    unlisted: Some(e),
                };
            }
        };
        let mut unreachable = Vec::new();
        let mut visits = Vec::new();
        for (id, reached) in every {
            match reached {
                Ok(cluster) => visits
                    .push(async move { self.in_cluster(id, cluster).await.run(deadline).await }),
                Err(e) => unreachable.push((id.map(|id| id.to_string()).unwrap_or_default(), e)),
            }
        }
        SweepRuns {
            runs: futures::future::join_all(visits).await,
            unreachable,
            unlisted: None,
        }
    }

    /// The sweeper's steps in the served cluster `id` (`None`: the lone cluster).
    pub async fn cluster(&self, id: Option<&ClusterId>) -> Result<ClusterSweep<'_>, PortError> {
        let h = &self.handler;
        let cluster = h.fleet.cluster(id).await?;
        let id = id.cloned().or_else(|| cluster.id.clone());
        Ok(self.in_cluster(id, cluster).await)
    }

    async fn in_cluster(&self, id: Option<ClusterId>, cluster: Arc<Cluster>) -> ClusterSweep<'_> {
        let h = &self.handler;
        let config = cluster.config(&h.config, h.clock.as_ref()).await;
        // The deployment's own account and region (its region the sweeper's when the fleet
        // does not know it).
        let own = h.fleet.own();
        let region = own.region.clone().or_else(|| self.region.clone());
        let own = Place {
            region,
            ..own.clone()
        };
        let id = id.or_else(|| config.cluster.clone()).map(|id| id.or(&own));
        let place = id.as_ref().map_or(own, |id| id.place.clone());
        ClusterSweep {
            sweeper: self,
            name: id.as_ref().map(ToString::to_string),
            place,
            cluster,
            config,
        }
    }
}

/// The sweeper in one cluster: its services and its configuration (its policy).
pub struct ClusterSweep<'a> {
    sweeper: &'a Sweeper,
    /// The cluster, as shown (`account/region/name` once its account and region are known).
    pub name: Option<String>,
    /// Its account and region: where its instances are described, and what its findings are
    /// of.
    pub place: Place,
    pub cluster: Arc<Cluster>,
    pub config: Config,
}

impl ClusterSweep<'_> {
    /// The cluster's name, as its instances' tag says it: what its steps look for.
    fn tag(&self) -> Result<&str, SweepError> {
        Ok(&self
            .config
            .cluster
            .as_ref()
            .ok_or(SweepError::NoCluster)?
            .name)
    }

    /// Every step in this cluster (see [`Sweeper::run`]).
    pub async fn run(&self, deadline: Option<DateTime<Utc>>) -> SweepRun {
        SweepRun {
            cluster: self.name.clone(),
            findings: self.sweep(deadline).await,
            way_back: self.way_back().await,
            placeholders: self.clean_placeholders().await,
            priorities: self.update_priorities().await,
            preflight: self.preflight().await,
        }
    }

    /// Once an hour per cluster ([`crate::app::preflight::EVERY`]): every write the sweeper
    /// makes, sent to the cluster as a server-side dry run as its own identity (see
    /// [`crate::app::upkeep::ClusterUpkeep::preflight`]); what changed since the last is logged, every refusal
    /// counted in the metrics. `None` when not due, or without actions (a capture, a plan).
    pub async fn preflight(&self) -> Option<Vec<Proof>> {
        let h = &self.sweeper.handler;
        let upkeep = Upkeep::actions_of(&self.cluster)?;
        let now = h.clock.now();
        let cluster = self.name.as_deref().unwrap_or("-");
        let memory = &self.sweeper.preflight;
        if !h.mode.runs_actions() || !memory.due(cluster, now) {
            return None;
        }
        let proofs = upkeep
            .preflight("sweeper", Role::Sweeper.capabilities())
            .await;
        let changed = memory.record(cluster, now, proofs.clone());
        let priorities = self.sweeper.priorities.is_some();
        let blocking = crate::app::preflight::blocking(&proofs, &self.config, priorities);
        h.telemetry
            .preflight(self.name.as_deref(), &proofs, &changed, blocking.len(), now);
        Some(proofs)
    }

    /// Updates the cluster's priority expander from the pool table (written only in
    /// [`Mode::Act`]); `None` when the sweeper has no priorities configured or the cluster no
    /// expander. It never creates the expander ConfigMap: when there is none, it logs a warning
    /// and answers [`Change::Missing`].
    ///
    /// [`Change::Missing`]: crate::app::priorities::Change::Missing
    ///
    /// [`Mode::Act`]: crate::domain::config::Mode::Act
    pub async fn update_priorities(&self) -> Result<Option<PriorityOutcome>, SweepError> {
        let (Some(p), Some(upkeep)) = (&self.sweeper.priorities, Upkeep::of(&self.cluster)) else {
            return Ok(None);
        };
        let h = &self.sweeper.handler;
        let cluster = self.tag()?;
        // Its node groups are described in its own account and region; pools are keyed by
        // zone ID, the same physical zones in every account.
        let run = Priorities {
            cluster,
            place: self.place.clone(),
            groups: p.groups.as_ref(),
            store: h.store.as_ref(),
            expander: Some(upkeep.expander.as_ref()),
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
    /// through the upkeep in [`Mode::Act`] and a dry run, reported only otherwise.
    ///
    /// [`Mode::Act`]: crate::domain::config::Mode::Act
    pub async fn way_back(&self) -> Result<Vec<UndoReport>, PortError> {
        let h = &self.sweeper.handler;
        let upkeep = Upkeep::actions_of(&self.cluster);
        WayBack {
            nodes: self.cluster.nodes.as_ref(),
            instances: h.instances.as_ref(),
            store: h.store.as_ref(),
            upkeep: upkeep.as_deref(),
            taint_key: &self.config.taint_key,
            statuses: Some(self.sweeper.leaving.as_ref()),
            place: &self.place,
        }
        .run(h.clock.now())
        .await
    }

    /// Deletes the placeholders that outlived their drain (see [`crate::domain::surge`]): a
    /// placeholder never outlives its event by more than one sweep. Nothing without actions
    /// (a capture, a plan); only reported in a dry run.
    pub async fn clean_placeholders(&self) -> Result<Vec<String>, crate::ports::PortError> {
        let h = &self.sweeper.handler;
        match Upkeep::actions_of(&self.cluster) {
            Some(upkeep) if h.mode.runs_actions() => upkeep.clean_placeholders(h.clock.now()).await,
            _ => Ok(Vec::new()),
        }
    }

    /// One sweep of this cluster: one EC2 query per cluster tag form for leaving instances, one
    /// node list, one DescribeInstances for the nodes' instances, one paged
    /// DescribeInstanceStatus (impaired instances, scheduled retirements and stops:
    /// [`status_findings`]), then the findings through the pipeline (on what was just read: no
    /// second lookup).
    pub async fn sweep(&self, deadline: Option<DateTime<Utc>>) -> Result<Vec<Report>, SweepError> {
        let s = self.sweeper;
        let h = &s.handler;
        let now = h.clock.now();
        let cluster = self.name.as_deref().ok_or(SweepError::NoCluster)?;
        let tag = self.tag()?;
        let place = &self.place;
        let leaving = s.leaving.leaving(place, tag).await?;
        let nodes = self.cluster.nodes.all().await?;
        let ids: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.instance_id().map(str::to_string))
            .collect();
        let node_instances = if ids.is_empty() {
            BTreeMap::new()
        } else {
            h.instances.describe(place, &ids).await?
        };
        let config = &self.config;
        let mut events = findings(&leaving, &nodes, &node_instances, now, place);
        // Status checks and scheduled events: a failure (a stack without the grant of
        // `ec2:DescribeInstanceStatus`) costs these findings only, not the sweep's others.
        let statuses = match s.leaving.statuses(place).await {
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
            place,
        ));
        tracing::info!(
            cluster,
            leaving = leaving.len(),
            nodes = nodes.len(),
            statuses = statuses.len(),
            findings = events.len(),
            "sweep looked"
        );
        let mut known = node_instances;
        known.extend(leaving.into_iter().map(|i| (i.instance_id.clone(), i)));
        let blocks = self.ending_blocks(tag, now).await;
        for (event, instances) in blocks {
            known.extend(instances);
            events.push(event);
        }
        let instances = Described {
            found: known,
            failed: BTreeMap::new(),
        };
        let state = ClusterState {
            nodes,
            pods: Vec::new(),
        };
        let records: Vec<Record> = events
            .into_iter()
            .map(|e| {
                let what = match &e.detail {
                    Detail::CapacityBlock { reservation_id, .. } => reservation_id.clone(),
                    _ => e.instance_ids.join(","),
                };
                Record::new(Origin::bare(format!("sweep {what}")), Ok(e))
            })
            .collect();
        // A finding has no queue to come back on (its record names none): its drain's passes
        // run here, the handler's interval apart.
        let pipeline = Pipeline {
            config,
            mode: h.mode,
            store: h.store.as_ref(),
            instances: &instances,
            nodes: &state,
            executor: self.cluster.executor.as_deref(),
            passes: &h.passes,
            clock: h.clock.as_ref(),
            traffic: None,
            concurrency: h.concurrency,
            work: crate::ports::Work {
                deadline,
                fail_fast: false,
            },
        };
        let reports = pipeline.process(&records).await;
        h.telemetry.observe(&reports, h.clock.now());
        Ok(reports)
    }

    /// The Capacity Blocks of this cluster's place that end within
    /// [`crate::domain::sweep::BLOCK_LOOKAHEAD`], each with the instances of this cluster
    /// (`tag`, its name) that run in it, as the expiration warning EC2 sends 40 minutes before
    /// the end ([`crate::domain::sweep::block_finding`]): a block whose warning was handled is a
    /// duplicate of it. A block of no instance of this cluster is left to its own. A lookup
    /// that fails costs these findings only, logged.
    async fn ending_blocks(
        &self,
        tag: &str,
        now: DateTime<Utc>,
    ) -> Vec<(Event, BTreeMap<String, InstanceFacts>)> {
        let h = &self.sweeper.handler;
        let place = &self.place;
        let by = now + crate::domain::sweep::BLOCK_LOOKAHEAD;
        let blocks = match self.sweeper.leaving.ending_blocks(place, by).await {
            Ok(blocks) => blocks,
            Err(e) => {
                tracing::error!(error = %e, "no Capacity Blocks this sweep: a missed expiration warning is not looked for");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for block in blocks {
            let found = h.instances.capacity_block(place, &block.reservation_id);
            let found = match found.await {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!(error = %e, reservation = %block.reservation_id, "a Capacity Block's instances were not looked up this sweep");
                    continue;
                }
            };
            let ours: BTreeMap<String, InstanceFacts> = found
                .instances
                .into_iter()
                .filter(|(_, i)| i.clusters().contains(&tag))
                .collect();
            if ours.is_empty() {
                continue;
            }
            let ids = ours.keys().cloned().collect();
            let event = crate::domain::sweep::block_finding(&block, ids, tag, now, place);
            out.push((event, ours));
        }
        out
    }
}
