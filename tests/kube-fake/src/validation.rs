//! The parts of the real server's validation that forewarn can run into.
//!
//! * `metadata.name`: required (unless `generateName` is set) and, except for
//!   core/v1 Events, a lowercase RFC 1123 subdomain.
//! * Events: `ValidateEventCreate` of `k8s.io/kubernetes/pkg/apis/core/validation`,
//!   the legacy rules for core/v1 and the strict ones for events.k8s.io/v1. The
//!   events.k8s.io/v1 fields are mapped to the internal names the real
//!   validation uses (`regarding` is `involvedObject`, `note` is `message`, ...),
//!   but the error paths keep the real server's wording.
//! * Pods, on create: each container's and init container's resources as
//!   `validateResourceRequirements` of `pkg/apis/core/validation/validation.go` checks them
//!   against each other (see [`pod_resource_errors`]), after the API defaults (a limit
//!   without a request is its request, `chain::defaults`).

use serde_json::Value;

use crate::quantity::parse_milli;
use crate::resources::ResourceDef;
use crate::status::FieldError;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `validation.IsDNS1123Subdomain` without the length message.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn is_set(obj: &Value, pointer: &str) -> bool {
    !matches!(obj.pointer(pointer), None | Some(Value::Null))
        && obj.pointer(pointer) != Some(&Value::String(String::new()))
}

/// `validation.IsQualifiedName`, reduced to the messages a controller name can trigger.
fn qualified_name_errors(value: &str) -> Vec<&'static str> {
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push("name part must be non-empty");
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters");
    }
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !name_ok {
        errs.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
    }
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        errs.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    }
    errs
}

fn is_core_event(res: &ResourceDef) -> bool {
    res.group.is_empty() && res.kind == "Event"
}

fn is_events_v1(res: &ResourceDef) -> bool {
    res.group == "events.k8s.io" && res.kind == "Event"
}

/// Validation run on create and update. `obj` already carries its final name and namespace.
pub(crate) fn validate(res: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(obj, "/metadata/name");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if !is_core_event(res) && !is_dns1123_subdomain(name) {
        errs.push(FieldError::invalid(
            "metadata.name",
            &FieldError::quote(name),
            DNS1123_SUBDOMAIN_MSG,
        ));
    } else if is_core_event(res)
        && (name.contains('/') || name.contains('%') || name == "." || name == "..")
    {
        errs.push(FieldError::invalid(
            "metadata.name",
            &FieldError::quote(name),
            "may not contain '/' or '%'",
        ));
    }
    if is_core_event(res) {
        errs.extend(validate_event(obj, false));
    } else if is_events_v1(res) {
        errs.extend(validate_event(obj, true));
    }
    errs
}

/// Validation run on create: [`validate`], and for a Pod its containers' resources
/// ([`pod_resource_errors`]). Not on updates: a pod's resources do not change in the fake
/// (no in-place resize), and objects seeded as given stay writable.
pub(crate) fn validate_create(res: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let mut errs = validate(res, obj);
    if res.group.is_empty() && res.kind == "Pod" {
        errs.extend(pod_resource_errors(obj));
    }
    errs
}

/// `IsOvercommitAllowed` (`pkg/apis/core/helper/helpers.go`): a native resource (no domain,
/// or one in `kubernetes.io/`) that is not hugepages. Extended resources (`nvidia.com/gpu`,
/// `aws.amazon.com/neuron`, ...) and `hugepages-<size>` are not.
pub(crate) fn overcommit_allowed(resource: &str) -> bool {
    let native = !resource.contains('/') || resource.contains("kubernetes.io/");
    native && !resource.starts_with("hugepages-")
}

/// A quantity of a resource list as text (a seed may hold a bare number).
fn quantity_text(q: &Value) -> String {
    match q {
        Value::String(s) => s.trim().to_string(),
        other => other.to_string(),
    }
}

