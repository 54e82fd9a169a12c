#!/usr/bin/env python3
"""
test_fault_writes.py -- allocation faults inside writes: what is served is
exactly what was acknowledged, in the running binary and after kill -9.

The single binary runs with SMOLDER_TEST_FAULTS=write:3 (ingester.h, "Fault
injection"): one ingester write in three fails one of its allocations (the
k-th, k drawn log-uniformly up to 256 per write), so faults land in every
step of a head write (frames, tree nodes, series, the index, bucket merges,
profile records) and in the log and idempotency bookkeeping around it.
Heads are cut every 3 s (-ingester.block-duration) and their sealed buckets spilled every second
(-ingester.head-spill-interval), so the faults also meet fresh heads,
writes into buckets a write already filled and writes into spilled
buckets (read back first).

  1. Sequential posts (no request is ever in flight at a check): folded
     bodies with random stacks to four series of one app, their times
     cycling over 40 buckets (writes into sealed and spilled buckets), and
     real pprof files from
     tests/data (Go CPU, a Go heap profile with four sample types), whose
     per-type stacks come from oracle.collapse_pb.  Every 200 is
     acknowledged; a refused write (5xx) is retried once, as an SDK does,
     and counts only if the retry is acknowledged.
  2. The faults must have happened: smolder_ingester_write_failures_total
     > 0 and some requests refused; every other answer is 200.
  3. Every series (collapsed render over a fixed range) equals the sum of
     the acknowledged requests exactly.
  4. kill -9, restart on the same data dir WITHOUT the fault injection
     (the head log replays, cut blocks open), the same check.
  5. SIGTERM; no sanitizer report, exit 0.
"""

import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (DataServer, Workspace, limit_flags,  # noqa: E402
                        metric_value, metrics, stacks_add, wait_metric)
from smolder import run_script, data_dir  # noqa: E402

BUDGET_S = 150
POSTS = 240
T0 = 1700000000                   # 2023-11-14, fixed: every query is exact
FROM, UNTIL = T0 - 600, T0 + 3600
FOLDED_TYPE = "memory:alloc_objects:count::"
ENVS = ["a", "b", "c", "d"]
VOCAB = ["main;run;work;compute", "main;run;work;io", "main;run;idle",
         "main;gc", "main;gc;mark", "net;accept", "net;read;parse",
         "net;read;parse;json", "timer;tick;fire", "sys;epoll_wait"]
PPROFS = [("fwfib", "parca__fib.pb.gz"),
          ("fwheap", "parca__many__1644509272337470000.pb.gz")]
MAX_NODES = 1000000


def pprof_inputs():
    out = []
    for app, fname in PPROFS:
        with open(os.path.join(data_dir(), fname), "rb") as f:
            body = f.read()
        pb = oracle.load_pb(body)
        ids = oracle.profile_type_ids(pb.sample_types, pb.period_type)
        keys = {}
        for tid, st in zip(ids, oracle.collapse_pb(pb)):
            if st:
                keys[(tid, '{service_name="%s"}' % app)] = st
        out.append((app, body, keys))
    return out


def post(srv, q, body):
    return srv.request("POST", "/ingest", q, body, timeout=30)


def check_all(r, srv, acked, what):
    bad = 0
    for key in sorted(acked):
        tid, sel = key
        resp = srv.render(tid + sel, frm=FROM, until=UNTIL, fmt="collapsed",
                          max_nodes=MAX_NODES)
        if resp.status != 200:
            r.fail("%s: render %s%s" % (what, tid, sel), resp.describe())
            bad += 1
            continue
        got = oracle.parse_collapsed(resp.text())
        want = acked[key]
        if got != want:
            missing = {k: v - got.get(k, 0) for k, v in want.items()
                       if got.get(k, 0) != v}
            extra = {k: v for k, v in got.items() if k not in want}
            r.fail("%s: %s%s equals the acknowledged writes" % (what, tid,
                                                                 sel),
                   "differing stacks (want - got): %s; extra: %s" % (
                       dict(list(missing.items())[:5]),
                       dict(list(extra.items())[:5])))
            bad += 1
    r.check(bad == 0, "%s: %d series equal exactly the acknowledged "
            "writes" % (what, len(acked)))


