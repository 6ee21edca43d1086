//! Replacement capacity before eviction ("surge"), its pure part: when a pod of a doomed node
//! must be evicted at the latest, and whether it is due now.
//!
//! On a warning of a kind of `FOREWARN_SURGE` (e.g. spot and capacity reservation warnings;
//! none by default for now), the drain first
//! creates one pending *placeholder* pod per evictable pod that a controller owns: the same
//! requests, node selector, affinity and tolerations, kept off the doomed node, of the
//! PriorityClass `forewarn-placeholder` (priority -1, `preemptionPolicy: Never`). The
//! autoscaler sees pending pods and starts a node at once, while the real pods keep serving. A
//! pod is evicted as soon as its placeholder is Running on another node (its replacement then
//! preempts the placeholder and starts at once), and in any case by its latest safe time
//! ([`latest_safe`]): the drain's deadline, less its grace period, less the time the earlier
//! rounds of its budget need, less a margin for the passes' cadence.
//!
//! The budget's rounds are estimated without reading PodDisruptionBudgets (a read per pass
//! would cost the API server what the drain needs): the pods of one controller on the node are
//! taken to share a budget that lets one go at a time, so the k-th of them (in name order)
//! needs k earlier rounds of [`ROUND`] each. A budget that allows more only makes the drain
//! early, never late.

use chrono::{DateTime, Duration, Utc};

/// The label every placeholder carries (`"true"`): what the RBAC admission policy lets forewarn
/// create and delete, and what the sweeper cleans up.
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
/// The PriorityClass of placeholders (shipped in `infra/k8s/placeholder-priority.yaml`).
pub const PRIORITY_CLASS: &str = "forewarn-placeholder";
/// The kinds `FOREWARN_SURGE` is meant for: warnings whose instance goes at a known time.
pub const SURGE_KINDS: [crate::domain::event::EventKind; 2] = [
    crate::domain::event::EventKind::SpotInterruption,
    crate::domain::event::EventKind::CapacityReservationInterruption,
];
/// The image of a placeholder's one container: it only holds the room.
pub const PLACEHOLDER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The time one round of a budget takes: the evicted pod's replacement started and Ready.
pub const ROUND: Duration = Duration::seconds(15);
/// Evictions are due this long before the computed latest time: a drain's passes come a pass
/// interval apart, later under load.
pub const MARGIN: Duration = Duration::seconds(10);
/// While pods wait for their placeholders, a drain looks again this often.
pub const CHECK_EVERY: Duration = Duration::seconds(10);

/// The latest time a pod whose grace period is `grace_seconds` (Kubernetes' 30 when unset), with
/// `earlier_rounds` of its budget before it, is evicted for its drain to end by `deadline`.
pub fn latest_safe(
    deadline: DateTime<Utc>,
    grace_seconds: Option<i64>,
    earlier_rounds: usize,
) -> DateTime<Utc> {
    let grace = Duration::seconds(grace_seconds.unwrap_or(30).max(0));
    let rounds = i32::try_from(earlier_rounds).unwrap_or(i32::MAX);
    deadline - grace - ROUND * rounds - MARGIN
}

/// Where a pod's placeholder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// None yet (created in this pass).
    Missing,
    /// Created, not Running yet (waiting for room: the autoscaler's node).
    Pending,
    /// Running on another node: there is room for the pod.
    Running,
}

/// Whether a pod is evicted now, and why; or when at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Now(&'static str),
    Later(DateTime<Utc>),
}

/// Whether a pod whose latest safe time is `latest` and whose placeholder is `placeholder` is
/// evicted at `now`.
pub fn due(now: DateTime<Utc>, latest: DateTime<Utc>, placeholder: Placeholder) -> Due {
    match placeholder {
        Placeholder::Running => Due::Now("its placeholder runs: there is room"),
        _ if now >= latest => Due::Now("its latest safe time came"),
        _ => Due::Later(latest),
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
    let valid = !node.is_empty()
        && node.len() <= 63
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && node.as_bytes()[0].is_ascii_alphanumeric()
        && node.as_bytes()[node.len() - 1].is_ascii_alphanumeric();
    if valid {
        return node.to_string();
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("h-{hash:016x}")
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
    fn a_pod_is_due_when_its_placeholder_runs_or_at_its_latest_safe_time() {
        let latest = t("2026-11-20T10:01:05Z");
        let before = t("2026-11-20T10:00:30Z");
        assert!(matches!(
            due(before, latest, Placeholder::Running),
            Due::Now(_)
        ));
        assert_eq!(
            due(before, latest, Placeholder::Pending),
            Due::Later(latest)
        );
        assert_eq!(
            due(before, latest, Placeholder::Missing),
            Due::Later(latest)
        );
        assert!(matches!(
            due(latest, latest, Placeholder::Pending),
            Due::Now(_)
        ));
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
