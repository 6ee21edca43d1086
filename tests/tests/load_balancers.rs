//! Traffic first (`forewarn::adapters::elb`) on moto's Elastic Load Balancing, through the
//! recording proxy: a doomed instance leaves the instance-mode target groups its cluster's tag
//! names, its pods' addresses (secondary addresses of its network interface, as the VPC CNI
//! gives them) leave the IP-mode ones; another cluster's group and an untagged one keep it, and
//! so does every other instance; the calls are counted (the cluster's groups found by tag in one
//! `GetResources` among hundreds of the account's, one DeregisterTargets per group, the groups
//! kept between rounds and found again in the background); a throttled deregistration names its
//! group; a discovery cut short keeps the pages it found.

use std::sync::Arc;

use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::types::{ProtocolEnum, Tag, TargetDescription, TargetTypeEnum};
use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::ec2::Ec2Directory;
use forewarn::adapters::elb::ElbTargets;
use forewarn::domain::clusters::ClusterId;
use forewarn::domain::traffic::Doomed;
use forewarn::ports::{InstanceDirectory, LoadBalancers, Place};
use forewarn_tests::ec2::{Launch, any_image, launch};
use forewarn_tests::elb::registered;
use forewarn_tests::moto::{runtime, shared, unique_name};
use forewarn_tests::proxy::{AwsCall, AwsFault, AwsProxy, FaultKind};

/// The rounds of `cluster` in `place`.
fn key(place: &Place, cluster: &str) -> ClusterId {
    ClusterId::at(place, cluster)
}

/// The tests' configuration in `region` (each test its own: moto keeps target groups per
/// region), through a recording proxy.
async fn proxied(region: &str) -> (AwsProxy, aws_config::SdkConfig) {
    let proxy = AwsProxy::start(&shared().endpoint())
        .await
        .expect("starting the proxy");
    let base = shared()
        .sdk_config()
        .to_builder()
        .region(aws_config::Region::new(region.to_string()))
        .build();
    let config = proxy.sdk_config(&base);
    (proxy, config)
}

fn count(calls: &[AwsCall], operation: &str) -> usize {
    calls.iter().filter(|c| c.operation == operation).count()
}

/// An instance of the cluster with two more addresses on its network interface (its pods'),
/// and what EC2 says of it.
async fn instance_with_pods(
    ec2: &aws_sdk_ec2::Client,
    zone: &str,
) -> (String, Vec<String>, String) {
    let image = any_image(ec2).await.unwrap();
    let launched = launch(ec2, &image, &Launch::spot("blue").zone(zone))
        .await
        .unwrap();
    let described = ec2
        .describe_instances()
        .instance_ids(&launched.id)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    let eni = instance.network_interfaces()[0]
        .network_interface_id()
        .unwrap()
        .to_string();
    let vpc = instance.vpc_id().unwrap().to_string();
    ec2.assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .unwrap();
    let facts = Ec2Directory::new(ec2.clone())
        .describe(&Default::default(), std::slice::from_ref(&launched.id))
        .await
        .unwrap();
    let addresses = facts[&launched.id].addresses.clone();
    (launched.id, addresses, vpc)
}

/// A target group of `kind`, tagged with `tags`.
async fn group(elb: &Client, vpc: &str, kind: TargetTypeEnum, tags: &[(&str, &str)]) -> String {
    let mut request = elb
        .create_target_group()
        .name(unique_name("tg"))
        .protocol(ProtocolEnum::Http)
        .port(80)
        .vpc_id(vpc)
        .target_type(kind);
    for (key, value) in tags {
        request = request.tags(Tag::builder().key(*key).value(*value).build());
    }
    let out = request.send().await.unwrap();
    out.target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string()
}

async fn register(elb: &Client, arn: &str, targets: &[(&str, i32)]) {
    let targets: Vec<TargetDescription> = targets
        .iter()
        .map(|(id, port)| TargetDescription::builder().id(*id).port(*port).build())
        .collect();
    elb.register_targets()
        .target_group_arn(arn)
        .set_targets(Some(targets))
        .send()
        .await
        .unwrap();
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::at(chrono::Utc::now()))
}

