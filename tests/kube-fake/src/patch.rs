//! The three patch types the fake accepts.
//!
//! * JSON merge patch (RFC 7386) and JSON patch (RFC 6902, `test` included)
//!   come from the `json-patch` crate.
//! * Strategic merge patch is implemented here: maps merge like a merge patch;
//!   a list merges only when the type declares a `patchStrategy` for it
//!   ([`ResourceDef::list_merge`]), otherwise it is replaced whole (Node
//!   `spec.taints` is such an atomic list on the real server). The directives
//!   `$patch: replace|delete` (on maps and keyed list elements), `$retainKeys`
//!   and `$deleteFromPrimitiveList/<field>` are honoured; `$setElementOrder/<field>`
//!   is accepted and ignored.

use serde_json::{Map, Value};

use crate::resources::{ListMerge, ResourceDef};

/// Why a patch could not be applied.
#[derive(Debug)]
pub(crate) enum PatchFailure {
    /// The patch document itself is malformed (400).
    BadRequest(String),
    /// The patch is well formed but cannot be applied, e.g. a failed `test` (422).
    Unprocessable(String),
}

/// Applies an RFC 6902 JSON patch.
pub(crate) fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchFailure> {
    let patch: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchFailure::BadRequest(e.to_string()))?;
    let mut doc = target.clone();
    json_patch::patch(&mut doc, &patch.0)
        .map_err(|e| PatchFailure::Unprocessable(e.to_string()))?;
    Ok(doc)
}

/// Applies an RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchFailure> {
    if !patch.is_object() {
        return Err(PatchFailure::BadRequest(
            "json: cannot unmarshal a non-object into a merge patch".into(),
        ));
    }
    let mut doc = target.clone();
    json_patch::merge(&mut doc, patch);
    Ok(doc)
}

/// Applies a strategic merge patch using the list strategies of `res`.
pub(crate) fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    res: &ResourceDef,
) -> Result<Value, PatchFailure> {
    let Value::Object(patch) = patch else {
        return Err(PatchFailure::BadRequest(
            "strategic merge patch must be a JSON object".into(),
        ));
    };
    let mut doc = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(&mut doc, patch, "", res)?;
    Ok(Value::Object(doc))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Removes every `$...` directive, recursively, from a value being inserted as-is.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &str,
    res: &ResourceDef,
) -> Result<(), PatchFailure> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = match strip_directives(&Value::Object(patch.clone())) {
                Value::Object(m) => m,
                _ => unreachable!("an object stays an object"),
            };
            return Ok(());
        }
        Some("delete") => {
            target.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchFailure::BadRequest(format!(
                "unknown patch type: {other} in map: {}",
                Value::Object(patch.clone())
            )));
        }
    }

    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = target.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
        }
    }

    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        let child_path = join(path, key);
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(child) => {
                if child.get("$patch").and_then(Value::as_str) == Some("delete") {
                    target.remove(key);
                    continue;
                }
                match target.get_mut(key) {
                    Some(Value::Object(existing)) => merge_map(existing, child, &child_path, res)?,
                    _ => {
                        let mut fresh = Map::new();
                        merge_map(&mut fresh, child, &child_path, res)?;
                        target.insert(key.clone(), Value::Object(fresh));
                    }
                }
            }
            Value::Array(items) => {
                let merged = match (res.list_strategy(&child_path), target.remove(key)) {
                    (Some(ListMerge::Key(merge_key)), Some(Value::Array(existing))) => {
                        merge_keyed_list(existing, items, merge_key, &child_path, res)?
                    }
                    (Some(ListMerge::Set), Some(Value::Array(mut existing))) => {
                        for item in items {
                            if !existing.contains(item) {
                                existing.push(item.clone());
                            }
                        }
                        existing
                    }
                    _ => match strip_directives(value) {
                        Value::Array(items) => items,
                        _ => unreachable!("an array stays an array"),
                    },
                };
                target.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                target.insert(key.clone(), scalar.clone());
            }
        }
    }

    if let Some(retain) = patch.get("$retainKeys") {
        let Some(keep) = retain.as_array() else {
            return Err(PatchFailure::BadRequest(
                "$retainKeys must be a list of strings".into(),
            ));
        };
        target.retain(|k, _| keep.iter().any(|r| r.as_str() == Some(k.as_str())));
    }
    Ok(())
}

