#!/usr/bin/env python3
"""
test_readonly.py -- an ingester that refuses writes says so: /ready 503,
READONLY in the rings, so writes go to the other token owners and reads
still ask it.

4 ingesters (RF 3), 1 distributor, 1 querier; ingester-3 runs with a
memory bound (-ingester.head-max-bytes=8MiB) its resident memory is over
from the start, so it refuses every write (db.h, ing_db_tick).  Checks:
  - its /ready answers 503 naming the memory bound;
  - the distributor's ring shows it READONLY (/ring and
    smolder_ring_members{state="READONLY"}), still healthy for reads;
  - 200 uploads are all acknowledged and none of them is sent to it (its
    smolder_ingester_writes_total stays 0): each series' writes go to
    three ingesters that take them, and the READONLY token owner's share
    waits as hints;
  - every upload is in the flamegraph exactly once.
Under the sanitizer build (SM_SANITIZE=ON) the memory bound is not
measured (ingester.c, ING_MEASURE_RSS: resident memory is mostly ASan's
shadow), so nothing refuses and the test says it skipped.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import Workspace, limit_flags, metric_value, metrics  # noqa: E402
from smolder import run_script  # noqa: E402

COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()


class Ingesters(Cluster):
    """The fourth ingester gets the small memory bound, and is never ready:
    it is started without waiting for /ready, and the ring is waited for
    with three ACTIVE members."""

    def _ingester(self, i):
        s = Cluster._ingester(self, i)
        if i == 3:
            s.extra_flags.append("-ingester.head-max-bytes=8MiB")
            start = s.start
            s.start = lambda wait=True: start(wait=False)
        return s

    def wait_ring(self, active, timeout=30):
        return Cluster.wait_ring(self, min(active, 3), timeout)


def main(r):
    if os.environ.get("SM_SANITIZE", "").upper() in ("ON", "1", "TRUE"):
        r.skip("READONLY ingester", "sanitizer build: the memory bound is "
               "not measured, so no ingester refuses writes")
        return
    ws = Workspace("readonly")
    r.at_end(lambda: ws.cleanup(r))
    c = Ingesters(ws, ingesters=4, distributors=1, queriers=1, rf=3,
                  extra=COMMON)
    c.start_for(r)
    d, q, ro = c.distributors[0], c.queriers[0], c.ingesters[3]
    resp = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        resp = ro.request("GET", "/ready")
        if resp.status == 503:
            break
        time.sleep(0.2)
    r.check(resp is not None and resp.status == 503 and
            b"memory bound" in resp.body, "the refusing ingester's /ready "
            "is 503 naming its memory bound", resp and resp.describe())
    state = None
    while time.monotonic() < deadline:
        ring = c.ring(d)
        state = {m["id"]: (m["state"], m["healthy"])
                 for m in ring["members"]}.get("ingester-3")
        if state and state[0] == "READONLY":
            break
        time.sleep(0.2)
    r.eq(state, ("READONLY", True), "the distributor's ring: READONLY, "
         "healthy for reads")
    _, m = metrics(d)
    r.eq(metric_value(m, "smolder_ring_members", state="READONLY"), 1,
         "smolder_ring_members{state=\"READONLY\"} is 1")

    t0 = int(time.time())
    bad = []
    for i in range(200):
        resp = d.ingest({"name": "ro.cpu{shard=s%d}" % (i % 16),
                         "from": str(t0), "until": str(t0 + 1)},
                        ("main;w%d 1\n" % i).encode())
        if resp.status != 200:
            bad.append(resp.describe())
    r.check(not bad, "200 uploads acknowledged", "\n".join(bad[:5]))
    _, m = metrics(ro)
    r.eq(metric_value(m, "smolder_ingester_writes_total") or 0, 0,
         "none was sent to the READONLY ingester")
    _, m = metrics(d)
    r.check((metric_value(m, "smolder_distributor_hints") or 0) > 0,
            "the writes the READONLY owner did not take wait for it as "
            "hints (delivered once it takes writes again)")
    res = q.render("ro.cpu{}", frm=t0 - 60, until=t0 + 60, fmt="collapsed")
    got = {}
    for line in res.text().splitlines():
        st, _, v = line.rpartition(" ")
        if st.startswith("main;w"):
            got[int(st[6:])] = got.get(int(st[6:]), 0) + int(v)
    r.eq(res.status, 200, "the querier answers")
    r.eq(sorted(got), list(range(200)), "every upload is in the flamegraph")
    r.check(all(v == 10000000 for v in got.values()), "each exactly once")
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_readonly", 120, main)
