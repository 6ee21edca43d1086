//! The in-memory object store and the verbs on it.
//!
//! Everything here is synchronous and runs under the fake's mutex; the HTTP
//! layer only parses requests and renders answers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::chain::webhooks::Webhooks;
use crate::patch::{self, PatchFailure};
use crate::resources::{ResourceDef, StatusOnCreate};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{self, ApiError, FieldError};
use crate::validation;

/// Where an object lives: resource index in the table, namespace (empty when
/// cluster-scoped), name. Ordered like the real server lists: namespace, then name.
pub(crate) type ObjKey = (usize, String, String);

/// One object a request is about: its kind (the index of its resource), namespace and name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjectRef<'a> {
    pub idx: usize,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl<'a> ObjectRef<'a> {
    pub fn new(idx: usize, namespace: Option<&'a str>, name: &'a str) -> Self {
        ObjectRef {
            idx,
            namespace,
            name,
        }
    }
}

/// An update of an existing object: the object as it is, as it would be written (by a PUT, or
/// a PATCH applied to it), and how the write goes.
struct Update {
    old: Value,
    new: Value,
    target: Target,
    /// A PUT of a custom resource must name the resourceVersion it replaces.
    require_resource_version: bool,
    dry_run: bool,
    /// Who writes, for a non-apply write (an apply's `new` carries its own `managedFields`).
    manager: Option<String>,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The resource itself: its status is kept when the type has a status subresource.
    Main,
    /// The `/status` subresource: only the status changes.
    Status,
}

/// The patch flavours the fake applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Json,
    Merge,
    Strategic,
}

/// The options a DELETE (or an eviction) carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body; `query_grace` (the query parameter) wins if both are set.
    pub fn from_body(body: Option<&Value>, query_grace: Option<i64>) -> Self {
        let body = body.cloned().unwrap_or(Value::Null);
        Self {
            grace_period_seconds: query_grace
                .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64)),
            precondition_uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            precondition_resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum DeleteOutcome {
    /// The object is gone; the body is the answer (object or `Status`).
    Deleted(Value),
    /// Deletion is pending (finalizers, or a graceful pod deletion, which the store finishes
    /// once its time has come: [`Store::reap`]); the body is the object.
    Pending(Value),
}

/// The fake's clock: what "now" is for timestamps, graceful deletions and the rate limit (the
/// wall clock unless a test sets its own: [`crate::KubeFake::set_clock`]).
pub type Now = std::sync::Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The objects, the global resourceVersion counter and per-type rules.
pub(crate) struct Store {
    pub resources: Vec<ResourceDef>,
    /// The configured admission webhooks (see the `chain` module).
    pub webhooks: Webhooks,
    objects: BTreeMap<ObjKey, Value>,
    resource_version: u64,
    rng: u64,
    /// How long an evicted or deleted pod on a node stays with a deletionTimestamp.
    pub pod_grace: Duration,
    /// Graceful pod deletions under way: the pod, its uid, when the kubelet's final delete
    /// comes.
    graceful: Vec<(ObjKey, String, DateTime<Utc>)>,
    pub clock: Now,
    /// While the simulation advances, the time it has got to: what `now` is for its writes.
    frozen: Option<DateTime<Utc>>,
    /// The kinds whose writes are logged for the simulation (by index; empty: none are).
    tracked: Vec<bool>,
    /// The objects of tracked kinds written since the simulation last looked.
    changes: Vec<ObjKey>,
    /// The pods' type (by index), if served.
    pub(crate) pods: Option<usize>,
    /// The pods bound to each node, by `spec.nodeName`: the API server's watch cache keeps this
    /// index, so that listing one node's pods (a kubelet's list, a drain's) reads that node's
    /// pods, not every pod of the cluster. Kept by [`Store::put`] and [`Store::take`].
    by_node: HashMap<String, BTreeSet<ObjKey>>,
}

/// The node a pod is bound to (`spec.nodeName`), if any.
pub(crate) fn node_of(obj: &Value) -> Option<&str> {
    obj.get("spec")?
        .get("nodeName")?
        .as_str()
        .filter(|n| !n.is_empty())
}

pub(crate) fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Go's `omitempty` drops empty maps and lists from ObjectMeta.
fn normalize_meta(obj: &mut Value) {
    let meta = meta_mut(obj);
    meta.retain(|_, v| match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
}

/// Everything but metadata and status: what bumps `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    match obj {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn name_mismatch(body_name: &str, url_name: &str) -> ApiError {
    status::bad_request(format!(
        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    ))
}

