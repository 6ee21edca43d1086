//! The directory and the executor as one batch's work uses them: every call given the batch's
//! [`Work`] (its deadline), so that the adapters retry transient failures inside the batch while
//! its time allows (see [`super::Pipeline::process_with`]).

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::cordon_record::{Undo, UndoOutcome};
use crate::domain::facts::{InstanceFacts, NodeFacts};
use crate::domain::plan::Plan;
use crate::domain::surge::RoomSeen;
use crate::ports::{
    ActionResult, DirectoryError, ExecuteError, Executor, NodeDirectory, Pass, Work,
};

/// An executor whose every call is part of `work` (a call given other work too).
pub(super) struct ExecutorIn<'a> {
    pub inner: &'a dyn Executor,
    pub work: Work,
}

#[async_trait]
impl Executor for ExecutorIn<'_> {
    async fn execute(&self, plan: &Plan, pass: Pass) -> Result<Vec<ActionResult>, ExecuteError> {
        self.inner.execute_in(plan, pass, self.work).await
    }

    async fn undo(&self, undo: &Undo) -> Result<UndoOutcome, ExecuteError> {
        self.inner.undo(undo).await
    }

    async fn clean_placeholders(&self, now: DateTime<Utc>) -> Result<Vec<String>, ExecuteError> {
        self.inner.clean_placeholders(now).await
    }

    async fn room(&self, nodes: &[String]) -> Result<BTreeMap<String, RoomSeen>, ExecuteError> {
        self.inner.room_in(nodes, self.work).await
    }
}

/// A node directory whose every lookup is part of `work` (a lookup given other work too).
pub(super) struct NodesIn<'a> {
    pub inner: &'a dyn NodeDirectory,
    pub work: Work,
}

#[async_trait]
impl NodeDirectory for NodesIn<'_> {
    async fn nodes(&self, instances: &[InstanceFacts]) -> Result<Vec<NodeFacts>, DirectoryError> {
        self.inner.nodes_in(instances, self.work).await
    }

    async fn all(&self) -> Result<Vec<NodeFacts>, DirectoryError> {
        self.inner.all().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records the work each call was given.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<Work>>);

    impl Recorded {
        fn saw(&self, work: Work) {
            self.0.lock().unwrap().push(work);
        }
    }

    #[async_trait]
    impl Executor for Recorded {
        async fn execute(&self, _: &Plan, _: Pass) -> Result<Vec<ActionResult>, ExecuteError> {
            self.saw(Work::default());
            Ok(Vec::new())
        }

        async fn undo(&self, _: &Undo) -> Result<UndoOutcome, ExecuteError> {
            Ok(UndoOutcome::NodeGone)
        }

        async fn clean_placeholders(&self, _: DateTime<Utc>) -> Result<Vec<String>, ExecuteError> {
            Ok(Vec::new())
        }

        async fn room_in(
            &self,
            _: &[String],
            work: Work,
        ) -> Result<BTreeMap<String, RoomSeen>, ExecuteError> {
            self.saw(work);
            Ok(BTreeMap::new())
        }
    }

    #[async_trait]
    impl NodeDirectory for Recorded {
        async fn nodes(&self, _: &[InstanceFacts]) -> Result<Vec<NodeFacts>, DirectoryError> {
            self.saw(Work::default());
            Ok(Vec::new())
        }

        async fn nodes_in(
            &self,
            _: &[InstanceFacts],
            work: Work,
        ) -> Result<Vec<NodeFacts>, DirectoryError> {
            self.saw(work);
            Ok(Vec::new())
        }

        async fn all(&self) -> Result<Vec<NodeFacts>, DirectoryError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn every_call_carries_the_batchs_work() {
        let work = Work {
            deadline: Some("2026-11-24T10:00:00Z".parse().unwrap()),
            fail_fast: true,
        };
        let seen = Recorded::default();
        let executor = ExecutorIn { inner: &seen, work };
        let nodes = NodesIn { inner: &seen, work };
        executor.room(&[]).await.unwrap();
        nodes.nodes(&[]).await.unwrap();
        assert_eq!(*seen.0.lock().unwrap(), vec![work, work]);
    }
}
