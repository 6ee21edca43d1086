//! The in-tree mutating admission plugins a Pod create goes through, in the order of
//! `AllOrderedPlugins` (`pkg/kubeapiserver/options/plugins.go`): `ServiceAccount`
//! (`plugin/pkg/admission/serviceaccount/admission.go`), `Priority`
//! (`plugin/pkg/admission/priority/admission.go`), `DefaultTolerationSeconds`
//! (`plugin/pkg/admission/defaulttolerationseconds/admission.go`).

use serde_json::{Map, Value, json};

use super::Attributes;
use crate::status::{self, ApiError};
use crate::store::{Store, meta_str};

/// `DefaultServiceAccountName`.
const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// `DefaultAPITokenMountPath`.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// `ServiceAccountVolumeName`: the prefix of the projected token volume.
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access";
/// `WarnOnlyBoundTokenExpirationSeconds`: one hour and seven seconds.
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// Built-in classes the API server creates at start (`SystemPriorityClasses`).
const SYSTEM_CLASSES: &[(&str, i64)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

fn spec_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    pod.get_mut("spec").and_then(Value::as_object_mut)
}

/// The ServiceAccount a pod names, as the plugin's `getServiceAccount` finds it: a stored one,
/// or `default`, which the ServiceAccount controller makes in every namespace (the fake stands
/// for it). `Err` is the plugin's refusal.
fn service_account(store: &Store, attrs: &Attributes<'_>, name: &str) -> Result<Value, ApiError> {
    let stored = store
        .find_kind("v1", "ServiceAccount")
        .and_then(|idx| store.get(idx, Some(attrs.namespace), name));
    match stored {
        Some(sa) => Ok(sa),
        None if name == DEFAULT_SERVICE_ACCOUNT => Ok(json!({"metadata": {"name": name}})),
        None => Err(attrs.forbidden(&format!(
            "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
            attrs.namespace
        ))),
    }
}

/// The `ServiceAccount` plugin's `Admit` (mirror pods aside): `default` when no account is
/// named, the projected API token mounted in every container unless the pod (or else the
/// account) opts out, the account's image pull secrets when the pod has none.
pub(crate) fn service_account_admit(
    store: &mut Store,
    attrs: &Attributes<'_>,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let Some(spec) = spec_mut(pod) else {
        return Ok(());
    };
    let named = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_SERVICE_ACCOUNT)
        .to_string();
    spec.insert("serviceAccountName".into(), json!(named));
    let sa = service_account(store, attrs, &named)?;
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            sa.get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        let suffix = store.name_suffix();
        if let Some(spec) = spec_mut(pod) {
            mount_token(spec, &format!("{TOKEN_VOLUME_PREFIX}-{suffix}"));
        }
    }
    let Some(spec) = spec_mut(pod) else {
        return Ok(());
    };
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let sa_secrets: Vec<Value> = sa
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| json!({"name": s.get("name").cloned().unwrap_or(json!(""))}))
        .collect();
    if !has_pull_secrets && !sa_secrets.is_empty() {
        spec.insert("imagePullSecrets".into(), Value::Array(sa_secrets));
    }
    Ok(())
}

/// The `ServiceAccount` plugin's `Validate`: the account named must exist.
pub(crate) fn service_account_validate(
    store: &Store,
    attrs: &Attributes<'_>,
    pod: &Value,
) -> Result<(), ApiError> {
    let named = pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_SERVICE_ACCOUNT);
    service_account(store, attrs, named).map(|_| ())
}

/// `TokenVolumeSource()`: the token, the cluster's CA bundle and the namespace.
fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                    "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    })
}

/// `mountServiceAccountToken`: an existing `kube-api-access-*` volume is reused, a container
/// that already mounts something at the token path is left alone, init containers first.
fn mount_token(spec: &mut Map<String, Value>, generated: &str) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|n| n.starts_with(&format!("{TOKEN_VOLUME_PREFIX}-")))
        .map(str::to_string);
    let volume_name = existing.clone().unwrap_or_else(|| generated.to_string());
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needs_volume = false;
    for key in ["initContainers", "containers"] {
        for c in spec
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            if mounts.is_null() {
                *mounts = json!([]);
            }
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if !mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH) {
                mounts.push(mount.clone());
                needs_volume = true;
            }
        }
    }
    if existing.is_none() && needs_volume {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if !volumes.is_array() {
            *volumes = json!([]);
        }
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(token_volume(&volume_name));
        }
    }
}

