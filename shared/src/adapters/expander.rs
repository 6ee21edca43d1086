//! The Cluster Autoscaler's priority expander ConfigMap and the user's base priorities, both in
//! `kube-system`: get of each by name, create and replace (with the resourceVersion read, so that
//! a concurrent writer is a conflict, not a lost update) of the expander's. Only `forewarn
//! priorities --kube --execute`, run with a person's credentials, creates: forewarn's own
//! Kubernetes groups may not create ConfigMaps (infra/k8s/rbac.yaml), so the sweeper never calls
//! [`KubeExpander::create`](crate::app::priorities::ExpanderStore::create).

use std::collections::BTreeMap;

use ::kube::Api;
use ::kube::api::{ObjectMeta, PostParams};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;

use crate::adapters::kube::api::FIELD_MANAGER;
use crate::adapters::kube::api::retry::with_retry;
use crate::adapters::kube::{ApiError, ClusterClient};
use crate::app::priorities::{ExpanderError, ExpanderStore, StoredExpander};
use crate::domain::expander::{
    BASE_CONFIGMAP, DATA_KEY, EXPANDER_CONFIGMAP, ExpanderConfig, NAMESPACE,
};

/// The expander's ConfigMaps through the Kubernetes API.
#[derive(Clone)]
pub struct KubeExpander {
    clients: ClusterClient,
}

impl KubeExpander {
    pub fn new(clients: ClusterClient) -> KubeExpander {
        KubeExpander { clients }
    }

    async fn api(&self, verb: &'static str, name: &str) -> Result<Api<ConfigMap>, ExpanderError> {
        let client = self
            .clients
            .client()
            .await
            .map_err(|e| ExpanderError::Api {
                verb,
                object: object(name),
                message: e.to_string(),
                kind: e.kind,
                source: Some(Box::new(e)),
            })?;
        Ok(Api::namespaced(client, NAMESPACE))
    }

    /// The ConfigMap `name` of the namespace, if there is one.
    async fn get(&self, name: &str) -> Result<Option<ConfigMap>, ExpanderError> {
        let api = self.api("get", name).await?;
        let object = object(name);
        let got = with_retry(&self.clients, "get", &object, || api.get_opt(name));
        got.await.map_err(api_error)
    }

    /// Writes the expander's ConfigMap of `config`: created (`verb` `create`), or replaced
    /// (`update`) if it is still at `resource_version`.
    async fn write(
        &self,
        verb: &'static str,
        config: &ExpanderConfig,
        resource_version: Option<&str>,
    ) -> Result<(), ExpanderError> {
        let api = self.api(verb, EXPANDER_CONFIGMAP).await?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(EXPANDER_CONFIGMAP.to_string()),
                namespace: Some(NAMESPACE.to_string()),
                labels: Some(config.labels.clone()),
                annotations: Some(config.annotations.clone()),
                resource_version: resource_version.map(str::to_string),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                config.priorities.clone(),
            )])),
            ..ConfigMap::default()
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        // Created by someone else meanwhile (409): read again, as for a conflict.
        let call = || async {
            match resource_version {
                None => api.create(&params, &cm).await,
                Some(_) => api.replace(EXPANDER_CONFIGMAP, &params, &cm).await,
            }
        };
        let written = with_retry(&self.clients, verb, &object(EXPANDER_CONFIGMAP), call).await;
        written.map(|_| ()).map_err(api_error)
    }
}

fn api_error(e: ApiError) -> ExpanderError {
    if e.is_conflict() {
        ExpanderError::Conflict {
            verb: e.verb,
            object: e.object,
        }
    } else {
        ExpanderError::Api {
            verb: e.verb,
            message: e.message(),
            kind: e.kind(),
            object: e.object.clone(),
            source: Some(Box::new(e)),
        }
    }
}

fn object(name: &str) -> String {
    format!("{NAMESPACE}/{name}")
}

/// The priorities a ConfigMap holds (none: empty).
fn priorities(cm: &mut ConfigMap) -> String {
    (cm.data.as_mut().and_then(|d| d.remove(DATA_KEY))).unwrap_or_default()
}

#[async_trait]
impl ExpanderStore for KubeExpander {
    async fn base(&self) -> Result<Option<String>, ExpanderError> {
        Ok(self.get(BASE_CONFIGMAP).await?.as_mut().map(priorities))
    }

    async fn current(&self) -> Result<Option<StoredExpander>, ExpanderError> {
        Ok(self
            .get(EXPANDER_CONFIGMAP)
            .await?
            .map(|mut cm| StoredExpander {
                config: ExpanderConfig {
                    priorities: priorities(&mut cm),
                    labels: cm.metadata.labels.unwrap_or_default(),
                    annotations: cm.metadata.annotations.unwrap_or_default(),
                },
                resource_version: cm.metadata.resource_version.unwrap_or_default(),
            }))
    }

    async fn create(&self, config: &ExpanderConfig) -> Result<(), ExpanderError> {
        self.write("create", config, None).await
    }

    async fn replace(
        &self,
        config: &ExpanderConfig,
        resource_version: &str,
    ) -> Result<(), ExpanderError> {
        self.write("update", config, Some(resource_version)).await
    }
}
