#!/usr/bin/env bash
# The whole test suite: installs the pinned tools (moto server, cfn-lint, awscli, cargo-lambda)
# into .venv when missing, then runs every test of the workspace.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/venv.sh
export PATH="$root/.venv/bin:$PATH"
cargo test --workspace --locked
