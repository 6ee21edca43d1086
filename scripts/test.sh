#!/usr/bin/env bash
# The whole test suite: installs the pinned tools (moto server, cfn-lint, awscli, cargo-lambda)
# into .venv when missing, builds the Lambda functions as docs/deploy.md does (x86_64 here: the
# aarch64 standard library cannot be fetched on these machines), then runs every test of the
# workspace — among them the deploy of those builds to moto's Lambda. Before the tests, a 30 s
# fuzz run of the event parser (scripts/fuzz.sh: installs cargo-fuzz into .tools when missing;
# it runs first so that cargo test's summary stays the closing lines).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/venv.sh
export PATH="$root/.venv/bin:$PATH"
cargo lambda build --release --x86-64 -p interruption-handler -p pool-sweeper
bash scripts/fuzz.sh 30
cargo test --workspace --locked
