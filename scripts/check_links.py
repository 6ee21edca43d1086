#!/usr/bin/env python3
"""Offline checks of the documentation that MkDocs does not make (scripts/docs.sh runs this).

1. The relative links of the Markdown files outside docs/ (README.md, CONTRIBUTING.md): each
   must name a file or folder of the repository, and a `#fragment` must be a heading of the
   Markdown file it points to (GitHub's heading slugs) or, with no path, of the file itself.
2. Page lengths: no page under docs/ and not CONTRIBUTING.md over 400 lines, README.md not over
   250.
3. The architecture diagram: the ```mermaid block of README.md and that of docs/index.md (the
   site's home) are the same, so that the two drawings cannot drift apart.

Usage: check_links.py [ROOT]. Prints one line per problem and exits 1 when there is any.
Needs nothing but the standard library, and no network.
"""
import os
import re
import sys
from urllib.parse import unquote

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
OUTSIDE = ["README.md", "CONTRIBUTING.md"]
LIMITS = {"README.md": 250, "CONTRIBUTING.md": 400}
PAGE_LIMIT = 400

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); a target may be <...>; an optional "title" after it.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def prose_lines(text):
    """The lines outside fenced code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading, seen):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to
    hyphens; a repeated slug gets -1, -2, ..."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    text = text.replace(" ", "-")
    base, n = text, seen.get(text, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def anchors(path):
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        for _, line in prose_lines(f.read()):
            m = HEADING.match(line)
            if m:
                out.add(slug(m.group(2), seen))
            for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                out.add(a)
    return out


def links(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for number, line in prose_lines(text):
        code_free = re.sub(r"`[^`]*`", "", line)
        for target in LINK.findall(code_free):
            yield number, target
        m = REFDEF.match(code_free)
        if m:
            yield number, m.group(1)


def check_links(name):
    problems = []
    source = os.path.join(ROOT, name)
    for number, target in links(source):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            continue
        path, _, fragment = target.partition("#")
        path = unquote(path)
        where = f"{name}:{number}: {target}"
        if path.startswith("/"):
            problems.append(f"{where}: an absolute link (GitHub resolves it from the site, not the repository)")
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
        if not resolved.startswith(ROOT):
            problems.append(f"{where}: leaves the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(f"{where}: no such file")
            continue
        if fragment:
            if not resolved.endswith(".md") or os.path.isdir(resolved):
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif unquote(fragment) not in anchors(resolved):
                problems.append(f"{where}: no heading with the anchor #{fragment} in {os.path.relpath(resolved, ROOT)}")
    return problems


def check_lengths():
    problems = []
    pages = [os.path.join(ROOT, n) for n in LIMITS]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(folder, f) for f in files if f.endswith(".md")]
    for page in sorted(pages):
        if not os.path.exists(page):
            continue
        name = os.path.relpath(page, ROOT)
        limit = LIMITS.get(name, PAGE_LIMIT)
        with open(page, encoding="utf-8") as f:
            count = len(f.read().splitlines())
        if count > limit:
            problems.append(f"{name}: {count} lines, over the {limit} allowed")
    return problems


def mermaid(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        m = re.search(r"^```mermaid\n(.*?)^```", f.read(), re.M | re.S)
    return m.group(1) if m else None


def check_diagram():
    readme, home = mermaid("README.md"), mermaid(os.path.join("docs", "index.md"))
    if readme is None or home is None:
        return ["README.md and docs/index.md must each hold the architecture diagram (a ```mermaid block)"]
    if readme != home:
        return ["the ```mermaid diagrams of README.md and docs/index.md differ: change both alike"]
    return []


def main():
    problems = check_diagram()
    for name in OUTSIDE:
        if os.path.exists(os.path.join(ROOT, name)):
            problems += check_links(name)
        else:
            problems.append(f"{name}: missing")
    problems += check_lengths()
    for p in problems:
        print(f"docs: {p}")
    if problems:
        print(f"docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("docs: the links of " + ", ".join(OUTSIDE) + " resolve; every page is within its length; the diagrams agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
