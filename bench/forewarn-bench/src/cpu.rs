//! How much of a run the CPU was the bottleneck: every benchmark that measures in real time
//! (cold start, one event end to end, mass, capacity, Capacity Blocks, many clusters) runs
//! under a [`Meter`] and prints its [`Load`] beside its figures (`docs/benchmarks/method.md`,
//! "When the machine is the bottleneck").
//!
//! Two measures, both from `/proc`:
//!
//! - **CPU-bound share**: every [`EVERY`] the meter reads `/proc/stat` (the whole machine) and
//!   counts the sample CPU-bound when every core was at least [`BUSY`] busy since the last one
//!   (busy: anything but `idle` and `iowait`; `steal`, time the hypervisor gave to someone
//!   else, counts as busy: the run could not have it). The share is the CPU-bound samples over
//!   all samples.
//! - **The bench's processes**: the CPU time of this process and of its descendants (moto, the
//!   bootstraps of the cold starts; `utime + stime + cutime + cstime` of each one's
//!   `/proc/<pid>/stat`, so children that ended and were waited for count too) over the run,
//!   as a share of the whole machine's time over the run (every core's ticks of `/proc/stat`,
//!   busy or idle): both in the same clock ticks, so no tick rate is assumed.
//!
//! A figure out of its goal on a run CPU-bound for more than [`NOT_COMPARABLE_ABOVE`] of its
//! samples is flagged "CPU-bound: not comparable" ([`Load::verdict`]): the machine was too slow
//! for the run to say whether forewarn regressed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the meter samples `/proc/stat`.
pub const EVERY: Duration = Duration::from_millis(100);
/// A core this busy over a sample (a share of its time) is saturated.
pub const BUSY: f64 = 0.9;
/// A run CPU-bound for more than this share of its samples cannot tell a figure out of its
/// goal from a regression.
pub const NOT_COMPARABLE_ABOVE: f64 = 0.1;
/// What the report says of a figure out of its goal on such a run.
pub const NOT_COMPARABLE: &str = "CPU-bound: not comparable";

/// One core's counters of `/proc/stat`, in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ticks {
    /// Every tick but `idle` and `iowait`.
    pub busy: u64,
    /// Every tick: `user nice system idle iowait irq softirq steal` (`guest` and `guest_nice`
    /// are already in `user` and `nice`).
    pub total: u64,
}

/// The cores of `/proc/stat` (its `cpuN` lines, in order; the `cpu` total left out).
pub fn parse_stat(text: &str) -> Vec<Ticks> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            let n = name.strip_prefix("cpu")?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let v: Vec<u64> = fields.take(8).map(|f| f.parse().unwrap_or(0)).collect();
            let total: u64 = v.iter().sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            Some(Ticks {
                busy: total.saturating_sub(idle),
                total,
            })
        })
        .collect()
}

/// Whether every core was at least `busy` busy between `before` and `after` (the same cores);
/// `None` when the two do not compare (cores changed, or no tick passed on one of them).
pub fn saturated(before: &[Ticks], after: &[Ticks], busy: f64) -> Option<bool> {
    if before.len() != after.len() || before.is_empty() {
        return None;
    }
    let mut all = true;
    for (b, a) in before.iter().zip(after) {
        let total = a.total.checked_sub(b.total).filter(|t| *t > 0)?;
        let used = a.busy.saturating_sub(b.busy);
        all &= used as f64 >= busy * total as f64;
    }
    Some(all)
}

/// Every tick of every core between `before` and `after`.
fn machine_ticks(before: &[Ticks], after: &[Ticks]) -> u64 {
    let sum = |v: &[Ticks]| v.iter().map(|t| t.total).sum::<u64>();
    sum(after).saturating_sub(sum(before))
}

/// One process of `/proc/<pid>/stat`: its pid, its parent's, and its ticks with its waited-for
/// children's (`utime + stime + cutime + cstime`).
pub fn parse_proc_stat(text: &str) -> Option<(u32, u32, u64)> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    // The command may hold spaces and parentheses: the fields follow the last `)`.
    let rest: Vec<&str> = text
        .get(text.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let ppid = rest.get(1)?.parse().ok()?;
    let ticks = (11..=14)
        .map(|i| rest.get(i)?.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((pid, ppid, ticks))
}

/// The ticks of `root` and of every descendant of it among `procs` (pid, parent, ticks).
pub fn tree_ticks(procs: &[(u32, u32, u64)], root: u32) -> u64 {
    let mut tree = vec![root];
    let mut total = 0;
    while let Some(p) = tree.pop() {
        for &(pid, ppid, ticks) in procs {
            if pid == p {
                total += ticks;
            }
            if ppid == p && pid != p {
                tree.push(pid);
            }
        }
    }
    total
}

/// The ticks of this process and of its descendants now.
fn own_tree() -> u64 {
    let procs: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|text| parse_proc_stat(&text))
        .collect();
    tree_ticks(&procs, std::process::id())
}

