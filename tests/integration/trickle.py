"""
trickle.py -- a slowloris attacker and a normal client's latency probe,
shared by tests/integration/test_slowloris_scale.py (the server holds the
flood and keeps answering) and bench/run's B20 (by how much the flood
raises a normal client's p99, in rounds against a quiet baseline).

Trickler(port, n) is the attack in its own process (fork), at nice +10:
it stands in for remote machines, so its sends share no GIL with the
probe and its CPU does not compete with the server's for the two cores.
It opens n connections from 127.0.10.0/24 upward (per_addr each, under
the server's per-IP limit), sends half a request's headers on each, then
a byte on every one every `period` seconds, so no idle timeout fires and
only the header deadline can cut them.  start() returns once every
connection is open and has sent its first bytes; stop() closes them and
returns how many still took the last byte (the ones the server held).

ready_latencies(port, n) is the normal client: n GET /ready from
127.0.0.2, a new connection each (the costly case: accept under the
flood), 3 ms apart; returns (sorted latencies in s, failures).
"""

import multiprocessing as mp
import os
import resource
import socket
import time

from smolder import recv_to_close


def ready_latencies(port, n, gap=0.003):
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
        time.sleep(gap)
    out.sort()
    return out, bad


def pct(sorted_xs, p):
    """The p-th percentile (0 < p <= 100) of sorted samples: the value
    below which p% of them lie (the 4th worst of 400 for p99)."""
    return sorted_xs[max(0, int(len(sorted_xs) * p / 100.0) - 1)]


def raise_nofile():
    """Raise the descriptor soft limit to the hard one; the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


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


def _attack(port, n, per_addr, period, ready, stop, out):
    os.nice(10)
    socks, failed = [], 0
    t0 = time.monotonic()
    for i in range(n):
        a = i // per_addr
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
    out.put(("open", failed, sent, time.monotonic() - t0))
    ready.set()
    alive = sent
    while not stop.wait(period):
        alive = send_each(socks, b"a")
    for s in socks:
        s.close()
    out.put(("alive", alive))


class Trickler:
    def __init__(self, port, n, per_addr=200, period=2.0):
        self.port, self.n, self.per_addr, self.period = port, n, per_addr, period
        ctx = mp.get_context("fork")
        self.ready, self.stop_ev, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=_attack, daemon=True, args=(
            port, n, per_addr, period, self.ready, self.stop_ev, self.out))
        self.failed = self.sent = None
        self.open_s = None

    def addresses(self):
        return (self.n + self.per_addr - 1) // self.per_addr

    def start(self, timeout=120):
        """Open the flood; False if it was not open within timeout."""
        self.proc.start()
        if not self.ready.wait(timeout):
            return False
        _, self.failed, self.sent, self.open_s = self.out.get(timeout=10)
        return True

    def stop(self, timeout=60):
        """Close the flood; how many connections took the last byte (None
        if the attacker did not report)."""
        self.stop_ev.set()
        alive = None
        try:
            _, alive = self.out.get(timeout=timeout)
        except Exception:
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        return alive
