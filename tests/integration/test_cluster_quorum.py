#!/usr/bin/env python3
"""
test_cluster_quorum.py -- below quorum nothing is acknowledged, and the
cluster's edges hold (the operator surface included).

3 ingesters, RF=3, 1 distributor, 1 querier:
  - /ring answers JSON (members, state, tokens, ownership, heartbeat) and
    an HTML table; /metrics on every process has its component's families
    (requests, errors by reason, ingest bytes, profiles, series, head
    bytes, ring health, RPC latencies);
  - a frame claiming 2^60 bytes sent to an ingester's RPC port is dropped
    without the allocation, and the ingester keeps serving;
  - two of three ingesters killed with SIGKILL: pushes fail with 5xx,
    right after the kill (before the heartbeat timeout) and after it,
    none acknowledged; queries fail with 503 instead of answering
    incompletely;
  - both restarted: pushes succeed again and every profile acknowledged
    before the failure is still there.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (limit_flags, metric_value, metrics,  # noqa: E402
                        workspace_for)
from smolder import run_script  # noqa: E402

COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()


def push(d, base, i):
    t = base + i
    return d.ingest({"name": "q.cpu", "from": str(t), "until": str(t + 1)},
                    ("a;p%d 1\n" % i).encode())


def collapsed(c, base):
    return c.queriers[0].render("q.cpu{}", frm=base - 60, until=base + 600,
                                fmt="collapsed")


def check_ring_pages(r, c):
    j = c.ring()
    ok = (j is not None and j.get("replication_factor") == 3 and
          j.get("quorum") == 2 and len(j.get("members", [])) == 3 and
          all(m["state"] == "ACTIVE" and m["tokens"] == 128 and
              0 < m["ownership"] < 1 and m["last_heartbeat_ago_ms"] >= 0
              for m in j["members"]))
    r.check(ok, "/ring JSON lists 3 ACTIVE members with 128 tokens, "
            "ownership and heartbeat", str(j)[:800])
    if j:
        total = sum(m["ownership"] for m in j["members"])
        r.check(abs(total - 1) < 1e-3, "ownership sums to 1 (%.4f)" % total)
    h = c.distributors[0].request("GET", "/ring",
                                  headers={"Accept": "text/html"})
    r.check(h.status == 200 and "text/html" in h.headers.get(
        "content-type", "") and "<table" in h.text() and
        h.text().count("<tr>") == 4, "/ring as an HTML table for people",
        h.describe())


def check_metrics(r, c):
    want = {
        "distributor": ["smolder_http_requests_total",
                        "smolder_distributor_profiles_total",
                        "smolder_distributor_received_bytes_total",
                        "smolder_distributor_series_written_total",
                        "smolder_rpc_client_duration_seconds_count",
                        "smolder_ring_members"],
        "querier": ["smolder_http_requests_total",
                    "smolder_rpc_client_duration_seconds_count",
                    "smolder_ring_members"],
        "ingester": ["smolder_http_requests_total",
                     "smolder_ingester_writes_total",
                     "smolder_ingester_head_series",
                     "smolder_ingester_head_bytes",
                     "smolder_ingester_rpc_duration_seconds_count",
                     "smolder_ingester_ready"],
    }
    for s in (c.distributors[0], c.queriers[0], c.ingesters[0]):
        kind = s.name.split("-")[0]
        _, m = metrics(s)
        missing = [n for n in want[kind] if metric_value(m, n) is None]
        r.check(not missing, "%s /metrics has its families" % s.name,
                "missing %s" % missing)
    _, m = metrics(c.distributors[0])
    r.check(metric_value(m, "smolder_ring_members", state="ACTIVE") == 3,
            "distributor ring health metric: 3 ACTIVE")
    r.check((metric_value(m, "smolder_rpc_client_duration_seconds_count",
                          method="write", status="ok") or 0) >= 3,
            "RPC latency of writes is recorded per method")


def frame_2p60(r, c):
    """SP handshake, then a header announcing 2^60 bytes."""
    port = c.rpc_ports[0]
    dropped = False
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(bytes([0, ord("S"), ord("P"), 0, 0, 0x30, 0, 0]))
        s.sendall(bytes([0x10, 0, 0, 0, 0, 0, 0, 0]) + b"abcd")
        s.settimeout(0.2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if s.recv(64) == b"":
                    dropped = True
                    break
            except socket.timeout:
                continue
            except OSError:
                dropped = True
                break
        s.close()
    except OSError as e:
        r.fail("connect to the ingester's RPC port", str(e))
        return
    r.check(dropped, "a frame claiming 2^60 bytes is dropped by the "
            "ingester's RPC listener")
    r.check(c.ingesters[0].alive(), "the ingester survives it")


def main(r):
    ws = workspace_for(r, "cluster-quorum")
    base = int(time.time()) - 900
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=COMMON)
    try:
        c.start()
        d = c.distributors[0]
        acked = [i for i in range(10) if push(d, base, i).status == 200]
        r.eq(len(acked), 10, "10 pushes acknowledged with every ingester up")
        check_ring_pages(r, c)
        check_metrics(r, c)
        frame_2p60(r, c)
        r.check(push(d, base, 10).status == 200 and c.wait_ring(active=3),
                "the cluster still writes after the oversized frame")

        # Two of three down.
        c.kill9_ingester(1)
        c.kill9_ingester(2)
        early = [push(d, base, 100 + i) for i in range(5)]
        r.check(all(500 <= x.status < 600 for x in early),
                "right after two ingesters die: pushes fail with 5xx",
                "\n".join(x.describe() for x in early))
        r.check(c.wait_ring(active=1, timeout=15),
                "the ring marks both unhealthy", str(c.states()))
        late = [push(d, base, 200 + i) for i in range(10)]
        r.check(all(x.status == 503 for x in late),
                "after the heartbeat timeout: pushes fail with 503",
                "\n".join(x.describe() for x in late[:3]))
        r.check("too few healthy ingesters" in late[0].text(),
                "the 503 says why", late[0].describe())
        q = collapsed(c, base)
        r.eq(q.status, 503, "queries fail with 503 rather than answer "
             "from one replica set short")
        rd = d.request("GET", "/ready")
        r.eq(rd.status, 503, "the distributor is not ready without a "
             "write quorum")

        # Back.
        c.restart_ingester(1)
        c.restart_ingester(2)
        r.check(c.wait_ring(active=3, timeout=30), "both rejoin",
                str(c.states()))
        after = [push(d, base, 300 + i).status for i in range(5)]
        r.eq(after, [200] * 5, "pushes succeed again")
        q = collapsed(c, base)
        got = q.text() if q.status == 200 else ""
        missing = [i for i in acked + [10] + list(range(300, 305))
                   if "a;p%d " % i not in got]
        r.check(q.status == 200 and not missing, "every acknowledged "
                "profile is still there", "missing %s\n%s" % (
                    missing[:10], q.describe()))
    finally:
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_cluster_quorum", 240, main)
