//! The real API server's admission chain for a create, and the validating half of it for an
//! update, in the server's order:
//!
//! 1. decode and API defaults (`pkg/apis/core/v1/defaults.go`, see [`defaults`]);
//! 2. mutating admission, in the order of `AllOrderedPlugins`
//!    (`pkg/kubeapiserver/options/plugins.go`): `ServiceAccount`, `Priority`,
//!    `DefaultTolerationSeconds` (see [`plugins`]), then the configured mutating webhooks
//!    (see [`webhooks`]);
//! 3. the object's own validation (`validation.rs`), after `generateName` is resolved;
//! 4. validating admission, in the same order: `ServiceAccount` (the account must exist),
//!    `PodSecurity` (see [`pod_security`]), `ValidatingAdmissionPolicy` (`admission.rs`), then
//!    the configured validating webhooks;
//! 5. storage (nothing is stored with `dryRun=All`, which runs all of the above).
//!
//! The object stored and answered is the mutated one. The chain runs for every create through
//! the HTTP API (its pod plugins for pods only); objects seeded with `KubeFake::insert` are
//! stored as given.
//!
//! On an update (PUT or PATCH of the object itself, not `/status`), the validating half runs on
//! the object the write would store: `PodSecurity` when the update is significant (see
//! [`pod_security::significant_update`]), ValidatingAdmissionPolicies and the validating
//! webhooks matching `UPDATE`. Approximated: mutating webhooks and plugins do not run on
//! updates (the real `DefaultTolerationSeconds` and `Priority` plugins also mutate updates,
//! keeping what the create set), webhooks are never reinvoked (`reinvocationPolicy`), and an
//! admission message names a `generateName` pod by its prefix.

pub(crate) mod defaults;
pub(crate) mod plugins;
pub(crate) mod pod_security;
pub(crate) mod webhooks;

use serde_json::Value;

use crate::admission::{self, Review, UserInfo};
use crate::resources::ResourceDef;
use crate::status::{self, ApiError};
use crate::store::{Store, meta_str};

/// What the plugins know of a request.
pub(crate) struct Attributes<'a> {
    pub res: ResourceDef,
    pub idx: usize,
    /// Empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// The object's name, or its `generateName` prefix before one is generated.
    pub name: String,
}

impl Attributes<'_> {
    /// `admission.NewForbidden`: `pods "name" is forbidden: <why>`.
    pub fn forbidden(&self, why: &str) -> ApiError {
        status::forbidden(&self.res, &self.name, why)
    }

    fn is_pod(&self) -> bool {
        self.res.group.is_empty() && self.res.kind == "Pod"
    }
}

/// A create, as the collection handler hands it over.
pub(crate) struct Create<'a> {
    pub idx: usize,
    pub namespace: Option<&'a str>,
    /// Who sent it, when ValidatingAdmissionPolicies are enforced.
    pub user: Option<&'a UserInfo>,
    pub dry_run: bool,
}

fn name_or_prefix(obj: &Value) -> String {
    meta_str(obj, "name")
        .filter(|n| !n.is_empty())
        .or_else(|| meta_str(obj, "generateName"))
        .unwrap_or_default()
        .to_string()
}

/// A create through the whole chain: what is stored (or, dry, would be), or the refusal.
pub(crate) fn create(
    store: &mut Store,
    req: &Create<'_>,
    mut obj: Value,
) -> Result<Value, ApiError> {
    store.decode_create(req.idx, req.namespace, &mut obj)?;
    let res = store.resources[req.idx].clone();
    let namespace = req.namespace.unwrap_or_default();
    let attrs = Attributes {
        idx: req.idx,
        namespace: if res.namespaced { namespace } else { "" },
        name: name_or_prefix(&obj),
        res,
    };
    if attrs.is_pod() {
        defaults::deprecated_service_account(&mut obj);
        defaults::pod(&mut obj);
        plugins::service_account_admit(store, &attrs, &mut obj)?;
        plugins::priority_admit(store, &attrs, &mut obj)?;
        plugins::default_toleration_seconds(&mut obj)?;
        defaults::deprecated_service_account(&mut obj);
    } else if attrs.res.group.is_empty() && attrs.res.kind == "Namespace" {
        defaults::namespace(&mut obj);
    }
    mutating_webhooks(store, &attrs, &mut obj)?;
    if attrs.is_pod() {
        defaults::deprecated_service_account(&mut obj);
    }
    store.generate_name(&mut obj);
    store.validate_object(req.idx, &obj)?;
    validating(store, &attrs, &obj, None, req.user)?;
    store.create(req.idx, req.namespace, obj, req.dry_run)
}

