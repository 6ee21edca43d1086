//! The executor's cordon of a node (see [`super::super::cordon`]): the cordon and taint, with
//! the record signed by the pool store's continuation keys.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::super::connect::ClusterClient;
use super::super::cordon::{CordonOutcome, CordonSpec, NodeWrite, RecordKeys, cordon};
use super::super::error::{KubeError, Refusal};
use super::super::node_facts::node_facts;
use super::NodeOutcome;
use crate::domain::config::Config;
use crate::domain::plan::NodeAction;
use crate::ports::PoolStore;

/// What cordoning a node came to (see [`Cordoner::cordon_node`]).
pub(super) struct Cordoning {
    /// The node is gone, or the cordon was refused: nothing more is done to it.
    pub gone: bool,
    /// The note of the `Cordoned` Event to record.
    pub note: Option<String>,
}

/// Cordons and taints nodes.
pub(super) struct Cordoner<'a> {
    pub clients: &'a ClusterClient,
    pub config: &'a Config,
    /// Where cordon records' keys are read; `None`: see [`RecordKeys::Unsigned`].
    pub keys: Option<&'a Arc<dyn PoolStore>>,
    /// How its writes go (a dry run's too).
    pub write: NodeWrite,
}

impl Cordoner<'_> {
    /// How cordons of `node` treat records (see [`RecordKeys`]); keys that cannot be read are
    /// logged and the cordon still goes on, a record already on the node left as it is. A record
    /// signed by a key id the keys read do not hold (a rotation this process has not seen) makes
    /// them be read again, once, as a continuation's signature does.
    async fn record_keys(&self, node: &Node) -> RecordKeys {
        let Some(store) = self.keys else {
            return RecordKeys::Unsigned;
        };
        let keys = match store.continuation_keys().await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, "the continuation keys cannot be read: a record on the node is left as it is, a new one written unsigned");
                return RecordKeys::Unreadable;
            }
        };
        let signed_by = node
            .metadata
            .annotations
            .as_ref()
            .and_then(crate::domain::wayback::read_unverified)
            .and_then(Result::ok)
            .and_then(|r| r.key_id);
        match signed_by {
            Some(id) if keys.get(id).is_none() => match store.reread_continuation_keys().await {
                Ok(Some(fresh)) => RecordKeys::Signed(fresh),
                Ok(None) => RecordKeys::Signed(keys),
                Err(e) => {
                    tracing::warn!(error = %e, key_id = id, "the continuation keys cannot be read again for a record of an unknown key: it is left as it is");
                    RecordKeys::Unreadable
                }
            },
            _ => RecordKeys::Signed(keys),
        }
    }

    /// Cordons and taints the node; says whether it was gone (or the cordon refused), and the
    /// note of the `Cordoned` Event to record when the cordon changed it (or, with
    /// `already_ours`, when it was found cordoned with forewarn's taint).
    pub async fn cordon_node(
        &self,
        a: &NodeAction,
        node: &Node,
        already_ours: bool,
        out: &mut NodeOutcome,
    ) -> Result<Cordoning, KubeError> {
        let keys = self.record_keys(node).await;
        let spec = CordonSpec::new(self.config, a, keys);
        let verify = |n: &Node| runs(a, n);
        let cordoned = cordon(self.clients, node.clone(), &spec, self.write, &verify).await?;
        if let CordonOutcome::Refused { why } = &cordoned {
            out.refused = Some(why.clone());
            return Ok(Cordoning {
                gone: true,
                note: None,
            });
        }
        let gone = cordoned == CordonOutcome::NodeGone;
        if matches!(
            cordoned,
            CordonOutcome::Cordoned { .. } | CordonOutcome::AlreadyCordoned
        ) {
            out.cordoned_at = Some(self.clients.clock().now());
        }
        out.cordoned_before = already_ours && cordoned == CordonOutcome::AlreadyCordoned;
        let note = (matches!(cordoned, CordonOutcome::Cordoned { .. }) || out.cordoned_before)
            .then(|| self.cordoned_note(a));
        out.cordon = Some(cordoned);
        Ok(Cordoning { gone, note })
    }

    /// The first pass of a `cordon-drain`: the cordon only (one patch, no Event), so that a
    /// mass interruption's first deliveries are short and every node is cordoned early; the
    /// Events and the evictions follow in the drain passes. (Never a dry run: a dry run has no
    /// drain passes, its first pass says all.)
    pub async fn cordon_first(
        &self,
        a: &NodeAction,
        node: Node,
        out: &mut NodeOutcome,
    ) -> Result<(), KubeError> {
        let keys = self.record_keys(&node).await;
        let spec = CordonSpec::new(self.config, a, keys);
        let verify = |n: &Node| runs(a, n);
        let write = NodeWrite {
            dry_run: false,
            ..self.write
        };
        let cordoned = cordon(self.clients, node, &spec, write, &verify).await?;
        if let CordonOutcome::Refused { why } = &cordoned {
            out.refused = Some(why.clone());
        } else if cordoned != CordonOutcome::NodeGone {
            out.cordoned_at = Some(self.clients.clock().now());
            out.drain_pending = true;
        }
        out.cordon = Some(cordoned);
        Ok(())
    }

    /// The note of the `Cordoned` Event of `a`'s cordon.
    pub fn cordoned_note(&self, a: &NodeAction) -> String {
        let spec = CordonSpec::new(self.config, a, RecordKeys::Unsigned);
        format!(
            "Marked unschedulable and tainted {}={}:{}",
            spec.taint_key,
            spec.taint_value,
            spec.taint_effect.as_str()
        )
    }
}

/// Whether `node`, as just read again, still runs `a`'s instance and is not control-plane
/// (what a cordon verifies again on a conflict).
fn runs(a: &NodeAction, node: &Node) -> Result<(), Refusal> {
    node_facts(node).verify_runs(&a.instance_id)?;
    Ok(())
}
