//! A placeholder made from a pod of a doomed node (see [`crate::domain::surge`] and
//! [`super::surge`]): the pod's requests, node selector, affinity and tolerations, in forewarn's
//! namespace, owned by the doomed Node, kept off it and off every node forewarn cordoned, with
//! the security context Pod Security `restricted` requires (namespace `forewarn` enforces it):
//! not root (the `pause` image's own user), seccomp `RuntimeDefault`, no privilege escalation,
//! every capability dropped, a read-only root filesystem.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use crate::domain::surge::{
    ANNOTATION_EVENT, ANNOTATION_EVICT_BY, ANNOTATION_EXPIRES, ANNOTATION_NODE, ANNOTATION_POD,
    ANNOTATION_POD_UID, ANNOTATION_SAFE_TO_EVICT, LABEL_CORDONED, LABEL_PLACEHOLDER,
    LABEL_PLACEHOLDER_NODE, NAMESPACE, PLACEHOLDER_IMAGE, PLACEHOLDER_USER, PRIORITY_CLASS,
    node_label_value, placeholder_name,
};

/// The placeholder of `pod`, a pod of the doomed node `node` whose uid (read in this pass, the
/// placeholder's owner) is `node_uid` (see the module doc).
pub(crate) fn placeholder_for(
    pod: &Pod,
    (node, node_uid): (&str, Option<&str>),
    event_id: &str,
    deadline: DateTime<Utc>,
    evict_by: DateTime<Utc>,
) -> Pod {
    let spec = pod.spec.clone().unwrap_or_default();
    let (pod_ns, pod_name) = super::api::ns_name(&pod.metadata);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let owner =
        node_uid.map(|uid| json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]));
    let requests = effective_requests(&spec);
    // The limits a placeholder must state for its requests to be accepted: the request of every
    // non-overcommitable resource ([`overcommit_allowed`]) as its limit, and nothing for cpu and
    // memory (a limit there would only throttle or kill a pod that does nothing).
    //
    // The API server refuses a container that requests a non-overcommitable resource without a
    // limit (`Required value: Limit must be set for non overcommitable resources`, at
    // `spec.containers[0].resources.limits`) or with a limit that differs
    // (`must be equal to nvidia.com/gpu limit of 8`): `validateResourceRequirements` of
    // k8s.io/kubernetes `pkg/apis/core/validation/validation.go`. A GPU pod states its GPUs as a
    // limit (the API's defaulting, `SetDefaults_Pod` of `pkg/apis/core/v1/defaults.go`, copies it
    // to the request): without this its placeholder would be refused, and no GPU node started.
    let limits: BTreeMap<_, _> = (requests.iter())
        .filter(|(name, _)| !overcommit_allowed(name))
        .collect();
    let resources = (!requests.is_empty())
        .then(|| json!({"requests": requests, "limits": (!limits.is_empty()).then_some(limits)}));
    let placeholder = json!({
        "metadata": {
            "name": placeholder_name(&uid),
            "namespace": NAMESPACE,
            "labels": {LABEL_PLACEHOLDER: "true", LABEL_PLACEHOLDER_NODE: node_label_value(node)},
            "annotations": {
                ANNOTATION_NODE: node,
                ANNOTATION_POD: format!("{pod_ns}/{pod_name}"),
                ANNOTATION_POD_UID: uid,
                ANNOTATION_EVENT: event_id,
                ANNOTATION_EXPIRES: deadline.to_rfc3339(),
                ANNOTATION_EVICT_BY: evict_by.to_rfc3339(),
                ANNOTATION_SAFE_TO_EVICT: "true",
            },
            "ownerReferences": owner,
        },
        "spec": {
            "containers": [{
                "name": "placeholder",
                "image": PLACEHOLDER_IMAGE,
                "resources": resources,
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true},
            }],
            "securityContext": {"runAsNonRoot": true, "runAsUser": PLACEHOLDER_USER,
                "runAsGroup": PLACEHOLDER_USER, "seccompProfile": {"type": "RuntimeDefault"}},
            "nodeSelector": spec.node_selector,
            "affinity": off_node(spec.affinity, node, &pod_ns),
            "tolerations": spec.tolerations,
            "priorityClassName": PRIORITY_CLASS,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
        },
    });
    // Built from Kubernetes' own types and constants, it always reads as a Pod (the tests pin
    // every field); were it not to, an empty pod is one the API server refuses: its pod is then
    // evicted as without surge.
    serde_json::from_value(placeholder).unwrap_or_default()
}

