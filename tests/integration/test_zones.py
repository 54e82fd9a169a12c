#!/usr/bin/env python3
"""
test_zones.py -- zone-aware replication: a whole zone down loses no
write, fails no query and changes no answer.

6 ingesters in 3 zones (-instance.zone a, a, b, b, c, c), RF 3, 1
distributor, 1 querier.  The rings learn the zones from the ingesters'
Health answers and place every series' replicas in three distinct zones
(common/ring.h, "Zones"); /ring says so.  A writer pushes a profile with
its own stack every ~50 ms and a reader runs /render, label values,
SelectSeries and settings in turn (test_frozen_replica's load); after
3 s both ingesters of zone c are SIGSTOPped for ZONE_DOWN_S seconds (a
zone's network or power gone: connections open, nothing answers), then
SIGCONTed, and the load runs 3 s more.  Checks:
  - every write is acknowledged: each series keeps two replicas in
    zones a and b (quorum 2 of 3), and the down zone's replicas get
    hints;
  - every query answers 200: two members of one zone are one read unit
    of the querier's budget (RF 3 tolerates one), where without zones
    two members down exceed it;
  - once zone c is back and the hints are delivered, the flamegraph holds
    every acknowledged stack exactly once, from all six ingesters and
    with zone a stopped instead.  The writes in flight when zone c
    stopped were sent to it, so their hints are kept only 45 s (inside
    the ingesters' idempotency window, distributor/hints.h) and expire
    in a 60 s outage: zone b holds those, and the plan reads them there.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import Workspace, metric_value, metrics  # noqa: E402
from smolder import freeze, run_script  # noqa: E402
from test_frozen_replica import APP, COMMON, Load, pct  # noqa: E402

ZONE_DOWN_S = 60
ZONES = ["a", "a", "b", "b", "c", "c"]


def flamegraph(q, t0):
    """{stack index: value} of the writer's stacks, or None."""
    res = q.render(APP + "{}", frm=t0 - 60, until=int(time.time()) + 60,
                   fmt="collapsed")
    if res.status != 200:
        return None
    got = {}
    for line in res.text().splitlines():
        st, _, v = line.rpartition(" ")
        if st.startswith("main;w"):
            got[int(st[6:])] = got.get(int(st[6:]), 0) + int(v)
    return got


def exact(r, q, t0, acked, what):
    """Every acknowledged stack once (10 ms: one .cpu sample)."""
    got = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = flamegraph(q, t0)
        if got is not None and set(got) >= acked:
            break
        time.sleep(0.5)
    got = got or {}
    missing = sorted(acked - set(got))
    twice = sorted(i for i, v in got.items() if v != 10000000)
    r.check(not missing, "%s: every acknowledged write is in the "
            "flamegraph (%d)" % (what, len(acked)),
            "missing %d: %s" % (len(missing), missing[:10]))
    r.check(not twice, "%s: no write counted twice" % what,
            str([(i, got[i]) for i in twice[:10]]))


def main(r):
    ws = Workspace("zones")
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=6, distributors=1, queriers=1, rf=3,
                extra=COMMON, ingester_zones=ZONES)
    stopped = []

    def thaw():
        for p in stopped:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
        del stopped[:]
    r.at_end(thaw)
    c.start()
    d, q = c.distributors[0], c.queriers[0]
    ring = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ring = c.ring(d)
        if ring.get("zone_aware"):
            break
        time.sleep(0.2)
    r.check(ring.get("zone_aware") is True and ring.get("zones") == 3,
            "the distributor's ring is zone-aware over 3 zones",
            str(ring)[:600])
    r.eq(sorted((m.get("id"), m.get("zone")) for m in ring["members"]),
         [("ingester-%d" % i, z) for i, z in enumerate(ZONES)],
         "/ring shows each member's zone")

    t0 = int(time.time())
    load = Load(d, q, t0)

    def stop_zone_c():
        for i in (4, 5):
            stopped.append(c.ingesters[i].proc)
            freeze(c.ingesters[i].proc.pid)
    load.outage(r, stop_zone_c, thaw, ZONE_DOWN_S,
                "zone c (ingester-4, ingester-5)")

    w = list(load.writes)
    qs = list(load.queries)
    for ph, wl, ql in load.phases():
        print("# %-6s writes %4d p99 %6.1f ms | queries %4d p50 %6.1f ms "
              "p99 %6.1f ms max %6.1f ms" % (
                  ph, len(wl), 1e3 * pct(wl, 99), len(ql),
                  1e3 * pct(ql, 50), 1e3 * pct(ql, 99),
                  1e3 * max(ql or [0])), flush=True)
    bad_w = [x for x in w if x[2] != 200]
    r.check(len([x for x in w if x[1] == "frozen"]) > 100 and not bad_w,
            "every write acknowledged while a whole zone was down (%d "
            "writes)" % len(w), "\n".join("%d %s %d %s" % (
                x[0], x[1], x[2], x[4]) for x in bad_w[:5]))
    bad_q = [x for x in qs if x[2] != 200]
    r.check(len([x for x in qs if x[1] == "frozen"]) > 50 and not bad_q,
            "every query answered 200 while a whole zone was down (%d "
            "queries)" % len(qs), "\n".join("%s %s %d %s" % (
                x[0], x[1], x[2], x[4][:300]) for x in bad_q[:5]))

    r.check(c.wait_ring(active=6, timeout=60), "zone c is ACTIVE again",
            str(c.states()))
    deadline = time.monotonic() + 60
    pending = None
    while time.monotonic() < deadline:
        _, m = metrics(d)
        pending = metric_value(m, "smolder_distributor_hints")
        if pending == 0:
            break
        time.sleep(0.5)
    r.eq(pending, 0, "every hint for zone c delivered")
    _, m = metrics(d)
    r.check((metric_value(m, "smolder_distributor_hints_delivered_total")
             or 0) > 0, "zone c got the writes it missed as hints")
    expired = metric_value(m, "smolder_distributor_hints_dropped_total",
                           reason="expired") or 0
    r.eq(metric_value(m, "smolder_distributor_hints_dropped_total") or 0,
         expired, "no hint dropped but the expired ones (%d)" % expired)
    print("# hints: %d delivered, %d expired (writes in flight when the "
          "zone stopped: their calls may have been applied, so their hints "
          "live 45 s, inside the idempotency window)" % (
              metric_value(m, "smolder_distributor_hints_delivered_total")
              or 0, expired), flush=True)
    acked = {x[0] for x in w if x[2] == 200}
    exact(r, q, t0, acked, "all zones up")

    # zone c's copies are whole: zone a down now, the answer is the same
    for i in (0, 1):
        stopped.append(c.ingesters[i].proc)
        freeze(c.ingesters[i].proc.pid)
    r.check(c.wait_ring(active=4, timeout=30), "zone a stopped",
            str(c.states()))
    exact(r, q, t0, acked, "zone a down")
    thaw()
    r.check(c.wait_ring(active=6, timeout=60), "zone a back",
            str(c.states()))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_zones", 300, main)
