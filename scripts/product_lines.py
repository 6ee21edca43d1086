#!/usr/bin/env python3
"""Count forewarn's product code: the lines of Rust in shared/src, cli/src and functions/ that
are neither blank, nor comments, nor tests.

A test is a file under tests/ or benches/, an item compiled only for tests — marked
`#[cfg(test)]`, or for the test builders' feature, `#[cfg(feature = "fixtures")]` or
`#[cfg(any(test, feature = "fixtures"))]` (to its closing brace or semicolon) — and a file such an
item declares (`#[cfg(test)] mod tests;`, `#[cfg(any(test, feature = "fixtures"))] pub mod
fixtures;`).

    python3 scripts/product_lines.py                  # the work tree, by top folder
    python3 scripts/product_lines.py REV ...           # each revision, from git (no checkout)
    python3 scripts/product_lines.py --since REV       # the work tree against REV, and the difference
    python3 scripts/product_lines.py --modules [REV]   # by module (shared/domain/plan, cli/deploy,
                                                       # ...), against REV when given
    python3 scripts/product_lines.py --path [REV]      # the interruption path alone (see PATH_SEEDS),
                                                       # file by file, against REV when given

The interruption path is what takes an SQS message to a cordon and a drain: decode, plan,
lookup, cordon, drain, traffic, pools, and the handler's glue. It is counted as the files
reachable through `crate::` paths from PATH_SEEDS (the handler, and the adapters it is wired
with on that path), not through PATH_STOPS (the wiring and the settings, which reach every
adapter); a file's own `mod` children come with it. Its total is the figure; below it, the
same files by stage (STAGES: the first pattern a file's path contains), the stages the issue
names first, then the capabilities that ride on the path (surge, per-group policy, many
clusters, Capacity Blocks, launch hooks), so each can be weighed on its own.

Issue 49's starting point is the revision in BASELINE: the main of the day the issue was filed.
"""
import re
import subprocess
import sys
from pathlib import PurePosixPath

ROOTS = ("shared/src/", "cli/src/", "functions/")
BASELINE = "f9161e1"


def files_at(rev):
    """(path, text) of each product .rs file, at a git revision or (rev None) in the work tree."""
    if rev is None:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, text=True, check=True).stdout.split()
    else:
        listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev],
                                capture_output=True, text=True, check=True).stdout.split()
    for path in sorted(listed):
        if not path.endswith(".rs") or not path.startswith(ROOTS):
            continue
        parts = PurePosixPath(path).parts
        if "tests" in parts or "benches" in parts:
            continue
        if rev is None:
            try:
                text = open(path, encoding="utf-8").read()
            except FileNotFoundError:
                continue
        else:
            text = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True,
                                  text=True, check=True).stdout
        yield path, text


def strip_comments(text):
    """The text with comments blanked (strings kept, so `"//"` inside one is not a comment)."""
    out, i, n = [], 0, len(text)
    token = re.compile(r'//[^\n]*|/\*|r#*"|"|\'(?:\\.|[^\\\n])\'')
    while i < n:
        m = token.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        t = m.group()
        if t.startswith("//"):
            i = m.end()
        elif t == "/*":
            depth, j = 1, m.end()
            while depth and j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", m.start(), j))
            i = j
        elif t.startswith("r"):
            end = '"' + "#" * (len(t) - 2)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(text[m.start():j])
            i = j
        elif t == '"':
            j = m.end()
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[m.start():j + 1])
            i = j + 1
        else:
            out.append(t)
            i = m.end()
    return "".join(out)


# An attribute that compiles what follows only for tests or the test builders' feature.
TEST_ONLY = re.compile(r'#\[cfg\((?:test|feature\s*=\s*"fixtures"|any\(\s*(?:test|feature\s*=\s*"fixtures")'
                       r'(?:\s*,\s*(?:test|feature\s*=\s*"fixtures"))*\s*\))\)\]')


def product_lines(text):
    """(lines counted, names of modules declared as tests) of one file's text."""
    kept, test_mods = product_code(text)
    return sum(1 for line in kept if line.strip()), test_mods


