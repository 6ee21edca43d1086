//! An in-memory HTTP fake of the Kubernetes API server for forewarn's tests.
//!
//! [`KubeFake::start`] serves plain HTTP on `127.0.0.1` (a free port the OS
//! picks), without authentication, from a task on the current tokio runtime.
//! Tests talk to it with the real `kube` client ([`KubeFake::client`]) and
//! seed or inspect it directly ([`KubeFake::insert`], [`KubeFake::get`],
//! [`KubeFake::requests`], ...).
//!
//! # Faithful
//!
//! * **Paths and kinds** of the real server, from a table ([`ResourceDef`],
//!   [`builtin_resources`]; add rows with [`KubeFakeBuilder::resource`]): core/v1
//!   `nodes`, `pods` (also listed across namespaces at `/api/v1/pods`), `events`,
//!   `namespaces`, `serviceaccounts`, `configmaps`;
//!   `events.k8s.io/v1` `events`; `policy/v1` `poddisruptionbudgets`; `apps/v1`
//!   `daemonsets`, `deployments`, `replicasets`, `statefulsets`; `scheduling.k8s.io/v1`
//!   `priorityclasses` (cluster-scoped); custom resources
//!   `karpenter.sh/v1` `nodeclaims` (cluster-scoped) and `cluster.x-k8s.io/v1beta1`
//!   `machines` (namespaced). `/status` subresources, `pods/eviction`, `/version`
//!   and the legacy discovery documents (`/api`, `/api/v1`, `/apis`,
//!   `/apis/{group}`, `/apis/{group}/{version}`).
//! * **Verbs**: get, list, create, replace, patch, delete. Unknown paths answer a
//!   404 `Status`, verbs a path does not serve a 405 `Status`.
//! * **`Status` bodies** as `k8s.io/apimachinery/pkg/api/errors` builds them:
//!   `NotFound`, `AlreadyExists`, `Conflict`, `BadRequest`, `Invalid` (with
//!   `details.causes`), `UnsupportedMediaType`, `TooManyRequests`,
//!   `MethodNotAllowed`, `InternalError`, down to the messages.
//! * **resourceVersion**: one global counter, bumped by every write and stored in
//!   `metadata.resourceVersion`; lists carry it. A replace or patch whose
//!   `metadata.resourceVersion` differs from the stored one is a 409 `Conflict`; a
//!   replace of a custom resource without one is a 422, as for CRDs; a write that
//!   changes nothing keeps the resourceVersion. `uid`, `creationTimestamp`,
//!   `generation` (bumped when anything outside metadata and status changes) are
//!   set by the server; a create that carries a resourceVersion is refused with the
//!   real 500. `generateName` works.
//! * **Status subresources**: writes to an object whose type has one keep the
//!   stored status; writes to `/status` change only the status. A Pod created
//!   through the API starts `Pending`, as on the real server (seed running pods
//!   with [`KubeFake::insert`], which keeps what it is given).
//! * **Deletion**: pods answer with the deleted object, other kinds with a
//!   `Success` `Status` naming the object, as their real registries do. Objects
//!   with finalizers get a `deletionTimestamp` and go away when a write empties
//!   `metadata.finalizers`. Delete preconditions (uid, resourceVersion) are
//!   checked. A pod on a node can be given a graceful deletion period
//!   ([`KubeFake::set_eviction_grace`]). `dryRun=All` is honoured on every write.
//! * **Selectors**: `labelSelector` with `=`, `==`, `!=`, `in`, `notin`,
//!   exists, `!`, matched by kube's `Selector` (which has no `>`/`<`: refused); `fieldSelector` with `=`, `==`, `!=` on the fields
//!   each type really supports (pods: `metadata.name`, `metadata.namespace`,
//!   `spec.nodeName`, `status.phase`, ...), with the real per-type error message
//!   (`field label not supported: x`, or for types without field conversions
//!   `"x" is not a known field selector: only "metadata.name", "metadata.namespace"`).
//!   A list of pods by `spec.nodeName=<node>` reads that node's pods from an index, as the API
//!   server's watch cache does, instead of scanning every pod.
//!   `limit`, `continue` and `resourceVersion` are accepted and ignored.
//! * **Patches**: merge patch (RFC 7386), JSON patch (RFC 6902, a failing `test`
//!   is the real 422), strategic merge patch with the real list strategies of
//!   the served types (Node `spec.taints` is atomic, conditions merge by `type`,
//!   finalizers merge as a set; `$patch`, `$retainKeys`,
//!   `$deleteFromPrimitiveList` directives). Custom resources refuse strategic
//!   merge patch with the real 415, like the apiextensions server.
//! * **Server-side apply** (`application/apply-patch+yaml`, see the `apply` module), as the
//!   API server's apply patcher and field manager do it: `fieldManager` is required (the real
//!   422 about `PatchOptions.meta.k8s.io`; `force` on another patch type is the real 422 too);
//!   the configuration (YAML or JSON) must carry the URL's `apiVersion` and `kind` and the
//!   path's name (400); an absent object is created through the create's admission chain
//!   (uid, resourceVersion, creationTimestamp, the type's defaults), an existing one updated;
//!   `managedFields` holds one `Apply` entry per manager (`FieldsV1`); values the manager
//!   applied before and leaves out are removed unless another manager owns them; a value
//!   another manager owns, applied with another value, is the real 409 `Conflict` naming each
//!   manager and field (`Apply failed with 1 conflict: conflict with "m": .data.k`, causes of
//!   type `FieldManagerConflict`), unless `force=true`, which moves the field to the applier;
//!   an apply that changes nothing writes nothing (resourceVersion and entry time kept);
//!   `dryRun=All` stores nothing. Once an object has `managedFields`, its other writes record
//!   their manager (`fieldManager`, else the `User-Agent` up to `/`) as an `Update` entry
//!   owning what they changed, and keep the entries when the body carries none.
//!   *Approximated*: ownership is tracked down to map keys; every list is one atomic value
//!   (no `listType=map`/`set` element ownership, no `k:{...}`/`v:...` keys, no `.` entries);
//!   objects created or written without apply record no managers until they are applied (the
//!   real server records an `Update` entry from the first write, so an apply over such a
//!   field with another value conflicts there and not here); no `status` ownership (dropped
//!   from applies to types with a status subresource); no conversion between versions.
//! * **Eviction**: the rules of the real eviction subresource and disruption
//!   controller, computed from the pods the fake holds (see the `eviction`
//!   module): budgets with `minAvailable`/`maxUnavailable` as ints or percentages,
//!   the 429 naming the budget, the 500 for more than one budget, unconditional
//!   eviction of `Pending`/`Succeeded`/`Failed`/terminating pods, unready pods
//!   evicted when the budget is met or with `unhealthyPodEvictionPolicy:
//!   AlwaysAllow`. PodDisruptionBudgets read from the fake carry the status the
//!   disruption controller would have written.
//! * **Events**: core/v1 and events.k8s.io/v1 creation is validated with the real
//!   `ValidateEventCreate` rules (a core/v1 Event about a cluster-scoped object
//!   must live in `default`, ...), answering the real 422.
//! * **Pod resources**: a created pod's containers and init containers are validated as
//!   `validateResourceRequirements` does, after the API defaults copy a limit to a missing
//!   request: a non-overcommitable resource (an extended one such as `nvidia.com/gpu`, or
//!   hugepages) requested without a limit, or with a different one, and a request above its
//!   limit, are the real 422 with the real field paths and messages.
//! * **Admission chain** (the `chain` module), for every create through the HTTP API, a
//!   `dryRun=All` one included (it runs the whole chain and stores nothing), in the real
//!   server's order: decode and API defaults (`pkg/apis/core/v1/defaults.go`: `SetDefaults_Pod`,
//!   `SetDefaults_PodSpec`, `SetDefaults_Container`, ...: `restartPolicy`, `dnsPolicy`,
//!   `schedulerName`, `terminationGracePeriodSeconds`, `securityContext`,
//!   `enableServiceLinks`, each container's `imagePullPolicy` by its tag, termination message
//!   path and policy, ports' `TCP`, a limit copied to a missing request, volume modes; a
//!   Namespace's `kubernetes.io/metadata.name` label), then the mutating plugins in the order
//!   of `AllOrderedPlugins` (`pkg/kubeapiserver/options/plugins.go`): `ServiceAccount`
//!   (`default` when none is named, the projected `kube-api-access-<5 chars>` token volume
//!   and its read-only mount in every container unless the pod or its account opts out, a
//!   named account must exist: `default` always does, another only when a ServiceAccount is
//!   stored), `Priority` (the class's value and preemption policy, `system-node-critical`
//!   and `system-cluster-critical` built in, else the `globalDefault` class, else 0; an unknown
//!   class or a contradicting stated value is the plugin's 403), `DefaultTolerationSeconds`
//!   (the 300 s `not-ready` and `unreachable` `NoExecute` tolerations), then the configured
//!   mutating webhooks ([`KubeFakeBuilder::mutating_webhook`], [`Webhook`]: a JSON Patch for
//!   every pod of a namespace, ...); then the object's own validation; then the validating
//!   plugins: `ServiceAccount`, `PodSecurity` (the namespace's
//!   `pod-security.kubernetes.io/enforce` and `enforce-version` labels; every baseline and
//!   restricted check of `pod-security-admission` with its per-version implementations, the
//!   403 worded as the plugin words it: `pods "p" is forbidden: violates PodSecurity
//!   "restricted:latest": allowPrivilegeEscalation != false (container "app" must set
//!   securityContext.allowPrivilegeEscalation=false), ...`), ValidatingAdmissionPolicy (below),
//!   then the configured validating webhooks (`admission webhook "NAME" denied the request:
//!   MESSAGE`, 400 unless the webhook says otherwise). The object stored and answered is the
//!   mutated one, and later plugins see it (a policy testing `has(object.spec.serviceAccountName)`
//!   sees `default`). Namespaces are served (core/v1 `namespaces`, `Active` when created), so a
//!   test enables PodSecurity by storing a Namespace with those labels; a namespace not stored
//!   has no labels, which is `privileged`. Updates of a pod go through the validating half
//!   (PodSecurity only when the update changes the containers, as the plugin's
//!   `isSignificantPodUpdate`). [`KubeFake::insert`] stores what it is given, unadmitted.
//! * **Fault injection**: [`KubeFake::inject`], [`KubeFake::set_latency`],
//!   [`KubeFake::set_rate_limit`] (429 with `Retry-After: 1`, like API priority
//!   and fairness), [`KubeFake::hang`]; [`KubeFake::counters`] counts them.
//! * **API Priority and Fairness** (opt-in, [`KubeFakeBuilder::flow_control`] then
//!   [`KubeFake::set_server_capacity`]): the stored FlowSchemas classify each request by its
//!   identity (the `Impersonate-User` and `Impersonate-Group` headers, the only identity the fake
//!   knows) and its verb and resource; the stored PriorityLevelConfigurations divide the
//!   server's capacity by their nominal shares, lend and borrow as the API server's borrowing
//!   computes it, and share each level fairly between its flows; beyond a flow's share a request
//!   queues or is refused with the real 429. Other clients' load is declared per level
//!   ([`ForeignLoad`], e.g. 80 % of the capacity in `global-default`), never sent, and
//!   [`KubeFake::flow_stats`] says what each level started, queued and refused. What is modelled
//!   exactly and what is approximated — a seat is one request a second of the fake's clock; a
//!   queued request is answered at once, its wait only counted (and planned anew as its share
//!   changes); a level's demand is its high watermark over the last ten seconds, the limits
//!   recomputed at every request — is in the `flow_control` module's docs.
//!
//! # Cluster simulation (opt-in)
//!
//! Off unless the builder turns it on ([`KubeFakeBuilder::scheduler`],
//! [`KubeFakeBuilder::replicasets`], [`KubeFakeBuilder::autoscaler`]); off, the fake
//! behaves exactly as without it. On, it runs on the fake's clock
//! ([`KubeFake::set_clock`]), deterministically and without sleeping: before every request
//! is answered and every look through the handle ([`KubeFake::settle`] looks without
//! anything else), what fell due since (graceful deletions finishing, pods starting, nodes
//! launching) happens in time order, each at its own time, and the models react to every
//! write at once. It keeps an index of the pods and nodes updated from the writes (per-node
//! allocated requests and priorities, the pending pods), so a cluster of 1,000 nodes and
//! 10,000 pods stays cheap (`tests/scale.rs`).
//!
//! * **Scheduler** ([`SchedulerSettings`]): binds pending pods (no `spec.nodeName`, not
//!   terminating, `schedulerName` unset or `default-scheduler`, no scheduling gates), highest
//!   priority first, then in arrival order. Filters, in kube-scheduler's order, with its
//!   reasons: `NodeUnschedulable` (a cordoned node takes only pods tolerating
//!   `node.kubernetes.io/unschedulable:NoSchedule`), `TaintToleration` (`NoSchedule` and
//!   `NoExecute` taints; `Equal`/`Exists`, empty key or effect matching all; a node that is not
//!   Ready carries the lifecycle controller's `node.kubernetes.io/not-ready`, or for `Unknown`
//!   `unreachable`, `NoSchedule` taint, so it takes only pods tolerating that), `NodeAffinity`
//!   (`nodeSelector`; required node affinity: ORed terms, ANDed `matchExpressions` with
//!   `In`/`NotIn`/`Exists`/`DoesNotExist`/`Gt`/`Lt`, `matchFields` on `metadata.name`),
//!   `NodeResourcesFit` (`status.allocatable`, else `capacity`, against the requests of the
//!   bound pods that are not `Succeeded`/`Failed`, terminating ones included: pod count, cpu,
//!   memory, ephemeral storage, any extended resource; a pod's requests are its containers'
//!   sum against its largest init container, restartable sidecars counted along, plus
//!   `overhead`, a limit standing for a missing request as API defaulting does; quantities in
//!   every suffix and exponent form, read by `kube_quantity`). Binding sets `spec.nodeName` and `PodScheduled=True`; the
//!   pod is `Running` and `Ready` (start time, pod IP, container statuses) after
//!   [`SchedulerSettings::start_delay`]. A pod that fits nowhere gets `PodScheduled=False`,
//!   `Unschedulable`, with the real `FitError` text (`0/3 nodes are available: 1 node(s) were
//!   unschedulable, 2 Insufficient cpu.`, reasons counted and sorted as strings), followed as
//!   on a real cluster by the preemption part (`preemption: 0/3 nodes are available: 3 No
//!   preemption victims found for incoming pod..`, double stop included), or `no nodes
//!   available to schedule pods`. Pods are retried when room appears on a node (it changed, a
//!   pod left it, a nomination to it was dropped), on those nodes only.
//! * **Preemption**: priority from `spec.priority`, else from `spec.priorityClassName` (stored
//!   `scheduling.k8s.io/v1` PriorityClasses, `system-node-critical` and
//!   `system-cluster-critical` built in), else the `globalDefault` class, else 0; the policy
//!   from `spec.preemptionPolicy`, else the class. A pod that fits nowhere and whose policy is
//!   not `Never` picks, among the nodes where only resources failed, the one where deleting
//!   pods of strictly lower priority makes it fit (all removed, then the most important given
//!   back while it still fits), by the real order: lowest highest-priority victim, lowest sum
//!   of priorities, fewest victims (then the node's name). Victims get `DisruptionTarget`
//!   (`PreemptionByScheduler`) and a graceful delete with their `terminationGracePeriodSeconds`
//!   (the eviction grace, [`KubeFake::set_eviction_grace`], when they state none); the pod gets
//!   `status.nominatedNodeName`, the room there is kept for it against pods of its priority or
//!   lower, and it binds once the victims are gone (`not eligible due to a terminating pod on
//!   the nominated node.` meanwhile, as `not eligible due to preemptionPolicy=Never.` for
//!   `Never` pods). Lower-priority pods nominated to that node lose their nomination.
//! * **Pod garbage collection** (with the scheduler): deleting a Node deletes its pods at once.
//! * **ReplicaSets**: a pod whose controller is a stored `apps/v1` ReplicaSet (uid matching,
//!   not being deleted) that starts terminating, turns `Succeeded`/`Failed` or is deleted is
//!   replaced at once (the controller does not count terminating pods): `<rs>-<5 chars>`, the
//!   template's labels, annotations and spec, an ownerReference to the ReplicaSet, `Pending`,
//!   unbound. A ReplicaSet stating `spec.replicas` that still has that many active pods gets
//!   none.
//! * **Autoscaler** ([`AutoscalerSettings`], [`NodeGroup`]), scale-up only: a pod the scheduler
//!   found no node for, not nominated to one, at or above the expendable cutoff (default -10,
//!   as `--expendable-pods-priority-cutoff`), is counted first-fit into the nodes already
//!   launching, else into a new node of the first group (in the order given) whose template
//!   takes it by the same filters and whose `max_size` allows; a pod no template could take
//!   triggers nothing. A new node joins Ready [`AutoscalerSettings::launch_delay`] later
//!   (default 60 s), named `<group>-<n>`, with `spec.providerID`
//!   `aws:///<zone>/i-<17 hex digits>`, the template's labels and taints, `kubernetes.io/os`,
//!   `kubernetes.io/arch` and `kubernetes.io/hostname`, its allocatable as capacity.
//! * **For benchmarks**: [`KubeFake::pod_timeline`] (per pod: owner, node, first seen, running,
//!   stopped serving) and [`KubeFake::launched_nodes`] (group, name, instance, decided, Ready).
//!
//! Approximated: scores are `LeastAllocated` on cpu and memory only (ties by node name, not at
//! random), over every node (no `percentageOfNodesToScore`); a pod retried after room appeared
//! looks at those nodes only and keeps its condition's message unless preemption there now
//! nominates; PodDisruptionBudgets and start times play no part in choosing victims (the real
//! plugin only prefers, best effort, candidates violating fewer budgets); no Events are
//! written; a pod created through the API carries the priority the Priority plugin fixed at
//! creation, while a seeded pod without `spec.priority` has it read from its class when the pod
//! is (and again when a class changes), an unknown class meaning 0; the kubelet model only
//! starts the pods the scheduler model bound (seeded pods keep the status given); the
//! autoscaler keeps its launching nodes and counts newly waiting pods into them instead of
//! simulating from scratch every 10 s, ignores DaemonSet pods on new nodes, picks a group by
//! order (a priority expander) and never scales down; PodGC deletes orphans at once instead of
//! after 40 s.
//!
//! # Knowingly not implemented
//!
//! * watch (`?watch=true` answers 405), `deletecollection` (405), server-side apply of
//!   `/status` (415), YAML and protobuf bodies of other verbs (415), aggregated discovery,
//!   `managedFields` of objects never applied (see **Server-side apply**), `selfLink`, pagination (`limit` is ignored: lists are complete), the namespace lifecycle
//!   (a pod may be created in a namespace that is not stored, as with `NamespaceAutoProvision`;
//!   deleting a Namespace deletes nothing in it), authentication and authorization, Pod
//!   validation (e.g. a Pod without containers is accepted), the admission plugins other than
//!   those above (`LimitRanger`, `NodeRestriction`, `ResourceQuota`, `RuntimeClass`,
//!   `PodTolerationRestriction`, mutating admission policies, ...).
//! * Approximated admission: mutating plugins and webhooks run on creates only (the real
//!   `DefaultTolerationSeconds` also runs on updates, the webhooks on what they register for);
//!   webhooks are called in-process (no `AdmissionReview` over HTTPS, no timeouts or
//!   `failurePolicy`, no reinvocation, a namespace name instead of a `namespaceSelector`); a
//!   generated name appears in admission messages as its `generateName` prefix; PodSecurity
//!   exemptions, `audit` and `warn` modes, the user-namespace relaxations, the 1.34
//!   `hostProbesAndhostLifecycle` check and the field form of the AppArmor check are not
//!   modelled; the ServiceAccount plugin's mirror-pod and mountable-secrets rules are not
//!   either. See the `chain` module.
//! * The disruption controller is emulated, not run: for percentage budgets a pod
//!   whose controller is not stored counts as one expected pod (see `eviction`).
//! * Garbage collection: deleting an owner does not delete its dependents.
//! * Without the simulation, no controller, scheduler or kubelet runs. With it, still none of:
//!   inter-pod affinity and anti-affinity, topology spread constraints, host ports, volumes,
//!   preferred node affinity and `PreferNoSchedule` in scoring, taint-based eviction
//!   (`NoExecute` taints do not evict running pods), Deployments, StatefulSets, DaemonSets and
//!   Jobs (no pods created for them), a ReplicaSet scaled up or down (only leaving pods are
//!   replaced), pod status updates beyond starting (no readiness changes, no restarts), the
//!   `pods/binding` subresource.
//! * The `kube` client from [`KubeFake::client`] has kube's default retry layer
//!   **off** (`Config::default_retry = false`), so tests see every 429/503 the fake
//!   sends. kube 5's `Config::new` turns it on, and then it retries 429, 503 and
//!   504 up to 15 times, honouring `Retry-After` — including eviction refusals.