#[test]
fn a_doomed_instance_and_its_pods_leave_only_their_clusters_target_groups() {
    runtime().block_on(async {
        let (proxy, config) = proxied("eu-west-3").await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let elb = Client::new(&config);
        let (doomed_id, addresses, vpc) = instance_with_pods(&ec2, "eu-west-3a").await;
        // moto draws each secondary address at random in the subnet, unique on its interface
        // only; EC2 never gives one address to two interfaces: a draw that did is drawn again.
        let (staying_id, staying_addresses, _) = loop {
            let staying = instance_with_pods(&ec2, "eu-west-3a").await;
            if staying.1.iter().all(|a| !addresses.contains(a)) {
                break staying;
            }
        };
        assert_eq!(
            addresses.len(),
            3,
            "primary and two secondary: {addresses:?}"
        );
        let pod_ip = addresses[1].as_str();
        let staying_pod_ip = staying_addresses[1].as_str();
        let blue = [("elbv2.k8s.aws/cluster", "blue")];
        let blue_instances = group(&elb, &vpc, TargetTypeEnum::Instance, &blue).await;
        let blue_pods = group(&elb, &vpc, TargetTypeEnum::Ip, &blue).await;
        let green = [("elbv2.k8s.aws/cluster", "green")];
        let green_instances = group(&elb, &vpc, TargetTypeEnum::Instance, &green).await;
        let untagged = group(&elb, &vpc, TargetTypeEnum::Instance, &[]).await;
        // Hundreds of the account's groups that are not the cluster's.
        for _ in 0..250 {
            group(&elb, &vpc, TargetTypeEnum::Ip, &[("team", "web")]).await;
        }
        for arn in [&blue_instances, &green_instances, &untagged] {
            register(&elb, arn, &[(&doomed_id, 30080), (&staying_id, 30080)]).await;
        }
        register(&elb, &blue_pods, &[(pod_ip, 8080), (staying_pod_ip, 8080)]).await;
        proxy.reset();

        let clock = clock();
        let targets = ElbTargets::from_conf(&config, clock.clone());
        let doomed = [Doomed::new(doomed_id.clone(), addresses.clone())];
        let place = Place::default();
        let done = targets
            .deregister(&key(&place, "blue"), &doomed, &[])
            .await
            .unwrap();
        let calls = proxy.calls();
        assert_eq!(done.arns.len(), 2, "{done:?}");
        let blue_arns = [blue_instances.clone(), blue_pods.clone()].into();
        assert_eq!(done.left[&doomed_id], blue_arns);
        assert!(done.failed.is_empty(), "{done:?}");
        // Economy: the blue groups found by their tag in one call, whatever the account holds;
        // each blue group's targets once, one deregistration per blue group.
        assert_eq!(count(&calls, "GetResources"), 1, "{calls:#?}");
        assert_eq!(count(&calls, "DescribeTargetGroups"), 0);
        assert_eq!(count(&calls, "DescribeTags"), 0);
        assert_eq!(count(&calls, "DescribeTargetHealth"), 2);
        assert_eq!(count(&calls, "DeregisterTargets"), 2);
        assert_eq!((done.describes, done.deregisters), (3, 2));

        // Only the doomed instance, only from its cluster's groups.
        assert_eq!(
            registered(&elb, &blue_instances).await,
            vec![staying_id.clone()]
        );
        assert_eq!(
            registered(&elb, &blue_pods).await,
            vec![staying_pod_ip.to_string()]
        );
        let mut both = vec![doomed_id.clone(), staying_id.clone()];
        both.sort();
        for other in [&green_instances, &untagged] {
            assert_eq!(registered(&elb, other).await, both);
        }

        // The next batch, seconds later: groups and targets as read (less what left), no call;
        // nothing is left to deregister.
        proxy.reset();
        let again = targets
            .deregister(&key(&place, "blue"), &doomed, &[])
            .await
            .unwrap();
        assert!(proxy.calls().is_empty(), "{:#?}", proxy.calls());
        assert!(again.left.is_empty(), "{again:?}");
        // The staying instance, doomed in turn 15 s later: the targets are read again, the
        // groups not.
        clock.advance(forewarn::adapters::elb::TARGETS_FOR);
        let next = [Doomed::new(staying_id.clone(), staying_addresses.clone())];
        let done = targets.deregister(&key(&place, "blue"), &next, &[]).await;
        let done = done.unwrap();
        let calls = proxy.calls();
        assert_eq!(count(&calls, "GetResources"), 0, "{calls:#?}");
        assert_eq!(count(&calls, "DescribeTargetHealth"), 2);
        assert_eq!(count(&calls, "DeregisterTargets"), 2);
        assert_eq!(done.left[&staying_id].len(), 2, "{done:?}");
        assert!(registered(&elb, &blue_instances).await.is_empty());

        // A minute on, the round uses the groups as known and finds them again in the
        // background: it makes no call of discovery itself.
        proxy.reset();
        clock.advance(forewarn::adapters::elb::GROUPS_FOR);
        let done = targets.deregister(&key(&place, "blue"), &next, &[]).await;
        let done = done.unwrap();
        assert_eq!((done.arns.len(), done.describes), (2, 2), "{done:?}");
        for _ in 0..100 {
            if count(&proxy.calls(), "GetResources") == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(count(&proxy.calls(), "GetResources"), 1, "found again");

        // Another execution environment, cold, given the groups the last round knew (through
        // the pool store): its round finds none itself.
        let cold = ElbTargets::from_conf(&config, clock.clone());
        let seeded = cold
            .deregister(&key(&place, "blue"), &next, &done.arns)
            .await;
        let seeded = seeded.unwrap();
        assert_eq!((seeded.arns.len(), seeded.describes), (2, 2), "{seeded:?}");
    });
}

/// A group deleted since it was found is no failure: it is forgotten at once.
#[test]
fn a_deleted_group_is_forgotten_not_failed() {
    runtime().block_on(async {
        let (_proxy, config) = proxied("eu-north-1").await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let elb = Client::new(&config);
        let (doomed_id, addresses, vpc) = instance_with_pods(&ec2, "eu-north-1a").await;
        let blue = [("elbv2.k8s.aws/cluster", "blue")];
        let kept = group(&elb, &vpc, TargetTypeEnum::Instance, &blue).await;
        let deleted = group(&elb, &vpc, TargetTypeEnum::Instance, &blue).await;
        let clock = clock();
        let targets = ElbTargets::from_conf(&config, clock.clone());
        let doomed = [Doomed::new(doomed_id, addresses)];
        let place = Place::default();
        let done = targets.deregister(&key(&place, "blue"), &doomed, &[]).await;
        assert_eq!(done.unwrap().arns.len(), 2);
        (elb.delete_target_group().target_group_arn(&deleted))
            .send()
            .await
            .unwrap();
        clock.advance(forewarn::adapters::elb::TARGETS_FOR);
        let done = targets.deregister(&key(&place, "blue"), &doomed, &[]).await;
        assert!(done.unwrap().failed.is_empty());
        let done = targets.deregister(&key(&place, "blue"), &doomed, &[]).await;
        assert_eq!(done.unwrap().arns, [kept]);
    });
}

#[test]
fn a_throttled_deregistration_names_its_group_and_the_others_still_go() {
    runtime().block_on(async {
        let (proxy, config) = proxied("ap-south-1").await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let elb = Client::new(&config);
        let (doomed_id, addresses, vpc) = instance_with_pods(&ec2, "ap-south-1a").await;
        let blue = [("elbv2.k8s.aws/cluster", "blue")];
        let instances = group(&elb, &vpc, TargetTypeEnum::Instance, &blue).await;
        register(&elb, &instances, &[(&doomed_id, 30080)]).await;
        // Every attempt of the SDK throttled.
        proxy.inject(AwsFault::operation(
            "elasticloadbalancing",
            "DeregisterTargets",
            FaultKind::Throttle,
            100,
        ));
        let targets = ElbTargets::from_conf(&config, clock());
        let doomed = [Doomed::new(doomed_id.clone(), addresses)];
        let done = targets
            .deregister(&key(&Place::default(), "blue"), &doomed, &[])
            .await
            .unwrap();
        assert_eq!(done.failed.len(), 1, "{done:?}");
        assert!(done.failed[0].starts_with(&instances), "{done:?}");
        assert!(done.failed[0].contains("Throttling"), "{done:?}");
        assert!(done.throttled);
        assert!(done.left.is_empty());
        let outcome = &done.outcomes(&doomed, chrono::Utc::now())[&doomed_id];
        assert!(outcome.note(&doomed_id).contains("not deregistered from"));
        assert_eq!(registered(&elb, &instances).await, vec![doomed_id]);
        // The groups themselves could not be found: an error naming the call.
        proxy.inject(AwsFault::operation(
            "tagging",
            "GetResources",
            FaultKind::Status(500),
            100,
        ));
        let fresh = ElbTargets::from_conf(&config, clock());
        let e = fresh
            .deregister(&key(&Place::default(), "blue"), &doomed, &[])
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("tag:GetResources"), "{e}");
    });
}

