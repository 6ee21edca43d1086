//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`), enforced as the API server
//! enforces it, with its CEL evaluated by the `cel` crate: what forewarn's admission policies
//! (`infra/k8s/placeholders.yaml`) let its groups do is tested on the policies themselves, not on
//! a hand-written copy of them.
//!
//! Faithful: a policy applies through each stored binding whose `validationActions` hold
//! `Deny`; `matchConstraints.resourceRules` (API groups, versions, operations, resources, `*`),
//! `matchConditions` (all true, or the policy does not apply), `variables` (in order, as
//! `variables.<name>`), `validations` (each must be true); `failurePolicy` (default `Fail`): an
//! expression that errors denies. The request: `object` and `oldObject` (`null` when absent),
//! `request.operation`, `request.namespace`, `request.name`, `request.userInfo.username` and
//! `.groups` — from the `Impersonate-User` and `Impersonate-Group` headers, the only identity the
//! fake knows (it has no authentication: without them a request is `anonymous`, of no group).
//! A denial answers as the real one: `reason` (default `Invalid`, 422; `Forbidden` 403), message
//! `ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`.
//! A `dryRun=All` request is admitted or denied the same way (admission runs, nothing is stored).
//!
//! Its place in the admission chain (the `chain` module): on a create it sees the object after
//! the API defaults, the mutating plugins (`ServiceAccount`, `Priority`,
//! `DefaultTolerationSeconds`) and the mutating webhooks, and after `PodSecurity`; the
//! validating webhooks come after it. So `object` is what would be stored: a pod that states no
//! `spec.serviceAccountName` has `default` by then, as on a real server.
//!
//! Approximated or not implemented: the CEL library is the `cel` crate's, not Kubernetes' (its
//! extension libraries — `quantity`, `url`, `authz`, regex flavours — are missing); CREATE,
//! UPDATE (PUT, PATCH) and DELETE are checked, the `/status` and `/eviction` subresources are
//! not; `namespaceSelector`, `objectSelector`, `excludeResourceRules`, `paramKind`, `auditAnnotations`,
//! `messageExpression` and the binding's `matchResources` are ignored; a policy takes effect
//! as soon as its binding is stored (the real server compiles it within about a second).
//! [`crate::KubeFakeBuilder::admission`]`(false)` turns enforcement off: a cluster where the
//! policies are stored but not enforced.

use serde_json::{Value, json};

use crate::status::{self, ApiError};
use crate::store::Store;

/// Who sent a request: its impersonated user and groups.
#[derive(Debug, Clone, Default)]
pub(crate) struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// From the request's `Impersonate-User` and `Impersonate-Group` headers.
    pub fn from_headers(headers: &axum::http::HeaderMap) -> UserInfo {
        let text = |v: &axum::http::HeaderValue| v.to_str().ok().map(str::to_string);
        UserInfo {
            username: headers
                .get("Impersonate-User")
                .and_then(text)
                .unwrap_or_else(|| "anonymous".into()),
            groups: headers
                .get_all("Impersonate-Group")
                .iter()
                .filter_map(text)
                .collect(),
        }
    }
}

/// One request, as admission sees it.
pub(crate) struct Review<'a> {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    pub idx: usize,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub user: &'a UserInfo,
}

/// Whether any stored binding's policy could apply to `operation` on the kind `idx` (a
/// quick check before an update computes the object it would store).
pub(crate) fn any_applies(store: &Store, operation: &str, idx: usize) -> bool {
    bound_policies(store)
        .iter()
        .any(|(_, policy)| rules_match(policy, store, operation, idx))
}

/// Admits `review`, or the first denial of a policy that applies.
pub(crate) fn admit(store: &Store, review: &Review<'_>) -> Result<(), ApiError> {
    for (binding, policy) in bound_policies(store) {
        if !rules_match(&policy, store, review.operation, review.idx) {
            continue;
        }
        check(&binding, &policy, review)?;
    }
    Ok(())
}

/// Every (binding name, policy) whose binding denies.
fn bound_policies(store: &Store) -> Vec<(String, Value)> {
    let (Some(bindings), Some(policies)) = (
        store.find_kind(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
        ),
        store.find_kind(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
        ),
    ) else {
        return Vec::new();
    };
    store
        .objects_of(bindings, None)
        .filter(|b| {
            b.pointer("/spec/validationActions")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|v| v == "Deny"))
        })
        .filter_map(|b| {
            let name = b.pointer("/metadata/name")?.as_str()?.to_string();
            let policy = b.pointer("/spec/policyName")?.as_str()?;
            Some((name, store.get(policies, None, policy)?))
        })
        .collect()
}

