#!/usr/bin/env python3
"""
test_shuffle_shard.py -- per-tenant shuffle sharding of writes
(distributor/push.c, common/ring.h sm_ring_shard): 6 ingesters, RF 3,
multitenancy; the runtime config gives tenant "flood" a shard of 3
ingesters (ingestion_tenant_shard_size), tenant "quiet" has none.

  1. 16 series of each tenant: flood's series are in the heads of
     exactly 3 ingesters (smolder_ingester_active_series{tenant}), the
     same 3 for every series; quiet's spread over all 6.
  2. One of flood's 3 is stopped: flood's writes still succeed (the two
     left are a quorum) and still land only in its shard; the stopped one
     is owed them as hints and gets them when it is back.
  3. A third tenant, "calm", has a shard of 3 too, overlapping flood's
     in at most one ingester.  Two of flood's ingesters outside calm's
     shard are stopped -- as a flood that took its own shard down would:
     calm's writes and queries are unaffected (its answer is exact; the
     two are bystanders to it: outside its shard, and their tenant lists
     in Health say they hold nothing of calm), while flood's and quiet's
     answers, which depend on them, are exact or 503, never short.
  4. The runtime config drops the shard (size 0): flood's new series
     spread over the whole ring, and nothing written before is lost.
  5. At every step the querier's answer for each tenant counts every
     acknowledged upload exactly once.

Confined reads (common/ring.h): after step 1, flood's queries reach only
the 3 ingesters that hold flood's data (their query RPCs count up, the
other 3's do not), quiet's reach all 6.  Then flood's shard grows from 3
to 6 while reads are confined: each upload of a new series -- whose 3
replicas may all be ingesters that had nothing of flood, and whose tenant
lists the querier last heard lacked it -- is queried right after its
acknowledgement, and every answer counts it (the distributor held the
acknowledgement until the querier had heard of flood on one replica).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (Workspace, limit_flags, metrics,  # noqa: E402
                        wait_metric)
from oracle import parse_collapsed  # noqa: E402
from smolder import metric, metric_value, run_script  # noqa: E402

SERIES = 16


def holders(c, tenant):
    """Names of the running ingesters with active series of tenant."""
    out = []
    for ing in c.ingesters:
        if ing.stopped or ing.proc.poll() is not None:
            continue
        _, p = metrics(ing)
        if p and (metric_value(p, "smolder_ingester_active_series",
                               tenant=tenant) or 0) > 0:
            out.append(ing.name)
    return sorted(out)


def push(d, tenant, acked, tag, n, t):
    bad = []
    for k in range(n):
        stack = "main;%s;s%d" % (tag, k % SERIES)
        resp = d.request("POST", "/ingest",
                         {"name": "sh.cpu{shard=%s%d}" % (tag, k % SERIES),
                          "from": str(t), "until": str(t + 1),
                          "format": "folded"},
                         body=("%s 1\n" % stack).encode(),
                         headers={"X-Scope-OrgID": tenant})
        if resp.status == 200:
            acked[stack] = acked.get(stack, 0) + 1
        else:
            bad.append(resp.describe())
    return bad


def answer(q, tenant, now):
    resp = q.request("GET", "/render",
                     {"query": "sh.cpu{}", "from": str(now - 3600),
                      "until": str(now + 600), "format": "collapsed"},
                     headers={"X-Scope-OrgID": tenant})
    if resp.status != 200:
        return (resp.status, resp.text()[:300])
    # in uploads: each is one sample of 10 ms
    return {k: v // 10000000 for k, v in
            parse_collapsed(resp.text()).items()}


QUERY_METHODS = ("merge", "stats", "series", "labels", "analyze",
                 "span_merge", "profiles")


def query_rpcs(c):
    """Per running ingester name: the query RPCs it has served."""
    out = {}
    for ing in c.ingesters:
        if ing.stopped or ing.proc.poll() is not None:
            continue
        _, p = metrics(ing)
        out[ing.name] = sum(
            metric_value(p, "smolder_ingester_rpc_duration_seconds_count",
                         method=m) or 0 for m in QUERY_METHODS)
    return out


def confined(r, c, q, acked, now, shard):
    """flood's queries ask its shard only; quiet's ask all six."""
    # the querier confines once shard sizes were stable for its settle
    # time (2 reload periods + the hold) since it started
    deadline = time.monotonic() + 15
    while (time.monotonic() < deadline and
           metric(q, "smolder_querier_ingesters_confined_total") == 0):
        answer(q, "flood", now)
        time.sleep(0.2)
    before = query_rpcs(c)
    for _ in range(3):
        r.eq(answer(q, "flood", now), acked["flood"], "a confined query "
             "of flood is exact")
    mid = query_rpcs(c)
    asked = sorted(n for n in mid if mid[n] > before.get(n, 0))
    r.eq(asked, shard, "flood's queries asked only the ingesters that "
         "hold flood's data")
    r.eq(answer(q, "quiet", now), acked["quiet"], "quiet's query is exact")
    after = query_rpcs(c)
    r.eq(len([n for n in after if after[n] > mid[n]]), 6, "quiet (no "
         "shard) asks all six")
    v = metric(q, "smolder_querier_ingesters_confined_total")
    r.check(v >= 9, "the querier counts the ingesters it left out (%d)" % v)



def grow(r, c, d, q, path, acked, now):
    """flood's shard 3 -> 6 with confined reads: every acknowledged
    upload of a new series is in the very next answer."""
    write_overrides(path, 6, CALM)
    # past the querier's settle time (2 reload periods + the hold)
    time.sleep(3.0)
    held0 = metric(d, "smolder_distributor_held_writes_total")
    missed = []
    for k in range(24):
        stack = "main;n;s%d" % k
        resp = d.request("POST", "/ingest",
                         {"name": "sh.cpu{shard=n%d}" % k,
                          "from": str(now - 20), "until": str(now - 19),
                          "format": "folded"},
                         body=("%s 1\n" % stack).encode(),
                         headers={"X-Scope-OrgID": "flood"})
        if resp.status != 200:
            missed.append("upload %d: %s" % (k, resp.describe()))
            continue
        acked["flood"][stack] = 1
        got = answer(q, "flood", now)
        if got != acked["flood"]:
            missed.append("after upload %d: %s" % (
                k, got if isinstance(got, tuple) else
                sorted(set(acked["flood"]) - set(got))))
    r.check(not missed, "shard 3 -> 6: each of 24 new series is in the "
            "answer right after its acknowledgement", "\n".join(missed[:3]))
    r.eq(len(holders(c, "flood")), 6, "flood's series now on all six")
    held = metric(d, "smolder_distributor_held_writes_total") - held0
    r.check(held >= 1, "writes to ingesters new to flood waited for the "
            "queriers (%d held)" % held)


def write_overrides(path, size, calm=()):
    with open(path + ".tmp", "w") as f:
        f.write("overrides:\n  flood:\n    ingestion_tenant_shard_size: "
                "%d\n" % size)
        for t in calm:
            f.write("  %s:\n    ingestion_tenant_shard_size: 3\n" % t)
    os.rename(path + ".tmp", path)


CALM = ["calm%d" % i for i in range(12)]


def main(r):
    ws = Workspace("shuffle-shard")
    r.at_end(lambda: ws.cleanup(r))
    path = ws.path("overrides.yaml")
    write_overrides(path, 3, CALM)
    c = Cluster(ws, ingesters=6, distributors=1, queriers=1, rf=3,
                extra=["-auth.multitenancy-enabled=true",
                       "-validation.reject-older-than=0",
                       "-runtime-config.file=%s" % path,
                       "-runtime-config.reload-period=200ms"] +
                limit_flags())
    c.start_for(r)
    d, q = c.distributors[0], c.queriers[0]
    now = int(time.time())
    acked = {"flood": {}, "quiet": {}}

    def exact(what):
        for tenant in ("flood", "quiet"):
            got = None
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                got = answer(q, tenant, now)
                if got == acked[tenant]:
                    break
                time.sleep(0.2)
            r.eq(got, acked[tenant], "%s: %s's answer counts every "
                 "acknowledged upload once (%d)" % (
                     what, tenant, sum(acked[tenant].values())))

    # 1. where each tenant's series land
    bad = push(d, "flood", acked["flood"], "f", 64, now - 60)
    bad += push(d, "quiet", acked["quiet"], "q", 64, now - 60)
    r.check(not bad, "128 uploads acknowledged", "\n".join(bad[:3]))
    shard = holders(c, "flood")
    r.eq(len(shard), 3, "flood's %d series are on exactly its 3 shard "
         "ingesters: %s" % (SERIES, shard))
    r.eq(len(holders(c, "quiet")), 6, "quiet's series spread over all 6 "
         "ingesters")
    exact("sharded")
    confined(r, c, q, acked, now, shard)

    # 2. a shard member down
    down = [i for i, ing in enumerate(c.ingesters) if ing.name == shard[0]][0]
    c.stop_ingester(down)
    bad = push(d, "flood", acked["flood"], "g", 32, now - 30)
    r.check(not bad, "one of flood's shard down: its 32 uploads are "
            "acknowledged by the other two", "\n".join(bad[:3]))
    r.eq(holders(c, "flood"), shard[1:], "and land only on the shard's "
         "two left")
    exact("a shard member down")
    c.restart_ingester(down)
    r.check(c.wait_ring(active=6), "it is back")
    v = wait_metric(d, "smolder_distributor_hints", lambda x: x == 0,
                    timeout=20)
    r.eq(v, 0, "the hints it was owed are delivered")
    exact("the shard member back")

    # 3. flood's shard down but for one: calm, sharded elsewhere, is fine
    calm = None
    for name in CALM:
        acked[name] = {}
        bad = push(d, name, acked[name], "c", 1, now - 45)
        r.check(not bad, "%s's first upload acknowledged" % name,
                "\n".join(bad[:3]))
        got = holders(c, name)
        if len(got) == 3 and len(set(got) & set(shard)) <= 1:
            calm = name
            break
    r.check(calm is not None, "a tenant whose shard overlaps flood's in "
            "at most one ingester (%s)" % calm)
    if calm is not None:
        cshard = holders(c, calm)
        bad = push(d, calm, acked[calm], "c", 31, now - 45)
        r.check(not bad, "%s: 32 uploads acknowledged" % calm,
                "\n".join(bad[:3]))
        # two Health rounds: every prober holds the lists with calm
        time.sleep(1.0)
        gone = [i for i, ing in enumerate(c.ingesters)
                if ing.name in shard and ing.name not in cshard][:2]
        for i in gone:
            c.stop_ingester(i)
        r.check(c.wait_ring(active=4), "two of flood's ingesters stopped "
                "(%s)" % [c.ingesters[i].name for i in gone])
        bad = push(d, calm, acked[calm], "c", 16, now - 40)
        r.check(not bad, "%s's writes are acknowledged" % calm,
                "\n".join(bad[:3]))
        got = answer(q, calm, now)
        r.eq(got, acked[calm], "%s's answer is exact: the stopped two are "
             "bystanders to it (%s)" % (calm, cshard))
        for tenant in ("flood", "quiet"):
            got = answer(q, tenant, now)
            r.check(got == acked[tenant] or (isinstance(got, tuple) and
                                            got[0] == 503),
                    "%s's answer, which needs the stopped two, is exact "
                    "or 503, never short (%s)" % (
                        tenant, got[0] if isinstance(got, tuple) else
                        "exact"))
        for i in gone:
            c.restart_ingester(i)
        r.check(c.wait_ring(active=6), "they are back")
        v = wait_metric(d, "smolder_distributor_hints", lambda x: x == 0,
                        timeout=20)
        r.eq(v, 0, "the hints they were owed are delivered")

    grow(r, c, d, q, path, acked, now)

    # 4. the shard dropped by a runtime-config reload
    write_overrides(path, 0, CALM)
    time.sleep(1.0)
    bad = push(d, "flood", acked["flood"], "h", 64, now - 10)
    r.check(not bad, "shard size 0: flood's uploads acknowledged",
            "\n".join(bad[:3]))
    wide = holders(c, "flood")
    r.check(len(wide) > 3, "its new series spread over the ring (%d "
            "ingesters)" % len(wide), str(wide))
    exact("the shard dropped")
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_shuffle_shard", 150, main)
