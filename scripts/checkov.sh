#!/usr/bin/env bash
# The security checks of infra/ (the `checkov` stage of scripts/test.sh), offline, in seconds:
# checkov, pinned in requirements.txt and installed by scripts/venv.sh into a venv of its own
# (.venv-checkov: its pins would downgrade moto's, awscli's and cfn-lint's dependencies), over the
# CloudFormation templates and the Kubernetes manifests of infra/. It fails on any failing check,
# on a file checkov could not parse, and when a framework scanned nothing. A deliberate exception
# is a skip in the template, with its reason (a resource's `Metadata: checkov: skip:`).
#
# Offline: no Prisma Cloud API key (BC_API_KEY unset: nothing is uploaded or downloaded, the
# checks are the ones the package ships), --skip-download, no package (SCA) scan.
#
# First a self-test: the same checkov on a copy of infra/member.yaml whose skip is taken out
# must fail, naming the check; else a passing run would prove nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
checkov="$root/.venv-checkov/bin/checkov"
if [ ! -x "$checkov" ]; then
    echo "checkov: $checkov is missing: run scripts/venv.sh" >&2
    exit 1
fi
work="$(mktemp -d -t forewarn-checkov.XXXXXX)"
trap 'rm -rf "$work"' EXIT

run() {
    env -u BC_API_KEY -u PRISMA_API_URL CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false \
        "$checkov" --framework cloudformation kubernetes --quiet --compact --skip-download "$@"
}

# The self-test: member.yaml's dead-letter queue without its skip of CKV_AWS_27.
mkdir "$work/planted"
sed 's/^      checkov:$/      not-checkov:/' infra/member.yaml >"$work/planted/member.yaml"
if grep -q '^      checkov:$' "$work/planted/member.yaml" || cmp -s infra/member.yaml "$work/planted/member.yaml"; then
    echo "checkov: self-test: no skip to take out of infra/member.yaml" >&2
    exit 1
fi
if run -d "$work/planted" >"$work/planted.out" 2>&1 || ! grep -q 'CKV_AWS_27' "$work/planted.out"; then
    cat "$work/planted.out" >&2
    echo "checkov: self-test: a planted failing check (CKV_AWS_27) was not reported" >&2
    exit 1
fi
echo "checkov: self-test: a planted failing check is reported" >&2

status=0
run -d infra/ -o cli -o json --output-file-path "console,$work/results.json" || status=$?
# Every framework scanned something, and parsed every file.
python3 - "$work/results.json" <<'EOF' || status=1
import json, sys
results = json.load(open(sys.argv[1]))
results = results if isinstance(results, list) else [results]
found = {r["check_type"]: r["summary"] for r in results}
ok = True
for framework in ("cloudformation", "kubernetes"):
    s = found.get(framework)
    if not s or s["resource_count"] == 0 or s["parsing_errors"] != 0:
        print(f"checkov: {framework}: nothing scanned, or files not parsed: {s}", file=sys.stderr)
        ok = False
    else:
        print(f"checkov: {framework}: {s['resource_count']} resources, {s['passed']} passed, "
              f"{s['failed']} failed, {s['skipped']} skipped", file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
exit "$status"
