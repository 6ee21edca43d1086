//! A mass interruption's lists, shared between execution environments through the pool store
//! ([`SharedLists`]): in a mass interruption every environment would list the same clusters,
//! ten environments the account's whole burst of `DescribeInstances`, and their lookups would
//! wait for its refill. The first environment to claim a cluster's list makes it, writing each
//! page as it comes, signed with the continuation key; the others read the pages as they are
//! written (every [`LIST_POLL`], for [`LIST_WAIT`] at most), and look up what they do not find
//! there as they would any instance. A page that does not verify, names another cluster or
//! list, or cannot be read, or a last page that does not come, ends the reading (logged), and
//! the environment lists the cluster itself: a table writer can delay a list by
//! [`LIST_WAIT`], never forge it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::clusters::ClusterId;
use crate::domain::facts::InstanceFacts;
use crate::domain::keys::{ContinuationKey, KeyRing};
use crate::ports::{Clock, FailureKind, InstanceDirectory, PAGES_READ, PoolStore};
use crate::ports::{PortError, SharedLists, span};

/// How often an environment reads the pages of a list another claimed.
pub const LIST_POLL: std::time::Duration = std::time::Duration::from_millis(100);
/// How long at most an environment reads the pages of a list another claimed (the list of a
/// cluster of 5,000 takes about 2 s under the account's throttle).
pub const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The most bytes of instances' facts a page holds (a DynamoDB item holds 400 KB).
const PAGE_BYTES: usize = 300_000;

/// A page of a list as shared: the cluster and claim it is of, its place in the list, its
/// instances, and whether it is the list's last.
#[derive(serde::Serialize, serde::Deserialize)]
struct Page {
    cluster: String,
    at: i64,
    n: usize,
    last: bool,
    facts: Vec<InstanceFacts>,
}

/// Cluster `id`'s running instances (`at_once`: see [`InstanceDirectory::cluster_instances`]),
/// each page to `found` as it comes: read from the list another environment claimed in `store`
/// within `lease` (listed here when it cannot all be read), else listed from `instances` (and
/// shared, when `store` shares lists and its keys can be read).
pub(super) async fn list(
    store: Option<&dyn PoolStore>,
    instances: &dyn InstanceDirectory,
    (id, at_once, lease): (&ClusterId, usize, std::time::Duration),
    clock: &dyn Clock,
    found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
) -> Result<(), PortError> {
    let alone = || instances.cluster_instances(&id.place, &id.name, at_once, found);
    let Some((store, lists)) = store.and_then(|s| Some((s, s.shared_lists()?))) else {
        return alone().await;
    };
    let now = clock.now();
    let now = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
    let claimed = async {
        let keys = store.continuation_keys().await?;
        Ok((keys, lists.claim_list(id, now, lease).await?))
    };
    let shared = match claimed.await {
        Ok((keys, None)) => {
            return make(lists, &keys.current, instances, (id, at_once, now), found).await;
        }
        Ok((keys, Some(at))) => read(lists, &keys, (id, at), clock, found).await,
        Err(e) => Err(e),
    };
    let Err(e) = shared else { return Ok(()) };
    tracing::warn!(cluster = %id, error = %e, "a cluster's list could not be shared, or not all read: listed here");
    alone().await
}

/// Lists `id` from `instances` (each page to `found`), sharing it as claimed `at`: each page
/// written to `lists` as it comes, sealed with `key`, then a last one, empty. A write that
/// fails ends the writing (logged): the other environments list the cluster themselves after
/// [`LIST_WAIT`].
async fn make(
    lists: &dyn SharedLists,
    key: &ContinuationKey,
    instances: &dyn InstanceDirectory,
    (id, at_once, at): (&ClusterId, usize, DateTime<Utc>),
    found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
) -> Result<(), PortError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let listed = async move {
        let each = |page: BTreeMap<String, InstanceFacts>| {
            found(page.clone());
            let _ = tx.send(page);
        };
        (instances.cluster_instances(&id.place, &id.name, at_once, &each)).await
    };
    // Moved in: once a write fails, the pages still listed are dropped as they come.
    let write = async move {
        let page = |n, last, facts| seal(key, (id, at), (n, last, facts));
        let written = async {
            let mut n = 0;
            while let Some(listed) = rx.recv().await {
                for facts in split(listed) {
                    lists.put_page(id, at, n, &page(n, false, facts)).await?;
                    n += 1;
                }
            }
            lists.put_page(id, at, n, &page(n, true, Vec::new())).await
        };
        if let Err(e) = written.await {
            tracing::warn!(cluster = %id, error = %e, "a cluster's list could not all be shared: the other environments list it themselves after LIST_WAIT");
        }
    };
    futures::join!(listed, write).0
}

