//! The EC2 instance directory: `DescribeInstances` through the AWS SDK, one call per batch (the
//! sweeper's look at leaving instances and `DescribeInstanceStatus` is `adapters::leaving`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{Filter, Instance};
use chrono::Utc;

use crate::adapters::accounts::{Accounts, PerPlace, lock};
use crate::adapters::aws::call_error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::domain::facts::CLUSTER_TAG_PREFIX;
use crate::domain::facts::{BlockFacts, CapacityBlock, InstanceFacts};
use crate::domain::pool::{CapacityType, ZoneIds};
use crate::ports::{CLUSTER_PAGES_MAX, InstanceDirectory, Place, PortError};
use aws_sdk_ec2::error::ProvideErrorMetadata;

/// EC2 accepts at most 200 values in one filter.
const FILTER_VALUES_MAX: usize = 200;
const CALL: &str = "ec2:DescribeInstances";

/// Instance facts from EC2: of the own account and region, and with [`Accounts`] of the account
/// and region of each event ([`InstanceDirectory::describe`]).
#[derive(Clone, Debug)]
pub struct Ec2Directory {
    pub(crate) places: PerPlace<Client>,
    /// Each place's zones (`DescribeAvailabilityZones`), read once per place.
    zones: Arc<Mutex<HashMap<Place, Arc<tokio::sync::OnceCell<Zones>>>>>,
}

impl Ec2Directory {
    pub fn new(client: Client) -> Ec2Directory {
        Ec2Directory {
            places: PerPlace::single(client, Client::new),
            zones: Arc::default(),
        }
    }

    /// Describes the instances of other accounts and regions through `accounts`.
    pub fn with_accounts(mut self, accounts: Accounts) -> Ec2Directory {
        self.places = self.places.with_accounts(accounts);
        self
    }

    /// A directory on the standard AWS configuration (`AWS_ENDPOINT_URL_EC2`, region, ...).
    pub fn from_conf(sdk: &aws_config::SdkConfig) -> Ec2Directory {
        Ec2Directory::new(Client::new(sdk))
    }
}

/// Reads the facts of one SDK instance.
pub fn facts_of(i: &Instance) -> Option<InstanceFacts> {
    let placement = i.placement();
    let owned = |text: Option<&str>| text.map(str::to_string);
    let tag = |t: &aws_sdk_ec2::types::Tag| Some((t.key()?.into(), t.value().unwrap_or("").into()));
    Some(InstanceFacts {
        instance_id: i.instance_id()?.to_string(),
        instance_type: owned(i.instance_type().map(|t| t.as_str())),
        zone: owned(placement.and_then(|p| p.availability_zone())),
        zone_id: owned(placement.and_then(|p| p.availability_zone_id())),
        capacity_type: Some(CapacityType::of_ec2(
            i.instance_lifecycle().map(|l| l.as_str()),
            i.capacity_reservation_id(),
        )),
        private_dns: owned(i.private_dns_name().filter(|d| !d.is_empty())),
        state: owned(i.state().and_then(|s| s.name()).map(|n| n.as_str())),
        state_reason: owned(i.state_reason().and_then(|r| r.code())),
        launch_time: i.launch_time().and_then(time_of),
        tags: i.tags().iter().filter_map(tag).collect(),
        addresses: addresses_of(i),
        capacity_reservation_id: owned(i.capacity_reservation_id()),
    })
}

/// The private addresses of `instance`'s network interfaces and their delegated prefixes (see
/// [`InstanceFacts::addresses`]).
fn addresses_of(instance: &Instance) -> Vec<String> {
    instance
        .network_interfaces()
        .iter()
        .flat_map(|n| {
            let ips = n.private_ip_addresses().iter();
            let v4 = n.ipv4_prefixes().iter();
            let v6 = n.ipv6_addresses().iter();
            let v6p = n.ipv6_prefixes().iter();
            ips.filter_map(|a| a.private_ip_address())
                .chain(v4.filter_map(|p| p.ipv4_prefix()))
                .chain(v6.filter_map(|a| a.ipv6_address()))
                .chain(v6p.filter_map(|p| p.ipv6_prefix()))
        })
        .map(str::to_string)
        .collect()
}

