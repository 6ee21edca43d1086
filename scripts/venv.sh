#!/usr/bin/env bash
# Creates .venv with the pinned tools of requirements.txt, unless it is already there and current.
# Sourced by scripts/test.sh; run it directly to get the tools (moto_server, cfn-lint, aws, mkdocs,
# cargo-lambda) for your own use: `scripts/venv.sh && export PATH="$PWD/.venv/bin:$PATH"`.
# checkov, pinned there too, goes into a venv of its own, .venv-checkov (scripts/checkov.sh runs
# it): its own pins (boto3 and botocore 1.35, packaging 23, networkx 2) would downgrade what moto,
# awscli and cfn-lint run with in .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/requirements.txt"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

# install VENV GREP-ARGS...: the lines of requirements.txt that `grep GREP-ARGS` keeps, into VENV,
# unless it is already there and made from this requirements.txt.
install() {
  local venv="$1" stamp="$1/.requirements.sha256" list
  shift
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "venv: installing the pinned tools of requirements.txt into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    list="$(mktemp -t forewarn-requirements.XXXXXX)"
    grep "$@" "$requirements" >"$list"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$list"
    rm -f "$list"
    echo "$want" > "$stamp"
  fi
}
install "$root/.venv" -v '^checkov=='
install "$root/.venv-checkov" '^checkov=='
