//! Placeholders (see [`crate::domain::surge`]): made from the pods of a doomed node, listed,
//! created and deleted through the API; and the pass of a drain that decides which pods wait
//! for room ([`surge_pass`]).
//!
//! A placeholder is a pod in its pod's namespace, named after the pod's uid, labelled
//! `forewarn.io/placeholder=true` and `forewarn.io/placeholder-node=<node>`, annotated with the
//! node, the pod, the event and when it expires (the drain's deadline). Its one `pause`
//! container requests what the pod requests (the larger of its containers' sum and its largest
//! init container, per resource); it keeps the pod's node selector, affinity and tolerations,
//! plus a required node affinity term that keeps it off the doomed node; it is of the
//! PriorityClass `forewarn-placeholder` (priority -1, `preemptionPolicy: Never`), so that every
//! real pod preempts it and it preempts nothing, and its grace period is 0.
//!
//! Only pods that a controller owns get one (a ReplicaSet, a StatefulSet, a Job, ...: something
//! recreates them); pods of no controller, DaemonSet and mirror pods, and placeholders
//! themselves are drained as without surge.

use std::collections::{BTreeMap, BTreeSet};

use ::kube::Api;
use ::kube::api::{DeleteParams, ListParams, PostParams};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    Pod, PodSpec, ResourceRequirements,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::{ApiError, Lane, with_retry_in};
use super::connect::ClusterClient;
use super::error::KubeError;
use crate::domain::audit::Budget;
use crate::domain::surge::{
    ANNOTATION_EVENT, ANNOTATION_EVICT_BY, ANNOTATION_EXPIRES, ANNOTATION_NODE, ANNOTATION_POD,
    ANNOTATION_POD_UID, CHECK_EVERY, Due, LABEL_PLACEHOLDER, LABEL_PLACEHOLDER_NODE,
    PLACEHOLDER_IMAGE, PRIORITY_CLASS, Placeholder, RoomSeen, RoomWait, due, latest_safe,
    node_label_value, placeholder_name,
};

/// A drain's surge: for which event, until when.
#[derive(Debug, Clone)]
pub(crate) struct SurgeSettings {
    pub event_id: String,
    pub deadline: DateTime<Utc>,
    /// What the executor's surge drains remember (budgets, refused namespaces), shared by them.
    pub memory: std::sync::Arc<SurgeMemory>,
    /// The drain's first pass: no placeholder was made yet, so none is listed (a duplicate
    /// chain's create answers 409, and the next pass lists them).
    pub first: bool,
}

/// What a drain pass's surge decided.
#[derive(Debug, Default)]
pub(crate) struct SurgePass {
    /// The uids of the pods that wait for room (not evicted in this pass).
    pub waiting: BTreeSet<String>,
    /// When to look again: the earliest latest safe time, or sooner to see placeholders run.
    pub next: Option<DateTime<Utc>>,
    /// The earliest latest safe time of the waiting pods.
    pub evict_by: Option<DateTime<Utc>>,
    /// The placeholders holding room for the waiting pods.
    pub holding: u32,
    pub created: usize,
    /// Placeholders deleted: their pod is gone.
    pub deleted: usize,
    /// The node's placeholders as listed (to delete when the drain ends).
    pub listed: Vec<Pod>,
}

impl SurgePass {
    /// What the drain waits for when it waits only for room: the earliest latest safe time of
    /// the waiting pods (at most `deadline`), and the placeholders holding room for them.
    pub(crate) fn room(&self, deadline: DateTime<Utc>) -> Option<RoomWait> {
        Some(RoomWait {
            until: self.evict_by?.min(deadline),
            placeholders: self.holding,
        })
    }
}

/// The controller of `pod` (kind, name), unless it has none or it is a DaemonSet.
fn controller(pod: &Pod) -> Option<(&str, &str)> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind != "DaemonSet")
        .map(|r| (r.kind.as_str(), r.name.as_str()))
}

