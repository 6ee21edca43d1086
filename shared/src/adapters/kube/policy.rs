//! The policy ConfigMap `kube-system/forewarn-policy` (key `policy.yaml`): read by name, and a
//! Warning Event on it when its policy is refused.

use ::kube::Api;
use ::kube::api::PostParams;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::api::{FIELD_MANAGER, with_retry};
use super::connect::ClusterClient;
use super::events::{REPORTING_CONTROLLER, event_name};
use crate::ports::{DirectoryError, FailureKind, PolicySource, PolicyText};

/// The policy ConfigMap's namespace, name and key.
pub const POLICY_NAMESPACE: &str = "kube-system";
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

    fn failed(&self, e: impl std::fmt::Display, kind: FailureKind) -> DirectoryError {
        DirectoryError {
            service: "Kubernetes (the policy ConfigMap)",
            message: format!("configmap/{POLICY_NAMESPACE}/{POLICY_CONFIGMAP}: {e}"),
            kind,
        }
    }
}

#[async_trait]
impl PolicySource for KubePolicy {
    async fn read(&self) -> Result<PolicyText, DirectoryError> {
        let client = self
            .clients
            .client()
            .await
            .map_err(|e| self.failed(&e, e.kind()))?;
        let maps: Api<ConfigMap> = Api::namespaced(client, POLICY_NAMESPACE);
        let object = format!("configmap/{POLICY_NAMESPACE}/{POLICY_CONFIGMAP}");
        match with_retry(self.clients.clock(), "get", &object, || {
            maps.get(POLICY_CONFIGMAP)
        })
        .await
        {
            Ok(map) => Ok(match map.data.and_then(|mut d| d.remove(POLICY_KEY)) {
                Some(text) => PolicyText::Text(text),
                None => PolicyText::NoKey,
            }),
            Err(e) if e.is_not_found() => Ok(PolicyText::Absent),
            Err(e) => Err(self.failed(&e, e.kind())),
        }
    }

    async fn refused(&self, message: &str) {
        let now = self.clients.clock().now();
        let micros = k8s_openapi::jiff::Timestamp::from_microsecond(now.timestamp_micros())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        // One Event per refusal message: the same bad policy read again records none.
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(POLICY_CONFIGMAP, message, "PolicyRefused")),
                namespace: Some(POLICY_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(micros)),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.reporting_instance.clone()),
            action: Some("ReadPolicy".into()),
            reason: Some("PolicyRefused".into()),
            type_: Some("Warning".into()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
                namespace: Some(POLICY_NAMESPACE.into()),
                name: Some(POLICY_CONFIGMAP.into()),
                ..ObjectReference::default()
            }),
            note: Some(
                format!("policy refused, the last good one is kept: {message}")
                    .chars()
                    .take(1000)
                    .collect(),
            ),
            ..Event::default()
        };
        let client = match self.clients.client().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "could not record the PolicyRefused Event");
                return;
            }
        };
        let events: Api<Event> = Api::namespaced(client, POLICY_NAMESPACE);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let created = with_retry(self.clients.clock(), "create", "event", || {
            events.create(&params, &event)
        })
        .await;
        match created {
            Ok(_) => {}
            Err(e) if e.status == Some(409) => {}
            Err(e) => tracing::warn!(error = %e, "could not record the PolicyRefused Event"),
        }
    }
}