/// `affinity` (of a pod of namespace `pod_ns`) for its placeholder: with required terms that
/// keep it off `node` and off every node forewarn cordoned (added to every required term: the
/// terms are ORed; a toleration of the cordon copied from the pod cannot let it land on a
/// doomed node), and its pod (anti-)affinity terms that meant the pod's own namespace (no
/// `namespaces`, no `namespaceSelector`) naming it, so that the scheduler reads them in
/// forewarn's namespace as it reads the pod's.
fn off_node(affinity: Option<Affinity>, node: &str, pod_ns: &str) -> Affinity {
    let requirement = |key: &str, operator: &str, values| NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values,
    };
    let not_here = requirement("metadata.name", "NotIn", Some(vec![node.to_string()]));
    let not_cordoned = requirement(LABEL_CORDONED, "DoesNotExist", None);
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity.node_affinity.get_or_insert_default();
    let required = &mut node_affinity.required_during_scheduling_ignored_during_execution;
    let terms = &mut required.get_or_insert_default().node_selector_terms;
    if terms.is_empty() {
        terms.push(NodeSelectorTerm::default());
    }
    for term in terms {
        (term.match_fields.get_or_insert_default()).push(not_here.clone());
        (term.match_expressions.get_or_insert_default()).push(not_cordoned.clone());
    }
    // Pod (anti-)affinity terms that meant their pod's own namespace (no `namespaces`, no
    // `namespaceSelector`) name it: a placeholder in forewarn's namespace then selects what its
    // pod's terms selected.
    let pod_affinity = (affinity.pod_affinity.as_mut()).map(|a| {
        let required = &mut a.required_during_scheduling_ignored_during_execution;
        let preferred = &mut a.preferred_during_scheduling_ignored_during_execution;
        (required, preferred)
    });
    let anti_affinity = (affinity.pod_anti_affinity.as_mut()).map(|a| {
        let required = &mut a.required_during_scheduling_ignored_during_execution;
        let preferred = &mut a.preferred_during_scheduling_ignored_during_execution;
        (required, preferred)
    });
    for (required, preferred) in pod_affinity.into_iter().chain(anti_affinity) {
        let preferred = preferred
            .iter_mut()
            .flatten()
            .map(|w| &mut w.pod_affinity_term);
        for term in required.iter_mut().flatten().chain(preferred) {
            if term.namespaces.as_ref().is_none_or(Vec::is_empty)
                && term.namespace_selector.is_none()
            {
                term.namespaces = Some(vec![pod_ns.to_string()]);
            }
        }
    }
    affinity
}

/// Whether the API server lets a container request less of `resource` than its limit
/// (`IsOvercommitAllowed` of k8s.io/kubernetes `pkg/apis/core/helper/helpers.go`): a native
/// resource (a name without a domain, or in `kubernetes.io/`: `cpu`, `memory`,
/// `ephemeral-storage`) that is not hugepages (`hugepages-<size>`). Every other one (an
/// extended resource such as `nvidia.com/gpu`, `aws.amazon.com/neuron` or
/// `vpc.amazonaws.com/pod-eni`, and hugepages) is non-overcommitable.
pub(crate) fn overcommit_allowed(resource: &str) -> bool {
    let native = !resource.contains('/') || resource.contains("kubernetes.io/");
    native && !resource.starts_with("hugepages-")
}