/// A discovery cut short (its second page refused) keeps its first page: the next round takes
/// the doomed instance off the groups found so far without waiting for a discovery.
#[test]
fn a_discovery_cut_short_keeps_the_groups_it_found() {
    runtime().block_on(async {
        let (proxy, config) = proxied("sa-east-1").await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let elb = Client::new(&config);
        let (doomed_id, addresses, vpc) = instance_with_pods(&ec2, "sa-east-1a").await;
        let paged = [("elbv2.k8s.aws/cluster", "paged")];
        let mut arns = Vec::new();
        // More of the cluster's groups than one page holds (100).
        for _ in 0..105 {
            arns.push(group(&elb, &vpc, TargetTypeEnum::Instance, &paged).await);
        }
        for arn in &arns {
            register(&elb, arn, &[(&doomed_id, 30080)]).await;
        }
        proxy.inject(
            AwsFault::operation("tagging", "GetResources", FaultKind::Status(500), 100)
                .naming("PaginationToken"),
        );
        let targets = ElbTargets::from_conf(&config, clock());
        let doomed = [Doomed::new(doomed_id.clone(), addresses)];
        let place = Place::default();
        let e = targets
            .deregister(&key(&place, "paged"), &doomed, &[])
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("tag:GetResources"), "{e}");
        proxy.reset();
        let done = targets
            .deregister(&key(&place, "paged"), &doomed, &[])
            .await
            .unwrap();
        // The first page's groups (moto's page holds 99 or 100 of them), not the others.
        let first_page = done.arns.len();
        assert!((90..105).contains(&first_page), "{first_page}");
        assert_eq!(done.left[&doomed_id].len(), first_page);
        assert_eq!(done.deregisters, first_page);
    });
}

