//! What refused a write, read from the API server's answer (the preflight's verdicts built on it
//! are [`crate::domain::preflight`]'s): the words of the admission chain (`k8s.io/apiserver`,
//! `k8s.io/pod-security-admission`, the admission plugins) are the only way a client can tell
//! which step said no.
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
}
