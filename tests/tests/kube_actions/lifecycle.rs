//! Auto Scaling lifecycle actions: a termination hook completed after the drain (and not after
//! a failure), launch hooks completed once the node has joined and is Ready (or left to their
//! timeout), and CompleteLifecycleAction against a stub of the Auto Scaling API.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use forewarn::adapters::kube::KubeExecutor;
use forewarn::domain::config::Action;
use forewarn::domain::event::{EventKind, LifecycleAction};
use forewarn::domain::fixtures::pod_object;
use forewarn::ports::{LifecycleCompleter, Pass, PortError};
use kube_fake::{Fault, Method};
use serde_json::json;

use crate::support::{
    ID, NODE, OTHER_ID, OTHER_NODE, World, assert_said, event, execute_passes, node, passes, paths,
    serve,
};

#[derive(Default)]
pub(crate) struct RecordingLifecycle {
    pub(crate) calls: Mutex<Vec<(String, String)>>,
    pub(crate) heartbeats: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl LifecycleCompleter for RecordingLifecycle {
    async fn complete(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, PortError> {
        self.calls
            .lock()
            .unwrap()
            .push((instance_id.to_string(), action.token.clone()));
        Ok(true)
    }

    async fn heartbeat(
        &self,
        instance_id: &str,
        action: &LifecycleAction,
    ) -> Result<bool, PortError> {
        self.heartbeats
            .lock()
            .unwrap()
            .push((instance_id.to_string(), action.token.clone()));
        Ok(true)
    }
}

#[tokio::test]
async fn the_lifecycle_action_is_completed_after_the_drain_and_not_after_a_failure() {
    let w = World::plain().await;
    w.fake
        .insert(pod_object("default", "web-1", NODE, "web", "ReplicaSet"));
    let plan = w.plan(&event(EventKind::AsgTermination, "ev-asg")).await;
    assert!(plan.actions[0].complete_lifecycle.is_some());
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());

    // The API fails: the event comes back, the instance is not let go.
    w.fake.inject(
        Fault::new(500)
            .method(Method::GET)
            .path_contains("/api/v1/pods")
            .times(100),
    );
    assert!(execute_passes(&executor, &plan).await.is_err());
    assert!(lifecycle.calls.lock().unwrap().is_empty());

    w.fake.clear_faults();
    let results = execute_passes(&executor, &plan).await.unwrap();
    assert_eq!(
        *lifecycle.calls.lock().unwrap(),
        vec![(
            ID.to_string(),
            "168c6c3d-d370-48df-af77-8b8852e0806c".to_string()
        )]
    );
    assert!(w.pod("default", "web-1").is_none());
    assert!(
        results[0]
            .detail
            .contains("completed lifecycle action eks-demo-ng-1/forewarn-drain"),
        "{}",
        results[0].detail
    );

    // Without an Auto Scaling client, or in a dry run, it is only reported.
    let out = w.run(&plan).await;
    let hook = "eks-demo-ng-1/forewarn-drain";
    let not = format!("lifecycle action {hook} not completed: no Auto Scaling client configured");
    assert_said(&out, &not);
    let out = w.executor().dry_run(true);
    let out = passes(&out, &plan).await.unwrap().remove(0);
    assert_said(
        &out,
        &format!("would complete lifecycle action {hook} (CONTINUE)"),
    );
}

/// Launch hooks: the instance has no node yet when the plan is made; the node the kubelet
/// registers is read in every pass.
async fn launching() -> (World, Arc<RecordingLifecycle>, KubeExecutor) {
    let mut w = World::new().await;
    w.fake.insert(node(OTHER_NODE, OTHER_ID));
    // Short, so that the test's passes (100 ms apart) reach the deadline.
    w.config.launch_timeout = chrono::Duration::seconds(3);
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());
    (w, lifecycle, executor)
}