mod admission;
mod apply;
mod chain;
mod discovery;
mod eviction;
mod filters;
mod flow_control;
mod patch;
mod quantity;
mod resources;
mod selectors;
mod server;
mod sim;
mod status;
mod store;
mod validation;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use axum::http::Method;
pub use chain::webhooks::{Webhook, WebhookAction};
pub use flow_control::{FlowStats, ForeignLoad, suggested as suggested_flow_control};
pub use resources::{FieldLabel, ListMerge, ResourceDef, StatusOnCreate, builtin_resources};
pub use sim::settings::{AutoscalerSettings, NodeGroup, SchedulerSettings};
pub use sim::timeline::{LaunchedNode, PodTimeline};

use server::{Control, FakeState, Shared, TokenBucket};
use sim::Sim;
use sim::settings::SimSettings;
use store::Store;

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: Method,
    /// Path without the query, e.g. `/api/v1/nodes/n1`.
    pub path: String,
    /// The raw (still percent-encoded) query string, empty when there is none.
    pub query: String,
    /// The `Content-Type` header, parameters included.
    pub content_type: Option<String>,
    /// The body: parsed JSON, or a JSON string holding the raw text when it is
    /// not JSON; `None` when empty.
    pub body: Option<Value>,
    /// The bearer token it was sent with (`Authorization: Bearer <token>`), if any: an EKS
    /// client's tells whose AWS credentials signed it.
    pub bearer: Option<String>,
    /// The HTTP status answered; 0 for a request held by [`KubeFake::hang`].
    pub status: u16,
    /// When it was answered (for a held request: when it was held).
    pub at: chrono::DateTime<chrono::Utc>,
}

