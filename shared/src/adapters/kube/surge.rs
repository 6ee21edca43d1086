//! Placeholders (see [`crate::domain::surge`]): made from the pods of a doomed node, listed,
//! created and deleted through the API; and the pass of a drain that decides which pods wait
//! for room ([`KubeExecutor::surge_pass`]), with what it knows beyond the node's pods: the
//! budgets' rounds a pod must leave time for ([`budget_rounds`], listed once a minute per
//! namespace), the order of a controller's pods ([`earlier_rounds`]), and the namespaces whose
//! placeholders the API did not make lately — what one execution environment's drains remember
//! from one pass to the next ([`SurgeMemory`]).
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
//! answer but AlreadyExists or 429, or none within [`STEP_BUDGET`]) is evicted at once, as
//! without surge, and a refusal keeps its pod's namespace from asking again for a minute. A
//! create that the server throttled (429) or that forewarn's own rate limit still held when the
//! step's time was up never reached a placeholder's admission: its pod waits (at the latest to
//! its safe time) and the next pass asks again; the server's `Retry-After` holds back every
//! request of the client's rate limit, as it does after any call.

use std::collections::{BTreeMap, BTreeSet};

use ::kube::api::{DeleteParams, ListParams, PostParams};
use ::kube::core::{Selector, SelectorExt};
use ::kube::{Api, ResourceExt};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};

use super::api::retry::{heed_retry_after, with_retry};
use super::connect::ClusterClient;
use super::error::{ApiError, KubeError, status_code};
use super::executor::{BUDGETS_KEPT, EVICTIONS_AT_ONCE, KubeExecutor, SurgeMemory};
use super::outcome::DrainReport;
use super::placeholder::placeholder_for;
use crate::domain::admission::{RefusedBy, is_refusal, refused_by};
use crate::domain::surge::{
    ANNOTATION_EVICT_BY, ANNOTATION_NODE, ANNOTATION_POD_UID, LABEL_PLACEHOLDER,
    LABEL_PLACEHOLDER_NODE, MAX_PODS, NAMESPACE, PRIORITY_CLASS, RoomSeen, RoomWait, STEP_BUDGET,
    due, latest_safe, node_label_value, placeholder_name,
};
use crate::ports::until;

/// What a drain pass's surge decided.
#[derive(Debug, Default)]
pub(crate) struct SurgePass {
    /// The uids of the pods that wait for room (not evicted in this pass), each with a
    /// placeholder holding room for it, and its latest safe time.
    pub waiting: BTreeMap<String, DateTime<Utc>>,
    /// The node's placeholders as listed (to delete when the drain ends).
    pub listed: Vec<Pod>,
}

impl SurgePass {
    /// What the drain waits for when it waits only for room: the earliest latest safe time of
    /// the waiting pods (at most `deadline`), and the placeholders holding room for them; its
    /// [`RoomWait::next_look`] is when to look again (sooner, to see placeholders run).
    pub(crate) fn room(&self, deadline: DateTime<Utc>) -> Option<RoomWait> {
        Some(RoomWait {
            until: (*self.waiting.values().min()?).min(deadline),
            placeholders: u32::try_from(self.waiting.len()).unwrap_or(u32::MAX),
        })
    }
}

/// Whether `pod` is one of forewarn's placeholders, from its namespace, name and PriorityClass
/// and the pod uid it carries ([`ANNOTATION_POD_UID`]): in forewarn's namespace, named
/// [`placeholder_name`] of that uid, of the PriorityClass [`PRIORITY_CLASS`], all together.
/// Never by a label: a tenant's pod labelled as a placeholder is not one, and forewarn never
/// deletes it. (Only forewarn's groups may create pods in its namespace, and the admission
/// policy lets them create placeholders only.)
pub(crate) fn is_placeholder(pod: &Pod) -> bool {
    let class = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref());
    pod.metadata.namespace.as_deref() == Some(NAMESPACE)
        && class == Some(PRIORITY_CLASS)
        && annotation(pod, ANNOTATION_POD_UID).is_some_and(|uid| {
            !uid.is_empty() && pod.metadata.name.as_ref() == Some(&placeholder_name(uid))
        })
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.annotations().get(key).map(String::as_str)
}

