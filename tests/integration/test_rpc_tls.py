#!/usr/bin/env python3
"""
test_rpc_tls.py -- mutual TLS on the internal RPC (-rpc.tls-*): a cluster
of 3 ingesters (RF 3), a distributor and a querier, every one with a
certificate from the cluster's CA (made by openssl), serves and dials its
tcp:// RPC addresses as TLS.

  1. writes replicate and queries answer exactly, as without TLS;
  2. a process without a certificate -- a querier started with the same
     ring but no -rpc.tls-* flags -- pointed at the ingesters' RPC ports
     reads nothing: none of its answers carries the data (503, never a
     200 with the profile), and its ring sees no ingester ACTIVE;
  3. the same for a querier whose certificate comes from another CA;
  4. the store-gateway path: the ingesters ship to a filesystem bucket,
     a store-gateway (mutual TLS too) loads the blocks, and the querier's
     answer is exact with the gateway asked over TLS (its served RPCs
     counted); the outsiders of 2 and 3, given the gateway ring too, get
     nothing from it either.

Without the openssl command the test skips (a failure under CI=true).
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from durability import (DataServer, flush,  # noqa: E402
                        gateway_sync, metrics, wait_metric)
from oracle import parse_collapsed  # noqa: E402
from smolder import in_ci, run_script  # noqa: E402
from test_tls import certs_workspace  # noqa: E402

UPLOADS = 30


def tls_flags(certs, who):
    return ["-rpc.tls-cert-path=" + certs.path(who + ".crt"),
            "-rpc.tls-key-path=" + certs.path(who + ".key"),
            "-rpc.tls-ca-path=" + certs.path("ca.crt"),
            "-rpc.tls-server-name=localhost"]


def outsider(r, ws, c, name, flags, now):
    """A querier on the cluster's ring with `flags`: it must read nothing."""
    q = DataServer(ws.data_dir(name), ws.log_dir(name), name=name,
                   target="querier", extra_flags=c.ring_flags() + flags)
    q.start(wait=False)
    leaked, statuses = False, set()
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        resp = q.render("sec.cpu{}", frm=now - 3600, until=now + 3600,
                        fmt="collapsed")
        statuses.add(resp.status)
        if resp.status == 200 and "main;secret" in resp.text():
            leaked = True
        time.sleep(0.3)
    states = c.states(q) if q.alive() else {}
    r.check(not leaked and 200 not in statuses, "%s: no answer carries "
            "the data (statuses %s)" % (name, sorted(statuses)))
    r.check(list(states.values()).count("ACTIVE") == 0, "%s: its ring sees "
            "no ingester ACTIVE (%s)" % (name, states))
    problems = q.stop()
    r.check(not problems, "%s stops cleanly" % name, "\n".join(problems))


def body(r):
    ws, certs = certs_workspace(r, "rpc-tls")
    if certs.openssl is None or shutil.which("openssl") is None:
        (r.fail if in_ci() else r.skip)("RPC TLS", "openssl missing")
        return
    certs.ca("ca")
    certs.ca("other")
    certs.leaf("node", "ca", "serverAuth,clientAuth", cn="node")
    certs.leaf("rogue", "other", "serverAuth,clientAuth", cn="rogue")

    bucket = ["-storage.backend=filesystem",
              "-storage.filesystem.dir=" + ws.path("bucket")]
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=tls_flags(certs, "node") +
                ["-validation.reject-older-than=0"],
                ingester_extra=bucket, gateways=1, gateway_rf=1,
                gateway_extra=bucket)
    c.start_for(r)
    r.check(True, "a cluster with mutual TLS on its RPC started: 3 "
            "ingesters ACTIVE in both rings")
    now = int(time.time())
    ok = 0
    for i in range(UPLOADS):
        resp = c.distributors[0].ingest({"name": "sec.cpu",
                                         "from": str(now - 60 + i)},
                                        b"main;secret 1\n")
        ok += resp.status == 200
    r.eq(ok, UPLOADS, "every upload acknowledged (RF 3 over TLS)")
    r.check(c.wait_writes(UPLOADS), "every ingester applied every write")
    resp = c.queriers[0].render("sec.cpu{}", frm=now - 3600, until=now + 3600,
                                fmt="collapsed")
    got = parse_collapsed(resp.text()) if resp.status == 200 else {}
    r.eq(got, {"main;secret": UPLOADS * 10000000}, "the querier's answer is "
         "exact (every upload once)")

    # 4. the store-gateway, over TLS
    for i, ing in enumerate(c.ingesters):
        resp = flush(ing)
        r.check(resp.status == 200, "ingester-%d flushed and shipped" % i,
                resp.describe())
    for i, ing in enumerate(c.ingesters):
        v = wait_metric(ing, "smolder_ingester_ship_blocks_pending",
                        lambda x: x == 0, timeout=30)
        r.check(v == 0, "ingester-%d: nothing left to ship" % i, repr(v))
    gw = c.gateways[0]
    gateway_sync(r, gw, "the bucket")
    before = gw_served(gw)
    resp = c.queriers[0].render("sec.cpu{}", frm=now - 3600, until=now + 3600,
                                fmt="collapsed")
    got = parse_collapsed(resp.text()) if resp.status == 200 else {}
    r.eq(got, {"main;secret": UPLOADS * 10000000}, "with the store-gateway "
         "the answer is still exact (every upload once)")
    r.check(gw_served(gw) > before, "the querier asked the store-gateway "
            "over TLS (%d RPCs served)" % (gw_served(gw) - before))

    outsider(r, ws, c, "keyless", c.gateway_flags(), now)
    outsider(r, ws, c, "foreign-ca", c.gateway_flags() +
             tls_flags(certs, "rogue"), now)
    c.check_stopped(r)


def gw_served(gw):
    """RPCs the store-gateway served, health probes left out."""
    _, m = metrics(gw)
    return sum(v for labels, v in (m or {}).get(
        "smolder_ingester_rpc_duration_seconds_count", [])
        if labels.get("method") != "health")


if __name__ == "__main__":
    run_script("test_rpc_tls", 240, body)
