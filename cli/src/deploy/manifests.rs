//! The Kubernetes side of `forewarn deploy`: the manifests of `infra/k8s`, each object applied
//! server-side (RBAC, policies), or only created when missing (the priority expander's
//! ConfigMap, which the sweeper owns once it exists).

use std::path::Path;

use anyhow::{Context, anyhow, bail};
use forewarn::domain::admission::RefusedBy;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

/// What the command does with the objects of one manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Applied server-side as forewarn's field manager (by hand, `kubectl apply`).
    Apply,
    /// Created when missing, never written when it exists (`kubectl create`).
    CreateOnly,
}

/// One manifest: its file, what is done with its objects, and the oldest Kubernetes (major,
/// minor) that may have it (`None`: any).
pub type Manifest = (&'static str, Policy, Option<(u32, u32)>);

/// The manifests, in the order they are applied. A new manifest is one more row (its kinds must
/// be in [`KINDS`]).
///
/// `rbac.yaml` comes first, and its first object is forewarn's namespace, so that it exists
/// before anything in it. `node-writes.yaml` (the admission policy that narrows forewarn's Node
/// writes to the cordon, its taint, the load-balancer label and its own labels and annotations)
/// and `placeholders.yaml` (surge: the placeholders' PriorityClass, the admission policy that
/// narrows forewarn's pod writes to placeholders, then that grant) need 1.30, where
/// ValidatingAdmissionPolicy is served: on an older cluster they are skipped whole (the pod
/// grant would be unnarrowed; the Node patch of rbac.yaml stays as RBAC grants it). Their objects
/// come in the files' order, each policy before its binding and the binding before the grant.
/// `flow-control.yaml` (forewarn's own priority level and the FlowSchema that puts its groups in
/// it) needs 1.29, where `flowcontrol.apiserver.k8s.io/v1` is served: on an older cluster
/// forewarn's requests stay in `global-default`.
pub const MANIFESTS: &[Manifest] = &[
    ("infra/k8s/rbac.yaml", Policy::Apply, None),
    ("infra/k8s/flow-control.yaml", Policy::Apply, Some((1, 29))),
    ("infra/k8s/node-writes.yaml", Policy::Apply, Some((1, 30))),
    ("infra/k8s/placeholders.yaml", Policy::Apply, Some((1, 30))),
    ("infra/k8s/priority-expander.yaml", Policy::CreateOnly, None),
];

const RBAC: &str = "rbac.authorization.k8s.io/v1";
const ADMISSION: &str = "admissionregistration.k8s.io/v1";
const FLOW_CONTROL: &str = "flowcontrol.apiserver.k8s.io/v1";

/// The kinds the manifests may hold: `apiVersion`, kind, whether it is namespaced (their
/// resources' plurals are kube's, from the kind).
pub const KINDS: &[(&str, &str, bool)] = &[
    ("v1", "Namespace", false),
    (RBAC, "ClusterRole", false),
    (RBAC, "ClusterRoleBinding", false),
    (RBAC, "Role", true),
    (RBAC, "RoleBinding", true),
    ("v1", "ConfigMap", true),
    ("scheduling.k8s.io/v1", "PriorityClass", false),
    (ADMISSION, "ValidatingAdmissionPolicy", false),
    (ADMISSION, "ValidatingAdmissionPolicyBinding", false),
    (FLOW_CONTROL, "PriorityLevelConfiguration", false),
    (FLOW_CONTROL, "FlowSchema", false),
];

/// The API resource of a kind (its plural kube's).
fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// One object of a manifest.
#[derive(Debug, Clone)]
pub struct Object {
    pub file: &'static str,
    pub policy: Policy,
    /// Its kind, `apiVersion` and plural.
    pub resource: ApiResource,
    pub namespaced: bool,
    pub name: String,
    /// The manifest's namespace (a namespaced object without one goes to the kubeconfig's).
    pub namespace: Option<String>,
    pub body: Value,
    /// The oldest Kubernetes (major, minor) that may have it (its manifest's).
    pub needs: Option<(u32, u32)>,
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self
            .namespace
            .as_ref()
            .map_or(String::new(), |ns| ns.clone() + "/");
        write!(f, "{} {ns}{}", self.resource.kind, self.name)
    }
}

