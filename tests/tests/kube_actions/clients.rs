//! The adapter's clients: the node directory (nodes by name, at most one list) and EKS clients
//! carrying an IAM token made anew when it expires.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use forewarn::adapters::clock::ManualClock;
use forewarn::adapters::kube::{EksAccess, TOKEN_CACHE_LIFETIME, connect_eks};
use forewarn::ports::NodeDirectory;
use kube_fake::Method;
use serde_json::json;

use crate::support::{ID, NODE, World, assert_accepted, instance, node, serve};

#[tokio::test]
async fn the_directory_gets_nodes_by_name_and_lists_at_most_once() {
    let w = World::new().await;
    w.fake.insert(node(NODE, ID));
    // Custom name, found by providerID; instance-id name, found by name; a reused DNS name.
    w.fake
        .insert(node("worker-custom-1", "i-0a1b2c3d4e5f60002"));
    let mut by_id = node("i-0a1b2c3d4e5f60003.us-east-1.compute.internal", "x");
    by_id["spec"].as_object_mut().unwrap().remove("providerID");
    w.fake.insert(by_id);
    w.fake
        .insert(node("ip-10-0-1-14.ec2.internal", "i-0a1b2c3d4e5f69999"));
    let directory = w.clients.clone();

    let all_by_name = directory
        .nodes(&[instance(ID, NODE)], Default::default())
        .await
        .unwrap();
    assert_eq!(all_by_name.len(), 1);
    assert_eq!(all_by_name[0].name, NODE);
    assert_eq!(all_by_name[0].instance_id(), Some(ID));
    let requests = w.fake.requests();
    assert_eq!(requests.len(), 1, "one get, no list: {requests:?}");
    w.fake.clear_requests();

    let batch = [
        instance(ID, NODE),
        instance("i-0a1b2c3d4e5f60002", "ip-10-0-1-12.ec2.internal"),
        instance("i-0a1b2c3d4e5f60003", "ip-10-0-1-13.ec2.internal"),
        instance("i-0a1b2c3d4e5f60004", "ip-10-0-1-14.ec2.internal"),
    ];
    let found = directory.nodes(&batch, Default::default()).await.unwrap();
    let names: BTreeSet<&str> = found.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            NODE,
            "worker-custom-1",
            "i-0a1b2c3d4e5f60003.us-east-1.compute.internal"
        ])
    );
    let requests = w.fake.requests();
    let gets = requests
        .iter()
        .filter(|r| r.method == Method::GET && r.path.starts_with("/api/v1/nodes/"))
        .count();
    let lists = requests
        .iter()
        .filter(|r| r.method == Method::GET && r.path == "/api/v1/nodes")
        .count();
    assert_eq!((gets, lists), (4, 1));
    assert_accepted(&requests);
    assert!(
        directory
            .nodes(&[], Default::default())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A credentials provider that counts how often it is asked.
#[derive(Debug, Default, Clone)]
struct CountingCredentials {
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl aws_credential_types::provider::ProvideCredentials for CountingCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        aws_credential_types::provider::future::ProvideCredentials::ready(Ok(
            aws_credential_types::Credentials::new(
                "AKIDTEST",
                "secret",
                Some("session-token".into()),
                None,
                "test",
            ),
        ))
    }
}

#[tokio::test]
async fn eks_clients_carry_an_iam_token_made_anew_when_it_expires() {
    use axum::extract::State;
    use axum::http::HeaderMap;

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/version",
            axum::routing::get(
                |State(seen): State<Arc<Mutex<Vec<String>>>>, headers: HeaderMap| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push(auth);
                    axum::Json(json!({
                        "major": "1", "minor": "33", "gitVersion": "v1.33.0-eks-1",
                        "gitCommit": "x", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                        "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
                    }))
                },
            ),
        )
        .with_state(seen.clone());
    let url = serve(app).await;
    // The cluster as EKS describes it (its endpoint: the server above), reached with credentials
    // that count their calls, on a clock the test moves.
    let eks = forewarn_tests::eks::EksFake::at(&[("demo", &url)]).await;
    let credentials = CountingCredentials::default();
    let sdk = aws_config::SdkConfig::builder()
        .region(aws_types::region::Region::new("eu-west-1"))
        .credentials_provider(SharedCredentialsProvider::new(credentials.clone()))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let sdk = forewarn_tests::eks::with_eks(&sdk, &eks.url());
    let access = EksAccess {
        cluster: "demo".into(),
        region: None,
    };
    let clock = ManualClock::at(chrono::Utc::now());
    let clients = connect_eks(&access, &sdk, None).await.unwrap();
    let clients = clients.with_clock(clock.shared());
    // Counted from here: `DescribeCluster` signed with them too.
    let described = credentials.calls.load(std::sync::atomic::Ordering::SeqCst);
    let calls = || credentials.calls.load(std::sync::atomic::Ordering::SeqCst) - described;
    for _ in 0..2 {
        let version = clients
            .client()
            .await
            .unwrap()
            .apiserver_version()
            .await
            .unwrap();
        assert_eq!(version.git_version, "v1.33.0-eks-1");
    }
    assert_eq!(calls(), 1, "the token is cached");
    let auths = seen.lock().unwrap().clone();
    assert_eq!(auths.len(), 2);
    assert_eq!(auths[0], auths[1]);
    let token = auths[0].strip_prefix("Bearer ").expect("a bearer token");
    let presigned = forewarn::adapters::kube::url_from_token(token).unwrap();
    assert!(
        presigned.starts_with(
            "https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
        ),
        "{presigned}"
    );
    for part in [
        "X-Amz-Algorithm=AWS4-HMAC-SHA256",
        "X-Amz-Credential=AKIDTEST%2F",
        "%2Feu-west-1%2Fsts%2Faws4_request",
        "X-Amz-Expires=60",
        "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id",
        "X-Amz-Security-Token=session-token",
        "X-Amz-Signature=",
    ] {
        assert!(presigned.contains(part), "{part} in {presigned}");
    }

    // A token is used until its lifetime is over, and made anew on the next use after that.
    let version = || async { clients.client().await.unwrap().apiserver_version().await };
    clock.advance(TOKEN_CACHE_LIFETIME - Duration::from_secs(1));
    version().await.unwrap();
    assert_eq!(calls(), 1, "within its lifetime");
    clock.advance(Duration::from_secs(1));
    version().await.unwrap();
    assert_eq!(calls(), 2, "past its lifetime");
    assert_ne!(seen.lock().unwrap().last(), Some(&auths[0]), "a new token");
}