/// The time (RFC 3339) annotation `key` of `pod` says, if it says one.
pub(crate) fn annotated_time(pod: &Pod, key: &str) -> Option<DateTime<Utc>> {
    annotation(pod, key)?.parse().ok()
}

/// A placeholder to make: for which pod (uid, namespace), until when it waits.
struct Making {
    uid: String,
    namespace: String,
    latest: DateTime<Utc>,
    placeholder: Pod,
}

impl KubeExecutor {
    /// One surge pass of a drain of `node` (its name and uid, the placeholders' owner, as read in
    /// this pass) for event `event_id`, whose drain ends by `deadline`: lists the node's
    /// placeholders, deletes those whose pod is gone, creates those missing for the pods to evict
    /// (`to_evict`, a controller's, not past their latest safe time), and says which of them wait
    /// for room. `first`: the drain's first pass, where no placeholder was made yet, so none is
    /// listed (a duplicate chain's create answers 409, and the next pass lists them). `listed` is
    /// every pod on the node (the terminating ones included). The placeholders created, deleted and
    /// refused (and the refusals first reported) are counted in `report`. Never fails: what the API
    /// does not do costs the room it would have held (see the module documentation).
    pub(super) async fn surge_pass(
        &self,
        (event_id, deadline, first): (&str, DateTime<Utc>, bool),
        (node, node_uid): (&str, Option<&str>),
        (listed, to_evict): (&[Pod], &[&Pod]),
        report: &mut DrainReport,
    ) -> SurgePass {
        let (clients, memory) = (&self.clients, &self.surge_memory);
        let now = clients.clock().now();
        // The whole step's requests (budgets, list, deletes, creates) end by then.
        let end = now + STEP_BUDGET;
        let mut pass = SurgePass::default();
        let surging: Vec<(&Pod, &str)> = to_evict
            .iter()
            .filter(|pod| controller(pod).is_some() && !is_placeholder(pod))
            .filter_map(|pod| Some((*pod, pod.metadata.uid.as_deref()?)))
            .take(MAX_PODS)
            .collect();
        // Per pod uid, the earlier rounds of its budget: its controller's pods before it on the node,
        // and, in a drain's first pass, one when a budget (listed by `end`) selects it that cannot
        // let all of its pods go at once.
        let mut rounds = earlier_rounds(to_evict);
        if first {
            let budgets = budget_rounds(clients, memory, &surging);
            let budgets = until(clients.clock(), end, budgets).await;
            for uid in budgets.unwrap_or_default() {
                let r = rounds.entry(uid).or_default();
                *r = (*r).max(1);
            }
        }
        let latest_of = |pod: &Pod, uid: &str| {
            let grace = (pod.spec.as_ref()).and_then(|s| s.termination_grace_period_seconds);
            latest_safe(deadline, grace, rounds.get(uid).copied().unwrap_or(0))
        };
        // Every pod is due by its time: what its placeholder does changes nothing now (the next
        // pass lists them, and deletes those whose pod is gone).
        let all_due =
            !surging.is_empty() && surging.iter().all(|(pod, uid)| now >= latest_of(pod, uid));
        let mut by_pod = match first || all_due {
            true => BTreeMap::new(),
            false => kept_placeholders(clients, node, listed, end, report).await,
        };
        let mut making: Vec<Making> = Vec::new();
        for (pod, uid) in surging {
            // The time given when the placeholder was made, if earlier (its budget's rounds).
            let placeholder = by_pod.get(uid);
            let given = placeholder.and_then(|ph| annotated_time(ph, ANNOTATION_EVICT_BY));
            let own = latest_of(pod, uid);
            let latest = given.map_or(own, |g| g.min(own));
            let running = placeholder.is_some_and(|ph| running_elsewhere(ph, node));
            if due(now, latest, running) {
                continue;
            }
            if placeholder.is_some() {
                // Made, not running yet (waiting for room: the autoscaler's node).
                pass.waiting.insert(uid.to_string(), latest);
                continue;
            }
            let namespace = namespace(pod);
            if memory.refuses(namespace, now) {
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
                placeholder: placeholder_for(pod, (node, node_uid), event_id, deadline, latest),
            });
        }
        for (created, made) in self.create_all(making, end).await {
            match created {
                Created::New => report.placeholders_created += 1,
                // There, or not made yet: the next look finds it, or finds it missing and asks again.
                Created::Later => {}
                // Not made: its pod is evicted in this pass, as without surge.
                Created::Not => continue,
                // Not made either; counted, and reported (the log now, an Event on the node by
                // the drain) when it is the environment's first of that namespace and refusing
                // step.
                Created::Refused(by, message) => {
                    report.placeholders_refused += 1;
                    let namespace = &made.namespace;
                    if memory.first_report(namespace, &by) {
                        tracing::warn!(namespace, refused_by = %by, message = %message,
                            "placeholder refused by the API server: the pods of this namespace are evicted at once, without waiting for room (reported once per namespace and refusal; `forewarn check --kube` proves every write forewarn makes)");
                        (report.new_refusals).push(format!(
                            "placeholders for pods of namespace {namespace} refused by {by}: {message}"
                        ));
                    }
                    continue;
                }
            }
            pass.waiting.insert(made.uid.clone(), made.latest);
            by_pod.insert(made.uid, made.placeholder);
        }
        pass.listed = by_pod.into_values().collect();
        pass
    }
}

