//! API defaulting of a Pod on create, as the decoder applies `SetDefaults_Pod`,
//! `SetDefaults_PodSpec`, `SetDefaults_Container`, `SetDefaults_Volume` and their kin of
//! `pkg/apis/core/v1/defaults.go` (plus the declarative `+default` markers of
//! `k8s.io/api/core/v1/types.go`, such as a container port's `protocol: TCP`), and of a
//! Namespace (`SetDefaults_Namespace`: the `kubernetes.io/metadata.name` label).
//!
//! Only what is absent is set. Not modelled: the rounding of quantities to milli scale
//! (`SetDefaults_ResourceList`), pod-level resources (`PodLevelResources`), image volumes,
//! ephemeral containers (never present on create).

use serde_json::{Map, Value, json};

/// Sets `key` to `value` in `obj` when it is absent or null.
fn default(obj: &mut Map<String, Value>, key: &str, value: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_string(), value);
    }
}

/// Sets `key` to `value` when it is absent, null or the empty string (a Go string's zero value).
fn default_str(obj: &mut Map<String, Value>, key: &str, value: &str) {
    if obj.get(key).is_none_or(|v| v.is_null() || v == "") {
        obj.insert(key.to_string(), json!(value));
    }
}

/// The tag `parsers.ParseImageName` finds: the part after the last `:` of the last path
/// segment, `latest` when there is neither a tag nor a digest.
pub(crate) fn image_tag(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag.to_string(),
        None if digest.is_none() => "latest".to_string(),
        None => String::new(),
    }
}

/// `SetDefaults_Probe` and `SetDefaults_HTTPGetAction`.
fn probe(probe: &mut Value) {
    let Some(p) = probe.as_object_mut() else {
        return;
    };
    for (key, value) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        if p.get(key).and_then(Value::as_i64).unwrap_or(0) == 0 {
            p.insert(key.into(), json!(value));
        }
    }
    if let Some(get) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
        default_str(get, "path", "/");
        default_str(get, "scheme", "HTTP");
    }
}

/// `SetDefaults_Container` and the container's declarative defaults; `host_network`: the pod's
/// `hostNetwork` (ports then default their `hostPort` to the `containerPort`).
fn container(c: &mut Map<String, Value>, host_network: bool) {
    if c.get("imagePullPolicy")
        .is_none_or(|v| v.is_null() || v == "")
    {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    default_str(c, "terminationMessagePath", "/dev/termination-log");
    default_str(c, "terminationMessagePolicy", "File");
    for port in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        default_str(port, "protocol", "TCP");
        if host_network && port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
            let container_port = port.get("containerPort").cloned().unwrap_or(json!(0));
            port.insert("hostPort".into(), container_port);
        }
    }
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(key) {
            probe(p);
        }
    }
    for env in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = env
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            default_str(field_ref, "apiVersion", "v1");
        }
    }
    limits_to_requests(c);
}

/// `SetDefaults_Pod`: a limit without a request copies to the request.
fn limits_to_requests(c: &mut Map<String, Value>) {
    let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let requests = resources.entry("requests").or_insert_with(|| json!({}));
    if requests.is_null() {
        *requests = json!({});
    }
    if let Some(requests) = requests.as_object_mut() {
        for (key, value) in limits {
            requests.entry(key).or_insert(value);
        }
    }
}

/// `SetDefaults_Volume` and the volume sources' defaults (`defaultMode` 0644, hostPath `type`).
fn volume(v: &mut Map<String, Value>) {
    const SOURCES: &[&str] = &[
        "hostPath",
        "emptyDir",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "secret",
        "nfs",
        "iscsi",
        "glusterfs",
        "persistentVolumeClaim",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "downwardAPI",
        "fc",
        "azureFile",
        "configMap",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "projected",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    ];
    if !SOURCES
        .iter()
        .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            default(s, "defaultMode", json!(420));
        }
    }
    if let Some(s) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        default(s, "type", json!(""));
    }
}

/// Defaults a Pod about to be created.
pub(crate) fn pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // SetDefaults_PodSpec
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "restartPolicy", "Always");
    default(spec, "securityContext", json!({}));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default_str(spec, "schedulerName", "default-scheduler");
    // SetDefaults_Pod
    default(spec, "enableServiceLinks", json!(true));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for key in ["initContainers", "containers"] {
        for c in spec
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            container(c, host_network);
        }
    }
    for v in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        volume(v);
    }
}

/// The v1 conversion of a Pod's deprecated `spec.serviceAccount`: read into
/// `serviceAccountName` when that is empty, and written back from it, as every v1 pod the
/// server answers shows both.
pub(crate) fn deprecated_service_account(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let name = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    match (
        name(spec.get("serviceAccountName")),
        name(spec.get("serviceAccount")),
    ) {
        (Some(n), _) => {
            spec.insert("serviceAccount".into(), json!(n));
        }
        (None, Some(d)) => {
            spec.insert("serviceAccountName".into(), json!(d));
        }
        (None, None) => {}
    }
}

/// `SetDefaults_Namespace`: every named Namespace carries `kubernetes.io/metadata.name`.
pub(crate) fn namespace(obj: &mut Value) {
    let Some(name) = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return;
    };
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if labels.is_null() {
        *labels = json!({});
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_as_the_kubelet_parses_them() {
        assert_eq!(image_tag("nginx"), "latest");
        assert_eq!(image_tag("nginx:1.27"), "1.27");
        assert_eq!(image_tag("registry:5000/team/app"), "latest");
        assert_eq!(image_tag("registry:5000/team/app:v2"), "v2");
        assert_eq!(image_tag("app@sha256:abc"), "");
        assert_eq!(image_tag("app:latest@sha256:abc"), "latest");
    }

    #[test]
    fn a_bare_pod_gets_the_api_defaults_and_keeps_what_it_states() {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "app:1", "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}],
            "volumes": [{"name": "scratch"}, {"name": "cm", "configMap": {"name": "x"}}]}});
        pod(&mut p);
        let spec = &p["spec"];
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["configMap"]["defaultMode"], 420);
    }
}
