//! `Status` bodies shaped like the ones `k8s.io/apimachinery/pkg/api/errors` builds.

use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

/// An error answer: HTTP code, `Status` body and an optional `Retry-After`.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub body: Value,
    pub retry_after: Option<u32>,
}

/// One field error, as `field.Error` renders it in `details.causes`.
#[derive(Debug, Clone)]
pub(crate) struct FieldError {
    pub field: String,
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: &'static str,
    /// The `ErrorBody()`, e.g. `Required value: name or generateName is required`.
    pub body: String,
}

impl FieldError {
    pub fn required(field: &str, detail: &str) -> Self {
        let body = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            field: field.to_string(),
            reason: "FieldValueRequired",
            body,
        }
    }

    /// `Invalid value: <value>: <detail>`; `value` is already rendered (quoted for strings).
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            field: field.to_string(),
            reason: "FieldValueInvalid",
            body: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// Renders a string value the way Go's `%#v` does: quoted.
    pub fn quote(s: &str) -> String {
        Value::String(s.to_string()).to_string()
    }

    fn message(&self) -> String {
        format!("{}: {}", self.field, self.body)
    }
}

fn failure(code: u16, reason: &str, message: String, details: Option<Value>) -> ApiError {
    let mut body = Map::new();
    body.insert("kind".into(), json!("Status"));
    body.insert("apiVersion".into(), json!("v1"));
    body.insert("metadata".into(), json!({}));
    body.insert("status".into(), json!("Failure"));
    body.insert("message".into(), json!(message));
    if !reason.is_empty() {
        body.insert("reason".into(), json!(reason));
    }
    if let Some(details) = details {
        body.insert("details".into(), details);
    }
    body.insert("code".into(), json!(code));
    ApiError {
        code,
        body: Value::Object(body),
        retry_after: None,
    }
}

fn resource_details(res: &ResourceDef, name: &str) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !res.group.is_empty() {
        d.insert("group".into(), json!(res.group));
    }
    d.insert("kind".into(), json!(res.plural));
    Value::Object(d)
}

/// `errors.NewNotFound`.
pub(crate) fn not_found(res: &ResourceDef, name: &str) -> ApiError {
    failure(
        404,
        "NotFound",
        format!(
            "{} {} not found",
            res.qualified_resource(),
            FieldError::quote(name)
        ),
        Some(resource_details(res, name)),
    )
}

/// The answer for a path the server does not serve.
pub(crate) fn path_not_found() -> ApiError {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource".into(),
        Some(json!({})),
    )
}

/// `errors.NewAlreadyExists`.
pub(crate) fn already_exists(res: &ResourceDef, name: &str) -> ApiError {
    failure(
        409,
        "AlreadyExists",
        format!(
            "{} {} already exists",
            res.qualified_resource(),
            FieldError::quote(name)
        ),
        Some(resource_details(res, name)),
    )
}

/// The message of an optimistic-concurrency failure.
pub(crate) const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// `errors.NewConflict`.
pub(crate) fn conflict(res: &ResourceDef, name: &str, why: &str) -> ApiError {
    failure(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} {}: {why}",
            res.qualified_resource(),
            FieldError::quote(name)
        ),
        Some(resource_details(res, name)),
    )
}

/// `errors.NewBadRequest`.
pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
    failure(400, "BadRequest", message.into(), None)
}

/// `errors.NewInvalid`.
pub(crate) fn invalid(res: &ResourceDef, name: &str, errors: &[FieldError]) -> ApiError {
    let aggregate = match errors {
        [one] => one.message(),
        many => format!(
            "[{}]",
            many.iter()
                .map(FieldError::message)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({ "reason": e.reason, "message": e.body, "field": e.field }))
        .collect();
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !res.group.is_empty() {
        details.insert("group".into(), json!(res.group));
    }
    details.insert("kind".into(), json!(res.kind));
    details.insert("causes".into(), Value::Array(causes));
    failure(
        422,
        "Invalid",
        format!(
            "{} {} is invalid: {aggregate}",
            res.group_kind(),
            FieldError::quote(name)
        ),
        Some(Value::Object(details)),
    )
}

/// `errors.NewGenericServerResponse(422, ...)`, as a failed JSON patch answers.
pub(crate) fn unprocessable() -> ApiError {
    failure(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request".into(),
        Some(json!({})),
    )
}

/// `negotiation.NewUnsupportedMediaTypeError`.
pub(crate) fn unsupported_media_type(accepted: &[&str]) -> ApiError {
    failure(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
        None,
    )
}

/// `errors.NewTooManyRequests`: with `retry_after`, the server also sends `Retry-After`.
pub(crate) fn too_many_requests(
    message: &str,
    retry_after: u32,
    causes: Option<Vec<Value>>,
) -> ApiError {
    let mut details = Map::new();
    if let Some(causes) = causes {
        details.insert("causes".into(), Value::Array(causes));
    }
    if retry_after > 0 {
        details.insert("retryAfterSeconds".into(), json!(retry_after));
    }
    let mut err = failure(
        429,
        "TooManyRequests",
        message.into(),
        Some(Value::Object(details)),
    );
    err.retry_after = (retry_after > 0).then_some(retry_after);
    err
}

/// The answer for a verb the path does not serve.
pub(crate) fn method_not_allowed() -> ApiError {
    failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource".into(),
        Some(json!({})),
    )
}

