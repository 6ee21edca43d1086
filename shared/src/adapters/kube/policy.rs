//! The policy ConfigMap `forewarn/forewarn-policy` (key `policy.yaml`): read by name, and a
//! Warning Event on it when its policy, or a rule of it, is refused.
//!
//! It lives in forewarn's own namespace, not kube-system: whoever may write ConfigMaps in
//! kube-system (the Cluster Autoscaler's role may) does not thereby steer forewarn. Nothing else
//! of forewarn's reads kube-system for it.

use ::kube::Api;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::retry::with_retry;
use super::connect::ClusterClient;
use super::error::KubeError;
use super::events::{EventType::Warning, Said, build, record, reference};
use crate::ports::{PolicySource, PolicyText, PortError};

/// The policy ConfigMap's namespace (forewarn's own, `infra/k8s/rbac.yaml`), name and key.
pub const POLICY_NAMESPACE: &str = crate::domain::config::NAMESPACE;
pub const POLICY_CONFIGMAP: &str = "forewarn-policy";
pub const POLICY_KEY: &str = "policy.yaml";

/// [`PolicySource`] over the Kubernetes API.
pub struct KubePolicy {
    clients: ClusterClient,
    /// `reportingInstance` of the Events.
    reporting_instance: String,
}

impl KubePolicy {
    pub fn new(clients: ClusterClient, reporting_instance: &str) -> KubePolicy {
        KubePolicy {
            clients,
            reporting_instance: reporting_instance.chars().take(128).collect(),
        }
    }

    fn failed(&self, e: impl Into<KubeError>) -> PortError {
        let e = e.into();
        PortError::new("Kubernetes (the policy ConfigMap)", e.kind(), e)
            .doing(format!("configmap/{POLICY_NAMESPACE}/{POLICY_CONFIGMAP}"))
    }
}

#[async_trait]
impl PolicySource for KubePolicy {
    async fn read(&self) -> Result<PolicyText, PortError> {
        let client = self.clients.client().await.map_err(|e| self.failed(e))?;
        let maps: Api<ConfigMap> = Api::namespaced(client, POLICY_NAMESPACE);
        let object = format!("configmap/{POLICY_NAMESPACE}/{POLICY_CONFIGMAP}");
        let got = with_retry(&self.clients, "get", &object, || {
            maps.get_opt(POLICY_CONFIGMAP)
        });
        let map = got.await.map_err(|e| self.failed(e))?;
        let text = map.map(|m| m.data.and_then(|mut d| d.remove(POLICY_KEY)));
        Ok(match text {
            None => PolicyText::Absent,
            Some(Some(text)) => PolicyText::Text(text),
            Some(None) => PolicyText::NoKey,
        })
    }

    async fn refused(&self, message: &str) {
        // The message says what was refused and what applies instead (crate::app::policy).
        // One Event per refusal message: the same bad policy read again records none.
        let regarding = ObjectReference {
            namespace: Some(POLICY_NAMESPACE.into()),
            name: Some(POLICY_CONFIGMAP.into()),
            ..reference("ConfigMap", &ObjectMeta::default())
        };
        let said = Said(Warning, "PolicyRefused", "ReadPolicy", message.into());
        let (reporting, now) = (&self.reporting_instance, self.clients.clock().now());
        let event = build(regarding, message, said, reporting, now);
        if let Err(e) = record(&self.clients, &event, true).await {
            tracing::warn!(error = %e, "could not record the PolicyRefused Event");
        }
    }
}
