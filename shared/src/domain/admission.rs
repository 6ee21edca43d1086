//! What refused a write, read from the API server's answer, and the preflight's verdicts: the
//! words of the admission chain (`k8s.io/apiserver`, `k8s.io/pod-security-admission`, the
//! admission plugins) are the only way a client can tell which step said no.
//!
//! The answers this reads, as the real server words them:
//!
//! - RBAC: `pods is forbidden: User "u" cannot create resource "pods" in API group "" in the
//!   namespace "forewarn"` (403);
//! - Pod Security: `pods "p" is forbidden: violates PodSecurity "restricted:latest": ...` (403);
//! - ValidatingAdmissionPolicy: `ValidatingAdmissionPolicy 'name' with binding 'b' denied
//!   request: ...` (422 `Invalid` by default, or the validation's reason);
//! - an admission webhook (Kyverno, Gatekeeper, ...): `admission webhook "name" denied the
//!   request: ...` (its own code, 400 by default);
//! - the Priority and ServiceAccount plugins: `pods "p" is forbidden: no PriorityClass with name
//!   x was found`, `... error looking up service account ns/sa: ...` (403);
//! - ResourceQuota: `... is forbidden: exceeded quota: ...` (403);
//! - the object's own validation: `Event.events.k8s.io "n" is invalid: ...` (422).

use std::fmt;

use strum::{IntoStaticStr, VariantArray};

/// The step of the API server's chain that refused a write.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, strum::Display)]
pub enum RefusedBy {
    /// Authorization: the identity has no grant for the verb.
    #[strum(to_string = "RBAC")]
    Rbac,
    /// Pod Security admission, at the level it names (`restricted:latest`).
    #[strum(to_string = "PodSecurity \"{0}\"")]
    PodSecurity(String),
    /// A ValidatingAdmissionPolicy, by name.
    #[strum(to_string = "ValidatingAdmissionPolicy '{0}'")]
    Policy(String),
    /// An admission webhook (mutating or validating), by name.
    #[strum(to_string = "admission webhook \"{0}\"")]
    Webhook(String),
    /// One of the server's own admission plugins, by name (`Priority`, `ServiceAccount`,
    /// `ResourceQuota`, `NamespaceLifecycle`).
    #[strum(to_string = "the {0} admission plugin")]
    Plugin(&'static str),
    /// The object's own validation (a field the API refuses).
    #[strum(to_string = "the API's validation")]
    Validation,
    /// Anything else: the answer's code and reason, as the server gave them (`415
    /// UnsupportedMediaType`, or the code alone when it gave no reason).
    #[strum(to_string = "the API server ({0})")]
    Server(String),
}

/// The text between the first pair of `open`/`close` after `marker`.
fn quoted<'a>(message: &'a str, marker: &str, quote: char) -> Option<&'a str> {
    let rest = &message[message.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix(quote)?;
    Some(&rest[..rest.find(quote)?])
}

/// Which step refused a write answered `code` (`reason`, `message`): see the module's list.
pub fn refused_by(code: u16, reason: &str, message: &str) -> RefusedBy {
    if let Some(name) = quoted(message, "ValidatingAdmissionPolicy ", '\'') {
        return RefusedBy::Policy(name.to_string());
    }
    if let Some(name) = quoted(message, "admission webhook ", '"') {
        return RefusedBy::Webhook(name.to_string());
    }
    if let Some(level) = quoted(message, "violates PodSecurity ", '"') {
        return RefusedBy::PodSecurity(level.to_string());
    }
    if code == 403 && message.contains("is forbidden: User ") && message.contains(" cannot ") {
        return RefusedBy::Rbac;
    }
    for (words, plugin) in [
        ("no PriorityClass with name", "Priority"),
        ("must not be provided in pod spec", "Priority"),
        ("error looking up service account", "ServiceAccount"),
        ("exceeded quota", "ResourceQuota"),
        ("because it is being terminated", "NamespaceLifecycle"),
    ] {
        if message.contains(words) {
            return RefusedBy::Plugin(plugin);
        }
    }
    if code == 404 && message.starts_with("namespaces ") {
        return RefusedBy::Plugin("NamespaceLifecycle");
    }
    if code == 422 && reason == "Invalid" {
        return RefusedBy::Validation;
    }
    RefusedBy::Server(format!("{code} {reason}").trim_end().to_string())
}

/// Whether an answer of `code` is a refusal of the write itself (the chain said no), rather
/// than a failure that may pass (500, 429, a timeout has no code).
pub fn is_refusal(code: u16) -> bool {
    matches!(code, 400 | 403 | 404 | 415 | 422)
}

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
    fn each_step_of_the_chain_is_named_from_its_own_words() {
        let cases = [
            (
                403,
                "Forbidden",
                r#"pods "forewarn-placeholder-u" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "placeholder" must set securityContext.allowPrivilegeEscalation=false)"#,
                RefusedBy::PodSecurity("restricted:latest".into()),
            ),
            (
                422,
                "Invalid",
                "ValidatingAdmissionPolicy 'forewarn-placeholders-only' with binding 'forewarn-placeholders-only' denied request: forewarn may create placeholder pods only",
                RefusedBy::Policy("forewarn-placeholders-only".into()),
            ),
            (
                400,
                "BadRequest",
                r#"admission webhook "validate.kyverno.svc-fail" denied the request: policy Pod/forewarn/x for resource violation"#,
                RefusedBy::Webhook("validate.kyverno.svc-fail".into()),
            ),
            (
                403,
                "Forbidden",
                r#"pods is forbidden: User "forewarn-check" cannot create resource "pods" in API group "" in the namespace "forewarn""#,
                RefusedBy::Rbac,
            ),
            (
                403,
                "Forbidden",
                r#"pods "x" is forbidden: no PriorityClass with name forewarn-placeholder was found"#,
                RefusedBy::Plugin("Priority"),
            ),
            (
                403,
                "Forbidden",
                r#"pods "x" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10"#,
                RefusedBy::Plugin("ResourceQuota"),
            ),
            (
                404,
                "NotFound",
                r#"namespaces "forewarn" not found"#,
                RefusedBy::Plugin("NamespaceLifecycle"),
            ),
            (
                422,
                "Invalid",
                r#"Event.events.k8s.io "n" is invalid: note: Too long"#,
                RefusedBy::Validation,
            ),
            (
                415,
                "UnsupportedMediaType",
                "the body",
                RefusedBy::Server("415 UnsupportedMediaType".into()),
            ),
        ];
        for (code, reason, message, want) in cases {
            assert_eq!(refused_by(code, reason, message), want, "{message}");
        }
        assert_eq!(
            RefusedBy::PodSecurity("restricted:latest".into()).to_string(),
            "PodSecurity \"restricted:latest\""
        );
    }

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
