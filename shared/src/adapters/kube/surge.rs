//! Placeholders (see [`crate::domain::surge`]): made from the pods of a doomed node, listed,
//! created and deleted through the API; and the pass of a drain that decides which pods wait
//! for room ([`surge_pass`]).
//!
//! A placeholder is a pod in forewarn's namespace ([`NAMESPACE`]), named after its pod's uid,
//! owned by the doomed Node (so the garbage collector removes it with the Node), labelled
//! `forewarn.io/placeholder=true` and `forewarn.io/placeholder-node=<node>` (an index to list
//! them by), annotated with the node, the pod, the event, when it expires (the drain's
//! deadline) and `cluster-autoscaler.kubernetes.io/safe-to-evict: "true"`. Its one `pause`
//! container requests what the pod requests (the larger of its containers' sum and its largest
//! init container, per resource); it keeps the pod's node selector, affinity (pod (anti-)
//! affinity terms that meant the pod's namespace name it) and tolerations, plus required node
//! affinity that keeps it off the doomed node and off every node forewarn cordoned; it is of
//! the PriorityClass `forewarn-placeholder` (priority -1, `preemptionPolicy: Never`), so that
//! every real pod preempts it and it preempts nothing, and its grace period is 0. A pod is a
//! placeholder by its namespace, name and class together ([`is_placeholder`]), never by label.
//!
//! Only pods that a controller owns get one (a ReplicaSet, a StatefulSet, a Job, ...: something
//! recreates them), at most [`MAX_PODS`] a node; pods of no controller, DaemonSet and mirror
//! pods, and placeholders themselves are drained as without surge.
//!
//! Surge never fails or holds up a pass: a list, create or delete that fails is logged and
//! costs only the room it would have asked for — a pod whose placeholder is not made (any
//! answer but AlreadyExists, or none within [`STEP_BUDGET`]) is evicted at once, as without
//! surge, and a refusal keeps its pod's namespace from asking again for a minute.

use std::collections::{BTreeMap, BTreeSet};

use ::kube::Api;
use ::kube::api::{DeleteParams, ListParams, PostParams};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    Pod, PodAffinityTerm, PodSpec, ResourceRequirements,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::api::{ApiError, Lane, once_in, with_retry_in};
use super::connect::ClusterClient;
use super::error::KubeError;
use crate::domain::audit::Budget;
use crate::domain::surge::{
    ANNOTATION_EVENT, ANNOTATION_EVICT_BY, ANNOTATION_EXPIRES, ANNOTATION_NODE, ANNOTATION_POD,
    ANNOTATION_POD_UID, ANNOTATION_SAFE_TO_EVICT, CHECK_EVERY, Due, LABEL_CORDONED,
    LABEL_PLACEHOLDER, LABEL_PLACEHOLDER_NODE, MAX_PODS, NAMESPACE, PLACEHOLDER_IMAGE,
    PRIORITY_CLASS, Placeholder, RoomSeen, RoomWait, STEP_BUDGET, due, latest_safe,
    node_label_value, placeholder_name,
};

/// A drain's surge: for which event and node, until when.
#[derive(Debug, Clone)]
pub(crate) struct SurgeSettings {
    pub event_id: String,
    pub deadline: DateTime<Utc>,
    /// The doomed Node's uid, read in this pass: the placeholders' owner.
    pub node_uid: Option<String>,
    /// Placeholders created at once (the drain's eviction parallelism).
    pub parallelism: usize,
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