fn machine() -> Vec<Ticks> {
    std::fs::read_to_string("/proc/stat")
        .map(|t| parse_stat(&t))
        .unwrap_or_default()
}

/// What a run cost the machine (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Samples taken, and of them CPU-bound.
    pub samples: usize,
    pub bound: usize,
    /// The machine's cores, and the run's wall time.
    pub cores: usize,
    pub wall: Duration,
    /// The bench's processes' ticks, and the machine's (every core, busy or idle).
    pub tree_ticks: u64,
    pub machine_ticks: u64,
}

impl Load {
    /// The share of the samples that were CPU-bound (0 without samples).
    pub fn bound_share(&self) -> f64 {
        self.bound as f64 / self.samples.max(1) as f64
    }

    /// The bench's processes' share of the machine over the run.
    pub fn tree_share(&self) -> f64 {
        self.tree_ticks as f64 / self.machine_ticks.max(1) as f64
    }

    /// Whether a figure out of its goal on this run may be taken for a regression.
    pub fn comparable(&self) -> bool {
        self.bound_share() <= NOT_COMPARABLE_ABOVE
    }

    /// Two runs as one: their samples and ticks added up.
    pub fn and(self, other: Load) -> Load {
        Load {
            samples: self.samples + other.samples,
            bound: self.bound + other.bound,
            cores: self.cores.max(other.cores),
            wall: self.wall + other.wall,
            tree_ticks: self.tree_ticks + other.tree_ticks,
            machine_ticks: self.machine_ticks + other.machine_ticks,
        }
    }

    /// The table's cell: `CPU-bound 3 % of the run (2 of 61 samples); the bench's processes
    /// 1.24 of 2 cores (62 %)`.
    pub fn cell(&self) -> String {
        let share = self.tree_share();
        format!(
            "CPU-bound {:.0} % of the run ({} of {} samples); the bench's processes {:.2} of {} cores ({:.0} %)",
            100.0 * self.bound_share(),
            self.bound,
            self.samples,
            share * self.cores as f64,
            self.cores,
            100.0 * share,
        )
    }

    /// What a goal's cell says: `met` or `missed`, and, missed on a run CPU-bound for too long,
    /// that the miss is not comparable.
    pub fn verdict(&self, met: bool, said_met: &str, said_missed: &str) -> String {
        if met {
            said_met.to_string()
        } else {
            self.marked(false, said_missed.to_string())
        }
    }

    /// `figure`, flagged "CPU-bound: not comparable" when it is out of its goal (not `met`) on a
    /// run CPU-bound for too long.
    pub fn marked(&self, met: bool, figure: String) -> String {
        if met || self.comparable() {
            figure
        } else {
            format!("{figure} ({NOT_COMPARABLE})")
        }
    }
}

/// The table row of the loads of a section's runs: its name, one cell per run (`None`: not
/// run), the threshold, blank cells up to `columns`.
pub fn row(columns: usize, loads: &[Option<Load>]) -> String {
    let mut cells = vec![format!(
        "CPU: samples every {} ms with every core ≥ {:.0} % busy; the bench's processes' CPU",
        EVERY.as_millis(),
        100.0 * BUSY
    )];
    cells.extend(
        loads
            .iter()
            .map(|l| l.as_ref().map_or("not run".into(), Load::cell)),
    );
    cells.push(format!(
        "a figure out of its goal on a run CPU-bound over {:.0} %: \"{NOT_COMPARABLE}\"",
        100.0 * NOT_COMPARABLE_ABOVE
    ));
    while cells.len() < columns {
        cells.push(String::new());
    }
    format!("| {} |\n", cells.join(" | "))
}

/// Samples the machine from [`Meter::start`] until [`Meter::stop`].
pub struct Meter {
    stop: Arc<AtomicBool>,
    sampler: JoinHandle<(usize, usize)>,
    began: Instant,
    first: Vec<Ticks>,
    tree: u64,
}

impl Meter {
    pub fn start() -> Meter {
        let stop = Arc::new(AtomicBool::new(false));
        let first = machine();
        let sampler = {
            let stop = stop.clone();
            let mut last = first.clone();
            // A thread of its own, not a task: a starved runtime must not starve the meter.
            std::thread::spawn(move || {
                let (mut samples, mut bound) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EVERY);
                    let now = machine();
                    if let Some(all) = saturated(&last, &now, BUSY) {
                        samples += 1;
                        bound += usize::from(all);
                    }
                    last = now;
                }
                (samples, bound)
            })
        };
        Meter {
            stop,
            sampler,
            began: Instant::now(),
            tree: own_tree(),
            first,
        }
    }

    pub fn stop(self) -> Load {
        let wall = self.began.elapsed();
        let tree = own_tree().saturating_sub(self.tree);
        let last = machine();
        self.stop.store(true, Ordering::Relaxed);
        let (samples, bound) = self.sampler.join().unwrap_or_default();
        Load {
            samples,
            bound,
            cores: last.len(),
            wall,
            tree_ticks: tree,
            machine_ticks: machine_ticks(&self.first, &last),
        }
    }
}

