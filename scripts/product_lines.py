#!/usr/bin/env python3
"""Count forewarn's product code: the lines of Rust in shared/src, cli/src and functions/ that
are neither blank, nor comments, nor tests.

A test is a file under tests/ or benches/, an item marked `#[cfg(test)]` (to its closing brace or
semicolon), and a file such an item declares (`#[cfg(test)] mod tests;`).

    python3 scripts/product_lines.py            # the work tree, by top folder
    python3 scripts/product_lines.py REV ...     # each revision, from git (no checkout)
    python3 scripts/product_lines.py --since REV # the work tree against REV, and the difference

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


def product_lines(text):
    """(lines counted, names of modules declared as tests) of one file's text."""
    lines = strip_comments(text).split("\n")
    counted, test_mods, i = 0, [], 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#[cfg(test)]"):
            rest = line[len("#[cfg(test)]"):].strip()
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
        if line:
            counted += 1
        i += 1
    return counted, test_mods


def count(rev):
    """{top folder: lines} of the product at rev (None: the work tree)."""
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
        top = "/".join(path.split("/")[:2]) if path.startswith("functions/") else path.split("/")[0]
        totals[top] = totals.get(top, 0) + product_lines(text)[0]
    return totals


def show(label, totals):
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(totals.items()))
    print(f"{label}: {sum(totals.values()):,} lines ({parts})")


def main(args):
    if args[:1] == ["--since"]:
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
    main(sys.argv[1:])
