#!/usr/bin/env python3
"""
test_frozen_replica.py -- a frozen ingester does not stall reads or writes.

3 ingesters (RF=3), 1 distributor, 1 querier.  A writer pushes a profile
with its own stack every ~50 ms and a reader runs /render (collapsed),
/pyroscope/label-values, Connect SelectSeries and settings.v1 Get
in turn, for 3 s, then
ingester 1 is SIGSTOPped for FREEZE_S seconds (what a GC pause, a stuck
disk or a partition looks like: its connections stay open and nothing
answers), then SIGCONTed, and the load runs 3 s more.  Checks:
  - every write is acknowledged (quorum 2 of 3 holds without it);
  - every query answers 200, and the p99 latency while frozen is under
    2 s (the querier's -querier.straggler-wait drops the silent replica
    once the two others can complete the answer, querier/fanout.c);
  - after SIGCONT and the ring settling, the collapsed flamegraph holds
    every acknowledged stack exactly once (one 10 ms sample): nothing lost, nothing
    double-counted although the frozen replica missed the freeze's writes.
The latencies are printed (before, frozen, after) for the closing note.
"""

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (Workspace, limit_flags, metric_value,  # noqa: E402
                        metrics)
from smolder import freeze, run_script  # noqa: E402

COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()
FREEZE_S = 30
APP = "frozen.cpu"


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class Load:
    """The writer and reader threads; phases tag each sample."""

    def __init__(self, d, q, t0):
        self.d, self.q, self.t0 = d, q, t0
        self.phase = "before"
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.writes = []        # (i, phase, status, seconds)
        self.queries = []       # (kind, phase, status, seconds, detail)

    def writer(self):
        i = 0
        while not self.stop.is_set():
            t = int(time.time())
            ph = self.phase
            s = time.monotonic()
            r = self.d.ingest({"name": APP, "from": str(t),
                               "until": str(t + 1)},
                              ("main;w%d 1\n" % i).encode())
            with self.lock:
                self.writes.append((i, ph, r.status, time.monotonic() - s,
                                    r.describe() if r.status != 200 else ""))
            i += 1
            time.sleep(0.05)

    def reader(self):
        k = 0
        while not self.stop.is_set():
            now = int(time.time())
            ph = self.phase
            kind = ("render", "labels", "series", "settings")[k % 4]
            s = time.monotonic()
            if kind == "render":
                r = self.q.render(APP + "{}", frm=self.t0 - 60,
                                  until=now + 60, fmt="collapsed")
            elif kind == "labels":
                r = self.q.request("GET", "/pyroscope/label-values", {
                    "label": "service_name", "start": str(self.t0 - 60),
                    "end": str(now + 60)})
            elif kind == "settings":
                r = self.q.request(
                    "POST", "/settings.v1.SettingsService/Get", body=b"{}",
                    headers={"Content-Type": "application/json"})
            else:
                body = json.dumps({
                    "profileTypeID": "process_cpu:cpu:nanoseconds:cpu:"
                                     "nanoseconds",
                    "labelSelector": '{service_name="frozen"}',
                    "start": str((self.t0 - 60) * 1000),
                    "end": str((now + 60) * 1000), "step": 10}).encode()
                r = self.q.request(
                    "POST", "/querier.v1.QuerierService/SelectSeries",
                    body=body, headers={"Content-Type": "application/json"})
            with self.lock:
                self.queries.append((kind, ph, r.status,
                                     time.monotonic() - s,
                                     r.describe() if r.status != 200 else ""))
            k += 1
            time.sleep(0.1)

    def outage(self, r, stop, resume, seconds, what):
        """Run the load 3 s, then stop() `what` for `seconds` (phase
        "frozen"), resume() it and run 3 s more ("after"); end with the
        threads joined."""
        th = [threading.Thread(target=self.writer, daemon=True),
              threading.Thread(target=self.reader, daemon=True)]
        for t in th:
            t.start()
        time.sleep(3)
        stop()
        self.phase = "frozen"
        print("# %s stopped for %d s" % (what, seconds), flush=True)
        time.sleep(seconds)
        resume()
        self.phase = "after"
        time.sleep(3)
        self.stop.set()
        for t in th:
            t.join(timeout=120)
        r.check(not any(t.is_alive() for t in th), "the load threads end")

    def phases(self):
        """(phase, write seconds, query seconds) for each phase."""
        for ph in ("before", "frozen", "after"):
            yield (ph, [x[3] for x in self.writes if x[1] == ph],
                   [x[3] for x in self.queries if x[1] == ph])