fn is_placeholder(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(LABEL_PLACEHOLDER).map(String::as_str) == Some("true"))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// One surge pass of a drain of `node`: lists the node's placeholders, deletes those whose pod
/// is gone, creates those missing for the pods to evict (`to_evict`, a controller's, not past
/// their latest safe time), and says which of them wait for room. `listed` is every pod on the
/// node (the terminating ones included).
pub(crate) async fn surge_pass(
    clients: &ClusterClient,
    node: &str,
    settings: &SurgeSettings,
    listed: &[Pod],
    to_evict: &[&Pod],
) -> Result<SurgePass, KubeError> {
    let now = clients.clock().now();
    let mut pass = SurgePass::default();
    let mut by_pod: BTreeMap<String, Pod> = BTreeMap::new();
    let surging: Vec<(&Pod, &str)> = to_evict
        .iter()
        .filter(|pod| controller(pod).is_some() && !is_placeholder(pod))
        .filter_map(|pod| Some((*pod, pod.metadata.uid.as_deref()?)))
        .collect();
    let mut rounds = earlier_rounds(to_evict);
    if settings.first {
        for (uid, r) in budget_rounds(clients, &settings.memory, &surging).await? {
            let e = rounds.entry(uid).or_default();
            *e = (*e).max(r);
        }
    }
    let latest_of = |pod: &Pod, uid: &str| {
        let grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        latest_safe(
            settings.deadline,
            grace,
            rounds.get(uid).copied().unwrap_or(0),
        )
    };
    // Every pod is due by its time: what its placeholder does changes nothing now (the next
    // pass lists them, and deletes those whose pod is gone).
    let all_due =
        !surging.is_empty() && surging.iter().all(|(pod, uid)| now >= latest_of(pod, uid));
    let existing = if settings.first || all_due {
        Vec::new()
    } else {
        of_node(clients, node).await?
    };
    for ph in existing {
        let uid = annotation(&ph, ANNOTATION_POD_UID)
            .unwrap_or_default()
            .to_string();
        let present = listed
            .iter()
            .any(|p| p.metadata.uid.as_deref() == Some(uid.as_str()));
        if present {
            by_pod.insert(uid, ph);
        } else {
            delete(clients, &ph).await?;
            pass.deleted += 1;
        }
    }
    for (pod, uid) in surging {
        // The time given when the placeholder was made, if earlier (its budget's rounds).
        let given = by_pod
            .get(uid)
            .and_then(|ph| annotation(ph, ANNOTATION_EVICT_BY))
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        let own = latest_of(pod, uid);
        let latest = given.map_or(own, |g| g.min(own));
        let state = match by_pod.get(uid) {
            Some(ph) if running_elsewhere(ph, node) => Placeholder::Running,
            Some(_) => Placeholder::Pending,
            None => Placeholder::Missing,
        };
        if let Due::Later(latest) = due(now, latest, state) {
            if state == Placeholder::Missing {
                let ph = placeholder_for(pod, node, settings, latest);
                match create(clients, &settings.memory, &ph).await? {
                    Created::New => pass.created += 1,
                    Created::Exists => {}
                    // No room can be asked for this pod: waiting would gain nothing.
                    Created::Refused => continue,
                }
                by_pod.insert(uid.to_string(), ph);
            }
            pass.waiting.insert(uid.to_string());
            pass.holding += 1;
            pass.evict_by = Some(pass.evict_by.map_or(latest, |e| e.min(latest)));
            let next = latest.min(now + CHECK_EVERY);
            pass.next = Some(pass.next.map_or(next, |n| n.min(next)));
        }
    }
    pass.listed = by_pod.into_values().collect();
    Ok(pass)
}

/// The placeholder runs on another node than the doomed one.
fn running_elsewhere(ph: &Pod, node: &str) -> bool {
    let on = ph.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let phase = ph.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some("Running") && on.is_some_and(|n| n != node)
}

/// How long a namespace's budgets, once listed, are taken as they were: a budget's selector and
/// size change rarely, and a list per drain would cost the API server a request per node.
const BUDGETS_KEPT: chrono::Duration = chrono::Duration::seconds(60);

/// What an executor's surge drains remember from one pass to the next (one execution
/// environment's): the budgets that let their pods go only in rounds, per namespace, as last
/// listed and when (kept [`BUDGETS_KEPT`] by the executor's clock; one list at a time); and the
/// namespaces where the API refused a placeholder (403), until when (see [`REFUSED_KEPT`]).
#[derive(Debug, Default)]
pub(crate) struct SurgeMemory {
    budgets: tokio::sync::Mutex<KeptBudgets>,
    refused: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
}

/// How long a namespace whose placeholder the API refused with 403 gets no other one asked
/// for. A 403 is the cluster's word for the namespace, not for one pod: no grant to create
/// pods (a cluster before 1.30, where `forewarn deploy` applies no placeholder grant, or an
/// RBAC without it), a Pod Security level that a `pause` container without a security context
/// does not meet, a ResourceQuota spent. Asking again for each pod of a mass interruption
/// would cost the API server one request and the log one warning per pod, for nothing.
const REFUSED_KEPT: chrono::Duration = chrono::Duration::seconds(60);

