//! A Kubernetes fake set up as a real cluster forewarn was deployed to has it: the objects of
//! the project's own `infra/k8s/` manifests that admission reads — forewarn's Namespace with its
//! Pod Security level, the placeholders' PriorityClass, the admission policies and their
//! bindings (when the fake serves them) — so that every write the tests make through the fake
//! goes through the API server's admission chain as it would there.

use std::path::Path;

use kube_fake::KubeFake;
use serde_json::Value;

/// The manifests whose objects admission reads.
const MANIFESTS: [&str; 3] = ["rbac.yaml", "placeholders.yaml", "node-writes.yaml"];

/// The kinds of those manifests admission reads (RBAC is not modelled by the fake).
const ADMISSION_KINDS: [&str; 4] = [
    "Namespace",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// The objects of `infra/k8s/<file>`, in the file's order.
pub fn manifest(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../infra/k8s")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Stores in `fake` the objects of forewarn's manifests that admission reads, each only where
/// the fake serves its kind (the admission policies with
/// [`kube_fake::KubeFakeBuilder::admission_policies`]); answers how many were stored.
pub fn as_deployed(fake: &KubeFake) -> usize {
    let mut stored = 0;
    for file in MANIFESTS {
        for object in manifest(file) {
            let kind = object["kind"].as_str().unwrap_or_default();
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            if ADMISSION_KINDS.contains(&kind) && fake.serves(api_version, kind) {
                fake.insert(object);
                stored += 1;
            }
        }
    }
    stored
}

/// The handler's Kubernetes group (fixed: the stack's access entries and infra/k8s/ name it).
pub const HANDLER_GROUP: &str = "forewarn-handler";
/// The sweeper's Kubernetes group (fixed: the stack's access entries and infra/k8s/ name it).
pub const SWEEPER_GROUP: &str = "forewarn-sweeper";

/// A fake as a cluster forewarn was deployed to: it serves and enforces admission policies, and
/// holds the objects of forewarn's manifests admission reads ([`as_deployed`]).
pub async fn deployed() -> KubeFake {
    let fake = KubeFake::builder().admission_policies().start().await;
    as_deployed(&fake);
    fake
}

/// The kube configuration of a client of `fake` that sends as `group` (impersonated: the only
/// identity the fake knows), as a function's IAM role mapped to that group by its access entry.
pub fn config_as(fake: &KubeFake, group: &str) -> kube::Config {
    let mut config = fake.config();
    config.auth_info.impersonate = Some(format!("arn:aws:sts::123456789012:assumed-role/{group}"));
    config.auth_info.impersonate_groups = Some(vec![group.to_string()]);
    config
}

/// A client of `fake` that sends as `group` ([`config_as`]).
pub fn client_as(fake: &KubeFake, group: &str) -> kube::Client {
    kube::Client::try_from(config_as(fake, group)).expect("a client of the fake")
}