impl RecordedRequest {
    /// The decoded value of one query parameter.
    pub fn query_param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

/// An injected failure: requests matching `method` (any when `None`) and whose
/// path contains `path_contains` (any when `None`) are answered with a `Status`
/// of code `status`, `times` times, before normal service resumes. A 429 also
/// carries `Retry-After: 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub method: Option<Method>,
    pub path_contains: Option<String>,
    pub status: u16,
    pub times: usize,
}

impl Fault {
    /// Any request, once, answered with `status`.
    pub fn new(status: u16) -> Self {
        Self {
            method: None,
            path_contains: None,
            status,
            times: 1,
        }
    }

    /// Only requests with this method.
    pub fn method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    /// Only requests whose path contains this text.
    pub fn path_contains(mut self, text: impl Into<String>) -> Self {
        self.path_contains = Some(text.into());
        self
    }

    /// How many requests fail.
    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }
}

/// Counters kept since the fake started (not reset by [`KubeFake::clear_requests`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Every request received.
    pub requests: u64,
    /// Every 429 answered, whatever its cause (rate limit, fault, disruption budget).
    pub too_many_requests: u64,
    /// 429s answered by the rate limiter.
    pub rate_limited: u64,
    /// Answers replaced by an injected [`Fault`].
    pub faults_injected: u64,
    /// Requests held by [`KubeFake::hang`].
    pub hung: u64,
}