def main(r):
    ws = Workspace("frozen-replica")
    r.at_end(lambda: ws.cleanup(r))
    # The default heartbeat timeout (not the tests' 1 s): the querier
    # keeps the frozen ingester in its ring for that long, so the reads
    # of the freeze's first 10 s rely on the straggler wait alone.
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=COMMON, heartbeat_timeout="10s")
    frozen = None
    try:
        c.start()
        t0 = int(time.time())
        load = Load(c.distributors[0], c.queriers[0], t0)
        frozen = c.ingesters[1].proc

        def resume():
            nonlocal frozen
            os.kill(frozen.pid, signal.SIGCONT)
            frozen = None
        load.outage(r, lambda: freeze(frozen.pid), resume, FREEZE_S,
                    "ingester-1 (pid %d)" % frozen.pid)

        w = list(load.writes)
        q = list(load.queries)
        for ph, wl, ql in load.phases():
            print("# %-6s writes %4d p50 %6.1f ms p99 %6.1f ms max %6.1f "
                  "ms | queries %4d p50 %6.1f ms p99 %6.1f ms max %6.1f ms"
                  % (ph, len(wl), 1e3 * pct(wl, 50), 1e3 * pct(wl, 99),
                     1e3 * max(wl or [0]), len(ql), 1e3 * pct(ql, 50),
                     1e3 * pct(ql, 99), 1e3 * max(ql or [0])), flush=True)
        bad_w = [x for x in w if x[2] != 200]
        r.check(len(w) > 0 and not bad_w, "every write acknowledged, "
                "before, during and after the freeze (%d writes)" % len(w),
                "\n".join("%d %s %d %s" % (x[0], x[1], x[2], x[4])
                          for x in bad_w[:5]))
        bad_q = [x for x in q if x[2] != 200]
        r.check(len(q) > 0 and not bad_q, "every query answered 200 "
                "(%d queries)" % len(q),
                "\n".join("%s %s %d %s" % (x[0], x[1], x[2], x[4][:300])
                          for x in bad_q[:5]))
        fq = [x[3] for x in q if x[1] == "frozen"]
        r.check(len(fq) >= 20 and pct(fq, 99) < 2.0,
                "query p99 while a replica is frozen is under 2 s "
                "(%d queries, p99 %.0f ms)" % (len(fq), 1e3 * pct(fq, 99)))
        fw = [x[3] for x in w if x[1] == "frozen"]
        r.check(len(fw) >= 20 and pct(fw, 99) < 2.0,
                "write p99 while a replica is frozen is under 2 s "
                "(%d writes, p99 %.0f ms)" % (len(fw), 1e3 * pct(fw, 99)))

        # Nothing lost, nothing counted twice.
        r.check(c.wait_ring(active=3, timeout=60), "the thawed ingester "
                "is ACTIVE again", str(c.states()))
        acked = {x[0] for x in w if x[2] == 200}
        got, res = {}, None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            res = c.queriers[0].render(APP + "{}", frm=t0 - 60,
                                       until=int(time.time()) + 60,
                                       fmt="collapsed")
            got = {}
            if res.status == 200:
                for line in res.text().splitlines():
                    st, _, v = line.rpartition(" ")
                    if st.startswith("main;w"):
                        got[int(st[6:])] = got.get(int(st[6:]), 0) + int(v)
            if set(got) >= acked:
                break
            time.sleep(0.5)
        missing = sorted(acked - set(got))
        # One upload of a .cpu stack is one sample: 10 ms at 100 Hz.
        twice = sorted(i for i, v in got.items() if v != 10000000)
        r.check(res is not None and res.status == 200 and not missing,
                "every acknowledged write is in the flamegraph (%d)" %
                len(acked), "missing %d: %s" % (len(missing), missing[:10]))
        r.check(not twice, "no write counted twice (each stack 10 ms)",
                "%s" % [(i, got[i]) for i in twice[:10]])
        _, m = metrics(c.queriers[0])
        r.check((metric_value(m, "smolder_querier_straggler_rounds_total")
                 or 0) > 0, "the querier answered without the silent replica "
                "(smolder_querier_straggler_rounds_total > 0)")
    finally:
        if frozen is not None:
            os.kill(frozen.pid, signal.SIGCONT)
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_frozen_replica", 240, main)