/// The resources of every container, then every init container (the real order:
/// `validateContainers`, then `validateInitContainers`), as `validateResourceRequirements`
/// checks a request against its limit:
///
/// * a non-overcommitable resource ([`overcommit_allowed`]) requested without a limit:
///   `spec.containers[0].resources.limits: Required value: Limit must be set for non
///   overcommitable resources` (the path is the `limits` map, not the resource's key);
/// * one whose request differs from its limit: `spec.containers[0].resources.requests:
///   Invalid value: "4": must be equal to nvidia.com/gpu limit of 8`;
/// * any other whose request is above its limit: `... must be less than or equal to cpu limit
///   of 1`.
///
/// Requests are read after the API defaults, which copy a limit to a missing request: a pod
/// that states its GPUs as limits only passes. Resources are checked in name order (the real
/// server walks a Go map); quantities are compared in thousandths and written as the pod
/// states them (the real server writes their canonical form, the same for whole numbers such
/// as a GPU count).
pub(crate) fn pod_resource_errors(pod: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for list in ["containers", "initContainers"] {
        let containers = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array);
        for (i, c) in containers.into_iter().flatten().enumerate() {
            let path = format!("spec.{list}[{i}].resources");
            errs.extend(requirement_errors(c.get("resources"), &path));
        }
    }
    errs
}

/// The request-against-limit rules of one container's `resources` (at `path`).
fn requirement_errors(resources: Option<&Value>, path: &str) -> Vec<FieldError> {
    let list = |key: &str| {
        resources
            .and_then(|r| r.get(key))
            .and_then(Value::as_object)
    };
    let (Some(requests), limits) = (list("requests"), list("limits")) else {
        return Vec::new();
    };
    let mut names: Vec<&String> = requests.keys().collect();
    names.sort();
    let mut errs = Vec::new();
    for name in names {
        let request = quantity_text(&requests[name]);
        let Some(limit) = limits.and_then(|l| l.get(name)).map(quantity_text) else {
            if !overcommit_allowed(name) {
                errs.push(FieldError::required(
                    &format!("{path}.limits"),
                    "Limit must be set for non overcommitable resources",
                ));
            }
            continue;
        };
        let (Some(req), Some(lim)) = (parse_milli(&request), parse_milli(&limit)) else {
            continue;
        };
        let detail = if req != lim && !overcommit_allowed(name) {
            format!("must be equal to {name} limit of {limit}")
        } else if req > lim {
            format!("must be less than or equal to {name} limit of {limit}")
        } else {
            continue;
        };
        errs.push(FieldError::invalid(
            &format!("{path}.requests"),
            &FieldError::quote(&request),
            &detail,
        ));
    }
    errs
}

/// `ValidateEventCreate`: `strict` for events.k8s.io/v1.
fn validate_event(obj: &Value, strict: bool) -> Vec<FieldError> {
    let mut errs = legacy_event_errors(obj, strict);
    if strict {
        errs.extend(strict_event_errors(obj, is_set(obj, "/eventTime")));
    }
    errs
}

/// `legacyValidateEvent`, and the namespace's name: the rules of both wire formats (`strict`:
/// events.k8s.io/v1's field names).
fn legacy_event_errors(obj: &Value, strict: bool) -> Vec<FieldError> {
    // Field pointers of the internal fields, for each wire format.
    let (involved_ns, reporting_controller, message) = if strict {
        ("/regarding/namespace", "/reportingController", "/note")
    } else {
        (
            "/involvedObject/namespace",
            "/reportingComponent",
            "/message",
        )
    };
    let mut errs = Vec::new();
    let namespace = str_at(obj, "/metadata/namespace");
    let involved_namespace = str_at(obj, involved_ns);
    let has_event_time = is_set(obj, "/eventTime");

    // legacyValidateEvent
    if !has_event_time {
        let mismatch = if involved_namespace.is_empty() {
            !namespace.is_empty() && namespace != "default"
        } else {
            namespace != involved_namespace
        };
        if mismatch {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                &FieldError::quote(involved_namespace),
                "does not match event.namespace",
            ));
        }
    } else {
        if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                &FieldError::quote(involved_namespace),
                "does not match event.namespace",
            ));
        }
        errs.extend(reporting_errors(obj, reporting_controller, message));
    }
    if !namespace.is_empty() && !is_dns1123_subdomain(namespace) {
        errs.push(FieldError::invalid(
            "namespace",
            &FieldError::quote(namespace),
            DNS1123_SUBDOMAIN_MSG,
        ));
    }
    errs
}

