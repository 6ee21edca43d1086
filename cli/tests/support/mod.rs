//! The one way the tests run the `forewarn` binary: in the workspace root (whose `events/` the
//! relative paths name) or another folder, with the embedded store in a folder of the test's,
//! and none of the caller's `FOREWARN_TABLE` and `FOREWARN_CLUSTERS`; each test adds the
//! environment it needs.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `forewarn` command to run.
pub struct Forewarn {
    command: Command,
}

impl Forewarn {
    /// `forewarn` in the workspace root, its embedded store in `state`.
    pub fn new(state: &Path) -> Forewarn {
        let mut command = Command::new(env!("CARGO_BIN_EXE_forewarn"));
        command
            .current_dir(root())
            .env("FOREWARN_STATE_DIR", state)
            .env_remove("FOREWARN_TABLE")
            .env_remove("FOREWARN_CLUSTERS");
        Forewarn { command }
    }

    /// Run in `dir` (whose `events/` the relative paths name) instead.
    pub fn dir(mut self, dir: &Path) -> Forewarn {
        self.command.current_dir(dir);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Forewarn {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Forewarn {
        self.command.env_remove(key);
        self
    }

    /// Test credentials for AWS, in `us-east-1`.
    pub fn aws_testing(self) -> Forewarn {
        self.env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
    }

    /// Runs it with `args` and waits for it to end. A subcommand runs at [`SAMPLES_NOW`]
    /// (`--now`) unless `args` say when.
    pub fn run(mut self, args: &[&str]) -> Output {
        match args.split_first() {
            Some((command, rest)) if !command.starts_with('-') && !args.contains(&"--now") => {
                self.command
                    .arg(command)
                    .args(["--now", SAMPLES_NOW])
                    .args(rest);
            }
            _ => {
                self.command.args(args);
            }
        }
        self.command.output().expect("run forewarn")
    }
}

/// When the tests run `forewarn`: two days after the samples' events (2026-11-20/21), so that
/// their windows (an hour or two) are over and what a replay records (kept 30 days) is there,
/// whatever the date the tests run on.
pub const SAMPLES_NOW: &str = "2026-11-22T10:00:00Z";

/// `forewarn` with `args` in the workspace root, its embedded store in `state`.
pub fn forewarn(state: &Path, args: &[&str]) -> Output {
    Forewarn::new(state).run(args)
}

/// `forewarn` with `args` in `dir`, whose `events/` the relative paths name.
pub fn forewarn_in(dir: &Path, state: &Path, args: &[&str]) -> Output {
    Forewarn::new(state).dir(dir).run(args)
}

/// A kubeconfig in `dir` whose current context is the API fake at `url` (no credentials).
pub fn kubeconfig_for(url: &str, dir: &Path) -> PathBuf {
    kubeconfig_of(&[("fake", url)], dir)
}

/// A kubeconfig in `dir` with one context per `(name, url)`, each named after its cluster.
pub fn kubeconfig_of(clusters: &[(&str, &str)], dir: &Path) -> PathBuf {
    let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for (name, url) in clusters {
        text.push_str(&format!("- name: {name}\n  cluster:\n    server: {url}\n"));
    }
    text.push_str("users:\n- name: u\n  user: {}\ncontexts:\n");
    for (name, _) in clusters {
        text.push_str(&format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: u\n"
        ));
    }
    text.push_str(&format!("current-context: {}\n", clusters[0].0));
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}
