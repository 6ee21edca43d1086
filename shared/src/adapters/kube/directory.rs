//! The node directory: the nodes of a batch of instances, from the API server.
//!
//! Most nodes on EC2 are named after the instance's private DNS name, so each instance is first
//! looked up with a `get` of that name (in parallel, at most 8 at once). When any
//! instance is not found that way (custom node names, a name reused by a new instance), one
//! `list` of the nodes finds the nodes whose `spec.providerID` names it, whose DNS addresses are
//! its private DNS name, or whose name is its instance id (`i-0123...`, `i-0123....<domain>`).
//! So a batch costs one `get` per instance and at most one `list`.

use std::collections::{BTreeMap, BTreeSet};

use ::kube::Api;
use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;

use super::api::retry::list_all;
use super::connect::ClusterClient;
use super::cordon::get_node;
use super::error::KubeError;
use super::node_facts::node_facts;
use crate::domain::facts::{InstanceFacts, NodeFacts, resolve_node};
use crate::ports::{NodeDirectory, PortError, Work};

const SERVICE: &str = "kubernetes";
/// `get`s at once.
const PARALLELISM: usize = 8;

/// Every node: one paged `list`.
async fn list_nodes(clients: &ClusterClient) -> Result<Vec<Node>, PortError> {
    let api = Api::all(clients.client().await.map_err(directory_error)?);
    let listed = list_all(clients, &api, "nodes").await;
    listed.map_err(directory_error)
}

fn directory_error(e: impl Into<KubeError>) -> PortError {
    let e = e.into();
    PortError::new(SERVICE, e.kind(), e)
}

/// Whether `node` is the node of `instance` (by [`resolve_node`]'s criteria).
fn names_instance(node: &NodeFacts, instance: &InstanceFacts) -> bool {
    let one = std::slice::from_ref(node);
    resolve_node(&instance.instance_id, Some(instance), one).is_some()
}

/// The cluster's clients are its [`NodeDirectory`], over the Kubernetes API.
#[async_trait]
impl NodeDirectory for ClusterClient {
    /// The nodes of `instances` (see the module's documentation).
    #[tracing::instrument(name = "nodes", skip_all, fields(instances = instances.len()), err)]
    async fn nodes(
        &self,
        instances: &[InstanceFacts],
        work: Work,
    ) -> Result<Vec<NodeFacts>, PortError> {
        let clients = &self.for_work(work);
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        // A client that cannot be made (an EKS token) fails the lookup once, not once per get.
        clients.client().await.map_err(directory_error)?;
        let names: BTreeSet<String> = instances
            .iter()
            .filter_map(|i| i.private_dns.as_deref())
            .filter(|d| !d.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        let got: Vec<Result<Option<Node>, KubeError>> = futures::stream::iter(names)
            .map(|name| async move { get_node(clients, &name).await })
            .buffer_unordered(PARALLELISM)
            .collect()
            .await;
        let mut found: BTreeMap<String, NodeFacts> = BTreeMap::new();
        for node in got {
            if let Some(node) = node.map_err(directory_error)? {
                clients.remember_node(&node);
                let facts = node_facts(&node);
                // A node under a reused name whose providerID names another instance is no one's.
                if instances.iter().any(|i| names_instance(&facts, i)) {
                    found.insert(facts.name.clone(), facts);
                }
            }
        }
        let missing: Vec<&InstanceFacts> = instances
            .iter()
            .filter(|i| !found.values().any(|n| names_instance(n, i)))
            .collect();
        if !missing.is_empty() {
            tracing::debug!(
                missing = missing.len(),
                "instances not found by node name: listing the nodes"
            );
            for node in list_nodes(clients).await? {
                let facts = node_facts(&node);
                if missing.iter().any(|i| names_instance(&facts, i)) {
                    found.insert(facts.name.clone(), facts);
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// One paged `list` of the nodes.
    async fn all(&self) -> Result<Vec<NodeFacts>, PortError> {
        Ok(list_nodes(self).await?.iter().map(node_facts).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fixtures;

    fn instance(id: &str, dns: Option<&str>) -> InstanceFacts {
        let i = fixtures::instance(id);
        match dns {
            Some(dns) => i.dns(dns),
            None => i,
        }
        .build()
    }

    #[test]
    fn what_names_an_instance() {
        let i = instance("i-0a1b2c3d4e5f60001", Some("ip-10-0-1-11.ec2.internal"));
        let by_provider = NodeFacts {
            name: "custom".into(),
            provider_id: Some("aws:///us-east-1a/i-0a1b2c3d4e5f60001".into()),
            ..NodeFacts::default()
        };
        assert!(names_instance(&by_provider, &i));
        // The name matches but the provider id names another instance (a reused address).
        let reused = NodeFacts {
            name: "ip-10-0-1-11.ec2.internal".into(),
            provider_id: Some("aws:///us-east-1a/i-0a1b2c3d4e5f69999".into()),
            ..NodeFacts::default()
        };
        assert!(!names_instance(&reused, &i));
        let by_dns = NodeFacts {
            name: "IP-10-0-1-11.EC2.INTERNAL".into(),
            ..NodeFacts::default()
        };
        assert!(names_instance(&by_dns, &i));
        let by_id = NodeFacts {
            name: "i-0a1b2c3d4e5f60001.us-west-2.compute.internal".into(),
            ..NodeFacts::default()
        };
        assert!(names_instance(
            &by_id,
            &instance("i-0a1b2c3d4e5f60001", None)
        ));
        let other = NodeFacts {
            name: "i-0a1b2c3d4e5f600012".into(),
            ..NodeFacts::default()
        };
        assert!(!names_instance(
            &other,
            &instance("i-0a1b2c3d4e5f60001", None)
        ));
    }
}