#[tokio::test]
async fn a_launch_hook_is_completed_once_the_node_has_joined_and_is_ready() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    let a = &plan.actions[0];
    assert_eq!(a.action, Action::None);
    assert_eq!(
        a.node.as_deref(),
        Some(NODE),
        "the name it will have: {a:?}"
    );
    assert!(a.complete_lifecycle.is_some(), "completed once Ready");
    assert_eq!(plan.kind, EventKind::AsgLaunch);

    // The kubelet registers the node after the first look (not Ready yet), and the node
    // becomes Ready after the third.
    let path = format!("/api/v1/nodes/{NODE}");
    let mut registering = node(NODE, ID);
    registering["status"]["conditions"] =
        json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]);
    w.fake.after_answer(Method::GET, &path, registering.clone());
    w.fake.after_answer(Method::GET, &path, registering);
    w.fake.after_answer(Method::GET, &path, node(NODE, ID));

    let first = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(first.result.pending, "{first:?}");
    assert!(
        first.result.detail.contains("no node of instance")
            && first
                .result
                .detail
                .ends_with(": looked at again in the next pass"),
        "{}",
        first.result.detail
    );
    assert!(lifecycle.calls.lock().unwrap().is_empty());
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    assert!(!out.result.pending);
    let ready = format!("; node/{NODE} runs the instance and is Ready; completed lifecycle action");
    assert!(out.result.detail.contains(&ready), "{out:?}");
    assert_eq!(
        *lifecycle.calls.lock().unwrap(),
        vec![(
            ID.to_string(),
            "168c6c3d-d370-48df-af77-8b8852e0806c".to_string()
        )]
    );
    assert!(
        !lifecycle.heartbeats.lock().unwrap().is_empty(),
        "kept alive while waiting"
    );
    // Only reads: a launch changes no node.
    for method in [Method::PATCH, Method::PUT, Method::DELETE] {
        assert!(paths(&w.fake.requests(), method).is_empty());
    }
    // Ready before any pass (a late event): completed in the first pass.
    let lifecycle = Arc::new(RecordingLifecycle::default());
    let executor = w.executor().with_lifecycle(lifecycle.clone());
    let out = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(!out.result.pending);
    assert_eq!(lifecycle.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_launch_hook_whose_node_never_joins_is_left_to_its_timeout() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    // A node of the planned name left by an earlier instance is not this instance's node.
    w.fake.insert(node(NODE, OTHER_ID));
    let out = passes(&executor, &plan).await.unwrap().remove(0);
    let detail = &out.result.detail;
    assert!(
        detail.contains(&format!("runs instance {OTHER_ID}")),
        "{detail}"
    );
    assert!(
        detail.ends_with(
            " by the deadline: the lifecycle action is left to the hook's own timeout and \
             default result"
        ),
        "{detail}"
    );
    assert!(
        lifecycle.calls.lock().unwrap().is_empty(),
        "never completed"
    );
    assert!(!lifecycle.heartbeats.lock().unwrap().is_empty());
    assert!(
        out.result.detail.contains("left to the hook's own timeout"),
        "{}",
        out.result.detail
    );
    // A dry run of a node not Ready says so and would not complete.
    let out = w
        .executor()
        .dry_run(true)
        .run(&plan, Pass::Cordon)
        .await
        .unwrap()
        .remove(0);
    assert!(!out.result.pending);
    let detail = &out.result.detail;
    assert!(!detail.contains("complete lifecycle action"), "{detail}");
}