/// One PriorityClass as the plugin reads it: name, value, preemption policy (a stored class
/// without one has the API default, `PreemptLowerPriority`).
struct Class {
    name: String,
    value: i64,
    policy: String,
}

impl Class {
    fn of(pc: &Value) -> Self {
        Self {
            name: meta_str(pc, "name").unwrap_or_default().to_string(),
            value: pc.get("value").and_then(Value::as_i64).unwrap_or(0),
            policy: pc
                .get("preemptionPolicy")
                .and_then(Value::as_str)
                .unwrap_or("PreemptLowerPriority")
                .to_string(),
        }
    }
}

/// `getDefaultPriorityClass`: the `globalDefault` class of lowest value.
fn default_class(store: &Store) -> Option<Class> {
    let idx = store.find_kind("scheduling.k8s.io/v1", "PriorityClass")?;
    store
        .objects_of(idx, None)
        .filter(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .map(Class::of)
        .min_by_key(|c| c.value)
}

/// `establishPriority`: the class named (system classes included), else the default class,
/// else priority 0 and `PreemptLowerPriority`.
fn establish(store: &Store, attrs: &Attributes<'_>, name: &str) -> Result<Class, ApiError> {
    if name.is_empty() {
        return Ok(default_class(store).unwrap_or(Class {
            name: String::new(),
            value: 0,
            policy: "PreemptLowerPriority".into(),
        }));
    }
    if let Some((_, value)) = SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
        return Ok(Class {
            name: name.to_string(),
            value: *value,
            policy: "PreemptLowerPriority".into(),
        });
    }
    store
        .find_kind("scheduling.k8s.io/v1", "PriorityClass")
        .and_then(|idx| store.get(idx, None, name))
        .map(|pc| Class::of(&pc))
        .ok_or_else(|| attrs.forbidden(&format!("no PriorityClass with name {name} was found")))
}

/// The `Priority` plugin's `admitPod` on create: `priorityClassName`, `priority` and
/// `preemptionPolicy` from the class; a pod stating other values is refused.
pub(crate) fn priority_admit(
    store: &Store,
    attrs: &Attributes<'_>,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let Some(spec) = spec_mut(pod) else {
        return Ok(());
    };
    let named = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let class = establish(store, attrs, &named)?;
    if !class.name.is_empty() {
        spec.insert("priorityClassName".into(), json!(class.name));
    }
    if let Some(stated) = spec.get("priority").and_then(Value::as_i64)
        && stated != class.value
    {
        return Err(attrs.forbidden(&format!(
            "the integer value of priority ({stated}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            class.value
        )));
    }
    spec.insert("priority".into(), json!(class.value));
    if let Some(stated) = spec.get("preemptionPolicy").and_then(Value::as_str)
        && stated != class.policy
    {
        return Err(attrs.forbidden(&format!(
            "the string value of PreemptionPolicy ({stated}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            class.policy
        )));
    }
    spec.insert("preemptionPolicy".into(), json!(class.policy));
    Ok(())
}

/// The `DefaultTolerationSeconds` plugin: tolerations of 300 s for the `not-ready` and
/// `unreachable` `NoExecute` taints, unless the pod already tolerates them (a toleration with
/// that key or no key, and effect `NoExecute` or none).
pub(crate) fn default_toleration_seconds(pod: &mut Value) -> Result<(), ApiError> {
    let Some(spec) = spec_mut(pod) else {
        return Ok(());
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if tolerations.is_null() {
        *tolerations = json!([]);
    }
    let Some(tolerations) = tolerations.as_array_mut() else {
        return Err(status::bad_request("spec.tolerations must be a list"));
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations.iter().any(|t| {
            let t_key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (t_key == key || t_key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        });
        if !tolerated {
            tolerations.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300}),
            );
        }
    }
    Ok(())
}
