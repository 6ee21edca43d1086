//! Server-side apply (`application/apply-patch+yaml`), modelled on the API server's apply
//! patcher (`k8s.io/apiserver/pkg/endpoints/handlers/patch.go`, `applyPatcher`) and the field
//! manager of `k8s.io/apimachinery/pkg/util/managedfields` over structured-merge-diff.
//!
//! Field sets are kept at map-key granularity: a path is the keys from the object's root down
//! to a value that is not a non-empty map (a scalar, a list, an empty map), so every list is an
//! atomic value, as a list without `x-kubernetes-list-type` is. The fields the server resets
//! are not owned: `apiVersion`, `kind`, `metadata.{name, namespace, uid, resourceVersion,
//! generation, creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds,
//! managedFields, selfLink}`, and `status` of a type with a status subresource.
//!
//! Once an object carries `managedFields` (once it has been applied), its non-apply writes
//! record their manager too (operation `Update`: the fields they changed move to it); an
//! object never applied records none (the real server records the creator's and every
//! updater's `Update` entry from the first write).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::resources::ResourceDef;
use crate::status::{self, ApiError, FieldError};

/// A path to one owned value: the map keys from the root.
type FieldPath = Vec<String>;
/// The values one manager owns.
type FieldSet = BTreeSet<FieldPath>;

/// The metadata fields the server sets or resets, owned by no manager.
const RESET_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Who applies, from the request's options (`PatchOptions`).
#[derive(Debug, Clone)]
pub(crate) struct Applier {
    pub manager: String,
    pub force: bool,
    /// The `time` of the entries this write records.
    pub now: String,
}

impl Applier {
    /// The options of an apply, validated as `ValidatePatchOptions` does: a `fieldManager` is
    /// required (the real 422 about `PatchOptions.meta.k8s.io`).
    pub fn new(manager: Option<&str>, force: Option<&str>, now: String) -> Result<Self, ApiError> {
        let manager = manager.filter(|m| !m.is_empty()).ok_or_else(|| {
            patch_options_invalid(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ))
        })?;
        Ok(Applier {
            manager: manager.to_string(),
            force: force.is_some_and(|f| f == "true" || f == "1"),
            now,
        })
    }
}

/// `force` on a patch that is not an apply: the real 422.
pub(crate) fn force_without_apply() -> ApiError {
    patch_options_invalid(FieldError {
        field: "force".into(),
        reason: "FieldValueForbidden",
        body: "Forbidden: may not be specified for non-apply patch".into(),
    })
}

fn patch_options_invalid(error: FieldError) -> ApiError {
    let options = ResourceDef {
        group: "meta.k8s.io",
        kind: "PatchOptions",
        ..crate::resources::builtin_resources().remove(0)
    };
    status::invalid(&options, "", &[error])
}

/// The body of an apply: YAML (JSON being YAML), one object.
pub(crate) fn parse(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| status::bad_request(format!("error decoding YAML: {e}")))?;
    let config: Value = serde_saphyr::from_str(text)
        .map_err(|e| status::bad_request(format!("error decoding YAML: {e}")))?;
    if !config.is_object() {
        return Err(status::bad_request(
            "error decoding YAML: the apply configuration must be an object",
        ));
    }
    Ok(config)
}

