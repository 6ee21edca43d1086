//! The admission chain of a create (src/chain): API defaults, the ServiceAccount, Priority and
//! DefaultTolerationSeconds plugins, mutating webhooks, PodSecurity, ValidatingAdmissionPolicy
//! and validating webhooks, in the real server's order, through the real kube client.

use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube_fake::{KubeFake, Webhook};
use serde_json::{Value, json};

fn pods(fake: &KubeFake, ns: &str) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    Api::namespaced_with(fake.client(), ns, &resource)
}

fn pod(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name}, "spec": spec}))
    .unwrap()
}

fn bare(name: &str) -> DynamicObject {
    pod(
        name,
        json!({"containers": [{"name": "app", "image": "nginx:1.27"}]}),
    )
}

/// A pod the restricted level admits.
fn compliant(name: &str) -> DynamicObject {
    pod(
        name,
        json!({"securityContext": {"runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "nginx:1.27",
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}}}]}),
    )
}

fn namespace(fake: &KubeFake, name: &str, labels: Value) {
    fake.insert(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}}));
}

async fn refused(api: &Api<DynamicObject>, obj: &DynamicObject) -> (u16, String, String) {
    match api.create(&PostParams::default(), obj).await {
        Err(kube::Error::Api(s)) => (s.code, s.reason, s.message),
        other => panic!("admitted: {other:?}"),
    }
}

async fn admitted(api: &Api<DynamicObject>, obj: &DynamicObject) -> Value {
    let created = api
        .create(&PostParams::default(), obj)
        .await
        .expect("admitted");
    serde_json::to_value(created).unwrap()
}

