//! What the Kubernetes Event recorded on each pod a drain evicts says: its reason, one per
//! event kind ([`super::Plan::pod_event_reason`]), and its note ([`note`]): the instance, its
//! node, and when the instance goes.

use chrono::{DateTime, Utc};

/// The most a note holds (`events.k8s.io/v1` refuses a longer one).
pub const NOTE_LIMIT: usize = 1024;

/// What a pod's Event is about: the instance, its node, the event, and when the instance goes.
#[derive(Debug, Clone, Copy)]
pub struct Notice<'a> {
    pub instance_id: &'a str,
    pub node: &'a str,
    /// The event for people (`spot-interruption (terminate)`, the plan's summary).
    pub summary: &'a str,
    /// When the instance goes, when the notice says (a spot or capacity reservation warning, a
    /// scheduled change with a start time).
    pub goes_at: Option<DateTime<Utc>>,
    /// When the drain must be over (its deadline), when the instance's end is not known.
    pub drain_by: Option<DateTime<Utc>>,
}

/// The Event's note: `Evicted by forewarn: node N (instance I) is going away (spot-interruption
/// (terminate)); the instance goes at 2026-11-24T10:02:00Z.`, at most [`NOTE_LIMIT`] bytes.
pub fn note(n: &Notice<'_>) -> String {
    let when = match (n.goes_at, n.drain_by) {
        (Some(at), _) => format!("the instance goes at {}", rfc3339(at)),
        (None, Some(by)) => format!(
            "when the instance goes is not known; its node is drained by {}",
            rfc3339(by)
        ),
        (None, None) => "when the instance goes is not known".to_string(),
    };
    let note = format!(
        "Evicted by forewarn: node {} (instance {}) is going away ({}); {when}.",
        n.node, n.instance_id, n.summary
    );
    truncate(note, NOTE_LIMIT)
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `s` cut to at most `limit` bytes on a character boundary, ending in `...` when cut: an
/// Event's note within the API's limit (every Event forewarn records goes through it).
pub fn truncate(mut s: String, limit: usize) -> String {
    if s.len() > limit {
        let mut end = limit.saturating_sub(3);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_instance_the_node_and_when_it_goes() {
        let at: DateTime<Utc> = "2026-11-24T10:02:00Z".parse().unwrap();
        let by: DateTime<Utc> = "2026-11-24T10:01:45Z".parse().unwrap();
        let mut n = Notice {
            instance_id: "i-0a1b2c3d4e5f60001",
            node: "ip-10-0-1-11.ec2.internal",
            summary: "spot-interruption (terminate)",
            goes_at: Some(at),
            drain_by: Some(by),
        };
        assert_eq!(
            note(&n),
            "Evicted by forewarn: node ip-10-0-1-11.ec2.internal (instance i-0a1b2c3d4e5f60001) \
             is going away (spot-interruption (terminate)); the instance goes at \
             2026-11-24T10:02:00Z."
        );
        n.goes_at = None;
        assert!(note(&n).ends_with(
            "; when the instance goes is not known; its node is drained by 2026-11-24T10:01:45Z."
        ));
        n.drain_by = None;
        assert!(note(&n).ends_with("; when the instance goes is not known."));
        // Never over 1 kB, cut on a character boundary.
        let long = "é".repeat(2000);
        n.summary = &long;
        let cut = note(&n);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
