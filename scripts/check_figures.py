#!/usr/bin/env python3
"""The documentation's figures, checked against their one source (scripts/docs.sh runs this).

THE SOURCE. The benchmark results: everything below the results marker of docs/benchmarks.md
(`<!-- results: everything below is written by scripts/bench.sh -->`), and, in the benchmark
pages docs/benchmarks/*.md, each block between a line `<!-- results -->` and a line
`<!-- /results -->` (a run's own tables, copied from forewarn-bench's output). The log of runs,
docs/benchmarks/log.md, is history: it is neither source nor checked.

THE RULES.
1. The README's "Measured" table: every figure of its `figure` and `bound or goal` columns (a
   number with a unit: `10.9 s`, `14.9 ms`, `100 %`, `0.107×`, or a count such as `3,162`) must
   be found in the source. The summary table of docs/benchmarks.md (above its marker) likewise,
   in its `figure` and `bound or goal` columns.
2. Everywhere else (README.md, CONTRIBUTING.md, every page of docs/ outside the source), every
   measured-looking figure, a number with a decimal point and a unit (`0.113×`, `95.9 %`,
   `10.90 s`, `14.9 ms`), must be found in the source. A figure that is not a benchmark's (an
   test's setting, a side run, a figure derived from others) is exempt when its line, or the
   line before it, carries a comment saying why: `<!-- not in the results: a test's budget -->`.
   A row of the tables of rule 1 may carry one too.
   "Found" means: the source has a figure of the same unit that, rounded to the quoted figure's
   decimals, is the quoted figure (`10.9 s` is found as `10.90 s`). A percentage is also found
   as the share of an "A of B" count of the source (`95.9 %` as `4,793 of 5,000`).
3. The test suite's last run: README.md and CONTRIBUTING.md both state it (`N passed, N failed`
   and its time, `N min N s`). The `N passed, N failed` of the two must be the same, every
   `N min N s` of README.md and docs/getting-started.md must be one CONTRIBUTING.md states
   (CONTRIBUTING.md is the home of the suite's timings), and no page may give the suite's time in
   words ("a quarter of an hour") instead.

4. The quick start: the code blocks of README.md's "Two commands" section (the two commands,
   what command 1 prints, what to try next) and those of docs/getting-started.md are the same,
   in the same order, so that Getting started cannot drift from the README.

5. The threat model's proof: every test that docs/security.md and docs/security/*.md name as
   proof (a backticked name of three words or more, in a paragraph from `**Tested**`) is a
   function of the tree's Rust code, so that no control cites a test that was renamed or merged
   away.

When a benchmark is rerun (scripts/bench.sh rewrites the source), this check names every figure
quoted elsewhere that no longer agrees: fix it there, or give it a source row.

Usage: check_figures.py [ROOT]         # the check; prints one line per problem, exits 1 on any
       check_figures.py --self-test    # feeds the check disagreeing figures: it must fail on them
Needs nothing but the standard library.
"""
import glob
import os
import re
import sys

MARKER = "<!-- results: everything below is written by scripts/bench.sh -->"
OPEN, CLOSE = "<!-- results -->", "<!-- /results -->"
EXEMPT = "<!-- not in the results:"
LOG = os.path.join("docs", "benchmarks", "log.md")

