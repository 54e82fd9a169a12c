#!/usr/bin/env python3
"""
run_tiers.py -- run a build directory's tests tier by tier, then say how
long each tier took, what it skipped and what failed.

    tests/tools/run_tiers.py BUILD_DIR [--jobs N] [--tier-jobs TIER=N ...]
                             [--tiers unit,cluster,...] [--summary FILE]

The tiers are ctest labels (CMakeLists.txt): unit (each component's
*_test.c), cluster (in-process clusters, tests/cluster), integration
(real processes, tests/integration), fuzz (the fuzz corpora replayed)
and long (the ten-minute partition and such; registered only with
-DSM_LONG_TESTS=ON, and run by `make test-long`).  Each tier is one
`ctest -L ^tier$ -j N --output-on-failure` (N from --tier-jobs for that
tier, else --jobs); every tier runs even when one
fails, and the exit status is non-zero if any did.

What a tier skipped is read from ctest's log: a whole test that exited
77 (SKIP_RETURN_CODE), and the parts of passing tests that printed a
skip line ("SKIP name: why" in C, "skip  what: why" in Python).  The
summary table is printed last and, with --summary, appended to FILE
(make test prints the plain and the sanitizer summaries together).
"""

import argparse
import os
import re
import subprocess
import sys
import time

TIERS = ("unit", "cluster", "integration", "fuzz")

# "----------" blocks of LastTest.log: the test's name, then its output.
_BLOCK = re.compile(r'^\d+/\d+ Testing: (\S+)$', re.M)
_SKIP_LINE = re.compile(r'^(?:SKIP (.+)|skip  (.+)|skipped: (.+))$', re.M)


def skips_in_log(build):
    """[(test, why)] for each skip line in the last ctest run's log."""
    path = os.path.join(build, "Testing", "Temporary", "LastTest.log")
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    out = []
    marks = list(_BLOCK.finditer(text))
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
        for s in _SKIP_LINE.finditer(text[m.end():end]):
            why = next(g for g in s.groups() if g)
            out.append((m.group(1), why.strip()))
    return out


def count_tests(build, tier):
    r = subprocess.run(["ctest", "-N", "-L", "^%s$" % tier], cwd=build,
                       capture_output=True, text=True)
    m = re.search(r'Total Tests: (\d+)', r.stdout)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tier-jobs", action="append", default=[],
                    metavar="TIER=N", help="another -j for one tier")
    ap.add_argument("--tiers", default=",".join(TIERS))
    ap.add_argument("--summary")
    a = ap.parse_args()
    tier_jobs = {}
    for tj in a.tier_jobs:
        tier, _, n = tj.partition("=")
        if not n.isdigit() or int(n) < 1:
            ap.error("--tier-jobs %s: want TIER=N with N >= 1" % tj)
        tier_jobs[tier] = int(n)
    rows, skipped, failed_tiers = [], [], []
    for tier in a.tiers.split(","):
        n = count_tests(a.build, tier)
        if n == 0:
            rows.append((tier, 0, 0.0, "no tests"))
            continue
        print("=== tier %s: %d tests" % (tier, n), flush=True)
        t0 = time.monotonic()
        rc = subprocess.run(["ctest", "-L", "^%s$" % tier, "-j",
                             str(tier_jobs.get(tier, a.jobs)),
                             "--output-on-failure"],
                            cwd=a.build).returncode
        dt = time.monotonic() - t0
        rows.append((tier, n, dt, "passed" if rc == 0 else "FAILED"))
        if rc != 0:
            failed_tiers.append(tier)
        skipped += [(tier, t, why) for t, why in skips_in_log(a.build)]
    lines = ["tiers of %s:" % os.path.abspath(a.build)]
    for tier, n, dt, res in rows:
        lines.append("  %-12s %4d tests  %7.1f s  %s" % (tier, n, dt, res))
    lines.append("  %-12s %4d tests  %7.1f s" % (
        "total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    if skipped:
        lines.append("skipped (%d):" % len(skipped))
        for tier, t, why in skipped:
            if len(why) > 160:      # a whole HTTP answer, say
                why = why[:157] + "..."
            lines.append("  %s/%s: %s" % (tier, t, why))
    else:
        lines.append("skipped: none")
    text = "\n".join(lines) + "\n"
    print(text, end="", flush=True)
    if a.summary:
        with open(a.summary, "a") as f:
            f.write(text)
    return 1 if failed_tiers else 0


if __name__ == "__main__":
    sys.exit(main())
