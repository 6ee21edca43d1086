//! Rebalance policies on a simulated month of one pool family (issue 25): the capacity-hours
//! each policy cordons for rebalance recommendations, and the share of interruptions already
//! drained when their warning came.
//!
//! The model (every choice is printed with the figures, and in docs/benchmarks.md):
//!
//! - One pool family: `m5.xlarge` and `m5a.xlarge` (4 vCPU, 16 GiB each, so a node-hour is the
//!   same capacity in every pool) in `us-east-1a`, `-1b` and `-1c`: six spot pools. Two are
//!   hot (a recommendation is followed by an interruption of the same instance with
//!   probability 85 % and 70 %), four cold (5 to 15 %). See [`FAMILY`].
//! - A fixed fleet of `--nodes-per-pool` nodes per pool. An interrupted instance is replaced at
//!   once by a new instance (a new id) on the same slot; no other churn (no scale-down, no
//!   consolidation, no upgrades) unless `--node-lifetime-days` asks for it.
//! - Per pool, recommendations and interruptions without a recommendation arrive as Poisson
//!   processes (rates per day for 50 nodes, scaled with the fleet); each lands on a node of the
//!   pool drawn uniformly. A recommendation is followed, with the pool's probability, by an
//!   interruption of the same instance after a delay drawn uniformly from 2 to 25 minutes (if
//!   the instance is still there then); otherwise it is followed by nothing.
//! - The history is kept as forewarn keeps it: a [`HistoryEntry`] per event, appended as the
//!   event happens. `adaptive` decides with the project's code: [`adaptive::followed`] over the
//!   history at the recommendation's time, then [`Adaptive::choose`], with the defaults.
//! - Cordons: `cordon` (today's default) lasts until the instance is interrupted, else until
//!   the end of the simulated month: forewarn never undoes the cordon of a recommendation (its
//!   record has no `until`). `cordon-for 30m` lasts 30 minutes, or until the interruption if
//!   sooner; a later recommendation of the same instance extends it (the longer record wins, as
//!   [`forewarn::domain::cordon_record::CordonRecord::after`] keeps it). `adaptive`'s `cordon-drain`
//!   lasts its 30-minute window (the record's `until`): when no interruption came by then, the
//!   way back gives the node back. Its `otherwise` is `cordon-for 30m`. A comparison row keeps
//!   a drained node cordoned until its instance goes or the month ends (adaptive as first
//!   built).
//! - "Drained ahead": a `cordon-drain` was decided for the instance before its interruption.
//!   The drain is taken to be complete by then (the earliest interruption comes 2 minutes after
//!   a recommendation; the end-to-end bench accepts a node's evictions in well under that when
//!   the API server is not saturated). `cordon` and `cordon-for` move no pod: 0 %.
//! - An interruption "follows" a recommendation when it comes within 30 minutes of a
//!   recommendation of the same instance (`adaptive`'s window), as [`adaptive::followed`]
//!   counts it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Duration, Utc};
use forewarn::domain::event::EventKind;
use forewarn::domain::policy::adaptive::{self, Adaptive};
use forewarn::domain::policy::{PolicyAction, short};
use forewarn::domain::pool::HistoryEntry;
use forewarn::domain::pool::{CapacityType, PoolKey};

#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// The seed of the simulation's random numbers (splitmix64).
    #[arg(long, default_value_t = 25)]
    pub seed: u64,
    /// Days simulated.
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// Nodes in each pool (the rates are per 50 nodes and scale with it).
    #[arg(long, default_value_t = 50)]
    pub nodes_per_pool: usize,
    /// Mean life of a node, in days, when nodes are also replaced without an interruption
    /// (scale-down, consolidation, upgrades): each is replaced after an exponential time of
    /// this mean. 0: never (the fixed fleet of issue 25).
    #[arg(long, default_value_t = 0.0)]
    pub node_lifetime_days: f64,
}

impl Settings {
    fn params(&self) -> Params {
        Params {
            lifetime_days: self.node_lifetime_days,
            ..Params::new(self.nodes_per_pool, self.days, self.seed)
        }
    }
}

/// What a simulation runs with besides its pools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub nodes: usize,
    pub days: u32,
    pub seed: u64,
    /// Mean life of a node replaced without an interruption; 0: never.
    pub lifetime_days: f64,
}

impl Params {
    pub fn new(nodes: usize, days: u32, seed: u64) -> Params {
        Params {
            nodes,
            days,
            seed,
            lifetime_days: 0.0,
        }
    }
}

/// One pool of the simulated family.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolModel {
    pub instance_type: &'static str,
    pub zone: &'static str,
    /// Hot: most of its recommendations are followed by an interruption.
    pub hot: bool,
    /// Rebalance recommendations per day, for 50 nodes.
    pub recommendations_per_day: f64,
    /// The probability that an interruption of the same instance follows a recommendation.
    pub followed: f64,
    /// Interruptions without a recommendation before them, per day, for 50 nodes.
    pub unwarned_per_day: f64,
}

const fn pool(
    instance_type: &'static str,
    zone: &'static str,
    hot: bool,
    recommendations_per_day: f64,
    followed: f64,
    unwarned_per_day: f64,
) -> PoolModel {
    PoolModel {
        instance_type,
        zone,
        hot,
        recommendations_per_day,
        followed,
        unwarned_per_day,
    }
}

