//! What a store read of its continuation keys, kept for [`KEY_CACHE_TTL`]: one read per cold
//! start and per few minutes, not one per pass.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::adapters::accounts::lock;
use crate::domain::keys::KeyRing;
use crate::ports::KEY_CACHE_TTL;

/// The keys last read, and when.
#[derive(Debug, Default)]
pub(crate) struct KeyCache(Mutex<Option<(KeyRing, DateTime<Utc>)>>);

impl KeyCache {
    /// What `read` answers (keys, or maybe none), the keys kept as read at `now`.
    pub(crate) async fn kept<K: Clone + Into<Option<KeyRing>>, E>(
        &self,
        now: DateTime<Utc>,
        read: impl Future<Output = Result<K, E>>,
    ) -> Result<K, E> {
        let keys = read.await?;
        if let Some(ring) = keys.clone().into() {
            *lock(&self.0) = Some((ring, now));
        }
        Ok(keys)
    }

    /// The keys read at most [`KEY_CACHE_TTL`] before `now`, else what `read` answers, kept.
    pub(crate) async fn or_read<E>(
        &self,
        now: DateTime<Utc>,
        read: impl Future<Output = Result<KeyRing, E>>,
    ) -> Result<KeyRing, E> {
        let ttl = chrono::Duration::from_std(KEY_CACHE_TTL).unwrap_or(chrono::Duration::MAX);
        let cached = lock(&self.0).clone();
        if let Some((keys, _)) = cached.filter(|(_, at)| now < *at + ttl && *at <= now) {
            return Ok(keys);
        }
        self.kept(now, read).await
    }
}
