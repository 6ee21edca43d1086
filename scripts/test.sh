#!/usr/bin/env bash
# The whole test suite, in stages, each timed:
#
#   tools    the pinned tools of requirements.txt (moto server, cfn-lint, awscli, cargo-lambda,
#            MkDocs with its theme and plugin) into .venv, and checkov into .venv-checkov, when
#            missing or out of date;
#   docs     the documentation, checked offline in seconds (scripts/docs.sh): the site of
#            mkdocs.yml built from docs/ with `mkdocs build --strict` into a temporary directory
#            (a broken link or anchor fails it), the relative links and anchors of README.md and
#            CONTRIBUTING.md, and the pages' lengths (docs/ and CONTRIBUTING.md at most 400
#            lines, README.md 250);
#   checkov  the security checks of infra/'s CloudFormation templates and Kubernetes manifests,
#            offline, in seconds (scripts/checkov.sh): any failing check fails it (a deliberate
#            exception is a skip in the template, with its reason), after a self-test that a
#            planted failure is reported;
#   build    every test of the workspace, built (nothing run yet);
#   lambda   both Lambda functions built by cargo-lambda for x86_64 in the dev profile, which is
#            what the deploy tests (tests/tests/lambda_deploy.rs, and cli/tests/deploy.rs through
#            `forewarn deploy --no-build`) upload to moto's Lambda. The release build is
#            docs/deploy.md's and scripts/bench.sh's. This machine cannot fetch the aarch64
#            standard library: arm64 is configured and documented, not built here;
#   lint     `cargo fmt --check` and `cargo clippy --all-targets --locked -- -D warnings`, over the
#            workspace and over fuzz/ (a workspace of its own): the lints of `[workspace.lints]`
#            in Cargo.toml among them, with clippy's size limits of clippy.toml (a function of
#            more than 100 lines or 6 arguments); a formatting difference or a clippy warning
#            fails the stage;
#   fuzz     the event parser's fuzz target built (scripts/fuzz.sh; an installed cargo-fuzz
#            0.13.1 is used when there is one, else it is installed into .tools);
#   test     every test of the workspace (cargo test --no-fail-fast: every binary runs);
#   fuzzrun  a 30 s libFuzzer run of that target, beside the tests.
#
# The tools, docs and checkov stages run in the background while the build stage runs, and the fuzz run
# while the tests run (their times overlap; the total is the wall clock). The tests and the Lambda build share one target triple (CARGO_BUILD_TARGET below) and, through
# the functions' `unify-test-features` feature (tests/unify-features), one set of dependency
# features: the functions' build reuses every dependency the tests' build made. A failed stage
# does not stop the later ones (but a failed build of the tests does stop the test stage). At the
# end: each stage's time, then one line for the whole run, `N passed, N failed` (tests passed
# and failed; a failed stage that is not a test counts as one failure), and the exit status is 1
# if anything failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu
export PATH="$root/.venv/bin:$PATH"
log="$(mktemp -t forewarn-test.XXXXXX)"
trap 'rm -rf "$log" "${bg_dir:-}"' EXIT

names=()
secs=()
states=()
stage_failures=0
start_all=$SECONDS

# record NAME SECONDS STATUS: a stage's line of the summary; a failure is counted.
record() {
    names+=("$1")
    secs+=("$2")
    if [ "$3" -eq 0 ]; then
        states+=("ok")
    else
        states+=("failed (exit $3)")
        stage_failures=$((stage_failures + 1))
    fi
    return "$3"
}

# stage NAME COMMAND...: runs COMMAND, records its time and whether it passed.
stage() {
    local name="$1" began=$SECONDS status=0
    shift
    echo "==> $name: $*" >&2
    "$@" || status=$?
    record "$name" $((SECONDS - began)) "$status"
}

tests() {
    cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
}

# bg_stage NAME COMMAND...: runs COMMAND in the background's sequence, its output kept in a file;
# join_stage NAME shows that output and records the stage as `stage` does.
bg_dir="$(mktemp -d -t forewarn-bg.XXXXXX)"
bg_stage() {
    local name="$1" began=$SECONDS status=0
    shift
    "$@" >"$bg_dir/$name.out" 2>&1 || status=$?
    echo "$((SECONDS - began)) $status" >"$bg_dir/$name.result"
}
join_stage() {
    local name="$1" beside="$2" took=0 status=1
    echo "==> $name (ran beside $beside):" >&2
    cat "$bg_dir/$name.out" >&2 2>/dev/null
    read -r took status <"$bg_dir/$name.result" 2>/dev/null
    record "$name" "$took" "$status"
}

# The tools (mostly downloads), the docs check and checkov (seconds each) run while the tests
# build.
(
    bg_stage tools bash scripts/venv.sh
    bg_stage docs bash scripts/docs.sh
    bg_stage checkov bash scripts/checkov.sh
) &
background=$!
stage build cargo test --workspace --locked --no-run
build_ok=$?
wait "$background"
join_stage tools "the build"
tools_ok=$?
join_stage docs "the build"
join_stage checkov "the build"
stage lambda cargo lambda build --x86-64 --compiler cargo -p interruption-handler -p pool-sweeper \
    --features interruption-handler/unify-test-features,pool-sweeper/unify-test-features
lint() {
    cargo fmt --all --check &&
        cargo fmt --manifest-path fuzz/Cargo.toml --check &&
        cargo clippy --workspace --all-targets --locked -- -D warnings &&
        CARGO_TARGET_DIR="$root/target" cargo clippy --manifest-path fuzz/Cargo.toml \
            --all-targets --locked --no-default-features -- -D warnings
}
stage lint lint
stage fuzz env FOREWARN_FUZZ_STEP=build bash scripts/fuzz.sh 30
fuzz_ok=$?
# The 30 s fuzz run takes one core; the tests, which wait on moto and the fakes much of the
# time, leave it idle.
if [ "$fuzz_ok" -eq 0 ]; then
    (bg_stage fuzzrun env FOREWARN_FUZZ_STEP=run bash scripts/fuzz.sh 30) &
    fuzzing=$!
fi
if [ "$tools_ok" -eq 0 ] && [ "$build_ok" -eq 0 ]; then
    stage test tests
    tests_ok=$?
else
    echo "==> test: not run (the tools or the build failed)" >&2
    record test 0 1
    states[${#states[@]} - 1]="not run"
    tests_ok=1
fi
if [ "$fuzz_ok" -eq 0 ]; then
    wait "$fuzzing"
    join_stage fuzzrun "the tests"
fi

# Tests passed and failed, over every test binary and doctest run.
read -r passed failed < <(
    grep -E '^test result: ' "$log" 2>/dev/null |
        sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' |
        awk '{p += $1; f += $2} END {print p + 0, f + 0}'
)
# A failed test stage whose failures are all counted above is not counted again.
if [ "$tests_ok" -ne 0 ] && [ "$failed" -gt 0 ]; then
    stage_failures=$((stage_failures - 1))
fi

echo
echo "Stage times (seconds):"
for i in "${!names[@]}"; do
    printf '  %-8s %6s  %s\n' "${names[$i]}" "${secs[$i]}" "${states[$i]}"
done
printf '  %-8s %6s\n' "total" "$((SECONDS - start_all))"
total_failed=$((failed + stage_failures))
echo "$passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
