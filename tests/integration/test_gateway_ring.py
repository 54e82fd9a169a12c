#!/usr/bin/env python3
"""
test_gateway_ring.py -- store-gateways that join and leave through etcd
(-store-gateway.sharding-ring.store=etcd) never make an answer silently
short.  The gateway ring's RF is 1, so each tenant's history is on one
gateway only: the hardest case, where a tenant whose owner changes has
no second loaded owner to fall back on.

One ingester (RF 1) with -ingester.local-retention=1m ships 8 tenants'
old uploads (15 minutes back) to a filesystem bucket and drops them from
its disk once the gateways serve them, so their history is in the bucket
alone and only a gateway can answer for it.  Then, with a querier that
is never restarted:

  1. gateway-2 joins: while it does its first sync (JOINING) the
     gateways that owned its tenants keep them and vouch for them, so a
     join costs no 503 beyond a heartbeat of the views' lag (at most one
     round of the 8 tenants; without it, ~36);
  2. gateway-0 leaves for good (SIGTERM with
     -store-gateway.sharding-ring.unregister-on-shutdown=true, so it
     deletes its key): its tenants' new owners have not loaded them, and
     answer the querier's Sources call with an error until their next
     sync rather than with an empty list.

Throughout, every tenant's answer is polled: each one is exact or not a
200 -- a 200 with uploads missing fails the test -- and once the ring
has settled every answer is exact.  The 503s a change costs with RF 1
are printed (a leave with RF 1 costs some until the new owners have
synced); with RF 2 (test_etcd_membership.py) there are none.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import etcd_server  # noqa: E402
from cluster import shipping_cluster  # noqa: E402
from durability import (admin_listener, flush,  # noqa: E402
                        local_blocks_dropped, metrics, workspace_for)
from oracle import parse_collapsed  # noqa: E402
from smolder import metric_value, run_script  # noqa: E402

TENANTS = ["t%d" % i for i in range(8)]
PER_TENANT = 12
GW_PATH = "/store-gateway/ring"


def answer(q, tenant):
    now = int(time.time())
    resp = q.request("GET", "/render", query={
        "query": "gr.cpu{}", "from": str(now - 3600),
        "until": str(now + 600), "format": "collapsed"},
        headers={"X-Scope-OrgID": tenant}, timeout=30)
    if resp.status != 200:
        return resp.status
    return parse_collapsed(resp.text())


def body(r):
    ws = workspace_for(r, "gateway-ring")
    et = etcd_server.start_for(r, ws.path("etcd"))
    storage = ["-storage.backend=filesystem",
               "-storage.filesystem.dir=%s" % ws.path("bucket")]
    # one ingester: its flush goes to its admin listener (header mode)
    c = shipping_cluster(
        ws, storage, admin_listener([
            "-ingester.ship-interval=1s", "-ingester.local-retention=1m",
            "-ingester.leave-on-shutdown=false"]),
        gateway_extra=[
            "-store-gateway.sharding-ring.unregister-on-shutdown=true"],
        extra=["-auth.multitenancy-enabled=true"],
        ingesters=1, distributors=1, queriers=1, rf=1, gateways=2,
        gateway_rf=1, etcd=et["endpoint"], gateway_store="etcd")
    c.start_for(r)
    d, q, ing = c.distributors[0], c.queriers[0], c.ingesters[0]

    # 8 tenants' old uploads, shipped, then only in the bucket
    now = int(time.time())
    ok = 0
    for t in TENANTS:
        for k in range(PER_TENANT):
            ts = now - 900 + k
            resp = d.request("POST", "/ingest", query={
                "name": "gr.cpu{shard=s%d}" % (k % 4), "from": str(ts),
                "until": str(ts + 1)}, body=("main;%s;work 1\n" % t).encode(),
                headers={"X-Scope-OrgID": t})
            ok += resp.status == 200
    r.eq(ok, len(TENANTS) * PER_TENANT, "every upload acknowledged")
    r.eq(flush(ing).status, 200, "the ingester flushed and shipped")
    deadline = time.monotonic() + 30
    while (time.monotonic() < deadline and
           local_blocks_dropped(ing) < len(TENANTS)):
        time.sleep(0.2)
    r.check(local_blocks_dropped(ing) >= len(TENANTS), "the ingester "
            "dropped every tenant's block once the gateways served it (%d)"
            % local_blocks_dropped(ing))
    first = answer(q, TENANTS[0])
    unit = (first.get("main;t0;work", 0) // PER_TENANT
            if isinstance(first, dict) else 0)
    r.check(unit > 0, "one upload's value is known (%d)" % unit, str(first))
    want = {t: {"main;%s;work" % t: PER_TENANT * unit} for t in TENANTS}
    r.eq({t: answer(q, t) for t in TENANTS}, want,
         "2 gateways: every tenant's history, from the bucket alone")

    def through(what, want_ring, most_refused=None):
        """Poll every tenant until the querier's gateway ring is
        `want_ring`, all ACTIVE, and 2 s more (the gateways' 1.5 s grace
        for tenants they no longer own)."""
        short, count = [], {"answers": 0, "refused": 0}

        def probe():
            for t in TENANTS:
                got = answer(q, t)
                count["answers"] += 1
                if isinstance(got, dict) and got != want[t]:
                    short.append("%s: 200 with %s" % (t, got))
                elif not isinstance(got, dict):
                    count["refused"] += 1

        settled, took = c.poll_until_active(q, GW_PATH, want_ring, 60, 0.05,
                                            probe)
        n, refused = count["answers"], count["refused"]
        r.check(settled, "%s: the querier's gateway ring is %s, all ACTIVE, "
                "with no restart (%.1f s)" % (what, want_ring, took),
                str(c.states(q, GW_PATH)))
        r.eq(short[:5], [], "%s: none of %d answers is a short 200 (%d "
             "refused while the owners changed)" % (what, n, refused))
        print("# %s: %d answers, %d refused" % (what, n, refused))
        if most_refused is not None:
            r.check(refused <= most_refused, "%s: at most %d refused (%d): "
                    "the old owners vouch until the newcomer has synced, "
                    "so only the views' heartbeat of lag costs any"
                    % (what, most_refused, refused))
        r.eq({t: answer(q, t) for t in TENANTS}, want,
             "%s: then every tenant's answer is exact" % what)

    # 1. one joins
    c.gateways.append(c._gateway(2).start(wait=False))
    through("gateway-2 joined", ["gateway-0", "gateway-1", "gateway-2"],
            most_refused=len(TENANTS))
    loaded = []
    for gw in c.gateways:
        _, p = metrics(gw)
        loaded.append(metric_value(
            p, "smolder_store_gateway_blocks_loaded_total") or 0)
    r.check(all(x > 0 for x in loaded), "each of the three gateways loaded "
            "tenants it owns", str(loaded))

    # 2. one leaves for good
    probs = c.gateways[0].stop()
    r.check(not probs, "gateway-0 stopped and left", "\n".join(probs))
    through("gateway-0 left", ["gateway-1", "gateway-2"])
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_gateway_ring", 180, body)