fn merge_keyed_list(
    mut existing: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    path: &str,
    res: &ResourceDef,
) -> Result<Vec<Value>, PatchFailure> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect());
    }
    for item in patch {
        let Value::Object(item) = item else {
            return Err(PatchFailure::BadRequest(format!(
                "expected a map in the list {path} merged by {merge_key}, got {item}"
            )));
        };
        let key_value = item.get(merge_key).ok_or_else(|| {
            PatchFailure::BadRequest(format!(
                "map: {} does not contain declared merge key: {merge_key}",
                Value::Object(item.clone())
            ))
        })?;
        let position = existing
            .iter()
            .position(|e| e.get(merge_key) == Some(key_value));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let Value::Object(target) = &mut existing[i] {
                    merge_map(target, item, path, res)?;
                }
            }
            (None, false) => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, item, path, res)?;
                existing.push(Value::Object(fresh));
            }
        }
    }
    Ok(existing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;
    use serde_json::json;

    fn res(kind: &str) -> ResourceDef {
        builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap()
    }

    #[test]
    fn strategic_patch_replaces_atomic_taints_and_keeps_other_fields() {
        let node = json!({"metadata": {"name": "n", "labels": {"a": "1"}},
            "spec": {"providerID": "aws:///i-1", "taints": [{"key": "old", "effect": "NoSchedule"}]}});
        let out = strategic_merge_patch(
            &node,
            &json!({"spec": {"unschedulable": true, "taints": [{"key": "new", "effect": "NoExecute"}]}}),
            &res("Node"),
        )
        .unwrap();
        assert_eq!(
            out["spec"],
            json!({"providerID": "aws:///i-1", "unschedulable": true,
                   "taints": [{"key": "new", "effect": "NoExecute"}]})
        );
        assert_eq!(out["metadata"]["labels"]["a"], "1");
    }

    #[test]
    fn strategic_patch_merges_conditions_by_type() {
        let node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}});
        let out = strategic_merge_patch(
            &node,
            &json!({"status": {"conditions": [
                {"type": "Ready", "status": "False"}, {"type": "Custom", "status": "True"},
                {"type": "DiskPressure", "$patch": "delete"}]}}),
            &res("Node"),
        )
        .unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "Custom", "status": "True"}])
        );
    }

    #[test]
    fn strategic_patch_unions_finalizers_and_honours_directives() {
        let obj = json!({"metadata": {"finalizers": ["a"], "annotations": {"x": "1", "y": "2"}},
                         "spec": {"a": 1, "b": 2}});
        let out = strategic_merge_patch(
            &obj,
            &json!({"metadata": {"finalizers": ["b"], "annotations": {"x": null},
                                 "$deleteFromPrimitiveList/finalizers": ["a"]},
                    "spec": {"$retainKeys": ["b"], "b": 3}}),
            &res("Pod"),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["metadata"]["annotations"], json!({"y": "2"}));
        assert_eq!(out["spec"], json!({"b": 3}));
        let out = strategic_merge_patch(
            &obj,
            &json!({"spec": {"$patch": "replace", "c": 1}}),
            &res("Pod"),
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"c": 1}));
    }

    #[test]
    fn json_patch_test_failure_is_unprocessable() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}});
        let err = json_patch(
            &obj,
            &json!([{"op": "test", "path": "/metadata/labels/a", "value": "2"},
                    {"op": "add", "path": "/metadata/labels/b", "value": "3"}]),
        )
        .unwrap_err();
        assert!(matches!(err, PatchFailure::Unprocessable(_)));
        assert!(matches!(
            json_patch(&obj, &json!({"op": "nope"})).unwrap_err(),
            PatchFailure::BadRequest(_)
        ));
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let obj = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        let out = merge_patch(&obj, &json!({"a": {"b": null}, "l": [3]})).unwrap();
        assert_eq!(out, json!({"a": {"c": 2}, "l": [3]}));
    }
}