/// A `Status` with no reason: what the server sends for an error that is not an API
/// status (e.g. "resourceVersion should not be set on objects to be created"), or for a
/// failure `Status` a handler returns as its result (more than one PDB on eviction).
pub(crate) fn plain(code: u16, message: &str) -> ApiError {
    failure(code, "", message.into(), None)
}

/// A `Status` for an arbitrary code, worded like `errors.NewGenericServerResponse`
/// (used for injected faults).
pub(crate) fn for_code(code: u16, server_message: &str) -> ApiError {
    let (reason, message) = match code {
        400 => (
            "BadRequest",
            "the server rejected our request for an unknown reason".to_string(),
        ),
        401 => (
            "Unauthorized",
            "the server has asked for the client to provide credentials".to_string(),
        ),
        403 => ("Forbidden", server_message.to_string()),
        404 => (
            "NotFound",
            "the server could not find the requested resource".to_string(),
        ),
        405 => (
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".to_string(),
        ),
        409 => ("Conflict", "the server reported a conflict".to_string()),
        415 => ("UnsupportedMediaType", server_message.to_string()),
        422 => (
            "Invalid",
            "the server rejected our request due to an error in our request".to_string(),
        ),
        429 => {
            return too_many_requests("Too many requests, please try again later.", 1, None);
        }
        503 => (
            "ServiceUnavailable",
            format!("the server is currently unable to handle the request ({server_message})"),
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still be processing the request".to_string(),
        ),
        c if c >= 500 => (
            "InternalError",
            format!(
                "an error on the server ({}) has prevented the request from succeeding",
                FieldError::quote(server_message)
            ),
        ),
        _ => (
            "",
            format!("the server responded with the status code {code} but did not return more information"),
        ),
    };
    failure(code, reason, message, Some(json!({})))
}

/// A `Status` of `code` with `reason` and `message` as given (an admission denial).
pub(crate) fn for_reason(code: u16, reason: &str, message: String) -> ApiError {
    failure(code, reason, message, Some(json!({})))
}

/// `errors.NewForbidden`, as `admission.NewForbidden` and the PodSecurity plugin build it:
/// `pods "name" is forbidden: <why>` (`pods is forbidden: <why>` without a name).
pub(crate) fn forbidden(res: &ResourceDef, name: &str, why: &str) -> ApiError {
    let message = if name.is_empty() {
        format!("{} is forbidden: {why}", res.qualified_resource())
    } else {
        format!(
            "{} {} is forbidden: {why}",
            res.qualified_resource(),
            FieldError::quote(name)
        )
    };
    failure(403, "Forbidden", message, Some(resource_details(res, name)))
}

/// A webhook's denial: its own status, code, reason (none when empty) and message, no details.
pub(crate) fn webhook_denial(code: u16, reason: &str, message: String) -> ApiError {
    failure(code, reason, message, None)
}

/// `errors.NewInternalError`.
pub(crate) fn internal_error(why: &str) -> ApiError {
    failure(
        500,
        "InternalError",
        format!("Internal error occurred: {why}"),
        Some(json!({"causes": [{"message": why}]})),
    )
}

/// `{"kind":"Status",...,"status":"Success"}` as a successful delete or eviction answers.
pub(crate) fn success(code: Option<u16>, details: Option<Value>) -> Value {
    let mut body = Map::new();
    body.insert("kind".into(), json!("Status"));
    body.insert("apiVersion".into(), json!("v1"));
    body.insert("metadata".into(), json!({}));
    body.insert("status".into(), json!("Success"));
    if let Some(details) = details {
        body.insert("details".into(), details);
    }
    if let Some(code) = code {
        body.insert("code".into(), json!(code));
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    fn node() -> ResourceDef {
        builtin_resources()
            .into_iter()
            .find(|r| r.kind == "Node")
            .unwrap()
    }

    #[test]
    fn not_found_matches_the_real_body() {
        let err = not_found(&node(), "x");
        assert_eq!(err.code, 404);
        assert_eq!(
            err.body,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"nodes \"x\" not found","reason":"NotFound",
                   "details":{"name":"x","kind":"nodes"},"code":404})
        );
    }

    #[test]
    fn conflict_names_the_object() {
        let err = conflict(&node(), "x", MODIFIED);
        assert_eq!(
            err.body["message"],
            "Operation cannot be fulfilled on nodes \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(err.body["reason"], "Conflict");
    }

    #[test]
    fn invalid_aggregates_several_errors() {
        let err = invalid(
            &node(),
            "",
            &[
                FieldError::required("metadata.name", "name or generateName is required"),
                FieldError::invalid("type", "\"\"", "has invalid value: "),
            ],
        );
        assert_eq!(
            err.body["message"],
            "Node \"\" is invalid: [metadata.name: Required value: name or generateName is required, type: Invalid value: \"\": has invalid value: ]"
        );
        assert_eq!(
            err.body["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }

    #[test]
    fn too_many_requests_carries_retry_after() {
        let err = for_code(429, "");
        assert_eq!(err.retry_after, Some(1));
        assert_eq!(err.body["details"]["retryAfterSeconds"], 1);
        let pdb = too_many_requests("no", 0, Some(vec![json!({"reason":"DisruptionBudget"})]));
        assert_eq!(pdb.retry_after, None);
        assert!(pdb.body["details"].get("retryAfterSeconds").is_none());
    }
}