fn namespace_mismatch() -> ApiError {
    status::bad_request(
        "the namespace of the provided object does not match the namespace sent on the request",
    )
}

impl Store {
    pub fn new(resources: Vec<ResourceDef>) -> Self {
        let seed = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
        let mut store = Self {
            pods: None,
            by_node: HashMap::new(),
            resources,
            objects: BTreeMap::new(),
            resource_version: 1000,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            pod_grace: Duration::ZERO,
            graceful: Vec::new(),
            clock: std::sync::Arc::new(Utc::now),
            frozen: None,
            tracked: Vec::new(),
            changes: Vec::new(),
            webhooks: Webhooks::default(),
        };
        store.pods = store.find_kind("v1", "Pod");
        store
    }

    /// The time now, on the fake's clock (or the simulation's time while it advances).
    pub fn now(&self) -> DateTime<Utc> {
        self.frozen.unwrap_or_else(|| (self.clock)())
    }

    /// Makes `now` this time (`None`: the clock again), for the simulation's writes.
    pub(crate) fn freeze(&mut self, at: Option<DateTime<Utc>>) {
        self.frozen = at;
    }

    /// Logs writes to these kinds from now on, for [`Store::take_changes`].
    pub(crate) fn track(&mut self, kinds: &[usize]) {
        self.tracked = vec![false; self.resources.len()];
        for &k in kinds {
            self.tracked[k] = true;
        }
    }

