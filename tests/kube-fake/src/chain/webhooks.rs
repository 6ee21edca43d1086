//! Configured admission webhooks (Kyverno, Gatekeeper, EKS Pod Identity and their kin), called
//! in-process instead of over HTTPS: a [`Webhook`] matches requests by resource, operation and
//! namespace and either patches the object (RFC 6902, as a mutating webhook's `patch`) or
//! denies it. A denial is answered as the API server's dispatcher answers one
//! (`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go`,
//! `ToStatusErr`): `admission webhook "NAME" denied the request: MESSAGE`, with the code the
//! webhook gave (400 when it gave none or one below 400) and its reason, if any.

use serde_json::Value;

use crate::status::{self, ApiError};

/// What a webhook does with a request it matches.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookAction {
    /// Admits, with this JSON Patch (RFC 6902) applied to the object (mutating webhooks only;
    /// a validating webhook with a patch admits unchanged).
    Patch(Value),
    /// Denies: the webhook's `status.message`, `status.code` (400 when `None`) and
    /// `status.reason` (none when `None`).
    Deny {
        message: String,
        code: Option<u16>,
        reason: Option<String>,
    },
}

/// One admission webhook, as `KubeFakeBuilder::mutating_webhook` and
/// `KubeFakeBuilder::validating_webhook` take it.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// Its name, e.g. `mutate.kyverno.svc`.
    pub name: String,
    /// The resources it matches (plural names, `*` for all; subresources never match).
    pub resources: Vec<String>,
    /// The operations it matches: `CREATE`, `UPDATE` (`*` for both).
    pub operations: Vec<String>,
    /// Only objects in this namespace (a `namespaceSelector` on `kubernetes.io/metadata.name`);
    /// `None`: every namespace, and cluster-scoped objects.
    pub namespace: Option<String>,
    /// What it does.
    pub action: WebhookAction,
}

impl Webhook {
    /// A webhook applying `patch` (a JSON Patch array) to every pod created.
    pub fn patch(name: impl Into<String>, patch: Value) -> Self {
        Self {
            name: name.into(),
            resources: vec!["pods".into()],
            operations: vec!["CREATE".into()],
            namespace: None,
            action: WebhookAction::Patch(patch),
        }
    }

    /// A webhook denying every pod created with `message` (code 400, no reason).
    pub fn deny(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            resources: vec!["pods".into()],
            operations: vec!["CREATE".into()],
            namespace: None,
            action: WebhookAction::Deny {
                message: message.into(),
                code: None,
                reason: None,
            },
        }
    }

    /// The resources it matches instead of `pods`.
    pub fn resources(mut self, resources: &[&str]) -> Self {
        self.resources = resources.iter().map(|r| (*r).to_string()).collect();
        self
    }

    /// The operations it matches instead of `CREATE`.
    pub fn operations(mut self, operations: &[&str]) -> Self {
        self.operations = operations.iter().map(|o| (*o).to_string()).collect();
        self
    }

    /// Only objects in `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The code of its denial.
    pub fn code(mut self, code: u16) -> Self {
        if let WebhookAction::Deny { code: c, .. } = &mut self.action {
            *c = Some(code);
        }
        self
    }

    /// The reason of its denial, e.g. `Forbidden`.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        if let WebhookAction::Deny { reason: r, .. } = &mut self.action {
            *r = Some(reason.into());
        }
        self
    }

    /// Whether it is called for `operation` on `plural` in `namespace`.
    pub(crate) fn matches(&self, plural: &str, operation: &str, namespace: Option<&str>) -> bool {
        let listed = |list: &[String], want: &str| list.iter().any(|v| v == "*" || v == want);
        listed(&self.resources, plural)
            && listed(&self.operations, operation)
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| namespace == Some(ns))
    }

    /// Its answer: `Ok(Some(patch))` to apply, `Ok(None)` to admit, `Err` for a denial.
    pub(crate) fn call(&self) -> Result<Option<&Value>, ApiError> {
        match &self.action {
            WebhookAction::Patch(patch) => Ok(Some(patch)),
            WebhookAction::Deny {
                message,
                code,
                reason,
            } => {
                let denied_by = format!("admission webhook \"{}\" denied the request", self.name);
                let message = if message.is_empty() {
                    match reason {
                        Some(r) if !r.is_empty() => format!("{denied_by}: {r}"),
                        _ => format!("{denied_by} without explanation"),
                    }
                } else {
                    format!("{denied_by}: {message}")
                };
                let code = code.filter(|c| *c >= 400).unwrap_or(400);
                Err(status::webhook_denial(
                    code,
                    reason.as_deref().unwrap_or(""),
                    message,
                ))
            }
        }
    }
}

/// The webhooks configured, in the order they were added.
#[derive(Debug, Clone, Default)]
pub(crate) struct Webhooks {
    pub mutating: Vec<Webhook>,
    pub validating: Vec<Webhook>,
}