#[tokio::test]
async fn a_dry_run_returns_the_defaulted_and_mutated_pod_and_stores_nothing() {
    let fake = KubeFake::start().await;
    let api = pods(&fake, "web");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let obj = pod(
        "p",
        json!({"initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "nginx:1.27",
            "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}}]}),
    );
    let out = serde_json::to_value(api.create(&dry, &obj).await.unwrap()).unwrap();
    let spec = &out["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["securityContext"], json!({}));
    let app = &spec["containers"][0];
    assert_eq!(app["imagePullPolicy"], "IfNotPresent");
    assert_eq!(spec["initContainers"][0]["imagePullPolicy"], "Always");
    assert_eq!(app["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(app["terminationMessagePolicy"], "File");
    assert_eq!(app["ports"][0]["protocol"], "TCP");
    assert_eq!(app["resources"]["requests"]["cpu"], "1");
    // ServiceAccount: the default account and its projected token, in every container.
    assert_eq!(spec["serviceAccountName"], "default");
    assert_eq!(
        spec["serviceAccount"], "default",
        "the deprecated field, as v1 shows it"
    );
    let volume = &spec["volumes"][0];
    let volume_name = volume["name"].as_str().unwrap();
    assert!(volume_name.starts_with("kube-api-access-") && volume_name.len() == 21);
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3607
    );
    assert_eq!(
        volume["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt"
    );
    for c in [app, &spec["initContainers"][0]] {
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": volume_name, "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
    }
    // Priority and DefaultTolerationSeconds.
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );
    assert!(fake.get("v1", "Pod", Some("web"), "p").is_none());
    // Stored for real, the same.
    let stored = admitted(&api, &obj).await;
    assert_eq!(stored["spec"]["tolerations"], spec["tolerations"]);
}

/// A pod whose one container has `resources`.
fn with_resources(name: &str, resources: Value) -> DynamicObject {
    pod(
        name,
        json!({"containers": [{"name": "trainer", "image": "trainer:1", "resources": resources}]}),
    )
}

#[tokio::test]
async fn a_gpu_request_without_an_equal_limit_is_refused_as_the_real_server_does() {
    let fake = KubeFake::start().await;
    let api = pods(&fake, "ml");
    let (code, reason, message) = refused(
        &api,
        &with_resources(
            "no-limit",
            json!({"requests": {"nvidia.com/gpu": "8", "cpu": "4"}}),
        ),
    )
    .await;
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "Pod \"no-limit\" is invalid: spec.containers[0].resources.limits: Required value: \
         Limit must be set for non overcommitable resources"
    );
    let (code, _, message) = refused(
        &api,
        &with_resources(
            "unequal",
            json!({"requests": {"aws.amazon.com/neuron": "1"},
                   "limits": {"aws.amazon.com/neuron": "2"}}),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Pod \"unequal\" is invalid: spec.containers[0].resources.requests: Invalid value: \
         \"1\": must be equal to aws.amazon.com/neuron limit of 2"
    );
    // A dry run is refused alike, and nothing is stored.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let obj = with_resources("no-limit", json!({"requests": {"nvidia.com/gpu": "1"}}));
    assert!(matches!(
        api.create(&dry, &obj).await,
        Err(kube::Error::Api(s)) if s.code == 422
    ));
    assert!(fake.get("v1", "Pod", Some("ml"), "no-limit").is_none());
    assert!(fake.get("v1", "Pod", Some("ml"), "unequal").is_none());
}

#[tokio::test]
async fn a_gpu_limit_alone_is_admitted_with_its_request_defaulted_to_it() {
    let fake = KubeFake::start().await;
    let api = pods(&fake, "ml");
    let created = admitted(
        &api,
        &with_resources(
            "trainer",
            json!({"limits": {"nvidia.com/gpu": "8", "memory": "64Gi"},
                   "requests": {"cpu": "4", "memory": "32Gi"}}),
        ),
    )
    .await;
    assert_eq!(
        created["spec"]["containers"][0]["resources"],
        json!({"limits": {"nvidia.com/gpu": "8", "memory": "64Gi"},
               "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "8"}}),
        "the GPU limit copied to the request; memory keeps its own lower request"
    );
    // Both stated and equal, in another spelling of the same quantity: admitted.
    admitted(
        &api,
        &with_resources(
            "both",
            json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1000m"}}),
        ),
    )
    .await;
}

#[tokio::test]
async fn service_accounts_must_exist_and_may_opt_out_of_the_token() {
    let fake = KubeFake::start().await;
    let api = pods(&fake, "web");
    let mut named = bare("named");
    named.data["spec"]["serviceAccountName"] = json!("builder");
    let (code, _, message) = refused(&api, &named).await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "pods \"named\" is forbidden: error looking up service account web/builder: serviceaccount \"builder\" not found"
    );
    fake.insert(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "builder", "namespace": "web"},
        "automountServiceAccountToken": false}));
    let out = admitted(&api, &named).await;
    assert!(out["spec"].get("volumes").is_none());
    let mut opted_out = bare("opted-out");
    opted_out.data["spec"]["automountServiceAccountToken"] = json!(false);
    let out = admitted(&api, &opted_out).await;
    assert!(out["spec"].get("volumes").is_none());
}

#[tokio::test]
async fn priority_comes_from_the_class_and_an_unknown_or_contradicting_one_is_refused() {
    let fake = KubeFake::start().await;
    fake.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "placeholder"}, "value": -1, "preemptionPolicy": "Never"}),
    );
    let api = pods(&fake, "web");
    let mut p = bare("p");
    p.data["spec"]["priorityClassName"] = json!("placeholder");
    let out = admitted(&api, &p).await;
    assert_eq!(out["spec"]["priority"], -1);
    assert_eq!(out["spec"]["preemptionPolicy"], "Never");

    let mut unknown = bare("unknown");
    unknown.data["spec"]["priorityClassName"] = json!("nope");
    let (code, reason, message) = refused(&api, &unknown).await;
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "pods \"unknown\" is forbidden: no PriorityClass with name nope was found"
    );
    let mut stated = bare("stated");
    stated.data["spec"]["priority"] = json!(5);
    assert_eq!(
        refused(&api, &stated).await.2,
        "pods \"stated\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"
    );
    let mut critical = bare("critical");
    critical.data["spec"]["priorityClassName"] = json!("system-node-critical");
    assert_eq!(
        admitted(&api, &critical).await["spec"]["priority"],
        2_000_001_000
    );
}

#[tokio::test]
async fn a_restricted_namespace_refuses_a_bare_pod_with_the_plugins_message() {
    let fake = KubeFake::start().await;
    namespace(
        &fake,
        "secure",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    );
    let api = pods(&fake, "secure");
    let (code, reason, message) = refused(&api, &bare("bare")).await;
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "pods \"bare\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"app\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    admitted(&api, &compliant("ok")).await;
    // Another namespace, not stored, is privileged.
    admitted(&pods(&fake, "web"), &bare("bare")).await;
}

#[tokio::test]
async fn the_baseline_level_refuses_host_access_and_admits_a_bare_pod() {
    let fake = KubeFake::start().await;
    namespace(
        &fake,
        "base",
        json!({"pod-security.kubernetes.io/enforce": "baseline"}),
    );
    let api = pods(&fake, "base");
    admitted(&api, &bare("bare")).await;
    let host = pod(
        "host",
        json!({"hostNetwork": true, "containers": [{"name": "app", "image": "nginx:1.27",
            "ports": [{"containerPort": 8080}],
            "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN"]}}}]}),
    );
    // hostNetwork defaults each port's hostPort to its containerPort.
    assert_eq!(
        refused(&api, &host).await.2,
        "pods \"host\" is forbidden: violates PodSecurity \"baseline:latest\": \
         non-default capabilities (container \"app\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), \
         host namespaces (hostNetwork=true), \
         hostPort (container \"app\" uses hostPort 8080), \
         privileged (container \"app\" must not set securityContext.privileged=true)"
    );
}