/// The configuration names the type of the URL (`apiVersion`, `kind`) and the object of the
/// path (`metadata.name`), as the field manager and the update's name check require.
pub(crate) fn check(res: &ResourceDef, config: &Value, name: &str) -> Result<(), ApiError> {
    let version = config["apiVersion"].as_str().unwrap_or_default();
    if version != res.api_version() {
        return Err(status::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, \
             expected: {}",
            res.api_version()
        )));
    }
    let kind = config["kind"].as_str().unwrap_or_default();
    if kind != res.kind {
        return Err(status::bad_request(format!(
            "the kind of the object ({kind}) does not match the kind of the resource ({})",
            res.kind
        )));
    }
    let body_name = config["metadata"]["name"].as_str().unwrap_or_default();
    if body_name != name {
        return Err(status::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// The values of `obj` a manager can own (see the module's documentation).
fn owned_fields(res: &ResourceDef, obj: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    let Some(map) = obj.as_object() else {
        return set;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "status" if res.status_subresource => {}
            "metadata" => {
                for (k, v) in value.as_object().into_iter().flatten() {
                    if !RESET_META.contains(&k.as_str()) {
                        leaves(v, vec!["metadata".into(), k.clone()], &mut set);
                    }
                }
            }
            _ => leaves(value, vec![key.clone()], &mut set),
        }
    }
    set
}

fn leaves(value: &Value, path: FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let mut child = path.clone();
                child.push(k.clone());
                leaves(v, child, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.as_object()?.get(k))
}

fn set(obj: &mut Value, path: &[String], value: Value) {
    let mut at = obj;
    for k in &path[..path.len() - 1] {
        if !at[k.as_str()].is_object() {
            at[k.as_str()] = json!({});
        }
        at = &mut at[k.as_str()];
    }
    at[path[path.len() - 1].as_str()] = value;
}

fn remove(obj: &mut Value, path: &[String]) {
    let (last, parents) = path.split_last().expect("a path has a key");
    let parent = parents
        .iter()
        .try_fold(obj, |v, k| v.as_object_mut()?.get_mut(k));
    if let Some(Value::Object(map)) = parent {
        map.remove(last);
    }
}

/// A field set as `fieldsV1` writes it: `{"f:metadata": {"f:labels": {"f:app": {}}}}`.
fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = json!({});
    for path in set {
        let keys: FieldPath = path.iter().map(|k| format!("f:{k}")).collect();
        set_leaf(&mut root, &keys);
    }
    root
}

fn set_leaf(root: &mut Value, keys: &[String]) {
    let mut at = root;
    for k in keys {
        if !at[k.as_str()].is_object() {
            at[k.as_str()] = json!({});
        }
        at = &mut at[k.as_str()];
    }
}

fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(v: &Value, path: FieldPath, out: &mut FieldSet) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("f:"))
            .collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.insert(path);
            }
            return;
        }
        for (k, child) in children {
            let mut p = path.clone();
            p.push(k[2..].to_string());
            walk(child, p, out);
        }
    }
    let mut out = FieldSet::new();
    walk(v, Vec::new(), &mut out);
    out
}

/// One `managedFields` entry, read.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str) -> bool {
        self.manager == manager && self.operation == operation
    }

    fn render(&self) -> Value {
        json!({"manager": self.manager, "operation": self.operation,
               "apiVersion": self.api_version, "time": self.time,
               "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&self.fields)})
    }

    /// As a conflict names it: `"kubectl"`, or `"kubectl" using v1` for an update.
    fn named(&self) -> String {
        match self.operation.as_str() {
            "Update" => format!("{:?} using {}", self.manager, self.api_version),
            _ => format!("{:?}", self.manager),
        }
    }
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or_default().to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            fields: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes `entries` (those that own something) as `obj`'s `managedFields`.
fn put_entries(obj: &mut Value, entries: &[Entry]) {
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::render)
        .collect();
    crate::store::meta_mut(obj).insert("managedFields".into(), Value::Array(rendered));
}

/// `.metadata.labels.app`, as structured-merge-diff prints a path.
fn dotted(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// The 409 of an apply that would change values other managers own (`NewApplyConflict`).
fn conflicts(found: &[(String, FieldPath)]) -> ApiError {
    let message = match found {
        [(manager, path)] => format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            dotted(path)
        ),
        _ => {
            let mut managers: Vec<&String> = found.iter().map(|(m, _)| m).collect();
            managers.sort();
            managers.dedup();
            let mut lines = Vec::new();
            for manager in managers {
                lines.push(format!("conflicts with {manager}:"));
                for (_, path) in found.iter().filter(|(m, _)| m == manager) {
                    lines.push(format!("- {}", dotted(path)));
                }
            }
            format!(
                "Apply failed with {} conflicts: {}",
                found.len(),
                lines.join("\n")
            )
        }
    };
    let causes: Vec<Value> = found
        .iter()
        .map(|(manager, path)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager}"),
                   "field": dotted(path)})
        })
        .collect();
    let mut err = status::for_reason(409, "Conflict", message);
    err.body["details"] = json!({ "causes": causes });
    err
}

/// The object an apply of `config` creates: the configuration, owned by the applier.
pub(crate) fn created(res: &ResourceDef, applier: &Applier, config: &Value) -> Value {
    let mut obj = config.clone();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    let entry = Entry {
        manager: applier.manager.clone(),
        operation: "Apply".into(),
        api_version: res.api_version(),
        time: applier.now.clone(),
        fields: owned_fields(res, config),
    };
    put_entries(&mut obj, &[entry]);
    obj
}

