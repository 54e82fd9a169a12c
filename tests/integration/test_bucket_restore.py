#!/usr/bin/env python3
"""
test_bucket_restore.py -- lost disks lose nothing once blocks are in the
bucket: a cluster of 3 ingesters (RF 3), 1 distributor and 1 querier, the
ingesters shipping to a real S3 server (OpenStack Swift's s3api on
loopback, tests/tools/swift_s3.py).

Under writes, for each ingester in turn: a batch is written and every
running ingester flushed (cut and shipped); another batch is written and
left in the heads (the compactor has just indexed the bucket); the
ingester is killed with SIGKILL, its data directory
deleted, and it is started again empty under the same -instance.id.  It
restores the blocks its instance shipped before it turns ready
(smolder_ingester_restored_blocks_total > 0) -- reading the tenant's
bucket-index.json instead of every meta.json, so its GETs are the restored
objects and the one index --, rejoins, and the querier's
answer -- every stack, and the total -- counts every acknowledged upload
exactly once: the restored blocks, plus the unshipped batch from the two
replicas that kept it.  After all three disks were lost in turn, the
answer still holds every upload.  The restored blocks are not shipped
again, and `smolder-admin bucket verify` stays clean.
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import swift_s3  # noqa: E402
from cluster import RAW_ANY_AGE, Cluster  # noqa: E402
from durability import (SERVER_STACKS, StackUploads, admin,  # noqa: E402
                        collapsed_stacks, flush, metrics, wait_metric,
                        workspace_for)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 300
STACKS = SERVER_STACKS


class Writer(StackUploads):
    """Uploads with known stacks; what was acknowledged, per stack.  Each
    batch has a time window of its own (20 s, two 10 s buckets): a
    replica that lost one batch's copy (its disk) shares no bucket with
    one that lost another's, so the plan's per-bucket choice is exact
    (two replicas missing different uploads of ONE bucket is the
    divergence docs/reliability.md §4.4 describes, which a restore does
    not change)."""

    def __init__(self, c):
        super().__init__(STACKS)
        self.c = c
        self.dist = c.distributors[0]
        self.batches = 0
        self.base = int(time.time()) - 900
        self.applied = [0] * len(c.ingesters)   # since each one's start

    def batch(self, r, count):
        t0 = self.base + 20 * self.batches
        self.batches += 1
        self.upload(r, self.dist, count, lambda k, n: ("rs.cpu", t0 + k % 20))
        # acknowledged at quorum: wait for the third replica too
        for i, ing in enumerate(self.c.ingesters):
            self.applied[i] += count
            want = self.applied[i]
            v = wait_metric(ing, "smolder_ingester_writes_total",
                            lambda x: x >= want, timeout=60, interval=0.05)
            r.check((v or 0) >= want, "%s applied the batch" % ing.name)

    def restarted(self, i):
        self.applied[i] = 0


def answer(q, patience=10):
    """{stack: value} of the querier's collapsed render, or None.  A 503
    is retried for `patience` s: right after a restart the querier's
    connection may still be redialing, and two members unreachable at once
    exceed RF 3's read budget -- unavailable, which is allowed; a short
    200 is not."""
    now = int(time.time())
    deadline = time.monotonic() + patience
    while True:
        resp = q.render("rs.cpu{}", frm=now - 3600, until=now + 600,
                        fmt="collapsed")
        if resp.status != 503 or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if resp.status != 200:
        return None
    return collapsed_stacks(resp.text())


def expected(w, unit):
    return w.expected(unit)


def flush_all(r, c, what):
    for ing in c.ingesters:
        resp = flush(ing)
        r.eq(resp.status, 200, "%s: flush and ship %s" % (what, ing.name))


def body(r):
    ws = workspace_for(r, "bucket-restore")
    _, flags = swift_s3.start_in(r, ws)
    # Raw buckets only (no downsampling tiers): at a 1 h resolution the
    # plan cannot tell apart replicas that each lost a different batch of
    # one hour (docs/reliability.md §4.4), which is not what this tests.
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, compactor_extra=flags,
                extra=RAW_ANY_AGE,
                ingester_extra=flags + ["-ingester.ship-interval=1s"])
    c.start_for(r)
    w = Writer(c)
    q = c.queriers[0]
    w.batch(r, 10)
    unit = w.first_unit(r, answer(q))
    for i in range(3):
        w.batch(r, 5)
        flush_all(r, c, "round %d" % i)
        run = c.compactors[0].request("POST", "/compactor/run", body=b"",
                                      timeout=120)
        r.eq(run.status, 200, "round %d: the compactor indexes the bucket"
             % i)
        w.batch(r, 5)             # left in the heads: not shipped
        data = c.ingesters[i].data
        c.kill9_ingester(i)
        shutil.rmtree(data)
        os.makedirs(data)
        c.restart_ingester(i)
        w.restarted(i)
        r.check(c.wait_ring(active=3), "round %d: ingester-%d rejoined "
                "empty" % (i, i))
        _, p = metrics(c.ingesters[i])
        r.check((metric_value(p, "smolder_ingester_restored_blocks_total")
                 or 0) >= 1, "round %d: ingester-%d restored its blocks "
                "from the bucket" % (i, i))
        r.eq(metric_value(p, "smolder_ingester_restore_failures_total"), 0,
             "round %d: the restore did not fail" % i)
        restored = metric_value(p, "smolder_ingester_restored_blocks_total")
        gets = metric_value(p, 'smolder_bucket_requests_total', op="get")
        r.eq(gets, (restored or 0) + 1, "round %d: the restore read the "
             "tenant's bucket index and the objects only (no meta.json "
             "one by one)" % i)
        got = answer(q)
        r.eq(got, expected(w, unit), "round %d: after losing ingester-%d's "
             "disk every acknowledged upload counts once" % (i, i))
    # every disk was lost once: the bucket and the heads still hold all
    got = answer(q)
    r.eq(got, expected(w, unit), "after three lost disks the answer holds "
         "every acknowledged upload")
    flush_all(r, c, "final")
    for ing in c.ingesters:
        v = wait_metric(ing, "smolder_ingester_ship_blocks_pending",
                        lambda x: x == 0, timeout=30)
        r.eq(v, 0, "%s: nothing pending" % ing.name)
    ver = admin("bucket", "verify", *flags)
    r.eq(ver.rc, 0, "bucket verify: " + ver.describe()[-1500:])
    r.eq(answer(q), expected(w, unit), "the answer after the final flush")
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_bucket_restore", BUDGET_S, body)
