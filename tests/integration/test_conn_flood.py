#!/usr/bin/env python3
"""
test_conn_flood.py -- listener defaults hold under an idle-connection flood.

With the default flags (-server.http-per-ip-conn-limit=256), one client (127.0.0.1) opens 1,100 TCP
connections and sends nothing.  Another client (127.0.0.2; loopback routes
every 127/8 address) then ingests and queries: each request must be
answered within 1 s, and its latency is printed next to the same
requests' latency before the flood (same run).  The flooding address
itself is held to the per-IP limit: at most 256 of its connections stay
open.  With the old defaults (no per-IP limit, 2 min idle), the same
flood is measured for the record only (a request there waits for a free
slot; it is given 3 s).
"""

import http.client
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from smolder import Results, Server, install_timeout  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
FLOOD = 1100


def timed(port, method, path, body=None, src="127.0.0.2", timeout=10):
    """(status, seconds); status 0 on a connection failure or timeout."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(src, 0))
    try:
        c.request(method, path, body=body)
        r = c.getresponse()
        r.read()
        st = r.status
    except (OSError, http.client.HTTPException):
        st = 0
    finally:
        c.close()
    return st, time.monotonic() - t0


def round_trip(port, timeout=10):
    """An ingest and a query: [(what, status, seconds)]."""
    now = int(time.time())
    out = []
    st, dt = timed(port, "POST", "/ingest?name=flood.cpu&from=%d" % now,
                   b"main;work 1\n", timeout=timeout)
    out.append(("ingest", st, dt))
    q = ("/render?query=%s%%7Bservice_name%%3D%%22flood%%22%%7D&from=now-1h"
         "&until=now%%2B1m" % CPU)
    st, dt = timed(port, "GET", q, timeout=timeout)
    out.append(("query", st, dt))
    return out


def flood(port, n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            s.close()
    time.sleep(1.0)     # let the server accept (and refuse) them
    return socks


def still_open(socks):
    """Connections the server has not closed (no EOF/reset pending)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                continue
            n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def main():
    install_timeout(150)
    r = Results("test_conn_flood")
    with Server() as s:
        base = round_trip(s.port)
        base += round_trip(s.port)
        for what, st, dt in base:
            r.eq(st, 200, "before the flood: %s (%.3f s)" % (what, dt))
        socks = flood(s.port, FLOOD)
        try:
            opened = still_open(socks)
            print("flood: %d connections made, %d still open" % (
                len(socks), opened))
            r.check(opened <= 256, "the flooding address holds at most 256 "
                    "connections (per-IP default)", "%d open" % opened)
            during = round_trip(s.port) + round_trip(s.port)
            for (what, st, dt), (_, _, bdt) in zip(during, base):
                print("%s: %.3f s during the flood, %.3f s before" % (
                    what, dt, bdt))
                r.check(st == 200 and dt < 1.0, "during a %d-connection "
                        "idle flood: %s answered within 1 s" % (FLOOD, what),
                        "status %d after %.3f s" % (st, dt))
        finally:
            for x in socks:
                x.close()
        r.check(s.ready(), "/ready is 200 after the flood")
        s.check_stopped(r)

    # The old defaults, for the record (not a check).
    with Server(extra_flags=["-server.http-per-ip-conn-limit=0",
                             "-server.http-idle-timeout=2m"]) as s:
        socks = flood(s.port, FLOOD)
        try:
            for what, st, dt in round_trip(s.port, timeout=3):
                print("old defaults (no per-IP limit, 2m idle): %s status "
                      "%d after %.3f s" % (what, st, dt))
        finally:
            for x in socks:
                x.close()
        s.check_stopped(r)
    r.finish()


if __name__ == "__main__":
    main()