/// The configured mutating webhooks matching a create, in order, each seeing the object as
/// the previous one left it.
fn mutating_webhooks(
    store: &Store,
    attrs: &Attributes<'_>,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let ns = (!attrs.namespace.is_empty()).then_some(attrs.namespace);
    for hook in &store.webhooks.mutating {
        if !hook.matches(attrs.res.plural, "CREATE", ns) {
            continue;
        }
        if let Some(patch) = hook.call()? {
            *obj = crate::patch::json_patch(obj, patch).map_err(|e| {
                let (crate::patch::PatchFailure::BadRequest(why)
                | crate::patch::PatchFailure::Unprocessable(why)) = e;
                status::internal_error(&format!(
                    "JSON Patch of admission webhook \"{}\" failed: {why}",
                    hook.name
                ))
            })?;
        }
    }
    Ok(())
}

/// The PodSecurity level of a namespace: its stored labels' (`privileged` when not stored).
fn namespace_policy(store: &Store, namespace: &str) -> pod_security::Policy {
    let ns = store
        .find_kind("v1", "Namespace")
        .and_then(|idx| store.get(idx, None, namespace));
    pod_security::Policy::from_labels(ns.as_ref().and_then(|n| n.pointer("/metadata/labels")))
}

/// Validating admission of a create (`old` is `None`) or an update.
fn validating(
    store: &Store,
    attrs: &Attributes<'_>,
    obj: &Value,
    old: Option<&Value>,
    user: Option<&UserInfo>,
) -> Result<(), ApiError> {
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    if attrs.is_pod() {
        if old.is_none() {
            plugins::service_account_validate(store, attrs, obj)?;
        }
        if old.is_none_or(|old| pod_security::significant_update(obj, old)) {
            let policy = namespace_policy(store, attrs.namespace);
            if let Some(why) = pod_security::denial(policy, obj) {
                return Err(attrs.forbidden(&why));
            }
        }
    }
    if let Some(user) = user {
        let review = Review {
            operation,
            idx: attrs.idx,
            namespace: (!attrs.namespace.is_empty()).then_some(attrs.namespace),
            name: meta_str(obj, "name").unwrap_or_default(),
            object: Some(obj),
            old_object: old,
            user,
        };
        admission::admit(store, &review)?;
    }
    let ns = (!attrs.namespace.is_empty()).then_some(attrs.namespace);
    for hook in &store.webhooks.validating {
        if hook.matches(attrs.res.plural, operation, ns) {
            hook.call()?;
        }
    }
    Ok(())
}

/// Whether an update of the kind `idx` in `namespace` goes through any validating admission
/// (so that the object it would store must be computed first).
pub(crate) fn update_is_checked(
    store: &Store,
    idx: usize,
    namespace: Option<&str>,
    user: Option<&UserInfo>,
) -> bool {
    let res = &store.resources[idx];
    let pod_security = res.group.is_empty()
        && res.kind == "Pod"
        && namespace_policy(store, namespace.unwrap_or_default()).level
            != pod_security::Level::Privileged;
    pod_security
        || (user.is_some() && admission::any_applies(store, "UPDATE", idx))
        || store
            .webhooks
            .validating
            .iter()
            .any(|h| h.matches(res.plural, "UPDATE", namespace))
}

/// Validating admission of an update of `old` into `new`.
pub(crate) fn validate_update(
    store: &Store,
    idx: usize,
    namespace: Option<&str>,
    (new, old): (&Value, &Value),
    user: Option<&UserInfo>,
) -> Result<(), ApiError> {
    let res = store.resources[idx].clone();
    let attrs = Attributes {
        idx,
        namespace: namespace.unwrap_or_default(),
        name: meta_str(new, "name").unwrap_or_default().to_string(),
        res,
    };
    validating(store, &attrs, new, Some(old), user)
}
