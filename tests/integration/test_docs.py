#!/usr/bin/env python3
"""
test_docs.py -- the repository stands alone: what its code and docs cite
exists in the repository.

(a) Every section reference in the tree resolves: each `§N` (or `§N.M`)
    must follow a named Markdown file -- `docs/architecture.md §4`,
    `docs/wire-formats.md §1/§2/§6`, `docs/style.md §6, §8` -- and that file
    must have a heading numbered N ("## 4. ..." or "### 4.4 ...").  Inside
    docs/*.md a bare `§N` means the same file.  A reference to a file that
    does not exist, or to a section it does not have, or a `§` that names
    no file (the old `DESIGN §4`, `spec §2` forms), is a failure.
(b) Every relative link in README.md, docs/*.md and the other READMEs
    resolves in a fresh clone: the target file exists, and a `#anchor` on
    a Markdown target is one of its headings (GitHub's slug rule).
(c) `../shared` (the shared test corpus outside the repository) appears
    only in tests (tests/, *_test.c) or as a corpus path
    (`../shared/testdata`), never as a link or a design reference.
The checker checks itself first on in-memory examples of each mistake.
Stdlib only; no server.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smolder import Results, source_dir  # noqa: E402

SRC = source_dir()
SKIP_DIRS = {".git", "build", "build-asan", "__pycache__", "data", "results"}
SEC = r"§(\d+(?:\.\d+)*)"
# A named reference and the sections chained after it.
REF = re.compile(r"((?:\.\./)*[\w./-]*[\w-]+\.md)\s+" + SEC +
                 r"((?:\s*(?:,|/|and|or)\s*§\d+(?:\.\d+)*)*)")
CHAIN = re.compile(SEC)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def tree_files():
    """Tracked text files (git), else a walk of the source tree."""
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "-z"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(SRC):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            files += [os.path.relpath(os.path.join(d, n), SRC)
                      for n in names]
    return [f for f in files if not f.startswith("tests/data/")]


def read_text(path):
    try:
        with open(path, "rb") as fh:
            b = fh.read()
    except OSError:
        return None
    if b"\0" in b:
        return None
    return b.decode("utf-8", "replace")


def strip_fences(text):
    """Markdown without fenced code blocks (same line count)."""
    out, fence = [], False
    for ln in text.split("\n"):
        if ln.lstrip().startswith("```"):
            fence = not fence
            out.append("")
        else:
            out.append("" if fence else ln)
    return "\n".join(out)


def headings(text):
    return [m.group(1) for ln in strip_fences(text).split("\n")
            for m in [HEADING.match(ln)] if m]


def slug(h):
    """GitHub's anchor for a heading."""
    s = h.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def has_section(heads, n):
    return any(re.match(re.escape(n) + r"(?:\.?\s|\.?$)", h) for h in heads)


def resolve_doc(citing, name, reader):
    """The repository path a cited file name means, or None."""
    base = os.path.dirname(citing)
    for cand in (os.path.join(base, name), name, os.path.join("docs", name)):
        cand = os.path.normpath(cand)
        if not cand.startswith("..") and reader(cand) is not None:
            return cand
    return None


def section_problems(path, text, reader):
    """Unresolved § references in one file's text."""
    probs = []
    covered = set()
    lines = text.split("\n")

    def where(pos):
        return "%s:%d" % (path, text.count("\n", 0, pos) + 1)

    for m in REF.finditer(text):
        secs = [m.group(2)] + CHAIN.findall(m.group(3) or "")
        for mm in CHAIN.finditer(text, m.start(2) - 1, m.end()):
            covered.add(mm.start())
        doc = resolve_doc(path, m.group(1), reader)
        if doc is None:
            probs.append("%s: %s: no such file in the repository" % (
                where(m.start()), m.group(1)))
            continue
        heads = headings(reader(doc))
        for s in secs:
            if not has_section(heads, s):
                probs.append("%s: %s has no section %s" % (
                    where(m.start()), doc, s))
    own = path.endswith(".md") and path.startswith("docs/")
    for mm in CHAIN.finditer(text):
        if mm.start() in covered:
            continue
        if own:
            if not has_section(headings(text), mm.group(1)):
                probs.append("%s: no section %s in this file" % (
                    where(mm.start()), mm.group(1)))
            continue
        ln = lines[text.count("\n", 0, mm.start())]
        probs.append("%s: '§%s' names no file in the repository: %s" % (
            where(mm.start()), mm.group(1), ln.strip()))
    return probs


