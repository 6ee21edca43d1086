//! Drain: evict a node's pods through the `policy/v1` Eviction subresource, so
//! PodDisruptionBudgets are honoured, until the plan's deadline.
//!
//! - Pods are listed with `fieldSelector=spec.nodeName=<node>` (one `list` of pods).
//! - Left alone: pods owned by a DaemonSet (their controller ignores unschedulable and would put
//!   them back), mirror pods (the kubelet's static pods, annotation `kubernetes.io/config.mirror`;
//!   the API cannot remove them), pods that are over (`Succeeded`, `Failed`), and pods already
//!   terminating (waited for, not evicted again).
//! - Unlike `kubectl drain`, pods with local storage or without a controller are evicted too: the
//!   instance is going away with them anyway.
//! - Non-critical pods first; pods of priority class `system-cluster-critical` or
//!   `system-node-critical` after them (when there are some, the non-critical pods get three
//!   quarters of the time left, so a budget that never allows leaves time for the critical ones).
//! - Evictions run in parallel, at most [`EVICTIONS_AT_ONCE`] at once. 404: already gone. Any other
//!   answer is that pod's refusal, never the event's failure — 429 (a disruption budget, or API
//!   priority and fairness), 500 (several budgets select the pod), 409, 503/504 and transport
//!   errors — tried again in the next pass (in the same pass only after a `Retry-After`, the
//!   API server's rate limit); a pod still refused at the deadline is reported as left, with the
//!   last answer.
//! - Grace fitted to the notice: when the instance surely goes at the deadline (a spot or
//!   capacity reservation warning, a scheduled change with a start time), an eviction whose
//!   pod's `terminationGracePeriodSeconds` would outlast it asks for the seconds left
//!   (`deleteOptions.gracePeriodSeconds`, at least 1), so the pod object is gone before the
//!   instance and its StatefulSet can recreate it elsewhere.
//! - A drain is a series of passes ([`KubeExecutor::evictions`]), each a `list` and the evictions then due,
//!   never a wait: what is evicted or terminating is looked for again by the next pass, until
//!   the node is empty or the deadline has passed (see `crate::app::pipeline`'s drivers).

use super::api::retry::with_retry;
use super::error::{KubeError, error_text, retry_after, status_code};
use super::events::{EventType, Said};
use super::executor::{EVICTIONS_AT_ONCE, KubeExecutor};
use super::outcome::{DrainReport, LeftPod, NodeOutcome, SkippedPod};
use super::surge;
use crate::domain::plan::{NodeAction, Plan};
use crate::domain::surge::CHECK_EVERY;
use crate::ports::{DrainRole, Pass, span};
use ::kube::api::{ListParams, PostParams};
use ::kube::{Api, ResourceExt};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::OptionFuture;
use k8s_openapi::api::core::v1::{Node, Pod};