/// Every object of [`MANIFESTS`] under `root`, checked: a kind outside [`KINDS`], an object
/// without a name or a file that does not parse is an error naming it.
pub fn load(root: &Path) -> anyhow::Result<Vec<Object>> {
    let mut objects = Vec::new();
    for &(file, policy, needs) in MANIFESTS {
        let path = root.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {file}"))?;
        for body in docs.into_iter().filter(|d| !d.is_null()) {
            objects.push(object((file, policy, needs), body)?);
        }
    }
    Ok(objects)
}

fn object((file, policy, needs): Manifest, body: Value) -> anyhow::Result<Object> {
    let text = |field: &str| {
        body.pointer(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let Some(&(_, _, namespaced)) = KINDS.iter().find(|k| (k.0, k.1) == (api_version, kind)) else {
        let known: Vec<String> = KINDS.iter().map(|k| format!("{} {}", k.0, k.1)).collect();
        bail!(
            "{file}: kind {kind:?} of apiVersion {api_version:?} is not one forewarn deploy \
             knows (it knows {})",
            known.join(", ")
        );
    };
    let name = text("/metadata/name").to_string();
    if name.is_empty() {
        bail!("{file}: a {kind} without metadata.name");
    }
    let namespace = Some(text("/metadata/namespace").to_string()).filter(|ns| !ns.is_empty());
    if namespace.is_some() && !namespaced {
        bail!("{file}: {kind} {name} is cluster-scoped but names a namespace");
    }
    Ok(Object {
        file,
        policy,
        resource: resource(api_version, kind),
        namespaced,
        name,
        namespace,
        body,
        needs,
    })
}

/// The node-writes policy (`infra/k8s/node-writes.yaml`) narrowed to the handler's taint (as its
/// extra environment, `--handler-env`, sets it: each the handler's default when not given; a
/// bad value is an error naming it): the keys forewarn may add or remove (its own taint key,
/// and NTH's four only under the taint key `nth`) and the effect a taint it adds or changes may
/// have (the settings' taint effect).
pub fn with_taints(
    mut objects: Vec<Object>,
    handler_env: &[String],
) -> anyhow::Result<Vec<Object>> {
    use forewarn::domain::config::{TaintKeys, nth_taint_key};
    use forewarn::domain::event::EventKind;
    let vars = handler_env.iter().filter_map(|kv| kv.split_once('='));
    let settings = forewarn::app::settings::Settings::from_vars(vars);
    let handler = settings.map_err(|e| anyhow!("--handler-env: {e}"))?.config;
    let mut keys = vec![format!("'{}'", handler.taint_key)];
    let nth = EventKind::ALL.iter().filter_map(|k| nth_taint_key(*k));
    for key in nth.filter(|_| handler.taint_keys == TaintKeys::Nth) {
        let key = format!("'{key}'");
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let policies = objects
        .iter_mut()
        .filter(|o| o.resource.kind == "ValidatingAdmissionPolicy" && o.name == NODE_WRITES_POLICY);
    let variables = policies.filter_map(|o| o.body["spec"]["variables"].as_array_mut());
    for v in variables.flatten() {
        let expression = match v["name"].as_str() {
            Some("taintEffect") => format!("'{}'", handler.taint_effect.as_str()),
            Some("taintKeys") => format!("[{}]", keys.join(", ")),
            _ => continue,
        };
        v["expression"] = Value::String(expression);
    }
    Ok(objects)
}

/// The name of the admission policy of `infra/k8s/node-writes.yaml`.
pub const NODE_WRITES_POLICY: &str = "forewarn-node-writes";

/// The (major, minor) of a `/version` answer's `major` and `minor`: "1" and "30", or a
/// provider's "30+" (EKS, GKE); `None` when either is not a number.
pub fn version_of(major: &str, minor: &str) -> Option<(u32, u32)> {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((number(major)?, number(minor)?))
}

impl Object {
    /// Why the cluster (at `version`, when known) must not have it: older than its manifest
    /// needs, or of a version that could not be read (a grant that needs a newer API is not
    /// applied on a guess).
    pub fn skipped_on(&self, version: Option<(u32, u32)>) -> Option<String> {
        let (major, minor) = self.needs?;
        let cluster = match version {
            Some(v) if v >= (major, minor) => return None,
            Some((m, n)) => format!("the cluster is {m}.{n}"),
            None => "and the cluster's version could not be read".to_string(),
        };
        let file = self.file;
        Some(format!(
            "skipped: {file} needs Kubernetes {major}.{minor} or later, {cluster}"
        ))
    }
}

/// The commands that apply the manifests by hand.
pub fn kubectl_commands() -> Vec<String> {
    MANIFESTS
        .iter()
        .map(|&(file, policy, needs)| match (policy, needs) {
            (Policy::Apply, Some((major, minor))) => {
                format!("kubectl apply -f {file}   # only on Kubernetes {major}.{minor} or later")
            }
            (Policy::Apply, None) => format!("kubectl apply -f {file}"),
            (Policy::CreateOnly, _) => format!(
                "kubectl create -f {file}   # once: when it exists, its AlreadyExists error is \
                 expected"
            ),
        })
        .collect()
}

/// Applies `object` to the cluster of `client` as its policy says: server-side apply as
/// forewarn's field manager ([`Policy::Apply`]), or a create when it is missing
/// ([`Policy::CreateOnly`]: created meanwhile by someone else, it is the sweeper's from now on);
/// with `dry_run`, the apply is the server's dry run and nothing missing is created. Answers
/// what was (or would be) done.
pub async fn apply(
    client: &kube::Client,
    object: &Object,
    dry_run: bool,
) -> anyhow::Result<&'static str> {
    let resource = &object.resource;
    let api: Api<DynamicObject> = match (object.namespaced, &object.namespace) {
        (false, _) => Api::all_with(client.clone(), resource),
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, resource),
        (true, None) => Api::default_namespaced_with(client.clone(), resource),
    };
    let existing = api
        .get_opt(&object.name)
        .await
        .with_context(|| format!("reading {object}"))?;
    const KEPT: &str = "exists: left as it is (the sweeper keeps it)";
    match (object.policy, &existing) {
        (Policy::CreateOnly, Some(_)) => return Ok(KEPT),
        // Its namespace may not exist yet either: nothing to ask the server.
        (_, None) if dry_run => return Ok("would be created"),
        (Policy::CreateOnly, None) => {
            let desired: DynamicObject = serde_json::from_value(object.body.clone())
                .with_context(|| format!("{}: {object} is not a Kubernetes object", object.file))?;
            let field_manager = Some(forewarn::adapters::kube::FIELD_MANAGER.to_string());
            let params = PostParams {
                field_manager,
                ..Default::default()
            };
            return match api.create(&params, &desired).await {
                Ok(_) => Ok("created"),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(KEPT),
                Err(e) => Err(e).with_context(|| format!("creating {object}")),
            };
        }
        (Policy::Apply, _) => {}
    }
    // `force`: the manifests' fields are forewarn's to set. A value another manager wrote
    // (someone's `kubectl edit`, or an older forewarn's replace, recorded as an Update) is put
    // back as the manifest says, which is what a deploy is for, instead of stopping the deploy
    // at a conflict; fields the manifest does not set (other tools' labels) stay theirs.
    let mut params = PatchParams::apply(forewarn::adapters::kube::FIELD_MANAGER).force();
    params.dry_run = dry_run;
    let applied = api
        .patch(&object.name, &params, &Patch::Apply(&object.body))
        .await
        .with_context(|| format!("applying {object}"))?;
    // What the object says, its bookkeeping aside.
    let content = |o: &DynamicObject| {
        let mut o = o.clone();
        o.metadata.managed_fields = None;
        o.metadata.resource_version = None;
        serde_json::to_value(o).ok()
    };
    Ok(match existing {
        None => "created",
        Some(e) if content(&e) == content(&applied) => "unchanged",
        Some(_) if dry_run => "would be updated (it differs from the manifest)",
        Some(_) => "updated (it differed from the manifest)",
    })
}

/// The name of the admission policy of `infra/k8s/placeholders.yaml`.
pub const PLACEHOLDER_POLICY: &str = "forewarn-placeholders-only";

/// Whether this object grants pod writes for placeholders (the Role of `placeholders.yaml` and
/// its binding): applied only once the placeholder policy is known to be enforced.
pub fn is_placeholder_grant(object: &Object) -> bool {
    object.file.ends_with("placeholders.yaml")
        && matches!(object.resource.kind.as_str(), "Role" | "RoleBinding")
}

/// The waits between two checks of the placeholder policy: 0.5 to 1 s, then 1 to 2 s.
const CHECK_BACKOFF: backon::ExponentialBuilder =
    forewarn::adapters::backoff::backoff(CHECK_BACKOFF_FIRST, CHECK_BACKOFF_MAX);
const CHECK_BACKOFF_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const CHECK_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// What the enforcement check found ([`check_placeholder_policy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// The placeholder policy refused the probe: pod writes may be granted.
    Enforced,
    /// The probe was admitted: the server stores the policy and does not enforce it (the
    /// ValidatingAdmissionPolicy feature or its admission plugin off, or the policy not yet
    /// compiled after every try).
    NotEnforced,
    /// Another step of the admission chain refused the probe first (named), with its message.
    RefusedBy(RefusedBy, String),
    /// The check could not be made (no answer, or an identity that may not impersonate).
    Failed(String),
}