#[async_trait]
impl InstanceDirectory for Ec2Directory {
    /// Uses the `instance-id` filter (one query per 200 ids) rather than `InstanceIds`, so that
    /// an instance EC2 no longer knows is simply absent instead of failing the whole call.
    /// In the account and region of `place`: the own client for the own ones, else one on a
    /// member account's role ([`Accounts`]). A place that cannot be served fails the lookup,
    /// naming it: a forged account or region as invalid; an account without a member role to
    /// assume (none configured, or no cluster of it served) with [`crate::ports::NotServed`] as
    /// its source; a served account whose role is refused with
    /// [`crate::ports::AccountUnreachable`].
    async fn describe(
        &self,
        place: &Place,
        instance_ids: &[String],
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        let client = self.places.client_for(place, CALL).await?;
        let mut found = BTreeMap::new();
        for chunk in instance_ids.chunks(FILTER_VALUES_MAX) {
            let ids = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.to_vec()));
            found.extend(self.query(place, &client, vec![ids.build()]).await?);
        }
        Ok(found)
    }

    /// `DescribeInstances` filtered on the tag key and the running state, 1,000 a page, until
    /// [`CLUSTER_PAGES_MAX`] pages a list: in each zone of the place open to the account at
    /// once when they are at most `at_once` (a list of 5,000 in three zones takes two pages'
    /// time, not five), else in one list. The first error is answered once every list is over
    /// (the pages found are given all the same).
    async fn cluster_instances(
        &self,
        place: &Place,
        cluster: &str,
        at_once: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), PortError> {
        let client = self.places.client_for(place, CALL).await?;
        let filter = |name: &str, value: &str| Filter::builder().name(name).values(value).build();
        let tag = format!("{CLUSTER_TAG_PREFIX}{cluster}");
        let cluster = vec![
            filter("tag-key", &tag),
            filter("instance-state-name", "running"),
        ];
        // Zones that cannot be read leave the cluster in one list.
        let zones = if at_once > 1 {
            (self.zones(place, &client).await)
                .inspect_err(|e| tracing::warn!(error = %e, account = ?place.account, region = ?place.region, "the zones could not be read: the cluster's instances listed in one list"))
                .map(|z| z.open)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let lists = if !zones.is_empty() && zones.len() <= at_once {
            let zone = |z: &String| [cluster.clone(), vec![filter("availability-zone", z)]];
            zones.iter().map(|z| zone(z).concat()).collect()
        } else {
            vec![cluster]
        };
        let lists = (lists.into_iter())
            .map(|filters| self.pages(place, &client, filters, CLUSTER_PAGES_MAX, found));
        futures::future::join_all(lists).await.into_iter().collect()
    }

    /// One `DescribeCapacityReservations` of the reservation (EC2 answers
    /// `InvalidCapacityReservationId.NotFound` for one it does not know in the account and
    /// region: no facts) and one paged `DescribeInstances` filtered on `capacity-reservation-id`.
    async fn capacity_block(
        &self,
        place: &Place,
        reservation_id: &str,
    ) -> Result<CapacityBlock, PortError> {
        const CALL: &str = "ec2:DescribeCapacityReservations";
        let client = self.places.client_for(place, CALL).await?;
        let ask = client.describe_capacity_reservations();
        let answer = ask.capacity_reservation_ids(reservation_id).send().await;
        let facts = match answer {
            Ok(out) => out.capacity_reservations().iter().find_map(block_of),
            Err(e) if e.code() == Some("InvalidCapacityReservationId.NotFound") => None,
            Err(e) => return Err(self.places.said(place, CALL, call_error(CALL, e))),
        };
        let block = Filter::builder()
            .name("capacity-reservation-id")
            .values(reservation_id);
        let instances = (self.query(place, &client, vec![block.build()])).await?;
        Ok(CapacityBlock { facts, instances })
    }
}

