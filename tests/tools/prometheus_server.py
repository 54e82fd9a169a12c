#!/usr/bin/env python3
"""
prometheus_server.py -- a real Prometheus (Debian's prometheus package) on
loopback for tests: its remote-write receiver on, old samples accepted
(storage.tsdb.out_of_order_time_window, for a recording rule's backfill),
a random port, its data and log in DIR, its pid in DIR/pid.

    prometheus_server.py start DIR   prints {"port": N, "pid": N} once
                                     /-/ready answers (at most 60 s)
    prometheus_server.py stop DIR    SIGTERM, 10 s, then SIGKILL

Importable: start(dir) -> {"port", "pid", "url"} (raises PromError),
stop(dir), start_for(results, dir), query(url, promql, time) -> the
result list of /api/v1/query.

The process runs in its own session, so a test's signals do not reach it;
stop() ends it by pid.
"""

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import loopback

STOP_TIMEOUT = 10.0
READY_TIMEOUT = 60.0
CONFIG = """global:
  scrape_interval: 1h
storage:
  tsdb:
    out_of_order_time_window: 30d
"""


class PromError(Exception):
    pass


def start(d):
    """Start Prometheus in directory d; {"port", "pid", "url"}."""
    d = os.path.abspath(d)
    pid = loopback.read(d, "pid")
    if pid and loopback.alive(int(pid)):
        raise PromError("%s/pid names a running prometheus" % d)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "prometheus.yml"), "w") as f:
        f.write(CONFIG)
    port, = loopback.free_ports(1)
    log = open(os.path.join(d, "prometheus.log"), "ab")
    try:
        p = subprocess.Popen(
            ["prometheus", "--config.file=%s" % os.path.join(
                d, "prometheus.yml"),
             "--storage.tsdb.path=%s" % os.path.join(d, "data"),
             "--web.listen-address=127.0.0.1:%d" % port,
             "--web.enable-remote-write-receiver",
             "--storage.tsdb.retention.time=60d", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, close_fds=True)
    finally:
        log.close()
    with open(os.path.join(d, "pid"), "w") as f:
        f.write("%d\n" % p.pid)
    url = "http://127.0.0.1:%d" % port
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                if r.status == 200:
                    return {"port": port, "pid": p.pid, "url": url}
        except OSError:
            pass
        time.sleep(0.1)
    loopback.kill(p.pid, STOP_TIMEOUT)
    with open(os.path.join(d, "prometheus.log"), "rb") as f:
        tail = f.read()[-2000:].decode("utf-8", "replace")
    raise PromError("prometheus not ready within %.0f s:\n%s" %
                    (READY_TIMEOUT, tail))


def start_for(r, d):
    """start(d), with stop(d) queued on Results r (at_end)."""
    info = start(d)
    r.at_end(lambda: stop(d))
    return info


def stop(d):
    d = os.path.abspath(d)
    pid = loopback.read(d, "pid")
    if pid:
        loopback.kill(int(pid), STOP_TIMEOUT)
        os.unlink(os.path.join(d, "pid"))


def query(url, promql, at):
    """/api/v1/query's result list (PromError on an error answer)."""
    q = urllib.parse.urlencode({"query": promql, "time": "%.3f" % at})
    with urllib.request.urlopen(url + "/api/v1/query?" + q, timeout=30) as r:
        j = json.load(r)
    if j.get("status") != "success":
        raise PromError(str(j)[:300])
    return j["data"]["result"]


def main(argv):
    return loopback.main(argv, "prometheus_server", start, stop, PromError,
                         ("port", "pid"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
