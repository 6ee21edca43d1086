//! The preflight: every kind of write forewarn makes, sent to the real cluster as a server-side
//! dry run (`dryRun=All`), so that the API server's whole chain — RBAC, the mutating plugins
//! and webhooks, Pod Security, the ValidatingAdmissionPolicies, the validating webhooks, the
//! object's validation — says whether it would admit it, and nothing is stored.
//!
//! Each write is built by the code that makes it for real, from the cluster's own objects: the
//! cordon's patch ([`cordon_patch`]) of a real worker node (never a control-plane one), the
//! way back's patch ([`uncordon_patch`]) of that node as the cordon would leave it, the
//! Eviction of a real pod on it, the placeholder ([`placeholder_for`]) of that pod, an Event
//! on it and on the node ([`crate::adapters::kube`]'s Events), and the priority expander's ConfigMap written
//! back as it is. The client is the caller's: `forewarn check --kube` impersonates each of
//! forewarn's groups, the sweeper sends them as itself.

use ::kube::api::{ListParams, Patch, PatchParams, PostParams};
use ::kube::{Api, ResourceExt};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;

use crate::adapters::kube::api::FIELD_MANAGER;
use crate::adapters::kube::api::ns_name;
use crate::adapters::kube::cordon::{CordonSpec, RecordKeys, cordon_patch, uncordon_patch};
use crate::adapters::kube::drain::{Disposition, disposition, eviction_body};
use crate::adapters::kube::events::{EventType, Said, build, reference};
use crate::adapters::kube::placeholder::placeholder_for;
use crate::adapters::kube::surge::{controller, is_placeholder};
use crate::adapters::kube::{ClusterClient, node_facts};
use crate::domain::config::Config;
use crate::domain::cordon_record::CordonRecord;
use crate::domain::event::EventKind;
use crate::domain::expander::{EXPANDER_CONFIGMAP, NAMESPACE as EXPANDER_NAMESPACE};
use crate::domain::preflight::{Capability, Proof, Verdict};

/// The event id the preflight's objects carry (in names and annotations).
const PREFLIGHT_EVENT: &str = "forewarn-preflight";

/// What the preflight proves, and as whom (the name its lines say; the client is already
/// that identity).
#[derive(Debug, Clone)]
pub struct PreflightScope<'a> {
    pub group: &'a str,
    pub capabilities: &'a [Capability],
    /// `reportingInstance` of the Events.
    pub reporting_instance: &'a str,
}

/// The cluster's objects the writes are built from: a node, a pod, and why there is no node or
/// no pod (not checked for want of one, or refused when the read itself was — 401, 403: the
/// writes that need what it reads are refused as much).
struct Subjects(Option<Node>, Option<Pod>, Verdict);

/// What a failed read of `what` says of the writes that need it: refused when the server refused
/// the read (401, 403: the identity may not read it, so forewarn could not act either), else not
/// checked.
fn read_failed(what: &str, e: &::kube::Error) -> Verdict {
    match e {
        ::kube::Error::Api(s) if matches!(s.code, 401 | 403) => Verdict::Refused {
            by: crate::domain::admission::refused_by(s.code, &s.reason, &s.message),
            message: format!("{what} is refused: {}", s.message),
        },
        other => Verdict::NotChecked(format!("{what} failed: {other}")),
    }
}

/// Proves each capability of `scope` on the cluster of `clients`: one [`Proof`] each, in the
/// scope's order. Nothing is stored; a read that fails leaves the capabilities that need it
/// not checked, and a read the server refuses (401, 403) refuses them.
pub async fn prove(
    clients: &ClusterClient,
    config: &Config,
    scope: &PreflightScope<'_>,
) -> Vec<Proof> {
    let subjects = subjects(clients).await;
    let dry = clients.client().await.map(|client| Dry {
        client,
        config,
        scope,
        subjects: &subjects,
        now: clients.clock().now(),
        post: PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.into()),
        },
        patch: PatchParams::apply(FIELD_MANAGER).dry_run(),
    });
    let mut proofs = Vec::with_capacity(scope.capabilities.len());
    for &capability in scope.capabilities {
        let verdict = match &dry {
            Ok(dry) => dry
                .prove(capability)
                .await
                .unwrap_or_else(|refused| refused),
            Err(e) => Verdict::NotChecked(format!("no client: {e}")),
        };
        proofs.push(Proof {
            capability,
            group: scope.group.to_string(),
            verdict,
        });
    }
    proofs
}

/// A failed call's verdict: a refusal names its step, anything else leaves it not checked.
fn failed(e: &::kube::Error) -> Verdict {
    match e {
        ::kube::Error::Api(s) => Verdict::of_failure(Some(s.code), &s.reason, &s.message),
        other => Verdict::of_failure(None, "", &other.to_string()),
    }
}

