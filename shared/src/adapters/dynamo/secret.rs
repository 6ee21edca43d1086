//! The continuation keys in a Secrets Manager secret (the settings' key secret: the stack's
//! `<stack>-continuation-key`), out of the pool table: whoever may read or scan
//! the table (an operator querying pools) learns nothing of the key, and the secret's resource
//! policy lets only forewarn's roles read it.
//!
//! The secret's current version (`AWSCURRENT`) is the current key, its previous version
//! (`AWSPREVIOUS`) the key before the last rotation: a rotation puts a new version, and Secrets
//! Manager moves the labels. Each version is JSON, `{"key_id": N, "secret": "<random string>"}`,
//! and its key is the string's SHA-256: the stack generates the first (64 letters and digits), a
//! rotation puts the next (64 hex digits of random bytes).

use aws_sdk_secretsmanager::Client;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::DynamoStore;
use crate::domain::keys::{ContinuationKey, KeyId, KeyRing};
use crate::ports::{FailureKind, PortError};

/// One version of the secret.
#[derive(Debug, Serialize, Deserialize)]
struct Version {
    key_id: KeyId,
    /// A random string: the key is its SHA-256.
    secret: String,
}

/// The key of a version: `secret`'s SHA-256, of id `id`.
fn key_of(id: KeyId, secret: &str) -> ContinuationKey {
    ContinuationKey::with_id(id, sha2::Sha256::digest(secret.as_bytes()).into())
}

/// The continuation keys' secret (see the module's documentation), which a [`DynamoStore`]
/// reads and rotates.
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
}

impl DynamoStore {
    /// The continuation keys' secret, or why there is none.
    fn key_secret(&self) -> Result<&SecretKeys, PortError> {
        let why =
            "no key secret is set (FOREWARN_KEY_SECRET, the stack's <stack>-continuation-key)";
        (self.secret.as_ref()).ok_or_else(|| self.fail(FailureKind::Invalid, READING, why))
    }

    /// The key of the secret's version of stage `stage` (`AWSCURRENT`, `AWSPREVIOUS`); an error
    /// of [`FailureKind::NotFound`] when there is no such version.
    async fn key_version(
        &self,
        keys: &SecretKeys,
        stage: &str,
    ) -> Result<ContinuationKey, PortError> {
        let get = keys.client.get_secret_value().secret_id(&keys.secret);
        let what = format!("{READING} from secret {} ({stage})", keys.secret);
        let out = (get.version_stage(stage).send().await).map_err(|e| self.sdk_err(&what, e))?;
        let corrupt =
            |why: String| PortError::corrupt(format!("secret {} ({stage})", keys.secret), why);
        let text = (out.secret_string()).ok_or_else(|| corrupt("no secret string".into()))?;
        let version: Version = serde_json::from_str(text)
            .map_err(|e| corrupt(format!("not {{\"key_id\": N, \"secret\": \"...\"}}: {e}")))?;
        if version.secret.len() < 32 {
            return Err(corrupt("`secret` has fewer than 32 characters".into()));
        }
        Ok(key_of(version.key_id, &version.secret))
    }

    /// The keys as the secret holds them now.
    pub(super) async fn read_keys(&self) -> Result<KeyRing, PortError> {
        let keys = self.key_secret()?;
        let current = self.key_version(keys, "AWSCURRENT").await?;
        let previous = match self.key_version(keys, "AWSPREVIOUS").await {
            Err(e) if e.kind == FailureKind::NotFound => None,
            read => Some(read?).filter(|p| p.id() != current.id()),
        };
        Ok(KeyRing { current, previous })
    }

    /// Rotates: a new current key of the next id (its random bytes `bytes`); the current one
    /// becomes the previous, the previous one is dropped.
    pub(super) async fn rotate_key(&self, bytes: [u8; 32]) -> Result<KeyRing, PortError> {
        let before = self.read_keys().await?;
        let keys = self.key_secret()?;
        let spent = || {
            let what = format!("rotating the continuation key of secret {}", keys.secret);
            self.fail(FailureKind::Invalid, what, "its id cannot grow any more")
        };
        // The next id, as every rotation makes it.
        let key_id = before.rotated(bytes).ok_or_else(spent)?.current.id();
        let secret = hex::encode(bytes);
        // Put once: the token names the request, and Secrets Manager makes no second version
        // for it.
        let token = token_of(&key_of(key_id, &secret));
        let text = serde_json::to_string(&Version { key_id, secret }).unwrap_or_default();
        let put = keys.client.put_secret_value().secret_id(&keys.secret);
        let put = put.secret_string(text).client_request_token(token);
        let what = format!("writing the continuation key in secret {}", keys.secret);
        put.send().await.map_err(|e| self.sdk_err(what, e))?;
        let keys = self.read_keys().await?;
        let key_id = keys.current.id();
        tracing::info!(key_id, "rotated the continuation key in its secret");
        Ok(keys)
    }
}

const READING: &str = "reading the continuation key";

/// A request token for putting `key` in a rotation: its id and a digest of its bytes (32 to 64
/// characters, as Secrets Manager asks).
fn token_of(key: &ContinuationKey) -> String {
    let digest = sha2::Sha256::digest(key.bytes());
    let short = hex::encode(&digest[..8]);
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
