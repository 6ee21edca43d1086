//! The executor as the [`Executor`] port: a pass of a plan, the way back, the placeholders'
//! clean-up and look.

use async_trait::async_trait;

use super::super::api::rate_limit::Lane;
use super::super::cordon::get_node;
use super::super::error::KubeError;
use super::super::outcome::results;
use super::KubeExecutor;
use crate::domain::plan::Plan;
use crate::domain::wayback::{Undo, UndoOutcome};
use crate::ports::{ActionResult, ExecuteError, Executor, Pass, Work};

#[async_trait]
impl Executor for KubeExecutor {
    async fn execute(&self, plan: &Plan, pass: Pass) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.run(plan, pass).await?))
    }

    async fn execute_in(
        &self,
        plan: &Plan,
        pass: Pass,
        work: Work,
    ) -> Result<Vec<ActionResult>, ExecuteError> {
        Ok(results(&self.run_in(plan, pass, work).await?))
    }

    async fn undo(&self, undo: &Undo) -> Result<UndoOutcome, ExecuteError> {
        let fail = |e: KubeError| ExecuteError {
            instance_id: undo.instance_id.clone(),
            message: format!("node {}: {e}", undo.node),
            kind: e.kind(),
        };
        match get_node(&self.clients, &undo.node).await.map_err(fail)? {
            None => Ok(UndoOutcome::NodeGone),
            Some(node) => self.undo_cordon(node, undo).await.map_err(fail),
        }
    }

    async fn room(
        &self,
        nodes: &[String],
    ) -> Result<std::collections::BTreeMap<String, crate::domain::surge::RoomSeen>, ExecuteError>
    {
        self.room_in(nodes, Work::default()).await
    }

    async fn room_in(
        &self,
        nodes: &[String],
        work: Work,
    ) -> Result<std::collections::BTreeMap<String, crate::domain::surge::RoomSeen>, ExecuteError>
    {
        let clients = self.clients.in_lane(Lane::Later).within(work.deadline);
        super::super::surge::room_of(&clients, nodes)
            .await
            .map_err(|e| ExecuteError {
                instance_id: String::new(),
                message: format!("placeholders of {} nodes: {e}", nodes.len()),
                kind: e.kind(),
            })
    }

    async fn clean_placeholders(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, ExecuteError> {
        super::super::surge::delete_expired(&self.clients, now, self.settings.dry_run)
            .await
            .map_err(|e| ExecuteError {
                instance_id: String::new(),
                message: format!("placeholders: {e}"),
                kind: e.kind(),
            })
    }
}
