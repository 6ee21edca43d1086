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