    /// The tracked objects written since the last call, each once, in key order.
    pub(crate) fn take_changes(&mut self) -> Vec<ObjKey> {
        let mut keys = std::mem::take(&mut self.changes);
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    pub(crate) fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    fn touched(&mut self, key: &ObjKey) {
        if self.tracked.get(key.0).copied().unwrap_or(false) {
            self.changes.push(key.clone());
        }
    }

    /// Stores an object (every write goes through here or [`Store::take`]).
    fn put(&mut self, key: ObjKey, obj: Value) {
        self.touched(&key);
        if Some(key.0) == self.pods {
            self.unindex(&key);
            if let Some(node) = node_of(&obj) {
                self.by_node
                    .entry(node.to_string())
                    .or_default()
                    .insert(key.clone());
            }
        }
        self.objects.insert(key, obj);
    }

    fn take(&mut self, key: &ObjKey) -> Option<Value> {
        if Some(key.0) == self.pods {
            self.unindex(key);
        }
        let removed = self.objects.remove(key);
        if removed.is_some() {
            self.touched(key);
        }
        removed
    }

    /// Takes pod `key` out of [`Store::by_node`], under the node it is stored with.
    fn unindex(&mut self, key: &ObjKey) {
        let Some(node) = self.objects.get(key).and_then(node_of) else {
            return;
        };
        if let Some(keys) = self.by_node.get_mut(node) {
            keys.remove(key);
            if keys.is_empty() {
                let node = node.to_string();
                self.by_node.remove(&node);
            }
        }
    }

    /// The stored object, unpresented.
    pub(crate) fn object(&self, key: &ObjKey) -> Option<&Value> {
        self.objects.get(key)
    }

    /// A write by one of the fake's own controllers (scheduler, kubelet, ...): bumps the
    /// resourceVersion and stores `obj` as it is.
    pub(crate) fn write(&mut self, key: ObjKey, mut obj: Value) {
        let rv = self.bump();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
        self.put(key, obj);
    }

    /// The key of an object of type `idx`.
    pub(crate) fn key_of(&self, idx: usize, namespace: Option<&str>, name: &str) -> ObjKey {
        self.key(idx, namespace, name)
    }

    /// Deletes a pod the way a plain `DELETE` without options does when its grace period is
    /// `grace`: at once when zero, else it terminates until then (finalizers hold it as usual).
    pub(crate) fn delete_pod_gracefully(&mut self, key: &ObjKey, grace: Duration) {
        let Some(current) = self.objects.get(key).cloned() else {
            return;
        };
        if meta_str(&current, "deletionTimestamp").is_some() {
            return;
        }
        let has_finalizers = current
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if grace.is_zero() && !has_finalizers {
            self.take(key);
            self.bump();
            return;
        }
        let uid = meta_str(&current, "uid").unwrap_or_default().to_string();
        let at = self.mark_deleting(key, current, grace);
        if !has_finalizers {
            self.graceful.push((key.clone(), uid, at));
        }
    }

    /// Sets `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds`, and stores it.
    fn mark_deleting(&mut self, key: &ObjKey, mut obj: Value, grace: Duration) -> DateTime<Utc> {
        let at = self.now()
            + chrono::Duration::from_std(grace).unwrap_or_else(|_| chrono::Duration::zero());
        let meta = meta_mut(&mut obj);
        meta.insert(
            "deletionTimestamp".into(),
            json!(at.to_rfc3339_opts(SecondsFormat::Secs, true)),
        );
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace.as_secs()));
        self.write(key.clone(), obj);
        at
    }

    /// When the next graceful pod deletion is due.
    pub(crate) fn next_graceful(&self) -> Option<DateTime<Utc>> {
        self.graceful.iter().map(|(_, _, at)| *at).min()
    }

    /// A random-looking number, for names and ids.
    pub(crate) fn next_random_u64(&mut self) -> u64 {
        self.next_random()
    }

    pub(crate) fn now_rfc3339(&self) -> String {
        self.now().to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Finishes the graceful deletions whose time has come (what the kubelet's final delete
    /// does). Runs before every request and every read of the handle, so a pod is gone for
    /// whoever looks once its grace period has passed on the fake's clock.
    pub fn reap(&mut self) {
        self.reap_until(self.now());
    }

    /// Finishes the graceful deletions due at `now` or before, in the order they were started.
    pub(crate) fn reap_until(&mut self, now: DateTime<Utc>) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.graceful)
            .into_iter()
            .partition(|(_, _, at)| *at <= now);
        self.graceful = later;
        for (key, uid, _) in due {
            self.finish_graceful_deletion(&key, &uid);
        }
    }

    /// The index of the type with this apiVersion and kind.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.resources
            .iter()
            .position(|r| r.api_version() == api_version && r.kind == kind)
    }

    /// The index of the type served at `/…/{group}/{version}/{plural}`.
    pub fn find_path(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.resources
            .iter()
            .position(|r| r.group == group && r.version == version && r.plural == plural)
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    fn bump(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn new_uid(&mut self) -> String {
        let a = self.next_random();
        let b = self.next_random();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    /// The 5-character suffix `generateName` gets (same alphabet as the real server).
    pub(crate) fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_random();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    fn key(&self, idx: usize, namespace: Option<&str>, name: &str) -> ObjKey {
        let ns = if self.resources[idx].namespaced {
            namespace.unwrap_or_default().to_string()
        } else {
            String::new()
        };
        (idx, ns, name.to_string())
    }

    /// The object as a read shows it: PDBs get the status the disruption
    /// controller would have computed from the current pods.
    pub fn present(&self, idx: usize, mut obj: Value) -> Value {
        let res = &self.resources[idx];
        if res.group == "policy" && res.kind == "PodDisruptionBudget" {
            let computed = self.pdb_status(&obj);
            obj["status"] = computed.to_status(&obj);
        }
        obj
    }

    /// All objects of one type in one namespace (or all), unpresented.
    pub(crate) fn objects_of(
        &self,
        idx: usize,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = &Value> {
        let start = (idx, String::new(), String::new());
        let end = (idx + 1, String::new(), String::new());
        self.objects
            .range(start..end)
            .filter(move |((_, ns, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|(_, v)| v)
    }

    pub fn get(&self, idx: usize, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = self.key(idx, namespace, name);
        self.objects.get(&key).map(|o| self.present(idx, o.clone()))
    }

    pub fn get_or_404(
        &self,
        idx: usize,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get(idx, namespace, name)
            .ok_or_else(|| status::not_found(&self.resources[idx], name))
    }

    /// A `…List` object, as the real server answers a list.
    pub fn list(
        &self,
        idx: usize,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Value {
        let res = &self.resources[idx];
        // One node's pods: from the index (as the API server's watch cache serves them).
        let on_node = fields
            .equals("/spec/nodeName")
            .filter(|node| Some(idx) == self.pods && !node.is_empty());
        let candidates: Box<dyn Iterator<Item = &Value>> = match on_node {
            Some(node) => Box::new(
                self.by_node
                    .get(node)
                    .into_iter()
                    .flatten()
                    .filter(move |(_, ns, _)| namespace.is_none_or(|want| want == ns))
                    .filter_map(|key| self.objects.get(key)),
            ),
            None => Box::new(self.objects_of(idx, namespace)),
        };
        let items: Vec<Value> = candidates
            .filter(|o| labels.matches_object(o) && fields.matches_object(o))
            .map(|o| {
                let mut o = self.present(idx, o.clone());
                // Typed lists carry no TypeMeta on their items; unstructured ones do.
                if !res.custom
                    && let Some(m) = o.as_object_mut()
                {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                o
            })
            .collect();
        json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version(),
            "metadata": { "resourceVersion": self.resource_version.to_string() },
            "items": items,
        })
    }

    /// Checks or fills apiVersion and kind the way the decoder defaults them.
    fn check_type(res: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
        let want_version = res.api_version();
        match obj.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => obj["apiVersion"] = json!(want_version),
            Some(v) if v != want_version => {
                return Err(status::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({want_version})"
                )));
            }
            Some(_) => {}
        }
        match obj.get("kind").and_then(Value::as_str) {
            None | Some("") => obj["kind"] = json!(res.kind),
            Some(k) if k != res.kind => {
                return Err(status::bad_request(format!(
                    "the kind of the object ({k}) does not match the kind of the resource ({})",
                    res.kind
                )));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Aligns the body's namespace with the request's, as the create and update handlers do.
    fn settle_namespace(
        res: &ResourceDef,
        obj: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
        let meta = meta_mut(obj);
        if !res.namespaced {
            meta.remove("namespace");
            return Ok(());
        }
        let want = namespace.unwrap_or_default();
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), json!(want));
                Ok(())
            }
            Some(ns) if ns != want => Err(namespace_mismatch()),
            Some(_) => Ok(()),
        }
    }

    fn validate(res: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
        Self::refuse(res, obj, validation::validate(res, obj))
    }

    /// The validation of a create ([`validation::validate_create`]).
    fn validate_new(res: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
        Self::refuse(res, obj, validation::validate_create(res, obj))
    }

    /// `errs`, if any, as the real 422 about `obj`.
    fn refuse(res: &ResourceDef, obj: &Value, errs: Vec<FieldError>) -> Result<(), ApiError> {
        if errs.is_empty() {
            Ok(())
        } else {
            Err(status::invalid(
                res,
                meta_str(obj, "name").unwrap_or_default(),
                &errs,
            ))
        }
    }

    /// What decoding a create does before admission: the body must be an object of this kind
    /// (apiVersion and kind filled in when absent), in the request's namespace.
    pub(crate) fn decode_create(
        &self,
        idx: usize,
        namespace: Option<&str>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let res = &self.resources[idx];
        if !obj.is_object() {
            return Err(status::bad_request(format!(
                "Object '{}' is missing in '{obj}'",
                res.kind
            )));
        }
        Self::check_type(res, obj)?;
        Self::settle_namespace(res, obj, namespace)
    }

    /// Gives an object with a `generateName` and no name its generated name.
    pub(crate) fn generate_name(&mut self, obj: &mut Value) {
        if meta_str(obj, "name").unwrap_or_default().is_empty()
            && let Some(prefix) = meta_str(obj, "generateName").map(str::to_string)
            && !prefix.is_empty()
        {
            let name = format!("{prefix}{}", self.name_suffix());
            meta_mut(obj).insert("name".into(), json!(name));
        }
    }

    /// The kind's own validation of an object about to be stored.
    pub(crate) fn validate_object(&self, idx: usize, obj: &Value) -> Result<(), ApiError> {
        Self::validate_new(&self.resources[idx], obj)
    }

    /// POST to a collection.
    pub fn create(
        &mut self,
        idx: usize,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let res = self.resources[idx].clone();
        let mut obj = body;
        if !obj.is_object() {
            return Err(status::bad_request(format!(
                "Object '{}' is missing in '{obj}'",
                res.kind
            )));
        }
        Self::check_type(&res, &mut obj)?;
        Self::settle_namespace(&res, &mut obj, namespace)?;
        if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(status::plain(
                500,
                "resourceVersion should not be set on objects to be created",
            ));
        }
        self.generate_name(&mut obj);
        Self::validate_new(&res, &obj)?;
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let key = self.key(idx, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(status::already_exists(&res, &name));
        }
        match res.status_on_create {
            StatusOnCreate::Keep => {}
            StatusOnCreate::Drop => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
            StatusOnCreate::Replace(f) => obj["status"] = f(),
        }
        let uid = self.new_uid();
        let meta = meta_mut(&mut obj);
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(self.now_rfc3339()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        normalize_meta(&mut obj);
        if dry_run {
            return Ok(self.present(idx, obj));
        }
        let rv = self.bump();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
        self.put(key, obj.clone());
        Ok(self.present(idx, obj))
    }

    /// PUT of an object or of its `/status`. Answers the HTTP code and the object.
    pub fn replace(
        &mut self,
        object: ObjectRef<'_>,
        body: Value,
        (target, manager): (Target, &str),
        dry_run: bool,
    ) -> Result<(u16, Value), ApiError> {
        let ObjectRef {
            idx,
            namespace,
            name,
        } = object;
        let res = self.resources[idx].clone();
        let key = self.key(idx, namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            if res.create_on_update && target == Target::Main {
                let body_name = meta_str(&body, "name").unwrap_or_default();
                if body_name != name {
                    return Err(name_mismatch(body_name, name));
                }
                let mut body = body;
                if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                return self.create(idx, namespace, body, dry_run).map(|o| (201, o));
            }
            return Err(status::not_found(&res, name));
        };
        if !body.is_object() {
            return Err(status::bad_request(format!(
                "Object '{}' is missing in '{body}'",
                res.kind
            )));
        }
        let update = Update {
            old,
            new: body,
            target,
            require_resource_version: true,
            dry_run,
            manager: Some(manager.to_string()),
        };
        self.update_existing(idx, &key, update).map(|o| (200, o))
    }

    /// PATCH of an object or of its `/status`.
    pub fn patch(
        &mut self,
        object: ObjectRef<'_>,
        kind: PatchKind,
        patch: &Value,
        (target, manager): (Target, &str),
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let ObjectRef {
            idx,
            namespace,
            name,
        } = object;
        let res = self.resources[idx].clone();
        let key = self.key(idx, namespace, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| status::not_found(&res, name))?;
        let patched = match kind {
            PatchKind::Json => patch::json_patch(&old, patch),
            PatchKind::Merge => patch::merge_patch(&old, patch),
            PatchKind::Strategic => patch::strategic_merge_patch(&old, patch, &res),
        }
        .map_err(|e| match e {
            PatchFailure::BadRequest(msg) => status::bad_request(msg),
            PatchFailure::Unprocessable(msg) => {
                tracing::debug!("patch of {name} not applicable: {msg}");
                status::unprocessable()
            }
        })?;
        let update = Update {
            old,
            new: patched,
            target,
            require_resource_version: false,
            dry_run,
            manager: Some(manager.to_string()),
        };
        self.update_existing(idx, &key, update)
    }

    /// The write of a server-side apply to an existing object: `new`, the object the apply
    /// made of the stored one (with its `managedFields`), as an update of it.
    pub fn apply_update(
        &mut self,
        object: ObjectRef<'_>,
        new: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let res = &self.resources[object.idx];
        let key = self.key(object.idx, object.namespace, object.name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| status::not_found(res, object.name))?;
        let update = Update {
            old,
            new,
            target: Target::Main,
            require_resource_version: false,
            dry_run,
            manager: None,
        };
        self.update_existing(object.idx, &key, update)
    }

    /// The preconditions of an update: the resourceVersion sent, if any, is the object's (and a
    /// PUT of a custom resource sends one when `require_resource_version`); the uid sent, if
    /// any, is the object's.
    fn check_preconditions(
        res: &ResourceDef,
        name: &str,
        old: &Value,
        new: &Value,
        require_resource_version: bool,
    ) -> Result<(), ApiError> {
        let old_rv = meta_str(old, "resourceVersion")
            .unwrap_or_default()
            .to_string();
        let sent_rv = meta_str(new, "resourceVersion").filter(|rv| !rv.is_empty());
        match sent_rv {
            Some(rv) if rv != old_rv => {
                return Err(status::conflict(res, name, status::MODIFIED));
            }
            None if require_resource_version && res.custom => {
                return Err(status::invalid(
                    res,
                    name,
                    &[FieldError::invalid(
                        "metadata.resourceVersion",
                        "0x0",
                        "must be specified for an update",
                    )],
                ));
            }
            _ => {}
        }
        let old_uid = meta_str(old, "uid").unwrap_or_default().to_string();
        if let Some(uid) = meta_str(new, "uid")
            && !uid.is_empty()
            && uid != old_uid
        {
            return Err(status::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                ),
            ));
        }
        Ok(())
    }

    /// The shared tail of PUT and PATCH.
    fn update_existing(
        &mut self,
        idx: usize,
        key: &ObjKey,
        update: Update,
    ) -> Result<Value, ApiError> {
        let Update {
            old,
            mut new,
            target,
            require_resource_version,
            dry_run,
            manager,
        } = update;
        let res = self.resources[idx].clone();
        let name = key.2.as_str();
        let namespace = res.namespaced.then_some(key.1.as_str());
        Self::check_type(&res, &mut new)?;
        let body_name = meta_str(&new, "name").unwrap_or_default();
        if body_name != name {
            return Err(name_mismatch(body_name, name));
        }
        Self::settle_namespace(&res, &mut new, namespace)?;
        Self::check_preconditions(&res, name, &old, &new, require_resource_version)?;

        let mut merged = match target {
            Target::Main => {
                if res.status_subresource
                    && let Some(m) = new.as_object_mut()
                {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                if let Some(manager) = &manager {
                    let now = self.now_rfc3339();
                    crate::apply::record_update(&res, manager, &now, &old, &mut new);
                }
                new
            }
            Target::Status => {
                let mut merged = old.clone();
                if let Some(m) = merged.as_object_mut() {
                    match new.get("status") {
                        Some(s) if !s.is_null() => m.insert("status".into(), s.clone()),
                        _ => m.remove("status"),
                    };
                }
                merged
            }
        };
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let meta = meta_mut(&mut merged);
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        if spec_part(&old) != spec_part(&merged) {
            let generation = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut merged).insert("generation".into(), json!(generation + 1));
        }
        normalize_meta(&mut merged);
        Self::validate(&res, &merged)?;

        // A write that changes nothing is not a write: the resourceVersion stays.
        if merged == old || dry_run {
            return Ok(self.present(idx, merged));
        }
        let rv = self.bump();
        meta_mut(&mut merged).insert("resourceVersion".into(), json!(rv));
        let finalized = meta_str(&merged, "deletionTimestamp").is_some()
            && merged
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if finalized {
            self.take(key);
        } else {
            self.put(key.clone(), merged.clone());
        }
        Ok(self.present(idx, merged))
    }

    /// DELETE of one object.
    pub fn delete(
        &mut self,
        idx: usize,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        dry_run: bool,
    ) -> Result<DeleteOutcome, ApiError> {
        let res = self.resources[idx].clone();
        let key = self.key(idx, namespace, name);
        let current = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| status::not_found(&res, name))?;
        let uid = meta_str(&current, "uid").unwrap_or_default().to_string();
        let rv = meta_str(&current, "resourceVersion")
            .unwrap_or_default()
            .to_string();
        if let Some(want) = &options.precondition_uid
            && *want != uid
        {
            return Err(status::conflict(
                &res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(want) = &options.precondition_resource_version
            && *want != rv
        {
            return Err(status::conflict(
                &res,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                ),
            ));
        }

        let has_finalizers = current
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let being_deleted = meta_str(&current, "deletionTimestamp").is_some();
        let graceful_pod = res.group.is_empty()
            && res.kind == "Pod"
            && !self.pod_grace.is_zero()
            && options.grace_period_seconds != Some(0)
            && node_of(&current).is_some()
            && !matches!(
                current.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            );

        if has_finalizers || graceful_pod {
            if being_deleted {
                return Ok(DeleteOutcome::Pending(self.present(idx, current)));
            }
            let mut pending = current.clone();
            let grace = if has_finalizers {
                Duration::ZERO
            } else {
                self.pod_grace
            };
            let at = self.now()
                + chrono::Duration::from_std(grace).unwrap_or_else(|_| chrono::Duration::zero());
            let meta = meta_mut(&mut pending);
            meta.insert(
                "deletionTimestamp".into(),
                json!(at.to_rfc3339_opts(SecondsFormat::Secs, true)),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace.as_secs()));
            if !dry_run {
                self.write(key.clone(), pending.clone());
                pending = self.objects.get(&key).cloned().unwrap_or(pending);
            }
            let body = self.present(idx, pending);
            if graceful_pod && !has_finalizers && !dry_run {
                self.graceful.push((key, uid, at));
            }
            return Ok(DeleteOutcome::Pending(body));
        }

        if !dry_run {
            self.take(&key);
            self.bump();
        }
        let body = if res.delete_returns_object {
            self.present(idx, current)
        } else {
            let mut details = Map::new();
            details.insert("name".into(), json!(name));
            if !res.group.is_empty() {
                details.insert("group".into(), json!(res.group));
            }
            details.insert("kind".into(), json!(res.plural));
            details.insert("uid".into(), json!(uid));
            status::success(None, Some(Value::Object(details)))
        };
        Ok(DeleteOutcome::Deleted(body))
    }

    /// The end of a graceful pod deletion: what the kubelet's final delete does.
    fn finish_graceful_deletion(&mut self, key: &ObjKey, uid: &str) {
        let Some(obj) = self.objects.get(key) else {
            return;
        };
        let same = meta_str(obj, "uid") == Some(uid);
        let pending = meta_str(obj, "deletionTimestamp").is_some();
        let has_finalizers = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if same && pending && !has_finalizers {
            self.take(key);
            self.bump();
        }
    }

    /// Seeds an object as if it had been created, keeping whatever status it carries.
    /// Replaces an existing object of the same name (keeping its uid and creationTimestamp).
    pub fn seed(&mut self, mut obj: Value) -> Result<Value, String> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or("object has no apiVersion")?;
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("object has no kind")?;
        let idx = self
            .find_kind(api_version, kind)
            .ok_or_else(|| format!("kube-fake does not serve {api_version} {kind}"))?;
        let res = self.resources[idx].clone();
        let name = meta_str(&obj, "name")
            .filter(|n| !n.is_empty())
            .ok_or("object has no metadata.name")?
            .to_string();
        let namespace = if res.namespaced {
            let ns = meta_str(&obj, "namespace").unwrap_or("default").to_string();
            meta_mut(&mut obj).insert("namespace".into(), json!(ns));
            Some(ns)
        } else {
            meta_mut(&mut obj).remove("namespace");
            None
        };
        let key = self.key(idx, namespace.as_deref(), &name);
        let previous = self.objects.get(&key).cloned();
        let fresh_uid = self.new_uid();
        let rv = self.bump();
        let meta = meta_mut(&mut obj);
        let keep = |field: &str, fallback: Value| {
            previous
                .as_ref()
                .and_then(|p| p.get("metadata")?.get(field).cloned())
                .unwrap_or(fallback)
        };
        let has_uid = meta
            .get("uid")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !has_uid {
            meta.insert("uid".into(), keep("uid", json!(fresh_uid)));
        }
        if !meta.contains_key("creationTimestamp") {
            meta.insert(
                "creationTimestamp".into(),
                keep("creationTimestamp", json!(self.now_rfc3339())),
            );
        }
        if !meta.contains_key("generation") {
            meta.insert("generation".into(), keep("generation", json!(1)));
        }
        meta.insert("resourceVersion".into(), json!(rv));
        normalize_meta(&mut obj);
        self.put(key, obj.clone());
        Ok(self.present(idx, obj))
    }

    /// Removes an object without any API semantics.
    pub fn remove(&mut self, idx: usize, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = self.key(idx, namespace, name);
        let removed = self.take(&key);
        if removed.is_some() {
            self.bump();
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    fn store() -> (Store, usize) {
        let s = Store::new(builtin_resources());
        let idx = s.find_kind("v1", "Node").unwrap();
        (s, idx)
    }

    #[test]
    fn a_list_of_one_nodes_pods_is_served_from_the_node_index_as_writes_change_it() {
        let mut s = Store::new(builtin_resources());
        let pods = s.find_kind("v1", "Pod").unwrap();
        let res = s.resources[pods].clone();
        let pod = |name: &str, node: Option<&str>| {
            let mut p = json!({"metadata": {"name": name, "namespace": "a"},
                "spec": {"containers": [{"name": "c", "image": "i"}]}});
            if let Some(node) = node {
                p["spec"]["nodeName"] = json!(node);
            }
            p
        };
        let names = |s: &Store, selector: &str, ns: Option<&str>| -> Vec<String> {
            let fields = FieldSelector::parse(selector, &res).unwrap();
            s.list(pods, ns, &LabelSelector::default(), &fields)["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        for (name, node) in [("p1", Some("n1")), ("p2", Some("n2")), ("p3", None)] {
            s.create(pods, Some("a"), pod(name, node), false).unwrap();
        }
        s.create(
            pods,
            Some("b"),
            {
                let mut p = pod("p4", Some("n1"));
                p["metadata"]["namespace"] = json!("b");
                p
            },
            false,
        )
        .unwrap();
        assert_eq!(names(&s, "spec.nodeName=n1", None), ["p1", "p4"]);
        assert_eq!(names(&s, "spec.nodeName==n1", Some("a")), ["p1"]);
        // Unbound pods are not in the index: the empty name is matched by a scan.
        assert_eq!(names(&s, "spec.nodeName=", None), ["p3"]);
        assert_eq!(names(&s, "spec.nodeName!=n1", Some("a")), ["p2", "p3"]);
        // A binding (the scheduler's write) and a delete move the index with them.
        let key = s.key_of(pods, Some("a"), "p3");
        s.write(key, pod("p3", Some("n1")));
        assert_eq!(names(&s, "spec.nodeName=n1", Some("a")), ["p1", "p3"]);
        s.delete(pods, Some("a"), "p1", &DeleteOptions::default(), false)
            .unwrap();
        assert_eq!(names(&s, "spec.nodeName=n1", Some("a")), ["p3"]);
        assert_eq!(names(&s, "spec.nodeName=n2", None), ["p2"]);
        assert!(names(&s, "spec.nodeName=n3", None).is_empty());
    }

    #[test]
    fn every_write_bumps_the_global_resource_version() {
        let (mut s, nodes) = store();
        let start = s.resource_version();
        let a = s
            .create(nodes, None, json!({"metadata": {"name": "a"}}), false)
            .unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], (start + 1).to_string());
        assert_eq!(a["metadata"]["generation"], 1);
        assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
        let patched = s
            .patch(
                ObjectRef::new(nodes, None, "a"),
                PatchKind::Merge,
                &json!({"spec": {"unschedulable": true}}),
                (Target::Main, "test"),
                false,
            )
            .unwrap();
        assert_eq!(
            patched["metadata"]["resourceVersion"],
            (start + 2).to_string()
        );
        assert_eq!(patched["metadata"]["generation"], 2);
        assert_eq!(patched["metadata"]["uid"], a["metadata"]["uid"]);
    }

    #[test]
    fn a_no_op_patch_keeps_the_resource_version() {
        let (mut s, nodes) = store();
        let a = s
            .create(nodes, None, json!({"metadata": {"name": "a"}}), false)
            .unwrap();
        let again = s
            .patch(
                ObjectRef::new(nodes, None, "a"),
                PatchKind::Merge,
                &json!({"metadata": {"labels": {}}}),
                (Target::Main, "test"),
                false,
            )
            .unwrap();
        assert_eq!(
            again["metadata"]["resourceVersion"],
            a["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn main_resource_writes_keep_status_and_status_writes_keep_spec() {
        let (mut s, nodes) = store();
        s.seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"},
                      "spec": {"unschedulable": false}, "status": {"phase": "Running"}}),
        )
        .unwrap();
        let out = s
            .patch(
                ObjectRef::new(nodes, None, "a"),
                PatchKind::Merge,
                &json!({"spec": {"unschedulable": true}, "status": {"phase": "Gone"}}),
                (Target::Main, "test"),
                false,
            )
            .unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["spec"]["unschedulable"], true);
        let out = s
            .patch(
                ObjectRef::new(nodes, None, "a"),
                PatchKind::Merge,
                &json!({"spec": {"unschedulable": false}, "status": {"phase": "Gone"}}),
                (Target::Status, "test"),
                false,
            )
            .unwrap();
        assert_eq!(out["status"]["phase"], "Gone");
        assert_eq!(out["spec"]["unschedulable"], true);
    }

    #[test]
    fn finalizers_hold_a_deletion_until_they_are_removed() {
        let mut s = Store::new(builtin_resources());
        let claims = s.find_kind("karpenter.sh/v1", "NodeClaim").unwrap();
        s.seed(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                      "metadata": {"name": "c", "finalizers": ["karpenter.sh/termination"]}}))
            .unwrap();
        let outcome = s
            .delete(claims, None, "c", &DeleteOptions::default(), false)
            .unwrap();
        let DeleteOutcome::Pending(body) = outcome else {
            panic!("expected a pending deletion, got {outcome:?}");
        };
        assert!(body["metadata"]["deletionTimestamp"].is_string());
        assert!(s.get(claims, None, "c").is_some());
        s.patch(
            ObjectRef::new(claims, None, "c"),
            PatchKind::Merge,
            &json!({"metadata": {"finalizers": null}}),
            (Target::Main, "test"),
            false,
        )
        .unwrap();
        assert!(s.get(claims, None, "c").is_none());
    }

    #[test]
    fn delete_preconditions_conflict() {
        let (mut s, nodes) = store();
        s.create(nodes, None, json!({"metadata": {"name": "a"}}), false)
            .unwrap();
        let err = s
            .delete(
                nodes,
                None,
                "a",
                &DeleteOptions {
                    precondition_resource_version: Some("1".into()),
                    ..Default::default()
                },
                false,
            )
            .unwrap_err();
        assert_eq!(err.code, 409);
        let DeleteOutcome::Deleted(body) = s
            .delete(nodes, None, "a", &DeleteOptions::default(), false)
            .unwrap()
        else {
            panic!("node should be deleted at once");
        };
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["details"]["kind"], "nodes");
    }

    #[test]
    fn generate_name_appends_a_suffix() {
        let (mut s, nodes) = store();
        let a = s
            .create(
                nodes,
                None,
                json!({"metadata": {"generateName": "spot-"}}),
                false,
            )
            .unwrap();
        let name = a["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("spot-") && name.len() == 10, "{name}");
    }
}