/// The object an apply of `config` makes of `live`: each value the configuration sets set;
/// the values the applier set before and leaves out now removed unless another manager owns
/// them; a value another manager owns changed only with `force` (it moves to the applier),
/// else the 409 naming each manager and field.
pub(crate) fn merged(
    res: &ResourceDef,
    applier: &Applier,
    live: &Value,
    config: &Value,
) -> Result<Value, ApiError> {
    let applied = owned_fields(res, config);
    let mut managers = entries(live);
    let mine = managers
        .iter()
        .position(|e| e.is(&applier.manager, "Apply"));
    let before = mine.map(|i| managers[i].fields.clone()).unwrap_or_default();
    let mut found = Vec::new();
    for other in managers
        .iter_mut()
        .filter(|e| !e.is(&applier.manager, "Apply"))
    {
        let taken: Vec<FieldPath> = other
            .fields
            .iter()
            .filter(|p| applied.contains(*p) && get(live, p) != get(config, p))
            .cloned()
            .collect();
        if applier.force {
            for p in &taken {
                other.fields.remove(p);
            }
        } else {
            found.extend(taken.into_iter().map(|p| (other.named(), p)));
        }
    }
    if !found.is_empty() {
        return Err(conflicts(&found));
    }
    let mut obj = live.clone();
    for path in before.difference(&applied) {
        let shared = managers
            .iter()
            .any(|e| !e.is(&applier.manager, "Apply") && e.fields.contains(path));
        if !shared {
            remove(&mut obj, path);
        }
    }
    for path in &applied {
        let value = get(config, path).cloned().unwrap_or(Value::Null);
        set(&mut obj, path, value);
    }
    if let Some(rv) = config.pointer("/metadata/resourceVersion") {
        crate::store::meta_mut(&mut obj).insert("resourceVersion".into(), rv.clone());
    }
    // The entry's time moves only when the object or what the applier owns changes.
    let changed = obj != *live || before != applied;
    let entry = Entry {
        manager: applier.manager.clone(),
        operation: "Apply".into(),
        api_version: res.api_version(),
        time: match (changed, mine) {
            (false, Some(i)) => managers[i].time.clone(),
            _ => applier.now.clone(),
        },
        fields: applied,
    };
    match mine {
        Some(i) => managers[i] = entry,
        None => managers.push(entry),
    }
    put_entries(&mut obj, &managers);
    Ok(obj)
}

/// A non-apply write of `old` into `new` by `manager` (operation `Update`), on an object whose
/// fields are tracked (it has `managedFields`): the values it changed move to it, those it
/// removed are owned by nobody. `new` keeps `old`'s entries when it carries none.
pub(crate) fn record_update(
    res: &ResourceDef,
    manager: &str,
    now: &str,
    old: &Value,
    new: &mut Value,
) {
    if new.pointer("/metadata/managedFields").is_none()
        && let Some(kept) = old.pointer("/metadata/managedFields")
    {
        crate::store::meta_mut(new).insert("managedFields".into(), kept.clone());
    }
    let mut managers = entries(new);
    if managers.is_empty() {
        return;
    }
    let (before, after) = (owned_fields(res, old), owned_fields(res, new));
    let changed: FieldSet = after
        .iter()
        .filter(|p| get(old, p) != get(new, p))
        .cloned()
        .collect();
    if changed.is_empty() && before.is_subset(&after) {
        return;
    }
    for e in &mut managers {
        e.fields
            .retain(|p| after.contains(p) && !changed.contains(p));
    }
    match managers.iter_mut().find(|e| e.is(manager, "Update")) {
        Some(e) => {
            e.fields.extend(changed);
            e.time = now.to_string();
        }
        None => managers.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: res.api_version(),
            time: now.to_string(),
            fields: changed,
        }),
    }
    put_entries(new, &managers);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_round_trips_at_map_key_granularity() {
        let res = crate::resources::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u", "labels": {"a": "1"}},
            "data": {"k": "v"}, "list": [1, 2], "empty": {}});
        let set = owned_fields(&res, &obj);
        let rendered = to_fields_v1(&set);
        assert_eq!(
            rendered,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:k": {}},
                   "f:list": {}, "f:empty": {}})
        );
        assert_eq!(from_fields_v1(&rendered), set);
    }
}
