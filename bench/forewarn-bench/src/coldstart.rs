//! Cold start: each release `bootstrap` started against the runtime API emulator, as Lambda
//! starts a new execution environment; exec → first `/next`, first event → response, peak RSS,
//! sizes. Two floors, measured in the same run: the empty `lambda_runtime` function, and the
//! SDK floor (`clients-function`: the AWS and Kubernetes clients set up, nothing else).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use crate::emulator::{Answer, Emulator, Start};
use crate::stats::{mib_of_bytes, mib_of_kb, ms, percentile, proc_status_kb, ratio};

/// How long a start or an invocation may take before the run fails.
const LIMIT: Duration = Duration::from_secs(60);

/// One function to start: its build, environment and first event.
pub struct Function {
    pub name: &'static str,
    /// How the report names it (markdown: the name in backticks, and what differs in this start).
    pub label: String,
    pub bootstrap: PathBuf,
    pub zip: PathBuf,
    pub env: Vec<(String, String)>,
    pub event: Vec<u8>,
    /// What the event is, for the report.
    pub event_note: &'static str,
}

/// One cold start.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub to_first_next: Duration,
    pub event_to_response: Duration,
    pub peak_rss_kb: u64,
}

/// Starts `f` once in a fresh execution environment (a new process, a new state directory).
pub async fn run_once(f: &Function) -> anyhow::Result<Sample> {
    let emu = Emulator::start(f.name).await?;
    let dir = tempfile::Builder::new()
        .prefix("forewarn-bench-")
        .tempdir()?;
    let log_path = dir.path().join("function.log");
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = tokio::process::Command::new(&f.bootstrap);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", emu.runtime_api())
        .env("AWS_LAMBDA_FUNCTION_NAME", f.name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{}", f.name),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_SESSION_TOKEN", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("LAMBDA_TASK_ROOT", dir.path())
        .env("FOREWARN_STATE_DIR", dir.path().join("state"))
        .envs(f.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    let exec = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", f.bootstrap.display()))?;
    let pid = child.id();
    let tail = |what: String| -> anyhow::Error {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: String = text.lines().rev().take(5).collect::<Vec<_>>().join("\n");
        anyhow::anyhow!("{}: {what}; last lines of its log:\n{tail}", f.name)
    };
    let ready = tokio::select! {
        start = emu.started() => start,
        status = child.wait() => return Err(tail(format!("exited ({status:?}) before its first /next"))),
        () = tokio::time::sleep(LIMIT) => return Err(tail("no /next within the limit".into())),
    };
    let ready_at = match ready {
        Start::Ready(at) => at,
        Start::Failed(why) => return Err(tail(format!("init error: {why}"))),
        Start::Starting => bail!("{}: not started", f.name),
    };
    let sent = Instant::now();
    let answered = tokio::select! {
        answer = emu.invoke(&f.event, LIMIT) => answer?,
        status = child.wait() => return Err(tail(format!("exited ({status:?}) during the invocation"))),
    };
    let (answer, at) = answered;
    if let Answer::Error(body) = answer {
        return Err(tail(format!(
            "the invocation failed: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    let peak_rss_kb = proc_status_kb(pid, "VmHWM").unwrap_or_default();
    let _ = child.start_kill();
    let _ = child.wait().await;
    Ok(Sample {
        to_first_next: ready_at.saturating_duration_since(exec),
        event_to_response: at.saturating_duration_since(sent),
        peak_rss_kb,
    })
}

fn size(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// `runs` cold starts of each function, interleaved (one of each, then again) so that drift
/// of the machine hits all alike; the report as a markdown section. The first function is the
/// floor, the second the SDK floor.
pub async fn report(functions: &[Function], runs: usize) -> anyhow::Result<String> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); functions.len()];
    let meter = crate::cpu::Meter::start();
    for _ in 0..runs {
        for (f, out) in functions.iter().zip(&mut samples) {
            out.push(run_once(f).await?);
        }
    }
    let load = meter.stop();
    let stat = |s: &[Sample], p: f64, pick: fn(&Sample) -> Duration| {
        let v: Vec<Duration> = s.iter().map(pick).collect();
        percentile(&v, p).unwrap_or_default()
    };
    let first = |s: &Sample| s.to_first_next;
    let answer = |s: &Sample| s.event_to_response;
    let floor = &samples[0];
    let sdk_floor = &samples[1];
    let mut out = String::new();
    out.push_str(&format!(
        "### Cold start ({runs} starts of each, interleaved)\n\n\
         | function | exec → first `/next` median (p90) | × floor | × SDK floor | first event → response median (p90) | peak RSS median (max) | bootstrap | zip |\n\
         |---|---|---|---|---|---|---|---|\n"
    ));
    for (f, s) in functions.iter().zip(&samples) {
        let mut rss: Vec<u64> = s.iter().map(|x| x.peak_rss_kb).collect();
        rss.sort_unstable();
        let floor_note = if std::ptr::eq(s, floor) {
            " (floor)"
        } else if std::ptr::eq(s, sdk_floor) {
            " (SDK floor)"
        } else {
            ""
        };
        out.push_str(&format!(
            "| {}{floor_note} | {} ({}) | {} | {} | {} ({}) | {} ({}) | {} | {} |\n",
            f.label,
            ms(stat(s, 50.0, first)),
            ms(stat(s, 90.0, first)),
            ratio(stat(s, 50.0, first), stat(floor, 50.0, first)),
            ratio(stat(s, 50.0, first), stat(sdk_floor, 50.0, first)),
            ms(stat(s, 50.0, answer)),
            ms(stat(s, 90.0, answer)),
            mib_of_kb(rss.get(rss.len() / 2).copied().unwrap_or_default()),
            mib_of_kb(rss.last().copied().unwrap_or_default()),
            size(&f.bootstrap).map_or("?".into(), mib_of_bytes),
            size(&f.zip).map_or("?".into(), mib_of_bytes),
        ));
    }
    out.push_str(&crate::cpu::row(8, &[Some(load)]));
    out.push_str("\nFirst events: ");
    let notes: Vec<String> = functions
        .iter()
        .map(|f| format!("{}: {}", f.label, f.event_note))
        .collect();
    out.push_str(&notes.join("; "));
    out.push_str(".\n");
    Ok(out)
}
