//! Elastic Load Balancing as the mass benchmark models it: the account's target groups (the
//! cluster's, tagged `elbv2.k8s.aws/cluster`, and others'), each call answered after a latency
//! and subject to the account's token buckets, a throttled call retried as forewarn's ELB client
//! does (2 attempts, full-jitter backoff of 50 ms); and per execution environment the calls of
//! `forewarn::adapters::elb` (the cluster's groups found by tag, `GetResources` 100 a page, and
//! found again in the background after 60 s; their targets read once and kept 15 s; each round
//! one `DeregisterTargets` per group holding doomed targets, at most `ELB_RATE` calls at
//! once), through the real pipeline step that calls it (its rounds shared by every environment
//! through the pool store, `FOREWARN_DEREGISTER_BUDGET` 3 s).
//!
//! The buckets: ELB's documented one for `Describe*` (40 tokens, 10 a second); the registration
//! calls' are not published, so `DeregisterTargets` gets the bucket the AWS Load Balancer
//! Controller keeps to for them by default to spare the account's (`--aws-api-throttle`:
//! `RegisterTargets|DeregisterTargets=4:20`, 20 tokens, 4 a second). Both are the account's,
//! shared with the controller itself, which this model leaves idle. The Resource Groups Tagging
//! API's `GetResources` is not published either: it gets `Describe*`'s (40 tokens, 10 a second),
//! a bucket of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forewarn::adapters::elb::{DEREGISTER_CHUNK, GROUPS_FOR, TARGETS_FOR};
use forewarn::domain::clusters::ClusterId;
use forewarn::domain::traffic::{Deregistered, Doomed};
use forewarn::ports::{FailureKind, LoadBalancers, PortError};
use futures::StreamExt;
use tokio::time::Instant;

/// Target groups of other applications in the account (never the cluster's).
const OTHER_GROUPS: usize = 20;
/// The attempts per call of forewarn's ELB client, and its first backoff.
const ATTEMPTS: u32 = 2;
const FIRST_BACKOFF: f64 = 0.05;

/// Node `n`'s addresses: its primary address, then one per pod (secondary addresses of its
/// network interface, as the VPC CNI gives them).
pub fn addresses(n: usize, pods: usize) -> Vec<String> {
    (0..=pods)
        .map(|k| format!("10.{}.{}.{}", n / 250, n % 250, 10 + k))
        .collect()
}

/// A token bucket: `capacity` tokens, `refill` a second.
struct Bucket {
    tokens: f64,
    capacity: f64,
    refill: f64,
    at: Instant,
}

