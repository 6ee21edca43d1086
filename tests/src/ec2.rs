//! Instances in moto's EC2, as the tests and the benchmarks launch them.

use anyhow::Context;
use aws_sdk_ec2::types::{
    InstanceMarketOptionsRequest, InstanceType, MarketType, Placement, ResourceType, Tag,
    TagSpecification,
};

/// What to launch: one instance of `instance_type` in `zone`, tagged `tag`.
#[derive(Debug, Clone)]
pub struct Launch {
    pub instance_type: InstanceType,
    pub zone: String,
    /// A spot instance (else on-demand).
    pub spot: bool,
    /// The cluster tag: `kubernetes.io/cluster/<name>` = `owned`, or `eks:cluster-name` = name.
    pub tag: (String, String),
}

impl Launch {
    /// A spot `m5.large` in `us-east-1a`, tagged `kubernetes.io/cluster/<cluster>=owned`.
    pub fn spot(cluster: &str) -> Launch {
        Launch {
            instance_type: InstanceType::M5Large,
            zone: "us-east-1a".into(),
            spot: true,
            tag: (format!("kubernetes.io/cluster/{cluster}"), "owned".into()),
        }
    }

    pub fn instance_type(mut self, instance_type: InstanceType) -> Launch {
        self.instance_type = instance_type;
        self
    }

    pub fn zone(mut self, zone: &str) -> Launch {
        self.zone = zone.into();
        self
    }

    pub fn on_demand(mut self) -> Launch {
        self.spot = false;
        self
    }

    pub fn tag(mut self, key: &str, value: &str) -> Launch {
        self.tag = (key.into(), value.into());
        self
    }
}

/// A launched instance.
#[derive(Debug, Clone)]
pub struct Launched {
    pub id: String,
    /// Its private DNS name (the node's name).
    pub dns: String,
    pub instance_type: String,
    pub zone: String,
    /// Its zone's ID in the launching account (`use1-az6`: moto maps `us-east-1a` so), what
    /// its pool is keyed by.
    pub zone_id: String,
}

/// The id of an image moto offers.
pub async fn any_image(ec2: &aws_sdk_ec2::Client) -> anyhow::Result<String> {
    let images = ec2
        .describe_images()
        .send()
        .await
        .context("DescribeImages on moto")?;
    images
        .images()
        .iter()
        .find_map(|i| i.image_id())
        .map(str::to_string)
        .context("moto offers no image")
}

/// Launches one instance (`RunInstances`).
pub async fn launch(
    ec2: &aws_sdk_ec2::Client,
    image: &str,
    what: &Launch,
) -> anyhow::Result<Launched> {
    let mut request = ec2
        .run_instances()
        .image_id(image)
        .instance_type(what.instance_type.clone())
        .min_count(1)
        .max_count(1)
        .placement(Placement::builder().availability_zone(&what.zone).build())
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(Tag::builder().key(&what.tag.0).value(&what.tag.1).build())
                .build(),
        );
    if what.spot {
        request = request.instance_market_options(
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::Spot)
                .build(),
        );
    }
    let out = request.send().await.context("RunInstances on moto")?;
    let i = out.instances().first().context("no instance launched")?;
    Ok(Launched {
        id: i.instance_id().context("no instance id")?.to_string(),
        dns: i
            .private_dns_name()
            .context("no private DNS name")?
            .to_string(),
        instance_type: what.instance_type.as_str().to_string(),
        zone: what.zone.clone(),
        zone_id: zone_id(ec2, &what.zone).await?,
    })
}

/// The ID of zone `name` in the account and region of `ec2` (`DescribeAvailabilityZones`).
pub async fn zone_id(ec2: &aws_sdk_ec2::Client, name: &str) -> anyhow::Result<String> {
    let zones = ec2
        .describe_availability_zones()
        .zone_names(name)
        .send()
        .await
        .context("DescribeAvailabilityZones on moto")?;
    zones
        .availability_zones()
        .first()
        .and_then(|z| z.zone_id())
        .map(str::to_string)
        .with_context(|| format!("no zone {name}"))
}
