#!/usr/bin/env python3
"""
test_slowloris.py -- the header deadline (-server.http-header-timeout)
against clients that trickle their headers, from many loopback addresses
so the per-IP limit does not save the day:

  1. 48 connections from 127.0.0.2-49 fill -server.http-conn-limit=48,
     each sending one header byte every 0.3 s (so the idle timeout never
     fires): every one is closed within the 2 s deadline plus a second,
     and smolder_http_header_timeouts_total counts them;
  2. a normal client that arrives while they hold every slot gets its
     /ready answered once they are cut, within 5 s -- without the deadline
     it would wait for them for ever;
  3. what is slow but keeps up is not cut: a request whose headers
     arrive at once and whose body trickles for 3 s at 200 bytes a second
     (over -server.http-body-min-rate=100) gets 200, and a kept-alive
     connection idle for 3 s between two requests serves the second one;
  4. a body trickled a byte at a time (5 bytes a second, from 8
     addresses at once) is closed once it falls behind the minimum rate
     -- after the 2 s grace, well before the idle timeout would -- and
     smolder_http_body_timeouts_total counts them; a normal client is
     answered meanwhile.
"""

import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import DataServer, Workspace  # noqa: E402
from smolder import metric, run_script  # noqa: E402

ATTACKERS = 48
DEADLINE_S = 2.0
MIN_RATE = 100                   # bytes a second a body keeps up


HEADER_HEAD = b"GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: "
BODY_HEAD = (b"POST /ingest?name=trickle.cpu HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 100000\r\n\r\n")


def trickler(port, src, closed_after, stop, head=HEADER_HEAD, byte=b"a",
             every=0.3):
    """Open a connection from address `src`, send `head` and trickle
    `byte` every `every` s (a header byte by default); record the seconds
    until the server closed it."""
    t0 = time.monotonic()
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.sendall(head)
        s.settimeout(every)
        while not stop.is_set() and time.monotonic() - t0 < 15:
            try:
                s.sendall(byte)
                if s.recv(1024) == b"":
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        closed_after.append(time.monotonic() - t0)
        s.close()
    except OSError as e:
        closed_after.append(("error", str(e)))


def body(r):
    ws = Workspace("slowloris")
    r.at_end(lambda: ws.cleanup(r))
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-server.http-header-timeout=%ds" % DEADLINE_S,
        "-server.http-body-min-rate=%d" % MIN_RATE,
        "-server.http-conn-limit=%d" % ATTACKERS,
        "-server.http-threads=2",
        "-validation.reject-older-than=0"]).start()
    port = srv.port
    base = metric(srv, "smolder_http_header_timeouts_total")

    # 1-2. the attack, and a normal client behind it
    closed, stop = [], threading.Event()
    threads = [threading.Thread(target=trickler, args=(
        port, "127.0.0.%d" % (2 + i), closed, stop)) for i in range(ATTACKERS)]
    for t in threads:
        t.start()
    time.sleep(0.5)                  # every slot is taken
    t0 = time.monotonic()
    resp = srv.request("GET", "/ready", timeout=20)
    waited = time.monotonic() - t0
    r.check(resp.status == 200 and waited < 5, "a normal client behind %d "
            "tricklers holding every slot: /ready in %.1f s" % (ATTACKERS,
                                                               waited),
            resp.describe())
    for t in threads:
        t.join(20)
    stop.set()
    times = [c for c in closed if isinstance(c, float)]
    r.check(len(times) == ATTACKERS and max(times) < DEADLINE_S + 1.5,
            "every trickler closed by the deadline (%d, the last after "
            "%.1f s)" % (len(times), max(times) if times else -1),
            str([c for c in closed if not isinstance(c, float)])[:300])
    cut = metric(srv, "smolder_http_header_timeouts_total") - base
    r.check(cut >= ATTACKERS, "smolder_http_header_timeouts_total counted "
            "them (%d)" % cut)

    # 3. slow, but not a header trickle
    now = int(time.time())
    payload = b"main;slow 1\n" * 50
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /ingest?name=slowbody.cpu&from=%d HTTP/1.1\r\nHost: x"
              b"\r\nContent-Length: %d\r\n\r\n" % (now, len(payload)))
    for i in range(0, len(payload), len(payload) // 10):
        s.sendall(payload[i:i + len(payload) // 10])
        time.sleep(0.3)
    got = s.recv(4096)
    s.close()
    r.check(got.startswith(b"HTTP/1.1 200"), "headers at once, a body "
            "trickled over 3 s: 200", got[:200])
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
    first = s.recv(4096)
    time.sleep(DEADLINE_S + 1)
    s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    second = s.recv(4096)
    s.close()
    r.check(first.startswith(b"HTTP/1.1 200") and
            second.startswith(b"HTTP/1.1 200"), "a kept-alive connection "
            "idle past the header deadline serves its next request",
            (first + b" | " + second)[:300])

    # 4. a body trickle
    base = metric(srv, "smolder_http_body_timeouts_total")
    closed = []

    never = threading.Event()
    threads = [threading.Thread(target=trickler, args=(
        port, "127.0.1.%d" % (2 + i), closed, never, BODY_HEAD, b"m", 0.2))
        for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    resp = srv.request("GET", "/ready", timeout=20)
    r.check(resp.status == 200, "a normal client during the body trickle",
            resp.describe())
    for t in threads:
        t.join(20)
    times = [c for c in closed if isinstance(c, float)]
    r.check(len(times) == 8 and max(times) < DEADLINE_S + 1.5,
            "every body trickler closed once behind %d B/s (%d, the last "
            "after %.1f s)" % (MIN_RATE, len(times),
                               max(times) if times else -1),
            str([c for c in closed if not isinstance(c, float)])[:300])
    cut = metric(srv, "smolder_http_body_timeouts_total") - base
    r.check(cut >= 8, "smolder_http_body_timeouts_total counted them (%d)" %
            cut)
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_slowloris", 120, body)