/// `page`'s instances in pages of at most [`PAGE_BYTES`] of facts.
fn split(page: BTreeMap<String, InstanceFacts>) -> Vec<Vec<InstanceFacts>> {
    let (mut pages, mut bytes): (Vec<Vec<_>>, _) = (Vec::new(), 0);
    for facts in page.into_values() {
        let size = serde_json::to_string(&facts).map_or(0, |json| json.len());
        match pages.last_mut().filter(|_| bytes + size <= PAGE_BYTES) {
            Some(last) => last.push(facts),
            None => {
                pages.push(vec![facts]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    pages
}

/// Page `n` (the `last`?) of `id`'s list claimed `at`, of `facts`, as stored: `<key id>.<mac>.<the
/// page as JSON>`, the mac `key`'s of the JSON.
fn seal(
    key: &ContinuationKey,
    (id, at): (&ClusterId, DateTime<Utc>),
    (n, last, facts): (usize, bool, Vec<InstanceFacts>),
) -> String {
    let page = Page {
        cluster: id.to_string(),
        at: at.timestamp_millis(),
        n,
        last,
        facts,
    };
    let json = serde_json::to_string(&page).unwrap_or_default();
    format!("{}.{}.{json}", key.id(), key.sign(&json))
}

/// The page `n` of `id`'s list claimed `at` in `stored` (see [`seal`]), verified with `keys`;
/// else what is wrong with it.
fn open(
    stored: &str,
    keys: &KeyRing,
    (id, at): (&ClusterId, DateTime<Utc>),
    n: usize,
) -> Result<Page, String> {
    let [key, mac, json] = stored.splitn(3, '.').collect::<Vec<_>>()[..] else {
        return Err("not `<key id>.<mac>.<page>`".into());
    };
    let key = key.parse().map_err(|_| format!("`{key}` is no key id"))?;
    keys.verify(Some((key, mac)), json)
        .map_err(|e| e.to_string())?;
    let page: Page = serde_json::from_str(json).map_err(|e| format!("no page: {e}"))?;
    let (cluster, ms) = (id.to_string(), at.timestamp_millis());
    if (page.cluster.as_str(), page.at, page.n) != (cluster.as_str(), ms, n) {
        let (c, a, p) = (&page.cluster, page.at, page.n);
        return Err(format!(
            "signed as page {p} of {c}'s list of {a} ms, not {n} of {cluster}'s of {ms}"
        ));
    }
    Ok(page)
}

/// Reads the pages of `id`'s list claimed `at`, each to `found`, until its last (or
/// [`LIST_WAIT`]).
async fn read(
    lists: &dyn SharedLists,
    keys: &KeyRing,
    (id, at): (&ClusterId, DateTime<Utc>),
    clock: &dyn Clock,
    found: &(dyn Fn(BTreeMap<String, InstanceFacts>) + Send + Sync),
) -> Result<(), PortError> {
    let give_up = clock.now() + span(LIST_WAIT);
    let mut n = 0;
    loop {
        let pages = lists.pages(id, at, n).await?;
        let full = pages.len() == PAGES_READ;
        for stored in pages {
            let page = open(&stored, keys, (id, at), n).map_err(|why| {
                PortError::corrupt(format!("page {n} of {id}'s shared list"), why)
            })?;
            n += 1;
            let facts = (page.facts.into_iter()).map(|f| (f.instance_id.clone(), f));
            found(facts.collect());
            if page.last {
                return Ok(());
            }
        }
        if clock.now() >= give_up {
            let (what, why) = (format!("{id}'s shared list"), "its last page did not come");
            return Err(PortError::new(what, FailureKind::Timeout, why));
        }
        if !full {
            clock.sleep(LIST_POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::clock::ManualClock;
    use crate::adapters::embedded::EmbeddedStore;
    use crate::app::fleet::tests::{Lists, own};
    use crate::domain::fixtures;
    use std::sync::Mutex;

    /// A store (in its directory) on a manual clock, and the cluster `a` that [`Lists`] lists
    /// (`i-1` and `i-2`, a page each).
    fn cluster_a() -> (tempfile::TempDir, ManualClock, EmbeddedStore, ClusterId) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at(fixtures::t0());
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let store = store.with_clock(clock.shared());
        (dir, clock, store, ClusterId::at(&own(), "a"))
    }

    /// What one environment's list of `id` found, by instance.
    async fn listed(
        store: &EmbeddedStore,
        directory: &Lists,
        id: &ClusterId,
        clock: &ManualClock,
    ) -> (Result<(), PortError>, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let found = |page: BTreeMap<String, InstanceFacts>| {
            seen.lock().unwrap().extend(page.into_keys());
        };
        let lease = std::time::Duration::from_secs(60);
        let store: &dyn PoolStore = store;
        let listed = list(Some(store), directory, (id, 1, lease), clock, &found).await;
        (listed, seen.into_inner().unwrap())
    }

    /// The first environment to claim a cluster's list makes it and shares its pages, signed;
    /// another reads them and lists nothing; a page that does not verify, or is another list's,
    /// is refused (its instances found by nobody) and the cluster listed here.
    #[tokio::test]
    async fn a_clusters_list_is_made_once_and_read_by_the_other_environments() {
        let (_dir, clock, store, a) = cluster_a();
        let directory = Lists(Mutex::default());
        let all = ["i-1", "i-2"];
        let (made, found) = listed(&store, &directory, &a, &clock).await;
        assert!(made.is_ok() && found == all);
        let (read, found) = listed(&store.clone(), &directory, &a, &clock).await;
        assert!(read.is_ok() && found == all, "{read:?} {found:?}");
        assert_eq!(directory.0.lock().unwrap().len(), 1, "listed once");
        // A list claimed by a table writer, whose page is not signed by forewarn's key.
        clock.advance(std::time::Duration::from_secs(61));
        let lists = store.shared_lists().unwrap();
        let lease = std::time::Duration::from_secs(60);
        let at = clock.now();
        assert_eq!(lists.claim_list(&a, at, lease).await.unwrap(), None);
        let forged = ContinuationKey::with_id(1, [7; 32]);
        let page = || (0, true, vec![fixtures::instance("i-9").build()]);
        let forged_page = seal(&forged, (&a, at), page());
        lists.put_page(&a, at, 0, &forged_page).await.unwrap();
        let (read, found) = listed(&store, &directory, &a, &clock).await;
        assert!(
            read.is_ok() && found == all,
            "refused, then listed here: {found:?}"
        );
        assert_eq!(directory.0.lock().unwrap().len(), 2);
        // Signed by forewarn, but another cluster's page, replayed in this list.
        clock.advance(std::time::Duration::from_secs(61));
        let at = clock.now();
        assert_eq!(lists.claim_list(&a, at, lease).await.unwrap(), None);
        let keys = store.continuation_keys().await.unwrap();
        let green = ClusterId::at(&a.place, "green");
        let replayed = seal(&keys.current, (&green, at), page());
        lists.put_page(&a, at, 0, &replayed).await.unwrap();
        let (read, found) = listed(&store, &directory, &a, &clock).await;
        assert!(
            read.is_ok() && found == all,
            "refused, then listed here: {found:?}"
        );
        assert_eq!(directory.0.lock().unwrap().len(), 3);
        // Why each was refused; forewarn's own page of this list is read.
        let why = |stored: &str| open(stored, &keys, (&a, at), 0).err().unwrap();
        assert!(why(&forged_page).contains("does not match"));
        assert!(why(&replayed).contains("of 123456789012/eu-west-1/green's list"));
        let ours = seal(&keys.current, (&a, at), page());
        assert_eq!(open(&ours, &keys, (&a, at), 0).unwrap().facts.len(), 1);
    }

    /// A reader whose list's last page never comes gives up after LIST_WAIT, with what came,
    /// and lists the cluster itself.
    #[tokio::test]
    async fn a_reader_gives_up_on_a_list_whose_last_page_never_comes() {
        let (_dir, clock, store, a) = cluster_a();
        let lists = store.shared_lists().unwrap();
        let at = clock.now();
        let lease = std::time::Duration::from_secs(60);
        assert_eq!(lists.claim_list(&a, at, lease).await.unwrap(), None);
        let keys = store.continuation_keys().await.unwrap();
        let first = (0, false, vec![fixtures::instance("i-1").build()]);
        let first = seal(&keys.current, (&a, at), first);
        lists.put_page(&a, at, 0, &first).await.unwrap();
        let directory = Lists(Mutex::default());
        let (read, found) = listed(&store, &directory, &a, &clock).await;
        assert!(read.is_ok() && found == ["i-1", "i-1", "i-2"], "{found:?}");
        assert!(clock.now() >= at + span(LIST_WAIT));
        assert_eq!(directory.0.lock().unwrap().len(), 1);
    }

    /// Pages hold at most PAGE_BYTES of facts (a DynamoDB item holds 400 KB), each instance
    /// in one.
    #[test]
    fn a_page_of_large_facts_is_split_under_an_items_size() {
        let big = |id: &str| {
            let mut facts = fixtures::instance(id).build();
            facts.tags = (0..50)
                .map(|t| (format!("k{t:0>120}"), "v".repeat(1_900)))
                .collect();
            (id.to_string(), facts)
        };
        let page: BTreeMap<_, _> = (0..100).map(|n| big(&format!("i-{n:03}"))).collect();
        let pages = split(page);
        let sizes: Vec<usize> = (pages.iter())
            .map(|p| serde_json::to_string(p).unwrap().len())
            .collect();
        assert!(
            pages.len() > 1 && sizes.iter().all(|s| *s <= PAGE_BYTES),
            "{sizes:?}"
        );
        assert_eq!(pages.iter().map(Vec::len).sum::<usize>(), 100);
    }
}
