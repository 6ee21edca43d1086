//! The Cluster Autoscaler priority expander's ConfigMap as forewarn manages it: its name and
//! place, its labels and annotation, its content ([`ExpanderConfig`]) and manifest. What the
//! expander port carries and the preflight names; the priorities written into it are computed
//! in [`crate::domain::priorities`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The expander's ConfigMap.
pub const EXPANDER_CONFIGMAP: &str = "cluster-autoscaler-priority-expander";
/// The user's base priorities (same format), read only.
pub const BASE_CONFIGMAP: &str = "forewarn-priority-base";
/// Where both live.
pub const NAMESPACE: &str = "kube-system";
/// The data key of both.
pub const DATA_KEY: &str = "priorities";
/// The label forewarn puts on the ConfigMap it owns.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "forewarn";
/// The annotation saying what forewarn changed and why (JSON, see
/// [`crate::domain::priorities::Demotion`]).
pub const ANNOTATION: &str = "forewarn.io/demoted";

/// The expander ConfigMap's content as forewarn manages it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpanderConfig {
    /// `data.priorities`.
    pub priorities: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl ExpanderConfig {
    /// Whether forewarn created it (its label).
    pub fn owned(&self) -> bool {
        self.labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
    }

    /// Whether writing `self` over `current` would change anything forewarn manages.
    pub fn differs_from(&self, current: &ExpanderConfig) -> bool {
        self.priorities != current.priorities
            || self
                .labels
                .iter()
                .chain(&self.annotations)
                .any(|(k, v)| current.labels.get(k).or(current.annotations.get(k)) != Some(v))
    }

    /// The complete `v1` ConfigMap document, as JSON.
    pub fn document(&self) -> serde_json::Value {
        serde_json::to_value(self.manifest()).expect("a ConfigMap is plain strings")
    }

    /// The complete `v1` ConfigMap document, as YAML.
    pub fn yaml(&self) -> String {
        serde_saphyr::to_string(&self.manifest()).expect("a ConfigMap is plain strings")
    }

    fn manifest(&self) -> ConfigMapManifest<'_> {
        ConfigMapManifest {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: ConfigMapMetadata {
                name: EXPANDER_CONFIGMAP,
                namespace: NAMESPACE,
                labels: &self.labels,
                annotations: &self.annotations,
            },
            data: BTreeMap::from([(DATA_KEY, self.priorities.as_str())]),
        }
    }
}

/// The expander ConfigMap as a manifest, in the usual order of its fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMapManifest<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ConfigMapMetadata<'a>,
    data: BTreeMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct ConfigMapMetadata<'a> {
    name: &'static str,
    namespace: &'static str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
}
