#!/usr/bin/env python3
"""
test_slowloris_scale.py -- 10,000 trickling connections from many
loopback addresses do not take the server from a normal client, with the
default flags (-server.http-conn-limit=16384, the per-IP limit 256, the
30 s header deadline):

  1. a normal client (127.0.0.2, a new connection per request) measures
     /ready: 400 requests, p50 and p99 -- the quiet baseline;
  2. 10,000 connections from 50 addresses in 127.0.10.0/24-127.0.11.0/24
     (200 each, under the per-IP limit; trickle.Trickler, its own
     process) send half a request's headers, then a byte each every 2 s,
     so no idle timeout fires; the server holds every one (none refused
     or reset);
  3. the same 400 requests during the attack: every one answered 200,
     none waiting behind the flood (p99 within 50 ms; 100 ms in a
     sanitizer build), the ratio to the quiet p99 printed -- bench/run's
     B20 measures that ratio in rounds, against its goal of 2x; the
     server's RSS growth is printed;
  4. the attackers gone, /ready still 200.
Both processes raise their descriptor limit to the hard limit; a hard
limit below what 10,000 needs scales the attack down and says so.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, workspace_for  # noqa: E402
from smolder import run_script  # noqa: E402
from trickle import Trickler, pct, raise_nofile, ready_latencies  # noqa: E402

WANT = 10000
PER_ADDR = 200
REQS = 400
# Under the flood a request must not wait behind it: a server that served
# trickling connections before a new one would hold it for their header
# deadline (30 s); one that let them starve its accept loop would refuse
# or time it out.  By how much the flood raises the p99 is a benchmark's
# question (bench/run B20: rounds against a quiet baseline), not this
# test's: one p99 of 400 samples is the 4th worst, and a shared 2-core
# machine's scheduling stalls alone move it by several milliseconds.
ATTACK_P99_S = 0.05


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


def body(r):
    hard = raise_nofile()
    n = WANT if hard >= WANT + 2500 else max(1000, hard - 2500)
    r.check(True, "%d trickling connections (RLIMIT_NOFILE hard %d%s)" % (
        n, hard, "" if n == WANT else ": SCALED DOWN from %d" % WANT))
    ws = workspace_for(r, "slowloris_scale")
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s")).start()
    port = srv.port
    sanitized = os.environ.get("SM_SANITIZE") == "ON"

    lat, bad = ready_latencies(port, REQS)
    q50, q99 = pct(lat, 50), pct(lat, 99)
    r.check(not bad, "quiet: %d of %d /ready answered 200 (p50 %.2f ms, p99 "
            "%.2f ms)" % (REQS - len(bad), REQS, q50 * 1e3, q99 * 1e3),
            str(bad[:3]))
    rss0 = rss_kb(srv.proc.pid)

    t = Trickler(port, n, PER_ADDR)
    r.at_end(lambda: t.proc.is_alive() and t.stop())
    opened = t.start()
    r.check(opened and t.failed == 0 and t.sent == n, "%s connections from "
            "%d addresses open and sending in %s s" % (
                t.sent, t.addresses(), t.open_s and "%.1f" % t.open_s),
            "%s failed to open" % t.failed)
    try:
        time.sleep(0.5)
        lat, bad = ready_latencies(port, REQS)
        a50, a99 = pct(lat, 50), pct(lat, 99)
        rss1 = rss_kb(srv.proc.pid)
    finally:
        alive = t.stop()
    r.check(not bad, "under attack: %d of %d /ready answered 200 (p50 %.2f "
            "ms, p99 %.2f ms; %.2fx the quiet p99)" % (
                REQS - len(bad), REQS, a50 * 1e3, a99 * 1e3, a99 / q99),
            str(bad[:3]))
    bound = 0.1 if sanitized else ATTACK_P99_S
    r.check(a99 < bound, "under attack: p99 %.2f ms within %d ms (nobody "
            "waits behind the flood)" % (a99 * 1e3, bound * 1e3))
    r.check(alive == n, "the server held every trickling connection "
            "(%s of %d still open)" % (alive, n))
    print("server RSS %.1f MiB quiet, %.1f MiB holding %d connections "
          "(%.1f KiB each)" % (rss0 / 1024, rss1 / 1024, n,
                               (rss1 - rss0) / max(n, 1)))
    time.sleep(0.5)
    r.check(srv.ready(), "/ready is 200 after the attack")
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_slowloris_scale", 150, body)
