//! The Kubernetes API server of the real-time runs (`mass`, `capacity`, `fleet`, `blocks`):
//! the Kubernetes fake with a latency per request and the API server's rate limit, set up one
//! way for every benchmark.

use std::time::Duration;

use kube_fake::KubeFake;

/// The fake's latency and rate limit, as every real-time benchmark takes them on its command
/// line.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct FakeServer {
    /// The fake's latency per request, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
    /// The fake's rate limit (requests per second) and burst.
    #[arg(long, default_value_t = 200.0)]
    pub server_rps: f64,
    #[arg(long, default_value_t = 50)]
    pub server_burst: u32,
}

impl FakeServer {
    /// Sets `fake` up as this server, its evicted pods terminating for `grace` (their grace
    /// period) before they go.
    pub fn apply(&self, fake: &KubeFake, grace: Duration) {
        fake.set_eviction_grace(grace);
        fake.set_latency(Duration::from_millis(self.latency_ms));
        fake.set_rate_limit(self.server_rps, self.server_burst);
    }

    /// `5 ms latency per request, 200 requests/s with a burst of 50`.
    pub fn described(&self) -> String {
        format!(
            "{} ms latency per request, {} requests/s with a burst of {}",
            self.latency_ms, self.server_rps, self.server_burst
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults are the ones the docs' runs state, and the description reads as before.
    #[test]
    fn the_defaults_and_their_description() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            server: FakeServer,
        }
        let server = Cli::parse_from(["bench"]).server;
        assert_eq!(
            server.described(),
            "5 ms latency per request, 200 requests/s with a burst of 50"
        );
        let other = Cli::parse_from(["bench", "--server-rps", "100", "--latency-ms", "1"]).server;
        assert_eq!((other.server_rps, other.latency_ms), (100.0, 1));
    }
}
