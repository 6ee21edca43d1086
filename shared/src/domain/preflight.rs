//! The preflight's model: each kind of write forewarn makes ([`Capability`]), what the API
//! server said of its dry run ([`Verdict`], its refusing step read by [`crate::domain::admission`])
//! and one line of a preflight ([`Proof`]); the judgement and schedule are
//! [`crate::app::preflight`]'s.

use std::fmt;

use strum::{IntoStaticStr, VariantArray};

use crate::domain::admission::{RefusedBy, is_refusal, refused_by};

/// One kind of write forewarn makes, as the preflight proves it; `Capability::VARIANTS` lists
/// them in the order a preflight checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Capability {
    /// The cordon's patch of a worker Node: `unschedulable`, the taint, the record annotation,
    /// the cordoned label.
    Cordon,
    /// An eviction of a pod through the Eviction API.
    Evict,
    /// A placeholder of the real shape, for a real pod (surge).
    Placeholder,
    /// An `events.k8s.io/v1` Event about an evicted pod, in its namespace.
    PodEvent,
    /// An `events.k8s.io/v1` Event about a Node, in `default`.
    NodeEvent,
    /// The way back's patch: forewarn's cordon taken off.
    WayBack,
    /// The update of the Cluster Autoscaler's priority expander ConfigMap (the sweeper's).
    Expander,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// What the capability is, for a person.
    pub fn what(self) -> &'static str {
        match self {
            Capability::Cordon => "cordon a worker node (taint, record, label)",
            Capability::Evict => "evict a pod (Eviction API)",
            Capability::Placeholder => "create a placeholder (surge)",
            Capability::PodEvent => "record an Event on an evicted pod",
            Capability::NodeEvent => "record an Event on a node",
            Capability::WayBack => "give a node back (the way back's uncordon)",
            Capability::Expander => "update the priority expander ConfigMap",
        }
    }
}

/// What the server said of one capability's dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted (with what the check could or could not prove, when worth saying).
    Admitted(Option<String>),
    /// Refused: by which step, and the server's message.
    Refused { by: RefusedBy, message: String },
    /// Not checked: nothing to check it on, or a failure that says nothing of admission.
    NotChecked(String),
}

impl Verdict {
    /// From an answer's code, reason and message: a refusal ([`is_refusal`]) names its step;
    /// any other failure leaves the capability not checked.
    pub fn of_failure(code: Option<u16>, reason: &str, message: &str) -> Verdict {
        match code {
            // A webhook with side effects refuses every dry run (`admission webhook "x" does
            // not support dry run`): that says nothing of the real write.
            Some(_) if message.contains("does not support dry run") => {
                Verdict::NotChecked(format!("a webhook cannot be asked in a dry run: {message}"))
            }
            // The object written about went meanwhile (a pod evicted since it was listed); a
            // missing namespace is the NamespaceLifecycle plugin's refusal.
            Some(404)
                if refused_by(404, reason, message) != RefusedBy::Plugin("NamespaceLifecycle") =>
            {
                Verdict::NotChecked(format!("gone meanwhile: {message}"))
            }
            Some(code) if is_refusal(code) => Verdict::Refused {
                by: refused_by(code, reason, message),
                message: message.to_string(),
            },
            Some(code) => Verdict::NotChecked(format!("the server answered {code}: {message}")),
            None => Verdict::NotChecked(format!("no answer: {message}")),
        }
    }

    pub fn is_refused(&self) -> bool {
        matches!(self, Verdict::Refused { .. })
    }

    /// A short word: `admitted`, `refused`, `not checked`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Admitted(_) => "admitted",
            Verdict::Refused { .. } => "refused",
            Verdict::NotChecked(_) => "not checked",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Admitted(None) => f.write_str("admitted"),
            Verdict::Admitted(Some(note)) => write!(f, "admitted ({note})"),
            Verdict::Refused { by, message } => write!(f, "refused by {by}: {message}"),
            Verdict::NotChecked(why) => write!(f, "not checked: {why}"),
        }
    }
}

/// One line of a preflight: a capability, as which group, and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub capability: Capability,
    /// The Kubernetes group the write was sent as (impersonated, or the sweeper's own).
    pub group: String,
    pub verdict: Verdict,
}

impl fmt::Display for Proof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<12} as {}: {} — {}",
            self.capability.as_str(),
            self.group,
            self.capability.what(),
            self.verdict
        )
    }
}

/// What changed between two preflights of one cluster (`before` may be empty: the first run):
/// one line per capability and group whose verdict word or refusing step changed.
pub fn changes(before: &[Proof], after: &[Proof]) -> Vec<String> {
    let key = |p: &Proof| (p.capability, p.group.clone());
    let summary = |v: &Verdict| match v {
        Verdict::Refused { by, .. } => format!("refused by {by}"),
        other => other.word().to_string(),
    };
    after
        .iter()
        .filter_map(|now| {
            let was = before.iter().find(|b| key(b) == key(now));
            let what = format!("{} as {}", now.capability.as_str(), now.group);
            match was.map(|b| summary(&b.verdict)) {
                Some(was) if was == summary(&now.verdict) => None,
                Some(was) => Some(format!("{what}: was {was}, now {}", now.verdict)),
                None => Some(format!("{what}: {}", now.verdict)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_is_a_verdict_of_refused() {
        assert!(Verdict::of_failure(Some(403), "Forbidden", "x").is_refused());
        assert!(Verdict::of_failure(Some(422), "Invalid", "x").is_refused());
        assert!(!Verdict::of_failure(Some(500), "InternalError", "x").is_refused());
        assert!(!Verdict::of_failure(Some(429), "TooManyRequests", "x").is_refused());
        assert!(!Verdict::of_failure(None, "", "timed out").is_refused());
        let side_effects = r#"admission webhook "audit.example.com" does not support dry run"#;
        assert!(!Verdict::of_failure(Some(400), "BadRequest", side_effects).is_refused());
        assert!(
            !Verdict::of_failure(Some(404), "NotFound", r#"pods "web-1" not found"#).is_refused()
        );
        assert!(
            Verdict::of_failure(Some(404), "NotFound", r#"namespaces "forewarn" not found"#)
                .is_refused()
        );
    }

    #[test]
    fn changes_name_what_moved_between_two_preflights() {
        let proof = |capability, verdict| Proof {
            capability,
            group: "forewarn-sweeper".into(),
            verdict,
        };
        let before = vec![
            proof(Capability::Cordon, Verdict::Admitted(None)),
            proof(Capability::Placeholder, Verdict::Admitted(None)),
        ];
        let after = vec![
            proof(
                Capability::Cordon,
                Verdict::Admitted(Some("on node a".into())),
            ),
            proof(
                Capability::Placeholder,
                Verdict::Refused {
                    by: RefusedBy::Webhook("mutate.kyverno.svc".into()),
                    message: "no".into(),
                },
            ),
        ];
        assert_eq!(
            changes(&before, &after),
            vec![
                "placeholder as forewarn-sweeper: was admitted, now refused by admission webhook \"mutate.kyverno.svc\": no"
                    .to_string()
            ]
        );
        assert_eq!(changes(&after, &after), Vec::<String>::new());
        assert_eq!(
            changes(&[], &before).len(),
            2,
            "a first run says everything"
        );
    }
}
