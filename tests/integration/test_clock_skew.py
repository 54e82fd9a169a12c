#!/usr/bin/env python3
"""
test_clock_skew.py -- skewed clocks fail no query, and the ring reports
them: 3 ingesters (RF 3), a distributor and a querier, with this
process's wall clock moved by SMOLDER_TEST_CLOCK_SKEW_MS (common/sm.h) --
the querier 2 minutes behind, ingester-1 10 minutes ahead, as hosts
without NTP would be.

  - every query answers 200 with every upload (a deadline sent in the
    querier's clock used to look 2 to 12 minutes past to the ingesters:
    every call failed "deadline passed");
  - the querier's /ring shows each member's clock_skew_ms (ingester-1
    about +12 min, the others about +2 min) and
    smolder_ring_member_clock_skew_seconds, and it logs a warning;
  - a query held by a stopped (SIGSTOP) ingester still ends at
    -querier.timeout, measured by the querier's clock.
"""

import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from durability import Workspace, metrics  # noqa: E402
from smolder import freeze, metric_value, run_script  # noqa: E402

BUDGET_S = 120
SKEW = {"querier": -120000, "ingester-1": 600000}


def body(r):
    ws = Workspace("clock-skew")
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=3, distributors=1, queriers=0, rf=3,
                extra=["-validation.reject-older-than=0",
                       "-validation.reject-newer-than=0",
                       "-querier.timeout=3s"])
    c.start_for(r)
    # ingester-1 ahead: restarted under a moved clock
    c.stop_ingester(1)
    os.environ["SMOLDER_TEST_CLOCK_SKEW_MS"] = str(SKEW["ingester-1"])
    try:
        c.restart_ingester(1)
    finally:
        del os.environ["SMOLDER_TEST_CLOCK_SKEW_MS"]
    os.environ["SMOLDER_TEST_CLOCK_SKEW_MS"] = str(SKEW["querier"])
    try:
        q = c._stateless("querier", 0).start()
    finally:
        del os.environ["SMOLDER_TEST_CLOCK_SKEW_MS"]
    c.queriers.append(q)
    r.check(c.wait_ring(active=3), "the ring sees 3 ACTIVE ingesters")
    d = c.distributors[0]
    now = int(time.time())
    n = 0
    for k in range(30):
        resp = d.ingest({"name": "sk.cpu{}", "from": now - 300 + k,
                         "until": now - 299 + k}, b"main;skew 1\n")
        n += resp.status == 200
    r.eq(n, 30, "every upload acknowledged")
    r.check(c.wait_writes(30), "every replica applied every upload")
    got = None
    for _ in range(3):
        resp = q.render("sk.cpu{}", frm=now - 3600, until=now + 3600,
                        fmt="collapsed")
        got = (resp.status, resp.text().strip())
        if resp.status == 200:
            break
        time.sleep(0.5)
    r.check(got[0] == 200 and got[1].startswith("main;skew ") and
            int(got[1].rsplit(" ", 1)[1]) > 0,
            "the querier 2 min behind, an ingester 10 min ahead: 200 with "
            "the data", str(got)[:300])
    ring = c.ring(q) or {}
    skews = {m["id"]: m.get("clock_skew_ms") for m in ring.get("members", [])}
    ok = all(isinstance(skews.get(i), int) for i in
             ("ingester-0", "ingester-1", "ingester-2"))
    r.check(ok and abs(skews["ingester-1"] - 720000) < 5000 and
            abs(skews["ingester-0"] - 120000) < 5000,
            "/ring: ingester-1 about +12 min, ingester-0 about +2 min as "
            "the querier sees them", str(skews))
    _, p = metrics(q)
    v = metric_value(p, "smolder_ring_member_clock_skew_seconds",
                     member=c.ingesters[1].extra_flags[1].split("=", 1)[1])
    r.check(v is not None and abs(v - 720) < 5,
            "smolder_ring_member_clock_skew_seconds (%r)" % v)
    r.check("member clock skew" in q.stderr_text(), "the querier warns "
            "about the skew")
    # A stopped ingester: the query still ends at the querier's timeout.
    freeze(c.ingesters[2].proc.pid)
    try:
        t0 = time.monotonic()
        resp = q.render("sk.cpu{}", frm=now - 3600, until=now + 3600,
                        fmt="collapsed")
        took = time.monotonic() - t0
    finally:
        os.kill(c.ingesters[2].proc.pid, signal.SIGCONT)
    r.check(resp.status == 200 and took < 10, "one ingester stopped: the "
            "query answers from the others within -querier.timeout "
            "(%d in %.1f s)" % (resp.status, took))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_clock_skew", BUDGET_S, body)
