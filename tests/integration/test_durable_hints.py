#!/usr/bin/env python3
"""
test_durable_hints.py -- hinted hand-off survives a long partition and a
distributor restart (distributor/hints.h): 3 ingesters (RF 3), two
distributors (writes alternate between them), one querier, on loopback.

Ingester-2 is cut off from every other process for FREEZE_S seconds (60;
SMOLDER_HINTS_FREEZE_S sets it; the long tier runs 600, a ten-minute
partition) -- longer than the 45 s for which a hint whose original may
have been applied used to be kept -- under steady writes.  The cut is a
real one where the machine allows it (netpart.py: the test runs in a
private network namespace and iptables drops every packet to and from
the ingester's RPC and HTTP ports, so connects hang and established
connections go silent); elsewhere the ingester is frozen with SIGSTOP
instead (its kernel still accepts connections), and the network part is
reported as skipped -- a failure under CI=true.  Every upload is still acknowledged (quorum from the
other two), and each gets a hint for ingester-2: the first ones
ambiguous (calls that timed out), the rest for a member the ring skips.
Half-way, distributor-0 is restarted (SIGTERM, then started again on the
same data directory): it finds the hints on disk
(smolder_distributor_hints_loaded_total); distributor-1 runs on.  Then
the partition heals (or ingester-2 is thawed):

  - every distributor and the querier see ingester-2 ACTIVE again within
    RECONNECT_S (the ring dials a silent member afresh: the connections
    the partition left open would otherwise wait for TCP's backed-off
    retransmissions, up to two minutes);
  - every hint is delivered (each distributor's smolder_distributor_hints
    back to 0, none dropped);
  - each ingester applied every acknowledged upload exactly once
    (smolder_ingester_writes_total = acknowledged uploads on all three;
    the originals a frozen ingester finds in its socket on thawing, and
    the hints for them, are duplicates, not counted twice);
  - with ingester-0 and then ingester-1 stopped in turn, the answer is
    still every acknowledged upload: three copies.
"""

import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import netpart  # noqa: E402
from cluster import RAW_ANY_AGE, Cluster  # noqa: E402
from durability import (UploadWriter, collapsed_stacks,  # noqa: E402
                        metrics, wait_metric, workspace_for)
from smolder import freeze, in_ci, metric_value, run_script  # noqa: E402

# SMOLDER_HINTS_FREEZE_S=600 runs the ten-minute partition (the long tier).
FREEZE_S = int(os.environ.get("SMOLDER_HINTS_FREEZE_S", "60"))
# From the heal to ingester-2 ACTIVE everywhere: a probe period, two
# silent rounds, a dial, with room for a loaded machine.
RECONNECT_S = 30
BUDGET_S = 240 + FREEZE_S
STACKS = ["main;a", "main;b;c", "main;d"]


class Writer(UploadWriter):
    """Uploads through the distributors in turn (whichever process is
    current), about 10 a second; what was acknowledged."""

    def __init__(self, c):
        super().__init__("dh.cpu", STACKS, 7, ago=600, span=500, gap=0.1)
        self.c = c

    def target(self, n):
        return self.c.distributors[n % 2]

    def total(self):
        with self.lock:
            return sum(self.acked.values())


def answer(q):
    now = int(time.time())
    resp = q.render("dh.cpu{}", frm=now - 3600, until=now + 600,
                    fmt="collapsed")
    if resp.status != 200:
        return resp.status
    return collapsed_stacks(resp.text())


