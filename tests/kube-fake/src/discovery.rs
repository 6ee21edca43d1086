//! `/version` and the legacy (unaggregated) discovery documents.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// The verbs the fake serves on every resource (no watch, no deletecollection).
const VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update"];

/// `GET /version`, of a server at `(major, minor)` (1.33 unless the builder said otherwise).
pub(crate) fn version((major, minor): (u32, u32)) -> Value {
    json!({
        "major": major.to_string(),
        "minor": minor.to_string(),
        "emulationMajor": major.to_string(),
        "emulationMinor": minor.to_string(),
        "minCompatibilityMajor": major.to_string(),
        "minCompatibilityMinor": minor.saturating_sub(1).to_string(),
        "gitVersion": format!("v{major}.{minor}.0"),
        "gitCommit": "60a317eadfcb839692a5551a4f23d4e7d7e9f1f5",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T13:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }],
    })
}

fn groups(resources: &[ResourceDef]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => versions.push(r.version),
            Some(_) => {}
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

fn group_doc(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

/// `GET /apis`.
pub(crate) fn api_group_list(resources: &[ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(resources)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis/{group}`.
pub(crate) fn api_group(resources: &[ResourceDef], group: &str) -> Option<Value> {
    let (g, versions) = groups(resources).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_doc(g, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`.
pub(crate) fn api_resource_list(
    resources: &[ResourceDef],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut entries = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        entries.push(entry);
        if r.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if r.group.is_empty() && r.kind == "Pod" {
            entries.push(json!({
                "name": "pods/eviction",
                "singularName": "",
                "namespaced": true,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
    }
    if entries.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut doc = json!({
        "kind": "APIResourceList",
        "groupVersion": group_version,
        "resources": entries,
    });
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn core_resources_include_the_eviction_subresource() {
        let doc = api_resource_list(&builtin_resources(), "", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"nodes"));
        assert!(names.contains(&"pods/eviction"));
        assert!(doc.get("apiVersion").is_none());
    }

    #[test]
    fn groups_are_listed_once() {
        let doc = api_group_list(&builtin_resources());
        let names: Vec<&str> = doc["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "events.k8s.io",
                "policy",
                "apps",
                "scheduling.k8s.io",
                "karpenter.sh",
                "cluster.x-k8s.io"
            ]
        );
        assert!(api_group(&builtin_resources(), "nope").is_none());
    }
}