/// Configures a [`KubeFake`] before it starts.
#[derive(Debug, Clone)]
pub struct KubeFakeBuilder {
    resources: Vec<ResourceDef>,
    sim: SimSettings,
    version: (u32, u32),
    admission: bool,
    /// Objects stored before the server starts (the flow-control configuration).
    seeded: Vec<Value>,
    webhooks: chain::webhooks::Webhooks,
}

impl Default for KubeFakeBuilder {
    fn default() -> Self {
        Self {
            resources: builtin_resources(),
            sim: SimSettings::default(),
            version: (1, 33),
            admission: true,
            seeded: Vec::new(),
            webhooks: chain::webhooks::Webhooks::default(),
        }
    }
}

impl KubeFakeBuilder {
    /// The version `/version` answers (1.33 by default). Only that answer changes: the kinds
    /// served are the builder's, whatever the version.
    pub fn version(mut self, major: u32, minor: u32) -> Self {
        self.version = (major, minor);
        self
    }

    /// Serves `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and their bindings
    /// (served from Kubernetes 1.30), enforced unless [`KubeFakeBuilder::admission`] says not.
    pub fn admission_policies(self) -> Self {
        let def = |kind, plural| ResourceDef {
            group: "admissionregistration.k8s.io",
            version: "v1",
            kind,
            plural,
            singular: "",
            namespaced: false,
            short_names: &[],
            custom: false,
            status_subresource: false,
            status_on_create: StatusOnCreate::Keep,
            delete_returns_object: false,
            create_on_update: true,
            field_labels: None,
            list_merge: &[],
        };
        self.resource(def(
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
        ))
        .resource(def(
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ))
    }

