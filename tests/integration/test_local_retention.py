#!/usr/bin/env python3
"""
test_local_retention.py -- ingesters keep only the recent window once the
store-gateways serve the rest: 3 ingesters (RF 3) with
-ingester.local-retention=1m, 2 store-gateways (RF 1), a distributor, a
querier, and a real S3 server (OpenStack Swift's s3api on loopback).
The gateway ring's RF is 1: each tenant is on one gateway, and the
querier, which asks every gateway for sources, finds it there.

  1. Old uploads (15 minutes back) are flushed and shipped; once the
     gateways serve them every ingester drops them from its disk
     (smolder_ingester_local_blocks_dropped_total); recent uploads
     (seconds back) are shipped too but kept.  Every answer polled while
     the drops happen is whole or says it is not (a plan that counted on
     a block dropped before its read is made again: querier/plan.c).
  2. The querier's answer counts every upload once; a querier without
     gateways answers only the recent ones: the ingesters no longer hold
     the old ones, and the bucket answers for them.  A querier with
     -querier.query-ingesters-within=5m asks the old range of the
     gateways and of no ingester but the one it always keeps.
  3. An ingester restarted keeps its local floor and serves the same.
  4. Both gateways down: 503 naming them, never the short answer.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

from cluster import swift_shipping_cluster  # noqa: E402
from durability import (DataServer, collapsed_answer, flush,  # noqa: E402
                        local_blocks_dropped, metrics)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 240
STACKS = ["main;old;a", "main;old;b", "main;new;a", "main;new;b"]
SHARDS = 8


def ingest(r, d, stacks, ago, count, acked):
    now = int(time.time())
    ok = 0
    for k in range(count):
        stack = stacks[k % len(stacks)]
        t = now - ago + k % 30
        resp = d.ingest({"name": "lr.cpu{shard=s%d}" % (k % SHARDS),
                         "from": t, "until": t + 1},
                        ("%s 1\n" % stack).encode())
        if resp.status == 200:
            acked[stack] = acked.get(stack, 0) + 1
            ok += 1
    r.eq(ok, count, "every upload acknowledged")


def answer(q):
    return collapsed_answer(q, "lr.cpu{}")


def body(r):
    ws, c = swift_shipping_cluster(
        r, "local-retention", ["-ingester.ship-interval=1s",
                               "-ingester.local-retention=1m",
                               "-ingester.leave-on-shutdown=false"],
        ingesters=3, distributors=1, queriers=1, rf=3, gateways=2,
        gateway_rf=1)
    c.start_for(r)
    d, q = c.distributors[0], c.queriers[0]
    acked = {}

    # 1. old and recent uploads, shipped
    for what, stacks, ago, n in (("old", STACKS[:2], 900, 40),
                                 ("recent", STACKS[2:], 5, 80)):
        ingest(r, d, stacks, ago, 40, acked)
        r.check(c.wait_writes(n), "every replica applied the %s uploads"
                % what)
        for ing in c.ingesters:    # one block each: old, then recent
            r.eq(flush(ing).status, 200, "%s: %s flushed and shipped" %
                 (what, ing.name))
    deadline = time.monotonic() + 30
    during = []
    while time.monotonic() < deadline and \
            not all(local_blocks_dropped(i) >= 1 for i in c.ingesters):
        during.append(answer(q))
        time.sleep(0.05)
    for ing in c.ingesters:
        r.check(local_blocks_dropped(ing) >= 1, "%s dropped the old blocks "
                "the gateways serve (%d)" % (ing.name,
                                             local_blocks_dropped(ing)))
    time.sleep(1.5)          # another pass: the recent ones stay
    unit = 0
    first = answer(q)
    if isinstance(first, dict) and acked.get(STACKS[0]):
        unit = first.get(STACKS[0], 0) // acked[STACKS[0]]
    r.check(unit > 0, "one upload's value is known (%d)" % unit)
    want = {s: n * unit for s, n in acked.items()}
    wrong = ["200 with %d of %d" % (sum(a.values()), sum(want.values()))
             for a in during if isinstance(a, dict) and a != want]
    r.eq(wrong[:5], [], "every one of %d answers polled while the "
         "ingesters dropped the old blocks is whole (%d not 200)" % (
             len(during), sum(not isinstance(a, dict) for a in during)))

    # 2. exact with gateways; without them only the recent uploads
    r.eq(answer(q), want, "ingesters and gateways: every upload once")
    loaded = []
    for gw in c.gateways:
        _, p = metrics(gw)
        loaded.append(metric_value(
            p, "smolder_store_gateway_blocks_loaded_total") or 0)
    r.check(sorted(x > 0 for x in loaded) == [False, True],
            "gateway RF 1: the tenant's owner loaded its blocks, the other "
            "gateway none (and the querier, asking both, still finds them)",
            str(loaded))
    members = ["-ring.members=%s" % c.members,
               "-ring.heartbeat-period=100ms", "-ring.heartbeat-timeout=1s",
               "-distributor.replication-factor=3"] + c.extra
    q_no = DataServer(ws.data_dir("q-nogw"), ws.log_dir("q-nogw"),
                      name="querier-nogw", target="querier",
                      extra_flags=members).start()
    c.queriers.append(q_no)
    recent = {s: n * unit for s, n in acked.items() if s in STACKS[2:]}
    r.eq(answer(q_no), recent, "without gateways only the recent uploads: "
         "the old ones left the ingesters' disks")

    # 2b. a range older than -querier.query-ingesters-within goes to
    # the gateways, and to no ingester that holds nothing that old
    q_split = DataServer(ws.data_dir("q-split"), ws.log_dir("q-split"),
                         name="querier-split", target="querier",
                         extra_flags=members + c.gateway_flags() + [
                             "-querier.query-ingesters-within=5m",
                             # the skip holds only while no upload can
                             # land that far back: the querier is told
                             # the distributors' window (the writes
                             # above are done)
                             "-validation.reject-older-than=2m"]).start()
    c.queriers.append(q_split)
    time.sleep(0.5)          # heartbeats: each ingester's oldest data
    now = int(time.time())
    resp = q_split.render("lr.cpu{}", frm=now - 1200, until=now - 600,
                          fmt="collapsed")
    got = {}
    for line in resp.text().splitlines() if resp.status == 200 else []:
        if line.strip():
            stack, _, v = line.rpartition(" ")
            got[stack] = int(v)
    old = {s: n * unit for s, n in acked.items() if s in STACKS[:2]}
    r.eq(got, old, "a range 10-20 minutes back: every old upload once, "
         "from the gateways (%d)" % resp.status)
    _, p = metrics(q_split)
    skipped = metric_value(p, "smolder_querier_ingesters_skipped_total") or 0
    r.check(skipped >= 2, "the ingesters that hold nothing that old "
            "were not asked (%d skipped; one is always kept)" % skipped)
    r.eq(answer(q_split), want, "the last hour, recent and old: every "
         "upload once, the ingesters asked")

    # 3. a restart keeps the local floor and the answer
    c.stop_ingester(1)
    c.restart_ingester(1)
    r.check(c.wait_ring(active=3), "ingester-1 back")
    r.eq(answer(q), want, "after a restart: every upload once")
    r.eq(answer(q_no), recent, "and the old blocks did not come back")

    # 4. no gateway: 503, not the short answer
    for g in range(2):
        c.kill9_gateway(g)
    time.sleep(1.5)
    got = answer(q)
    r.check(isinstance(got, tuple) and got[0] == 503 and
            "store-gateway" in got[1], "gateways down: 503 naming them",
            str(got))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_local_retention", BUDGET_S, body)