/// The node's placeholders whose pod is still there, by pod uid; those whose pod is gone are
/// deleted (counted in `report`). Not listed (a failure, or no answer by `end`): none — which
/// placeholders run is not known in this pass, and each is asked for again (one there answers
/// AlreadyExists, and its pod waits on).
async fn kept_placeholders(
    clients: &ClusterClient,
    node: &str,
    listed: &[Pod],
    end: DateTime<Utc>,
    report: &mut DrainReport,
) -> BTreeMap<String, Pod> {
    let clock = clients.clock();
    let nodes = [node.to_string()];
    let existing = match until(clock, end, of_nodes(clients, &nodes)).await {
        Some(Ok(found)) => found,
        failed => {
            let error = failed.and_then(Result::err).map(|e| e.to_string());
            let error = error.unwrap_or_else(|| "no answer within the step's budget".into());
            tracing::warn!(%error, node, "placeholders not listed: this pass makes them again");
            Vec::new()
        }
    };
    let (kept, gone): (Vec<Pod>, Vec<Pod>) = existing.into_iter().partition(|ph| {
        let uid = annotation(ph, ANNOTATION_POD_UID);
        uid.is_some() && listed.iter().any(|p| p.metadata.uid.as_deref() == uid)
    });
    let deleted = until(clock, end, delete_all(clients, &gone)).await;
    report.placeholders_deleted += deleted.map_or(0, |(gone, _)| gone);
    (kept.into_iter())
        .filter_map(|ph| Some((annotation(&ph, ANNOTATION_POD_UID)?.to_string(), ph)))
        .collect()
}

/// The placeholder runs on another node than the doomed one.
fn running_elsewhere(ph: &Pod, node: &str) -> bool {
    let on = ph.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let phase = ph.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some("Running") && on.is_some_and(|n| n != node)
}

/// The placeholders made for the pods of `nodes` (one list in forewarn's namespace, by label,
/// whatever the number of nodes; only pods that are placeholders by name and class, of one of
/// `nodes` by their annotation).
pub(crate) async fn of_nodes(
    clients: &ClusterClient,
    nodes: &[String],
) -> Result<Vec<Pod>, KubeError> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let values: BTreeSet<String> = nodes.iter().map(|n| node_label_value(n)).collect();
    let values = values.into_iter().collect::<Vec<_>>().join(",");
    let selector = format!("{LABEL_PLACEHOLDER}=true,{LABEL_PLACEHOLDER_NODE} in ({values})");
    let what = format!("placeholders of node/{}", nodes.join(","));
    let found = list(clients, ListParams::default().labels(&selector), &what).await?;
    Ok(found
        .into_iter()
        .filter(|p| annotation(p, ANNOTATION_NODE).is_some_and(|n| nodes.iter().any(|m| m == n)))
        .collect())
}