    /// Serves `flowcontrol.apiserver.k8s.io/v1` FlowSchemas and PriorityLevelConfigurations
    /// (served from Kubernetes 1.29), seeded with a 1.29+ server's mandatory and suggested ones
    /// ([`suggested_flow_control`]). API Priority and Fairness is enforced once
    /// [`KubeFake::set_server_capacity`] gives the server a capacity (see the crate docs).
    pub fn flow_control(mut self) -> Self {
        for def in flow_control::resources() {
            self = self.resource(def);
        }
        self.seeded.extend(flow_control::suggested());
        self
    }

    /// Whether stored ValidatingAdmissionPolicies are enforced (by default they are, see
    /// the `admission` module); `false`: a cluster that stores them and enforces none.
    pub fn admission(mut self, enforced: bool) -> Self {
        self.admission = enforced;
        self
    }

    /// Adds a mutating admission webhook, called after the built-in mutating plugins, after
    /// the webhooks added before it (see the `chain` module): e.g. one adding a sidecar to every
    /// pod of a namespace.
    pub fn mutating_webhook(mut self, webhook: Webhook) -> Self {
        self.webhooks.mutating.push(webhook);
        self
    }

    /// Adds a validating admission webhook, called last, after the ValidatingAdmissionPolicies.
    pub fn validating_webhook(mut self, webhook: Webhook) -> Self {
        self.webhooks.validating.push(webhook);
        self
    }