#[tokio::test]
async fn a_launch_hook_of_a_control_plane_node_is_left_alone() {
    let (w, lifecycle, executor) = launching().await;
    let plan = w.plan(&event(EventKind::AsgLaunch, "ev-launch")).await;
    let mut cp = node(NODE, ID);
    cp["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    w.fake.insert(cp);
    let out = executor.run(&plan, Pass::Cordon).await.unwrap().remove(0);
    assert!(
        out.result
            .refused
            .as_deref()
            .unwrap()
            .contains("control-plane"),
        "{out:?}"
    );
    assert!(!out.result.pending);
    assert!(lifecycle.calls.lock().unwrap().is_empty());
}

/// An Auto Scaling Query API stub answering CompleteLifecycleAction as `answer` says; records
/// the form bodies.
async fn autoscaling_stub(
    answer: fn() -> (u16, &'static str),
) -> (aws_sdk_autoscaling::Client, Arc<Mutex<Vec<String>>>) {
    use axum::extract::State;

    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(
                move |State(bodies): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                    bodies.lock().unwrap().push(body);
                    let (status, xml) = answer();
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [("content-type", "text/xml")],
                        xml,
                    )
                },
            ),
        )
        .with_state(bodies.clone());
    let url = serve(app).await;
    let config = aws_sdk_autoscaling::Config::builder()
        .behavior_version(aws_sdk_autoscaling::config::BehaviorVersion::latest())
        .region(aws_sdk_autoscaling::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new(
            "AKID", "secret", None, None, "test",
        ))
        .build();
    (aws_sdk_autoscaling::Client::from_conf(config), bodies)
}

fn lifecycle_action() -> LifecycleAction {
    LifecycleAction {
        hook_name: "forewarn-drain".into(),
        asg_name: "eks-demo-ng-1".into(),
        token: "168c6c3d-d370-48df-af77-8b8852e0806c".into(),
        account: None,
        region: None,
    }
}

#[tokio::test]
async fn complete_lifecycle_action_continues_and_takes_no_active_action_as_done() {
    use forewarn::adapters::autoscaling::AsgLifecycle;

    let (client, bodies) = autoscaling_stub(|| (200, COMPLETED)).await;
    let asg = AsgLifecycle::from_client(client);
    assert!(asg.complete(ID, &lifecycle_action()).await.unwrap());
    let body = bodies.lock().unwrap()[0].clone();
    for part in [
        "Action=CompleteLifecycleAction",
        "AutoScalingGroupName=eks-demo-ng-1",
        "LifecycleHookName=forewarn-drain",
        "LifecycleActionResult=CONTINUE",
        "LifecycleActionToken=168c6c3d-d370-48df-af77-8b8852e0806c",
        &format!("InstanceId={ID}"),
    ] {
        assert!(body.contains(part), "{part} in {body}");
    }

    let (client, _) = autoscaling_stub(|| {
        (
            400,
            concat!(
                r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>"#,
                "<Type>Sender</Type><Code>ValidationError</Code>",
                "<Message>No active Lifecycle Action found with instance ID i-0a1b2c3d4e5f60001</Message>",
                "</Error><RequestId>r-2</RequestId></ErrorResponse>"
            ),
        )
    })
    .await;
    let completed = AsgLifecycle::from_client(client)
        .complete(ID, &lifecycle_action())
        .await
        .unwrap();
    assert!(
        !completed,
        "no active action: already completed, not an error"
    );

    let (client, _) = autoscaling_stub(|| {
        (
            400,
            concat!(
                r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>"#,
                "<Type>Sender</Type><Code>ValidationError</Code>",
                "<Message>1 validation error detected: Value at 'lifecycleHookName' failed to satisfy constraint</Message>",
                "</Error><RequestId>r-3</RequestId></ErrorResponse>"
            ),
        )
    })
    .await;
    let err = AsgLifecycle::from_client(client)
        .complete(ID, &lifecycle_action())
        .await
        .unwrap_err();
    assert_eq!(err.kind, forewarn::ports::FailureKind::Invalid);
    assert!(err.to_string().contains("ValidationError"), "{err}");
    assert!(
        err.to_string().contains("eks-demo-ng-1/forewarn-drain"),
        "{err}"
    );
    assert!(err.to_string().contains(ID), "{err}");
}

const COMPLETED: &str = concat!(
    r#"<CompleteLifecycleActionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">"#,
    "<CompleteLifecycleActionResult/>",
    "<ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>",
    "</CompleteLifecycleActionResponse>"
);