#[tokio::test]
async fn a_version_label_picks_the_checks_of_that_version() {
    let fake = KubeFake::start().await;
    namespace(
        &fake,
        "old",
        json!({"pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "v1.22"}),
    );
    namespace(
        &fake,
        "new",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    );
    let mut root = compliant("root");
    root.data["spec"]["securityContext"]["runAsUser"] = json!(0);
    // runAsUser=0 is refused from 1.23 on.
    admitted(&pods(&fake, "old"), &root).await;
    assert_eq!(
        refused(&pods(&fake, "new"), &root).await.2,
        "pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": \
         runAsUser=0 (pod must not set runAsUser=0)"
    );
}

#[tokio::test]
async fn a_mutating_webhooks_sidecar_is_checked_by_pod_security_afterwards() {
    let fake = KubeFake::builder()
        .mutating_webhook(
            Webhook::patch(
                "mutate.kyverno.svc",
                json!([
                    {"op": "add", "path": "/metadata/labels",
                        "value": {"team": "forewarn"}},
                    {"op": "add", "path": "/spec/containers/-",
                        "value": {"name": "sidecar", "image": "envoy:1.30"}},
                ]),
            )
            .namespace("forewarn"),
        )
        .start()
        .await;
    // Elsewhere the webhook does not apply.
    let out = admitted(&pods(&fake, "web"), &bare("elsewhere")).await;
    assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);

    let out = admitted(&pods(&fake, "forewarn"), &bare("mutated")).await;
    assert_eq!(out["metadata"]["labels"]["team"], "forewarn");
    let sidecar = &out["spec"]["containers"][1];
    assert_eq!(sidecar["name"], "sidecar");
    // Added after the ServiceAccount plugin: no token mount, no API defaults.
    assert!(sidecar.get("volumeMounts").is_none());
    assert!(sidecar.get("imagePullPolicy").is_none());

    namespace(
        &fake,
        "forewarn",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    );
    let message = refused(&pods(&fake, "forewarn"), &compliant("caged"))
        .await
        .2;
    assert_eq!(
        message,
        "pods \"caged\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"sidecar\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"sidecar\" must set securityContext.capabilities.drop=[\"ALL\"])"
    );
}

#[tokio::test]
async fn a_validating_webhook_denies_as_the_dispatcher_answers() {
    let fake = KubeFake::start().await;
    fake.add_validating_webhook(Webhook::deny(
        "validation.gatekeeper.sh",
        "[no-latest] images must be pinned",
    ));
    let (code, reason, message) = refused(&pods(&fake, "web"), &bare("p")).await;
    assert_eq!(code, 400);
    assert_eq!(reason, "");
    assert_eq!(
        message,
        "admission webhook \"validation.gatekeeper.sh\" denied the request: [no-latest] images must be pinned"
    );
    fake.clear_webhooks();
    fake.add_validating_webhook(
        Webhook::deny("deny.example.com", "no")
            .code(403)
            .reason("Forbidden")
            .namespace("other"),
    );
    admitted(&pods(&fake, "web"), &bare("p")).await;
    let (code, reason, _) = refused(&pods(&fake, "other"), &bare("p")).await;
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn a_validating_admission_policy_sees_the_mutated_pod() {
    let fake = KubeFake::builder().admission_policies().start().await;
    fake.insert(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "no-account"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "!has(object.spec.serviceAccountName)",
                "message": "no service account"}]
        }
    }));
    fake.insert(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "no-account-binding"},
        "spec": {"policyName": "no-account", "validationActions": ["Deny"]}
    }));
    // The pod states no account, but the ServiceAccount plugin named `default` before.
    let (code, _, message) = refused(&pods(&fake, "web"), &bare("p")).await;
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "ValidatingAdmissionPolicy 'no-account' with binding 'no-account-binding' denied request: no service account"
    );
}

#[tokio::test]
async fn pod_security_checks_an_update_only_when_it_changes_the_containers() {
    let fake = KubeFake::start().await;
    let api = pods(&fake, "secure");
    admitted(&api, &bare("p")).await;
    namespace(
        &fake,
        "secure",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    );
    let merge = kube::api::PatchParams::default();
    api.patch(
        "p",
        &merge,
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .expect("a label change is not checked");
    let image = json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}});
    match api
        .patch("p", &merge, &kube::api::Patch::Strategic(image))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(s.message.starts_with(
                "pods \"p\" is forbidden: violates PodSecurity \"restricted:latest\": "
            ));
        }
        other => panic!("admitted: {other:?}"),
    }
}
