//! How every request to the API server goes out: after the client's rate limit
//! ([`rate_limit`]: a token bucket with two lanes, owned by the [`ClusterClient`] that makes the
//! request), and retried with the one backoff while its answer says "try again" or, within work
//! that has a deadline, while the failure may pass by itself ([`retry`]). What an answer says
//! (its status, a `Retry-After`) is read in `super::error`, with the adapter's other errors.
//!
//! [`ClusterClient`]: super::ClusterClient

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub(crate) mod rate_limit;
pub(crate) mod retry;

/// The name forewarn uses as field manager, Event reporting controller and RBAC group.
pub const FIELD_MANAGER: &str = "forewarn";

/// The namespace (`default` when unset) and the name of an object.
pub fn ns_name(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}
