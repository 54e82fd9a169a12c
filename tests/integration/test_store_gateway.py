#!/usr/bin/env python3
"""
test_store_gateway.py -- history served from the bucket by store-gateways
keeps every acknowledged upload in the answer after a scale-in, and says
so when it cannot: 4 ingesters (RF 2), 1 distributor, 1 querier, 2
store-gateways (gateway RF 2), all shipping to and reading from a real S3
server (OpenStack Swift's s3api on loopback, tests/tools/swift_s3.py).

  1. Uploads over 16 series (so every pair of ingesters holds some series
     alone) are written and shipped; the gateways load the blocks
     (POST /store-gateway/sync) and the querier's answer -- every stack,
     exact -- counts each upload once although RF ingesters and RF
     gateways' sources hold it.  The ingesters still hold what they
     shipped, so no gateway reads a data part for it (the querier's time
     split: local first); a range before every block asks no source.
  1b. The bucket down for 60 s during writes (Swift's proxy stopped):
     every upload acknowledged and the answer exact throughout, a
     gateway's sync 503 naming the bucket, the backlog drained after.
  2. Scale-in: a second batch is written; ingesters 2 and 3 are flushed
     (cut and shipped, what the leave handshake will do), killed with
     SIGKILL and their disks deleted: they are gone for good.  A querier
     over the two remaining ingesters and the gateways answers every
     acknowledged upload exactly; the same querier without gateways
     answers 503 naming the ingesters that left, rather than the short
     200 it gave before queriers knew who held what
     (docs/architecture.md §4.3, "Complete answers").
  3. One gateway killed: the other still holds every tenant (RF 2), the
     answer is unchanged.  Both killed: 503 naming the store-gateways --
     never a silent partial answer.
  4. A gateway restarted with its disk (its data cache, memory only, is
     empty: with the bucket down for its first answer, that answer is
     503 and the failed ranged GET is counted; the bucket back, exact),
     and one restarted with its disk
     deleted and killed -9 mid-sync (SMOLDER_TEST_FAULTS=gateway-kill,
     after its first import), then started again (it loads the rest
     before it turns ready): the answer is exact from either alone.
  5. A store-gateway takes no uploads.
"""

import os
import shutil
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import swift_s3  # noqa: E402
from cluster import RAW_ANY_AGE, Cluster  # noqa: E402
from durability import (SERVER_STACKS, DataServer,  # noqa: E402
                        StackUploads, collapsed_answer, flush, gateway_sync,
                        metrics, wait_metric, workspace_for)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 300
STACKS = SERVER_STACKS
SHARDS = 16


class Writer(StackUploads):
    def __init__(self, c):
        super().__init__(STACKS)
        self.dist = c.distributors[0]
        self.base = int(time.time()) - 900
        self.unit = 0            # one upload's value (the spy's rate)

    def batch(self, r, count):
        self.upload(r, self.dist, count, lambda k, n: (
            "gw.cpu{shard=s%d}" % (n % SHARDS), self.base + n % 600))


def answer(q):
    """{stack: value} of the collapsed render, or (status, body)."""
    return collapsed_answer(q, "gw.cpu{}")


def expected(w):
    return w.expected(w.unit)


def wait_applied(r, c, idx, want):
    for i in idx:
        deadline = time.monotonic() + 60
        v = 0
        while time.monotonic() < deadline:
            _, p = metrics(c.ingesters[i])
            v = metric_value(p, "smolder_ingester_writes_total") or 0
            if v >= want[i]:
                break
            time.sleep(0.05)
        r.check(v >= want[i], "ingester-%d applied its writes" % i)


def querier(c, ws, name, members, gateways):
    extra = ["-ring.members=%s" % members, "-ring.heartbeat-period=100ms",
             "-ring.heartbeat-timeout=1s",
             "-distributor.replication-factor=2"] + c.extra
    if gateways:
        extra += c.gateway_flags()
    s = DataServer(ws.data_dir(name), ws.log_dir(name), name=name,
                   target="querier", extra_flags=extra).start()
    c.queriers.append(s)    # stopped and judged with the cluster
    return s


def gateway_data_reads(c):
    """Data pages the gateways' queries read (cache hits and misses)."""
    n = 0
    for gw in c.gateways:
        _, p = metrics(gw)
        n += (metric_value(p, "smolder_store_gateway_data_cache_hits_total")
              or 0) + (metric_value(
                  p, "smolder_store_gateway_data_cache_misses_total") or 0)
    return n


def wait_answer(q, want, timeout=15):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = answer(q)
        if got == want:
            break
        time.sleep(0.2)
    return got


