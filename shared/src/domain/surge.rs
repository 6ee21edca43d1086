//! Replacement capacity before eviction ("surge"), its pure part: when a pod of a doomed node
//! must be evicted at the latest, and whether it is due now.
//!
//! On a warning of a kind that surges (a policy rule's `surge`, else these: spot and capacity reservation warnings by
//! default), the drain first creates one pending *placeholder* pod per evictable pod that a
//! controller owns, in forewarn's own namespace ([`NAMESPACE`]): the same requests, node
//! selector, affinity (its pod (anti-)affinity terms naming the pod's namespace) and
//! tolerations, kept off the doomed node and off every node forewarn cordoned
//! ([`LABEL_CORDONED`]), owned by the doomed Node (the garbage collector removes it with the
//! Node), of the PriorityClass `forewarn-placeholder` (priority -1, `preemptionPolicy:
//! Never`). The autoscaler sees pending pods and starts a node at once, while the real pods
//! keep serving. A pod is evicted as soon as its placeholder is Running on another node (its
//! replacement then preempts the placeholder and starts at once), and in any case by its
//! latest safe time ([`latest_safe`]): the drain's deadline, less its grace period (clamped:
//! a pod spec may ask any int64), less the time the earlier rounds of its budget need, less a
//! margin for the passes' cadence. Surge never holds a drain up: a placeholder the API does
//! not create (any answer but AlreadyExists, or none within [`STEP_BUDGET`]) leaves its pod
//! evicted at once, as without surge.
//!
//! The budget's rounds are estimated from one read of the budgets, when the placeholders are
//! made (a read per pass would cost the API server what the drain needs): the pods of one
//! controller on the node are taken to share a budget that lets one go at a time, so the k-th
//! of them (in name order) needs k earlier rounds of [`ROUND`] each; and a pod that a budget
//! selects which cannot let all of its pods go at once needs at least one (its budget's other
//! pods may be on other doomed nodes, and one of them goes first: the pod that waits for it
//! must not wait past its own latest time). The time so given is kept on the placeholder
//! ([`ANNOTATION_EVICT_BY`]). A budget that allows more only makes the drain early, never late.

use std::sync::LazyLock;

