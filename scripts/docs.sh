#!/usr/bin/env bash
# Checks the documentation, offline, in seconds (the `docs` stage of scripts/test.sh):
#   1. builds the site of mkdocs.yml from docs/ with `mkdocs build --strict` into a temporary
#      directory (removed after): a broken link, a link to a missing anchor, a link MkDocs does
#      not recognise, a page missing from the nav or a nav entry with no page fails it
#      (mkdocs.yml's `validation:`, every warning an error under --strict);
#   2. checks the relative links and #anchors of README.md and CONTRIBUTING.md, which live
#      outside docs/ where MkDocs does not look (scripts/check_links.py, GitHub's heading slugs);
#   3. fails when a page under docs/ or CONTRIBUTING.md is over 400 lines, or README.md over 250,
#      and when the architecture diagrams (```mermaid) of README.md and docs/index.md differ;
#   4. checks every benchmark figure of README.md's "Measured" table and of the docs against the
#      benchmark results (below docs/benchmarks.md's results marker, and the `<!-- results -->`
#      blocks of docs/benchmarks/), and the test suite's last run as README.md and
#      CONTRIBUTING.md state it, and that every test the security pages cite as proof exists
#      (scripts/check_figures.py); its self-test first plants disagreeing figures (and a test
#      name that is none) in a copy of the docs and fails unless each is caught.
# MkDocs comes from .venv (scripts/venv.sh installs the pinned requirements.txt), else from PATH.
#
#   scripts/docs.sh                     # the check
#   .venv/bin/mkdocs serve              # read the site at http://127.0.0.1:8000
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$root/.venv/bin:$PATH"
export NO_MKDOCS_2_WARNING=1   # Material's banner about its successor, not a warning of this site
python="$(command -v python3)"
site="$(mktemp -d -t forewarn-site.XXXXXX)"
trap 'rm -rf "$site"' EXIT
status=0
echo "docs: mkdocs build --strict (into $site)" >&2
# No network: the build must not fetch anything (the theme's fonts are off, mermaid is drawn in
# the browser).
if ! mkdocs build --strict --site-dir "$site" 2>&1 | sed 's/^/docs: mkdocs: /' >&2; then
    status=1
fi
# mkdocs' exit code goes through the pipe above only with pipefail, which is set.
if ! "$python" scripts/check_links.py "$root"; then
    status=1
fi
if ! "$python" scripts/check_figures.py --self-test; then
    status=1
fi
if ! "$python" scripts/check_figures.py "$root"; then
    status=1
fi
exit "$status"