/// `run` under a [`Meter`]: its output and its load.
pub async fn measured<T>(run: impl Future<Output = T>) -> (T, Load) {
    let meter = Meter::start();
    let out = run.await;
    (out, meter.stop())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  300 0 100 500 100 0 0 0 0 0\n\
                        cpu0 200 0 50 200 50 0 0 0 0 0\n\
                        cpu1 100 0 50 300 50 0 0 10 5 0\n\
                        intr 12345 0 0\n\
                        cpufreq 1\n";

    #[test]
    fn the_cores_are_the_cpu_n_lines_and_busy_is_all_but_idle_and_iowait() {
        let cores = parse_stat(STAT);
        assert_eq!(
            cores,
            [
                Ticks {
                    busy: 250,
                    total: 500
                },
                // steal (10) counts as busy; guest (5) is already in user.
                Ticks {
                    busy: 160,
                    total: 510
                },
            ]
        );
        assert!(parse_stat("intr 1 2\n").is_empty());
    }

    #[test]
    fn a_sample_is_cpu_bound_when_every_core_was_at_least_90_percent_busy() {
        let t = |busy, total| Ticks { busy, total };
        let before = [t(0, 0), t(0, 0)];
        assert_eq!(saturated(&before, &[t(9, 10), t(10, 10)], BUSY), Some(true));
        assert_eq!(
            saturated(&before, &[t(9, 10), t(8, 10)], BUSY),
            Some(false),
            "one core with room: not the CPU's fault"
        );
        assert_eq!(saturated(&before, &[t(9, 10)], BUSY), None, "cores changed");
        assert_eq!(saturated(&before, &[t(0, 0), t(5, 5)], BUSY), None);
    }

    #[test]
    fn the_tree_is_the_process_and_its_descendants_not_its_parent_or_siblings() {
        let line = "42 (tokio (rt) x) S 7 42 42 0 -1 4194560 100 0 0 0 \
                    30 20 5 4 20 0 8 0 100 0 0";
        assert_eq!(parse_proc_stat(line), Some((42, 7, 59)));
        assert_eq!(parse_proc_stat("garbage"), None);
        let procs = [
            (1, 0, 1000),
            (7, 1, 100),
            (42, 7, 59),
            (50, 42, 10),
            (51, 50, 1),
            (60, 7, 500),
        ];
        assert_eq!(tree_ticks(&procs, 42), 70);
        assert_eq!(tree_ticks(&procs, 99), 0);
    }

    #[test]
    fn the_shares_and_the_verdict() {
        let load = Load {
            samples: 50,
            bound: 6,
            cores: 2,
            wall: Duration::from_secs(5),
            tree_ticks: 250,
            machine_ticks: 1000,
        };
        assert!((load.bound_share() - 0.12).abs() < 1e-9);
        assert!(!load.comparable(), "12 % is over the 10 % threshold");
        assert_eq!(
            load.cell(),
            "CPU-bound 12 % of the run (6 of 50 samples); the bench's processes 0.50 of 2 cores (25 %)"
        );
        assert_eq!(load.verdict(true, "met", "not met"), "met");
        assert_eq!(
            load.verdict(false, "met", "not met"),
            "not met (CPU-bound: not comparable)"
        );
        assert_eq!(load.marked(true, "1.0 s".into()), "1.0 s");
        assert_eq!(
            load.marked(false, "9.0 s".into()),
            "9.0 s (CPU-bound: not comparable)"
        );
        let calm = Load { bound: 5, ..load };
        assert!(calm.comparable(), "10 % is not over it");
        assert_eq!(calm.verdict(false, "met", "not met"), "not met");
        let both = load.and(calm);
        assert_eq!((both.samples, both.bound), (100, 11));
        assert_eq!(Load::default().bound_share(), 0.0);
        assert_eq!(row(4, &[Some(load), None]).matches('|').count(), 5);
    }

    #[test]
    fn a_busy_loop_shows_in_the_bench_processes_share() {
        let meter = Meter::start();
        let until = Instant::now() + Duration::from_millis(400);
        let mut x = 0u64;
        while Instant::now() < until {
            x = x.wrapping_add(1);
        }
        let load = meter.stop();
        assert!(x > 0);
        assert!(load.samples >= 2, "{load:?}");
        assert!(load.cores >= 1);
        // One thread spinning is up to a core's worth (less what a busy machine leaves it):
        // well above nothing, and no more than the cores of the machine.
        let cores = load.tree_share() * load.cores as f64;
        assert!(cores > 0.1 && cores <= load.cores as f64 + 0.1, "{load:?}");
    }
}
