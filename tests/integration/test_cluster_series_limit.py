#!/usr/bin/env python3
"""
test_cluster_series_limit.py -- the active-series limit across a cluster
(distributor/push.c: the global limit converted to each ingester's share).

3 ingesters, RF=3, 1 distributor, 1 querier, -auth.multitenancy-enabled,
every process given a runtime config with max_global_series_per_tenant: 30
for tenant `a` (the distributor reads it; the ingesters only see the limit
in each write).  With 3 healthy ingesters and RF 3 every ingester holds
every series, so each enforces 30 * min(3, 3) / 3 = 30:

  1. `a`'s 30 distinct series are acknowledged; its 31st and later new
     ones are 429 resource_exhausted with Pyroscope's message (no
     ingester address); `b` (no limit) adds 40; `a`'s existing series keep
     taking writes.
  2. Each ingester's smolder_ingester_active_series is 30 for `a` and 40
     for `b`; the distributor counts the 429s as
     discarded_profiles_total{reason="series_limit",tenant="a"}.
  3. Through the querier every acknowledged write is there, exact.
  4. One ingester stopped: 2 healthy, RF 3.  Each of the two still holds
     every series, so the share stays 30 (Pyroscope's global / n * RF
     would allow 45): a new series of `a` is still 429, existing ones are
     still 200 (quorum 2 of 3).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (Workspace, limit_flags, metric_value,  # noqa: E402
                        metrics)
from oracle import parse_collapsed  # noqa: E402
from smolder import run_script  # noqa: E402

BUDGET_S = 170
LIMIT = 30
SCALE = 10**7        # folded samples -> CPU nanoseconds at sampleRate 100
PREFIX = "Maximum active series limit exceeded"


def up(d, tenant, acked, series, stack, value):
    now = int(time.time())
    resp = d.request("POST", "/ingest",
                     {"name": 'cl.cpu{i="%s"}' % series, "from": str(now),
                      "until": str(now)},
                     ("%s %d\n" % (stack, value)).encode(),
                     {"X-Scope-OrgID": tenant})
    if resp.status == 200:
        acked[stack] = acked.get(stack, 0) + value * SCALE
    return resp


def stored(q, tenant):
    now = int(time.time())
    resp = q.request("GET", "/render",
                     {"query": "cl.cpu{}", "from": str(now - 3600),
                      "until": str(now + 3600), "format": "collapsed"},
                     headers={"X-Scope-OrgID": tenant})
    return (parse_collapsed(resp.text()) if resp.status == 200 else None,
            resp)


def main(r):
    ws = Workspace("cluster-series")
    r.at_end(lambda: ws.cleanup(r))
    path = ws.path("overrides.yaml")
    with open(path, "w") as f:
        f.write("overrides:\n  a:\n    max_global_series_per_tenant: %d\n"
                % LIMIT)
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=["-auth.multitenancy-enabled=true",
                       "-runtime-config.file=%s" % path] + limit_flags())
    c.run_checked(r, run)


def run(r, c):
    d, q = c.distributors[0], c.queriers[0]
    acked = {"a": {}, "b": {}}
    st = {"a": [], "b": []}

    # 1.
    for k in range(LIMIT):
        st["a"].append(up(d, "a", acked["a"], "a%d" % k, "main;a%d" % k,
                          k + 1).status)
    for k in range(LIMIT + 10):
        st["b"].append(up(d, "b", acked["b"], "b%d" % k, "main;b%d" % k,
                          k + 1).status)
    r.check(st["a"] == [200] * LIMIT, "a's first %d series: 200" % LIMIT,
            str(st["a"]))
    r.check(st["b"] == [200] * (LIMIT + 10), "b's 40 series: 200",
            str(st["b"]))
    over = [up(d, "a", acked["a"], "a%d" % k, "main;new%d" % k, 1000)
            for k in range(LIMIT, LIMIT + 5)]
    r.check([x.status for x in over] == [429] * 5,
            "a's 31st and later new series: 429",
            str([x.describe() for x in over][:2]))
    msg = over[0].error_message() if over else ""
    print("429 message: %s" % msg)
    r.check(over and over[0].error_code() == "resource_exhausted" and
            msg.startswith("%s (%d/%d)" % (PREFIX, LIMIT + 1, LIMIT)) and
            "tcp://" not in msg, "429 resource_exhausted in Pyroscope's "
            "words, no ingester address", msg)
    again = [up(d, "a", acked["a"], "a%d" % k, "main;a%d" % k, 2).status
             for k in range(LIMIT)]
    r.check(again == [200] * LIMIT, "a's existing series keep taking "
            "writes", str(again))

    # 2. Every ingester counts every series (RF 3 of 3).
    for i, ing in enumerate(c.ingesters):
        _, p = metrics(ing)
        r.eq((metric_value(p, "smolder_ingester_active_series", tenant="a"),
              metric_value(p, "smolder_ingester_active_series",
                           tenant="b")),
             (LIMIT, LIMIT + 10), "ingester-%d active series (a, b)" % i)
    _, p = metrics(d)
    r.eq(metric_value(p, "smolder_distributor_discarded_profiles_total",
                      reason="series_limit", tenant="a"), 5,
         "distributor: discarded{reason=series_limit,tenant=a} = 5")
    r.eq(metric_value(p, "smolder_distributor_discarded_profiles_total",
                      tenant="b"), None, "distributor: nothing discarded "
         "for b")

    # 3. Exact totals through the querier.
    for t in ("a", "b"):
        got, resp = stored(q, t)
        r.check(got == acked[t], "tenant %s: every acknowledged write is "
                "there, exact" % t, resp.describe() if got is None else
                "diff: %s" % sorted(set(got.items()) ^
                                    set(acked[t].items()))[:6])

    # 4. One ingester down: 2 healthy of RF 3, the share stays 30.
    c.stop_ingester(2)
    if not c.wait_ring(active=2):
        r.fail("the ring sees 2 active ingesters after a stop")
        return
    x = up(d, "a", acked["a"], "late", "main;late", 1)
    r.check(x.status == 429 and x.error_message().startswith(PREFIX),
            "2 of 3 ingesters: a new series of a is still 429 (share "
            "30, not 45)", x.describe())
    y = up(d, "a", acked["a"], "a0", "main;a0", 5)
    r.eq(y.status, 200, "2 of 3 ingesters: an existing series is 200")
    got, resp = stored(q, "a")
    r.check(got == acked["a"], "tenant a still exact with 2 of 3",
            resp.describe() if got is None else
            "diff: %s" % sorted(set(got.items()) ^
                                set(acked["a"].items()))[:6])


if __name__ == "__main__":
    run_script("test_cluster_series_limit", BUDGET_S, main)