/// The answer of one dry run: admitted (with `note`), or the failure's verdict.
fn answered<T>(result: Result<T, ::kube::Error>, note: Option<String>) -> Verdict {
    match result {
        Ok(_) => Verdict::Admitted(note),
        Err(e) => failed(&e),
    }
}

/// A worker node to write to (not control-plane; one forewarn has not cordoned, if any) and an
/// evictable pod on it (a controller's, not a DaemonSet's or a mirror, not a placeholder).
async fn subjects(clients: &ClusterClient) -> Subjects {
    let client = match clients.client().await {
        Ok(client) => client,
        Err(e) => return Subjects(None, None, Verdict::NotChecked(format!("no client: {e}"))),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = match nodes.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => return Subjects(None, None, read_failed("listing the nodes", &e)),
    };
    let mut workers: Vec<Node> = listed
        .into_iter()
        .filter(|n| !node_facts(n).is_control_plane())
        .collect();
    // Uncordoned first: the cordon then changes something.
    workers.sort_by_key(|n| node_facts(n).unschedulable);
    let pods: Api<Pod> = Api::all(client);
    let mut unlisted = None;
    for node in workers.iter().take(5) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let params = ListParams::default().fields(&format!("spec.nodeName={name}"));
        let list = match pods.list(&params).await {
            Ok(list) => list,
            Err(e) => {
                let verdict = read_failed(&format!("listing the pods of node {name}"), &e);
                if verdict.is_refused() {
                    // Refused on one node, refused on all: the pods' writes are refused.
                    return Subjects(Some(node.clone()), None, verdict);
                }
                unlisted.get_or_insert(verdict);
                continue;
            }
        };
        let pod = list.items.into_iter().find(|p| {
            matches!(disposition(p), Disposition::Evict { .. })
                && !is_placeholder(p)
                && controller(p).is_some()
        });
        if pod.is_some() {
            return Subjects(Some(node.clone()), pod, Verdict::NotChecked(String::new()));
        }
    }
    let missing = match unlisted {
        Some(failed) => failed,
        None if workers.is_empty() => Verdict::NotChecked("no worker node in the cluster".into()),
        None => Verdict::NotChecked("no pod of a controller on the first worker nodes".into()),
    };
    Subjects(workers.into_iter().next(), None, missing)
}

/// The cordon spec of a spot interruption warning, as the handler writes it (its record
/// unsigned: admission reads the annotation's name, not its signature).
fn spot_cordon(config: &Config, node: &Node, now: DateTime<Utc>) -> CordonSpec {
    let kind = EventKind::SpotInterruption;
    let instance_id = node_facts(node)
        .instance_id()
        .unwrap_or_default()
        .to_string();
    CordonSpec {
        taint_key: config.taint_key_for(kind).to_string(),
        own_key: config.taint_key.clone(),
        taint_value: kind.as_str().to_string(),
        taint_effect: config.taint_effect,
        // As a node no policy rule says otherwise for.
        exclude_from_load_balancers: true,
        record: Some(CordonRecord::new(kind, PREFLIGHT_EVENT, &instance_id, now)),
        keys: RecordKeys::Unsigned,
    }
}

/// What each dry run is sent with: the client, the cluster's objects, the parameters.
struct Dry<'a> {
    client: ::kube::Client,
    config: &'a Config,
    scope: &'a PreflightScope<'a>,
    subjects: &'a Subjects,
    now: DateTime<Utc>,
    post: PostParams,
    patch: PatchParams,
}