def product_code(text):
    """(the lines of one file's text that are product code, comments blanked; the names of the
    modules it declares as tests)."""
    lines = strip_comments(text).split("\n")
    kept, test_mods, i = [], [], 0
    while i < len(lines):
        line = lines[i].strip()
        only = TEST_ONLY.match(line)
        if only:
            rest = line[only.end():].strip()
            j = i if rest else i + 1
            head = (rest or (lines[j].strip() if j < len(lines) else ""))
            decl = re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", head)
            if decl:
                test_mods.append(decl.group(1))
            depth, opened = 0, False
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                if (opened and depth <= 0) or (not opened and lines[j].rstrip().endswith(";")):
                    break
                j += 1
            i = j + 1
            continue
        kept.append(lines[i])
        i += 1
    return kept, test_mods


def top_folder(path):
    """`shared`, `cli`, `functions/interruption-handler`."""
    return "/".join(path.split("/")[:2]) if path.startswith("functions/") else path.split("/")[0]


def module(path):
    """`shared/domain/plan`, `shared/app/handler`, `cli/deploy`, `cli/main`: a file's module of
    its crate's first or second level (a layer's modules for `shared`)."""
    parts = PurePosixPath(path).parts
    crate, inner = top_folder(path), list(parts[2:] if parts[1] == "src" else parts[3:])
    if crate == "shared" and len(inner) > 1:
        inner = inner[:2]
    else:
        inner = inner[:1]
    inner[-1] = inner[-1].removesuffix(".rs")
    return "/".join([crate.split("/")[-1]] + inner)


def count(rev, key=top_folder):
    """{key of a file (its top folder): lines} of the product at rev (None: the work tree)."""
    files = dict(files_at(rev))
    skipped = set()
    for path, text in files.items():
        _, mods = product_lines(text)
        folder = PurePosixPath(path).parent
        stem = PurePosixPath(path).stem
        base = folder if stem in ("mod", "lib", "main") else folder / stem
        for name in mods:
            skipped.update({str(base / f"{name}.rs"), str(base / name / "mod.rs")})
    totals = {}
    for path, text in files.items():
        if path in skipped:
            continue
        totals[key(path)] = totals.get(key(path), 0) + product_lines(text)[0]
    return totals


PATH_SEEDS = (
    "functions/interruption-handler/src/main.rs",
    "shared/src/app/handler.rs",
    "shared/src/adapters/lambda_event.rs",
    "shared/src/adapters/ec2.rs",
    "shared/src/adapters/kube/executor.rs",
    "shared/src/adapters/kube/directory.rs",
    "shared/src/adapters/elb.rs",
    "shared/src/adapters/sqs.rs",
    "shared/src/adapters/dynamo/mod.rs",
)
PATH_STOPS = ("shared/src/app/wiring.rs", "shared/src/app/settings.rs",
              "shared/src/app/reference.rs", "shared/src/lib.rs")


# (stage, path fragments): a path file belongs to the first stage one of whose fragments it
# contains; "glue" takes the rest.
STAGES = (
    ("feature: surge (placeholders)", ("kube/surge", "kube/placeholder", "domain/surge")),
    ("feature: per-group policy", ("/policy",)),
    ("feature: many clusters", ("adapters/accounts", "app/fleet/", "domain/clusters")),
    ("feature: Capacity Blocks", ("app/blocks",)),
    ("feature: launch hooks", ("/launch.rs",)),
    ("decode", ("domain/event/", "domain/inbound/")),
    ("plan", ("domain/plan/", "domain/config", "domain/admission", "domain/budget",
              "domain/facts", "domain/fold")),
    ("lookup", ("adapters/ec2", "kube/directory", "kube/node_facts", "pipeline/places")),
    ("traffic", ("adapters/elb", "pipeline/traffic", "domain/traffic", "dynamo/rounds")),
    ("pools", ("adapters/dynamo/", "domain/pool", "key_cache", "domain/keys", "domain/sweep")),
    ("cordon, drain, delete", ("adapters/kube/",)),
    ("glue", ("",)),
)


def stage_of(path):
    return next(name for name, parts in STAGES if any(p in path for p in parts))