/// The fields of an Event with an `eventTime`: who reported it (`reporting_controller`: the
/// pointer of the controller's field in this wire format), its action and reason, and the
/// length of its message (at `message`).
fn reporting_errors(obj: &Value, reporting_controller: &str, message: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let controller = str_at(obj, reporting_controller);
    if controller.is_empty() {
        errs.push(FieldError::required("reportingController", ""));
    }
    for msg in qualified_name_errors(controller) {
        errs.push(FieldError::invalid(
            "reportingController",
            &FieldError::quote(controller),
            msg,
        ));
    }
    let instance = str_at(obj, "/reportingInstance");
    if instance.is_empty() {
        errs.push(FieldError::required("reportingInstance", ""));
    }
    if instance.len() > 128 {
        errs.push(FieldError::invalid(
            "reportingInstance",
            "\"\"",
            "can have at most 128 characters",
        ));
    }
    let action = str_at(obj, "/action");
    if action.is_empty() {
        errs.push(FieldError::required("action", ""));
    }
    if action.len() > 128 {
        errs.push(FieldError::invalid(
            "action",
            "\"\"",
            "can have at most 128 characters",
        ));
    }
    let reason = str_at(obj, "/reason");
    if reason.is_empty() {
        errs.push(FieldError::required("reason", ""));
    }
    if reason.len() > 128 {
        errs.push(FieldError::invalid(
            "reason",
            "\"\"",
            "can have at most 128 characters",
        ));
    }
    if str_at(obj, message).len() > 1024 {
        errs.push(FieldError::invalid(
            "message",
            "\"\"",
            "can have at most 1024 characters",
        ));
    }
    errs
}