def partition(r, c, w):
    """The freeze's FREEZE_S seconds, with the distributor restarted
    half-way; writes paused at the end."""
    t0 = time.monotonic()
    time.sleep(FREEZE_S / 2)
    w.paused.set()
    time.sleep(0.3)
    _, p = metrics(c.distributors[0])
    before = metric_value(p, "smolder_distributor_hints") or 0
    r.check(before > 50, "hints wait for the frozen ingester (%d)" % before)
    probs = c.distributors[0].stop()
    r.check(not probs, "the distributor stopped cleanly", "\n".join(probs))
    c.distributors[0] = c._stateless("distributor", 0).start()
    _, p = metrics(c.distributors[0])
    loaded = metric_value(p, "smolder_distributor_hints_loaded_total") or 0
    r.check(loaded >= before, "the restarted distributor found the %d "
            "hints on disk (%d)" % (before, loaded))
    w.paused.clear()
    time.sleep(max(0.0, FREEZE_S - (time.monotonic() - t0)))
    w.paused.set()
    time.sleep(0.5)


def body(r):
    ws = workspace_for(r, "durable-hints")
    c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                extra=RAW_ANY_AGE + ["-distributor.push.timeout=2s"])
    c.start_for(r)
    w = Writer(c)
    r.at_end(w.halt.set)
    w.start()
    time.sleep(2)
    if os.environ.get(netpart.ENV) == "1":
        ing = c.ingesters[2]
        cut = netpart.Partition([c.rpc_ports[2], ing.port])
        cut.cut()
        print("ingester-2 cut off by iptables (ports %s) for %d s"
              % (cut.ports, FREEZE_S), flush=True)

        def thaw():
            n = cut.dropped()
            cut.heal()
            r.check(n > 0, "the partition dropped packets (%d)" % n)
    else:
        why = netpart.available() or "not in a private network namespace"
        if in_ci():
            r.fail("a real network partition", why)
        else:
            r.skip("a real network partition", why)
        frozen = c.ingesters[2].proc.pid
        freeze(frozen)
        thawed = [False]

        def thaw():
            if not thawed[0]:
                thawed[0] = True
                try:
                    os.kill(frozen, signal.SIGCONT)
                except ProcessLookupError:
                    pass
    try:
        partition(r, c, w)
    finally:
        thaw()          # before the servers are stopped, whatever happened
    t0 = time.monotonic()
    back = c.wait_ring(active=3, timeout=RECONNECT_S)
    r.check(back, "every distributor and the querier see ingester-2 ACTIVE "
            "%.1f s after the heal (at most %d)" % (time.monotonic() - t0,
                                                    RECONNECT_S))
    acked = w.total()
    r.check(acked > 200 and w.refused == 0, "every upload acknowledged "
            "during the partition (%d sent, %d failed)" % (w.sent, w.refused))
    for d in c.distributors:
        v = wait_metric(d, "smolder_distributor_hints", lambda x: x == 0,
                        timeout=90, interval=0.2)
        r.eq(v, 0, "%s delivered every hint after the heal" % d.name)
        _, p = metrics(d)
        for why in ("expired", "full", "rejected"):
            r.eq(metric_value(p, "smolder_distributor_hints_dropped_total",
                              reason=why) or 0, 0,
                 "%s dropped no hint (%s)" % (d.name, why))
    for ing in c.ingesters:
        got = wait_metric(ing, "smolder_ingester_writes_total",
                          lambda x: x >= acked, timeout=30, interval=0.1)
        r.eq(got, acked, "%s applied every acknowledged upload exactly "
             "once" % ing.name)
    want = answer(c.queriers[0])
    r.check(isinstance(want, dict) and sum(want.values()) > 0,
            "the answer with every ingester up", str(want)[:200])
    for i in (0, 1):
        c.stop_ingester(i)
        time.sleep(1.5)
        got = answer(c.queriers[0])
        # ingester-2 alone with one other holds every upload
        r.eq(got, want, "ingester-%d stopped: the answer is unchanged" % i)
        c.restart_ingester(i)
        r.check(c.wait_ring(active=3), "ingester-%d back" % i)
    w.halt.set()
    w.join(10)
    c.check_stopped(r)


if __name__ == "__main__":
    netpart.enter_private_net()
    run_script("test_durable_hints", BUDGET_S, body)