impl Bucket {
    fn new(capacity: f64, refill: f64) -> Bucket {
        Bucket {
            tokens: capacity,
            capacity,
            refill,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.refill).min(self.capacity);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What a target group's targets are: instances, or pods' addresses.
#[derive(Clone, Copy)]
enum TargetKind {
    Instance,
    Ip,
}

/// One target group of the account.
struct Group {
    kind: TargetKind,
    /// Tagged for the cluster.
    ours: bool,
}

/// What the account's API did, for the report.
#[derive(Default)]
struct Tally {
    calls: BTreeMap<&'static str, usize>,
    throttled: usize,
    /// Per instance, when the round that took it off was answered.
    answered: BTreeMap<String, chrono::DateTime<chrono::Utc>>,
}

/// The account: its groups and what is registered in each, its buckets, what it was asked.
pub struct Account {
    groups: Vec<Group>,
    registered: Mutex<Vec<BTreeSet<String>>>,
    describe: Mutex<Bucket>,
    mutate: Mutex<Bucket>,
    tagging: Mutex<Bucket>,
    latency: Duration,
    tally: Mutex<Tally>,
}

impl Account {
    /// `target_groups` of the cluster (half instance mode, holding every node; half IP mode,
    /// each holding one pod address of every node) and [`OTHER_GROUPS`] others.
    pub fn new(
        target_groups: usize,
        nodes: &[(String, Vec<String>)],
        latency: Duration,
    ) -> Account {
        let mut groups = Vec::new();
        let mut registered = Vec::new();
        for g in 0..target_groups {
            let kind = if g % 2 == 0 {
                TargetKind::Instance
            } else {
                TargetKind::Ip
            };
            let targets = nodes
                .iter()
                .filter_map(|(id, addresses)| match kind {
                    TargetKind::Instance => Some(id.clone()),
                    TargetKind::Ip => {
                        let pods = addresses.len().saturating_sub(1).max(1);
                        addresses.get(1 + (g / 2) % pods).cloned()
                    }
                })
                .collect();
            groups.push(Group { kind, ours: true });
            registered.push(targets);
        }
        for _ in 0..OTHER_GROUPS {
            groups.push(Group {
                kind: TargetKind::Instance,
                ours: false,
            });
            registered.push(BTreeSet::new());
        }
        Account {
            groups,
            registered: Mutex::new(registered),
            describe: Mutex::new(Bucket::new(40.0, 10.0)),
            mutate: Mutex::new(Bucket::new(20.0, 4.0)),
            tagging: Mutex::new(Bucket::new(40.0, 10.0)),
            latency,
            tally: Mutex::default(),
        }
    }

    /// One call of `name`, as the SDK makes it: throttled attempts retried after a full-jitter
    /// backoff, the last one's throttling an error.
    async fn call(&self, name: &'static str, seed: usize) -> Result<(), PortError> {
        let bucket = match name {
            "DeregisterTargets" => &self.mutate,
            "GetResources" => &self.tagging,
            _ => &self.describe,
        };
        *self.tally.lock().unwrap().calls.entry(name).or_default() += 1;
        for attempt in 0..ATTEMPTS {
            let took = bucket.lock().unwrap().take();
            if took {
                tokio::time::sleep(self.latency).await;
                return Ok(());
            }
            self.tally.lock().unwrap().throttled += 1;
            if attempt + 1 == ATTEMPTS {
                break;
            }
            // Full jitter: a spread fraction of min(20 s, 2^attempt × the first backoff).
            let ceiling = (FIRST_BACKOFF * 2f64.powi(attempt as i32)).min(20.0);
            let spread = ((seed * 7919 + attempt as usize * 104_729) % 1000) as f64 / 1000.0;
            tokio::time::sleep(Duration::from_secs_f64(ceiling * spread)).await;
        }
        let said = "ThrottlingException: Rate exceeded";
        Err(PortError::new(name, FailureKind::Throttled, said))
    }

    /// The report's paragraph: the calls by kind, the throttled attempts, and per node whether
    /// its round was answered before its first eviction (`tried`, after `warned_at`).
    pub fn summary(
        &self,
        ids: &[String],
        tried: &[Option<Duration>],
        warned_at: chrono::DateTime<chrono::Utc>,
    ) -> String {
        let target_groups = self.groups.iter().filter(|g| g.ours).count();
        let tally = self.tally.lock().unwrap();
        let calls: Vec<String> = tally
            .calls
            .iter()
            .map(|(name, n)| format!("{n} {name}"))
            .collect();
        let mut before = 0;
        let mut answered = Vec::new();
        for (id, tried) in ids.iter().zip(tried) {
            let Some(at) = tally.answered.get(id) else {
                continue;
            };
            let at = (*at - warned_at).to_std().unwrap_or_default();
            answered.push(at);
            if tried.is_none_or(|t| at <= t) {
                before += 1;
            }
        }
        answered.sort();
        let last = answered.last().copied().unwrap_or_default();
        format!(
            "Load balancers: {target_groups} target groups of the cluster among {} in the \
             account (Describe*: 40 tokens, 10 a second; DeregisterTargets: 20 tokens, 4 a \
             second). Calls: {} ({} attempts throttled). {} of {} nodes taken off before their \
             first eviction, the last {:.1} s after the warnings.\n",
            target_groups + OTHER_GROUPS,
            calls.join(", "),
            tally.throttled,
            before,
            ids.len(),
            last.as_secs_f64(),
        )
    }
}

/// The cluster's groups (indexes) as found and when, and whether a discovery is under way.
type Found = (Option<(Instant, Vec<usize>)>, bool);

/// One execution environment's ELB client: the cluster's groups found and kept as the adapter
/// keeps them.
pub struct Environment {
    account: Arc<Account>,
    /// The cluster's groups (indexes) and when they were found; whether a discovery is on.
    found: Arc<Mutex<Found>>,
    /// When each group's targets were last read.
    read: Mutex<BTreeMap<usize, Instant>>,
}

impl Environment {
    pub fn new(account: Arc<Account>) -> Environment {
        Environment {
            account,
            found: Arc::default(),
            read: Mutex::default(),
        }
    }

    /// `groups` (another environment's) taken as known when none is: see
    /// [`LoadBalancers::deregister`].
    fn know(&self, groups: &[String]) {
        let mut found = self.found.lock().unwrap();
        if found.0.is_none() && !groups.is_empty() {
            let known = groups
                .iter()
                .filter_map(|g| g.strip_prefix("tg-")?.parse().ok())
                .collect();
            // Known, and found again in the background at the next round, as the adapter does.
            let stale = Instant::now()
                .checked_sub(GROUPS_FOR)
                .unwrap_or_else(Instant::now);
            found.0 = Some((stale, known));
        }
    }

    /// The groups as known, found now only when none is known; found again in the background
    /// when older than [`GROUPS_FOR`].
    async fn groups(&self, seed: usize) -> Result<(Vec<usize>, usize), PortError> {
        let (cached, start) = {
            let mut found = self.found.lock().unwrap();
            let stale = found
                .0
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= GROUPS_FOR);
            let start = stale && !found.1;
            found.1 |= start;
            (found.0.clone(), start)
        };
        match cached {
            Some((_, groups)) => {
                if start {
                    let (account, found) = (self.account.clone(), self.found.clone());
                    tokio::spawn(async move {
                        let _ = discover(&account, &found, seed).await;
                    });
                }
                Ok((groups, 0))
            }
            None if start => discover(&self.account, &self.found, seed).await,
            None => Ok((Vec::new(), 0)),
        }
    }

    /// One group's round: its targets read, the doomed ones deregistered.
    async fn clear(
        &self,
        g: usize,
        doomed: &[Doomed],
        seed: usize,
        described: &std::sync::atomic::AtomicUsize,
    ) -> Result<Vec<String>, String> {
        let a = &self.account;
        let fresh = self
            .read
            .lock()
            .unwrap()
            .get(&g)
            .is_some_and(|at| at.elapsed() < TARGETS_FOR);
        if !fresh {
            described.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            a.call("DescribeTargetHealth", seed + g)
                .await
                .map_err(|e| e.to_string())?;
            self.read.lock().unwrap().insert(g, Instant::now());
        }
        let leaving: Vec<(String, String)> = {
            let registered = a.registered.lock().unwrap();
            doomed
                .iter()
                .flat_map(|d| {
                    let ids: Vec<&String> = match a.groups[g].kind {
                        TargetKind::Instance => vec![&d.instance_id],
                        TargetKind::Ip => d.addresses.iter().collect(),
                    };
                    ids.into_iter()
                        .filter(|id| registered[g].contains(*id))
                        .map(|id| (id.clone(), d.instance_id.clone()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let mut of = Vec::new();
        for (k, chunk) in leaving.chunks(DEREGISTER_CHUNK).enumerate() {
            a.call("DeregisterTargets", seed + g + k)
                .await
                .map_err(|e| e.to_string())?;
            let mut registered = a.registered.lock().unwrap();
            for (target, instance) in chunk {
                registered[g].remove(target);
                of.push(instance.clone());
            }
        }
        Ok(of)
    }
}

/// The cluster's groups found by tag (`GetResources`, 100 a page): kept in `found`.
async fn discover(
    account: &Account,
    found: &Mutex<Found>,
    seed: usize,
) -> Result<(Vec<usize>, usize), PortError> {
    let ours: Vec<usize> = (0..account.groups.len())
        .filter(|&g| account.groups[g].ours)
        .collect();
    let pages = ours.len().div_ceil(100).max(1);
    let mut calls = 0;
    for page in 0..pages {
        calls += 1;
        if let Err(e) = account.call("GetResources", seed + page).await {
            found.lock().unwrap().1 = false;
            return Err(e);
        }
    }
    *found.lock().unwrap() = (Some((Instant::now(), ours.clone())), false);
    Ok((ours, calls))
}

#[async_trait]
impl LoadBalancers for Environment {
    async fn deregister(
        &self,
        _key: &ClusterId,
        doomed: &[Doomed],
        known: &[String],
    ) -> Result<Deregistered, PortError> {
        self.know(known);
        let seed = doomed
            .first()
            .map(|d| d.instance_id.bytes().map(usize::from).sum())
            .unwrap_or_default();
        let (groups, describes) = self.groups(seed).await?;
        let described = std::sync::atomic::AtomicUsize::new(0);
        let rounds: Vec<_> = groups
            .iter()
            .map(|&g| self.clear(g, doomed, seed, &described))
            .collect();
        let done: Vec<_> = futures::stream::iter(rounds)
            .buffered(forewarn::domain::traffic::ELB_RATE)
            .collect()
            .await;
        let mut out = Deregistered {
            arns: groups.iter().map(|g| format!("tg-{g}")).collect(),
            describes: describes + described.into_inner(),
            ..Default::default()
        };
        for (g, done) in groups.iter().zip(done) {
            match done {
                Ok(of) => {
                    out.deregisters += of.len().div_ceil(DEREGISTER_CHUNK);
                    for instance in of {
                        out.left
                            .entry(instance)
                            .or_default()
                            .insert(format!("tg-{g}"));
                    }
                }
                Err(why) => {
                    // The model's calls fail only when throttled to the end.
                    out.throttled = true;
                    out.failed.push(format!("tg-{g}: {why}"));
                }
            }
        }
        let now = chrono::Utc::now();
        let mut tally = self.account.tally.lock().unwrap();
        for d in doomed {
            if out.failed.is_empty() {
                tally.answered.entry(d.instance_id.clone()).or_insert(now);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doomed(n: usize) -> Doomed {
        Doomed::new(format!("i-{n}"), addresses(n, 2))
    }

    #[test]
    fn addresses_are_distinct_across_nodes() {
        let all: BTreeSet<String> = (0..1000).flat_map(|n| addresses(n, 2)).collect();
        assert_eq!(all.len(), 3000);
    }

    #[tokio::test]
    async fn a_round_takes_the_doomed_off_every_group_once_and_the_groups_are_kept() {
        let nodes: Vec<(String, Vec<String>)> = (0..4)
            .map(|n| (format!("i-{n}"), addresses(n, 2)))
            .collect();
        let account = Arc::new(Account::new(4, &nodes, Duration::ZERO));
        let env = Environment::new(account.clone());
        let done = env
            .deregister(&ClusterId::at(&Default::default(), "c"), &[doomed(1)], &[])
            .await
            .unwrap();
        assert_eq!(done.arns.len(), 4);
        assert_eq!(done.left["i-1"].len(), 4, "{done:?}");
        assert_eq!(done.deregisters, 4);
        // The cluster's 4 groups in one page of GetResources, then their targets.
        assert_eq!(done.describes, 1 + 4);
        let registered = account.registered.lock().unwrap().clone();
        assert!(registered[0].contains("i-2") && !registered[0].contains("i-1"));
        drop(registered);
        let again = env
            .deregister(&ClusterId::at(&Default::default(), "c"), &[doomed(1)], &[])
            .await
            .unwrap();
        assert_eq!((again.describes, again.deregisters), (0, 0));
        assert!(again.left.is_empty());
    }
}