def main(r):
    ws = Workspace("faultwrites")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    flags = limit_flags() + ["-ingester.block-duration=3s",
                             "-ingester.head-spill-interval=1s",
                             "-validation.reject-older-than=0"]
    pprofs = pprof_inputs()
    rng = random.Random(20261124)
    acked = {}
    n = {"ok": 0, "refused": 0, "retried_ok": 0, "other": 0}
    others = []

    os.environ["SMOLDER_TEST_FAULTS"] = "write:3"
    try:
        srv = DataServer(data, ws.log_dir("faults"), extra_flags=flags,
                         name="faulty")
        srv.start()
    finally:
        del os.environ["SMOLDER_TEST_FAULTS"]
    r.at_end(srv.stop)
    r.check("TEST FAULT INJECTION" in srv.stderr_text(),
            "the server says the fault injection is on")

    spilled_mid = None
    for i in range(POSTS):
        if i == POSTS // 2:
            # Half way, wait for a spill (the cutter ticks every second),
            # so the second half writes into spilled buckets.
            spilled_mid = wait_metric(
                srv, "smolder_ingester_head_spilled_bytes_total",
                lambda v: v is not None and v > 0, timeout=20)
        t = T0 + (i * 7 % 40) * 10        # cycling over 40 buckets
        if i % 5 == 4:
            app, body, keys = pprofs[i // 5 % len(pprofs)]
            q = {"name": app, "format": "pprof"}
        else:
            stacks = {}
            for _ in range(rng.randint(1, 4)):
                s = rng.choice(VOCAB)
                stacks[s] = stacks.get(s, 0) + rng.randint(1, 1000)
            env = rng.choice(ENVS)
            body = "".join("%s %d\n" % kv for kv in stacks.items()).encode()
            keys = {(FOLDED_TYPE, '{service_name="fw",env="%s"}' % env):
                    stacks}
            q = {"name": "fw.alloc_objects{env=%s}" % env}
        q["from"] = str(t)
        q["until"] = str(t)
        for attempt in range(2):
            resp = post(srv, q, body)
            if resp.status == 200:
                n["ok" if attempt == 0 else "retried_ok"] += 1
                for k, st in keys.items():
                    stacks_add(acked.setdefault(k, {}), st)
                break
            if resp.status >= 500:
                n["refused"] += 1
                continue
            n["other"] += 1
            others.append("HTTP %d %s" % (resp.status, resp.text()[:200]))
            break
        for k in keys:
            acked.setdefault(k, {})

    print("# posts: %s" % n, flush=True)
    fails = metric_value(metrics(srv)[1],
                         "smolder_ingester_write_failures_total")
    r.check(fails is not None and fails > 0,
            "injected faults refused writes (write_failures_total %s)" % fails)
    r.check(n["refused"] > 0 and n["ok"] > 0,
            "some posts refused, some acknowledged (%s)" % n)
    r.check(spilled_mid is not None and spilled_mid > 0,
            "sealed buckets were spilled half way (%s bytes)" % spilled_mid)
    r.check(n["other"] == 0, "every answer is 200 or a 5xx refusal",
            "; ".join(others[:5]))
    r.check(srv.alive(), "the server survives the faults")
    check_all(r, srv, acked, "under faults")

    problems = srv.kill9()
    r.check(not problems, "kill -9 of a live server", "; ".join(problems))
    srv2 = DataServer(data, ws.log_dir("replay"), extra_flags=flags,
                      name="replayed")
    srv2.start()
    r.at_end(srv2.stop)
    r.check("TEST FAULT INJECTION" not in srv2.stderr_text(),
            "the restarted server runs without fault injection")
    check_all(r, srv2, acked, "after kill -9 and replay")
    problems = srv2.stop()
    r.check(not problems, "clean SIGTERM after the replay",
            "; ".join(problems))


if __name__ == "__main__":
    run_script("test_fault_writes", BUDGET_S, main)