pub(crate) const ANNOTATION_MIRROR: &str = "kubernetes.io/config.mirror";
const CRITICAL_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The grace period to ask for a pod whose own is `own` seconds (`None`: Kubernetes' 30), when
/// it would outlast `until` at `now`: the whole seconds left, at least 1. `None`: its own.
pub(crate) fn fitted_grace(
    own: Option<i64>,
    until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<u32> {
    let left = (until? - now).num_seconds().max(1);
    (own.unwrap_or(30) > left).then(|| u32::try_from(left).unwrap_or(u32::MAX))
}

/// A pod of priority class `system-cluster-critical` or `system-node-critical`.
pub fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Disposition {
    Evict {
        critical: bool,
    },
    Skip(&'static str),
    /// Already terminating: waited for, not evicted again.
    Wait,
}

pub(crate) fn disposition(pod: &Pod) -> Disposition {
    let owners = pod.owner_references().iter();
    let daemon = owners
        .filter(|r| r.controller == Some(true))
        .any(|r| r.kind == "DaemonSet");
    // The first rule that holds, in order.
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        _ if pod.annotations().contains_key(ANNOTATION_MIRROR) => Disposition::Skip("mirror"),
        _ if daemon => Disposition::Skip("daemonset"),
        Some("Succeeded") => Disposition::Skip("succeeded"),
        Some("Failed") => Disposition::Skip("failed"),
        _ if pod.metadata.deletion_timestamp.is_some() => Disposition::Wait,
        _ => Disposition::Evict {
            critical: is_critical(pod),
        },
    }
}

fn pod_key(pod: &Pod) -> String {
    let (namespace, name) = super::api::ns_name(&pod.metadata);
    format!("{namespace}/{name}")
}

enum Eviction {
    Evicted,
    Gone,
    Refused(String),
}

/// How many times one eviction waits out the API server's `Retry-After` beyond its pass's
/// retries.
const RATE_LIMIT_RETRIES: u32 = 2;

/// The `policy/v1` Eviction of `namespace/name`, with `deleteOptions.gracePeriodSeconds` when
/// `grace` is given. (Written here: kube's `Api::evict` serializes its `EvictParams` under
/// `delete_options`, a field the API server does not read, so a grace period sent that way is
/// silently dropped.)
pub(crate) fn eviction_body(namespace: &str, name: &str, grace: Option<u32>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(grace) = grace {
        body["deleteOptions"] = serde_json::json!({"gracePeriodSeconds": grace});
    }
    body
}

/// The refusal, with the disruption budget's cause when the API gives one.
fn refusal_text(err: &::kube::Error) -> String {
    let causes: Vec<&str> = match err {
        ::kube::Error::Api(s) => (s.details.iter().flat_map(|d| d.causes.iter()))
            .map(|c| c.message.as_str())
            .filter(|m| !m.is_empty())
            .collect(),
        _ => Vec::new(),
    };
    let text = error_text(err);
    if causes.is_empty() {
        text
    } else {
        format!("{text} ({})", causes.join("; "))
    }
}

/// The pods of a node, sorted for a drain: non-critical, critical, and already terminating
/// (waited for, not evicted again); the skipped ones are put in the report.
fn sort_pods<'a>(listed: &'a [Pod], report: &mut DrainReport) -> [Vec<&'a Pod>; 3] {
    let mut sorted: [Vec<&Pod>; 3] = Default::default();
    for pod in listed {
        match disposition(pod) {
            Disposition::Skip(why) => report.skipped.push(SkippedPod {
                pod: pod_key(pod),
                why,
            }),
            Disposition::Evict { critical } => sorted[usize::from(critical)].push(pod),
            Disposition::Wait => sorted[2].push(pod),
        }
    }
    sorted
}

/// When a pending pass's drain looks again (`report.wait_until`, and `report.room` when it only
/// waits for room), from what the pass did (whether it evicted, refused or deferred anything;
/// how many pods it deferred; when the last terminating pod is due to be gone) when it looked
/// (`now`, before the drain's `deadline`): the last terminating pod's time when it only waits for them; with surge,
/// when a placeholder may run or a pod is due if it only waits for room, and no sooner than
/// [`CHECK_EVERY`] if its evictions were all refused (a budget waiting for a replacement, which
/// waits for room); otherwise `None` (the pass interval).
fn next_look(
    report: &mut DrainReport,
    surge: Option<&surge::SurgePass>,
    (acted, deferred, due_gone): (bool, usize, Option<DateTime<Utc>>),
    (now, deadline): (DateTime<Utc>, DateTime<Utc>),
) {
    let room = surge.and_then(|s| s.room(deadline));
    if report.pending && !acted {
        report.wait_until = due_gone.map(|t| t.min(deadline));
    } else if let Some(room) = room
        && report.evicted.is_empty()
        && report.left.is_empty()
        && deferred == report.waiting.len()
    {
        // Only waiting for room: look again when a placeholder may run or a pod is due.
        report.wait_until = Some(room.next_look(now));
        report.room = Some(room);
    } else if surge.is_some() && report.evicted.is_empty() && !report.left.is_empty() {
        // Every eviction refused: a pod waiting for room still looks at its own time (at most
        // CHECK_EVERY away).
        let next = room.map_or(now + CHECK_EVERY, |r| r.next_look(now));
        report.wait_until = Some(next.min(deadline));
    }
}

impl KubeExecutor {
    /// One pass of `a`'s drain of `node`: lists the pods on it, evicts those not yet terminating
    /// — non-critical ones first; critical ones once no other evictable pod is left on the node,
    /// or in the last quarter of the time from the drain's start to its deadline — each once
    /// ([`KubeExecutor::evict`]), and returns. The report is `pending` while anything is left to
    /// evict or to wait for and the deadline has not passed; past the deadline every pod still to
    /// evict gets one attempt and the drain ends, reporting what is still there (`left`,
    /// `terminating`) — unless its Events are left to the instance's end
    /// ([`KubeExecutor::leave_late_events`]).
    pub(super) async fn evictions(
        &self,
        plan: &Plan,
        a: &NodeAction,
        node: &Node,
        pass: Pass,
    ) -> Result<DrainReport, KubeError> {
        let started_at = match pass {
            Pass::Drain { started_at, .. } => started_at,
            Pass::Cordon | Pass::Announce => self.clients.clock().now(),
        };
        let deadline = (a.deadline).unwrap_or_else(|| started_at + self.config.drain_timeout);
        let node_uid = node.metadata.uid.as_deref();
        let grace_until = a.grace_to_deadline.then_some(deadline);
        let node = node.metadata.name.as_deref().unwrap_or_default();
        let clients = &self.clients;
        let mut report = DrainReport::default();
        let pods: Api<Pod> = Api::all(clients.client().await?);
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let object = format!("pods on node/{node}");
        let listed = with_retry(clients, "list", &object, || pods.list(&params));
        let listed = listed.await?.items;
        let [normal, critical, terminating] = sort_pods(&listed, &mut report);
        let due_gone = terminating
            .iter()
            .filter_map(|p| p.metadata.deletion_timestamp.as_ref())
            .filter_map(|t| DateTime::from_timestamp_micros(t.0.as_microsecond()))
            .max();
        let critical_terminating = terminating.iter().all(|p| is_critical(p));
        let evictable: Vec<&Pod> = normal.iter().chain(&critical).copied().collect();
        if self.settings.dry_run {
            report.would_evict = evictable.iter().map(|p| pod_key(p)).collect();
            return Ok(report);
        }
        let now = clients.clock().now();
        let surge = (a.surge && now < deadline).then(|| {
            let surge = (plan.event_id.as_str(), deadline, pass.is_first_drain());
            let pods = (listed.as_slice(), evictable.as_slice());
            self.surge_pass(surge, (node, node_uid), pods, &mut report)
        });
        let surge = OptionFuture::from(surge).await;
        // Checked: both times come from a message (verified, but a time is never trusted to add).
        let last_quarter = (deadline - started_at)
            .checked_mul(3)
            .and_then(|d| started_at.checked_add_signed(d / 4));
        // Past the deadline every pod still to evict gets its one attempt.
        let critical_due = (normal.is_empty() && critical_terminating)
            || last_quarter.is_none_or(|t| now >= t.min(deadline));
        let due = if critical_due { evictable } else { normal };
        // Pods that wait for room are not evicted in this pass.
        let waits = |p: &&Pod| match (&surge, &p.metadata.uid) {
            (Some(surge), Some(uid)) => surge.waiting.contains_key(uid),
            _ => false,
        };
        let (waiting, due): (Vec<&Pod>, Vec<&Pod>) = due.into_iter().partition(waits);
        report.waiting = waiting.iter().map(|p| pod_key(p)).collect();
        let deferred = report.waiting.len() + if critical_due { 0 } else { critical.len() };
        self.evict_all(&due, grace_until, &mut report).await?;
        report.terminating = terminating.iter().map(|p| pod_key(p)).collect();
        let acted = deferred > 0 || !report.evicted.is_empty() || !report.left.is_empty();
        // Past the deadline (the last pass: every pod still to evict had one attempt, none
        // waits), the drain ends with what is left.
        report.pending = now < deadline && (acted || !report.terminating.is_empty());
        let done = (acted, deferred, due_gone);
        next_look(&mut report, surge.as_ref(), done, (now, deadline));
        if !report.pending {
            // The drain is over: its placeholders go (listed now when this pass did not).
            report.placeholders_deleted += match surge {
                Some(surge) => surge::delete_all(clients, &surge.listed).await.0,
                None if a.surge => surge::delete_of_node(clients, node).await,
                None => 0,
            };
        }
        self.leave_late_events(a, pass, &mut report);
        Ok(report)
    }

    /// Evicts `pods` (at most [`EVICTIONS_AT_ONCE`] at once, each once: see
    /// [`KubeExecutor::evict`]) and puts what became of each in `report`.
    async fn evict_all(
        &self,
        pods: &[&Pod],
        grace_until: Option<DateTime<Utc>>,
        report: &mut DrainReport,
    ) -> Result<(), KubeError> {
        // The futures made first (a stream mapping borrowed items would not be `Send` for every
        // lifetime, as the executor's futures must be).
        let evictions: Vec<_> = (pods.iter())
            .map(|pod| async move { (*pod, self.evict(pod, grace_until).await) })
            .collect();
        let work = futures::stream::iter(evictions).buffer_unordered(EVICTIONS_AT_ONCE);
        for (pod, result) in work.collect::<Vec<_>>().await {
            let key = pod_key(pod);
            match result? {
                Eviction::Evicted => {
                    if let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) {
                        report.uids.insert(key.clone(), uid);
                    }
                    report.evicted.push(key);
                }
                Eviction::Gone => report.already_gone.push(key),
                Eviction::Refused(reason) => report.left.push(LeftPod { pod: key, reason }),
            }
        }
        Ok(())
    }

    /// Evicts one pod, its grace fitted to `grace_until` (see [`fitted_grace`]): one attempt,
    /// but for the API server's rate limit.
    ///
    /// Every answer but success and 404 is this pod's refusal, never the event's failure: 429 (a
    /// disruption budget, or API priority and fairness), 500 (the pod is selected by several
    /// budgets), 409 (a conflict), 503/504 and transport errors (an API server in trouble). It is
    /// reported as left with the answer, and the next pass tries it again. A 429 with
    /// `Retry-After` is the API server's rate limit (priority and fairness), not the pod's
    /// refusal (a budget's 429 says no time): the server said when, so the eviction is tried
    /// again then, in this pass (at most [`RATE_LIMIT_RETRIES`] times, within the work's
    /// deadline) — else the node waits for a later pass for nothing.
    async fn evict(
        &self,
        pod: &Pod,
        grace_until: Option<DateTime<Utc>>,
    ) -> Result<Eviction, KubeError> {
        let clients = &self.clients;
        let (namespace, name) = super::api::ns_name(&pod.metadata);
        let own_grace = (pod.spec.as_ref()).and_then(|s| s.termination_grace_period_seconds);
        let mut told = 0;
        loop {
            // The client is asked for at each attempt: an EKS token that expires meanwhile is
            // made anew. A client that cannot be made ends the eviction.
            let pods: Api<Pod> = Api::namespaced(clients.client().await?, &namespace);
            clients.throttle().await;
            let grace = fitted_grace(own_grace, grace_until, clients.clock().now());
            let body = eviction_body(&namespace, &name, grace);
            let params = PostParams::default();
            let answer =
                pods.create_subresource::<_, serde_json::Value>("eviction", &name, &params, &body);
            let e = match answer.await {
                Ok(_) => return Ok(Eviction::Evicted),
                Err(e) if status_code(&e) == Some(404) => return Ok(Eviction::Gone),
                Err(e) => e,
            };
            let now = clients.clock().now();
            match retry_after(&e) {
                Some(after)
                    if told < RATE_LIMIT_RETRIES
                        && clients.work.deadline.is_none_or(|u| now + span(after) < u) =>
                {
                    told += 1;
                    tracing::debug!(pod = %pod_key(pod), reason = %error_text(&e), ?after, "eviction rate-limited; retrying");
                    clients.pause_all(after);
                    clients.clock().sleep(after).await;
                }
                _ => return Ok(Eviction::Refused(refusal_text(&e))),
            }
        }
    }

    /// A first drain pass that came after the drain's deadline evicted what was left at once,
    /// and so ended the drain; when the notice says when the instance goes, its Events (of the
    /// decision, and the drain's end) would come before the instance goes, in a mass
    /// interruption ahead of other nodes' evictions. Then the drain stays pending until the
    /// instance's end: its next pass, refused as late, records the Events of the decision alone
    /// (`Pass::Announce`); the drain's end gets no Event.
    fn leave_late_events(&self, a: &NodeAction, pass: Pass, report: &mut DrainReport) {
        if let Some(deadline) = a.deadline.filter(|_| a.grace_to_deadline)
            && pass.is_first_drain()
            && !report.pending
            && !self.settings.dry_run
            && self.clients.clock().now() >= deadline
        {
            report.pending = true;
            report.wait_until =
                Some(deadline + self.config.deadline_margin + chrono::Duration::seconds(1));
        }
    }

    /// A drain pass's report (of `a`'s drain) put in `out`; when the drain ended, its Event (not in a dry run,
    /// nor in a quiet pass): `Drained`, or `DrainIncomplete` with the pods refused at the
    /// deadline (the summary of a `later` pass, one after the pass that evicted, counts only
    /// what it did). A `PlaceholderRefused` Warning names the placeholders the API server
    /// refused, first seen in this environment (one line per namespace and refusing step), with
    /// the server's message. Then, last of the pass, the Events on the pods it evicted (see
    /// [`KubeExecutor::record_pod_events`]).
    pub(super) async fn drain_over(
        &self,
        (plan, a): (&Plan, &NodeAction),
        node: &Node,
        pass: Pass,
        mut report: DrainReport,
        out: &mut NodeOutcome,
    ) {
        let quiet = pass.role() == Some(DrainRole::Quiet);
        if !report.pending && !self.settings.dry_run && !quiet {
            let later = matches!(pass, Pass::Drain { .. }) && !pass.is_first_drain();
            let said = if report.complete() {
                let note = format!("Drained: {}", report.summary(later));
                Said(EventType::Normal, "Drained", "Drain", note)
            } else {
                let left: Vec<String> = (report.left.iter())
                    .map(|l| format!("{}: {}", l.pod, l.reason))
                    .collect();
                let note = format!(
                    "Drain incomplete at the deadline: {}. Refused: {}",
                    report.summary(false),
                    left.join("; ")
                );
                Said(EventType::Warning, "DrainIncomplete", "Drain", note)
            };
            self.event(&plan.event_id, node, said, out).await;
        }
        if !report.new_refusals.is_empty() {
            let note = format!(
                "{}. Those pods are evicted at once, without waiting for room (forewarn check --kube \
                 proves every write forewarn makes).",
                report.new_refusals.join("; ")
            );
            let said = Said(EventType::Warning, "PlaceholderRefused", "Surge", note);
            self.event(&plan.event_id, node, said, out).await;
        }
        self.record_pod_events(plan, a, node, &mut report).await;
        out.drained(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        /// Any grace a pod spec holds (an int64), any end: the grace asked is a whole number
        /// of seconds, at least 1, never more than the pod's own — never a panic.
        #[test]
        fn any_grace_is_fitted_without_panicking(
            own in proptest::option::of(proptest::num::i64::ANY),
            left in proptest::num::i64::ANY,
        ) {
            let now = DateTime::parse_from_rfc3339("2026-11-20T10:00:00Z").unwrap().with_timezone(&Utc);
            let until = now.checked_add_signed(chrono::Duration::seconds(left.clamp(-1_000_000_000, 1_000_000_000)));
            if let Some(asked) = fitted_grace(own, until, now) {
                proptest::prop_assert!(asked >= 1);
                proptest::prop_assert!(i64::from(asked) < own.unwrap_or(30));
            }
        }
    }

    #[test]
    fn grace_is_fitted_only_when_the_pods_own_would_outlast_the_instance() {
        let now = DateTime::parse_from_rfc3339("2026-11-20T10:00:30Z")
            .unwrap()
            .with_timezone(&Utc);
        let until = Some(now + chrono::Duration::seconds(75));
        assert_eq!(fitted_grace(Some(300), until, now), Some(75));
        assert_eq!(fitted_grace(None, until, now), None, "30 s fits");
        assert_eq!(fitted_grace(Some(75), until, now), None);
        assert_eq!(fitted_grace(Some(300), None, now), None, "no known end");
        let past = Some(now - chrono::Duration::seconds(5));
        assert_eq!(
            fitted_grace(None, past, now),
            Some(1),
            "never 0: that is a force delete"
        );
        assert_eq!(fitted_grace(Some(0), past, now), None);
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_surge_drain_whose_evictions_were_all_refused_looks_again_after_the_check_interval() {
        let now = DateTime::parse_from_rfc3339("2026-11-20T10:00:30Z")
            .unwrap()
            .with_timezone(&Utc);
        let deadline = now + chrono::Duration::seconds(75);
        let refused = || DrainReport {
            pending: true,
            left: vec![LeftPod {
                pod: "shop/b".into(),
                reason: "429 TooManyRequests".into(),
            }],
            ..DrainReport::default()
        };
        let surge = surge::SurgePass::default();
        // The pass refused its evictions, deferred nothing, saw nothing terminating.
        let (refusals, times) = ((true, 0, None), (now, deadline));
        let mut report = refused();
        next_look(&mut report, Some(&surge), refusals, times);
        assert_eq!(report.wait_until, Some(now + CHECK_EVERY));
        assert_eq!(report.room, None);
        // Without surge: the pass interval.
        let mut report = refused();
        next_look(&mut report, None, refusals, times);
        assert_eq!(report.wait_until, None);
        // Something was evicted too: the pass interval.
        let mut report = refused();
        report.evicted.push("shop/a".into());
        next_look(&mut report, Some(&surge), refusals, times);
        assert_eq!(report.wait_until, None);
    }

    #[test]
    fn what_a_drain_leaves_alone() {
        let ds = pod(json!({"metadata": {"name": "ds", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "u", "controller": true}
        ]}}));
        assert_eq!(disposition(&ds), Disposition::Skip("daemonset"));
        let mirror =
            pod(json!({"metadata": {"name": "m", "annotations": {ANNOTATION_MIRROR: "abc"}}}));
        assert_eq!(disposition(&mirror), Disposition::Skip("mirror"));
        let done = pod(json!({"metadata": {"name": "j"}, "status": {"phase": "Succeeded"}}));
        assert_eq!(disposition(&done), Disposition::Skip("succeeded"));
        let failed = pod(json!({"metadata": {"name": "j"}, "status": {"phase": "Failed"}}));
        assert_eq!(disposition(&failed), Disposition::Skip("failed"));
        let going = pod(
            json!({"metadata": {"name": "g", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}}),
        );
        assert_eq!(disposition(&going), Disposition::Wait);
        // A ReplicaSet's pod, and a pod that only refers to a DaemonSet without being controlled.
        let rs = pod(json!({"metadata": {"name": "w", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": true},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "y", "uid": "v"}
        ]}, "status": {"phase": "Running"}}));
        assert_eq!(disposition(&rs), Disposition::Evict { critical: false });
        let critical = pod(json!({"metadata": {"name": "dns"},
            "spec": {"containers": [], "priorityClassName": "system-cluster-critical"}}));
        assert_eq!(
            disposition(&critical),
            Disposition::Evict { critical: true }
        );
        assert!(is_critical(&critical));
    }

    #[test]
    fn summaries() {
        let mut r = DrainReport::default();
        assert_eq!(r.summary(false), "no pod to evict");
        // A later pass, after earlier passes evicted what there was.
        assert_eq!(r.summary(true), "no pod left to evict");
        r.evicted = vec!["a/1".into(), "a/2".into()];
        r.left = vec![LeftPod {
            pod: "a/3".into(),
            reason: "429".into(),
        }];
        r.skipped = vec![SkippedPod {
            pod: "kube-system/ds".into(),
            why: "daemonset",
        }];
        assert_eq!(
            r.summary(false),
            "evicted 2 pods; 1 pod left (eviction refused until the deadline: a/3); 1 pod left alone"
        );
        assert!(!r.complete());
    }
}