/// The placeholders of `nodes` as one list sees them ([`of_nodes`]): per node asked, how many
/// and how many run elsewhere (`RoomSeen`; zero for a node with none).
pub(crate) async fn room_of(
    clients: &ClusterClient,
    nodes: &[String],
) -> Result<BTreeMap<String, RoomSeen>, KubeError> {
    let none = RoomSeen::default();
    let mut seen: BTreeMap<_, _> = nodes.iter().map(|n| (n.clone(), none)).collect();
    for ph in of_nodes(clients, nodes).await? {
        let node = annotation(&ph, ANNOTATION_NODE).unwrap_or_default();
        if let Some(s) = seen.get_mut(node) {
            s.placeholders += 1;
            s.running += u32::from(running_elsewhere(&ph, node));
        }
    }
    Ok(seen)
}

/// The placeholders of forewarn's namespace (listed with `params`: by a label, an index), by
/// name and class.
pub(crate) async fn list(
    clients: &ClusterClient,
    params: ListParams,
    what: &str,
) -> Result<Vec<Pod>, KubeError> {
    let pods: Api<Pod> = Api::namespaced(clients.client().await?, NAMESPACE);
    let list = with_retry(clients, "list", what, || pods.list(&params)).await?;
    Ok(list.items.into_iter().filter(is_placeholder).collect())
}

/// What became of a placeholder's create.
enum Created {
    New,
    /// There already (409), or not asked yet: throttled by the server (429), or still held by
    /// the client's rate limit when the step's time was up. Its pod waits; the next pass looks
    /// (and asks again).
    Later,
    /// Not made (failed, or sent and not answered in time); logged. Its pod is drained as
    /// without surge.
    Not,
    /// Refused by the API server (400, 403, 404, 422: RBAC, Pod Security, an admission policy
    /// or webhook): by which step, and its message. Its pod is drained as without surge.
    Refused(RefusedBy, String),
}

impl KubeExecutor {
    /// Creates the placeholders of `making` (at most [`EVICTIONS_AT_ONCE`] at once) by
    /// `end` (the step's budget, see [`create`]); answers what became of each, in the order of
    /// their pods' uids.
    async fn create_all(&self, making: Vec<Making>, end: DateTime<Utc>) -> Vec<(Created, Making)> {
        let (clients, memory) = (&self.clients, &self.surge_memory);
        let asked = making.len();
        // The futures made first (a stream mapping borrowed items would not be `Send` for every
        // lifetime, as the executor's futures must be).
        let creates: Vec<_> = (making.into_iter())
            .map(|m| async move { (create(clients, memory, &m, end).await, m) })
            .collect();
        let work = futures::stream::iter(creates).buffer_unordered(EVICTIONS_AT_ONCE);
        let mut answers: Vec<_> = work.collect().await;
        if clients.clock().now() >= end {
            tracing::warn!(
                asked,
                "placeholders not all made within the step's budget: those not sent are asked again by the next pass, the others' pods are evicted as without surge"
            );
        }
        answers.sort_by(|(_, a), (_, b)| a.uid.cmp(&b.uid));
        answers
    }
}

