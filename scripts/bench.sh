#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md in one run: builds the two Lambda functions and the
# empty lambda_runtime function (the cold-start floor) in release with cargo lambda, as zips
# and as bootstraps, builds forewarn-bench (dev profile unless BENCH_PROFILE says), runs its
# benchmarks (cold start, one event end to end, mass interruption, capacity lost, a Capacity Block's
# expiration, many clusters) and writes their
# tables to stdout and to the results part of docs/benchmarks.md (everything after its results
# marker is replaced). The 1,000-node mass interruption also draws docs/mass-drains.svg, the
# capacity benchmark docs/capacity-surge.svg.
#
#   scripts/bench.sh                  # the run docs/benchmarks.md holds
#   BENCH_RUNS=5 BENCH_OUT=/tmp/b.md scripts/bench.sh   # fewer cold starts, somewhere else
#   BENCH_PROFILE=release scripts/bench.sh  # forewarn-bench itself (the end-to-end and mass
#            # benchmarks run the handler in it) in release: a first build takes long (AWS SDKs)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/venv.sh
export PATH="$root/.venv/bin:$PATH"
runs="${BENCH_RUNS:-20}"
out="${BENCH_OUT:-docs/benchmarks.md}"
profile="${BENCH_PROFILE:-dev}"
functions=(-p interruption-handler -p pool-sweeper -p empty-function -p clients-function)

echo "bench: building the functions (release, x86_64)" >&2
cargo lambda build --release --x86-64 --output-format zip "${functions[@]}"
cargo lambda build --release --x86-64 "${functions[@]}"
echo "bench: building forewarn-bench ($profile)" >&2
cargo build --profile "$profile" --locked -p forewarn-bench
# Under target/<triple>/ when CARGO_BUILD_TARGET names one (as scripts/test.sh does).
bench="$root/target/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}$([ "$profile" = dev ] && echo debug || echo "$profile")/forewarn-bench"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
{
  echo "## Results"
  echo
  cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "One run of \`scripts/bench.sh\`, $(date -u +%Y-%m-%dT%H:%MZ): $(nproc) cores (${cpu:-unknown CPU}), $(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024)) MiB of memory, $(rustc --version | cut -d' ' -f1-2), cargo-lambda $(cargo lambda --version | awk '{print $2}'); functions in release, forewarn-bench in the \`$profile\` profile."
  echo
  echo "bench: cold start ($runs starts of each function)" >&2
  "$bench" cold-start --runs "$runs"
  echo "bench: one event end to end" >&2
  "$bench" e2e --runs 10
  echo "bench: mass interruption, 1,000 nodes: continuation drains and the blocking baseline" >&2
  "$bench" mass --nodes 1000 --svg docs/mass-drains.svg
  echo "bench: mass interruption, 1,000 nodes without load balancers (traffic first's cost: docs/benchmarks/traffic.md)" >&2
  "$bench" mass --nodes 1000 --drains continue --target-groups 0
  echo "bench: mass interruption, 5,000 nodes: continuation drains" >&2
  "$bench" mass --nodes 5000 --drains continue --cutoff-seconds 600
  echo "bench: capacity lost, 1,000 nodes: surge and evictions at once" >&2
  "$bench" capacity --nodes 1000 --svg docs/capacity-surge.svg
  echo "bench: a Capacity Block's expiration, 64 GPU nodes" >&2
  "$bench" blocks
  echo "bench: many clusters, 2 x 1,000 nodes: at once, one API server down, a loaded server" >&2
  "$bench" fleet --nodes 1000 --cutoff-seconds 180 --svg docs/many-clusters.svg
} | tee "$results"

marker='<!-- results: everything below is written by scripts/bench.sh -->'
if [ -f "$out" ] && grep -qF "$marker" "$out"; then
  kept="$(mktemp)"
  sed -n "1,/^$(printf '%s' "$marker" | sed 's/[][\/.*^$]/\\&/g')\$/p" "$out" > "$kept"
  { cat "$kept"; echo; cat "$results"; } > "$out"
  rm -f "$kept"
else
  { [ -f "$out" ] && cat "$out" && echo; echo "$marker"; echo; cat "$results"; } > "$out.new"
  mv "$out.new" "$out"
fi
echo "bench: results written to $out" >&2
