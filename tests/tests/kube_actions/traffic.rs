//! Traffic first through the handler, on the fake cluster and moto's Elastic Load Balancing:
//! a pod behind a budget that refuses its eviction for minutes keeps its IP-mode target while
//! its instance stays (an AWS Health retirement two days ahead); a spot warning for the same
//! node takes it off at once, its instance going in two minutes. And a round entry forged in
//! the pool table (`0.0.0.0/0`, unsigned) takes nothing off.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_elasticloadbalancingv2::types::{ProtocolEnum, Tag, TargetDescription, TargetTypeEnum};
use chrono::Utc;
use forewarn::adapters::elb::ElbTargets;
use forewarn::app::pipeline::{DEREGISTER_BUDGET, Traffic};
use forewarn::domain::fixtures::{self, pdb_object, pod_object};
use forewarn::ports::Clock;
use serde_json::json;

use crate::support::{Continuations, ID, Instances, NODE, World, instance};
use forewarn_tests::elb::registered;

/// The pod's address, and another node's pod in the same group.
const POD_IP: &str = "10.0.0.5";
const OTHER_POD_IP: &str = "10.0.0.6";

/// An IP-mode target group of the cluster `demo` in a VPC of moto's, holding both pods.
async fn cluster_group(config: &aws_config::SdkConfig) -> String {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(config);
    let group = elb
        .create_target_group()
        .name(forewarn_tests::moto::unique_name("tg"))
        .protocol(ProtocolEnum::Http)
        .port(8080)
        .vpc_id(vpc)
        .target_type(TargetTypeEnum::Ip)
        .tags(
            Tag::builder()
                .key("elbv2.k8s.aws/cluster")
                .value("demo")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let arn = group.target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    let targets = [POD_IP, OTHER_POD_IP]
        .iter()
        .map(|ip| TargetDescription::builder().id(*ip).port(8080).build())
        .collect();
    elb.register_targets()
        .target_group_arn(&arn)
        .set_targets(Some(targets))
        .send()
        .await
        .unwrap();
    arn
}

/// An AWS Health scheduled retirement of this world's instance, starting in two days.
fn retirement(id: &str) -> String {
    let start = (Utc::now() + chrono::Duration::days(2))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let mut event = fixtures::event_json(
        "AWS Health Event",
        id,
        ID,
        &Utc::now().to_rfc3339(),
        fixtures::health_detail(&[ID], &start),
    );
    event["source"] = json!("aws.health");
    event.to_string()
}

/// A world's node behind cluster `demo`'s IP-mode target group in `region` (each test a region
/// of its own: a region's groups of one cluster are every test's), its pod `web-1` at [`POD_IP`],
/// and a handler that takes drains off the load balancers first, its continuations queued.
struct Behind {
    w: World,
    elb: aws_sdk_elasticloadbalancingv2::Client,
    group: String,
    queue: Arc<Continuations>,
    handler: forewarn::app::handler::Handler,
    _dir: tempfile::TempDir,
}

async fn behind(region: &str) -> Behind {
    let config = forewarn_tests::moto::shared()
        .sdk_config()
        .to_builder()
        .region(aws_config::Region::new(region.to_string()))
        .build();
    let group = cluster_group(&config).await;
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(&config);
    let w = World::plain().await;
    let mut pod = pod_object("default", "web-1", NODE, "web", "ReplicaSet");
    pod["status"]["podIP"] = json!(POD_IP);
    w.fake.insert(pod);
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(Continuations::default());
    let mut facts = instance(ID, NODE);
    facts.addresses = vec![POD_IP.to_string()];
    let handler = forewarn::app::handler::Handler {
        instances: Arc::new(Instances(BTreeMap::from([(ID.to_string(), facts)]))),
        traffic: Some(Traffic {
            balancers: Arc::new(ElbTargets::from_conf(&config, w.clock.shared())),
            budget: DEREGISTER_BUDGET,
        }),
        ..w.queued_handler(dir.path(), &queue, false)
    };
    Behind {
        w,
        elb,
        group,
        queue,
        handler,
        _dir: dir,
    }
}

#[test]
fn a_pod_its_budget_keeps_keeps_its_target_until_its_instance_goes_within_minutes() {
    forewarn_tests::moto::runtime().block_on(async {
        let Behind {
            w,
            elb,
            group,
            queue,
            handler,
            ..
        } = &behind("eu-south-1").await;
        // The only replica, behind a budget that never allows its eviction.
        w.fake.insert(pdb_object("default", "web", "web", 1));
        let next = || queue.sent.lock().unwrap().pop().map(|(_, body, _)| body);
        let invoke = |body: String| {
            let handler = &handler;
            async move {
                handler
                    .invoke(crate::continuations::sqs_event(&[body]), None)
                    .await
                    .unwrap()
            }
        };

        // The retirement: cordoned, then pass after pass the budget refuses the eviction, for
        // minutes. The pod's target stays in its group all along.
        invoke(retirement("ev-retire")).await;
        for _ in 0..4 {
            let pass = next().expect("the drain goes on while the budget refuses");
            let out = invoke(pass).await;
            w.clock.advance(Duration::from_secs(60));
            assert!(w.pod("default", "web-1").is_some(), "{:?}", out.reports);
            assert_eq!(
                registered(elb, group).await,
                vec![POD_IP.to_string(), OTHER_POD_IP.to_string()],
                "{:?}",
                out.reports
            );
        }

        // A spot warning for the same node: its instance goes in two minutes, and its pods with
        // it, whatever their budget says. The pod's target leaves before its first eviction;
        // the other node's pod keeps its.
        queue.sent.lock().unwrap().clear();
        let spot = fixtures::spot_json("ev-spot", ID, &w.clock.now().to_rfc3339());
        invoke(spot.to_string()).await;
        assert_eq!(registered(elb, group).await, vec![OTHER_POD_IP.to_string()]);
        let pass = next().expect("the spot drain's first pass");
        let out = invoke(pass).await;
        let note = out.reports[0].traffic.as_deref().unwrap_or_default();
        assert!(
            note.contains("out of 1 of the cluster's 1 target groups before the first eviction"),
            "{note}: {:#?}",
            out.reports
        );
    });
}

/// Issue 57, item 4: the rounds are kept in the pool table, which more principals may write
/// than forewarn. An entry forged there — unsigned, `0.0.0.0/0` for some instance of the
/// cluster, or signed but with that address — is refused by the round that claims it, and no
/// IP target of the cluster leaves; the real warning in the same round takes off its own pod's
/// target alone.
#[test]
fn a_forged_round_entry_takes_no_target_off() {
    forewarn_tests::moto::runtime().block_on(async {
        use forewarn::domain::clusters::ClusterId;
        use forewarn::domain::traffic::Doomed;
        let Behind {
            w,
            elb,
            group,
            queue,
            handler,
            ..
        } = &behind("eu-central-2").await;
        let spot = fixtures::spot_json("ev-spot", ID, &w.clock.now().to_rfc3339());
        let key = ClusterId::at(
            &forewarn::ports::Place::of("123456789012", "us-east-1"),
            "demo",
        );
        // What a writer of the table adds: unsigned, and signed with a key not forewarn's.
        let forged = |id: &str| Doomed {
            instance_id: id.into(),
            addresses: vec!["0.0.0.0/0".into()],
            signature: None,
        };
        let stranger = forewarn::domain::keys::ContinuationKey::new([3; 32]);
        let rounds = handler
            .store
            .traffic_rounds()
            .expect("the store shares rounds");
        rounds
            .offer(
                &key,
                &[
                    forged("i-0a1b2c3d4e5f6000a"),
                    forged("i-0a1b2c3d4e5f6000b")
                        .signed(&forewarn::domain::traffic::round_of(&key), &stranger),
                ],
                w.clock.now(),
            )
            .await
            .unwrap();
        let out = handler
            .invoke(crate::continuations::sqs_event(&[spot.to_string()]), None)
            .await
            .unwrap();
        let pass = queue
            .sent
            .lock()
            .unwrap()
            .pop()
            .map(|(_, body, _)| body)
            .expect("a drain pass");
        let out_pass = handler
            .invoke(crate::continuations::sqs_event(&[pass]), None)
            .await
            .unwrap();
        // The other node's pod keeps its target; this node's pod left.
        assert_eq!(
            registered(elb, group).await,
            vec![OTHER_POD_IP.to_string()],
            "{:#?} {:#?}",
            out.reports,
            out_pass.reports
        );
        // The forged entries were settled refused, saying why.
        let ids = ["i-0a1b2c3d4e5f6000a", "i-0a1b2c3d4e5f6000b"].map(String::from);
        let outcomes = rounds.outcomes(&key, &ids).await.unwrap();
        assert_eq!(outcomes.len(), 2, "{outcomes:#?}");
        for (id, outcome) in &outcomes {
            assert_eq!(outcome.left, 0, "{id}");
            let why = outcome.failed.join("; ");
            assert!(why.starts_with("refused: ") && why.contains(id), "{why}");
        }
    });
}