/// A container's requests as the API server defaults them (`SetDefaults_Pod`): a resource
/// with a limit and no request requests its limit (a pod read back from the API already
/// carries both).
pub(crate) fn container_requests(c: &Container) -> BTreeMap<&String, &Quantity> {
    let Some(r) = c.resources.as_ref() else {
        return BTreeMap::new();
    };
    let mut out: BTreeMap<&String, &Quantity> = r.limits.iter().flatten().collect();
    out.extend(r.requests.iter().flatten());
    out
}

/// What a pod requests, per resource: the larger of its containers' sum and its largest init
/// container's request (as the scheduler counts it), each container's requests defaulted from
/// its limits ([`container_requests`]); a sum past what a quantity can say stays at the largest
/// (never an overflow).
fn effective_requests(spec: &PodSpec) -> BTreeMap<String, String> {
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    // The containers added up first, then each init container's the larger.
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    for (c, init) in spec.containers.iter().map(|c| (c, false)).chain(init) {
        for (name, q) in container_requests(c) {
            if let Some(milli) = milli(&q.0) {
                let e = sum.entry(name.clone()).or_default();
                *e = if init {
                    (*e).max(milli)
                } else {
                    e.saturating_add(milli)
                };
            }
        }
    }
    sum.into_iter()
        .map(|(name, milli)| match milli % 1000 {
            0 => (name, format!("{}", milli / 1000)),
            _ => (name, format!("{milli}m")),
        })
        .collect()
}