    /// The pod of `uid` waits for room until `latest` (its placeholder is there).
    fn wait(&mut self, uid: &str, latest: DateTime<Utc>, now: DateTime<Utc>) {
        self.waiting.insert(uid.to_string());
        self.holding = self.holding.saturating_add(1);
        self.evict_by = Some(self.evict_by.map_or(latest, |e| e.min(latest)));
        let next = latest.min(now + CHECK_EVERY);
        self.next = Some(self.next.map_or(next, |n| n.min(next)));
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

/// Whether `pod` is one of forewarn's placeholders (see
/// [`crate::domain::surge::is_placeholder`]: namespace, name and class together).
pub(crate) fn is_placeholder(pod: &Pod) -> bool {
    crate::domain::surge::is_placeholder(
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
        pod.spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref()),
        annotation(pod, ANNOTATION_POD_UID),
    )
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The namespace of the pod a placeholder holds room for (from [`ANNOTATION_POD`]).
fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// A placeholder to make: for which pod (uid, namespace), until when it waits.
struct Making {
    uid: String,
    namespace: String,
    latest: DateTime<Utc>,
    placeholder: Pod,
}

/// One surge pass of a drain of `node`: lists the node's placeholders, deletes those whose pod
/// is gone, creates those missing for the pods to evict (`to_evict`, a controller's, not past
/// their latest safe time), and says which of them wait for room. `listed` is every pod on the
/// node (the terminating ones included). Never fails: what the API does not do costs the room
/// it would have held (see the module documentation).
pub(crate) async fn surge_pass(
    clients: &ClusterClient,
    node: &str,
    settings: &SurgeSettings,
    listed: &[Pod],
    to_evict: &[&Pod],
) -> SurgePass {
    let now = clients.clock().now();
    // The whole step's requests (budgets, list, deletes, creates) end by then.
    let end = now + STEP_BUDGET;
    let clock = clients.clock();
    let mut pass = SurgePass::default();
    let mut by_pod: BTreeMap<String, Pod> = BTreeMap::new();
    let surging: Vec<(&Pod, &str)> = to_evict
        .iter()
        .filter(|pod| controller(pod).is_some() && !is_placeholder(pod))
        .filter_map(|pod| Some((*pod, pod.metadata.uid.as_deref()?)))
        .take(MAX_PODS)
        .collect();
    let mut rounds = earlier_rounds(to_evict);
    if settings.first {
        let budgets = crate::ports::until(
            clock,
            end,
            budget_rounds(clients, &settings.memory, &surging),
        );
        for (uid, r) in budgets.await.unwrap_or_default() {
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
        // Not listed (a failure, or no answer within the budget): which placeholders run is
        // not known in this pass; each is asked for again (one there answers AlreadyExists,
        // and its pod waits on).
        match crate::ports::until(clock, end, of_node(clients, node)).await {
            Some(Ok(found)) => found,
            Some(Err(e)) => {
                tracing::warn!(error = %e, node, "placeholders not listed: this pass makes them again");
                Vec::new()
            }
            None => {
                tracing::warn!(
                    node,
                    "placeholders not listed within the step's budget: this pass makes them again"
                );
                Vec::new()
            }
        }
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
        } else if crate::ports::until(clock, end, delete_logged(clients, &ph))
            .await
            .unwrap_or(false)
        {
            pass.deleted += 1;
        }
    }
    let mut making: Vec<Making> = Vec::new();
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
        let Due::Later(latest) = due(now, latest, state) else {
            continue;
        };
        if state != Placeholder::Missing {
            pass.wait(uid, latest, now);
            continue;
        }
        let namespace = pod_namespace(pod);
        if settings.memory.refuses(namespace, now) {
            // Refused lately: no room can be asked for this pod, waiting would gain nothing.
            tracing::debug!(
                namespace,
                "placeholders refused for this namespace lately: not asked again"
            );
            continue;
        }
        making.push(Making {
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            latest,
            placeholder: placeholder_for(pod, node, settings, latest),
        });
    }
    for (made, created) in create_all(clients, settings, making, end).await {
        match created {
            Created::New => pass.created += 1,
            Created::Exists => {}
            // Not made: its pod is evicted in this pass, as without surge.
            Created::Not => continue,
        }
        pass.wait(&made.uid, made.latest, now);
        by_pod.insert(made.uid, made.placeholder);
    }
    pass.listed = by_pod.into_values().collect();
    pass
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
/// namespaces whose pods' placeholders the API did not make, until when (see [`REFUSED_KEPT`]).
#[derive(Debug, Default)]
pub(crate) struct SurgeMemory {
    budgets: tokio::sync::Mutex<KeptBudgets>,
    refused: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
}

/// How long the pods of a namespace whose placeholder the API did not make (any answer but
/// AlreadyExists) get no other one asked for. The cause is seldom one pod's: no grant to create
/// pods in forewarn's namespace (a cluster before 1.30, where `forewarn deploy` applies no
/// placeholder grant), a Pod Security level or admission policy that refuses what the
/// namespace's pods copy into their placeholders, an admission webhook that is down. Asking
/// again for each pod of a mass interruption would cost the API server one request and the log
/// one warning per pod, for nothing. (A create that got no answer within the step's budget is
/// not remembered: the wait may be this environment's own rate limit.)
const REFUSED_KEPT: chrono::Duration = chrono::Duration::seconds(60);

impl SurgeMemory {
    /// Whether placeholders in `namespace` were refused less than [`REFUSED_KEPT`] before `now`.
    fn refuses(&self, namespace: &str, now: DateTime<Utc>) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.get(namespace).is_some_and(|until| now < *until)
    }

    /// A placeholder for a pod of `namespace` was not made at `now`.
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
) -> BTreeMap<String, usize> {
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
        let client = match clients.client().await {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "budgets not read: this pass's placeholders wait without their rounds");
                break;
            }
        };
        let api: Api<PodDisruptionBudget> = Api::namespaced(client, ns);
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
    pods.iter()
        .filter(|(pod, _)| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            serial.iter().any(|b| b.selects(ns, &labels))
        })
        .map(|(_, uid)| (uid.to_string(), 1))
        .collect()
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
    let pod_ns = pod_namespace(pod).to_string();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (LABEL_PLACEHOLDER.to_string(), "true".to_string()),
        (LABEL_PLACEHOLDER_NODE.to_string(), node_label_value(node)),
    ]);
    let annotations = BTreeMap::from([
        (ANNOTATION_NODE.to_string(), node.to_string()),
        (ANNOTATION_POD.to_string(), format!("{pod_ns}/{pod_name}")),
        (ANNOTATION_POD_UID.to_string(), uid.clone()),
        (ANNOTATION_EVENT.to_string(), settings.event_id.clone()),
        (
            ANNOTATION_EXPIRES.to_string(),
            settings.deadline.to_rfc3339(),
        ),
        (ANNOTATION_EVICT_BY.to_string(), evict_by.to_rfc3339()),
        (ANNOTATION_SAFE_TO_EVICT.to_string(), "true".to_string()),
    ]);
    let owner = settings.node_uid.as_ref().map(|node_uid| OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.to_string(),
        uid: node_uid.clone(),
        ..OwnerReference::default()
    });
    let requests = effective_requests(&spec);
    Pod {
        metadata: ObjectMeta {
            name: Some(placeholder_name(&uid)),
            namespace: Some(NAMESPACE.into()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
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
            affinity: Some(off_node(spec.affinity.clone(), node, &pod_ns)),
            tolerations: spec.tolerations.clone(),
            priority_class_name: Some(PRIORITY_CLASS.into()),
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// `affinity` (of a pod of namespace `pod_ns`) for its placeholder: with required terms that
/// keep it off `node` and off every node forewarn cordoned (added to every required term: the
/// terms are ORed; a toleration of the cordon copied from the pod cannot let it land on a
/// doomed node), and its pod (anti-)affinity terms that meant the pod's own namespace (no
/// `namespaces`, no `namespaceSelector`) naming it, so that the scheduler reads them in
/// forewarn's namespace as it reads the pod's.
fn off_node(affinity: Option<Affinity>, node: &str, pod_ns: &str) -> Affinity {
    let not_here = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "NotIn".into(),
        values: Some(vec![node.to_string()]),
    };
    let not_cordoned = NodeSelectorRequirement {
        key: LABEL_CORDONED.into(),
        operator: "DoesNotExist".into(),
        values: None,
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
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(not_cordoned.clone());
    }
    let own_namespace = |term: &mut PodAffinityTerm| {
        if term.namespaces.as_ref().is_none_or(Vec::is_empty) && term.namespace_selector.is_none() {
            term.namespaces = Some(vec![pod_ns.to_string()]);
        }
    };
    if let Some(a) = affinity.pod_affinity.as_mut() {
        a.required_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten()
            .for_each(own_namespace);
        a.preferred_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten()
            .for_each(|w| own_namespace(&mut w.pod_affinity_term));
    }
    if let Some(a) = affinity.pod_anti_affinity.as_mut() {
        a.required_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten()
            .for_each(own_namespace);
        a.preferred_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten()
            .for_each(|w| own_namespace(&mut w.pod_affinity_term));
    }
    affinity
}

/// What a pod requests, per resource: the larger of its containers' sum and its largest init
/// container's request (as the scheduler counts it); a sum past what a quantity can say stays
/// at the largest (never an overflow).
fn effective_requests(spec: &PodSpec) -> BTreeMap<String, Quantity> {
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    for c in &spec.containers {
        for (name, q) in c.resources.iter().flat_map(|r| r.requests.iter().flatten()) {
            if let Some(milli) = milli(&q.0) {
                let e = sum.entry(name.clone()).or_default();
                *e = e.saturating_add(milli);
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

/// The placeholders made for `node`'s pods (one list in forewarn's namespace, by label; only
/// pods that are placeholders by name and class).
pub(crate) async fn of_node(clients: &ClusterClient, node: &str) -> Result<Vec<Pod>, KubeError> {
    let selector = format!(
        "{LABEL_PLACEHOLDER}=true,{LABEL_PLACEHOLDER_NODE}={}",
        node_label_value(node)
    );
    let found = list(
        clients,
        Some(&selector),
        &format!("placeholders of node/{node}"),
    )
    .await?;
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
    for ph in list(clients, Some(&selector), &what).await? {
        let Some(node) = annotation(&ph, ANNOTATION_NODE) else {
            continue;
        };
        if let Some(s) = seen.get_mut(node) {
            s.placeholders = s.placeholders.saturating_add(1);
            s.running = s
                .running
                .saturating_add(u32::from(running_elsewhere(&ph, node)));
        }
    }
    Ok(seen)
}

/// The placeholders of forewarn's namespace (with `selector`, an index), by name and class.
async fn list(
    clients: &ClusterClient,
    selector: Option<&str>,
    what: &str,
) -> Result<Vec<Pod>, KubeError> {
    let pods: Api<Pod> = Api::namespaced(clients.client().await?, NAMESPACE);
    let params = match selector {
        Some(s) => ListParams::default().labels(s),
        None => ListParams::default(),
    };
    let list = with_retry_in(clients.clock(), Lane::Later, "list", what, || {
        pods.list(&params)
    })
    .await?;
    Ok(list.items.into_iter().filter(is_placeholder).collect())
}

/// What became of a placeholder's create.
enum Created {
    New,
    Exists,
    /// Not made (refused, failed, or not answered within the step's budget); logged. Its pod
    /// is drained as without surge.
    Not,
}

/// Creates the placeholders of `making` (at most `settings.parallelism` at once) by `end` (the
/// step's budget); answers what became of each. One that no answer came for by then is
/// [`Created::Not`].
async fn create_all(
    clients: &ClusterClient,
    settings: &SurgeSettings,
    making: Vec<Making>,
    end: DateTime<Utc>,
) -> Vec<(Making, Created)> {
    if making.is_empty() {
        return Vec::new();
    }
    let mut answered: BTreeMap<usize, Created> = BTreeMap::new();
    // The futures made first (a stream mapping borrowed items would not be `Send` for every
    // lifetime, as the executor's futures must be).
    let creates: Vec<_> = making
        .iter()
        .enumerate()
        .map(|(i, m)| async move { (i, create(clients, &settings.memory, m).await) })
        .collect();
    let work = futures::stream::iter(creates)
        .buffer_unordered(settings.parallelism.max(1))
        .for_each(|(i, created)| {
            answered.insert(i, created);
            std::future::ready(())
        });
    if crate::ports::until(clients.clock(), end, work)
        .await
        .is_none()
    {
        tracing::warn!(
            asked = making.len(),
            answered = answered.len(),
            "placeholders not all made within the step's budget: the other pods are evicted as without surge"
        );
    }
    making
        .into_iter()
        .enumerate()
        .map(|(i, m)| (m, answered.remove(&i).unwrap_or(Created::Not)))
        .collect()
}

/// Creates one placeholder, once: any answer but success and AlreadyExists (409) — a refusal
/// (403, 400, 422: a Pod Security level, an admission policy or webhook), a failure (500, an
/// admission webhook that is down, a timeout) — leaves its pod drained as without surge, and
/// its pod's namespace asks for no other placeholder for a minute ([`REFUSED_KEPT`]).
async fn create(clients: &ClusterClient, memory: &SurgeMemory, m: &Making) -> Created {
    let name = m.placeholder.metadata.name.as_deref().unwrap_or_default();
    let object = format!("pod/{NAMESPACE}/{name}");
    let client = match clients.client().await {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(error = %e, "placeholder not made: no client");
            return Created::Not;
        }
    };
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let params = PostParams::default();
    let answer = once_in(
        clients.clock(),
        Lane::Later,
        "create",
        &object,
        pods.create(&params, &m.placeholder),
    )
    .await;
    match answer {
        Ok(_) => Created::New,
        Err(e) if e.is_conflict() => Created::Exists,
        Err(e) => {
            memory.refused_at(&m.namespace, clients.clock().now());
            tracing::warn!(error = %e, namespace = %m.namespace,
                "placeholder not made: its pod, and its namespace's for a minute, are evicted without waiting for room");
            Created::Not
        }
    }
}

/// Deletes placeholder `ph` at once (grace 0); gone already is fine.
pub(crate) async fn delete(clients: &ClusterClient, ph: &Pod) -> Result<(), KubeError> {
    let name = ph.metadata.name.as_deref().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(clients.client().await?, NAMESPACE);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let object = format!("pod/{NAMESPACE}/{name}");
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

/// [`delete`], a failure logged (the sweeper deletes what a drain left, and the garbage
/// collector what its Node leaves): whether it is gone.
pub(crate) async fn delete_logged(clients: &ClusterClient, ph: &Pod) -> bool {
    match delete(clients, ph).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "placeholder not deleted: the sweeper deletes it once it expires");
            false
        }
    }
}

/// Deletes every placeholder of `node` (a drain that ended); answers how many went.
pub(crate) async fn delete_of_node(clients: &ClusterClient, node: &str) -> usize {
    let found = match of_node(clients, node).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, node, "placeholders not listed: the sweeper deletes them once they expire");
            return 0;
        }
    };
    let mut gone = 0;
    for ph in &found {
        gone += usize::from(delete_logged(clients, ph).await);
    }
    gone
}