impl SurgeMemory {
    /// Whether placeholders in `namespace` were refused less than [`REFUSED_KEPT`] before `now`.
    fn refuses(&self, namespace: &str, now: DateTime<Utc>) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(namespace).is_some_and(|until| now < *until)
    }

    /// A placeholder in `namespace` was refused (403) at `now`.
    fn refused_at(&self, namespace: &str, now: DateTime<Utc>) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.insert(namespace.to_string(), now + REFUSED_KEPT);
    }
}

/// Per namespace: when its budgets were listed, and the ones that let their pods go in rounds.
type KeptBudgets = BTreeMap<String, (DateTime<Utc>, Vec<Budget>)>;

/// Per pod uid of `pods` (a drain's surging pods), one earlier round when a budget selects it
/// that cannot let all of its pods go at once (see [`crate::domain::surge`]). One list of
/// budgets per namespace, kept a minute; a list the API refuses (an RBAC without the grant)
/// counts no round, and is logged; one that fails otherwise counts none in this pass only.
async fn budget_rounds(
    clients: &ClusterClient,
    memory: &SurgeMemory,
    pods: &[(&Pod, &str)],
) -> Result<BTreeMap<String, usize>, KubeError> {
    let namespaces: BTreeSet<&str> = pods
        .iter()
        .map(|(p, _)| p.metadata.namespace.as_deref().unwrap_or("default"))
        .collect();
    let mut serial: Vec<Budget> = Vec::new();
    let mut kept = memory.budgets.lock().await;
    for ns in namespaces {
        let now = clients.clock().now();
        if let Some((at, budgets)) = kept.get(ns)
            && now - *at < BUDGETS_KEPT
        {
            serial.extend(budgets.iter().cloned());
            continue;
        }
        let api: Api<PodDisruptionBudget> = Api::namespaced(clients.client().await?, ns);
        let what = format!("poddisruptionbudgets in {ns}");
        let params = ListParams::default();
        let listed = match with_retry_in(clients.clock(), Lane::Later, "list", &what, || {
            api.list(&params)
        })
        .await
        {
            Ok(list) => list.items,
            Err(e) if matches!(e.status, Some(401 | 403 | 404)) => {
                tracing::warn!(error = %e, "budgets not read: placeholders wait without their rounds");
                Vec::new()
            }
            // Anything else (the API server in trouble): this drain's placeholders go without
            // the rounds; nothing is kept, so the namespace's next drain lists again.
            Err(e) => {
                tracing::warn!(error = %e, "budgets not read: this pass's placeholders wait without their rounds");
                continue;
            }
        };
        let budgets: Vec<Budget> = listed
            .iter()
            .filter_map(|pdb| {
                let expected = pdb
                    .status
                    .as_ref()
                    .map_or(0, |s| i64::from(s.expected_pods));
                let budget = crate::adapters::workloads::budget(pdb).ok()?;
                (budget.allowed_when_healthy(expected) < expected).then_some(budget)
            })
            .collect();
        serial.extend(budgets.iter().cloned());
        kept.insert(ns.to_string(), (now, budgets));
    }
    drop(kept);
    Ok(pods
        .iter()
        .filter(|(pod, _)| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            serial.iter().any(|b| b.selects(ns, &labels))
        })
        .map(|(_, uid)| (uid.to_string(), 1))
        .collect())
}