/// A quantity (`100m`, `0.5`, `2`, `128Mi`, `1G`, `1e3`) in thousandths of its unit, rounded
/// up; `None` when it is not one.
pub(crate) fn milli(q: &str) -> Option<i128> {
    // The suffixes, by power: 1000^(i - 3) and 1024^(i + 1); else an exponent (`e3`, `E-2`).
    const DECIMAL: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let power = |table: &[&str]| {
        let i = table.iter().position(|s| *s == suffix)?;
        i32::try_from(i).ok()
    };
    let factor = if let Some(i) = power(&DECIMAL) {
        1000f64.powi(i - 3)
    } else if let Some(i) = power(&BINARY) {
        1024f64.powi(i + 1)
    } else {
        10f64.powi(suffix.strip_prefix(['e', 'E'])?.parse().ok()?)
    };
    let value: f64 = number.parse().ok()?;
    let exact = value * factor * 1000.0;
    // Round what binary floating point makes a hair above a whole number (0.1 × 1000).
    let nearest = exact.round();
    let milli = if (exact - nearest).abs() <= 1e-6 * nearest.abs().max(1.0) {
        nearest
    } else {
        exact.ceil()
    };
    (0.0..1e36).contains(&milli).then_some(milli as i128)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn deadline() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-20T10:01:45Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    const DOOMED: (&str, Option<&str>) = ("doomed", Some("node-uid-1"));

    #[test]
    fn quantities_in_thousandths() {
        assert_eq!(milli("100m"), Some(100));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(milli("0.1"), Some(100));
        assert_eq!(milli("1u"), Some(1), "rounded up to a thousandth");
        assert_eq!(milli("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(milli("1G"), Some(1_000_000_000_000));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("1.5k"), Some(1_500_000));
        assert_eq!(milli("1E"), Some(1_000_000_000_000_000_000_000));
        assert_eq!(milli("2E-3"), Some(2));
        assert_eq!(milli("lots"), None);
        assert_eq!(milli("1Xi"), None);
        assert_eq!(milli("-1"), None);
    }

    /// A ReplicaSet's pod on the doomed node, with constraints of every kind.
    fn web_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-rs", "uid": "r", "controller": true}]},
            "spec": {
                "nodeName": "doomed",
                "nodeSelector": {"pool": "general"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web",
                    "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                    ]}},
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "web"}},
                             "topologyKey": "kubernetes.io/hostname"},
                            {"labelSelector": {"matchLabels": {"app": "db"}},
                             "topologyKey": "kubernetes.io/hostname", "namespaces": ["data"]}
                        ],
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 10, "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "cache"}},
                                "topologyKey": "topology.kubernetes.io/zone",
                                "namespaceSelector": {}}}
                        ]
                    },
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "redis"}},
                         "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}
                ]
            }
        }))
    }

    #[test]
    fn a_placeholder_asks_what_its_pod_asks_off_the_doomed_node() {
        let web = web_pod();
        let evict_by = deadline() - chrono::Duration::seconds(40);
        let ph = placeholder_for(&web, DOOMED, "ev-1", deadline(), evict_by);
        let v = serde_json::to_value(&ph).unwrap();
        assert!(super::super::surge::is_placeholder(&ph));
        metadata_is_forewarns(&v);
        spec_is_the_pods_off_the_node(&v);
        // Without an affinity of its own: one term keeping it off the node.
        let bare =
            pod(json!({"metadata": {"name": "x", "uid": "u-2"}, "spec": {"containers": []}}));
        let v = serde_json::to_value(placeholder_for(&bare, DOOMED, "ev-1", deadline(), evict_by))
            .unwrap();
        assert_eq!(
            v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["doomed"]}],
                    "matchExpressions": [{"key": LABEL_CORDONED, "operator": "DoesNotExist"}]}])
        );
    }

    /// A pod of `containers`, on the doomed node.
    fn pod_of(containers: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": "train-0", "namespace": "ml", "uid": "u-9"},
            "spec": {"nodeName": "doomed", "containers": containers}}),
        )
    }

    /// The placeholder's one container's resources.
    fn resources_of(p: &Pod) -> serde_json::Value {
        let evict_by = deadline() - chrono::Duration::seconds(40);
        let ph = placeholder_for(p, DOOMED, "ev-1", deadline(), evict_by);
        serde_json::to_value(ph).unwrap()["spec"]["containers"][0]["resources"].clone()
    }

    #[test]
    fn a_gpu_pods_placeholder_states_its_gpus_as_limits_too() {
        // As the pod was written: its GPUs as a limit only (the API server copies a limit to a
        // missing request), cpu and memory as requests below their limits.
        let written = pod_of(json!([{"name": "trainer", "resources": {
            "limits": {"nvidia.com/gpu": "8", "memory": "64Gi"},
            "requests": {"cpu": "4", "memory": "32Gi"}}}]));
        // As a pod is read back from the API: the GPU limit copied to the request.
        let read_back = pod_of(json!([{"name": "trainer", "resources": {
            "limits": {"nvidia.com/gpu": "8", "memory": "64Gi"},
            "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "8"}}}]));
        for p in [written, read_back] {
            assert_eq!(
                resources_of(&p),
                json!({"requests": {"cpu": "4", "memory": "34359738368", "nvidia.com/gpu": "8"},
                       "limits": {"nvidia.com/gpu": "8"}}),
                "the GPUs requested with an equal limit; cpu and memory requests only"
            );
        }
    }

    #[test]
    fn every_non_overcommitable_resource_gets_its_request_as_its_limit() {
        let neuron = pod_of(json!([
            {"name": "a", "resources": {"limits": {"aws.amazon.com/neuron": "1"},
                "requests": {"aws.amazon.com/neuron": "1", "cpu": "1"}}},
            {"name": "b", "resources": {"limits": {"aws.amazon.com/neuron": "2",
                "hugepages-2Mi": "4Mi", "vpc.amazonaws.com/pod-eni": "1",
                "ephemeral-storage": "1Gi"}}}
        ]));
        let r = resources_of(&neuron);
        assert_eq!(
            r["requests"],
            json!({"aws.amazon.com/neuron": "3", "cpu": "1", "ephemeral-storage": "1073741824",
                   "hugepages-2Mi": "4194304", "vpc.amazonaws.com/pod-eni": "1"})
        );
        assert_eq!(
            r["limits"],
            json!({"aws.amazon.com/neuron": "3", "hugepages-2Mi": "4194304",
                   "vpc.amazonaws.com/pod-eni": "1"}),
            "extended resources and hugepages, summed over the containers"
        );
        for (name, overcommit) in [
            ("cpu", true),
            ("memory", true),
            ("ephemeral-storage", true),
            ("kubernetes.io/something", true),
            ("nvidia.com/gpu", false),
            ("aws.amazon.com/neuron", false),
            ("hugepages-1Gi", false),
        ] {
            assert_eq!(overcommit_allowed(name), overcommit, "{name}");
        }
    }

    /// A placeholder's metadata: forewarn's name, namespace, owner, labels and annotations.
    fn metadata_is_forewarns(v: &serde_json::Value) {
        assert_eq!(v["metadata"]["name"], "forewarn-placeholder-u-1");
        assert_eq!(
            v["metadata"]["namespace"], NAMESPACE,
            "never the pod's namespace"
        );
        assert_eq!(
            v["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "doomed", "uid": "node-uid-1"}]),
            "the garbage collector removes it with its node"
        );
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_SAFE_TO_EVICT],
            "true"
        );
        let labels: Vec<&String> = v["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(labels, crate::domain::surge::PLACEHOLDER_LABELS);
        let annotations: BTreeSet<&str> = v["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            annotations,
            BTreeSet::from(crate::domain::surge::PLACEHOLDER_ANNOTATIONS)
        );
        assert_eq!(v["metadata"]["labels"][LABEL_PLACEHOLDER], "true");
        assert_eq!(v["metadata"]["labels"][LABEL_PLACEHOLDER_NODE], "doomed");
        assert_eq!(v["metadata"]["annotations"][ANNOTATION_POD], "shop/web-1");
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_EXPIRES],
            "2026-11-20T10:01:45+00:00"
        );
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_EVICT_BY],
            "2026-11-20T10:01:05+00:00"
        );
    }

    /// A placeholder's spec: the pod's requests and constraints, kept off the doomed node and
    /// nodes forewarn cordoned.
    fn spec_is_the_pods_off_the_node(v: &serde_json::Value) {
        let spec = &v["spec"];
        assert_eq!(spec["priorityClassName"], PRIORITY_CLASS);
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        // Pod Security `restricted`, which namespace forewarn enforces.
        assert_eq!(
            spec["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65535, "runAsGroup": 65535,
                   "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(
            spec["containers"][0]["securityContext"],
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                   "readOnlyRootFilesystem": true})
        );
        assert!(spec.get("serviceAccountName").is_none());
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["nodeSelector"], json!({"pool": "general"}));
        assert_eq!(spec["tolerations"][0]["key"], "dedicated");
        assert_eq!(
            spec["containers"][0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "134217728"}),
            "the init container's cpu is the larger"
        );
        let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms.as_array().unwrap().len(), 2);
        for term in terms.as_array().unwrap() {
            assert_eq!(
                term["matchFields"],
                json!([{"key": "metadata.name", "operator": "NotIn", "values": ["doomed"]}])
            );
            let exprs = term["matchExpressions"].as_array().unwrap();
            assert_eq!(exprs.len(), 2, "its own and forewarn's");
            assert_eq!(
                exprs[1],
                json!({"key": LABEL_CORDONED, "operator": "DoesNotExist"}),
                "never on a node forewarn cordoned, whatever it tolerates"
            );
        }
        // Pod (anti-)affinity that meant the pod's own namespace names it; a term naming its
        // namespaces or selecting them is kept as it is.
        let anti = &spec["affinity"]["podAntiAffinity"];
        let required = &anti["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(required[0]["namespaces"], json!(["shop"]));
        assert_eq!(required[1]["namespaces"], json!(["data"]));
        let preferred = &anti["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert!(preferred["podAffinityTerm"].get("namespaces").is_none());
        assert_eq!(
            spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"],
            json!(["shop"])
        );
    }
}