fn listed(rule: &Value, field: &str, want: &str) -> bool {
    rule.get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "*" || v == want))
}

fn rules_match(policy: &Value, store: &Store, operation: &str, idx: usize) -> bool {
    let res = &store.resources[idx];
    policy
        .pointer("/spec/matchConstraints/resourceRules")
        .and_then(Value::as_array)
        .is_some_and(|rules| {
            rules.iter().any(|r| {
                listed(r, "apiGroups", res.group)
                    && listed(r, "apiVersions", res.version)
                    && listed(r, "operations", operation)
                    && listed(r, "resources", res.plural)
            })
        })
}

/// The policy's matchConditions, variables and validations on `review`.
fn check(binding: &str, policy: &Value, review: &Review<'_>) -> Result<(), ApiError> {
    let name = policy
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let fail_open = policy.pointer("/spec/failurePolicy") == Some(&json!("Ignore"));
    let denied = |message: String, reason: &str| -> ApiError {
        let code = if reason == "Forbidden" { 403 } else { 422 };
        let message = format!(
            "ValidatingAdmissionPolicy '{name}' with binding '{binding}' denied request: {message}"
        );
        status::for_reason(code, reason, message)
    };
    let mut ctx = cel::Context::default();
    let null = Value::Null;
    let request = json!({
        "operation": review.operation,
        "namespace": review.namespace.unwrap_or_default(),
        "name": review.name,
        "userInfo": {"username": review.user.username, "groups": review.user.groups},
    });
    for (var, value) in [
        ("object", review.object.unwrap_or(&null)),
        ("oldObject", review.old_object.unwrap_or(&null)),
        ("request", &request),
        ("params", &null),
    ] {
        if let Err(e) = add(&mut ctx, var, value) {
            return Err(denied(format!("{var}: {e}"), "Invalid"));
        }
    }
    let spec = &policy["spec"];
    // An expression that errors denies, unless the policy fails open.
    let eval = |ctx: &cel::Context, expr: &str| -> Result<cel::Value, String> {
        cel::Program::compile(expr)
            .map_err(|e| format!("compilation failed: {e}"))?
            .execute(ctx)
            .map_err(|e| format!("evaluation failed: {e}"))
    };
    for condition in spec["matchConditions"].as_array().into_iter().flatten() {
        let expr = condition["expression"].as_str().unwrap_or_default();
        match eval(&ctx, expr) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => return Ok(()),
            Err(_) if fail_open => return Ok(()),
            Err(e) => return Err(denied(format!("matchCondition {expr}: {e}"), "Invalid")),
        }
    }
    let mut variables = serde_json::Map::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let var = variable["name"].as_str().unwrap_or_default();
        let expr = variable["expression"].as_str().unwrap_or_default();
        match eval(&ctx, expr).and_then(|v| v.json().map_err(|e| e.to_string())) {
            Ok(value) => {
                variables.insert(var.to_string(), value);
            }
            Err(_) if fail_open => return Ok(()),
            Err(e) => return Err(denied(format!("variables.{var}: {e}"), "Invalid")),
        }
        if let Err(e) = add(&mut ctx, "variables", &Value::Object(variables.clone())) {
            return Err(denied(format!("variables: {e}"), "Invalid"));
        }
    }
    for validation in spec["validations"].as_array().into_iter().flatten() {
        let expr = validation["expression"].as_str().unwrap_or_default();
        let reason = validation["reason"].as_str().unwrap_or("Invalid");
        match eval(&ctx, expr) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => {
                let message = validation["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("failed expression: {expr}"));
                return Err(denied(message, reason));
            }
            Err(_) if fail_open => {}
            Err(e) => {
                return Err(denied(
                    format!("expression '{expr}' resulted in error: {e}"),
                    reason,
                ));
            }
        }
    }
    Ok(())
}

fn add(ctx: &mut cel::Context, name: &str, value: &Value) -> Result<(), String> {
    let value = cel::to_value(value).map_err(|e| e.to_string())?;
    ctx.add_variable_from_value(name, value);
    Ok(())
}