use chrono::{DateTime, Duration, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::domain::time::SANE_SPAN;

/// The namespace of forewarn's own objects in a cluster (created by `infra/k8s/rbac.yaml`): the
/// policy ConfigMap and the placeholders; nothing forewarn reads there can be written by a tenant
/// or by what writes kube-system. Every placeholder is created there (never in its pod's
/// namespace), so that the grant to create and delete pods is a Role of that namespace alone,
/// and placeholders spend no tenant's ResourceQuota.
pub const NAMESPACE: &str = "forewarn";
/// The label every placeholder carries (`"true"`): an index to list them by, never what makes a
/// pod one (its namespace, its name ([`placeholder_name`]) and [`PRIORITY_CLASS`] do).
pub const LABEL_PLACEHOLDER: &str = "forewarn.io/placeholder";
/// The label naming the doomed node a placeholder was made for ([`node_label_value`]).
pub const LABEL_PLACEHOLDER_NODE: &str = "forewarn.io/placeholder-node";
/// Annotations: the node, the pod (`namespace/name`) and its uid, the event, and when the
/// placeholder has outlived its purpose (the drain's deadline).
pub const ANNOTATION_NODE: &str = "forewarn.io/node";
pub const ANNOTATION_POD: &str = "forewarn.io/pod";
pub const ANNOTATION_POD_UID: &str = "forewarn.io/pod-uid";
pub const ANNOTATION_EVENT: &str = "forewarn.io/event";
pub const ANNOTATION_EXPIRES: &str = "forewarn.io/expires";
/// The latest safe time its pod was given when the placeholder was made (with the rounds of
/// its budget, which later passes do not read again).
pub const ANNOTATION_EVICT_BY: &str = "forewarn.io/evict-by";
/// The Cluster Autoscaler's annotation: a placeholder never keeps a node from scaling down.
pub const ANNOTATION_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Every label key a placeholder carries, and every annotation key: the admission policy of
/// `infra/k8s/placeholders.yaml` allows these and no other (the tests check both).
#[cfg(any(test, feature = "fixtures"))]
pub const PLACEHOLDER_LABELS: [&str; 2] = [LABEL_PLACEHOLDER, LABEL_PLACEHOLDER_NODE];
#[cfg(any(test, feature = "fixtures"))]
pub const PLACEHOLDER_ANNOTATIONS: [&str; 7] = [
    ANNOTATION_NODE,
    ANNOTATION_POD,
    ANNOTATION_POD_UID,
    ANNOTATION_EVENT,
    ANNOTATION_EXPIRES,
    ANNOTATION_EVICT_BY,
    ANNOTATION_SAFE_TO_EVICT,
];
/// The label forewarn puts on every node it cordons (removed with the cordon): placeholders'
/// node affinity excludes such nodes, so that a placeholder never counts as room on another
/// doomed node, whatever tolerations it copied.
pub const LABEL_CORDONED: &str = "forewarn.io/cordoned";
/// The PriorityClass of placeholders (shipped in `infra/k8s/placeholders.yaml`).
pub const PRIORITY_CLASS: &str = "forewarn-placeholder";
/// The kinds surge is meant for: warnings whose instance goes at a known time.
pub const SURGE_KINDS: [crate::domain::event::EventKind; 3] = [
    crate::domain::event::EventKind::SpotInterruption,
    crate::domain::event::EventKind::CapacityReservationInterruption,
    crate::domain::event::EventKind::CapacityBlockExpiration,
];
/// The image of a placeholder's one container: it only holds the room.
pub const PLACEHOLDER_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The user and group a placeholder runs as: the `pause` image's own (`USER 65535:65535`), not
/// root, as Pod Security `restricted` requires (`runAsNonRoot`, a non-zero `runAsUser`).
pub const PLACEHOLDER_USER: i64 = 65535;

/// The time one round of a budget takes: the evicted pod's replacement started and Ready.
pub const ROUND: Duration = Duration::seconds(15);
/// Evictions are due this long before the computed latest time: a drain's passes come a pass
/// interval apart, later under load.
pub const MARGIN: Duration = Duration::seconds(10);
/// While pods wait for their placeholders, a drain looks again this often.
pub const CHECK_EVERY: Duration = Duration::seconds(10);
/// The time a pass's placeholder creates may take: past it, the pods whose placeholder was not
/// made are evicted as without surge. Surge never holds a drain up longer, whatever the API
/// server or an admission webhook does.
pub const STEP_BUDGET: Duration = Duration::seconds(2);
/// At most this many pods of one node get a placeholder (in the order they are listed); the
/// others are evicted as without surge. A node holds far fewer pods (110 by default); a bound
/// keeps a node with absurdly many from costing the pass a request each.
pub const MAX_PODS: usize = 250;

/// The latest time a pod whose grace period is `grace_seconds` (Kubernetes' 30 when unset;
/// clamped to 0..=[`SANE_SPAN`]: a spec may hold any int64, the API server checks only that it
/// is not negative, and no notice forewarn acts on is longer, so a pod asking more is due at
/// once either way), with `earlier_rounds` of its budget before it (at most
/// [`MAX_PODS`]), is evicted for its drain to end by `deadline`. Checked: whatever the spec
/// says, the answer is a time (chrono's earliest when the arithmetic would leave its range:
/// the pod is due now).
pub fn latest_safe(
    deadline: DateTime<Utc>,
    grace_seconds: Option<i64>,
    earlier_rounds: usize,
) -> DateTime<Utc> {
    let grace = Duration::try_seconds(grace_seconds.unwrap_or(30).max(0))
        .unwrap_or(Duration::MAX)
        .min(SANE_SPAN);
    let rounds = i32::try_from(earlier_rounds.min(MAX_PODS)).unwrap_or(0);
    ROUND
        .checked_mul(rounds)
        .and_then(|r| r.checked_add(&grace))
        .and_then(|d| d.checked_add(&MARGIN))
        .and_then(|d| deadline.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Whether a pod whose latest safe time is `latest` is evicted at `now`: as soon as its
/// placeholder runs on another node (`running`: there is room for it), and at its latest safe
/// time in any case. Until then it waits for room (its placeholder made, or to make).
pub fn due(now: DateTime<Utc>, latest: DateTime<Utc>, running: bool) -> bool {
    running || now >= latest
}

/// A drain that only waits for room: the earliest latest safe time of its waiting pods, and how
/// many placeholders hold room for them. A drain pass that ends so says it in its result; the
/// pipeline carries it in the drain's (signed) continuation, so that the next pass can first
/// look at the placeholders alone — one list for a whole batch — and make no other request
/// while nothing is due ([`RoomWait::still_waiting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoomWait {
    /// A pod must be evicted at the latest then: the next pass is a full one.
    pub until: DateTime<Utc>,
    /// The placeholders holding room for the waiting pods.
    pub placeholders: u32,
}

/// A node's placeholders as one list saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomSeen {
    /// Placeholders made for the node's pods.
    pub placeholders: u32,
    /// Of them, those Running on another node: room for their pods.
    pub running: u32,
}

impl RoomSeen {
    /// Two nodes' placeholders together.
    pub fn and(self, other: RoomSeen) -> RoomSeen {
        RoomSeen {
            placeholders: self.placeholders.saturating_add(other.placeholders),
            running: self.running.saturating_add(other.running),
        }
    }
}

impl RoomWait {
    /// The waits of two nodes of one plan: the earlier time, the placeholders added up.
    pub fn and(self, other: RoomWait) -> RoomWait {
        RoomWait {
            until: self.until.min(other.until),
            placeholders: self.placeholders.saturating_add(other.placeholders),
        }
    }

    /// Whether a drain that waited so still only waits at `now`, its placeholders `seen`: no
    /// pod's latest safe time has come, every placeholder is still there (one preempted or
    /// deleted is made again by a full pass), and none runs (its pod is due). Then the pass
    /// can be skipped: nothing would be evicted.
    pub fn still_waiting(&self, seen: RoomSeen, now: DateTime<Utc>) -> bool {
        now < self.until && seen.running == 0 && seen.placeholders >= self.placeholders
    }

    /// When to look again: every [`CHECK_EVERY`], and at the latest safe time.
    pub fn next_look(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.until.min(now + CHECK_EVERY)
    }
}

/// The name of the placeholder of the pod of uid `pod_uid`.
pub fn placeholder_name(pod_uid: &str) -> String {
    format!("forewarn-placeholder-{pod_uid}")
}

/// The value of [`LABEL_PLACEHOLDER_NODE`] for `node`: the node's name when it is a valid label
/// value (at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends), else a stable
/// hash of it (`h-<16 hex digits>`).
pub fn node_label_value(node: &str) -> String {
    static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$").expect("a valid expression")
    });
    if LABEL_VALUE.is_match(node) {
        return node.to_string();
    }
    format!("h-{:016x}", crate::domain::names::fnv1a(node.bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        crate::domain::event::parse_time(s).unwrap()
    }

    #[test]
    fn the_latest_safe_time_leaves_grace_rounds_and_a_margin() {
        let deadline = t("2026-11-20T10:01:45Z");
        assert_eq!(latest_safe(deadline, None, 0), t("2026-11-20T10:01:05Z"));
        assert_eq!(
            latest_safe(deadline, Some(60), 2),
            t("2026-11-20T10:00:05Z")
        );
        assert_eq!(
            latest_safe(deadline, Some(-5), 0),
            t("2026-11-20T10:01:35Z")
        );
    }

    #[test]
    fn an_absurd_grace_or_count_makes_the_pod_due_at_once() {
        let deadline = t("2026-11-20T10:01:45Z");
        let now = t("2026-11-20T09:59:45Z");
        // What the API server takes: any int64 at or above 0 (and a negative one by mistake).
        for grace in [9_000_000_000_000, i64::MAX, i64::MIN, 86_400 * 365 * 20] {
            let latest = latest_safe(deadline, Some(grace), usize::MAX);
            assert!(latest < now, "grace {grace}: {latest}");
            assert!(due(now, latest, false));
        }
        // Clamped, not wrapped: the longest grace taken is the longest notice.
        assert_eq!(
            latest_safe(deadline, Some(i64::MAX), 0),
            deadline - SANE_SPAN - MARGIN
        );
        assert_eq!(
            latest_safe(deadline, None, usize::MAX),
            deadline - Duration::seconds(30) - ROUND * MAX_PODS as i32 - MARGIN
        );
        // At the edge of chrono's range: the earliest time, never a panic.
        assert_eq!(
            latest_safe(DateTime::<Utc>::MIN_UTC, Some(30), 1),
            DateTime::<Utc>::MIN_UTC
        );
    }

    proptest::proptest! {
        #[test]
        fn latest_safe_never_panics_and_is_never_after_the_deadline(
            secs in proptest::num::i64::ANY,
            grace in proptest::option::of(proptest::num::i64::ANY),
            rounds in proptest::num::usize::ANY,
        ) {
            let deadline = DateTime::<Utc>::from_timestamp(
                secs.clamp(DateTime::<Utc>::MIN_UTC.timestamp(), DateTime::<Utc>::MAX_UTC.timestamp()),
                0,
            )
            .unwrap();
            let latest = latest_safe(deadline, grace, rounds);
            proptest::prop_assert!(latest <= deadline);
        }
    }

    #[test]
    fn a_pod_is_due_when_its_placeholder_runs_or_at_its_latest_safe_time() {
        let latest = t("2026-11-20T10:01:05Z");
        let before = t("2026-11-20T10:00:30Z");
        assert!(
            due(before, latest, true),
            "its placeholder runs: there is room"
        );
        assert!(!due(before, latest, false));
        assert!(due(latest, latest, false), "its latest safe time came");
    }

    #[test]
    fn a_pass_is_skipped_only_while_every_placeholder_waits_and_nothing_is_due() {
        let wait = RoomWait {
            until: t("2026-11-20T10:01:05Z"),
            placeholders: 2,
        };
        let now = t("2026-11-20T10:00:30Z");
        let seen = |placeholders, running| RoomSeen {
            placeholders,
            running,
        };
        assert!(wait.still_waiting(seen(2, 0), now));
        assert!(
            !wait.still_waiting(seen(2, 1), now),
            "one runs: its pod is due"
        );
        assert!(
            !wait.still_waiting(seen(1, 0), now),
            "one is gone (preempted): a full pass makes it again"
        );
        assert!(
            !wait.still_waiting(seen(2, 0), wait.until),
            "the latest safe time"
        );
        assert_eq!(wait.next_look(now), t("2026-11-20T10:00:40Z"));
        assert_eq!(wait.next_look(t("2026-11-20T10:01:00Z")), wait.until);
        let other = RoomWait {
            until: t("2026-11-20T10:00:50Z"),
            placeholders: 1,
        };
        assert_eq!(
            wait.and(other),
            RoomWait {
                until: other.until,
                placeholders: 3
            }
        );
        assert_eq!(seen(1, 0).and(seen(2, 1)), seen(3, 1));
        let json = serde_json::to_value(wait).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"until": "2026-11-20T10:01:05Z", "placeholders": 2})
        );
    }

    #[test]
    fn node_names_become_label_values() {
        assert_eq!(
            node_label_value("ip-10-0-1-11.ec2.internal"),
            "ip-10-0-1-11.ec2.internal"
        );
        let long = format!("{}.compute.internal", "a".repeat(60));
        let v = node_label_value(&long);
        assert!(v.starts_with("h-") && v.len() == 18, "{v}");
        assert_eq!(v, node_label_value(&long), "stable");
        assert!(node_label_value("-x").starts_with("h-"));
        assert_eq!(placeholder_name("5f1e"), "forewarn-placeholder-5f1e");
    }
}
