#!/usr/bin/env python3
"""
test_shutdown_delay.py -- a stopping process turns /ready 503 before it
closes its ports, and serves requests until then (-shutdown-delay, the
name Mimir and Pyroscope use): a load balancer or Kubernetes takes it
out of rotation first, so no client request fails on a rollout.

The single binary runs with -shutdown-delay=3s and its -data.dir three
levels below a directory that does not exist (created, as the flag
says).  After SIGTERM:
  - /ready answers 503 "Shutting down" within a second;
  - uploads and queries keep answering 200 during the delay;
  - the process then exits 0 by itself, about the delay after the
    signal, and the uploads acknowledged during the delay were kept
    (the same data dir, started again, serves them).
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durability import DataServer, Workspace  # noqa: E402
from smolder import run_script  # noqa: E402

DELAY_S = 3
FLAGS = ["-validation.reject-older-than=0", "-validation.reject-newer-than=0"]


def main(r):
    ws = Workspace("shutdown-delay")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.path("not", "yet", "there")
    s = DataServer(data, ws.log_dir("single"), name="single",
                   extra_flags=FLAGS + ["-shutdown-delay=%ds" % DELAY_S])
    s.start()
    r.at_end(lambda: s.stop())
    r.check(os.path.isdir(data), "-data.dir created with its parents")
    t0 = int(time.time())
    r.eq(s.ingest({"name": "sd.cpu", "from": str(t0), "until": str(t0 + 1)},
                  b"main;before 1\n").status, 200, "an upload before")
    sent = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    resp, seen = None, None
    while time.monotonic() - sent < 1.0:
        resp = s.request("GET", "/ready")
        if resp.status == 503:
            seen = time.monotonic() - sent
            break
        time.sleep(0.05)
    r.check(seen is not None and b"Shutting down" in resp.body,
            "/ready is 503 \"Shutting down\" within a second of SIGTERM",
            resp and resp.describe())
    ok, n = 0, 0
    while time.monotonic() - sent < DELAY_S - 1:
        n += 1
        ok += s.ingest({"name": "sd.cpu", "from": str(t0),
                        "until": str(t0 + 1)},
                       ("main;during%d 1\n" % n).encode()).status == 200
        ok += s.render("sd.cpu{}", frm=t0 - 60, until=t0 + 60,
                       fmt="collapsed").status == 200
        time.sleep(0.1)
    r.check(n > 5 and ok == 2 * n, "uploads and queries answer 200 during "
            "the delay (%d of %d)" % (ok, 2 * n))
    probs = s.reap(DELAY_S + 30)
    took = time.monotonic() - sent
    r.check(not probs, "the process exits 0 by itself", "\n".join(probs))
    r.check(took >= DELAY_S - 0.5, "about the delay after the signal "
            "(%.1f s)" % took)
    s2 = DataServer(data, ws.log_dir("again"), name="again",
                    extra_flags=FLAGS).start()
    r.at_end(lambda: s2.stop())
    res = s2.render("sd.cpu{}", frm=t0 - 60, until=t0 + 60, fmt="collapsed")
    got = {ln.rpartition(" ")[0] for ln in res.text().splitlines()}
    r.check(res.status == 200 and "main;before" in got and
            all("main;during%d" % i in got for i in range(1, n + 1)),
            "every upload acknowledged during the delay was kept (%d)" % n,
            res.describe())
    r.eq(s2.stop(), [], "restarted binary stops cleanly")


if __name__ == "__main__":
    run_script("test_shutdown_delay", 120, main)