def resolve(files, segments):
    """The file of the deepest module of `crate::a::b::c` (segments a, b, c) that exists."""
    for n in range(len(segments), 0, -1):
        base = "shared/src/" + "/".join(segments[:n])
        for candidate in (base + ".rs", base + "/mod.rs"):
            if candidate in files:
                return candidate
    return None


def path_files(files):
    """The files of the interruption path (see the module doc) among `files` {path: text}."""
    use_tree = re.compile(r"\buse\s+(crate|forewarn)::([^;]*);", re.S)
    inline = re.compile(r"\b(?:crate|forewarn)::((?:\w+::)*\w+)")
    seen, todo = set(), [f for f in PATH_SEEDS if f in files]
    while todo:
        path = todo.pop()
        if path in seen or path in PATH_STOPS:
            continue
        seen.add(path)
        kept, test_mods = product_code(files[path])
        code = "\n".join(kept)
        targets = []
        for m in use_tree.finditer(code):
            tree = re.sub(r"\s+", "", m.group(2))
            head, _, rest = tree.partition("{")
            prefix = [p for p in head.split("::") if p]
            if not rest:
                targets.append(prefix)
            for item in re.split(r"[,{}]", rest):
                targets.append(prefix + [p for p in item.split("::") if p and p != "self"])
        targets += [m.group(1).split("::") for m in inline.finditer(code)]
        for segments in targets:
            found = resolve(files, segments)
            if found:
                todo.append(found)
        folder = PurePosixPath(path).parent
        stem = PurePosixPath(path).stem
        base = folder if stem in ("mod", "lib", "main") else folder / stem
        for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M):
            if m.group(1) in test_mods:
                continue
            for child in (str(base / f"{m.group(1)}.rs"), str(base / m.group(1) / "mod.rs")):
                if child in files:
                    todo.append(child)
    return seen


def path_count(rev):
    """{file: lines} of the interruption path at rev (None: the work tree)."""
    files = dict(files_at(rev))
    return {path: product_lines(files[path])[0] for path in sorted(path_files(files))}


def show(label, totals):
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(totals.items()))
    print(f"{label}: {sum(totals.values()):,} lines ({parts})")


def main(args):
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    flag = next((a for a in args if a.startswith("-")), None)
    if flag not in (None, "--modules", "--path", "--since") or (flag and args[0] != flag):
        sys.exit(f"product_lines.py: unknown option {flag!r} (or not first); see --help")
    if args[:1] == ["--modules"]:
        now = count(None, module)
        before = count(args[1], module) if len(args) > 1 else {}
        for name in sorted(set(now) | set(before)):
            line = f"{name:<40} {now.get(name, 0):>7,}"
            if len(args) > 1:
                line += f"  {now.get(name, 0) - before.get(name, 0):+,} since {args[1]}"
            print(line)
        show("work tree", count(None))
    elif args[:1] == ["--path"]:
        now = path_count(None)
        before = path_count(args[1]) if len(args) > 1 else {}
        for name in sorted(set(now) | set(before)):
            line = f"{name:<56} {now.get(name, 0):>6,}"
            if len(args) > 1:
                line += f"  {now.get(name, 0) - before.get(name, 0):+,} since {args[1]}"
            print(line)
        label = f"interruption path: {sum(now.values()):,} lines in {len(now)} files"
        if len(args) > 1:
            label += f" ({sum(now.values()) - sum(before.values()):+,} since {args[1]})"
        print(label)
        stages = {}
        for name, n in now.items():
            stages[stage_of(name)] = stages.get(stage_of(name), 0) + n
        for name, _ in STAGES:
            print(f"  {name:<40} {stages.get(name, 0):>6,}")
    elif args[:1] == ["--since"]:
        base = args[1] if len(args) > 1 else BASELINE
        before, now = count(base), count(None)
        show(base, before)
        show("work tree", now)
        print(f"difference: {sum(now.values()) - sum(before.values()):+,} lines")
    elif args:
        for rev in args:
            show(rev, count(rev))
    else:
        show("work tree", count(None))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except subprocess.CalledProcessError as e:
        sys.exit(f"product_lines.py: `{' '.join(e.cmd)}` failed: {e.stderr.strip() or e}")