/// Per pod uid, how many pods of the same controller come before it on the node (name order):
/// the rounds of a budget that lets one go at a time (see [`crate::domain::surge`]).
fn earlier_rounds(pods: &[&Pod]) -> BTreeMap<String, usize> {
    // (namespace, controller kind, controller name) → (pod name, uid) of its pods here.
    type Owner = (String, String, String);
    let mut by_owner: BTreeMap<Owner, Vec<(&str, &str)>> = BTreeMap::new();
    for pod in pods {
        let (Some((kind, name)), Some(uid)) = (controller(pod), pod.metadata.uid.as_deref()) else {
            continue;
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        by_owner
            .entry((ns, kind.to_string(), name.to_string()))
            .or_default()
            .push((pod.metadata.name.as_deref().unwrap_or_default(), uid));
    }
    let mut out = BTreeMap::new();
    for mut group in by_owner.into_values() {
        group.sort();
        for (k, (_, uid)) in group.into_iter().enumerate() {
            out.insert(uid.to_string(), k);
        }
    }
    out
}

/// The placeholder of `pod`, a pod of doomed node `node` (see the module doc).
pub(crate) fn placeholder_for(
    pod: &Pod,
    node: &str,
    settings: &SurgeSettings,
    evict_by: DateTime<Utc>,
) -> Pod {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (LABEL_PLACEHOLDER.to_string(), "true".to_string()),
        (LABEL_PLACEHOLDER_NODE.to_string(), node_label_value(node)),
    ]);
    let annotations = BTreeMap::from([
        (ANNOTATION_NODE.to_string(), node.to_string()),
        (
            ANNOTATION_POD.to_string(),
            format!("{}/{pod_name}", namespace.as_deref().unwrap_or("default")),
        ),
        (ANNOTATION_POD_UID.to_string(), uid.clone()),
        (ANNOTATION_EVENT.to_string(), settings.event_id.clone()),
        (
            ANNOTATION_EXPIRES.to_string(),
            settings.deadline.to_rfc3339(),
        ),
        (ANNOTATION_EVICT_BY.to_string(), evict_by.to_rfc3339()),
    ]);
    let requests = effective_requests(&spec);
    Pod {
        metadata: ObjectMeta {
            name: Some(placeholder_name(&uid)),
            namespace,
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "placeholder".into(),
                image: Some(PLACEHOLDER_IMAGE.into()),
                resources: (!requests.is_empty()).then(|| ResourceRequirements {
                    requests: Some(requests),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            node_selector: spec.node_selector.clone(),
            affinity: Some(off_node(spec.affinity.clone(), node)),
            tolerations: spec.tolerations.clone(),
            priority_class_name: Some(PRIORITY_CLASS.into()),
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// `affinity` with a required term that keeps the pod off `node` (added to every required term:
/// the terms are ORed).
fn off_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let not_here = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "NotIn".into(),
        values: Some(vec![node.to_string()]),
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields
            .get_or_insert_with(Vec::new)
            .push(not_here.clone());
    }
    affinity
}

/// What a pod requests, per resource: the larger of its containers' sum and its largest init
/// container's request (as the scheduler counts it).
fn effective_requests(spec: &PodSpec) -> BTreeMap<String, Quantity> {
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    for c in &spec.containers {
        for (name, q) in c.resources.iter().flat_map(|r| r.requests.iter().flatten()) {
            if let Some(milli) = milli(&q.0) {
                *sum.entry(name.clone()).or_default() += milli;
            }
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (name, q) in c.resources.iter().flat_map(|r| r.requests.iter().flatten()) {
            if let Some(milli) = milli(&q.0) {
                let e = sum.entry(name.clone()).or_default();
                *e = (*e).max(milli);
            }
        }
    }
    sum.into_iter()
        .map(|(name, milli)| {
            let q = if milli % 1000 == 0 {
                format!("{}", milli / 1000)
            } else {
                format!("{milli}m")
            };
            (name, Quantity(q))
        })
        .collect()
}

/// A quantity (`100m`, `0.5`, `2`, `128Mi`, `1G`, `1e3`) in thousandths of its unit, rounded
/// up; `None` when it is not one.
pub(crate) fn milli(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    let exact = value * factor * 1000.0;
    // Round what binary floating point makes a hair above a whole number (0.1 × 1000).
    let nearest = exact.round();
    let milli = if (exact - nearest).abs() <= 1e-6 * nearest.abs().max(1.0) {
        nearest
    } else {
        exact.ceil()
    };
    (0.0..1e36).contains(&milli).then_some(milli as i128)
}

/// The placeholders made for `node`'s pods (one list, across namespaces, by label).
pub(crate) async fn of_node(clients: &ClusterClient, node: &str) -> Result<Vec<Pod>, KubeError> {
    let selector = format!(
        "{LABEL_PLACEHOLDER}=true,{LABEL_PLACEHOLDER_NODE}={}",
        node_label_value(node)
    );
    let found = list(clients, &selector, &format!("placeholders of node/{node}")).await?;
    Ok(found
        .into_iter()
        .filter(|p| annotation(p, ANNOTATION_NODE) == Some(node))
        .collect())
}

/// The placeholders of `nodes` as one list sees them (one request, by label, whatever the
/// number of nodes): per node asked, how many and how many run elsewhere (`RoomSeen`; zero for
/// a node with none).
pub(crate) async fn room_of(
    clients: &ClusterClient,
    nodes: &[String],
) -> Result<BTreeMap<String, RoomSeen>, KubeError> {
    let mut seen: BTreeMap<String, RoomSeen> = nodes
        .iter()
        .map(|n| (n.clone(), RoomSeen::default()))
        .collect();
    if nodes.is_empty() {
        return Ok(seen);
    }
    let values: BTreeSet<String> = nodes.iter().map(|n| node_label_value(n)).collect();
    let selector = format!(
        "{LABEL_PLACEHOLDER}=true,{LABEL_PLACEHOLDER_NODE} in ({})",
        values.into_iter().collect::<Vec<_>>().join(",")
    );
    let what = format!("placeholders of {} nodes", nodes.len());
    for ph in list(clients, &selector, &what).await? {
        let Some(node) = annotation(&ph, ANNOTATION_NODE) else {
            continue;
        };
        if let Some(s) = seen.get_mut(node) {
            s.placeholders += 1;
            s.running += u32::from(running_elsewhere(&ph, node));
        }
    }
    Ok(seen)
}

async fn list(clients: &ClusterClient, selector: &str, what: &str) -> Result<Vec<Pod>, KubeError> {
    let pods: Api<Pod> = Api::all(clients.client().await?);
    let params = ListParams::default().labels(selector);
    let list = with_retry_in(clients.clock(), Lane::Later, "list", what, || {
        pods.list(&params)
    })
    .await?;
    Ok(list.items)
}

/// What became of a placeholder's create.
enum Created {
    New,
    Exists,
    /// The API refused it (a namespace's ResourceQuota or LimitRange, an admission policy:
    /// 400, 403, 422); logged. Its pod is drained as without surge.
    Refused,
}

/// Creates `ph`, unless its namespace refused one lately (then it is [`Created::Refused`]
/// without a request).
async fn create(
    clients: &ClusterClient,
    memory: &SurgeMemory,
    ph: &Pod,
) -> Result<Created, KubeError> {
    let ns = ph.metadata.namespace.as_deref().unwrap_or("default");
    if memory.refuses(ns, clients.clock().now()) {
        tracing::debug!(
            namespace = ns,
            "placeholders refused here lately: not asked again"
        );
        return Ok(Created::Refused);
    }
    let pods: Api<Pod> = Api::namespaced(clients.client().await?, ns);
    let object = format!(
        "pod/{ns}/{}",
        ph.metadata.name.as_deref().unwrap_or_default()
    );
    let params = PostParams::default();
    match with_retry_in(clients.clock(), Lane::Later, "create", &object, || {
        pods.create(&params, ph)
    })
    .await
    {
        Ok(_) => Ok(Created::New),
        Err(e) if e.status == Some(409) => Ok(Created::Exists),
        Err(e) if e.status == Some(403) => {
            memory.refused_at(ns, clients.clock().now());
            tracing::warn!(error = %e, namespace = ns,
                "placeholder refused: its pod, and the namespace's for a minute, are evicted without waiting for room");
            Ok(Created::Refused)
        }
        Err(e) if matches!(e.status, Some(400 | 422)) => {
            tracing::warn!(error = %e, "placeholder refused: its pod is evicted without waiting for room");
            Ok(Created::Refused)
        }
        Err(e) => Err(KubeError::Api(e)),
    }
}

/// Deletes placeholder `ph` at once (grace 0); gone already is fine.
pub(crate) async fn delete(clients: &ClusterClient, ph: &Pod) -> Result<(), KubeError> {
    let ns = ph.metadata.namespace.as_deref().unwrap_or("default");
    let name = ph.metadata.name.as_deref().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(clients.client().await?, ns);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let object = format!("pod/{ns}/{name}");
    match with_retry_in(clients.clock(), Lane::Later, "delete", &object, || {
        pods.delete(name, &params)
    })
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if ApiError::is_not_found(&e) => Ok(()),
        Err(e) => Err(KubeError::Api(e)),
    }
}

/// Deletes the placeholders of the whole cluster that expired before `now` (the sweeper's
/// clean-up: a placeholder never outlives its event by more than a sweep); answers their
/// `namespace/name`. `dry_run`: deletes nothing, answers the same.
pub(crate) async fn delete_expired(
    clients: &ClusterClient,
    now: DateTime<Utc>,
    dry_run: bool,
) -> Result<Vec<String>, KubeError> {
    let all = list(
        clients,
        &format!("{LABEL_PLACEHOLDER}=true"),
        "placeholders",
    )
    .await?;
    let mut gone = Vec::new();
    for ph in all {
        let expired = annotation(&ph, ANNOTATION_EXPIRES)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            // A placeholder without a readable expiry is forewarn's and of no use: it goes too.
            .is_none_or(|t| t.with_timezone(&Utc) < now);
        if !expired {
            continue;
        }
        if !dry_run {
            delete(clients, &ph).await?;
        }
        gone.push(format!(
            "{}/{}",
            ph.metadata.namespace.as_deref().unwrap_or("default"),
            ph.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn settings() -> SurgeSettings {
        SurgeSettings {
            event_id: "ev-1".into(),
            deadline: DateTime::parse_from_rfc3339("2026-11-20T10:01:45Z")
                .unwrap()
                .with_timezone(&Utc),
            first: false,
            memory: Default::default(),
        }
    }

    #[test]
    fn quantities_in_thousandths() {
        assert_eq!(milli("100m"), Some(100));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(milli("0.1"), Some(100));
        assert_eq!(milli("1u"), Some(1), "rounded up to a thousandth");
        assert_eq!(milli("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(milli("1G"), Some(1_000_000_000_000));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("1.5k"), Some(1_500_000));
        assert_eq!(milli("1E"), Some(1_000_000_000_000_000_000_000));
        assert_eq!(milli("2E-3"), Some(2));
        assert_eq!(milli("lots"), None);
        assert_eq!(milli("1Xi"), None);
        assert_eq!(milli("-1"), None);
    }

    #[test]
    fn a_placeholder_asks_what_its_pod_asks_off_the_doomed_node() {
        let web = pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-rs", "uid": "r", "controller": true}]},
            "spec": {
                "nodeName": "doomed",
                "nodeSelector": {"pool": "general"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web",
                    "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                    ]}}},
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}
                ]
            }
        }));
        let evict_by = settings().deadline - chrono::Duration::seconds(40);
        let ph = placeholder_for(&web, "doomed", &settings(), evict_by);
        let v = serde_json::to_value(&ph).unwrap();
        assert_eq!(v["metadata"]["name"], "forewarn-placeholder-u-1");
        assert_eq!(v["metadata"]["namespace"], "shop");
        assert_eq!(v["metadata"]["labels"][LABEL_PLACEHOLDER], "true");
        assert_eq!(v["metadata"]["labels"][LABEL_PLACEHOLDER_NODE], "doomed");
        assert_eq!(v["metadata"]["annotations"][ANNOTATION_POD], "shop/web-1");
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_EXPIRES],
            "2026-11-20T10:01:45+00:00"
        );
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_EVICT_BY],
            "2026-11-20T10:01:05+00:00"
        );
        let spec = &v["spec"];
        assert_eq!(spec["priorityClassName"], PRIORITY_CLASS);
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        assert_eq!(spec["nodeSelector"], json!({"pool": "general"}));
        assert_eq!(spec["tolerations"][0]["key"], "dedicated");
        assert_eq!(
            spec["containers"][0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "134217728"}),
            "the init container's cpu is the larger"
        );
        let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms.as_array().unwrap().len(), 2);
        for term in terms.as_array().unwrap() {
            assert_eq!(
                term["matchFields"],
                json!([{"key": "metadata.name", "operator": "NotIn", "values": ["doomed"]}])
            );
            assert!(term["matchExpressions"].is_array());
        }
        // Without an affinity of its own: one term keeping it off the node.
        let bare =
            pod(json!({"metadata": {"name": "x", "uid": "u-2"}, "spec": {"containers": []}}));
        let v =
            serde_json::to_value(placeholder_for(&bare, "doomed", &settings(), evict_by)).unwrap();
        assert_eq!(
            v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["doomed"]}]}])
        );
    }

    #[test]
    fn rounds_count_the_pods_of_one_controller_before_each() {
        let p = |name: &str, owner: &str| {
            pod(
                json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": owner, "uid": "r", "controller": true}]}}),
            )
        };
        let (a, b, c) = (p("web-b", "web"), p("web-a", "web"), p("db-0", "db"));
        let rounds = earlier_rounds(&[&a, &b, &c]);
        assert_eq!(rounds["u-web-a"], 0);
        assert_eq!(rounds["u-web-b"], 1);
        assert_eq!(rounds["u-db-0"], 0);
    }
}