/// Deletes the placeholders of forewarn's namespace that expired before `now` (the sweeper's
/// clean-up: a placeholder never outlives its event by more than a sweep); answers their
/// `namespace/name`. Every one is tried: a delete that fails does not stop the others, and the
/// failures are answered after them (an error naming how many). `dry_run`: deletes nothing,
/// answers the same.
pub(crate) async fn delete_expired(
    clients: &ClusterClient,
    now: DateTime<Utc>,
    dry_run: bool,
) -> Result<Vec<String>, KubeError> {
    let all = list(clients, None, "placeholders").await?;
    let mut gone = Vec::new();
    let mut failed: Vec<KubeError> = Vec::new();
    for ph in all {
        let expired = annotation(&ph, ANNOTATION_EXPIRES)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            // A placeholder without a readable expiry is forewarn's and of no use: it goes too.
            .is_none_or(|t| t.with_timezone(&Utc) < now);
        if !expired {
            continue;
        }
        if !dry_run && let Err(e) = delete(clients, &ph).await {
            tracing::error!(error = %e, "expired placeholder not deleted");
            failed.push(e);
            continue;
        }
        gone.push(format!(
            "{NAMESPACE}/{}",
            ph.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    let tried = gone.len() + failed.len();
    match failed.into_iter().next() {
        None => Ok(gone),
        Some(first) => Err(KubeError::Partly {
            failed: tried - gone.len(),
            tried,
            first: Box::new(first),
        }),
    }
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
            node_uid: Some("node-uid-1".into()),
            parallelism: 4,
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
                    ]}},
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "web"}},
                             "topologyKey": "kubernetes.io/hostname"},
                            {"labelSelector": {"matchLabels": {"app": "db"}},
                             "topologyKey": "kubernetes.io/hostname", "namespaces": ["data"]}
                        ],
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 10, "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "cache"}},
                                "topologyKey": "topology.kubernetes.io/zone",
                                "namespaceSelector": {}}}
                        ]
                    },
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "redis"}},
                         "topologyKey": "kubernetes.io/hostname"}
                    ]}},
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
        assert_eq!(
            v["metadata"]["namespace"], NAMESPACE,
            "never the pod's namespace"
        );
        assert!(is_placeholder(&ph));
        assert_eq!(
            v["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "doomed", "uid": "node-uid-1"}]),
            "the garbage collector removes it with its node"
        );
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_SAFE_TO_EVICT],
            "true"
        );
        let labels: Vec<&String> = v["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(labels, crate::domain::surge::PLACEHOLDER_LABELS);
        let annotations: BTreeSet<&str> = v["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            annotations,
            BTreeSet::from(crate::domain::surge::PLACEHOLDER_ANNOTATIONS)
        );
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
            let exprs = term["matchExpressions"].as_array().unwrap();
            assert_eq!(exprs.len(), 2, "its own and forewarn's");
            assert_eq!(
                exprs[1],
                json!({"key": LABEL_CORDONED, "operator": "DoesNotExist"}),
                "never on a node forewarn cordoned, whatever it tolerates"
            );
        }
        // Pod (anti-)affinity that meant the pod's own namespace names it; a term naming its
        // namespaces or selecting them is kept as it is.
        let anti = &spec["affinity"]["podAntiAffinity"];
        let required = &anti["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(required[0]["namespaces"], json!(["shop"]));
        assert_eq!(required[1]["namespaces"], json!(["data"]));
        let preferred = &anti["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert!(preferred["podAffinityTerm"].get("namespaces").is_none());
        assert_eq!(
            spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"],
            json!(["shop"])
        );
        // Without an affinity of its own: one term keeping it off the node.
        let bare =
            pod(json!({"metadata": {"name": "x", "uid": "u-2"}, "spec": {"containers": []}}));
        let v =
            serde_json::to_value(placeholder_for(&bare, "doomed", &settings(), evict_by)).unwrap();
        assert_eq!(
            v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["doomed"]}],
                    "matchExpressions": [{"key": LABEL_CORDONED, "operator": "DoesNotExist"}]}])
        );
    }

    mod arbitrary {
        //! Whatever a tenant writes in a pod spec (the API server checks little: a grace period
        //! is any int64 at or above 0, a quantity any string that parses, affinities and
        //! tolerations as they come), planning its surge and drain does not panic.
        use super::*;
        use proptest::prelude::*;

        fn quantity() -> impl Strategy<Value = String> {
            prop_oneof![
                "[0-9]{1,40}(m|k|M|G|E|Ki|Mi|Gi|Ei|e[0-9]{1,3}|E-[0-9]{1,2})?",
                "[0-9]{0,5}\\.[0-9]{0,5}(m|Ki)?",
                ".{0,12}",
            ]
        }

        fn requests() -> impl Strategy<Value = serde_json::Map<String, serde_json::Value>> {
            proptest::collection::btree_map("(cpu|memory|nvidia.com/gpu|pods)", quantity(), 0..4)
                .prop_map(|m| m.into_iter().map(|(k, v)| (k, json!(v))).collect())
        }

        fn owner() -> impl Strategy<Value = serde_json::Value> {
            (
                "(ReplicaSet|StatefulSet|DaemonSet|Job|Node|[A-Za-z]{0,8})",
                "[a-z0-9-]{0,12}",
                proptest::option::of(any::<bool>()),
            )
                .prop_map(|(kind, name, controller)| {
                    json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "o",
                           "controller": controller})
                })
        }

        fn toleration() -> impl Strategy<Value = serde_json::Value> {
            (
                proptest::option::of("[a-z./-]{0,20}"),
                proptest::option::of("(Exists|Equal|[A-Za-z]{0,6})"),
                proptest::option::of(any::<i64>()),
            )
                .prop_map(|(key, operator, seconds)| {
                    json!({"key": key, "operator": operator, "effect": "NoExecute",
                           "tolerationSeconds": seconds})
                })
        }

        fn term() -> impl Strategy<Value = serde_json::Value> {
            (
                proptest::option::of(proptest::collection::vec("[a-z-]{0,8}", 0..3)),
                any::<bool>(),
            )
                .prop_map(|(namespaces, selector)| {
                    let mut t = json!({"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": {"app": "x"}}});
                    if let Some(ns) = namespaces {
                        t["namespaces"] = json!(ns);
                    }
                    if selector {
                        t["namespaceSelector"] = json!({});
                    }
                    t
                })
        }

        fn affinity() -> impl Strategy<Value = serde_json::Value> {
            (
                proptest::collection::vec(
                    proptest::collection::vec(("[a-z./-]{0,12}", "(In|NotIn|Exists|Gt)"), 0..3),
                    0..3,
                ),
                proptest::collection::vec(term(), 0..3),
                proptest::collection::vec((any::<i32>(), term()), 0..3),
            )
                .prop_map(|(node_terms, required, preferred)| {
                    let node_terms: Vec<_> = node_terms
                        .into_iter()
                        .map(|exprs| {
                            let exprs: Vec<_> = exprs
                                .into_iter()
                                .map(|(k, op)| json!({"key": k, "operator": op, "values": ["v"]}))
                                .collect();
                            json!({"matchExpressions": exprs})
                        })
                        .collect();
                    let preferred: Vec<_> = preferred
                        .into_iter()
                        .map(|(w, t)| json!({"weight": w, "podAffinityTerm": t}))
                        .collect();
                    json!({
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                            {"nodeSelectorTerms": node_terms}},
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": required.clone(),
                            "preferredDuringSchedulingIgnoredDuringExecution": preferred},
                        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
                    })
                })
        }

        prop_compose! {
            fn any_pod()(
                name in "[a-z0-9.-]{0,30}",
                namespace in proptest::option::of("[a-z0-9-]{0,20}"),
                uid in proptest::option::of("[a-z0-9-]{0,12}"),
                grace in proptest::option::of(any::<i64>()),
                containers in proptest::collection::vec(requests(), 0..4),
                inits in proptest::collection::vec(requests(), 0..3),
                owners in proptest::collection::vec(owner(), 0..3),
                tolerations in proptest::collection::vec(toleration(), 0..3),
                affinity in proptest::option::of(affinity()),
                class in proptest::option::of("(forewarn-placeholder|system-node-critical|x)"),
            ) -> Pod {
                let containers: Vec<_> = containers
                    .into_iter()
                    .map(|r| json!({"name": "c", "resources": {"requests": r}}))
                    .collect();
                let inits: Vec<_> = inits
                    .into_iter()
                    .map(|r| json!({"name": "i", "resources": {"requests": r}}))
                    .collect();
                let annotations = match &uid {
                    Some(uid) => json!({ANNOTATION_POD_UID: uid}),
                    None => json!({}),
                };
                pod(json!({
                    "metadata": {"name": name, "namespace": namespace, "uid": uid,
                                 "ownerReferences": owners, "annotations": annotations},
                    "spec": {"containers": containers, "initContainers": inits,
                             "terminationGracePeriodSeconds": grace,
                             "tolerations": tolerations, "affinity": affinity,
                             "priorityClassName": class}
                }))
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]
            #[test]
            fn any_pod_spec_plans_its_surge_and_drain_without_panicking(
                pods in proptest::collection::vec(any_pod(), 0..10),
                secs in proptest::num::i64::ANY,
                now_before in 0i64..100_000,
            ) {
                let secs = secs.clamp(
                    DateTime::<Utc>::MIN_UTC.timestamp(),
                    DateTime::<Utc>::MAX_UTC.timestamp(),
                );
                let deadline = DateTime::<Utc>::from_timestamp(secs, 0).unwrap();
                let now = deadline
                    .checked_sub_signed(chrono::Duration::seconds(now_before))
                    .unwrap_or(deadline);
                let settings = SurgeSettings { deadline, ..settings() };
                let refs: Vec<&Pod> = pods.iter().collect();
                let rounds = earlier_rounds(&refs);
                for pod in &pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
                    let latest = latest_safe(deadline, grace, rounds.get(&uid).copied().unwrap_or(0));
                    prop_assert!(latest <= deadline);
                    let _ = due(now, latest, Placeholder::Pending);
                    let _ = crate::adapters::kube::drain::fitted_grace(grace, Some(deadline), now);
                    let ph = placeholder_for(pod, "doomed", &settings, latest);
                    prop_assert_eq!(ph.metadata.namespace.as_deref(), Some(NAMESPACE));
                    prop_assert_eq!(is_placeholder(&ph), !uid.is_empty());
                    let v = serde_json::to_value(&ph).unwrap();
                    let back: Pod = serde_json::from_value(v).unwrap();
                    prop_assert_eq!(back.metadata.name, ph.metadata.name);
                    // A tenant's pod is a placeholder only in forewarn's namespace.
                    if pod.metadata.namespace.as_deref() != Some(NAMESPACE) {
                        prop_assert!(!is_placeholder(pod));
                    }
                }
            }
        }
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
