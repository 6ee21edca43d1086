//! The table of resources the fake serves.
//!
//! Every kind the fake knows is one [`ResourceDef`] row: where it lives in the
//! URL space, how it is scoped, and the handful of per-type behaviours of the
//! real API server that tests can observe (what a delete answers, which field
//! selectors exist, how strategic merge patch treats its lists, ...). Adding a
//! kind is adding a row: see [`builtin_resources`] and
//! [`crate::KubeFakeBuilder::resource`].

use serde_json::{Value, json};

/// How a strategic merge patch treats one list field.
///
/// Lists that are not named in [`ResourceDef::list_merge`] are atomic: the
/// patch replaces them whole, as the real server does for lists without a
/// `patchStrategy` (Node `spec.taints`, Pod `spec.tolerations`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMerge {
    /// `patchStrategy:"merge"` with `patchMergeKey:"<key>"`: elements are matched by this field.
    Key(&'static str),
    /// `patchStrategy:"merge"` on a list of scalars: the patch adds missing values (set union).
    Set,
}

/// What a create through the API does to the `status` of the object.
#[derive(Debug, Clone, Copy)]
pub enum StatusOnCreate {
    /// Keep what the client sent.
    Keep,
    /// Drop it (types with a status subresource whose strategy resets status).
    Drop,
    /// Replace it by this value (Pods start `Pending`).
    Replace(fn() -> Value),
}

/// One field selector the real server supports for a type.
#[derive(Debug, Clone, Copy)]
pub struct FieldLabel {
    /// The label used in `fieldSelector`, e.g. `spec.nodeName`.
    pub label: &'static str,
    /// JSON pointer into the object, e.g. `/spec/nodeName`.
    pub pointer: &'static str,
    /// Value used when the field is absent (the server compares the Go zero value).
    pub default: &'static str,
}

impl FieldLabel {
    /// A field label whose absent value is the empty string.
    pub const fn new(label: &'static str, pointer: &'static str) -> Self {
        Self {
            label,
            pointer,
            default: "",
        }
    }

    /// A boolean field label: absent means `false`.
    pub const fn boolean(label: &'static str, pointer: &'static str) -> Self {
        Self {
            label,
            pointer,
            default: "false",
        }
    }
}

/// One kind served by the fake.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// API group, empty for the core group.
    pub group: &'static str,
    /// API version, e.g. `v1`.
    pub version: &'static str,
    /// Kind, e.g. `Node`.
    pub kind: &'static str,
    /// Plural resource name used in paths, e.g. `nodes`.
    pub plural: &'static str,
    /// Singular resource name (discovery only).
    pub singular: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names (discovery only).
    pub short_names: &'static [&'static str],
    /// A custom resource (served by the apiextensions server): no strategic
    /// merge patch (415), `metadata.resourceVersion` required on replace.
    pub custom: bool,
    /// Whether the type has a `/status` subresource. When it has one, writes to
    /// the main resource keep the stored status and writes to `/status` change
    /// only the status, as on the real server.
    pub status_subresource: bool,
    /// What a create through the API does to `status`.
    pub status_on_create: StatusOnCreate,
    /// Whether a completed DELETE answers with the deleted object
    /// (`ReturnDeletedObject` in the real registry) instead of a `Status`.
    pub delete_returns_object: bool,
    /// Whether a PUT of a missing object creates it (`AllowCreateOnUpdate`).
    pub create_on_update: bool,
    /// Supported field selectors. `None` means the server default: only
    /// `metadata.name` and `metadata.namespace`, with the default error message.
    pub field_labels: Option<&'static [FieldLabel]>,
    /// Strategic-merge list strategies, by dotted path without list indexes
    /// (e.g. `spec.containers.env`).
    pub list_merge: &'static [(&'static str, ListMerge)],
}