/// The strict rules of events.k8s.io/v1 (`has_event_time`: the Event has an `eventTime`).
fn strict_event_errors(obj: &Value, has_event_time: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    // The strict rules of events.k8s.io/v1.
    if let Some(series) = obj.get("series").filter(|s| !s.is_null()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                "\"\"",
                "should be at least 2",
            ));
        }
        if !is_set(series, "/lastObservedTime") {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    if !has_event_time {
        errs.push(FieldError::required("eventTime", ""));
    }
    let event_type = str_at(obj, "/type");
    if event_type != "Normal" && event_type != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            "\"\"",
            &format!("has invalid value: {event_type}"),
        ));
    }
    if is_set(obj, "/deprecatedFirstTimestamp") {
        errs.push(FieldError::invalid(
            "firstTimestamp",
            "\"\"",
            "needs to be unset",
        ));
    }
    if is_set(obj, "/deprecatedLastTimestamp") {
        errs.push(FieldError::invalid(
            "lastTimestamp",
            "\"\"",
            "needs to be unset",
        ));
    }
    if obj
        .get("deprecatedCount")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        != 0
    {
        errs.push(FieldError::invalid("count", "\"\"", "needs to be unset"));
    }
    if is_set(obj, "/deprecatedSource/component") || is_set(obj, "/deprecatedSource/host") {
        errs.push(FieldError::invalid("source", "\"\"", "needs to be unset"));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;
    use serde_json::json;

    fn res(kind: &str, group: &str) -> ResourceDef {
        builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind && r.group == group)
            .unwrap()
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn non_overcommitable_requests_need_an_equal_limit() {
        let pod = |resources: Value| {
            json!({"metadata": {"name": "p"}, "spec": {
                "initContainers": [{"name": "i", "resources": {"requests": {"hugepages-2Mi": "2Mi"},
                    "limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}}}],
                "containers": [{"name": "c", "resources": resources}]}})
        };
        let errs = validate_create(
            &res("Pod", ""),
            &pod(json!({"requests": {"nvidia.com/gpu": "8", "cpu": "2"},
                        "limits": {"cpu": "1"}})),
        );
        let got: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.field.as_str(), e.body.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.containers[0].resources.requests",
                    "Invalid value: \"2\": must be less than or equal to cpu limit of 1"
                ),
                (
                    "spec.containers[0].resources.limits",
                    "Required value: Limit must be set for non overcommitable resources"
                ),
                (
                    "spec.initContainers[0].resources.requests",
                    "Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi"
                ),
            ]
        );
        // Equal quantities in other forms, overcommitted cpu and memory, a limit alone.
        let fine = pod(
            json!({"requests": {"aws.amazon.com/neuron": "1", "cpu": "500m",
                                           "memory": "1Gi"},
                              "limits": {"aws.amazon.com/neuron": "1000m", "cpu": "1",
                                         "memory": "2Gi", "nvidia.com/gpu": "1"}}),
        );
        let errs = pod_resource_errors(&fine);
        assert_eq!(fields(&errs), ["spec.initContainers[0].resources.requests"]);
        assert!(validate(&res("Pod", ""), &fine).is_empty(), "create only");
        assert!(overcommit_allowed("ephemeral-storage"));
        assert!(overcommit_allowed("example.kubernetes.io/thing"));
        assert!(!overcommit_allowed("hugepages-1Gi"));
        assert!(!overcommit_allowed("vpc.amazonaws.com/pod-eni"));
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        assert!(is_dns1123_subdomain("ip-10-0-0-1.ec2.internal"));
        assert!(!is_dns1123_subdomain("Bad_Name"));
        assert!(!is_dns1123_subdomain("-a"));
        let errs = validate(&res("Node", ""), &json!({"metadata": {"name": "Bad"}}));
        assert_eq!(fields(&errs), ["metadata.name"]);
        let errs = validate(&res("Node", ""), &json!({"metadata": {}}));
        assert_eq!(
            errs[0].body,
            "Required value: name or generateName is required"
        );
    }

    #[test]
    fn core_event_about_a_node_belongs_in_default() {
        let ev = |ns: &str| {
            json!({"metadata": {"name": "n1.abc", "namespace": ns},
                   "involvedObject": {"kind": "Node", "name": "n1"},
                   "reason": "SpotInterruption", "source": {"component": "forewarn"}})
        };
        assert!(validate(&res("Event", ""), &ev("default")).is_empty());
        assert_eq!(
            fields(&validate(&res("Event", ""), &ev("forewarn"))),
            ["involvedObject.namespace"]
        );
    }

    #[test]
    fn core_event_with_event_time_needs_reporting_fields() {
        let ev = json!({"metadata": {"name": "e", "namespace": "default"},
                        "involvedObject": {"kind": "Node", "name": "n1"},
                        "eventTime": "2024-01-01T00:00:00.000000Z"});
        let errs = validate(&res("Event", ""), &ev);
        assert_eq!(
            fields(&errs),
            [
                "reportingController",
                "reportingController",
                "reportingController",
                "reportingInstance",
                "action",
                "reason"
            ]
        );
        assert_eq!(errs[0].body, "Required value");
    }

    #[test]
    fn events_v1_strict_rules() {
        let good = json!({"metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "forewarn.io/drainer",
            "reportingInstance": "forewarn-0", "action": "Drain", "reason": "SpotInterruption",
            "type": "Warning", "regarding": {"kind": "Node", "name": "n1"}});
        assert!(validate(&res("Event", "events.k8s.io"), &good).is_empty());
        let bad = json!({"metadata": {"name": "e", "namespace": "default"}, "type": "Bad",
            "deprecatedCount": 3});
        assert_eq!(
            fields(&validate(&res("Event", "events.k8s.io"), &bad)),
            ["eventTime", "type", "count"]
        );
    }
}