/// An SDK time as a chrono one.
pub(crate) fn time_of(t: &aws_sdk_ec2::primitives::DateTime) -> Option<chrono::DateTime<Utc>> {
    chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// Reads one SDK capacity reservation.
pub fn block_of(r: &aws_sdk_ec2::types::CapacityReservation) -> Option<BlockFacts> {
    use aws_sdk_ec2::types::CapacityReservationType;
    Some(BlockFacts {
        reservation_id: r.capacity_reservation_id()?.to_string(),
        instance_type: r.instance_type().map(str::to_string),
        zone: r.availability_zone().map(str::to_string),
        zone_id: r.availability_zone_id().map(str::to_string),
        end_date: r.end_date().and_then(time_of),
        state: r.state().map(|s| s.as_str().to_string()),
        capacity_block: Some(r.reservation_type() == Some(&CapacityReservationType::CapacityBlock)),
    })
}

impl Ec2Directory {
    /// The instances of `place` answering `filters` (`client`'s `DescribeInstances`, 1,000 a
    /// page, every page), by id, with their zone IDs.
    pub(crate) async fn query(
        &self,
        place: &Place,
        client: &Client,
        filters: Vec<Filter>,
    ) -> Result<BTreeMap<String, InstanceFacts>, PortError> {
        let found = Mutex::new(BTreeMap::new());
        let each = |page: BTreeMap<_, _>| lock(&found).extend(page);
        self.pages(place, client, filters, usize::MAX, &each)
            .await?;
        Ok(found.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    /// Each page of the instances of `place` answering `filters` (`client`'s
    /// `DescribeInstances`, 1,000 a page, until `most` pages), by id, with their zone IDs, to
    /// `found` as it comes.
    async fn pages(
        &self,
        place: &Place,
        client: &Client,
        filters: Vec<Filter>,
        most: usize,
        found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
    ) -> Result<(), PortError> {
        let request = client.describe_instances().set_filters(Some(filters));
        let mut pages = request.max_results(1000).into_paginator().send();
        for _ in 0..most {
            let Some(page) = pages.next().await else {
                break;
            };
            let page = page.map_err(|e| self.places.said(place, CALL, call_error(CALL, e)))?;
            let instances = page.reservations().iter().flat_map(|r| r.instances());
            let mut facts = (instances.filter_map(facts_of))
                .map(|f| (f.instance_id.clone(), f))
                .collect();
            self.with_zone_ids(place, client, &mut facts).await;
            found(facts);
        }
        Ok(())
    }

    /// The zones of `place` (read through `client` once per place: a read under way is waited
    /// for; one that failed is tried again by the next).
    async fn zones(&self, place: &Place, client: &Client) -> Result<Zones, PortError> {
        let zones = lock(&self.zones).entry(place.clone()).or_default().clone();
        zones.get_or_try_init(|| zones_of(client)).await.cloned()
    }

    /// Gives `instances` (of `place`, described through `client`) the zone IDs EC2 did not,
    /// from its [`Ec2Directory::zones`]. When they cannot be read, they keep none (their pools
    /// are keyed by zone name), logged.
    async fn with_zone_ids(
        &self,
        place: &Place,
        client: &Client,
        instances: &mut BTreeMap<String, InstanceFacts>,
    ) {
        let missing: Vec<&mut InstanceFacts> = (instances.values_mut())
            .filter(|i| i.zone_id.is_none() && i.zone.is_some())
            .collect();
        if missing.is_empty() {
            return;
        }
        match self.zones(place, client).await {
            Ok(zones) => {
                for instance in missing {
                    let zone = instance.zone.as_deref().unwrap_or_default();
                    instance.zone_id = zones.ids.get(zone).cloned();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, account = ?place.account, region = ?place.region, "the zone IDs could not be read: pools keyed by zone name")
            }
        }
    }
}

/// The zones of an account and region.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Zones {
    /// Every zone's ID by its name, opted in or not (an instance may be in a Local Zone).
    pub ids: ZoneIds,
    /// The names of those open to the account (not opt-in, or opted in): where it can run
    /// instances.
    pub open: Vec<String>,
}

/// The zones of the account and region of `client`.
pub async fn zones_of(client: &Client) -> Result<Zones, PortError> {
    use aws_sdk_ec2::types::AvailabilityZoneOptInStatus as OptIn;
    let ask = client.describe_availability_zones();
    let out = ask.all_availability_zones(true).send().await;
    let out = out.map_err(|e| call_error("ec2:DescribeAvailabilityZones", e))?;
    let zones = out.availability_zones();
    let open =
        |z: &&aws_sdk_ec2::types::AvailabilityZone| z.opt_in_status() != Some(&OptIn::NotOptedIn);
    Ok(Zones {
        ids: (zones.iter())
            .filter_map(|z| Some((z.zone_name()?.to_string(), z.zone_id()?.to_string())))
            .collect(),
        open: (zones.iter().filter(open))
            .filter_map(|z| z.zone_name().map(str::to_string))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        InstanceLifecycleType, InstanceState, InstanceStateName, InstanceType, Placement,
        StateReason, Tag,
    };

    #[test]
    fn sdk_instance_to_facts() {
        let i = Instance::builder()
            .instance_id("i-0a1b2c3d4e5f60001")
            .instance_type(InstanceType::M5Large)
            .placement(Placement::builder().availability_zone("us-east-1a").build())
            .instance_lifecycle(InstanceLifecycleType::Spot)
            .private_dns_name("ip-10-0-1-11.ec2.internal")
            .state(
                InstanceState::builder()
                    .name(InstanceStateName::Stopped)
                    .build(),
            )
            .state_reason(
                StateReason::builder()
                    .code("Server.SpotInstanceTermination")
                    .build(),
            )
            .tags(Tag::builder().key("eks:cluster-name").value("demo").build())
            .launch_time(aws_sdk_ec2::primitives::DateTime::from_secs(1_795_165_200))
            .build();
        let f = facts_of(&i).unwrap();
        assert_eq!(f.pool().unwrap().to_string(), "spot#m5.large#us-east-1a");
        assert_eq!(f.state.as_deref(), Some("stopped"));
        assert_eq!(
            f.state_reason.as_deref(),
            Some("Server.SpotInstanceTermination")
        );
        assert_eq!(f.clusters(), vec!["demo"]);
        assert_eq!(f.launch_time.map(|t| t.timestamp()), Some(1_795_165_200));
        assert!(facts_of(&Instance::builder().build()).is_none());
    }
}