def link_problems(path, text, reader):
    probs = []
    body = strip_fences(text)
    for m in LINK.finditer(body):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, anchor = target.partition("#")
        lineno = body.count("\n", 0, m.start()) + 1
        if file_part:
            dest = os.path.normpath(os.path.join(os.path.dirname(path),
                                                 file_part))
            if dest.startswith(".."):
                probs.append("%s:%d: link %s leaves the repository" % (
                    path, lineno, target))
                continue
            if not os.path.exists(os.path.join(SRC, dest)) and \
                    reader(dest) is None:
                probs.append("%s:%d: link %s: no such file" % (
                    path, lineno, target))
                continue
        else:
            dest = path
        if anchor and dest.endswith(".md"):
            t = reader(dest)
            if t is None or anchor not in {slug(h) for h in headings(t)}:
                probs.append("%s:%d: link %s: no heading with anchor #%s "
                             "in %s" % (path, lineno, target, anchor, dest))
    return probs


def shared_problems(path, text):
    if path.startswith("tests/") or path.endswith("_test.c"):
        return []
    probs = []
    for m in re.finditer(r"\.\./shared\b(/[\w./-]*)?", text):
        if not (m.group(1) or "").startswith("/testdata"):
            probs.append("%s:%d: %s points outside the repository" % (
                path, text.count("\n", 0, m.start()) + 1, m.group(0)))
    return probs


def disk_reader(rel):
    return read_text(os.path.join(SRC, rel))


def self_check(r):
    fake = {
        "docs/a.md": "# A\n\n## 1. One\n\n### 1.2 Sub\n\nSee §1.2 and "
                     "[b](b.md#2-two), [x](b.md#9-nine).\n",
        "docs/b.md": "# B\n\n## 2. Two\n",
        "x.c": "/* docs/a.md §1.2, §1; docs/a.md §3; DESIGN §4;"
               " docs/nope.md §1 */\n",
        "README.md": "[ok](docs/a.md) [bad](docs/c.md) [out](../shared/D.md)"
                     " `../shared/testdata` ../shared/spec/x.md\n",
    }

    def rd(p):
        return fake.get(os.path.normpath(p))

    p = section_problems("x.c", fake["x.c"], rd)
    text = "\n".join(p)
    r.check(len(p) == 3 and "has no section 3" in text and
            "'§4' names no file" in text and "nope.md: no such file" in text,
            "self-check: a missing section, an unnamed reference and a "
            "missing file are reported (and §1.2, §1 resolve)", text)
    p = section_problems("docs/a.md", fake["docs/a.md"], rd)
    r.check(p == [], "self-check: a bare §1.2 inside docs resolves to the "
            "same file", "\n".join(p))
    p = link_problems("docs/a.md", fake["docs/a.md"], rd)
    r.check(len(p) == 1 and "#9-nine" in p[0], "self-check: a link to a "
            "missing heading is reported, one to an existing heading is "
            "not", "\n".join(p))
    p = link_problems("README.md", fake["README.md"], rd)
    text = "\n".join(p)
    r.check(len(p) == 2 and "docs/c.md: no such file" in text and
            "leaves the repository" in text, "self-check: a missing link "
            "target and a link out of the repository are reported", text)
    p = shared_problems("README.md", fake["README.md"])
    r.check(len(p) == 2 and "../shared/testdata" not in "\n".join(p),
            "self-check: ../shared outside a corpus path is reported",
            "\n".join(p))


def main():
    r = Results("test_docs")
    self_check(r)
    files = tree_files()
    r.check(len(files) > 50, "the tree lists %d files" % len(files))
    r.check(os.path.isdir(os.path.join(SRC, "docs")), "docs/ exists")
    nrefs, sec_probs, link_probs, sh_probs = 0, [], [], []
    md = [f for f in files if f.endswith(".md")]
    for f in files:
        if f == "tests/integration/test_docs.py":
            continue        # its self-check examples are wrong on purpose
        text = disk_reader(f)
        if text is None:
            continue
        nrefs += text.count("§")
        sec_probs += section_problems(f, text, disk_reader)
        sh_probs += shared_problems(f, text)
    for f in md:
        if f == "README.md" or f.startswith("docs/") or \
                f.endswith("README.md"):
            link_probs += link_problems(f, disk_reader(f), disk_reader)
    r.check(nrefs > 50, "the tree has %d § references" % nrefs)
    r.check(not sec_probs, "every § reference names a file of the "
            "repository and a section it has", "\n".join(sec_probs))
    r.check(not link_probs, "every relative link in README.md, docs/ and "
            "the other READMEs resolves", "\n".join(link_probs))
    r.check(not sh_probs, "../shared appears only in tests and corpus "
            "paths", "\n".join(sh_probs))
    for need in ("architecture.md", "compatibility.md", "operations.md",
                 "benchmarks.md", "wire-formats.md", "reliability.md",
                 "style.md"):
        r.check(os.path.exists(os.path.join(SRC, "docs", need)),
                "docs/%s exists" % need)
    r.finish()


if __name__ == "__main__":
    main()
