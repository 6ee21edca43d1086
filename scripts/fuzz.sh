#!/usr/bin/env bash
# A bounded libFuzzer run of the event parser's fuzz target (fuzz/fuzz_targets/event_parser.rs).
#
#   bash scripts/fuzz.sh            # 30 s (what scripts/test.sh runs)
#   bash scripts/fuzz.sh 1800       # a longer run; the corpus it grows is kept in fuzz/corpus/
#
# Uses an installed cargo-fuzz of the pinned version, or installs it into .tools/ when missing.
# cargo fuzz needs nightly -Z flags: the stable toolchain accepts them with RUSTC_BOOTSTRAP=1.
# The sanitizer is FOREWARN_FUZZ_SANITIZER (default `none`: the parser is safe Rust, and a clean
# build is much faster; `address` works too).
# Seeds are events/*.json, events/malformed/* and fuzz/seeds/* (drain continuations, messages
# sent back by triage, extreme times), copied into the (git-ignored) corpus directory.
# A crash, panic or failed invariant fails the run and its input is left in fuzz/artifacts/.
# FOREWARN_FUZZ_STEP=build only builds the target (cargo-fuzz installed first if missing);
# FOREWARN_FUZZ_STEP=run only runs it (scripts/test.sh builds in one stage, then runs the fuzzer
# beside the tests, on the core they leave idle).
set -euo pipefail
seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cargo_fuzz_version="0.13.1"
tools="$root/.tools"
# An installed cargo-fuzz of the pinned version (on PATH, or in .tools from an earlier run) is
# used as it is; otherwise it is built into .tools.
cargo_fuzz="$(command -v cargo-fuzz || true)"
if [ -z "$cargo_fuzz" ] || ! "$cargo_fuzz" --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
    cargo_fuzz="$tools/bin/cargo-fuzz"
    if ! "$cargo_fuzz" --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
        cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$tools"
    fi
fi
export RUSTC_BOOTSTRAP=1
sanitizer="${FOREWARN_FUZZ_SANITIZER:-none}"
target=event_parser
corpus="fuzz/corpus/$target"
artifacts="fuzz/artifacts/$target"
mkdir -p "$corpus" "$artifacts"
cp events/*.json events/malformed/* fuzz/seeds/* "$corpus/"

step="${FOREWARN_FUZZ_STEP:-all}"
if [ "$step" != run ]; then
    "$cargo_fuzz" build --fuzz-dir fuzz --sanitizer "$sanitizer" "$target"
fi
if [ "$step" = build ]; then
    echo "fuzz: $target built"
    exit 0
fi
before="$(find "$artifacts" -type f | sort)"
status=0
"$cargo_fuzz" run --fuzz-dir fuzz --sanitizer "$sanitizer" "$target" "$corpus" -- \
    -max_total_time="$seconds" -max_len=8192 -dict=fuzz/event_parser.dict \
    -artifact_prefix="$artifacts/" -print_final_stats=1 || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz: $target failed (exit $status); new artifacts:" >&2
    comm -13 <(echo "$before") <(find "$artifacts" -type f | sort) >&2
    echo "reproduce: RUSTC_BOOTSTRAP=1 $cargo_fuzz run --fuzz-dir fuzz --sanitizer $sanitizer $target <artifact>" >&2
    exit "$status"
fi
echo "fuzz: $target ran ${seconds}s without a failure"