/// More doomed targets in a group than one call takes (the 250 pods of sixteen delegated /28
/// prefixes): they leave in calls of 200 at most, as the Load Balancer Controller sends them.
#[test]
fn many_doomed_targets_leave_in_calls_of_two_hundred() {
    runtime().block_on(async {
        let (proxy, config) = proxied("ca-central-1").await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let elb = Client::new(&config);
        let (doomed_id, _, vpc) = instance_with_pods(&ec2, "ca-central-1a").await;
        let pods = group(
            &elb,
            &vpc,
            TargetTypeEnum::Ip,
            &[("elbv2.k8s.aws/cluster", "wide")],
        )
        .await;
        let addresses: Vec<String> = (1..=250).map(|i| format!("172.31.200.{i}")).collect();
        let targets: Vec<(&str, i32)> = addresses.iter().map(|a| (a.as_str(), 8080)).collect();
        register(&elb, &pods, &targets).await;
        proxy.reset();
        let prefixes = (0..16)
            .map(|k| format!("172.31.200.{}/28", k * 16))
            .collect();
        let doomed = [Doomed::new(doomed_id.clone(), prefixes)];
        let done = ElbTargets::from_conf(&config, clock())
            .deregister(&key(&Place::default(), "wide"), &doomed, &[])
            .await
            .unwrap();
        assert!(done.failed.is_empty(), "{done:?}");
        assert_eq!(done.left[&doomed_id], [pods.clone()].into());
        assert_eq!(count(&proxy.calls(), "DeregisterTargets"), 2);
        assert_eq!(done.deregisters, 2);
        assert!(registered(&elb, &pods).await.is_empty());
    });
}
