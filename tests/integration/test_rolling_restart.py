#!/usr/bin/env python3
"""
test_rolling_restart.py -- ingesters restarted one right after another,
as a Kubernetes rollout does, fail no client request.

3 ingesters (RF 3, -shutdown-delay=1s), 1 distributor, 1 querier, a
writer (~20 uploads/s, each its own stack) and a reader (render, label
values, SelectSeries in turn).  Three times round, each ingester in turn
gets SIGTERM and is started again on its disk, and the next one is
stopped the moment the restarted one's /ready says 200 -- what a
StatefulSet rollout does.  Two rules make that safe (ingester.h):
  - from SIGTERM on a stopping ingester says LEAVING while it still
    serves for -shutdown-delay, so the rings move off it before its port
    closes;
  - a restarted ingester's /ready waits -ingester.min-ready-duration
    after it turned ACTIVE, so every ring has seen it before the next
    one goes.
Checks: every write acknowledged, every query 200, and afterwards every
acknowledged stack in the flamegraph exactly once.
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import Workspace, limit_flags  # noqa: E402
from smolder import run_script  # noqa: E402

COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()
APP = "roll.cpu"
ROUNDS = 3


def main(r):
    ws = Workspace("rolling-restart")
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=COMMON, ingester_extra=[
                    "-shutdown-delay=1s",
                    # a reconnect (up to 500 ms) and a few probes
                    "-ingester.min-ready-duration=1s"])
    r.at_end(lambda: c.stop())
    c.start()
    d, q = c.distributors[0], c.queriers[0]
    t0 = int(time.time())
    stop = threading.Event()
    writes, reads = [], []

    def writer():
        i = 0
        while not stop.is_set():
            t = int(time.time())
            resp = d.ingest({"name": APP, "from": str(t),
                             "until": str(t + 1)},
                            ("main;w%d 1\n" % i).encode())
            writes.append((i, resp.status, resp.describe()
                           if resp.status != 200 else ""))
            i += 1
            time.sleep(0.05)

    def reader():
        k = 0
        while not stop.is_set():
            now = int(time.time())
            if k % 3 == 0:
                resp = q.render(APP + "{}", frm=t0 - 60, until=now + 60,
                                fmt="collapsed")
            elif k % 3 == 1:
                resp = q.request("GET", "/pyroscope/label-values", {
                    "label": "service_name", "start": str(t0 - 60),
                    "end": str(now + 60)})
            else:
                resp = q.request(
                    "POST", "/querier.v1.QuerierService/SelectSeries",
                    body=json.dumps({
                        "profileTypeID": "process_cpu:cpu:nanoseconds:cpu:"
                                         "nanoseconds",
                        "labelSelector": '{service_name="roll"}',
                        "start": str((t0 - 60) * 1000),
                        "end": str((now + 60) * 1000),
                        "step": 10}).encode(),
                    headers={"Content-Type": "application/json"})
            reads.append((k, resp.status, resp.describe()
                          if resp.status != 200 else ""))
            k += 1
            time.sleep(0.05)

    th = [threading.Thread(target=writer, daemon=True),
          threading.Thread(target=reader, daemon=True)]
    for t in th:
        t.start()
    time.sleep(1)
    for rnd in range(ROUNDS):
        for i in range(3):
            probs = c.ingesters[i].stop()
            r.check(not probs, "round %d: ingester-%d stops cleanly"
                    % (rnd, i), "\n".join(probs))
            c.restart_ingester(i)     # returns once /ready is 200
    time.sleep(1)
    stop.set()
    for t in th:
        t.join(timeout=60)
    bad_w = [x for x in writes if x[1] != 200]
    bad_r = [x for x in reads if x[1] != 200]
    print("# %d writes, %d queries over %d restarts" % (
        len(writes), len(reads), 3 * ROUNDS), flush=True)
    r.check(len(writes) > 100 and not bad_w, "every write acknowledged "
            "(%d)" % len(writes), "\n".join(str(x) for x in bad_w[:5]))
    r.check(len(reads) > 50 and not bad_r, "every query answered 200 (%d)"
            % len(reads), "\n".join(str(x) for x in bad_r[:5]))
    r.check(c.wait_ring(active=3), "all three ACTIVE", str(c.states()))
    acked = {x[0] for x in writes if x[1] == 200}
    res = q.render(APP + "{}", frm=t0 - 60, until=int(time.time()) + 60,
                   fmt="collapsed")
    got = {}
    for line in res.text().splitlines():
        st, _, v = line.rpartition(" ")
        if st.startswith("main;w"):
            got[int(st[6:])] = got.get(int(st[6:]), 0) + int(v)
    missing = sorted(acked - set(got))
    r.check(res.status == 200 and not missing, "every acknowledged write "
            "is in the flamegraph", "missing %s" % missing[:10])
    r.check(all(v == 10000000 for v in got.values()), "each exactly once",
            str([(i, v) for i, v in got.items() if v != 10000000][:5]))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_rolling_restart", 240, main)