    /// Serves one more kind, or replaces the row with the same group, version and plural.
    pub fn resource(mut self, def: ResourceDef) -> Self {
        self.resources.retain(|r| {
            !(r.group == def.group && r.version == def.version && r.plural == def.plural)
        });
        self.resources.push(def);
        self
    }

    /// Turns on the scheduler model (with priority preemption unless the settings say
    /// otherwise; see the crate docs): pending pods are bound to nodes with room and started.
    pub fn scheduler(mut self, settings: SchedulerSettings) -> Self {
        self.sim.scheduler = Some(settings);
        self
    }

    /// Turns on the ReplicaSet model: a pod of a stored ReplicaSet that starts terminating or
    /// goes is replaced at once from the ReplicaSet's template.
    pub fn replicasets(mut self) -> Self {
        self.sim.replicasets = true;
        self
    }

    /// Turns on the Cluster Autoscaler model, and the scheduler model with its default
    /// settings unless [`KubeFakeBuilder::scheduler`] set it.
    pub fn autoscaler(mut self, settings: AutoscalerSettings) -> Self {
        self.sim.autoscaler = Some(settings);
        self.sim
            .scheduler
            .get_or_insert_with(SchedulerSettings::default);
        self
    }

    /// Binds `127.0.0.1:0` and serves from a task on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start(self) -> KubeFake {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("kube-fake: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("kube-fake: local address");
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut store = Store::new(self.resources);
        store.webhooks = self.webhooks;
        for obj in self.seeded {
            store
                .seed(obj)
                .unwrap_or_else(|e| panic!("kube-fake: seeding: {e}"));
        }
        let sim = self
            .sim
            .enabled()
            .then(|| Sim::new(self.sim.clone(), &mut store));
        let shared = Arc::new(Shared {
            state: Mutex::new(FakeState {
                store,
                control: Control::default(),
                sim,
            }),
            shutdown: shutdown_rx.clone(),
            server_address: addr.to_string(),
            version: self.version,
            admission: self.admission,
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(Arc::clone(&shared));
        let mut stop = shutdown_rx;
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            });
            if let Err(e) = serve.await {
                tracing::warn!("kube-fake server stopped: {e}");
            }
        });
        tracing::debug!("kube-fake listening on http://{addr}");
        KubeFake {
            shared,
            addr,
            shutdown: shutdown_tx,
            server: Some(server),
        }
    }
}

/// A running fake API server. Dropping it stops the server.
pub struct KubeFake {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for KubeFake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeFake")
            .field("addr", &self.addr)
            .finish()
    }
}