def body(r):
    ws = workspace_for(r, "store-gateway")
    sw, flags = swift_s3.start_in(r, ws)
    c = Cluster(ws, ingesters=4, distributors=1, queriers=1, rf=2,
                gateways=2, gateway_rf=2, gateway_extra=flags +
                ["-store-gateway.sync-interval=1h",
                 "-store-gateway.data-page-bytes=4KiB"],
                extra=RAW_ANY_AGE,
                ingester_extra=flags + ["-ingester.ship-interval=1h"])
    c.start_for(r)
    w = Writer(c)
    q = c.queriers[0]

    # 1. shipped and loaded: every upload once
    w.batch(r, 60)
    w.unit = w.first_unit(r, answer(q))
    per_ing = {}
    for i, ing in enumerate(c.ingesters):
        _, p = metrics(ing)
        per_ing[i] = metric_value(p, "smolder_ingester_writes_total") or 0
    r.eq(sum(per_ing.values()), 2 * 60, "each upload written on RF=2 "
         "ingesters")
    for ing in c.ingesters:
        r.eq(flush(ing).status, 200, "%s flushed and shipped" % ing.name)
    for gw in c.gateways:
        j = gateway_sync(r, gw, "batch 1")
        r.check(j.get("loaded", 0) >= 4, "%s loaded every ingester's "
                "blocks (%s)" % (gw.name, j))
    r.eq(answer(q), expected(w), "ingesters and gateways' sources count "
         "every upload once")
    _, p = metrics(q)
    r.check((metric_value(p, "smolder_querier_dedup_plans_total") or 0) > 0,
            "the querier planned over ingesters and sources")
    # the time split: the ingesters still hold every block they shipped,
    # so the gateways give stats and no data (the plan's local first);
    # a range before any block skips the sources altogether
    reads = gateway_data_reads(c)
    r.eq(answer(q), expected(w), "the same answer again")
    r.eq(gateway_data_reads(c), reads, "the ingesters hold what they "
         "shipped: no gateway read a data part (local first)")
    _, p = metrics(q)
    skipped = metric_value(p, "smolder_querier_store_sources_skipped_total") \
        or 0
    resp = q.render("gw.cpu{}", frm=w.base - 7200, until=w.base - 3600,
                    fmt="collapsed")
    r.eq((resp.status, resp.text().strip()), (200, ""), "a range before "
         "any upload: empty")
    _, p = metrics(q)
    r.check((metric_value(p, "smolder_querier_store_sources_skipped_total")
             or 0) >= skipped + 4, "... and no source whose blocks lie "
            "outside it is asked")

    # 1b. the bucket down for 60 s (Swift's proxy stopped) during
    # writes: every upload acknowledged, answers exact throughout (the
    # ingesters hold what is not shipped, the gateways what they
    # loaded), a gateway's sync says 503 naming the bucket, and the
    # backlog drains afterwards
    proxy = sw["pids"][-1]
    os.kill(proxy, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        w.batch(r, 30)
        resp = c.gateways[0].request("POST", "/store-gateway/sync", body=b"",
                                     timeout=120)
        r.check(resp.status == 503, "a gateway's sync with the bucket down: "
                "503 naming it", "%d %s" % (resp.status, resp.text()[:200]))
        r.eq(answer(q), expected(w), "bucket down: the answer is exact")
        w.batch(r, 30)
        time.sleep(max(0.0, 60 - (time.monotonic() - t0)))
        r.eq(answer(q), expected(w), "bucket down for %.0f s: the answer is "
             "still exact" % (time.monotonic() - t0))
    finally:
        os.kill(proxy, signal.SIGCONT)
    for ing in c.ingesters:
        r.eq(flush(ing).status, 200, "bucket back: %s's backlog drains"
             % ing.name)
        _, p = metrics(ing)
        r.eq(metric_value(p, "smolder_ingester_ship_blocks_pending"), 0,
             "%s: nothing pending" % ing.name)
    for gw in c.gateways:
        gateway_sync(r, gw, "bucket back")
    r.eq(answer(q), expected(w), "after the outage: exact")

    # 2. scale-in: ingesters 2 and 3 leave for good
    before = {}
    for i, ing in enumerate(c.ingesters):
        _, p = metrics(ing)
        before[i] = metric_value(p, "smolder_ingester_writes_total") or 0
    w.batch(r, 60)
    want = {}
    for i, ing in enumerate(c.ingesters):
        _, p = metrics(ing)
        want[i] = metric_value(p, "smolder_ingester_writes_total") or 0
    r.eq(sum(want.values()) - sum(before.values()), 2 * 60,
         "the second batch on RF=2 ingesters")
    wait_applied(r, c, range(4), want)
    for i in (2, 3):
        r.eq(flush(c.ingesters[i]).status, 200, "ingester-%d flushed "
             "before it leaves" % i)
    for gw in c.gateways:
        gateway_sync(r, gw, "scale-in")
    for i in (2, 3):
        data = c.ingesters[i].data
        c.kill9_ingester(i)
        shutil.rmtree(data)
    left = ",".join(m for m in c.members.split(",")
                    if m.startswith("ingester-0=") or
                    m.startswith("ingester-1="))
    q_in = querier(c, ws, "querier-scaled", left, gateways=True)
    q_no = querier(c, ws, "querier-nogw", left, gateways=False)
    reads = gateway_data_reads(c)
    r.eq(answer(q_in), expected(w), "after the scale-in every acknowledged "
         "upload counts once (ingesters 0-1 and the bucket)")
    r.check(gateway_data_reads(c) > reads, "what only the ingesters that "
            "left held is read from the bucket, whatever its age")
    short = answer(q_no)
    r.check(isinstance(short, tuple) and short[0] == 503 and
            "incomplete" in short[1] and "ingester-2" in short[1] and
            "ingester-3" in short[1],
            "without store-gateways the same querier refuses rather than "
            "answer short (503 naming the scaled-in ingesters, whose only "
            "copies are in the bucket)", str(short))

    # 3. gateways lost
    c.kill9_gateway(0)
    time.sleep(1.5)             # the querier's ring sees it unhealthy
    r.eq(wait_answer(q_in, expected(w)), expected(w),
         "one gateway down: the other serves every tenant")
    c.kill9_gateway(1)
    time.sleep(1.5)
    got = answer(q_in)
    r.check(isinstance(got, tuple) and got[0] == 503 and
            "store-gateway" in got[1], "both gateways down: 503 naming the "
            "store-gateways, never a short 200", str(got))

    # 4. back: one with its disk, one wiped
    g1data = c.gateways[1].data
    shutil.rmtree(g1data)
    os.makedirs(g1data)
    c.restart_gateway(0)
    # its data cache is memory only: back with its disk but an empty
    # cache, and the bucket down, an answer that needs data parts is a
    # 503, never a short 200
    time.sleep(1.0)             # the querier's ring sees it healthy
    os.kill(proxy, signal.SIGSTOP)
    try:
        got = answer(q_in)
        # the querier may give up on the gateway before the gateway
        # gives up on the bucket: wait for that while it is still down
        fails = wait_metric(c.gateways[0],
                            "smolder_store_gateway_data_fetch_failures_total",
                            lambda v: v >= 1, timeout=30)
    finally:
        os.kill(proxy, signal.SIGCONT)
    print("#   bucket down, cold cache: %s" % (got,), flush=True)
    r.check(isinstance(got, tuple) and got[0] == 503, "gateway-0 back with "
            "an empty data cache, the bucket down: 503, not a short 200",
            str(got))
    r.check((fails or 0) >= 1, "the gateway counted the failed ranged GET")
    r.eq(wait_answer(q_in, expected(w)), expected(w), "gateway-0 back "
         "with its disk: exact")
    _, p = metrics(c.gateways[0])
    r.check((metric_value(p, "smolder_store_gateway_data_fetches_total")
             or 0) > 0, "gateway-0 read its data parts by ranged GET")
    # gateway-1, wiped, is killed -9 mid-sync (after its first block is
    # imported, before it is served), then started again
    os.environ["SMOLDER_TEST_FAULTS"] = "gateway-kill"
    try:
        victim = c._gateway(1)
        victim.start(wait=False)
    finally:
        del os.environ["SMOLDER_TEST_FAULTS"]
    r.eq(victim.wait_self_killed(60), -signal.SIGKILL,
         "gateway-1 killed itself mid-sync")
    c.restart_gateway(1)
    _, p = metrics(c.gateways[1])
    r.check((metric_value(p, "smolder_store_gateway_blocks_loaded_total")
             or 0) >= 4, "gateway-1 reloaded its blocks before it turned "
            "ready")
    c.kill9_gateway(0)
    time.sleep(1.5)
    r.eq(wait_answer(q_in, expected(w)), expected(w), "gateway-1 alone, "
         "from a wiped disk: exact")

    # 5. roles
    g = c.gateways[1]
    resp = g.ingest({"name": "gw.cpu"}, b"a;b 1\n")
    r.check(resp.status in (404, 405), "a store-gateway has no ingest "
            "route (%d)" % resp.status)
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_store_gateway", BUDGET_S, body)
