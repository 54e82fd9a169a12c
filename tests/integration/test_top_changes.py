#!/usr/bin/env python3
"""
test_top_changes.py -- GET /api/top-changes ("what got slower after the
deploy", querier/changes.c) on real Go CPU profiles with a known
regression, single binary and a cluster (3 ingesters, RF 3) given the
same uploads.

tests/tools/genprof -service writes the CPU profile of a service's
request loop (parse, fib(N), sort, one request after another, so each
function's share follows its work).  Release v1 computes fib(20), release
v2 fib(25): fib regressed.  Three profiles of each:
  - two ranges: v1's uploads an hour before v2's, same labels: the first
    function by the rise of its total share is main.fib, and by self
    share too; its left and right values are what go tool pprof -top
    shows for fib in the same profiles (flat and cum, summed);
  - two label sets: the same profiles as {release=v1} and {release=v2}
    over one range rank main.fib first as well;
  - the functions come by change, largest rise first; each side's total
    is the flamegraph total (/render) of that side;
  - the cluster's answers equal the single binary's;
  - GET /api/function-timeline of main.fib over each range sums to its
    total there (self=true: its self), and the timeline of a function
    that recurses counts each sample once;
  - bad parameters (by, limit, two profile types) are 400.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import oracle  # noqa: E402
from cluster import reference_and_rf3  # noqa: E402
from durability import Workspace, limit_flags  # noqa: E402
from smolder import run_script  # noqa: E402

BASE = (int(time.time()) // 3600) * 3600 - 3 * 3600
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()
RUNS = 3
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def profiles(r, tmp):
    """{"v1": [gz pprof bytes], "v2": [...]}, or None (skipped/failed)."""
    if not oracle.have_go():
        r.skip_all("go is not installed (make deps installs it): no real "
                   "Go profiles")
    exe, why = oracle.build_genprof(tmp)
    if exe is None:
        r.fail("genprof builds", why)
        return None
    out = {}
    for rel, fib in (("v1", 20), ("v2", 25)):
        out[rel] = []
        for k in range(RUNS):
            d = os.path.join(tmp, "%s-%d" % (rel, k))
            g = subprocess.run([exe, "-out", d, "-service", "-fib", str(fib),
                                "-cpu", "700ms"], capture_output=True,
                               timeout=60)
            if g.returncode != 0:
                r.fail("genprof -service runs", g.stderr.decode())
                return None
            with open(os.path.join(d, "cpu.pb.gz"), "rb") as f:
                out[rel].append((f.read(), os.path.join(d, "cpu.pb.gz")))
    return out


def pprof_fib(paths):
    """main.fib's flat and cum (ns) over the profiles, from go tool
    pprof -top (the oracle)."""
    flat = cum = 0
    for p in paths:
        res = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=0",
                              "-unit=ns", p], capture_output=True,
                             env=oracle.go_env(), timeout=120)
        for ln in res.stdout.decode().splitlines():
            f = ln.split()
            if len(f) >= 6 and f[5] == "main.fib":
                flat += int(float(f[0].rstrip("ns")))
                cum += int(float(f[3].rstrip("ns")))
    return flat, cum


def changes(srv, left, right, **extra):
    q = {"leftQuery": left[0], "leftFrom": str(left[1]),
         "leftUntil": str(left[2]), "rightQuery": right[0],
         "rightFrom": str(right[1]), "rightUntil": str(right[2])}
    q.update(extra)
    return srv.request("GET", "/api/top-changes", q)


def render_total(srv, query, frm, until):
    resp = srv.request("GET", "/render", {"query": query, "from": str(frm),
                                          "until": str(until)})
    if resp.status != 200:
        return None
    return resp.json()["flamebearer"]["numTicks"]


def run(r, ref, c, profs):
    for srv in (ref, c.distributors[0]):
        for rel, off in (("v1", 0), ("v2", 3600)):
            for k, (body, _) in enumerate(profs[rel]):
                for name, t in (("svc{}", BASE + off + 10 * k),
                                ("rel{release=%s}" % rel,
                                 BASE + 2 * 3600 + 10 * k)):
                    resp = srv.ingest_multipart(
                        {"name": name, "from": str(t), "until": str(t + 1)},
                        body)
                    if not r.check(resp.status == 200, "upload %s %s %d" % (
                            name, rel, k), resp.describe()):
                        return
    qry = c.queriers[0]
    left = (CPU + '{service_name="svc"}', BASE - 60, BASE + 600)
    right = (CPU + '{service_name="svc"}', BASE + 3600 - 60, BASE + 3600 + 600)
    wf, wc = pprof_fib([p for _, p in profs["v1"]])
    rf_, rc = pprof_fib([p for _, p in profs["v2"]])
    answers = {}
    for by in ("total", "self"):
        for srv, tag in ((ref, "single"), (qry, "cluster")):
            resp = changes(srv, left, right, by=by, limit="50")
            j = resp.json() if resp.status == 200 else None
            answers[(by, tag)] = j
            if not r.check(j is not None, "top changes by %s (%s)" % (
                    by, tag), resp.describe()):
                continue
            fns = j["functions"]
            r.eq(fns[0]["name"] if fns else None, "main.fib",
                 "by %s (%s): the regressed function comes first" % (by, tag))
            key = "totalChange" if by == "total" else "selfChange"
            ch = [f[key] for f in fns]
            r.check(ch == sorted(ch, reverse=True), "by %s (%s): functions "
                    "by change, largest rise first" % (by, tag), str(ch[:8]))
            fib = fns[0] if fns else {}
            r.eq((fib.get("left", {}).get("self"),
                  fib.get("left", {}).get("total"),
                  fib.get("right", {}).get("self"),
                  fib.get("right", {}).get("total")), (wf, wc, rf_, rc),
                 "by %s (%s): fib's values are go tool pprof's flat and cum"
                 % (by, tag))
            r.eq((j["left"]["total"], j["right"]["total"]),
                 (render_total(srv if srv is ref else qry, *left),
                  render_total(srv if srv is ref else qry, *right)),
                 "by %s (%s): each side's total is its flamegraph's" % (
                     by, tag))
        r.eq(answers[(by, "cluster")], answers[(by, "single")],
             "by %s: the cluster's answer is the single binary's" % by)
    for side, (fl, cu) in ((left, (wf, wc)), (right, (rf_, rc))):
        for self, want in (("false", cu), ("true", fl)):
            for srv, tag in ((ref, "single"), (qry, "cluster")):
                resp = srv.request("GET", "/api/function-timeline", {
                    "query": side[0], "from": str(side[1]),
                    "until": str(side[2]), "function": "main.fib",
                    "self": self})
                j = resp.json() if resp.status == 200 else {}
                got = sum(j.get("timeline", {}).get("samples", []))
                r.eq(got, want, "function-timeline of main.fib from %d, "
                     "self=%s (%s): go tool pprof's %s" % (
                         side[1], self, tag, "flat" if self == "true"
                         else "cum"))
    resp = ref.request("GET", "/api/function-timeline", {"query": left[0]})
    r.check(resp.status == 400, "function-timeline without a function "
            "-> 400", resp.describe())
    rng = (BASE + 2 * 3600 - 60, BASE + 2 * 3600 + 600)
    for srv, tag in ((ref, "single"), (qry, "cluster")):
        resp = changes(srv, (CPU + '{service_name="rel",release="v1"}',) + rng,
                       (CPU + '{service_name="rel",release="v2"}',) + rng)
        j = resp.json() if resp.status == 200 else {}
        r.eq((j.get("functions") or [{}])[0].get("name"), "main.fib",
             "two label sets (%s): the regressed function comes first" % tag)
    for what, extra, lq in (("by=other", {"by": "other"}, left[0]),
                            ("limit=0", {"limit": "0"}, left[0]),
                            ("two profile types", {},
                             "memory:alloc_space:bytes:space:bytes"
                             '{service_name="svc"}')):
        resp = changes(ref, (lq,) + left[1:], right, **extra)
        r.check(resp.status == 400, "%s -> 400" % what, resp.describe())
    print("# fib: v1 flat %d cum %d ns, v2 flat %d cum %d ns; top %s" % (
        wf, wc, rf_, rc, json.dumps(answers[("total", "single")][
            "functions"][:3])[:400]))


def main(r):
    tmp = tempfile.mkdtemp(prefix="smolder-topchanges-")
    r.at_end(lambda: shutil.rmtree(tmp, ignore_errors=True))
    profs = profiles(r, tmp)
    if profs is not None:
        ws = Workspace("topchanges")
        reference_and_rf3(r, ws, COMMON, lambda ref, c: run(r, ref, c, profs))


if __name__ == "__main__":
    run_script("test_top_changes", 180, main)