/// The simulated family: two hot pools, four cold ones.
pub const FAMILY: [PoolModel; 6] = [
    pool("m5.xlarge", "us-east-1a", true, 12.0, 0.85, 3.0),
    pool("m5.xlarge", "us-east-1b", false, 6.0, 0.10, 0.5),
    pool("m5.xlarge", "us-east-1c", false, 3.0, 0.05, 0.5),
    pool("m5a.xlarge", "us-east-1a", false, 10.0, 0.15, 0.5),
    pool("m5a.xlarge", "us-east-1b", true, 20.0, 0.70, 3.0),
    pool("m5a.xlarge", "us-east-1c", false, 4.0, 0.10, 0.5),
];

/// The rates' fleet: a pool's rates per day are for this many nodes.
const RATE_NODES: f64 = 50.0;
/// A followed interruption comes this long after its recommendation, drawn uniformly.
const FOLLOW_MIN_SECS: i64 = 2 * 60;
const FOLLOW_MAX_SECS: i64 = 25 * 60;
const DAY: i64 = 86_400;
/// The simulated month starts here (the time only names the history's entries).
const START: &str = "2026-10-01T00:00:00Z";

/// The policies compared, in the order of [`PoolOutcome::cordoned_secs`].
pub const POLICIES: [&str; 4] = [
    "`cordon` (today's default)",
    "`cordon-for 30m`",
    "`adaptive` (defaults)",
    "`adaptive` if its drains had no end (as first built, for comparison)",
];
const CORDON: usize = 0;
const CORDON_FOR: usize = 1;
const ADAPTIVE: usize = 2;
const ADAPTIVE_NO_END: usize = 3;

/// splitmix64 (Steele, Lea, Flood 2014): small, seeded, and the same on every platform and
/// version, which a crate's generator does not promise.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n - 1)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in [lo, hi] seconds.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as usize) as i64
    }

    /// The wait, in whole seconds (at least 1), until the next arrival of a Poisson process of
    /// `per_day` arrivals a day; `None` when the rate is 0.
    pub fn wait(&mut self, per_day: f64) -> Option<i64> {
        (per_day > 0.0).then(|| {
            let secs = -(1.0 - self.unit()).ln() / per_day * DAY as f64;
            (secs.ceil() as i64).max(1)
        })
    }
}

/// What one pool saw, and what each policy did there.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolOutcome {
    pub recommendations: u32,
    pub interruptions: u32,
    /// Interruptions within the window after a recommendation of the same instance.
    pub followed: u32,
    /// Of those, the instance had been drained (a `cordon-drain` decided by `adaptive`) before.
    pub drained_ahead: u32,
    /// Of the followed interruptions, those whose (latest) recommendation `adaptive` decided
    /// with at least `min-samples` recommendations in the pool's history.
    pub followed_after_warm_up: u32,
    pub drained_ahead_after_warm_up: u32,
    /// Interruptions of instances drained before, followed or not.
    pub drained_ahead_any: u32,
    /// `adaptive`'s `cordon-drain` decisions, and how many an interruption followed.
    pub drains: u32,
    pub drains_followed: u32,
    /// Recommendations `adaptive` decided with fewer than `min-samples` in the history.
    pub warm_up_recommendations: u32,
    /// Seconds from the start to the first decision with at least `min-samples`.
    pub warm_from: Option<i64>,
    /// Node-seconds cordoned for recommendations, per policy ([`POLICIES`]).
    pub cordoned_secs: [i64; 4],
}

/// One `adaptive` decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub pool: usize,
    pub at: i64,
    /// The pool's recommendations with a known outcome in the history.
    pub samples: u32,
    pub followed: u32,
    pub action: PolicyAction,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub pools: Vec<PoolOutcome>,
    pub decisions: Vec<Decision>,
    pub params: Params,
    /// History entries at the end.
    pub history: usize,
    /// Nodes replaced without an interruption.
    pub replaced: u32,
}

/// The open cordon of one instance under one policy: [start, end) in seconds; `end` may be
/// [`FOREVER`], cut at the instance's end or the month's.
#[derive(Debug, Clone, Copy, Default)]
struct Cordon(Option<(i64, i64)>);

const FOREVER: i64 = i64::MAX;

impl Cordon {
    /// Adds [start, end): merged with the open one if they meet (the longer end wins), else
    /// the open one is counted into `total` and this one opens.
    fn add(&mut self, start: i64, end: i64, total: &mut i64) {
        match self.0 {
            Some((s, e)) if start <= e => self.0 = Some((s, e.max(end))),
            Some((s, e)) => {
                *total += e - s;
                self.0 = Some((start, end));
            }
            None => self.0 = Some((start, end)),
        }
    }

    /// Counts the open cordon into `total`, cut at `at` (the instance goes, or the month ends).
    fn close(&mut self, at: i64, total: &mut i64) {
        if let Some((s, e)) = self.0.take() {
            *total += e.min(at) - s;
        }
    }
}

