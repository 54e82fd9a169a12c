#!/usr/bin/env python3
"""
test_scrape_shared.py -- two scrapers share the targets of one
configuration (-scraper.peers, scraper/scraper.h) in front of a cluster
of 3 ingesters (RF 3), a distributor and a querier.

A real Go service (tests/tools/pprofapp -n 50) listens on 50 more ports,
each a target, and records when each port's /debug/pprof/goroutine was
asked.  With a 2 s interval:
  - the scrapers split the targets: each target is owned by exactly one
    (/api/v1/targets' "owned"), and both own some;
  - over 6 s, no target is asked twice within half an interval, and none
    waits more than an interval and a half;
  - kill -9 one scraper: within an interval plus the probe time every
    target is asked again, all by the survivor, still never twice within
    half an interval;
  - every target's profiles are in the cluster: the querier lists the 50
    instances.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import DataServer  # noqa: E402
from smolder import free_port, run_script  # noqa: E402
from test_scrape import DEFAULTS_OFF, pprofapp  # noqa: E402

N = 50
INTERVAL = 2.0
PATH = "/debug/pprof/goroutine"


def stats(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port,
                                timeout=10) as f:
        return json.loads(f.read())


def asks(st, t0, t1):
    """{port: sorted times (s) of PATH asks in [t0, t1)}."""
    out = {}
    for port, paths in st.items():
        out[port] = sorted(t / 1000.0 for t in paths.get(PATH, [])
                           if t0 * 1000 <= t < t1 * 1000)
    return out


def owned(srv):
    r = srv.request("GET", "/api/v1/targets")
    if r.status != 200:
        return None
    return {t["labels"]["instance"].rsplit(":", 1)[1]
            for t in json.loads(r.text())["data"]["activeTargets"]
            if t["owned"]}


def body(r):
    ws, exe = pprofapp(r, "scrape-shared")
    if exe is None:
        return
    app_port = free_port()
    pfile = ws.path("ports")
    log = open(ws.path("pprofapp.log"), "ab")
    app = subprocess.Popen([exe, "-addr", "127.0.0.1:%d" % app_port, "-n",
                            str(N), "-ports-file", pfile], stdout=log,
                           stderr=log)

    def kill_app():
        if app.poll() is None:
            os.kill(app.pid, signal.SIGKILL)
            app.wait()
        log.close()
    r.at_end(kill_app)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.exists(pfile):
        time.sleep(0.05)
    ports = open(pfile).read().split() if os.path.exists(pfile) else []
    r.eq(len(ports), N, "the service listens on %d target ports" % N)

    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                name="sc")
    r.at_end(lambda: c.check_stopped(r))
    c.start()
    cfg = ws.path("scrape.yaml")
    with open(cfg, "w") as f:
        f.write("""scrape_configs:
  - job_name: shared
    scrape_interval: 2s
    scrape_timeout: 1s
%s    static_configs:
      - targets: [%s]
""" % (DEFAULTS_OFF, ", ".join('"127.0.0.1:%s"' % p for p in ports)))
    sp = [free_port(), free_port()]
    peers = ",".join("http://127.0.0.1:%d" % p for p in sp)
    dist = "http://127.0.0.1:%d" % c.distributors[0].port
    scr = []
    for i in range(2):
        s = DataServer(ws.data_dir("scraper-%d" % i),
                       ws.log_dir("scraper-%d" % i),
                       name="scraper-%d" % i, target="scraper", port=sp[i],
                       extra_flags=["-scrape.config-file=%s" % cfg,
                                    "-scraper.push-url=%s" % dist,
                                    "-scraper.peers=%s" % peers,
                                    "-scraper.peers-probe-period=300ms",
                                    "-scraper.peers-probe-timeout=250ms"])
        r.at_end(lambda s=s: s.kill9())
        scr.append(s.start())
    try:
        deadline = time.monotonic() + 20
        split = False
        while time.monotonic() < deadline and not split:
            o = [owned(s) or set() for s in scr]
            split = (len(o[0]) > 0 and len(o[1]) > 0 and
                     not (o[0] & o[1]) and len(o[0] | o[1]) == N)
            time.sleep(0.2)
        r.check(split, "the two scrapers split the %d targets, each owned "
                "by one (%d and %d)" % (N, len(o[0]), len(o[1])))
        time.sleep(INTERVAL)           # past any start-up slot
        t0 = time.time()
        time.sleep(3 * INTERVAL)
        t1 = time.time()
        a = asks(stats(app_port), t0, t1)
        doubles = [p for p, ts in a.items()
                   if any(y - x < INTERVAL / 2 for x, y in zip(ts, ts[1:]))]
        gaps = [p for p in ports
                if not a.get(p) or a[p][0] - t0 > 1.5 * INTERVAL or
                t1 - a[p][-1] > 1.5 * INTERVAL or
                any(y - x > 1.5 * INTERVAL for x, y in zip(a[p], a[p][1:]))]
        r.check(not doubles and not gaps, "6 s of two scrapers: every "
                "target asked once per interval (no one twice within half "
                "an interval, none waiting an interval and a half)",
                "doubles %s gaps %s" % (doubles[:5], gaps[:5]))

        gone = owned(scr[1]) or set()
        scr[1].kill9()
        tk = time.time()
        time.sleep(INTERVAL + 2.0)
        a = asks(stats(app_port), tk, time.time())
        late = [p for p in gone if not a.get(p)]
        r.check(gone and not late, "kill -9 of a scraper: its %d targets "
                "asked again within an interval plus the probe time"
                % len(gone), "not asked: %s" % late[:5])
        time.sleep(INTERVAL)
        a = asks(stats(app_port), tk, time.time())
        doubles = [p for p, ts in a.items()
                   if any(y - x < INTERVAL / 2 for x, y in zip(ts, ts[1:]))]
        r.check(not doubles and len(owned(scr[0]) or ()) == N,
                "the survivor owns all %d and asks none twice within half "
                "an interval" % N, "doubles %s" % doubles[:5])
        q = c.queriers[0]
        now = int(time.time())
        resp = q.request("GET", "/label-values", {
            "label": "instance", "from": str(now - 3600),
            "until": str(now + 60)})
        vals = set(json.loads(resp.text())) if resp.status == 200 else set()
        r.eq(len(vals), N, "the cluster holds the profiles of all %d "
             "targets" % N)
    finally:
        scr[0].check_stopped(r)


if __name__ == "__main__":
    run_script("test_scrape_shared", 180, body)
