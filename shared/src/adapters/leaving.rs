//! Where the sweeper looks for instances that are gone, and for the status checks and scheduled
//! events of running ones: [`LeavingInstances`] over EC2 (`DescribeInstances` by the leaving
//! states, `DescribeInstanceStatus`, `DescribeCapacityReservations`), through the same
//! [`Ec2Directory`] as the interruption path's lookups.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter;

use crate::adapters::aws::call_error;
use crate::adapters::ec2::{Ec2Directory, block_of, time_of};
use crate::app::leaving::LeavingInstances;
use crate::domain::facts::{BlockFacts, CLUSTER_TAG_PREFIX, InstanceFacts};
use crate::domain::status::{InstanceStatus, ScheduledEvent};
use crate::ports::{Place, PortError};

#[async_trait]
impl LeavingInstances for Ec2Directory {
    /// One query per way an instance can name its cluster (EC2 ANDs filters, so the three tag
    /// forms need three queries), each for the leaving states; the lifecycle is checked by the
    /// caller, client-side (the `instance-lifecycle` filter is not served everywhere).
    async fn leaving(&self, place: &Place, cluster: &str) -> Result<Vec<InstanceFacts>, PortError> {
        const CALL: &str = "ec2:DescribeInstances";
        let client = self.places.client_for(place, CALL).await?;
        let states = Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["stopping", "stopped", "shutting-down", "terminated"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        let by_tag = [
            ("tag-key", format!("{CLUSTER_TAG_PREFIX}{cluster}")),
            ("tag:aws:eks:cluster-name", cluster.to_string()),
            ("tag:eks:cluster-name", cluster.to_string()),
        ];
        let mut found: BTreeMap<String, InstanceFacts> = BTreeMap::new();
        for (name, value) in by_tag {
            let tag = Filter::builder().name(name).values(value).build();
            let filters = vec![tag, states.clone()];
            found.extend(self.query(place, &client, filters).await?);
        }
        Ok(found.into_values().collect())
    }

    /// One paged call: `DescribeInstanceStatus` of the running instances, 1,000 a page (the
    /// call takes no tag filter, and with `InstanceIds` it does not page).
    async fn statuses(&self, place: &Place) -> Result<Vec<InstanceStatus>, PortError> {
        const CALL: &str = "ec2:DescribeInstanceStatus";
        let client = self.places.client_for(place, CALL).await?;
        let pages = client.describe_instance_status().max_results(1000);
        let found: Result<Vec<_>, _> = pages.into_paginator().items().send().collect().await;
        let found = found.map_err(|e| self.places.said(place, CALL, call_error(CALL, e)))?;
        Ok(found.iter().filter_map(status_of).collect())
    }

    /// Every page of `DescribeCapacityReservations` of the active reservations (EC2's filters
    /// do not name the reservation type: the Capacity Blocks ending by `by` are kept here).
    async fn ending_blocks(
        &self,
        place: &Place,
        by: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<BlockFacts>, PortError> {
        const CALL: &str = "ec2:DescribeCapacityReservations";
        let client = self.places.client_for(place, CALL).await?;
        let active = Filter::builder().name("state").values("active").build();
        let pages = (client.describe_capacity_reservations())
            .filters(active)
            .max_results(500);
        let found: Result<Vec<_>, _> = pages.into_paginator().items().send().collect().await;
        let found = found.map_err(|e| self.places.said(place, CALL, call_error(CALL, e)))?;
        let blocks = found.iter().filter_map(block_of);
        let blocks = blocks.filter(|b| b.capacity_block == Some(true));
        Ok(blocks
            .filter(|b| b.end_date.is_some_and(|end| end <= by))
            .collect())
    }
}

/// Reads one SDK instance status: the two checks' summaries, the earliest `ImpairedSince` of
/// their details, the scheduled events.
pub fn status_of(s: &aws_sdk_ec2::types::InstanceStatus) -> Option<InstanceStatus> {
    let summaries = [s.system_status(), s.instance_status()];
    Some(InstanceStatus {
        instance_id: s.instance_id()?.to_string(),
        system: summaries[0]
            .and_then(|x| x.status())
            .map(|x| x.as_str().to_string()),
        instance: summaries[1]
            .and_then(|x| x.status())
            .map(|x| x.as_str().to_string()),
        impaired_since: summaries
            .iter()
            .flatten()
            .flat_map(|x| x.details())
            .filter_map(|d| d.impaired_since().and_then(time_of))
            .min(),
        events: s
            .events()
            .iter()
            .map(|e| ScheduledEvent {
                id: e.instance_event_id().map(str::to_string),
                code: e.code().map(|c| c.as_str().to_string()).unwrap_or_default(),
                description: e.description().unwrap_or_default().to_string(),
                not_before: e.not_before().and_then(time_of),
                not_after: e.not_after().and_then(time_of),
            })
            .collect(),
    })
}
