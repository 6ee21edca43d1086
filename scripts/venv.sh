#!/usr/bin/env bash
# Creates .venv with the pinned tools of requirements.txt, unless it is already there and current.
# Sourced by scripts/test.sh; run it directly to get the tools (moto_server, cfn-lint, aws, mkdocs,
# cargo-lambda) for your own use: `scripts/venv.sh && export PATH="$PWD/.venv/bin:$PATH"`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$root/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "venv: installing the pinned tools of requirements.txt into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/requirements.txt"
  echo "$want" > "$stamp"
fi
