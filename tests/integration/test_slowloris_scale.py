#!/usr/bin/env python3
"""
test_slowloris_scale.py -- 10,000 trickling connections from many
loopback addresses do not take the server from a normal client, with the
default flags (-server.http-conn-limit=16384, the per-IP limit 256, the
30 s header deadline):

  1. a normal client (127.0.0.2, a new connection per request) measures
     /ready: 400 requests, p50 and p99 -- the quiet baseline;
  2. 10,000 connections from 50 addresses in 127.0.10.0/24-127.0.11.0/24
     (200 each, under the per-IP limit) send half a request's headers,
     then a byte each every 2 s, so no idle timeout fires; the server
     holds every one (none refused or reset);
  3. the same 400 requests during the attack: every one answered 200 and
     p99 within 2x the quiet p99 (or 2 ms of it: the p99s are sub-
     millisecond, and other tests share the machine; in a sanitizer
     build, whose timings say nothing, within 100 ms); the server's RSS
     growth is printed;
  4. the attackers gone, /ready still 200.
Both processes raise their descriptor limit to the hard limit; a hard
limit below what 10,000 needs scales the attack down and says so.
"""

import os
import resource
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, workspace_for  # noqa: E402
from smolder import recv_to_close, run_script  # noqa: E402

WANT = 10000
PER_ADDR = 200
REQS = 400


def ready_latencies(port, n):
    out, bad = [], []
    for _ in range(n):
        t = time.perf_counter()
        try:
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.bind(("127.0.0.2", 0))
            c.settimeout(10)
            c.connect(("127.0.0.1", port))
            c.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            got = recv_to_close(c, 4096)
            c.close()
            if not got.startswith(b"HTTP/1.1 200"):
                bad.append(got[:60])
        except OSError as e:
            bad.append(str(e))
        out.append(time.perf_counter() - t)
        time.sleep(0.003)
    out.sort()
    return out[int(len(out) * 0.99) - 1], statistics.median(out), bad


def send_each(socks, data):
    """Send `data` on every socket that takes it; how many did."""
    ok = 0
    for s in socks:
        try:
            s.send(data)
            ok += 1
        except OSError:
            pass
    return ok


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


def body(r):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = WANT if hard >= WANT + 2500 else max(1000, hard - 2500)
    r.check(True, "%d trickling connections (RLIMIT_NOFILE hard %d%s)" % (
        n, hard, "" if n == WANT else ": SCALED DOWN from %d" % WANT))
    ws = workspace_for(r, "slowloris_scale")
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s")).start()
    port = srv.port
    sanitized = os.environ.get("SM_SANITIZE") == "ON"

    q99, q50, bad = ready_latencies(port, REQS)
    r.check(not bad, "quiet: %d of %d /ready answered 200 (p50 %.2f ms, p99 "
            "%.2f ms)" % (REQS - len(bad), REQS, q50 * 1e3, q99 * 1e3),
            str(bad[:3]))
    rss0 = rss_kb(srv.proc.pid)

    socks, failed = [], 0
    t0 = time.monotonic()
    for i in range(n):
        a = i // PER_ADDR
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind(("127.0.%d.%d" % (10 + a // 250, 1 + a % 250), 0))
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            failed += 1
            s.close()
        if i % 500 == 499:
            time.sleep(0.05)          # within the listen backlog
    time.sleep(1.0)
    sent = send_each(socks, b"GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    r.check(failed == 0 and sent == n, "%d connections from %d addresses "
            "open and sending in %.1f s" % (sent, (n + PER_ADDR - 1) //
                                              PER_ADDR, time.monotonic() - t0),
            "%d failed to open" % failed)
    stop = threading.Event()
    alive = [n]

    def trickle():
        while not stop.is_set():
            alive[0] = send_each(socks, b"a")
            stop.wait(2.0)

    th = threading.Thread(target=trickle)
    th.start()
    try:
        time.sleep(0.5)
        a99, a50, bad = ready_latencies(port, REQS)
        rss1 = rss_kb(srv.proc.pid)
    finally:
        stop.set()
        th.join()
    r.check(not bad, "under attack: %d of %d /ready answered 200 (p50 %.2f "
            "ms, p99 %.2f ms)" % (REQS - len(bad), REQS, a50 * 1e3, a99 * 1e3),
            str(bad[:3]))
    if sanitized:
        r.check(a99 < 0.1, "under attack (sanitizer build): p99 %.1f ms "
                "within 100 ms (quiet p99 %.1f ms)" % (a99 * 1e3, q99 * 1e3))
    else:
        # sub-millisecond p99s on a shared machine: 2 ms of scheduling
        # noise is not the attack's doing
        r.check(a99 <= max(2 * q99, q99 + 0.002), "under attack: p99 %.2f "
                "ms within 2x the quiet p99 %.2f ms (%.2fx; or 2 ms of "
                "noise)" % (a99 * 1e3, q99 * 1e3, a99 / q99))
    r.check(alive[0] == n, "the server held every trickling connection "
            "(%d of %d still open)" % (alive[0], n))
    print("server RSS %.1f MiB quiet, %.1f MiB holding %d connections "
          "(%.1f KiB each)" % (rss0 / 1024, rss1 / 1024, n,
                               (rss1 - rss0) / max(n, 1)))
    for s in socks:
        s.close()
    time.sleep(0.5)
    r.check(srv.ready(), "/ready is 200 after the attack")
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_slowloris_scale", 150, body)
