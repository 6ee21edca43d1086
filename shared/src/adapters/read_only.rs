//! A view of a pool store that reads but never writes (a dry run's): `apply` answers what it
//! would have done, the continuation keys are read but never created, nothing is rotated.

use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::keys::KeyRing;
use crate::domain::plan::Plan;
use crate::domain::pool::HistoryEntry;
use crate::domain::pool::{Applied, PoolKey, PoolQuery, PoolRecord};
use crate::ports::{FailureKind, PoolStore, PortError};

/// A view of a store that reads but never writes: `apply` answers what it would have done.
pub struct ReadOnlyStore<S>(pub S);

#[async_trait]
impl<S> PoolStore for ReadOnlyStore<S>
where
    S: std::ops::Deref<Target = dyn PoolStore> + Send + Sync,
{
    async fn applied(&self, event_ids: &[String]) -> Result<HashSet<String>, PortError> {
        self.0.applied(event_ids).await
    }

    async fn apply(&self, plan: &Plan, _: DateTime<Utc>) -> Result<Applied, PortError> {
        let seen = self.0.applied(std::slice::from_ref(&plan.event_id)).await?;
        Ok(if seen.contains(&plan.event_id) {
            Applied::Duplicate
        } else {
            Applied::Applied
        })
    }

    async fn pools(
        &self,
        query: &PoolQuery,
        now: DateTime<Utc>,
    ) -> Result<Vec<PoolRecord>, PortError> {
        self.0.pools(query, now).await
    }

    async fn history(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        self.0.history(since, now).await
    }

    async fn history_of(
        &self,
        pools: &[PoolKey],
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryEntry>, PortError> {
        self.0.history_of(pools, since, now).await
    }

    /// A read-only view reads the keys (a dry run verifies cordon records) but never creates
    /// them: with none stored, it has none.
    async fn continuation_keys(&self) -> Result<KeyRing, PortError> {
        self.0.reread_continuation_keys().await?.ok_or_else(|| {
            let what = "no continuation key is stored yet (a read-only view never creates one)";
            PortError::store(self.0.location(), FailureKind::NotFound, what)
        })
    }

    async fn reread_continuation_keys(&self) -> Result<Option<KeyRing>, PortError> {
        self.0.reread_continuation_keys().await
    }

    async fn rotate_continuation_key(&self) -> Result<KeyRing, PortError> {
        let what = "a read-only view of the store rotates nothing";
        Err(PortError::store(
            self.0.location(),
            FailureKind::Invalid,
            what,
        ))
    }

    fn location(&self) -> String {
        self.0.location()
    }
}