impl Dry<'_> {
    /// Proves `capability`: its dry run's verdict (`Err`: the verdict of a read it needs).
    async fn prove(&self, capability: Capability) -> Result<Verdict, Verdict> {
        match capability {
            Capability::Cordon | Capability::WayBack => self.node_write(capability).await,
            Capability::Evict => self.evict().await,
            Capability::Placeholder => self.placeholder().await,
            Capability::PodEvent | Capability::NodeEvent => self.event(capability).await,
            Capability::Expander => self.expander().await,
        }
    }

    fn node(&self) -> Result<(&Node, String), Verdict> {
        let node = self
            .subjects
            .0
            .as_ref()
            .ok_or_else(|| self.subjects.2.clone())?;
        Ok((node, node.name_any()))
    }

    fn pod(&self) -> Result<&Pod, Verdict> {
        self.subjects
            .1
            .as_ref()
            .ok_or_else(|| self.subjects.2.clone())
    }

    /// The cordon's patch of the node; for the way back, then the way back's patch of the node
    /// as the cordon would leave it (the dry run's answer), sent to the node as it is: the
    /// patch's shape and the grant are what is proved, the change itself is none there.
    async fn node_write(&self, capability: Capability) -> Result<Verdict, Verdict> {
        let (node, name) = self.node()?;
        let Some(patch) = cordon_patch(node, &spot_cordon(self.config, node, self.now)) else {
            return Ok(Verdict::NotChecked(format!(
                "node {name} is already in the cordon's state"
            )));
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cordoned = nodes
            .patch(&name, &self.patch, &Patch::Merge(&patch))
            .await
            .map_err(|e| failed(&e))?;
        if capability == Capability::Cordon {
            return Ok(Verdict::Admitted(Some(format!("node {name}"))));
        }
        let record = crate::domain::cordon_record::read_unverified(cordoned.annotations())
            .and_then(Result::ok)
            .ok_or_else(|| Verdict::NotChecked("the cordon's answer has no record".into()))?;
        let back = uncordon_patch(&cordoned, &self.config.taint_key, &record)
            .map_err(|e| Verdict::NotChecked(e.to_string()))?;
        Ok(answered(
            nodes.patch(&name, &self.patch, &Patch::Merge(&back)).await,
            Some(format!(
                "node {name}, the patch of its cordon as the cordon would leave it"
            )),
        ))
    }

    /// An Eviction of the pod; a disruption budget refusing it now is not admission.
    async fn evict(&self) -> Result<Verdict, Verdict> {
        let (ns, name) = ns_name(&self.pod()?.metadata);
        let mut body = eviction_body(&ns, &name, None);
        body["deleteOptions"] = serde_json::json!({"dryRun": ["All"]});
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let answer = pods
            .create_subresource::<_, serde_json::Value>("eviction", &name, &self.post, &body)
            .await;
        Ok(match answer {
            Err(::kube::Error::Api(s)) if s.code == 429 => Verdict::Admitted(Some(format!(
                "pod {ns}/{name}: its disruption budget refuses it at this moment"
            ))),
            other => answered(other, Some(format!("pod {ns}/{name}"))),
        })
    }

    /// The pod's placeholder; one that exists already passed admission when it was made.
    async fn placeholder(&self) -> Result<Verdict, Verdict> {
        let pod = self.pod()?;
        let (node, node_name) = self.node()?;
        let (ns, name) = ns_name(&pod.metadata);
        let placeholder = placeholder_for(
            pod,
            (&node_name, node.metadata.uid.as_deref()),
            PREFLIGHT_EVENT,
            self.now + chrono::Duration::minutes(2),
            self.now + chrono::Duration::minutes(1),
        );
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), crate::domain::surge::NAMESPACE);
        Ok(match pods.create(&self.post, &placeholder).await {
            Err(::kube::Error::Api(s)) if s.code == 409 => Verdict::Admitted(Some(format!(
                "for pod {ns}/{name}: its placeholder exists already"
            ))),
            other => answered(other, Some(format!("for pod {ns}/{name}"))),
        })
    }

    /// An Event about the pod (in its namespace, related to its node) or about the node (in
    /// `default`).
    async fn event(&self, capability: Capability) -> Result<Verdict, Verdict> {
        let node = reference("Node", &self.node()?.0.metadata);
        let said = Said(
            EventType::Normal,
            "SpotInterruption",
            "Evict",
            "forewarn's preflight: a dry run, nothing is recorded".into(),
        );
        let reporting = self.scope.reporting_instance;
        let body = if capability == Capability::PodEvent {
            let pod = reference("Pod", &self.pod()?.metadata);
            Event {
                related: Some(node),
                ..build(pod, PREFLIGHT_EVENT, said, reporting, self.now)
            }
        } else {
            build(node, PREFLIGHT_EVENT, said, reporting, self.now)
        };
        let (namespace, _) = ns_name(&body.metadata);
        let about = body.regarding.as_ref().and_then(|r| r.name.clone());
        let about = about.unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        Ok(answered(
            events.create(&self.post, &body).await,
            Some(format!("in namespace {namespace}, about {about}")),
        ))
    }

    /// The priority expander's ConfigMap, written back as it is.
    async fn expander(&self) -> Result<Verdict, Verdict> {
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), EXPANDER_NAMESPACE);
        let Some(map) = maps
            .get_opt(EXPANDER_CONFIGMAP)
            .await
            .map_err(|e| failed(&e))?
        else {
            return Ok(Verdict::NotChecked(format!(
                "ConfigMap {EXPANDER_NAMESPACE}/{EXPANDER_CONFIGMAP} does not exist"
            )));
        };
        Ok(answered(
            maps.replace(EXPANDER_CONFIGMAP, &self.post, &map).await,
            Some(format!(
                "{EXPANDER_NAMESPACE}/{EXPANDER_CONFIGMAP}, written back as it is"
            )),
        ))
    }
}
