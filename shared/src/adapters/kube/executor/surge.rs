//! The executor's clean-up of surge placeholders (see [`super::super::surge`]) beyond a
//! drain's passes: the sweeper's, of expired ones. (The room a batch's drains wait for is one
//! look, [`super::super::surge::room_of`], in the executor's later lane.)

use chrono::{DateTime, Utc};

use super::super::connect::ClusterClient;
use super::super::error::KubeError;
use super::super::surge::delete_expired;

/// Cleans up placeholders.
pub(super) struct Placeholders<'a> {
    pub clients: &'a ClusterClient,
    /// Say what would be deleted, delete nothing.
    pub dry_run: bool,
}

impl Placeholders<'_> {
    /// Deletes the placeholders that expired before `now` (see
    /// [`crate::ports::Executor::clean_placeholders`]).
    pub async fn clean(&self, now: DateTime<Utc>) -> Result<Vec<String>, KubeError> {
        delete_expired(self.clients, now, self.dry_run).await
    }
}
