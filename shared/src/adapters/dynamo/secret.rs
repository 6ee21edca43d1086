//! The continuation keys in a Secrets Manager secret (the settings' key secret: the stack's
//! `<stack>-continuation-key`), out of the pool table: whoever may read or scan
//! the table (an operator querying pools) learns nothing of the key, and the secret's resource
//! policy lets only forewarn's roles read it.
//!
//! The secret's current version (`AWSCURRENT`) is the current key, its previous version
//! (`AWSPREVIOUS`) the key before the last rotation: a rotation puts a new version, and Secrets
//! Manager moves the labels. Each version is JSON: `{"key_id": N, "key": "<base64 of 32
//! bytes>"}`; the version the stack generates has a random `secret` string instead of `key`,
//! and the key is that string's SHA-256.

use aws_sdk_secretsmanager::Client;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::adapters::aws::{CallError, OperationError, failure_kind};
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing};
use crate::ports::{BoxError, FailureKind, StoreError};

/// One version of the secret.
#[derive(Debug, Serialize, Deserialize)]
struct Version {
    key_id: KeyId,
    /// The key's bytes, base64 (what forewarn writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// The stack's generated string: the key is its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

/// The continuation keys' secret (see the module's documentation).
#[derive(Debug, Clone)]
pub struct SecretKeys {
    client: Client,
    secret: String,
}

impl SecretKeys {
    /// The keys of `secret` (its ARN or name) through `client`.
    pub fn new(client: Client, secret: impl Into<String>) -> SecretKeys {
        SecretKeys {
            client,
            secret: secret.into(),
        }
    }

    /// An error of `kind` while doing `what`, as `why` says.
    fn fail(&self, kind: FailureKind, what: &str, why: impl Into<BoxError>) -> StoreError {
        let location = format!("secret {}", self.secret);
        StoreError::backend(location, what, kind, Some(why.into()))
    }

    /// A Secrets Manager call that failed while doing `what`, with the kind its answer says.
    fn sdk_err<E: OperationError>(&self, what: &str, error: CallError<E>) -> StoreError {
        self.fail(failure_kind(&error), what, error)
    }

    /// The key of the version of stage `stage` (`AWSCURRENT`, `AWSPREVIOUS`); `None` when there
    /// is no such version.
    async fn version(&self, stage: &str) -> Result<Option<ContinuationKey>, StoreError> {
        let get = self.client.get_secret_value().secret_id(&self.secret);
        let what = format!("{READING} ({stage})");
        let out = match get.version_stage(stage).send().await {
            Err(e) if stage != CURRENT && failure_kind(&e) == FailureKind::NotFound => {
                return Ok(None);
            }
            got => got.map_err(|e| self.sdk_err(&what, e))?,
        };
        let corrupt =
            |why: String| StoreError::corrupt(format!("secret {} ({stage})", self.secret), why);
        let text = (out.secret_string()).ok_or_else(|| corrupt("no secret string".into()))?;
        let version: Version = serde_json::from_str(text)
            .map_err(|e| corrupt(format!("not {{\"key_id\": N, \"key\": \"<base64>\"}}: {e}")))?;
        let key = match (&version.key, &version.secret) {
            (Some(key), _) => {
                let bytes = (base64::engine::general_purpose::STANDARD.decode(key))
                    .map_err(|e| corrupt(format!("`key` is not base64: {e}")))?;
                let (len, want) = (bytes.len(), ContinuationKey::LEN);
                let short = || corrupt(format!("`key` has {len} bytes instead of {want}"));
                ContinuationKey::from_slice(version.key_id, &bytes).ok_or_else(short)?
            }
            (None, Some(generated)) if generated.len() >= 32 => {
                let digest: [u8; 32] = sha2::Sha256::digest(generated.as_bytes()).into();
                ContinuationKey::with_id(version.key_id, digest)
            }
            _ => {
                let why = "neither `key` nor a `secret` of 32 characters or more";
                return Err(corrupt(why.into()));
            }
        };
        Ok(Some(key))
    }

    /// The keys as the secret holds them now.
    pub(super) async fn read(&self) -> Result<KeyRing, StoreError> {
        let current = self.version(CURRENT).await?.ok_or_else(|| {
            self.fail(FailureKind::NotFound, READING, "it has no current version")
        })?;
        let previous = self
            .version(PREVIOUS)
            .await?
            .filter(|p| p.id() != current.id());
        Ok(KeyRing { current, previous })
    }

    /// Puts `key` as the secret's new current version (the current one becomes the previous),
    /// once: `token` names the request, and Secrets Manager makes no second version for it.
    async fn put(&self, key: &ContinuationKey, token: String) -> Result<(), StoreError> {
        let version = Version {
            key_id: key.id(),
            key: Some(base64::engine::general_purpose::STANDARD.encode(key.bytes())),
            secret: None,
        };
        let text = serde_json::to_string(&version).unwrap_or_default();
        let put = self.client.put_secret_value().secret_id(&self.secret);
        let put = put.secret_string(text).client_request_token(token);
        let what = "writing the continuation key";
        put.send().await.map_err(|e| self.sdk_err(what, e))?;
        Ok(())
    }

    /// Rotates: a new current key of the next id (its random bytes `bytes`); the current one
    /// becomes the previous, the previous one is dropped.
    pub(super) async fn rotate(&self, bytes: [u8; 32]) -> Result<KeyRing, StoreError> {
        let before = self.read().await?;
        let after = before.rotated(bytes).ok_or_else(|| {
            self.fail(
                FailureKind::Invalid,
                ROTATING,
                "its id cannot grow any more",
            )
        })?;
        self.put(&after.current, token_of(&after.current)).await?;
        let keys = self.read().await?;
        let key_id = keys.current.id();
        tracing::info!(key_id, "rotated the continuation key in its secret");
        Ok(keys)
    }
}

const READING: &str = "reading the continuation key";
const ROTATING: &str = "rotating the continuation key";
const CURRENT: &str = "AWSCURRENT";
const PREVIOUS: &str = "AWSPREVIOUS";

/// A request token for putting `key` in a rotation: its id and a digest of its bytes (32 to 64
/// characters, as Secrets Manager asks).
fn token_of(key: &ContinuationKey) -> String {
    let digest = sha2::Sha256::digest(key.bytes());
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("forewarn-rotated-{}-{short}", key.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_the_key_within_secrets_managers_bounds() {
        let a = ContinuationKey::with_id(7, [1; 32]);
        let b = ContinuationKey::with_id(7, [2; 32]);
        let t = token_of(&a);
        assert!((32..=64).contains(&t.len()), "{t}");
        assert_eq!(t, token_of(&a), "the same key, the same token");
        assert_ne!(t, token_of(&b));
    }
}
