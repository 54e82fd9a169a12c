#!/usr/bin/env python3
"""
test_cluster_kill9.py -- kill -9 of one ingester during sustained ingest
loses no acknowledged profile.

3 ingesters, RF=3, 2 distributors, 1 querier.  Two writer threads push
folded profiles through the two distributors, each with a stack naming
its own profile id ("p<id>;leaf") and a known value, one per 50 ms each,
for the whole test, bounded.  A reader thread queries the querier
(/render) all the time.  Phases:

  A  3 s with every ingester up;
  B  ingester-1 is killed with SIGKILL, 4 s of ingest while it is down
     (the ring marks it unhealthy after its heartbeat timeout);
  C  ingester-1 restarts on its data (replaying its head log) and rejoins
     the ring, 3 s more.

Checks: every push is acknowledged (a dead replica leaves a quorum of 2);
every query answers 200; at the end of B (ingester-1 down) and at the end
(after it rejoined), the set of profile ids in the flamegraph equals the
set of acknowledged ids, and each id's value is exact (no loss, no double
count), and no profile that was not acknowledged shows up.  The restarted
ingester replays its head log before it rejoins (its /metrics show the
series).
"""

import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (limit_flags, metric_value, metrics,  # noqa: E402
                        workspace_for)
from smolder import run_script  # noqa: E402

SCALE = 10000000          # a folded sample of a .cpu app is 10 ms in ns
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()


class Load:
    """Writer and reader threads with shared bookkeeping."""

    def __init__(self, c, base):
        self.c = c
        self.base = base
        self.lock = threading.Lock()
        self.next_id = 1
        self.acked = {}          # id -> value
        self.failed = []         # (id, status, message)
        self.queries_ok = 0
        self.queries_bad = []
        self.stop_ev = threading.Event()
        self.pause_ev = threading.Event()      # set: writers idle
        self.idle = [threading.Event(), threading.Event()]

    def writer(self, w):
        d = self.c.distributors[w % len(self.c.distributors)]
        while not self.stop_ev.is_set():
            if self.pause_ev.is_set():
                self.idle[w].set()
                time.sleep(0.01)
                continue
            self.idle[w].clear()
            with self.lock:
                pid = self.next_id
                self.next_id += 1
            value = 1 + pid % 7
            t = self.base + pid % 600
            body = ("p%d;leaf %d\n" % (pid, value)).encode()
            r = d.ingest({"name": "load.cpu{writer=w%d}" % w,
                          "from": str(t), "until": str(t + 1)}, body)
            with self.lock:
                if r.status == 200:
                    self.acked[pid] = value
                else:
                    self.failed.append((pid, r.status, r.text()[:200]))
            time.sleep(0.05)
        self.idle[w].set()

    def reader(self):
        q = self.c.queriers[0]
        while not self.stop_ev.is_set():
            r = q.render("load.cpu{}", frm=self.base - 60,
                         until=self.base + 700, fmt="collapsed")
            with self.lock:
                if r.status == 200:
                    self.queries_ok += 1
                else:
                    self.queries_bad.append(r.describe())
            time.sleep(0.1)

    def pause(self):
        self.pause_ev.set()
        for e in self.idle:
            e.wait(10)

    def resume(self):
        self.pause_ev.clear()

    def wait_writes(self, more, timeout=60):
        """Wait until `more` further writes were answered (acked or failed)
        and at least one further query ran: the phase under test saw real
        traffic, however slow the machine.  True on success."""
        with self.lock:
            want = len(self.acked) + len(self.failed) + more
            q = self.queries_ok + len(self.queries_bad) + 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if (len(self.acked) + len(self.failed) >= want and
                        self.queries_ok + len(self.queries_bad) >= q):
                    return True
            time.sleep(0.02)
        return False


def seen(c, base):
    """{id: value} from the querier's collapsed flamegraph, or None."""
    r = c.queriers[0].render("load.cpu{}", frm=base - 60, until=base + 700,
                             fmt="collapsed")
    if r.status != 200:
        return None, r
    out = {}
    for ln in r.text().split("\n"):
        m = re.match(r"^p(\d+);leaf (\d+)$", ln)
        if m:
            out[int(m.group(1))] = out.get(int(m.group(1)), 0) + \
                int(m.group(2)) // SCALE
    return out, r


def check_set(r, c, load, base, what):
    with load.lock:
        acked = dict(load.acked)
    got, resp = seen(c, base)
    if got is None:
        r.fail("%s: the query answers" % what, resp.describe())
        return
    missing = sorted(set(acked) - set(got))
    extra = sorted(set(got) - set(acked))
    wrong = sorted(k for k in acked if k in got and got[k] != acked[k])
    r.check(not missing, "%s: all %d acknowledged profiles are found" % (
        what, len(acked)), "missing ids %s" % missing[:20])
    r.check(not wrong, "%s: every profile's value is exact (no double "
            "count)" % what, "wrong %s" % [(k, acked[k], got[k])
                                          for k in wrong[:10]])
    r.check(not extra, "%s: nothing unacknowledged appears" % what,
            "extra ids %s" % extra[:20])


def main(r):
    ws = workspace_for(r, "cluster-kill9")
    base = int(time.time()) - 900
    c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                extra=COMMON)
    load = None
    threads = []
    try:
        c.start()
        load = Load(c, base)
        threads = [threading.Thread(target=load.writer, args=(w,))
                   for w in range(2)]
        threads.append(threading.Thread(target=load.reader))
        for t in threads:
            t.start()
        r.check(load.wait_writes(60), "load runs before the kill")  # A
        c.kill9_ingester(1)                             # B
        r.check(c.wait_ring(active=2, timeout=15),
                "the ring marks the killed ingester unhealthy",
                str(c.states()))
        r.check(load.wait_writes(80), "load runs with ingester-1 down")
        load.pause()
        check_set(r, c, load, base, "ingester-1 down")
        load.resume()
        c.restart_ingester(1)                           # C
        r.check(c.wait_ring(active=3, timeout=30),
                "the restarted ingester rejoins the ring", str(c.states()))
        r.check(load.wait_writes(60), "load runs after the rejoin")
        load.stop_ev.set()
        for t in threads:
            t.join(30)
        threads = []
        with load.lock:
            n, failed = len(load.acked), list(load.failed)
            qok, qbad = load.queries_ok, list(load.queries_bad)
        r.check(n > 50, "sustained ingest: %d profiles acknowledged" % n)
        r.check(not failed, "every push is acknowledged with one ingester "
                "down (quorum 2 of 3)", "%d failed, first %s" % (
                    len(failed), failed[:3]))
        r.check(qok > 20 and not qbad, "queries keep answering: %d ok, %d "
                "failed" % (qok, len(qbad)), "\n".join(qbad[:3]))
        check_set(r, c, load, base, "after the restart")
        _, m = metrics(c.ingesters[1])
        hs = metric_value(m, "smolder_ingester_head_series")
        r.check(hs is not None and hs >= 1, "the restarted ingester "
                "replayed its head log (%s head series)" % hs)
    finally:
        if load is not None:
            load.stop_ev.set()
        for t in threads:
            t.join(30)
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_cluster_kill9", 300, main)
