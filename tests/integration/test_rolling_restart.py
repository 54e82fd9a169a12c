#!/usr/bin/env python3
"""
test_rolling_restart.py -- every component restarted one right after
another, as Kubernetes rollouts do, fails no client request.

3 ingesters (RF 3), 2 distributors and 2 queriers, all with
-shutdown-delay=1s; a writer (~50 uploads/s, each its own stack) and a
reader (render, label values, SelectSeries in turn), each sending to the
distributors or queriers whose /ready says 200 right now, polled every
50 ms -- what a Service's endpoints do.  Three times round: each ingester
in turn gets SIGTERM and is started again on its disk, and the next one
is stopped the moment the restarted one's /ready says 200 -- what a
StatefulSet rollout does --, then each distributor, then each querier
the same way (a Deployment's rollout).  The rules that make it safe:
  - from SIGTERM on, a stopping process says so (/ready 503; an
    ingester's Health says LEAVING) while it still serves for
    -shutdown-delay, so the endpoints and the rings move off it before
    its port closes;
  - a restarted ingester's /ready waits -ingester.min-ready-duration
    after it turned ACTIVE, so every ring has seen it before the next
    one goes;
  - a distributor keeps its hints on its disk across the restart.
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
          "-validation.reject-newer-than=0",
          "-shutdown-delay=1s"] + limit_flags()
APP = "roll.cpu"
ROUNDS = 3


def main(r):
    rollout(r, Workspace("rolling-restart"), [], ROUNDS)


def rollout(r, ws, extra, rounds, before_round=None, after=None):
    """The cluster above under the writer and the reader, `rounds`
    rollouts of every component, the checks; `extra` flags for every
    process; before_round(rnd) runs before each rollout and after(c) once
    the last is done, before the checks (both with the load running)."""
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=3, distributors=2, queriers=2, rf=3,
                extra=COMMON + extra, ingester_extra=[
                    # a reconnect (up to 500 ms) and a few probes; 1 s
                    # once left a querier that had not yet seen the
                    # restarted ingester when the next one went, in a
                    # loaded sanitizer run (2 of 3 unavailable: a 503)
                    "-ingester.min-ready-duration=2s"])
    c.start_for(r)
    t0 = int(time.time())
    stop = threading.Event()
    writes, reads = [], []
    ready = {"distributor": [], "querier": []}
    lock = threading.Lock()

    def endpoints():
        """The ready distributors and queriers, as a Service sees them."""
        while not stop.is_set():
            for kind, servers in (("distributor", c.distributors),
                                  ("querier", c.queriers)):
                up = []
                for srv in list(servers):
                    try:
                        if srv.request("GET", "/ready",
                                       timeout=1).status == 200:
                            up.append(srv)
                    except OSError:
                        pass
                with lock:
                    ready[kind] = up
            time.sleep(0.05)

    def pick(kind, n):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with lock:
                up = list(ready[kind])
            if up:
                return up[n % len(up)]
            time.sleep(0.02)
        return None

    def load(kind, log, call, gap):
        """Until stop, request n (0, 1, ...) is call(srv, n, now) on a
        ready `kind`, gap s after the one before it answered; each is
        logged as (n, status, what went wrong)."""
        n = 0
        while not stop.is_set():
            now = int(time.time())
            srv = pick(kind, n)
            if srv is None:
                log.append((n, 0, "no %s ready" % kind))
                n += 1
                continue
            resp = call(srv, n, now)
            log.append((n, resp.status, resp.describe()
                        if resp.status != 200 else ""))
            n += 1
            time.sleep(gap)

    def write(d, i, t):
        return d.ingest({"name": APP, "from": str(t), "until": str(t + 1)},
                        ("main;w%d 1\n" % i).encode())

    def read(q, k, now):
        if k % 3 == 0:
            return q.render(APP + "{}", frm=t0 - 60, until=now + 60,
                            fmt="collapsed")
        if k % 3 == 1:
            return q.request("GET", "/pyroscope/label-values", {
                "label": "service_name", "start": str(t0 - 60),
                "end": str(now + 60)})
        return q.request(
            "POST", "/querier.v1.QuerierService/SelectSeries",
            body=json.dumps({
                "profileTypeID": "process_cpu:cpu:nanoseconds:cpu:"
                                 "nanoseconds",
                "labelSelector": '{service_name="roll"}',
                "start": str((t0 - 60) * 1000),
                "end": str((now + 60) * 1000),
                "step": 10}).encode(),
            headers={"Content-Type": "application/json"})

    th = [threading.Thread(target=endpoints, daemon=True),
          threading.Thread(target=load, daemon=True,
                           args=("distributor", writes, write, 0.01)),
          threading.Thread(target=load, daemon=True,
                           args=("querier", reads, read, 0.05))]
    for t in th:
        t.start()
    time.sleep(1)
    for rnd in range(rounds):
        if before_round is not None:
            before_round(rnd)
        for i in range(3):
            probs = c.ingesters[i].stop()
            r.check(not probs, "round %d: ingester-%d stops cleanly"
                    % (rnd, i), "\n".join(probs))
            c.restart_ingester(i)     # returns once /ready is 200
        for kind, servers in (("distributor", c.distributors),
                              ("querier", c.queriers)):
            for i in range(len(servers)):
                probs = servers[i].stop()
                r.check(not probs, "round %d: %s-%d stops cleanly"
                        % (rnd, kind, i), "\n".join(probs))
                servers[i] = c._stateless(kind, i).start()
                time.sleep(0.2)       # the endpoints see it ready
    time.sleep(1)
    if after is not None:
        after(c)
    stop.set()
    for t in th:
        t.join(timeout=60)
    bad_w = [x for x in writes if x[1] != 200]
    bad_r = [x for x in reads if x[1] != 200]
    print("# %d writes (%.0f/s), %d queries over %d restarts" % (
        len(writes), len(writes) / max(time.time() - t0, 1), len(reads),
        7 * rounds), flush=True)
    r.check(len(writes) > 100 and not bad_w, "every write acknowledged "
            "(%d)" % len(writes), "\n".join(str(x) for x in bad_w[:5]))
    r.check(len(reads) > 50 and not bad_r, "every query answered 200 (%d)"
            % len(reads), "\n".join(str(x) for x in bad_r[:5]))
    r.check(c.wait_ring(active=3), "all three ACTIVE", str(c.states()))
    acked = {x[0] for x in writes if x[1] == 200}
    res = c.queriers[0].render(APP + "{}", frm=t0 - 60,
                               until=int(time.time()) + 60,
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
    run_script("test_rolling_restart", 300, main)
