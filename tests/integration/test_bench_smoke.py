#!/usr/bin/env python3
"""
test_bench_smoke.py -- the benchmark suite still runs.

Runs `bench/run --quick --out <tmp>` (CI smoke sizes: 3-4 minutes on a
2-core box beside the other tests, under ctest's 10-minute bound) against
the build under test, then checks what it wrote:

  - one JSON row per figure: B1, B2a, B2b, B3, B4a, B4b, B5, B6, B7a..B7f,
    B11a..B11c, B17a, B17b, B18, B12a, B12b, B8, B9, B10a, B10b, B13a..B13d,
    B14a, B14b, B16, B19a, B19b, B20, B15,
    each
    with the keys id, figure, unit, value, baseline,
    baseline_value, ratio, goal, met;
  - every row: value, baseline value and ratio are finite and positive, the
    ratio is value / baseline value, and `met` agrees with the goal;
  - B2 and B3 cross-checked their result: the flamegraph total equals the
    C decode-and-merge total of the same files (a wrong query would be
    fast for nothing); B9 likewise, for every profile it wrote under the
    memory bound;
  - B6's cluster held every series on each of its 3 ingesters (bench/run
    checks it and fails otherwise), and the table printed every row.

It does not judge the figures (goals met or not): that is the report's
job, and these machines are too noisy for thresholds in CI.

Skips (exit 0, with a message) under the ASan/UBSan pass (SM_SANITIZE=ON:
figures would be meaningless and slow), without Go, zstd or taskset, or
on fewer than 2 CPUs (B1 pins server and load generator apart).
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smolder import Results, smolder_bin, source_dir  # noqa: E402

WANT_IDS = ["B1", "B2a", "B2b", "B3", "B4a", "B4b", "B5", "B6", "B7a", "B7b",
            "B7c", "B7d", "B7e", "B7f", "B11a", "B11b", "B11c", "B17a", "B17b", "B18", "B12a",
            "B12b", "B8", "B9",
            "B10a", "B10b", "B13a", "B13b", "B13c", "B13d", "B14a", "B14b", "B16",
            "B19a", "B19b", "B20", "B15"]
KEYS = ["id", "figure", "unit", "value", "baseline", "baseline_value", "ratio",
        "goal", "met"]


def finite_pos(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and \
        math.isfinite(x) and x > 0


def main():
    r = Results("test_bench_smoke")
    if os.environ.get("SM_SANITIZE", "").upper() in ("ON", "1", "TRUE", "YES"):
        r.skip_all("SM_SANITIZE=ON: benchmarks are not run under sanitizers",
                   expected=True)
    for exe in ("go", "zstd", "taskset"):
        if shutil.which(exe) is None:
            r.skip_all("%s not found: bench/run needs it" % exe)
    if (os.cpu_count() or 1) < 2:
        r.skip_all("fewer than 2 CPUs: B1 pins the server and the load "
                   "generator to different cores", expected=True)

    build = os.path.dirname(smolder_bin())
    tmp = tempfile.mkdtemp(prefix="smolder-bench-smoke-")
    out = os.path.join(tmp, "quick.json")
    try:
        try:
            p = subprocess.run(
                [sys.executable, os.path.join(source_dir(), "bench", "run"),
                 "--quick", "--out", out, "--build", build,
                 "--work", os.path.join(tmp, "work")],
                capture_output=True, text=True, timeout=540)
        except subprocess.TimeoutExpired as e:
            r.fail("bench/run --quick finished within 540 s",
                   (e.stderr or b"")[-3000:] if isinstance(e.stderr, bytes)
                   else (e.stderr or "")[-3000:])
            r.finish()
        r.check(p.returncode == 0, "bench/run --quick exits 0",
                "exit %d\nstderr tail:\n%s" % (p.returncode, p.stderr[-3000:]))
        # The table, without the servers' start lines: a failing check
        # below must stay within the first lines a CI excerpt shows.
        table = "\n".join(ln for ln in p.stdout.split("\n")
                          if " started: pid " not in ln)
        if not r.check(os.path.exists(out), "JSON written to --out"):
            r.finish()
        with open(out) as f:
            rows = json.load(f)
        r.check(isinstance(rows, list), "JSON is a list of rows")
        ids = [x.get("id") for x in rows]
        r.eq(ids, WANT_IDS, "one row per figure, in order")
        byid = {x.get("id"): x for x in rows}
        for x in rows:
            missing = [k for k in KEYS if k not in x]
            r.check(not missing, "%s has every key" % x.get("id"),
                    "missing %s" % missing)
        for i in WANT_IDS:
            x = byid.get(i)
            if x is None:
                continue
            ok = all(finite_pos(x.get(k)) for k in
                     ("value", "baseline_value", "ratio"))
            r.check(ok, "%s: finite positive value, baseline value, ratio" % i,
                    json.dumps(x, indent=1))
            if not ok:
                continue
            if x.get("per_round_ratios"):
                # B1, B16, B20: the median of its rounds' own ratios (bench/README).
                pr = sorted(x["per_round_ratios"])
                mid = (pr[len(pr) // 2] if len(pr) % 2 else
                       (pr[len(pr) // 2 - 1] + pr[len(pr) // 2]) / 2)
                r.check(abs(x["ratio"] - mid) <= 1e-9 * x["ratio"],
                        "%s: ratio = median of the per-round ratios" % i)
            else:
                r.check(abs(x["ratio"] - x["value"] / x["baseline_value"]) <=
                        1e-9 * x["ratio"], "%s: ratio = value / baseline" % i)
            # A ratio goal, an absolute one (goal_value: B7, B8), or both;
            # B8's failure counts and B7's totals must also hold.
            want_met = True
            if x.get("goal_ratio") is not None:
                want_met = (x["ratio"] >= x["goal_ratio"]
                            if x["goal_op"] == ">="
                            else x["ratio"] <= x["goal_ratio"])
            if x.get("goal_value") is not None:
                want_met = want_met and (
                    x["value"] < x["goal_value"] if x["goal_op"] == "<"
                    else x["value"] <= x["goal_value"])
            if "write_errors" in x:
                want_met = (want_met and x["write_errors"] == 0 and
                            x.get("probe_failures") == 0)
            if "totals_equal" in x:
                want_met = want_met and x["totals_equal"] is True
            r.check(x["met"] is want_met, "%s: met agrees with the goal (%s %s)"
                    % (i, x["goal_op"], x["goal_ratio"]), json.dumps(x))
            r.check(x["baseline"] and x["goal"] and x["unit"],
                    "%s names its baseline, goal and unit" % i)
        for i in ("B7a", "B7b", "B7c", "B7d", "B7e", "B7f"):
            x = byid.get(i, {})
            r.check(x.get("totals_equal") is True and "flamegraph total "
                    "identical with and without tiers" in (x.get("note") or ""),
                    "%s: the 30-day flamegraph total is the same on tiers and "
                    "raw buckets" % i, x.get("note"))
        for i in ("B2a", "B3"):
            x = byid.get(i, {})
            r.check("flamegraph total = decode_merge total" in (x.get("note") or ""),
                    "%s: flamegraph total equals the decode-and-merge total" % i,
                    x.get("note"))
        x = byid.get("B9", {})
        r.check("flamegraph total = decode_merge total x series" in (x.get("note") or ""),
                "B9: every profile written under the memory bound is queryable",
                x.get("note"))
        r.check(all(("\n%s " % i) in table for i in WANT_IDS),
                "the printed table has every row", table)
        r.check("not run" not in table, "the table has a figure in every row")
        print(table, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r.finish()


if __name__ == "__main__":
    main()