/// The end of a cordon an action puts at `t`, if it cordons.
fn cordon_end(action: PolicyAction, t: i64) -> Option<i64> {
    match action {
        PolicyAction::Cordon | PolicyAction::CordonDrain => Some(FOREVER),
        PolicyAction::CordonFor(d) => Some(t + d.num_seconds()),
        PolicyAction::None | PolicyAction::Delete | PolicyAction::Adaptive => None,
    }
}

struct Instance {
    pool: usize,
    slot: usize,
    gone: bool,
    /// Its recommendations: (time, drained by `adaptive`, decided past the warm-up).
    recommendations: Vec<(i64, bool, bool)>,
    cordons: [Cordon; 4],
}

/// `instance` goes; a new instance takes its slot at once.
fn replace(instances: &mut Vec<Instance>, slots: &mut [Vec<usize>], instance: usize) {
    let (pool, slot) = (instances[instance].pool, instances[instance].slot);
    instances[instance].gone = true;
    slots[pool][slot] = instances.len();
    instances.push(Instance {
        pool,
        slot,
        gone: false,
        recommendations: Vec::new(),
        cordons: Default::default(),
    });
}

fn instance_id(serial: usize) -> String {
    format!("i-0f{serial:015x}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// The pool's next recommendation arrives.
    Recommendation { pool: usize },
    /// The pool's next interruption without a recommendation arrives.
    Unwarned { pool: usize },
    /// The interruption following a recommendation of this instance.
    Followed { instance: usize },
    /// The pool's next node replaced without an interruption (`--node-lifetime-days`).
    Replaced { pool: usize },
}

/// Simulates `params.days` of `family` with `params.nodes` nodes per pool.
pub fn simulate(family: &[PoolModel], params: Params) -> Outcome {
    let mut sim = Sim::new(family, params);
    sim.first_happenings();
    while let Some(Reverse((t, _, happening))) = sim.queue.pop() {
        let interrupted = match happening {
            Happening::Recommendation { pool } => {
                sim.recommendation(pool, t);
                None
            }
            Happening::Unwarned { pool } => Some(sim.unwarned(pool, t)),
            Happening::Followed { instance } => Some(instance),
            Happening::Replaced { pool } => {
                sim.replaced(pool, t);
                None
            }
        };
        if let Some(instance) = interrupted {
            sim.interrupted(instance, t);
        }
    }
    sim.finish()
}

/// A simulation under way (see [`simulate`]): the pools, their instances and history, what
/// the policies did so far, and what is to happen.
struct Sim<'a> {
    family: &'a [PoolModel],
    /// Nodes per pool.
    nodes: usize,
    a: Adaptive,
    start: DateTime<Utc>,
    /// The end, in seconds from the start.
    end: i64,
    /// The family's rates scaled to `nodes`.
    scale: f64,
    /// Replacements per pool per day.
    replacements_per_day: f64,
    keys: Vec<PoolKey>,
    rng: SplitMix64,
    instances: Vec<Instance>,
    /// Per pool, per slot, the instance in it.
    slots: Vec<Vec<usize>>,
    out: Outcome,
    history: Vec<HistoryEntry>,
    /// What is to happen, earliest first (ties in the order pushed).
    queue: BinaryHeap<Reverse<(i64, u64, Happening)>>,
    seq: u64,
}

