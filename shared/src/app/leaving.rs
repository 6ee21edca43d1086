//! What the sweeper and the way back read of instances leaving (see [`crate::app::sweeper`],
//! [`crate::app::wayback`]): a port of their own, not the interruption path's.

use async_trait::async_trait;

use crate::domain::facts::{BlockFacts, InstanceFacts};
use crate::ports::{Place, PortError};

/// Where a sweep looks for instances that are gone, and for the status checks and scheduled
/// events of running ones.
#[async_trait]
pub trait LeavingInstances: Send + Sync {
    /// The instances of cluster `cluster` of `place` (its account and region) that are
    /// stopping, stopped, shutting down or terminated.
    async fn leaving(&self, place: &Place, cluster: &str) -> Result<Vec<InstanceFacts>, PortError>;

    /// The status checks and scheduled events of the region's running instances (EC2's
    /// `DescribeInstanceStatus`, every page) in `place`; the caller keeps its cluster's.
    async fn statuses(
        &self,
        place: &Place,
    ) -> Result<Vec<crate::domain::status::InstanceStatus>, PortError>;

    /// The active Capacity Blocks of `place` that end by `by` (EC2's
    /// `DescribeCapacityReservations`, `reservation-type` capacity-block, `state` active):
    /// whose expiration warning the sweeper makes sure was seen. A source that cannot say (a
    /// capture) knows none.
    async fn ending_blocks(
        &self,
        place: &Place,
        by: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<BlockFacts>, PortError> {
        let _ = (place, by);
        Ok(Vec::new())
    }
}