/// The enforcement check's probe: a pod that passes Pod Security `restricted` (namespace
/// forewarn's level: the pause image as 65535, seccomp RuntimeDefault, no privilege
/// escalation, every capability dropped), so that only the placeholder policy can refuse it,
/// and is not a placeholder (its name, no labels, no PriorityClass).
pub fn enforcement_probe() -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forewarn-enforcement-check", "namespace": forewarn::domain::config::NAMESPACE},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": forewarn::domain::surge::PLACEHOLDER_USER,
                "runAsGroup": forewarn::domain::surge::PLACEHOLDER_USER,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "check", "image": forewarn::domain::surge::PLACEHOLDER_IMAGE,
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true}}]
        }
    })
}

/// Checks that the API server enforces the placeholder policy for `group` before forewarn's
/// groups are granted pod writes: a server-side dry-run create, as `group` (impersonated, with
/// `system:masters` so that no RBAC refusal hides what admission says), of
/// [`enforcement_probe`] must be denied by [`PLACEHOLDER_POLICY`]. In the API server's chain
/// Pod Security runs before ValidatingAdmissionPolicy: the probe passes `restricted`, so a
/// refusal by another step ([`Enforcement::RefusedBy`]) names what refused it. A policy's
/// binding takes effect within about a second of its creation: tried `attempts` times (at
/// least once) while the probe is admitted, the waits between them the one backoff's
/// (`CHECK_BACKOFF`) on `clock`. Only [`Enforcement::Enforced`] lets the grant be applied.
pub async fn check_placeholder_policy(
    client: &kube::Client,
    group: &str,
    attempts: u32,
    clock: &dyn forewarn::ports::Clock,
) -> Enforcement {
    let path = format!(
        "/api/v1/namespaces/{}/pods?dryRun=All",
        forewarn::domain::config::NAMESPACE
    );
    let mut last = Enforcement::NotEnforced;
    let mut waits = backon::BackoffBuilder::build(CHECK_BACKOFF);
    for attempt in 0..attempts.max(1) {
        if attempt > 0 {
            clock.sleep(waits.next().unwrap_or(CHECK_BACKOFF_MAX)).await;
        }
        let request = http::Request::post(&path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("Impersonate-User", "forewarn-deploy-check")
            .header("Impersonate-Group", group)
            .header("Impersonate-Group", "system:masters")
            .body(serde_json::to_vec(&enforcement_probe()).unwrap_or_default());
        let request = match request {
            Ok(request) => request,
            Err(e) => return Enforcement::Failed(e.to_string()),
        };
        last = match client.request::<Value>(request).await {
            Ok(_) => Enforcement::NotEnforced,
            Err(kube::Error::Api(s)) => {
                match forewarn::domain::admission::refused_by(s.code, &s.reason, &s.message) {
                    RefusedBy::Policy(name) if name == PLACEHOLDER_POLICY => {
                        return Enforcement::Enforced;
                    }
                    // Not yet compiled is not a refusal by another step: only an admitted
                    // probe is tried again.
                    by => return Enforcement::RefusedBy(by, s.message),
                }
            }
            Err(e) => Enforcement::Failed(format!("the dry-run create, as {group}: {e}")),
        };
    }
    last
}

/// What the deploy says of a cluster where the placeholders' grant was not applied, and why
/// (`why`: what the check found, never [`Enforcement::Enforced`]).
pub fn surge_off(group: &str, why: &Enforcement) -> String {
    let why = match why {
        Enforcement::Enforced | Enforcement::NotEnforced => format!(
            "{PLACEHOLDER_POLICY} is stored but not enforced: a pod that is not a placeholder was \
             admitted (ValidatingAdmissionPolicy is off on this server: the feature gate or the \
             admission plugin)"
        ),
        Enforcement::RefusedBy(by, message) => format!(
            "the probe was refused by {by} before {PLACEHOLDER_POLICY} could be seen: {message}"
        ),
        Enforcement::Failed(e) => format!("the check could not be made: {e}"),
    };
    format!(
        "surge is off on this cluster: the placeholders' pod grant was not applied ({why}; \
         checked as {group}). Without the enforced policy the grant would let forewarn's groups \
         create any pod in namespace {ns} (docs/security.md). Each placeholder is refused and its \
         pod evicted at once, as without surge; the rest of forewarn works. Mend the cause and \
         run the deploy again, or stop surge trying with a policy rule `{{name: no-surge, nodes: \
         {{}}, surge: []}}` in the ConfigMap forewarn/forewarn-policy \
         (docs/troubleshooting.md#surge-is-off-on-this-cluster)",
        ns = forewarn::domain::config::NAMESPACE
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn the_manifests_load_with_known_kinds() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let objects = load(&root).unwrap();
        let names: Vec<String> = objects.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "Namespace forewarn",
                "ClusterRole forewarn",
                "ClusterRoleBinding forewarn",
                "Role kube-system/forewarn-priorities",
                "RoleBinding kube-system/forewarn-priorities",
                "Role forewarn/forewarn-policy",
                "RoleBinding forewarn/forewarn-policy",
                "PriorityLevelConfiguration forewarn",
                "FlowSchema forewarn",
                "ValidatingAdmissionPolicy forewarn-node-writes",
                "ValidatingAdmissionPolicyBinding forewarn-node-writes",
                "ValidatingAdmissionPolicy forewarn-node-deletes",
                "ValidatingAdmissionPolicyBinding forewarn-node-deletes",
                "PriorityClass forewarn-placeholder",
                "ValidatingAdmissionPolicy forewarn-placeholders-only",
                "ValidatingAdmissionPolicyBinding forewarn-placeholders-only",
                "Role forewarn/forewarn-placeholders",
                "RoleBinding forewarn/forewarn-placeholders",
                "ClusterRole forewarn-placeholder-budgets",
                "ClusterRoleBinding forewarn-placeholder-budgets",
                "ConfigMap kube-system/cluster-autoscaler-priority-expander",
            ]
        );
        assert_eq!(objects.last().unwrap().policy, Policy::CreateOnly);
        let needs: Vec<Option<(u32, u32)>> = objects.iter().map(|o| o.needs).collect();
        assert_eq!(needs[6], None, "rbac.yaml: any version");
        assert_eq!(needs[7..9], [Some((1, 29)); 2], "flow-control.yaml: 1.29");
        assert!(
            needs[9..18].iter().all(|n| *n == Some((1, 30))),
            "{needs:?}"
        );
        // forewarn's namespace first: everything in it comes after it.
        assert_eq!(objects[0].resource.kind, "Namespace");
        let labels = &objects[0].body["metadata"]["labels"];
        assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
        assert_eq!(labels["app.kubernetes.io/name"], "forewarn");
    }

    /// The check runs against the fake's admission (the policy's CEL evaluated): enforced, it
    /// passes; stored but not enforced, or not applied, it fails and says so.
    /// A policy not yet enforced is checked again, after the backoff's waits on the command's
    /// clock (a manual one here: the test does not wait).
    #[tokio::test]
    async fn the_placeholder_policy_is_checked_again_after_waits_on_the_clock() {
        let clock = forewarn::adapters::clock::ManualClock::at(chrono::Utc::now());
        let fake = kube_fake::KubeFake::builder()
            .admission_policies()
            .admission(false)
            .start()
            .await;
        let checked = check_placeholder_policy(&fake.client(), "forewarn-handler", 3, &clock).await;
        assert_eq!(checked, Enforcement::NotEnforced);
        let slept = clock.slept();
        assert_eq!(slept.len(), 2, "{slept:?}");
        assert!(
            (Duration::from_millis(500)..=Duration::from_secs(1)).contains(&slept[0])
                && (Duration::from_secs(1)..=Duration::from_secs(2)).contains(&slept[1]),
            "{slept:?}"
        );
    }

    #[tokio::test]
    async fn the_placeholder_policy_is_checked_before_the_grant() {
        let clock = forewarn::adapters::clock::ManualClock::at(chrono::Utc::now());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let policy: Vec<Value> = load(&root)
            .unwrap()
            .into_iter()
            .filter(|o| o.file.ends_with("placeholders.yaml"))
            .filter(|o| o.resource.api_version == ADMISSION)
            .map(|o| o.body)
            .collect();
        assert_eq!(policy.len(), 2, "the policy and its binding");
        for (enforced, applied) in [(true, true), (false, true), (true, false)] {
            let fake = kube_fake::KubeFake::builder()
                .admission_policies()
                .admission(enforced)
                .start()
                .await;
            if applied {
                for body in &policy {
                    fake.insert(body.clone());
                }
            }
            let checked =
                check_placeholder_policy(&fake.client(), "forewarn-handler", 1, &clock).await;
            if enforced && applied {
                assert_eq!(checked, Enforcement::Enforced);
                // The probe was a dry run: nothing stored.
                assert!(fake.list("v1", "Pod").is_empty());
            } else {
                assert_eq!(checked, Enforcement::NotEnforced);
                let said = surge_off("forewarn-handler", &checked);
                assert!(
                    said.contains("surge is off on this cluster")
                        && said.contains("stored but not enforced")
                        && said.contains("grant was not applied"),
                    "{said}"
                );
            }
            // The policy matches the group it names, not another.
            if enforced && applied {
                let other =
                    check_placeholder_policy(&fake.client(), "someone-else", 1, &clock).await;
                assert_eq!(other, Enforcement::NotEnforced);
            }
        }
    }

    /// The node-writes policy takes the handler's taint: its own key alone by default (NTH's
    /// four only under the taint key `nth`), and the effect a taint forewarn adds may have;
    /// a NoExecute taint forewarn's groups would add is refused, one of the deployment's effect
    /// admitted (the policy's CEL evaluated by the fake).
    #[tokio::test]
    async fn the_node_writes_policy_pins_the_handlers_taint() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let policy_of = |env: &[&str]| {
            let env: Vec<String> = env.iter().map(|s| s.to_string()).collect();
            with_taints(load(&root).unwrap(), &env)
                .unwrap()
                .into_iter()
                .find(|o| {
                    o.name == NODE_WRITES_POLICY && o.resource.kind == "ValidatingAdmissionPolicy"
                })
                .unwrap()
                .body
        };
        let variable = |policy: &Value, name: &str| {
            policy["spec"]["variables"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == name)
                .unwrap()["expression"]
                .clone()
        };
        let plain = policy_of(&[]);
        assert_eq!(
            variable(&plain, "taintKeys"),
            json!("['forewarn.io/interruption']")
        );
        assert_eq!(variable(&plain, "taintEffect"), json!("'NoSchedule'"));
        let nth = policy_of(&[
            "FOREWARN_TAINT_KEY=nth",
            "FOREWARN_TAINT_EFFECT=PreferNoSchedule",
        ]);
        let keys = variable(&nth, "taintKeys");
        assert!(
            keys.as_str()
                .unwrap()
                .contains("'aws-node-termination-handler/spot-itn'"),
            "{keys}"
        );
        assert_eq!(variable(&nth, "taintEffect"), json!("'PreferNoSchedule'"));
        // Enforced: as forewarn's handler group, a NoExecute taint is refused.
        let fake = kube_fake::KubeFake::builder()
            .admission_policies()
            .start()
            .await;
        for object in load(&root).unwrap() {
            if object.file.ends_with("node-writes.yaml")
                && object.resource.kind.starts_with("Validating")
            {
                fake.insert(if object.resource.kind == "ValidatingAdmissionPolicy" {
                    plain.clone()
                } else {
                    object.body
                });
            }
        }
        fake.insert(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                           "spec": {"providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f60001"}}),
        );
        let mut config = fake.config();
        config.auth_info.impersonate = Some("forewarn".into());
        config.auth_info.impersonate_groups = Some(vec!["forewarn-handler".into()]);
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(kube::Client::try_from(config).unwrap());
        let taint = |effect: &str| {
            json!({"spec": {"unschedulable": true, "taints": [
                {"key": "forewarn.io/interruption", "value": "spot-interruption", "effect": effect}]}})
        };
        let params = kube::api::PatchParams::default();
        let refused = nodes
            .patch("n1", &params, &kube::api::Patch::Merge(taint("NoExecute")))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("never NoExecute"), "{refused}");
        nodes
            .patch("n1", &params, &kube::api::Patch::Merge(taint("NoSchedule")))
            .await
            .expect("the deployment's effect");
    }

    /// The probe passes Pod Security `restricted` (forewarn's namespace as deployed), so that on
    /// a cluster without the placeholder policy it is admitted (not enforced), never refused by
    /// Pod Security; another admission that refuses it first is named with its message, and
    /// the grant is not applied.
    #[tokio::test]
    async fn the_check_tells_the_policy_from_pod_security_and_from_another_admission() {
        let clock = forewarn::adapters::clock::ManualClock::at(chrono::Utc::now());
        let fake = kube_fake::KubeFake::builder()
            .admission_policies()
            .start()
            .await;
        // The namespace at `restricted` and the PriorityClass; no placeholder policy.
        for object in forewarn_tests::cluster::manifest("rbac.yaml") {
            if object["kind"] == "Namespace" {
                fake.insert(object);
            }
        }
        let checked = check_placeholder_policy(&fake.client(), "forewarn-handler", 1, &clock).await;
        assert_eq!(
            checked,
            Enforcement::NotEnforced,
            "admitted by Pod Security"
        );
        forewarn_tests::cluster::as_deployed(&fake);
        let checked = check_placeholder_policy(&fake.client(), "forewarn-handler", 1, &clock).await;
        assert_eq!(checked, Enforcement::Enforced);
        fake.add_validating_webhook(
            kube_fake::Webhook::deny(
                "gatekeeper.sh",
                "[k8srequiredlabels] you must provide labels",
            )
            .namespace("forewarn"),
        );
        // The validating webhooks run after the policies: the policy still says first.
        let checked = check_placeholder_policy(&fake.client(), "forewarn-handler", 1, &clock).await;
        assert_eq!(checked, Enforcement::Enforced);
        fake.clear_webhooks();
        fake.add_mutating_webhook(
            kube_fake::Webhook::patch(
                "inject.mesh.example",
                serde_json::json!([{"op": "add", "path": "/spec/containers/-",
                    "value": {"name": "proxy", "image": "mesh/proxy:1"}}]),
            )
            .namespace("forewarn"),
        );
        // A sidecar injected without a security context: Pod Security refuses before the policy.
        let checked = check_placeholder_policy(&fake.client(), "forewarn-handler", 1, &clock).await;
        let Enforcement::RefusedBy(by, message) = &checked else {
            panic!("{checked:?}");
        };
        assert_eq!(
            by,
            &forewarn::domain::admission::RefusedBy::PodSecurity("restricted:latest".into())
        );
        assert!(message.contains("container \"proxy\""), "{message}");
        let said = surge_off("forewarn-handler", &checked);
        assert!(said.contains("refused by PodSecurity"), "{said}");
    }

    /// The manifests name the functions' Kubernetes groups, which the stack's and the deploy's
    /// access entries put the roles in (fixed: issue 58), in the bindings' subjects, the
    /// FlowSchema's and the admission policies' CEL, and no other group.
    #[test]
    fn the_manifests_name_the_functions_groups() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let objects = load(&root).unwrap();
        let groups = super::super::functions::FUNCTIONS.map(|f| f.group);
        let mut named: Vec<String> = Vec::new();
        fn subjects(v: &Value, named: &mut Vec<String>) {
            match v {
                Value::Object(map) => {
                    if map.get("kind").and_then(Value::as_str) == Some("Group") {
                        let name = map
                            .get("name")
                            .or_else(|| map.get("group").and_then(|g| g.get("name")));
                        named.extend(name.and_then(Value::as_str).map(str::to_string));
                    }
                    map.values().for_each(|v| subjects(v, named));
                }
                Value::Array(items) => items.iter().for_each(|v| subjects(v, named)),
                _ => {}
            }
        }
        for o in &objects {
            subjects(&o.body, &mut named);
        }
        named.sort();
        named.dedup();
        assert_eq!(named, groups, "{named:?}");
        let of = |name: &str| {
            objects
                .iter()
                .find(|o| o.to_string() == name)
                .unwrap_or_else(|| panic!("{name}"))
                .body
                .clone()
        };
        let policy = of("ValidatingAdmissionPolicy forewarn-node-writes");
        assert_eq!(
            policy["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.groups.exists(g, g == 'forewarn-handler' || g == 'forewarn-sweeper')"
        );
    }

    #[test]
    fn the_placeholders_grant_is_skipped_below_1_30_or_on_an_unread_version() {
        assert_eq!(version_of("1", "33"), Some((1, 33)));
        assert_eq!(version_of("1", "29+"), Some((1, 29)));
        assert_eq!(version_of("1", ""), None);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let objects = load(&root).unwrap();
        let grant = objects
            .iter()
            .find(|o| o.to_string() == "Role forewarn/forewarn-placeholders")
            .unwrap();
        assert!(is_placeholder_grant(grant));
        assert_eq!(grant.skipped_on(Some((1, 30))), None);
        assert_eq!(grant.skipped_on(Some((2, 0))), None);
        let why = grant.skipped_on(Some((1, 29))).unwrap();
        assert!(
            why.contains("needs Kubernetes 1.30") && why.contains("is 1.29"),
            "{why}"
        );
        let why = grant.skipped_on(None).unwrap();
        assert!(why.contains("could not be read"), "{why}");
        let rbac = &objects[0];
        assert_eq!(rbac.skipped_on(Some((1, 20))), None);
        assert_eq!(rbac.skipped_on(None), None);
    }

    #[test]
    fn an_unknown_kind_or_a_nameless_object_is_named() {
        let e = object(
            ("f.yaml", Policy::Apply, None),
            json!({"apiVersion": "v1", "kind": "Secret"}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("f.yaml") && e.contains("\"Secret\""), "{e}");
        assert!(
            e.contains("rbac.authorization.k8s.io/v1 ClusterRole"),
            "{e}"
        );
        let e = object(
            ("f.yaml", Policy::Apply, None),
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("without metadata.name"), "{e}");
    }

    /// kube's plural of each kind is the API server's.
    #[test]
    fn each_kind_is_served_at_its_plural() {
        let plurals: Vec<String> = KINDS.iter().map(|k| resource(k.0, k.1).plural).collect();
        assert_eq!(
            plurals,
            [
                "namespaces",
                "clusterroles",
                "clusterrolebindings",
                "roles",
                "rolebindings",
                "configmaps",
                "priorityclasses",
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "prioritylevelconfigurations",
                "flowschemas",
            ]
        );
    }
}
