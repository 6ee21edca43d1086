//! The keys continuations ([`crate::domain::inbound::continuation`]) and cordon records
//! ([`crate::domain::cordon_record`]) are signed with: HMAC-SHA256 under a 32-byte key
//! ([`ContinuationKey`]) named by its id, and the ring of the keys accepted ([`KeyRing`]).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The id of a continuation key: its generation. The first key is 1, and each rotation makes
/// the next one.
pub type KeyId = u64;

/// The secret continuations (and cordon records, [`crate::domain::cordon_record`]) are signed with:
/// 32 bytes, and the id every signature names.
#[derive(Clone, PartialEq, Eq)]
pub struct ContinuationKey {
    id: KeyId,
    bytes: [u8; 32],
}

impl ContinuationKey {
    /// The length of a key, in bytes.
    pub const LEN: usize = 32;

    /// A first key (id 1).
    pub fn new(bytes: [u8; 32]) -> ContinuationKey {
        ContinuationKey::with_id(1, bytes)
    }

    pub fn with_id(id: KeyId, bytes: [u8; 32]) -> ContinuationKey {
        ContinuationKey { id, bytes }
    }

    /// A key from stored bytes; `None` unless there are exactly [`ContinuationKey::LEN`].
    pub fn from_slice(id: KeyId, bytes: &[u8]) -> Option<ContinuationKey> {
        Some(ContinuationKey::with_id(id, bytes.try_into().ok()?))
    }

    pub fn id(&self) -> KeyId {
        self.id
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// HMAC-SHA256 of `data`, in hex.
    pub fn sign(&self, data: &str) -> String {
        hex::encode(self.hmac(data).finalize().into_bytes())
    }

    /// Whether `mac` (hex) is this key's HMAC-SHA256 of `data` (constant-time).
    pub fn verifies(&self, data: &str, mac: &str) -> Result<(), Unverified> {
        let mac = hex::decode(mac).map_err(|_| Unverified::NotHex)?;
        self.hmac(data)
            .verify_slice(&mac)
            .map_err(|_| Unverified::Mismatch)
    }

    fn hmac(&self, data: &str) -> Hmac<Sha256> {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.bytes);
        mac.expect("HMAC keys are of any length").chain_update(data)
    }
}

/// Never prints the key, only its id.
impl std::fmt::Debug for ContinuationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ContinuationKey(id {}, ..)", self.id)
    }
}

/// The keys a signature is accepted from: the current one, which signs, and the one before the
/// last rotation, so that what was signed just before a rotation (a drain in flight, a cordon
/// record) still verifies after it. A key two rotations old is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRing {
    pub current: ContinuationKey,
    pub previous: Option<ContinuationKey>,
}

impl KeyRing {
    /// A ring of one key (no rotation yet).
    pub fn of(current: ContinuationKey) -> KeyRing {
        KeyRing {
            current,
            previous: None,
        }
    }

    /// The accepted key of id `id`, if it is one.
    pub fn get(&self, id: KeyId) -> Option<&ContinuationKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
    }

    /// The ring after a rotation to `bytes`: a new current key of the next id, the current one
    /// kept as the previous; the previous one is dropped. `None` when ids are exhausted.
    pub fn rotated(&self, bytes: [u8; 32]) -> Option<KeyRing> {
        Some(KeyRing {
            current: ContinuationKey::with_id(self.current.id.checked_add(1)?, bytes),
            previous: Some(self.current.clone()),
        })
    }

    /// Verifies `signed`, the id of a key and its `mac` of `data`: [`Unverified::NotSigned`]
    /// when there is none, [`Unverified::UnknownKey`] when the id is not one of this ring's (a
    /// newer key this ring was read before, or one too old).
    pub fn verify(&self, signed: Option<(KeyId, &str)>, data: &str) -> Result<(), Unverified> {
        let (id, mac) = signed.ok_or(Unverified::NotSigned)?;
        let current = self.current.id;
        let key = self.get(id).ok_or(Unverified::UnknownKey { id, current })?;
        key.verifies(data, mac)
    }
}

/// Why a continuation's signature does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    #[error("the continuation is not signed")]
    NotSigned,
    #[error("the signature is not hex")]
    NotHex,
    #[error("the signature does not match: not written by this forewarn")]
    Mismatch,
    #[error(
        "signed with key {id}, which is not accepted (the current key is {current}; only it and \
         the one before the last rotation are)"
    )]
    UnknownKey { id: KeyId, current: KeyId },
}