impl<'a> Sim<'a> {
    fn new(family: &'a [PoolModel], params: Params) -> Sim<'a> {
        let Params {
            nodes, days, seed, ..
        } = params;
        assert!(nodes > 0, "a pool needs nodes");
        // Replacements per pool per day: each node once per lifetime on average.
        let replacements_per_day = if params.lifetime_days > 0.0 {
            nodes as f64 / params.lifetime_days
        } else {
            0.0
        };
        let keys: Vec<PoolKey> = family
            .iter()
            .map(|p| PoolKey::new(CapacityType::Spot, p.instance_type, p.zone))
            .collect();
        let mut instances: Vec<Instance> = Vec::new();
        let mut slots: Vec<Vec<usize>> = Vec::new();
        for pool in 0..family.len() {
            let mut row = Vec::with_capacity(nodes);
            for slot in 0..nodes {
                row.push(instances.len());
                instances.push(Instance {
                    pool,
                    slot,
                    gone: false,
                    recommendations: Vec::new(),
                    cordons: Default::default(),
                });
            }
            slots.push(row);
        }
        Sim {
            family,
            nodes,
            a: Adaptive::default(),
            start: START.parse().expect("a time"),
            end: i64::from(days) * DAY,
            scale: nodes as f64 / RATE_NODES,
            replacements_per_day,
            keys,
            rng: SplitMix64::new(seed),
            instances,
            slots,
            out: Outcome {
                pools: vec![PoolOutcome::default(); family.len()],
                decisions: Vec::new(),
                params,
                history: 0,
                replaced: 0,
            },
            history: Vec::new(),
            queue: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn at(&self, t: i64) -> DateTime<Utc> {
        self.start + Duration::seconds(t)
    }

    /// `h` happens at `t` (unless that is past the end).
    fn push(&mut self, t: i64, h: Happening) {
        if t < self.end {
            self.seq += 1;
            self.queue.push(Reverse((t, self.seq, h)));
        }
    }

    /// The history entry of an event of `kind` of `instance` of `pool` at `t`.
    fn entry(&self, pool: usize, kind: EventKind, instance: usize, t: i64) -> HistoryEntry {
        HistoryEntry {
            pool: self.keys[pool].clone(),
            kind,
            event_id: format!("e-{}", self.history.len()),
            instance_id: instance_id(instance),
            at: self.at(t),
            unavailable_until: None,
            expires_at: self.at(self.end) + Duration::days(365),
        }
    }

    /// Each pool's first recommendation, unwarned interruption and replacement.
    fn first_happenings(&mut self) {
        let family = self.family;
        for (i, p) in family.iter().enumerate() {
            if let Some(w) = self.rng.wait(p.recommendations_per_day * self.scale) {
                self.push(w, Happening::Recommendation { pool: i });
            }
            if let Some(w) = self.rng.wait(p.unwarned_per_day * self.scale) {
                self.push(w, Happening::Unwarned { pool: i });
            }
            if let Some(w) = self.rng.wait(self.replacements_per_day) {
                self.push(w, Happening::Replaced { pool: i });
            }
        }
    }

    /// A recommendation for an instance of `pool` at `t`: the next one, the interruption that
    /// may follow it, what `adaptive` decides, and each policy's cordon.
    fn recommendation(&mut self, pool: usize, t: i64) {
        let family = self.family;
        let p = &family[pool];
        if let Some(w) = self.rng.wait(p.recommendations_per_day * self.scale) {
            self.push(t + w, Happening::Recommendation { pool });
        }
        let instance = self.slots[pool][self.rng.below(self.nodes)];
        if self.rng.chance(p.followed) {
            let delay = self.rng.between(FOLLOW_MIN_SECS, FOLLOW_MAX_SECS);
            self.push(t + delay, Happening::Followed { instance });
        }
        // adaptive decides from the history before this event, as the handler does
        // (the batch's history is read before its events are recorded).
        let a = self.a;
        let now = self.at(t);
        let counts = adaptive::followed(&self.history, a.window, a.since(now), now);
        let seen = counts.get(&self.keys[pool]).copied().unwrap_or_default();
        let (action, _why) = a.choose(Some(&self.keys[pool]), &counts);
        let entry = self.entry(pool, EventKind::RebalanceRecommendation, instance, t);
        self.history.push(entry);
        let o = &mut self.out.pools[pool];
        o.recommendations += 1;
        let warm = seen.recommendations >= a.min_samples;
        if warm {
            o.warm_from.get_or_insert(t);
        } else {
            o.warm_up_recommendations += 1;
        }
        let drained = action == PolicyAction::CordonDrain;
        if drained {
            o.drains += 1;
        }
        self.out.decisions.push(Decision {
            pool,
            at: t,
            samples: seen.recommendations,
            followed: seen.followed,
            action,
        });
        let thirty = PolicyAction::CordonFor(Duration::minutes(30));
        // forewarn's drain for a recommendation lasts the window (its record's `until`):
        // no interruption by then, the way back gives the node back.
        let lasting = if drained {
            PolicyAction::CordonFor(a.window)
        } else {
            action
        };
        let o = &mut self.out.pools[pool];
        let inst = &mut self.instances[instance];
        inst.recommendations.push((t, drained, warm));
        for (policy, act) in [
            (CORDON, PolicyAction::Cordon),
            (CORDON_FOR, thirty),
            (ADAPTIVE, lasting),
            (ADAPTIVE_NO_END, action),
        ] {
            if let Some(e) = cordon_end(act, t) {
                inst.cordons[policy].add(t, e, &mut o.cordoned_secs[policy]);
            }
        }
    }

    /// An interruption without a recommendation in `pool` at `t`: the next one; the instance
    /// it interrupts.
    fn unwarned(&mut self, pool: usize, t: i64) -> usize {
        let family = self.family;
        let p = &family[pool];
        if let Some(w) = self.rng.wait(p.unwarned_per_day * self.scale) {
            self.push(t + w, Happening::Unwarned { pool });
        }
        self.slots[pool][self.rng.below(self.nodes)]
    }

    /// A node of `pool` replaced at `t` without an event: the next replacement; its cordons
    /// end, nothing enters the history.
    fn replaced(&mut self, pool: usize, t: i64) {
        if let Some(w) = self.rng.wait(self.replacements_per_day) {
            self.push(t + w, Happening::Replaced { pool });
        }
        let instance = self.slots[pool][self.rng.below(self.nodes)];
        self.out.replaced += 1;
        let o = &mut self.out.pools[pool];
        for (policy, cordon) in self.instances[instance].cordons.iter_mut().enumerate() {
            cordon.close(t, &mut o.cordoned_secs[policy]);
        }
        replace(&mut self.instances, &mut self.slots, instance);
    }

    /// `instance` interrupted at `t` (unless it is gone already): its history entry, whether a
    /// recommendation warned of it and a drain came first, its cordons' end, its replacement.
    fn interrupted(&mut self, instance: usize, t: i64) {
        if self.instances[instance].gone {
            // Interrupted already (by an interruption without a recommendation).
            return;
        }
        let window = self.a.window.num_seconds();
        let pool = self.instances[instance].pool;
        let entry = self.entry(pool, EventKind::SpotInterruption, instance, t);
        self.history.push(entry);
        let inst = &mut self.instances[instance];
        let o = &mut self.out.pools[pool];
        o.interruptions += 1;
        let in_window: Vec<&(i64, bool, bool)> = inst
            .recommendations
            .iter()
            .filter(|(r, _, _)| *r <= t && t <= r + window)
            .collect();
        let drained_before = inst.recommendations.iter().any(|(_, d, _)| *d);
        if drained_before {
            o.drained_ahead_any += 1;
        }
        if let Some((_, _, warm)) = in_window.last() {
            o.followed += 1;
            if drained_before {
                o.drained_ahead += 1;
            }
            if *warm {
                o.followed_after_warm_up += 1;
                if drained_before {
                    o.drained_ahead_after_warm_up += 1;
                }
            }
            o.drains_followed += in_window.iter().filter(|(_, d, _)| *d).count() as u32;
        }
        for (policy, cordon) in inst.cordons.iter_mut().enumerate() {
            cordon.close(t, &mut o.cordoned_secs[policy]);
        }
        replace(&mut self.instances, &mut self.slots, instance);
    }

    /// The outcome at the end: the cordons still open counted to the end.
    fn finish(mut self) -> Outcome {
        let end = self.end;
        for inst in self.instances.iter_mut().filter(|i| !i.gone) {
            for (policy, cordon) in inst.cordons.iter_mut().enumerate() {
                cordon.close(end, &mut self.out.pools[inst.pool].cordoned_secs[policy]);
            }
        }
        self.out.history = self.history.len();
        self.out
    }
}

fn percent(part: u32, whole: u32) -> String {
    if whole == 0 {
        "n/a".into()
    } else {
        format!("{:.1} %", 100.0 * f64::from(part) / f64::from(whole))
    }
}

/// 12345.6 → `12,346`.
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < -0.5 { format!("-{out}") } else { out }
}

fn hours(secs: i64) -> f64 {
    secs as f64 / 3600.0
}

/// The markdown section of `forewarn-bench policies`.
pub fn report(s: &Settings) -> anyhow::Result<String> {
    anyhow::ensure!(s.nodes_per_pool > 0, "--nodes-per-pool must be at least 1");
    anyhow::ensure!(s.days > 0, "--days must be at least 1");
    anyhow::ensure!(
        s.node_lifetime_days >= 0.0 && s.node_lifetime_days.is_finite(),
        "--node-lifetime-days must be 0 (never) or a positive number of days"
    );
    let o = simulate(&FAMILY, s.params());
    Ok(render(&FAMILY, &o))
}

fn render(family: &[PoolModel], o: &Outcome) -> String {
    let mut out = model_section(family, o);
    out.push_str(&pool_table(family, o));
    out.push_str(&policy_table(family, o));
    out.push_str(&hours_per_pool(family, o));
    out.push_str(&goals(family, o));
    out
}

/// The sum of `f` over the pools (only the hot ones, or the cold ones, when `hot` says).
fn sum(
    family: &[PoolModel],
    o: &Outcome,
    f: &dyn Fn(&PoolOutcome) -> u32,
    hot: Option<bool>,
) -> u32 {
    family
        .iter()
        .zip(&o.pools)
        .filter(|(m, _)| hot.is_none_or(|h| m.hot == h))
        .map(|(_, p)| f(p))
        .sum()
}

/// Seconds the pools were cordoned for recommendations under `policy`.
fn cordoned(o: &Outcome, policy: usize) -> i64 {
    o.pools.iter().map(|p| p.cordoned_secs[policy]).sum()
}

/// The fleet's node-seconds over the simulated days.
fn fleet_secs(family: &[PoolModel], o: &Outcome) -> i64 {
    (family.len() * o.params.nodes) as i64 * i64::from(o.params.days) * DAY
}

/// Interruptions, those that followed a recommendation, and those `adaptive` drained ahead
/// of: in all pools, in hot pools, in hot pools past the warm-up.
struct Drained {
    followed_all: u32,
    followed_hot: u32,
    drained_all: u32,
    drained_hot: u32,
    warm_hot: u32,
    drained_warm_hot: u32,
    interruptions: u32,
    drained_any: u32,
}

/// What the pools' interruptions add up to (see [`Drained`]).
fn drained(family: &[PoolModel], o: &Outcome) -> Drained {
    let followed_all = sum(family, o, &|p| p.followed, None);
    let followed_hot = sum(family, o, &|p| p.followed, Some(true));
    let drained_all = sum(family, o, &|p| p.drained_ahead, None);
    let drained_hot = sum(family, o, &|p| p.drained_ahead, Some(true));
    let warm_hot = sum(family, o, &|p| p.followed_after_warm_up, Some(true));
    let drained_warm_hot = sum(family, o, &|p| p.drained_ahead_after_warm_up, Some(true));
    let interruptions = sum(family, o, &|p| p.interruptions, None);
    let drained_any = sum(family, o, &|p| p.drained_ahead_any, None);
    Drained {
        followed_all,
        followed_hot,
        drained_all,
        drained_hot,
        warm_hot,
        drained_warm_hot,
        interruptions,
        drained_any,
    }
}

/// The report's heading and the model it simulates.
fn model_section(family: &[PoolModel], o: &Outcome) -> String {
    let a = Adaptive::default();
    let Params {
        nodes,
        days,
        seed,
        lifetime_days,
    } = o.params;
    let scale = nodes as f64 / RATE_NODES;
    let fleet_secs = fleet_secs(family, o);
    let churn = if lifetime_days > 0.0 {
        format!(
            "Besides, every node is replaced without an interruption after an exponential time              of mean {lifetime_days} days (scale-down, consolidation, upgrades): {} nodes were;              their cordons end there.",
            o.replaced
        )
    } else {
        "Nothing else replaces nodes (no scale-down, no consolidation, no upgrades).".to_string()
    };
    format!(
        "### Rebalance policies: {days} days of one pool family, {n} nodes per pool (seed {seed})\n\n\
         `forewarn-bench policies --seed {seed} --days {days} --nodes-per-pool {n}{lifetime}`. A simulation, not a \
         measurement: what the figures say depends on the model below, whose every parameter is \
         listed here.\n\n\
         **The model.** Six spot pools of one family (`m5.xlarge` and `m5a.xlarge`, 4 vCPU and \
         16 GiB each, so a node-hour is the same capacity in every pool, in three zones), {n} \
         nodes each, a fixed fleet: an interrupted instance is replaced at once by a new one on \
         the same slot. {churn} Per \
         pool, rebalance recommendations and interruptions without a recommendation arrive as \
         Poisson processes at the rates below (given per 50 nodes, ×{scale:.2} here), each on \
         a node of the pool drawn uniformly. A recommendation is followed, with the pool's \
         probability, by an interruption of the same instance {fmin} to {fmax} minutes later \
         (uniform; if the instance is still there), else by nothing. The history is forewarn's: \
         one `HistoryEntry` per event as it happens; `adaptive` decides each recommendation \
         with the project's code (`adaptive::followed` over the history at that time, then \
         `Adaptive::choose`), defaults: window {w}, threshold {th:.0} %, min-samples {ms}, \
         {d} days, otherwise `{ow}`. An interruption *follows* a recommendation when it comes \
         within {w} of one of the same instance.\n\n\
         **Cordons.** `cordon` (today's default): from the recommendation until the instance \
         is interrupted, else until the end of the simulated month: forewarn never undoes the \
         cordon of a recommendation (its record has no `until`). `cordon-for 30m`: 30 minutes, \
         or until the interruption if sooner; a later recommendation of the instance extends \
         it. `adaptive`: its `cordon-drain` lasts the window ({w}, the record's `until`): when no \
         interruption came by then, the way back gives the node back; its `otherwise` is \
         `cordon-for 30m`. The last row, for comparison, keeps a drained node cordoned until its \
         instance goes or the month ends (adaptive as first built, before its drains had an \
         end). Capacity-hours: node-hours cordoned for recommendations, out of {fleet} \
         node-hours of fleet.\n\n\
         **Drained ahead**: `adaptive` decided `cordon-drain` for the instance before its \
         interruption; the drain is taken to be complete by then (the earliest follow-up comes \
         {fmin} minutes after the recommendation). `cordon` and `cordon-for` move no pod: 0 %.\n\n",
        n = nodes,
        lifetime = if lifetime_days > 0.0 {
            format!(" --node-lifetime-days {lifetime_days}")
        } else {
            String::new()
        },
        fmin = FOLLOW_MIN_SECS / 60,
        fmax = FOLLOW_MAX_SECS / 60,
        w = short(a.window),
        th = a.threshold * 100.0,
        ms = a.min_samples,
        d = a.days,
        ow = a.otherwise,
        fleet = thousands(hours(fleet_secs)),
    )
}

/// The table of the pools: the model's rates, and what happened in each.
fn pool_table(family: &[PoolModel], o: &Outcome) -> String {
    let mut out = String::new();
    out.push_str(
        "| pool | model: hot? | recommendations / day (per 50 nodes) | followed (model) | \
         interruptions without recommendation / day | recommendations | interruptions \
         (followed) | `adaptive`: warm from (h) | decided in warm-up | `cordon-drain` \
         (followed) | drained ahead of followed |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (m, p) in family.iter().zip(&o.pools) {
        out.push_str(&format!(
            "| `{}` | {} | {} | {:.0} % | {} | {} | {} ({}) | {} | {} | {} ({}) | {} of {} ({}) |\n",
            PoolKey::new(CapacityType::Spot, m.instance_type, m.zone),
            if m.hot { "hot" } else { "cold" },
            m.recommendations_per_day,
            m.followed * 100.0,
            m.unwarned_per_day,
            p.recommendations,
            p.interruptions,
            p.followed,
            p.warm_from
                .map_or("never".into(), |t| format!("{:.1}", t as f64 / 3600.0)),
            p.warm_up_recommendations,
            p.drains,
            p.drains_followed,
            p.drained_ahead,
            p.followed,
            percent(p.drained_ahead, p.followed),
        ));
    }
    out
}

/// The totals, and the table of the policies: capacity cordoned, interruptions drained ahead.
fn policy_table(family: &[PoolModel], o: &Outcome) -> String {
    let Drained {
        followed_all,
        followed_hot,
        drained_all,
        drained_hot,
        warm_hot,
        drained_warm_hot,
        interruptions,
        drained_any,
    } = drained(family, o);
    let fleet_secs = fleet_secs(family, o);
    let mut out = String::new();
    out.push_str(&format!(
        "\n{} recommendations, {} interruptions ({} following a recommendation, {} without), \
         {} history entries.\n\n",
        sum(family, o, &|p| p.recommendations, None),
        interruptions,
        followed_all,
        interruptions - followed_all,
        o.history
    ));
    out.push_str(
        "| policy | capacity-hours cordoned for recommendations | of the fleet's | × `cordon`'s | \
         followed interruptions drained ahead: all pools | hot pools | hot pools, past the \
         warm-up | all interruptions drained ahead |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let base = cordoned(o, CORDON);
    for (policy, name) in POLICIES.iter().enumerate() {
        let s = cordoned(o, policy);
        let adaptive_row = policy == ADAPTIVE || policy == ADAPTIVE_NO_END;
        let (all, hot, warm, any) = if adaptive_row {
            (
                format!(
                    "{drained_all} of {followed_all} ({})",
                    percent(drained_all, followed_all)
                ),
                format!(
                    "{drained_hot} of {followed_hot} ({})",
                    percent(drained_hot, followed_hot)
                ),
                format!(
                    "{drained_warm_hot} of {warm_hot} ({})",
                    percent(drained_warm_hot, warm_hot)
                ),
                format!(
                    "{drained_any} of {interruptions} ({})",
                    percent(drained_any, interruptions)
                ),
            )
        } else {
            (
                format!("0 of {followed_all} (0 %)"),
                format!("0 of {followed_hot} (0 %)"),
                format!("0 of {warm_hot} (0 %)"),
                format!("0 of {interruptions} (0 %)"),
            )
        };
        out.push_str(&format!(
            "| {name} | {} | {:.1} % | {} | {all} | {hot} | {warm} | {any} |\n",
            thousands(hours(s)),
            100.0 * s as f64 / fleet_secs as f64,
            if base > 0 {
                format!("{:.3}", s as f64 / base as f64)
            } else {
                "n/a".into()
            },
        ));
    }
    out
}

/// Capacity-hours cordoned per pool and policy.
fn hours_per_pool(family: &[PoolModel], o: &Outcome) -> String {
    let mut out = String::new();
    out.push_str("\nCapacity-hours cordoned per pool (node-hours):\n\n| pool | model: hot? |");
    for name in POLICIES {
        out.push_str(&format!(" {name} |"));
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(POLICIES.len()));
    out.push('\n');
    for (m, p) in family.iter().zip(&o.pools) {
        out.push_str(&format!(
            "| `{}` | {} |",
            PoolKey::new(CapacityType::Spot, m.instance_type, m.zone),
            if m.hot { "hot" } else { "cold" }
        ));
        for policy in 0..POLICIES.len() {
            out.push_str(&format!(" {} |", thousands(hours(p.cordoned_secs[policy]))));
        }
        out.push('\n');
    }
    out
}

/// Whether the goals of issue 25 are met, and the warm-up.
fn goals(family: &[PoolModel], o: &Outcome) -> String {
    let a = Adaptive::default();
    let Drained {
        followed_hot,
        drained_hot,
        warm_hot,
        drained_warm_hot,
        ..
    } = drained(family, o);
    let base = cordoned(o, CORDON);
    let mut out = String::new();
    let ratio = cordoned(o, ADAPTIVE) as f64 / base.max(1) as f64;
    let hot_share = if followed_hot == 0 {
        0.0
    } else {
        f64::from(drained_hot) / f64::from(followed_hot)
    };
    let met = |ok: bool| if ok { "met" } else { "not met" };
    out.push_str(&format!(
        "\nGoals (issue 25):\n\n\
         - `adaptive` cordons at most a third of `cordon`'s capacity-hours: **{}** ({} against \
         {} node-hours, {:.3}×).\n\
         - `adaptive` drains ahead at least 80 % of the interruptions that follow \
         recommendations in hot pools: **{}** ({} of {}, {}; past the warm-up, {} of {}, {}).\n\n\
         The warm-up: a pool's recommendations are decided `{}` until its history holds \
         {} recommendations with a known outcome (a recommendation not followed is known only \
         {} after it); the table gives, per pool, the hour of the first decision past it and \
         how many recommendations were decided before.\n",
        met(ratio <= 1.0 / 3.0),
        thousands(hours(cordoned(o, ADAPTIVE))),
        thousands(hours(base)),
        ratio,
        met(hot_share >= 0.8),
        drained_hot,
        followed_hot,
        percent(drained_hot, followed_hot),
        drained_warm_hot,
        warm_hot,
        percent(drained_warm_hot, warm_hot),
        a.otherwise,
        a.min_samples,
        short(a.window),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_its_reference_values() {
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            assert!(r.below(50) < 50);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            let b = r.between(120, 1500);
            assert!((120..=1500).contains(&b));
        }
        assert_eq!(r.wait(0.0), None);
        // The mean wait of 24 a day is an hour.
        let n = 20_000;
        let mean = (0..n).map(|_| r.wait(24.0).unwrap()).sum::<i64>() as f64 / n as f64;
        assert!((mean - 3600.0).abs() < 100.0, "{mean}");
    }

    #[test]
    fn the_simulation_is_the_same_for_a_seed() {
        let one = simulate(&FAMILY, Params::new(20, 4, 11));
        assert_eq!(one, simulate(&FAMILY, Params::new(20, 4, 11)));
        assert_ne!(one, simulate(&FAMILY, Params::new(20, 4, 12)));
        assert!(one.pools.iter().all(|p| p.recommendations > 0));
    }

    #[test]
    fn a_pool_whose_every_recommendation_is_followed_is_drained_past_min_samples() {
        let family = [pool("c5.large", "us-east-1a", true, 20.0, 1.0, 0.0)];
        let o = simulate(&family, Params::new(50, 5, 3));
        let min = Adaptive::default().min_samples;
        let p = &o.pools[0];
        assert!(p.recommendations > 50, "{p:?}");
        assert!(p.warm_up_recommendations >= min, "{p:?}");
        assert!(p.warm_from.is_some(), "{p:?}");
        for d in &o.decisions {
            let expected = if d.samples >= min {
                PolicyAction::CordonDrain
            } else {
                Adaptive::default().otherwise
            };
            assert_eq!(d.action, expected, "{d:?}");
            assert_eq!(d.samples, d.followed, "{d:?}");
        }
        assert_eq!(p.drains, p.recommendations - p.warm_up_recommendations);
        // Every followed interruption past the warm-up was drained ahead.
        assert_eq!(p.drained_ahead_after_warm_up, p.followed_after_warm_up);
        assert!(p.followed_after_warm_up > 0);
    }

    #[test]
    fn a_pool_never_followed_is_never_drained_and_adaptive_is_cordon_for() {
        let family = [pool("c5.large", "us-east-1a", false, 20.0, 0.0, 0.0)];
        let o = simulate(&family, Params::new(30, 5, 5));
        let p = &o.pools[0];
        assert_eq!(p.drains, 0);
        assert_eq!(p.interruptions, 0);
        assert_eq!(p.cordoned_secs[ADAPTIVE], p.cordoned_secs[CORDON_FOR]);
        // No instance ever goes: every cordon of `cordon` lasts to the end.
        assert!(
            p.cordoned_secs[CORDON] > 10 * p.cordoned_secs[CORDON_FOR],
            "{p:?}"
        );
    }

    #[test]
    fn nodes_replaced_without_an_interruption_end_their_cordons() {
        let family = [pool("c5.large", "us-east-1a", false, 20.0, 0.0, 0.0)];
        let fixed = simulate(&family, Params::new(30, 10, 5));
        let churned = simulate(
            &family,
            Params {
                lifetime_days: 1.0,
                ..Params::new(30, 10, 5)
            },
        );
        assert_eq!(fixed.replaced, 0);
        assert!(churned.replaced > 200, "{}", churned.replaced);
        // No interruption either way, so nothing enters the history but the recommendations.
        assert_eq!(churned.pools[0].interruptions, 0);
        assert_eq!(churned.history as u32, churned.pools[0].recommendations);
        // A cordon lasts a day on average instead of to the end of the ten days.
        let (f, c) = (fixed.pools[0].cordoned_secs, churned.pools[0].cordoned_secs);
        assert!(c[CORDON] * 2 < f[CORDON], "{c:?} {f:?}");
        assert!(c[CORDON] >= c[CORDON_FOR]);
    }

    #[test]
    fn cordon_holds_at_least_as_long_as_cordon_for_and_the_way_back_shortens_adaptive() {
        for seed in [1, 2, 3] {
            let o = simulate(&FAMILY, Params::new(20, 6, seed));
            for p in &o.pools {
                let c = p.cordoned_secs;
                assert!(c[CORDON] >= c[CORDON_FOR], "{p:?}");
                assert!(c[CORDON] >= c[ADAPTIVE_NO_END], "{p:?}");
                assert!(c[ADAPTIVE_NO_END] >= c[ADAPTIVE], "{p:?}");
                assert!(c[ADAPTIVE] >= c[CORDON_FOR], "{p:?}");
                assert!(p.drained_ahead <= p.followed && p.followed <= p.interruptions);
            }
        }
    }

    #[test]
    fn cordons_of_an_instance_merge_and_are_cut_where_it_goes() {
        let mut total = 0;
        let mut c = Cordon::default();
        c.add(0, 1800, &mut total);
        c.add(1000, 2800, &mut total); // extends
        c.add(5000, 6800, &mut total); // a new one: the first counted
        assert_eq!(total, 2800);
        c.add(6000, FOREVER, &mut total);
        c.close(10_000, &mut total);
        assert_eq!(total, 2800 + 5000);
        c.close(20_000, &mut total);
        assert_eq!(total, 2800 + 5000, "closed once");
    }

    #[test]
    fn the_report_names_the_goals_and_the_seed() {
        let o = simulate(&FAMILY, Params::new(10, 2, 9));
        let text = render(&FAMILY, &o);
        assert!(text.contains("(seed 9)"), "{text}");
        assert!(text.contains("at most a third"), "{text}");
        assert!(text.contains("at least 80 %"), "{text}");
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
    }
}
