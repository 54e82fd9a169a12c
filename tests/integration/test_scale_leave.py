#!/usr/bin/env python3
"""
test_scale_leave.py -- scale 3 -> 5 -> 3 ingesters under steady writes
with the leave handshake, and lose nothing: RF 3, 2 store-gateways (RF 2)
and a real S3 server (OpenStack Swift's s3api on loopback).

  A. ingesters 0-2, a distributor and a querier over them; a writer
     thread uploads steadily (16 series) for the whole test.
  B. ingesters 3 and 4 join: the distributor and the querier are
     replaced by ones over all five (members are static flags), as a
     rolling change of -ring.members does.
  C. ingesters 0 and 1 -- the ones with the most history -- leave for
     good, one after another: POST /ingester/shutdown answers 200 only
     once every block is cut, shipped and served by the store-gateways,
     and the process then exits 0 by itself; its disk is deleted.
     Ingester-0 is first started again on the disk it left with, as a
     StatefulSet restarts a pod before it is scaled away: it comes back
     LEAVING and takes no writes.  The
     distributor and the querier are then replaced by ones over 2-4.
  D. the querier's answer counts every acknowledged upload exactly once,
     at every stage -- the writer's data times cycle through 10 minutes,
     so every bucket gets uploads across every ring change, and buckets
     that no replica holds whole are answered by exact combinations of
     replicas (querier/plan.c); a leave without store-gateways that can serve it
     waits (here: both gateways stopped, 503 naming them after
     -ingester.leave-timeout, and the ingester stays up).
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

from cluster import swift_shipping_cluster  # noqa: E402
from durability import (SERVER_STACKS, DataServer,  # noqa: E402
                        UploadWriter, collapsed_answer, leave_for_good,
                        metrics)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 300
STACKS = SERVER_STACKS
SHARDS = 16


def answer(q):
    return collapsed_answer(q, "sc.cpu{}")


def body(r):
    # a Cluster object for ports, ids and the gateways; the distributors
    # and queriers of each stage are made here
    ws, c = swift_shipping_cluster(
        r, "scale-leave", ["-ingester.ship-interval=1s",
                           "-ingester.leave-timeout=8s"],
        ingesters=5, distributors=0, queriers=0, rf=3, gateways=2,
        gateway_rf=2)
    r.at_end(lambda: c.stop())
    members = c.members.split(",")
    for g in range(2):
        c.gateways.append(c._gateway(g).start())
    for i in range(3):
        c.ingesters.append(c._ingester(i).start())
    stage = [0]

    def front(ids):
        stage[0] += 1
        ring = ["-ring.members=%s" % ",".join(members[i] for i in ids),
                "-ring.heartbeat-period=100ms", "-ring.heartbeat-timeout=1s",
                "-distributor.replication-factor=3"] + c.extra
        d = DataServer(ws.data_dir("dist-%d" % stage[0]),
                       ws.log_dir("dist-%d" % stage[0]),
                       name="distributor-%d" % stage[0],
                       target="distributor", extra_flags=ring).start()
        q = DataServer(ws.data_dir("qry-%d" % stage[0]),
                       ws.log_dir("qry-%d" % stage[0]),
                       name="querier-%d" % stage[0], target="querier",
                       extra_flags=ring + c.gateway_flags()).start()
        c.distributors.append(d)
        c.queriers.append(q)
        return d, q

    def retire(servers):
        for s in servers:
            probs = s.stop()
            r.check(not probs, "%s stopped cleanly" % s.name,
                    "\n".join(probs))

    def check(q, w, what):
        acked = w.snapshot()
        got, deadline = None, time.monotonic() + 20
        while time.monotonic() < deadline:
            got = answer(q)
            want = {s: n * unit[0] for s, n in acked.items() if n > 0}
            if unit[0] and got == want:
                break
            time.sleep(0.2)
        want = {s: n * unit[0] for s, n in acked.items() if n > 0}
        r.eq(got, want, "%s: every acknowledged upload counts once "
             "(%d acknowledged)" % (what, sum(acked.values())))
        w.paused.clear()

    unit = [0]
    w = UploadWriter("sc.cpu", STACKS, SHARDS)
    w.start()
    r.at_end(w.halt.set)

    # A. three ingesters
    d, q = front([0, 1, 2])
    w.switch(d)
    time.sleep(2)
    acked = w.snapshot()
    first = answer(q)
    if isinstance(first, dict) and acked[STACKS[0]]:
        unit[0] = first.get(STACKS[0], 0) // acked[STACKS[0]]
    w.paused.clear()
    r.check(unit[0] > 0, "one upload's value is known (%d)" % unit[0])
    check(q, w, "3 ingesters")

    # B. five
    for i in (3, 4):
        c.ingesters.append(c._ingester(i).start())
    d2, q2 = front([0, 1, 2, 3, 4])
    w.switch(d2)
    retire([d, q])
    time.sleep(2)
    check(q2, w, "5 ingesters")

    # C. ingesters 0 and 1 leave for good, one at a time: the ring is
    # changed after each (deploy/README.md, scale-in)
    left = [0, 1, 2, 3, 4]
    for i in (0, 1):
        leave_for_good(r, c.ingesters[i], i)
        if i == 0:
            # restarted on its disk before it is removed (a StatefulSet
            # restarts the pod): it comes back LEAVING, not ACTIVE, and
            # takes no writes
            c.restart_ingester(i)
            time.sleep(1)
            st = dict(c.states(q2))
            r.check(st.get("ingester-0") == "LEAVING", "ingester-0 "
                    "restarted on the disk it left with: LEAVING in the "
                    "ring", str(st))
            _, p0 = metrics(c.ingesters[i])
            w0 = metric_value(p0, "smolder_ingester_writes_total") or 0
            time.sleep(1)
            _, p0 = metrics(c.ingesters[i])
            r.eq(metric_value(p0, "smolder_ingester_writes_total") or 0, w0,
                 "and takes no writes")
            r.check(not c.ingesters[i].stop(), "and stops cleanly")
        shutil.rmtree(c.ingesters[i].data)
        check(q2, w, "ingester-%d gone, before the ring changes" % i)
        left.remove(i)
        d3, q3 = front(left)
        w.switch(d3)
        retire([d2, q2])
        d2, q2 = d3, q3
        time.sleep(1)
        check(q2, w, "ring of %s" % left)
    with w.lock:
        r.check(w.sent > 200, "the writer kept writing (%d sent, %d "
                "refused)" % (w.sent, w.refused))
    combined = unresolved = 0
    for qq in c.queriers:
        if qq.stopped:
            continue
        _, pq = metrics(qq)
        combined += metric_value(
            pq, "smolder_querier_combined_buckets_total") or 0
        unresolved += metric_value(
            pq, "smolder_querier_unresolved_buckets_total") or 0
    print("#   the last querier: %d buckets from combinations of replicas, "
          "%d unresolved" % (combined, unresolved), flush=True)

    # D. a leave the gateways cannot confirm does not go
    for g in range(2):
        c.kill9_gateway(g)
    t0 = time.monotonic()
    resp = c.ingesters[2].request("POST", "/ingester/shutdown", body=b"",
                                  timeout=60)
    r.check(resp.status == 503 and "store-gateway" in resp.text(),
            "with no store-gateway up the leave gives up after "
            "-ingester.leave-timeout with 503 (%.1fs)" %
            (time.monotonic() - t0), "%d %s" % (resp.status,
                                                resp.text()[:300]))
    time.sleep(0.5)
    r.check(c.ingesters[2].proc.poll() is None, "and ingester-2 stays up")
    w.halt.set()
    w.join(10)
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_scale_leave", BUDGET_S, body)