impl ResourceDef {
    /// A custom resource as an installed CRD with a status subresource serves it.
    pub const fn custom(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        singular: &'static str,
        namespaced: bool,
    ) -> Self {
        Self {
            group,
            version,
            kind,
            plural,
            singular,
            namespaced,
            short_names: &[],
            custom: true,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: &[],
        }
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `nodes`, `poddisruptionbudgets.policy`: the resource as the server names it in messages.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Node`, `Event.events.k8s.io`: the group kind as validation messages name it.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// The list strategy for a dotted path, if the list is not atomic.
    pub(crate) fn list_strategy(&self, path: &str) -> Option<ListMerge> {
        COMMON_LIST_MERGE
            .iter()
            .chain(self.list_merge.iter())
            .find(|(p, _)| *p == path)
            .map(|(_, m)| *m)
    }
}

/// List strategies every type shares through `ObjectMeta`.
const COMMON_LIST_MERGE: &[(&str, ListMerge)] = &[
    ("metadata.finalizers", ListMerge::Set),
    ("metadata.ownerReferences", ListMerge::Key("uid")),
];

const POD_FIELDS: &[FieldLabel] = &[
    FieldLabel::new("metadata.name", "/metadata/name"),
    FieldLabel::new("metadata.namespace", "/metadata/namespace"),
    FieldLabel::new("spec.nodeName", "/spec/nodeName"),
    FieldLabel::new("spec.restartPolicy", "/spec/restartPolicy"),
    FieldLabel::new("spec.schedulerName", "/spec/schedulerName"),
    FieldLabel::new("spec.serviceAccountName", "/spec/serviceAccountName"),
    FieldLabel::boolean("spec.hostNetwork", "/spec/hostNetwork"),
    FieldLabel::new("status.phase", "/status/phase"),
    FieldLabel::new("status.podIP", "/status/podIP"),
    FieldLabel::new("status.nominatedNodeName", "/status/nominatedNodeName"),
];

const NODE_FIELDS: &[FieldLabel] = &[
    FieldLabel::new("metadata.name", "/metadata/name"),
    FieldLabel::boolean("spec.unschedulable", "/spec/unschedulable"),
];

const EVENT_FIELDS: &[FieldLabel] = &[
    FieldLabel::new("metadata.name", "/metadata/name"),
    FieldLabel::new("metadata.namespace", "/metadata/namespace"),
    FieldLabel::new("involvedObject.kind", "/involvedObject/kind"),
    FieldLabel::new("involvedObject.namespace", "/involvedObject/namespace"),
    FieldLabel::new("involvedObject.name", "/involvedObject/name"),
    FieldLabel::new("involvedObject.uid", "/involvedObject/uid"),
    FieldLabel::new("involvedObject.apiVersion", "/involvedObject/apiVersion"),
    FieldLabel::new(
        "involvedObject.resourceVersion",
        "/involvedObject/resourceVersion",
    ),
    FieldLabel::new("involvedObject.fieldPath", "/involvedObject/fieldPath"),
    FieldLabel::new("reason", "/reason"),
    FieldLabel::new("reportingComponent", "/reportingComponent"),
    FieldLabel::new("source", "/source/component"),
    FieldLabel::new("type", "/type"),
];

const POD_LIST_MERGE: &[(&str, ListMerge)] = &[
    ("spec.containers", ListMerge::Key("name")),
    ("spec.initContainers", ListMerge::Key("name")),
    ("spec.ephemeralContainers", ListMerge::Key("name")),
    ("spec.containers.env", ListMerge::Key("name")),
    ("spec.containers.ports", ListMerge::Key("containerPort")),
    ("spec.containers.volumeMounts", ListMerge::Key("mountPath")),
    ("spec.initContainers.env", ListMerge::Key("name")),
    ("spec.volumes", ListMerge::Key("name")),
    ("spec.imagePullSecrets", ListMerge::Key("name")),
    ("status.conditions", ListMerge::Key("type")),
];

const NODE_LIST_MERGE: &[(&str, ListMerge)] = &[
    ("spec.podCIDRs", ListMerge::Set),
    ("status.conditions", ListMerge::Key("type")),
    ("status.addresses", ListMerge::Key("type")),
];

const CONDITIONS_LIST_MERGE: &[(&str, ListMerge)] =
    &[("status.conditions", ListMerge::Key("type"))];

const WORKLOAD_LIST_MERGE: &[(&str, ListMerge)] = &[
    ("spec.template.spec.containers", ListMerge::Key("name")),
    ("spec.template.spec.initContainers", ListMerge::Key("name")),
    ("spec.template.spec.containers.env", ListMerge::Key("name")),
    ("spec.template.spec.volumes", ListMerge::Key("name")),
    ("status.conditions", ListMerge::Key("type")),
];

const NAMESPACE_FIELDS: &[FieldLabel] = &[
    FieldLabel::new("metadata.name", "/metadata/name"),
    FieldLabel::new("status.phase", "/status/phase"),
];

/// A Namespace created through the API is `Active` (`SetDefaults_NamespaceStatus`).
fn namespace_active_status() -> Value {
    json!({ "phase": "Active" })
}

fn pod_pending_status() -> Value {
    json!({ "phase": "Pending" })
}

/// The kinds served by default.
pub fn builtin_resources() -> Vec<ResourceDef> {
    [
        core_resources(),
        event_and_budget_resources(),
        apps_resources(),
        scheduling_and_custom_resources(),
    ]
    .concat()
}

/// The core group's kinds: Node, Pod, Event, Namespace, ServiceAccount, ConfigMap.
fn core_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "",
            version: "v1",
            kind: "Node",
            plural: "nodes",
            singular: "node",
            namespaced: false,
            short_names: &["no"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: Some(NODE_FIELDS),
            list_merge: NODE_LIST_MERGE,
        },
        ResourceDef {
            group: "",
            version: "v1",
            kind: "Pod",
            plural: "pods",
            singular: "pod",
            namespaced: true,
            short_names: &["po"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Replace(pod_pending_status),
            delete_returns_object: true,
            create_on_update: false,
            field_labels: Some(POD_FIELDS),
            list_merge: POD_LIST_MERGE,
        },
        ResourceDef {
            group: "",
            version: "v1",
            kind: "Event",
            plural: "events",
            singular: "event",
            namespaced: true,
            short_names: &["ev"],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: true,
            field_labels: Some(EVENT_FIELDS),
            list_merge: &[],
        },
        ResourceDef {
            group: "",
            version: "v1",
            kind: "Namespace",
            plural: "namespaces",
            singular: "namespace",
            namespaced: false,
            short_names: &["ns"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Replace(namespace_active_status),
            delete_returns_object: false,
            create_on_update: false,
            field_labels: Some(NAMESPACE_FIELDS),
            list_merge: CONDITIONS_LIST_MERGE,
        },
        ResourceDef {
            group: "",
            version: "v1",
            kind: "ServiceAccount",
            plural: "serviceaccounts",
            singular: "serviceaccount",
            namespaced: true,
            short_names: &["sa"],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: &[],
        },
        ResourceDef {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            plural: "configmaps",
            singular: "configmap",
            namespaced: true,
            short_names: &["cm"],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: &[],
        },
    ]
}

/// `events.k8s.io`'s Event and `policy`'s PodDisruptionBudget.
fn event_and_budget_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "events.k8s.io",
            version: "v1",
            kind: "Event",
            plural: "events",
            singular: "event",
            namespaced: true,
            short_names: &["ev"],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: true,
            field_labels: None,
            list_merge: &[],
        },
        ResourceDef {
            group: "policy",
            version: "v1",
            kind: "PodDisruptionBudget",
            plural: "poddisruptionbudgets",
            singular: "poddisruptionbudget",
            namespaced: true,
            short_names: &["pdb"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: CONDITIONS_LIST_MERGE,
        },
    ]
}

/// The `apps` group's workloads: DaemonSet, ReplicaSet, StatefulSet, Deployment.
fn apps_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "apps",
            version: "v1",
            kind: "DaemonSet",
            plural: "daemonsets",
            singular: "daemonset",
            namespaced: true,
            short_names: &["ds"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: WORKLOAD_LIST_MERGE,
        },
        ResourceDef {
            group: "apps",
            version: "v1",
            kind: "ReplicaSet",
            plural: "replicasets",
            singular: "replicaset",
            namespaced: true,
            short_names: &["rs"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: WORKLOAD_LIST_MERGE,
        },
        ResourceDef {
            group: "apps",
            version: "v1",
            kind: "StatefulSet",
            plural: "statefulsets",
            singular: "statefulset",
            namespaced: true,
            short_names: &["sts"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: WORKLOAD_LIST_MERGE,
        },
        ResourceDef {
            group: "apps",
            version: "v1",
            kind: "Deployment",
            plural: "deployments",
            singular: "deployment",
            namespaced: true,
            short_names: &["deploy"],
            custom: false,
            status_subresource: true,
            status_on_create: StatusOnCreate::Drop,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: WORKLOAD_LIST_MERGE,
        },
    ]
}

/// `scheduling.k8s.io`'s PriorityClass, and the custom kinds forewarn deletes: Karpenter's
/// NodeClaim, Cluster API's Machine.
fn scheduling_and_custom_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: "scheduling.k8s.io",
            version: "v1",
            kind: "PriorityClass",
            plural: "priorityclasses",
            singular: "priorityclass",
            namespaced: false,
            short_names: &["pc"],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: false,
            field_labels: None,
            list_merge: &[],
        },
        ResourceDef::custom(
            "karpenter.sh",
            "v1",
            "NodeClaim",
            "nodeclaims",
            "nodeclaim",
            false,
        ),
        ResourceDef::custom(
            "cluster.x-k8s.io",
            "v1beta1",
            "Machine",
            "machines",
            "machine",
            true,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_server() {
        let all = builtin_resources();
        let pdb = all
            .iter()
            .find(|r| r.kind == "PodDisruptionBudget")
            .unwrap();
        assert_eq!(pdb.api_version(), "policy/v1");
        assert_eq!(pdb.qualified_resource(), "poddisruptionbudgets.policy");
        let node = all.iter().find(|r| r.kind == "Node").unwrap();
        assert_eq!(node.api_version(), "v1");
        assert_eq!(node.qualified_resource(), "nodes");
        assert_eq!(node.group_kind(), "Node");
    }

    #[test]
    fn taints_are_atomic_and_conditions_merge_by_type() {
        let all = builtin_resources();
        let node = all.iter().find(|r| r.kind == "Node").unwrap();
        assert_eq!(node.list_strategy("spec.taints"), None);
        assert_eq!(
            node.list_strategy("status.conditions"),
            Some(ListMerge::Key("type"))
        );
        assert_eq!(
            node.list_strategy("metadata.finalizers"),
            Some(ListMerge::Set)
        );
    }
}
