//! What a store read of its continuation keys, kept for [`KEY_CACHE_TTL`]: one read per cold
//! start and per few minutes, not one per pass.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::domain::keys::KeyRing;
use crate::ports::KEY_CACHE_TTL;

/// The keys last read, and when.
#[derive(Debug, Default)]
pub(crate) struct KeyCache(Mutex<Option<(KeyRing, DateTime<Utc>)>>);

impl KeyCache {
    /// The keys read at most [`KEY_CACHE_TTL`] before `now`.
    pub(crate) fn fresh(&self, now: DateTime<Utc>) -> Option<KeyRing> {
        let ttl = chrono::Duration::from_std(KEY_CACHE_TTL).unwrap_or(chrono::Duration::MAX);
        let cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .as_ref()
            .filter(|(_, at)| now < *at + ttl && *at <= now)
            .map(|(ring, _)| ring.clone())
    }

    /// Keeps `ring`, read at `now`.
    pub(crate) fn put(&self, ring: &KeyRing, now: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((ring.clone(), now));
    }

    /// The keys while fresh at `now`, else what `read` answers, kept.
    pub(crate) async fn or_read<E>(
        &self,
        now: DateTime<Utc>,
        read: impl Future<Output = Result<KeyRing, E>>,
    ) -> Result<KeyRing, E> {
        if let Some(keys) = self.fresh(now) {
            return Ok(keys);
        }
        let keys = read.await?;
        self.put(&keys, now);
        Ok(keys)
    }
}