impl KubeFake {
    /// Starts a fake serving the built-in resources.
    pub async fn start() -> Self {
        KubeFakeBuilder::default().start().await
    }

    /// A builder, to serve more kinds.
    pub fn builder() -> KubeFakeBuilder {
        KubeFakeBuilder::default()
    }

    /// The socket address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Config` for the fake: no auth, default namespace `default`,
    /// connect timeout 5 s, read and write timeouts 15 s, and kube's default
    /// retry layer off (see the crate docs).
    pub fn config(&self) -> kube::Config {
        let url = self.url().parse().expect("kube-fake: the URL is valid");
        let mut config = kube::Config::new(url);
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(15));
        config.write_timeout = Some(Duration::from_secs(15));
        config.default_retry = false;
        config
    }

    /// A real `kube::Client` built from [`KubeFake::config`].
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube-fake: build the kube client")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.shared.lock()
    }

    fn kind_index(state: &FakeState, api_version: &str, kind: &str) -> usize {
        state
            .store
            .find_kind(api_version, kind)
            .unwrap_or_else(|| panic!("kube-fake does not serve {api_version} {kind}"))
    }

    /// Whether the fake serves `kind` of `api_version` (e.g. `admissionregistration.k8s.io/v1`
    /// `ValidatingAdmissionPolicy`, served only with [`KubeFakeBuilder::admission_policies`]).
    pub fn serves(&self, api_version: &str, kind: &str) -> bool {
        self.lock().store.find_kind(api_version, kind).is_some()
    }

    /// Seeds an object of any served kind (found by apiVersion and kind), as if it
    /// had been created: uid, resourceVersion, creationTimestamp and generation are
    /// set like the server would, everything else (status included) is kept. An
    /// object of the same name is replaced. A namespaced object without a
    /// namespace goes to `default`. Returns the stored object.
    ///
    /// # Panics
    ///
    /// If `obj` does not serialize to an object of a served kind with a name.
    pub fn insert<T: Serialize>(&self, obj: T) -> Value {
        let value = serde_json::to_value(obj).expect("kube-fake: insert: serialize");
        self.lock()
            .store
            .seed(value)
            .unwrap_or_else(|e| panic!("kube-fake: insert: {e}"))
    }

    /// One object, as a GET would answer it.
    ///
    /// # Panics
    ///
    /// If the kind is not served.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let state = self.lock();
        let idx = Self::kind_index(&state, api_version, kind);
        state.store.get(idx, namespace, name)
    }

    /// Every object of a kind, in all namespaces, ordered by namespace and name.
    ///
    /// # Panics
    ///
    /// If the kind is not served.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let state = self.lock();
        let idx = Self::kind_index(&state, api_version, kind);
        state
            .store
            .objects_of(idx, None)
            .map(|o| state.store.present(idx, o.clone()))
            .collect()
    }

    /// Removes an object at once, without API semantics (no finalizers, no grace).
    ///
    /// # Panics
    ///
    /// If the kind is not served.
    pub fn remove(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut state = self.lock();
        let idx = Self::kind_index(&state, api_version, kind);
        state.store.remove(idx, namespace, name)
    }

    /// All core/v1 and events.k8s.io/v1 Events, core ones first.
    pub fn events(&self) -> Vec<Value> {
        let mut events = self.list("v1", "Event");
        events.extend(self.list("events.k8s.io/v1", "Event"));
        events
    }

    /// The current value of the global resourceVersion counter.
    pub fn resource_version(&self) -> u64 {
        self.lock().store.resource_version()
    }

    /// Every request received since the start or the last [`KubeFake::clear_requests`].
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().control.log.clone()
    }

    /// The recorded requests that are not GETs.
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.lock()
            .control
            .log
            .iter()
            .filter(|r| r.method != Method::GET)
            .cloned()
            .collect()
    }

    /// Forgets the recorded requests (the counters stay).
    pub fn clear_requests(&self) {
        self.lock().control.log.clear();
    }

    /// Adds a fault; faults are consulted in the order they were added.
    pub fn inject(&self, fault: Fault) {
        self.lock().control.faults.push(fault);
    }

    /// Drops the faults not used up yet.
    pub fn clear_faults(&self) {
        self.lock().control.faults.clear();
    }

    /// Delay added before every answer (zero to disable).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().control.latency = latency;
    }

    /// Answers 429 `TooManyRequests` with `Retry-After: 1` to requests beyond
    /// `requests_per_second` (token bucket holding at most `burst` requests, full at start).
    pub fn set_rate_limit(&self, requests_per_second: f64, burst: u32) {
        let mut state = self.lock();
        let now = state.store.now();
        state.control.rate_limit = Some(TokenBucket::new(requests_per_second, burst, now));
    }

    /// Removes the rate limit.
    pub fn clear_rate_limit(&self) {
        self.lock().control.rate_limit = None;
    }

    /// Enforces API Priority and Fairness (served with [`KubeFakeBuilder::flow_control`]) with
    /// a server that starts `requests_per_second` requests a second in all, divided between the
    /// stored priority levels as the crate docs say; `None` stops enforcing it.
    pub fn set_server_capacity(&self, requests_per_second: Option<f64>) {
        self.lock().control.flow.capacity = requests_per_second.map(|r| r.max(0.0));
    }

    /// Declares other clients' load in a priority level (replacing what was declared for that
    /// level): they demand `load.share` of the server's capacity all the time, and the requests
    /// sent over HTTP compete with them (see the crate docs).
    pub fn set_foreign_load(&self, load: ForeignLoad) {
        let mut state = self.lock();
        let foreign = &mut state.control.flow.foreign;
        foreign.retain(|f| f.level != load.level);
        foreign.push(load);
    }

    /// Removes every declared foreign load.
    pub fn clear_foreign_load(&self) {
        self.lock().control.flow.foreign.clear();
    }

    /// What each priority level did with the requests sent over HTTP since the start or the
    /// last [`KubeFake::reset_flow_stats`], by level name.
    pub fn flow_stats(&self) -> std::collections::BTreeMap<String, FlowStats> {
        let state = self.lock();
        state.control.flow.stats_at(state.store.now())
    }

    /// Forgets the priority levels' statistics.
    pub fn reset_flow_stats(&self) {
        self.lock().control.flow.stats.clear();
    }

    /// Once the next `method` request to exactly `path` is answered, `obj` is stored as
    /// [`KubeFake::insert`] stores it: another writer's change landing between a client's read
    /// and its write, at a known point instead of a timed race.
    pub fn after_answer<T: Serialize>(&self, method: Method, path: impl Into<String>, obj: T) {
        let value = serde_json::to_value(obj).expect("kube-fake: after_answer: serialize");
        self.lock()
            .control
            .after_answer
            .push((method, path.into(), value));
    }

    /// The next `times` requests whose path contains `path_contains` are never
    /// answered (until the fake shuts down), so client timeouts can be tested.
    pub fn hang(&self, path_contains: impl Into<String>, times: usize) {
        self.lock()
            .control
            .hangs
            .push((path_contains.into(), times));
    }

    /// How long an evicted pod, or a pod on a node deleted without
    /// `gracePeriodSeconds: 0`, stays with a `deletionTimestamp` before it is
    /// removed (default zero: at once). While it stays it counts as unhealthy.
    /// The scheduler model's preemption victims take their own
    /// `terminationGracePeriodSeconds`, and this one when they state none.
    pub fn set_eviction_grace(&self, grace: Duration) {
        self.lock().store.pod_grace = grace;
    }

    /// Puts the fake on a clock of the test's: `now` is then what timestamps, graceful
    /// deletions and the rate limit go by (the wall clock by default). A test that moves its
    /// clock on sees a pod whose grace period has passed gone, without sleeping.
    pub fn set_clock(
        &self,
        now: impl Fn() -> chrono::DateTime<chrono::Utc> + Send + Sync + 'static,
    ) {
        let mut state = self.lock();
        state.store.clock = std::sync::Arc::new(now);
        if let Some(sim) = state.sim.as_mut() {
            sim.clock_changed();
        }
    }

    /// Brings the simulation (when the builder turned it on) to the fake's current time, as
    /// every request and every look through this handle also does: what fell due meanwhile
    /// (graceful deletions, pods starting, nodes launching) happens at its own time, in order,
    /// and the scheduler, the ReplicaSet and the autoscaler models react. Without the
    /// simulation it finishes the graceful deletions due.
    pub fn settle(&self) {
        drop(self.lock());
    }

    /// Every pod the simulation has seen (one entry per uid, in the order first seen): when it
    /// ran and when it stopped serving. Empty without the simulation.
    pub fn pod_timeline(&self) -> Vec<PodTimeline> {
        self.lock()
            .sim
            .as_ref()
            .map(Sim::pod_timeline)
            .unwrap_or_default()
    }

    /// The nodes the autoscaler model launched (or is launching), in order.
    pub fn launched_nodes(&self) -> Vec<LaunchedNode> {
        self.lock()
            .sim
            .as_ref()
            .map(Sim::launched_nodes)
            .unwrap_or_default()
    }

    /// Adds a mutating admission webhook to the running fake (after those configured).
    pub fn add_mutating_webhook(&self, webhook: Webhook) {
        self.lock().store.webhooks.mutating.push(webhook);
    }

    /// Adds a validating admission webhook to the running fake (after those configured).
    pub fn add_validating_webhook(&self, webhook: Webhook) {
        self.lock().store.webhooks.validating.push(webhook);
    }

    /// Removes every admission webhook.
    pub fn clear_webhooks(&self) {
        self.lock().store.webhooks = chain::webhooks::Webhooks::default();
    }

    /// Request counters.
    pub fn counters(&self) -> Counters {
        self.lock().control.counters
    }

    /// Stops the server and waits (at most 5 s) for it to finish. Hung requests are released.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
    }
}

impl Drop for KubeFake {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}