# A figure: a number (thousands with commas) and its unit. `×` may follow the number directly.
FIGURE = re.compile(r"(?<![\w.#/-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?: ?(×)| (%|ms|s|MiB)\b)")
COUNT = re.compile(r"(?<![\w.#/-])(\d{1,3}(?:,\d{3})+|\d{4,})(?![\w.,]|\s*(?:%|ms|s\b|MiB|×))")
OF = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+) of (\d{1,3}(?:,\d{3})+|\d+)")
PASSED = re.compile(r"(\d[\d,]*) passed, (\d[\d,]*) failed")
MINUTES = re.compile(r"\b(\d+) min (\d+) s\b")
PREFIX = re.compile(r"× (\d+)(\.\d+)?(?![\d.])")   # `× 1.2`, as a bound is written
BARE = re.compile(r"^(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?$")
IN_WORDS = re.compile(r"(quarter|half) of an hour|an hour or so", re.I)
TESTED = re.compile(r"\*\*Tested\*\*(.*?)(?:\n\s*\n|\Z)", re.S)
TEST_NAME = re.compile(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+){2,})`")
CODE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def number(whole, fraction=""):
    return float(whole.replace(",", "") + (fraction or ""))


class Source:
    """Every figure of the benchmark results, by unit."""

    def __init__(self, texts):
        self.figures = {}
        for text in texts:
            for m in FIGURE.finditer(text):
                self.add(m.group(3) or m.group(4), number(m.group(1), m.group(2)))
            for m in COUNT.finditer(text):
                self.add("", number(m.group(1)))
            for m in PREFIX.finditer(text):
                self.add("×", number(m.group(1), m.group(2)))
            for unit, whole, fraction in column_figures(text):
                self.add(unit, number(whole, fraction))
            for m in OF.finditer(text):
                a, b = number(m.group(1)), number(m.group(2))
                self.add("", a)
                self.add("", b)
                if b:
                    self.add("%", 100.0 * a / b)

    def add(self, unit, value):
        self.figures.setdefault(unit, set()).add(value)

    def has(self, unit, whole, fraction):
        decimals = len(fraction) - 1 if fraction else 0
        quoted = number(whole, fraction)
        for value in self.figures.get(unit, ()):
            if abs(round(value, decimals) - quoted) < 1e-9 or f"{value:.{decimals}f}" == f"{quoted:.{decimals}f}":
                return True
        return False


def column_figures(text):
    """The bare numbers of a table column whose header says its unit is `×` (`× cordon's`,
    `adaptive ÷ cordon`): `0.006` in such a column is the figure `0.006×`."""
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        for i, cell in enumerate(cells):
            if i < len(header) and ("×" in header[i] or "÷" in header[i]):
                m = BARE.match(cell.split(" ")[0]) if cell else None
                if m:
                    yield "×", m.group(1), m.group(2)


def read(root, name):
    with open(os.path.join(root, name), encoding="utf-8") as f:
        return f.read()


def split_sources(root):
    """(source texts, {file: text outside the source}) for every Markdown file checked."""
    sources, outside = [], {}
    bench = read(root, os.path.join("docs", "benchmarks.md"))
    if MARKER not in bench:
        raise SystemExit("check_figures: docs/benchmarks.md has no results marker")
    above, below = bench.split(MARKER, 1)
    sources.append(below)
    outside[os.path.join("docs", "benchmarks.md")] = above
    names = ["README.md", "CONTRIBUTING.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    for name in names:
        if name in outside or name == LOG:
            continue
        kept, block, inside = [], [], False
        for line in read(root, name).splitlines():
            if line.strip() == OPEN:
                inside = True
                kept.append("")
            elif line.strip() == CLOSE:
                inside = False
                sources.append("\n".join(block))
                block = []
                kept.append("")
            elif inside:
                block.append(line)
                kept.append("")
            else:
                kept.append(line)
        if inside:
            raise SystemExit(f"check_figures: {name}: {OPEN} without {CLOSE}")
        outside[name] = "\n".join(kept)
    return Source(sources), outside


def table(text, heading):
    """The rows of the first table under `heading` (a `## ` line), as lists of cells."""
    lines = text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == heading)
    except StopIteration:
        return None, []
    rows, header = [], None
    for number_, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(line) <= set("|-: "):
                rows.append((number_, cells))
        elif header is not None:
            break
    return header, rows


def check_table(source, name, text, heading, columns, problems):
    header, rows = table(text, heading)
    if header is None:
        problems.append(f"{name}: no table under {heading!r}")
        return
    wanted = [header.index(c) for c in columns if c in header]
    lines = text.splitlines()
    for line, cells in rows:
        if EXEMPT in lines[line - 1]:
            continue
        for i in wanted:
            cell = cells[i] if i < len(cells) else ""
            for m in FIGURE.finditer(cell):
                if not source.has(m.group(3) or m.group(4), m.group(1), m.group(2)):
                    problems.append(f"{name}:{line}: {m.group(0)!r} ({header[i]}: {cells[0]}) is not in the benchmark results")
            for m in COUNT.finditer(cell):
                if not source.has("", m.group(1), ""):
                    problems.append(f"{name}:{line}: {m.group(0)!r} ({header[i]}: {cells[0]}) is not in the benchmark results")


def check_prose(source, name, text, problems):
    lines = text.splitlines()
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or EXEMPT in line or (i and EXEMPT in lines[i - 1]):
            continue
        for m in FIGURE.finditer(line):
            if m.group(2) and not source.has(m.group(3) or m.group(4), m.group(1), m.group(2)):
                problems.append(f"{name}:{i + 1}: {m.group(0)!r} is not in the benchmark results")


def check_suite(root, problems):
    readme, contributing = read(root, "README.md"), read(root, "CONTRIBUTING.md")
    runs = {name: set(PASSED.findall(text)) for name, text in (("README.md", readme), ("CONTRIBUTING.md", contributing))}
    if not runs["README.md"] or not runs["CONTRIBUTING.md"]:
        problems.append("README.md and CONTRIBUTING.md must both state the suite's last run (`N passed, N failed`)")
    elif runs["README.md"] != runs["CONTRIBUTING.md"]:
        problems.append(f"the suite's last run disagrees: README.md {sorted(runs['README.md'])}, CONTRIBUTING.md {sorted(runs['CONTRIBUTING.md'])}")
    known = set(MINUTES.findall(contributing))
    for name in ("README.md", os.path.join("docs", "getting-started.md")):
        text = read(root, name)
        for m in MINUTES.finditer(text):
            if m.groups() not in known:
                problems.append(f"{name}: the suite's time {m.group(0)!r} is not one CONTRIBUTING.md states")
    for name in ["README.md", "CONTRIBUTING.md"] + sorted(
            os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)):
        if name == LOG:
            continue
        for number_, line in enumerate(read(root, name).splitlines(), 1):
            if IN_WORDS.search(line):
                problems.append(f"{name}:{number_}: a time in words ({IN_WORDS.search(line).group(0)!r}): give the measured time")


def code_blocks(text):
    blocks, block, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if fenced:
                blocks.append("\n".join(block))
                block = []
            fenced = not fenced
        elif fenced:
            block.append(line)
    return blocks


def check_quick_start(root, problems):
    readme = read(root, "README.md")
    start = readme.find("## Two commands")
    end = readme.find("\n## ", start + 1)
    if start < 0:
        problems.append("README.md: no '## Two commands' section")
        return
    ours = code_blocks(readme[start:end])
    theirs = code_blocks(read(root, os.path.join("docs", "getting-started.md")))
    if ours != theirs:
        problems.append("docs/getting-started.md: its code blocks are not those of README.md's 'Two commands' (the commands, command 1's output, what to try next)")


def check_tested(root, problems):
    """Rule 5: the tests the security pages name as proof are functions of the code (read from
    this script's own tree, so that the self-test's copy of the docs is checked against it)."""
    import subprocess
    listed = subprocess.run(["git", "ls-files", "*.rs"], cwd=CODE_ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    functions = set()
    for path in listed:
        with open(os.path.join(CODE_ROOT, path), encoding="utf-8") as f:
            functions.update(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", f.read()))
    pages = [os.path.join("docs", "security.md")] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "security", "*.md")))
    for name in pages:
        for block in TESTED.findall(read(root, name)):
            for test in TEST_NAME.findall(block):
                if test not in functions:
                    problems.append(f"{name}: names `{test}` as a test that proves a control, and the code has no function of that name")


def check(root):
    problems = []
    source, outside = split_sources(root)
    readme = outside["README.md"]
    check_table(source, "README.md", readme, "## Measured", ["figure", "bound or goal"], problems)
    bench = os.path.join("docs", "benchmarks.md")
    check_table(source, bench, outside[bench], "# Benchmarks", ["figure", "bound or goal"], problems)
    for name, text in outside.items():
        check_prose(source, name, text, problems)
    check_suite(root, problems)
    check_quick_start(root, problems)
    check_tested(root, problems)
    return problems


def self_test():
    """Copies the repository's docs into a temporary tree, plants disagreeing figures one at a
    time, and fails unless the check names each."""
    import shutil
    import tempfile
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    names = ["README.md", "CONTRIBUTING.md"] + [
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)]
    plants = [
        ("README.md", "0.082× evicting at once", "0.313× evicting at once", "0.313×"),
        ("README.md", "| 10.9 s |", "| 12.9 s |", "12.9 s"),
        ("docs/concepts/surge.md", "\n", "\nSurge loses 0.2501× what evicting at once loses.\n", "0.2501×"),
        ("README.md", "passed, 0 failed", "passed, 3 failed", "last run disagrees"),
        ("docs/getting-started.md", "\n", "\nThe suite takes a quarter of an hour.\n", "in words"),
        ("docs/getting-started.md", "\n", "\nThe suite takes 99 min 1 s.\n", "99 min 1 s"),
        ("docs/getting-started.md", "--cluster demo", "--cluster-name demo", "code blocks"),
        ("docs/security/controls.md", "`http_only_to_a_loopback_host`", "`http_only_when_allowed_by_a_flag`", "no function of that name"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
            shutil.copy(os.path.join(root, name), os.path.join(tmp, name))
        before = set(check(tmp))   # what the docs already fail on is not the plants' doing
        for name, old, new, expected in plants:
            path = os.path.join(tmp, name)
            original = read(tmp, name)
            if old not in original:
                print(f"check_figures: self-test: {name} no longer holds {old!r}: update the self-test")
                failures += 1
                continue
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(old, new, 1))
            found = [p for p in set(check(tmp)) - before if expected in p]
            if not found:
                print(f"check_figures: self-test: planting {new.strip()!r} in {name} was not caught")
                failures += 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
    if not failures:
        print(f"check_figures: self-test: {len(plants)} disagreeing figures planted, each caught")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = check(root)
    for p in problems:
        print(f"check_figures: {p}")
    if not problems:
        print("check_figures: every figure quoted agrees with the benchmark results; README.md and CONTRIBUTING.md agree on the suite's last run; Getting started has the README's quick start; every test the security pages cite exists")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