/// Creates one placeholder, once, by `end`: [`Created::Later`] while its request is not sent
/// (waiting for the client or its rate limit), [`Created::Not`] once it is and no answer came.
/// Any answer but success, AlreadyExists (409) and Too Many Requests (429; both [`Created::Later`])
/// — a refusal (400, 403, 404, 422: RBAC, a Pod Security level, an admission policy or webhook,
/// named in [`Created::Refused`]), a failure (500, an admission webhook that is down, a
/// timeout) — leaves its pod drained as without surge, and its pod's namespace asks for no
/// other placeholder for a minute ([`REFUSED_KEPT`]).
async fn create(
    clients: &ClusterClient,
    memory: &SurgeMemory,
    m: &Making,
    end: DateTime<Utc>,
) -> Created {
    let clock = clients.clock();
    if clock.now() >= end {
        return Created::Later;
    }
    let ready = async {
        let client = clients.client().await?;
        clients.throttle().await;
        Ok::<_, crate::ports::PortError>(client)
    };
    let client = match until(clock, end, ready).await {
        None => return Created::Later,
        Some(Ok(client)) => client,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "placeholder not made: no client");
            return Created::Not;
        }
    };
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    // One attempt, never retried: a failure is itself the answer (its pod is evicted at once).
    let params = PostParams::default();
    let created = pods.create(&params, &m.placeholder);
    let Some(created) = until(clock, end, created).await else {
        return Created::Not;
    };
    let now = clock.now();
    match created {
        Ok(_) => Created::New,
        // There already; or the server's rate limit (429): nothing was admitted or refused, and
        // its `Retry-After` holds back every request of the client's rate limit, as every other
        // call's does.
        Err(e) if matches!(status_code(&e), Some(409 | 429)) => {
            heed_retry_after(clients, &e);
            Created::Later
        }
        Err(::kube::Error::Api(s)) if is_refusal(s.code) => {
            memory.refused_at(&m.namespace, now);
            Created::Refused(refused_by(s.code, &s.reason, &s.message), s.message)
        }
        Err(e) => {
            memory.refused_at(&m.namespace, now);
            let object = format!("pod/{NAMESPACE}/{}", m.placeholder.name_any());
            let e = ApiError::new("create", object, e);
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
    let params = DeleteParams::default().grace_period(0);
    let object = format!("pod/{NAMESPACE}/{name}");
    let deleted = with_retry(clients, "delete", &object, || pods.delete(name, &params));
    match deleted.await {
        Err(e) if !e.is_not_found() => Err(e.into()),
        _ => Ok(()),
    }
}

/// Deletes every placeholder of `node` (a drain that ended); answers how many went.
pub(crate) async fn delete_of_node(clients: &ClusterClient, node: &str) -> usize {
    let found = of_nodes(clients, &[node.to_string()]).await;
    let found = found.unwrap_or_else(|e| {
        tracing::warn!(error = %e, node, "placeholders not listed: the sweeper deletes them once they expire");
        Vec::new()
    });
    delete_all(clients, &found).await.0
}

/// Deletes `placeholders`, each with [`delete`], every one tried; answers how many went, and
/// when any failed an error naming how many and the first. Each failure is logged (the sweeper
/// deletes what a drain left once it expires, and the garbage collector what its Node leaves).
pub(crate) async fn delete_all(
    clients: &ClusterClient,
    placeholders: &[Pod],
) -> (usize, Option<KubeError>) {
    let (mut failed, mut first) = (0, None);
    for ph in placeholders {
        if let Err(e) = delete(clients, ph).await {
            tracing::warn!(error = %e, "placeholder not deleted: the sweeper deletes it once it expires");
            failed += 1;
            first.get_or_insert(e);
        }
    }
    let tried = placeholders.len();
    let partly = first.map(|first| KubeError::Partly {
        failed,
        tried,
        first: Box::new(first),
    });
    (tried - failed, partly)
}

/// The namespace of `pod` (`default` when unset).
fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The controller of `pod` (kind, name), unless it has none or it is a DaemonSet.
pub(crate) fn controller(pod: &Pod) -> Option<(&str, &str)> {
    (pod.owner_references().iter())
        .find(|r| r.controller == Some(true) && r.kind != "DaemonSet")
        .map(|r| (r.kind.as_str(), r.name.as_str()))
}

/// The uids of `pods` (a drain's surging pods) that a budget selects which cannot let all of
/// its pods go at once (its status's `desiredHealthy` above 0, as the disruption controller
/// computes it: see [`crate::domain::surge`]): each one earlier round. One list of budgets per
/// namespace, kept a minute; a list the API refuses (an RBAC without the grant) counts no
/// round, and is logged; one that fails otherwise counts none in this pass only.
pub(crate) async fn budget_rounds(
    clients: &ClusterClient,
    memory: &SurgeMemory,
    pods: &[(&Pod, &str)],
) -> BTreeSet<String> {
    let namespaces: BTreeSet<&str> = pods.iter().map(|(p, _)| namespace(p)).collect();
    let mut uids = BTreeSet::new();
    let mut kept = memory.budgets.lock().await;
    for ns in namespaces {
        let now = clients.clock().now();
        if kept.get(ns).is_none_or(|(at, _)| now - *at >= BUDGETS_KEPT) {
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
            let listed = match with_retry(clients, "list", &what, || api.list(&params)).await {
                Ok(list) => list.items,
                Err(e) => {
                    tracing::warn!(error = %e, "budgets not read: placeholders wait without their rounds");
                    // The API server in trouble (not a refusal): nothing is kept, so the
                    // namespace's next drain lists again.
                    if !matches!(e.status, Some(401 | 403 | 404)) {
                        continue;
                    }
                    Vec::new()
                }
            };
            let in_rounds =
                |s: &PodDisruptionBudgetStatus| s.expected_pods > 0 && s.desired_healthy > 0;
            let selectors: Vec<Selector> = (listed.into_iter())
                .filter(|pdb| pdb.status.as_ref().is_some_and(in_rounds))
                .filter_map(|pdb| Selector::try_from(pdb.spec?.selector?).ok())
                .filter(|s| !s.selects_all())
                .collect();
            kept.insert(ns.to_string(), (now, selectors));
        }
        let selectors = kept.get(ns).map(|(_, s)| s.as_slice()).unwrap_or_default();
        let selected = pods.iter().filter(|(pod, _)| {
            namespace(pod) == ns && selectors.iter().any(|s| s.matches(pod.labels()))
        });
        uids.extend(selected.map(|(_, uid)| uid.to_string()));
    }
    uids
}

/// Per pod uid, how many pods of the same controller come before it on the node (name order):
/// the rounds of a budget that lets one go at a time (see [`crate::domain::surge`]).
pub(crate) fn earlier_rounds(pods: &[&Pod]) -> BTreeMap<String, usize> {
    // ((namespace, controller kind and name), pod name, uid) of each pod, in that order.
    let mut pods: Vec<_> = (pods.iter())
        .filter_map(|p| {
            let (ns, name) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref());
            let owner = (ns.unwrap_or_default(), controller(p)?);
            Some((owner, name.unwrap_or_default(), p.metadata.uid.as_deref()?))
        })
        .collect();
    pods.sort();
    // Its place in that order less that of its controller's first pod.
    let first_of = |owner| pods.partition_point(|(o, ..)| *o < owner);
    (pods.iter().enumerate())
        .map(|(i, (owner, _, uid))| (uid.to_string(), i - first_of(*owner)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_placeholder_is_known_by_namespace_name_and_class_together_never_by_label() {
        let name = placeholder_name("u-1");
        let ok = |ns: Option<&str>, name: &str, class: Option<&str>, uid: Option<&str>| {
            let annotations = uid.map(|uid| json!({ANNOTATION_POD_UID: uid}));
            is_placeholder(&pod(json!({
                "metadata": {"namespace": ns, "name": name, "annotations": annotations,
                             "labels": {LABEL_PLACEHOLDER: "true"}},
                "spec": {"containers": [], "priorityClassName": class},
            })))
        };
        assert!(ok(
            Some(NAMESPACE),
            &name,
            Some(PRIORITY_CLASS),
            Some("u-1")
        ));
        // A tenant's pod with forewarn's name, class, label and annotations, in its own namespace.
        assert!(!ok(Some("shop"), &name, Some(PRIORITY_CLASS), Some("u-1")));
        assert!(!ok(None, &name, Some(PRIORITY_CLASS), Some("u-1")));
        assert!(!ok(Some(NAMESPACE), &name, Some("default"), Some("u-1")));
        assert!(!ok(Some(NAMESPACE), &name, None, Some("u-1")));
        assert!(!ok(
            Some(NAMESPACE),
            &name,
            Some(PRIORITY_CLASS),
            Some("u-2")
        ));
        assert!(!ok(
            Some(NAMESPACE),
            "web-1",
            Some(PRIORITY_CLASS),
            Some("u-1")
        ));
        let unnamed = placeholder_name("");
        assert!(!ok(
            Some(NAMESPACE),
            &unnamed,
            Some(PRIORITY_CLASS),
            Some("")
        ));
        assert!(!ok(Some(NAMESPACE), &name, Some(PRIORITY_CLASS), None));
    }

    mod arbitrary {
        //! Whatever a tenant writes in a pod spec (the API server checks little: a grace period
        //! is any int64 at or above 0, a quantity any string that parses, affinities and
        //! tolerations as they come), planning its surge does not panic.
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
            fn any_pod_spec_plans_its_surge_without_panicking(
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
                let refs: Vec<&Pod> = pods.iter().collect();
                let rounds = earlier_rounds(&refs);
                for pod in &pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
                    let latest = latest_safe(deadline, grace, rounds.get(&uid).copied().unwrap_or(0));
                    prop_assert!(latest <= deadline);
                    let _ = due(now, latest, false);
                    let doomed = ("doomed", Some("node-uid-1"));
                    let ph = placeholder_for(pod, doomed, "ev-1", deadline, latest);
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
