#!/usr/bin/env python3
"""
test_hostile_queries.py -- queries cannot starve ingest.

Data: one app `hq` (process_cpu) whose series differ by a label v; each
upload is one pprof whose samples carry v as a sample label, so one upload
makes up to 5,000 series.  The v values are "a" * 30 + "!" + i, on which
the pattern (a+)+ backtracks exponentially.

Checks (single binary):
  - hostile regexes: over 2,000 series, {v=~"(a+)+"} through /render and
    Connect Series answers 400 at once, naming the regex match limit;
    !~ likewise; a sane regex over the same values still answers;
  - 4 clients repeat the hostile query (and a label query over every
    series) for HOSTILE_S seconds while a writer keeps uploading and a
    prober keeps calling /ready: every write succeeds, the writes' p99
    latency stays under WRITE_P99_S, every probe answers 200, and each
    hostile query answers within QUERY_MAX_S;
  - Connect Series is linear: the server's CPU time (utime + stime from
    /proc, not wall time, so other tests running beside this one do not
    count) for the best of 3 calls over 20,000 series is under
    SERIES_RATIO x the best over 5,000 (it was quadratic: 2.7 s -> 11 s
    from 10k to 20k); the counts are exact.  The process's CPU time counts
    its background threads too (RocksDB flushes and compactions, head
    spills after the last upload), so each timing first waits until the
    server is idle; and 4x the series separates linear (~4x) from
    quadratic (~16x) by a margin that one stray flush cannot close (a
    10k/20k ratio of 3.2 once failed at 3.29 on a loaded CI machine).

Timing bounds are generous (a loaded 2-core machine running the suite at
-j4, the ASan build included): the deterministic checks are the 400s
naming the regex match limit and the exact counts; the bounds only catch
a query that runs unbounded again (it took 29 s alone before the
limits).
"""

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (DataServer, Workspace, connect,  # noqa: E402
                        json_or_none, limit_flags)
from smolder import Results, ServerError, install_timeout  # noqa: E402

BUDGET_S = 280
HOSTILE_S = 10
QUERY_MAX_S = 15.0
WRITE_P99_S = 2.0        # loaded 2-core CI, ASan build included
SERIES_RATIO = 8.0       # 5k -> 20k series; linear: ~4; quadratic: ~16
PER_UPLOAD = 5000
TYPE = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def value(i):
    return "a" * 30 + "!" + str(i)


def pprof_with_series(first, n):
    """A CPU pprof with n samples, sample i labelled v=value(first + i)."""
    strings = ["", "cpu", "nanoseconds", "main", "work", "v"]
    samples = []
    for i in range(n):
        strings.append(value(first + i))
        samples.append(([1, 2], [10000000], [(5, len(strings) - 1)]))
    return oracle.build_profile(
        strings=strings, sample_types=[(1, 2)], samples=samples,
        locations=[(1, 0, 0, [(1, 0)]), (2, 0, 0, [(2, 0)])],
        functions=[(1, 4, 4, 0), (2, 3, 3, 0)], period_type=(1, 2),
        period=10000000)


def upload(srv, first, n, now):
    body = pprof_with_series(first, n)
    return srv.ingest({"name": "hq{}", "format": "pprof", "from": str(now),
                       "until": str(now)}, body)


def series_call(srv, matcher, now, timeout=120):
    msg = {"matchers": [matcher], "start": (now - 3600) * 1000,
           "end": (now + 3600) * 1000}
    t0 = time.monotonic()
    resp = connect(srv, "Series", msg, timeout=timeout)
    return resp, time.monotonic() - t0


def main():
    install_timeout(BUDGET_S)
    r = Results("test_hostile_queries")
    ws = Workspace("hostile")
    now = int(time.time())
    sel_all = '{service_name="hq", __profile_type__="%s"}' % TYPE
    hostile = '{service_name="hq", v=~"(a+)+"}'
    srv = None
    try:
        try:
            srv = DataServer(ws.data_dir("d"), ws.log_dir("hostile"),
                             extra_flags=limit_flags() + [
                                 "-validation.reject-older-than=0"],
                             name="smolder").start()
        except ServerError as e:
            r.fail("server starts", str(e))
            return r.finish()

        # -- 2,000 series, then the hostile regexes one at a time ---------
        resp = upload(srv, 0, 2000, now)
        r.eq(resp.status, 200, "upload of 2,000 series")
        q = {"query": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                      '{service_name="hq", v=~"(a+)+"}',
             "from": str(now - 3600), "until": str(now + 3600)}
        for form, query in (("=~", q), ("!~", dict(q, query=q["query"]
                                                     .replace("=~", "!~")))):
            t0 = time.monotonic()
            resp = srv.request("GET", "/pyroscope/render", query,
                               timeout=60)
            dt = time.monotonic() - t0
            r.eq(resp.status, 400, "render v%s\"(a+)+\" over 2,000 series "
                 "-> 400" % form)
            r.check("match limit of 100000 backtracking steps" in
                    resp.text() and "(a+)+" in resp.text(),
                    "render v%s\"(a+)+\": the error names the regex match "
                    "limit and the pattern" % form, resp.text()[:300])
            r.check(dt < QUERY_MAX_S, "render v%s\"(a+)+\" answers in %.1f s "
                    "(< %.0f s)" % (form, dt, QUERY_MAX_S))
        resp, dt = series_call(srv, hostile, now, timeout=60)
        r.eq(resp.status, 400, "Connect Series v=~\"(a+)+\" -> 400")
        r.check("match limit" in resp.text(), "Connect Series: the error "
                "names the match limit", resp.text()[:300])
        resp, dt = series_call(srv, '{service_name="hq", v=~"a+!1[0-9]*"}',
                               now)
        j = json_or_none(resp) or {}
        # 1, 10-19, 100-199, 1000-1999: 1 + 10 + 100 + 1000.
        r.eq(len(j.get("labelsSet") or []), 1111, "a sane regex over the "
             "same values: 1,111 series")

        # -- 4 hostile clients, a writer and a prober ---------------------
        stop = threading.Event()
        lock = threading.Lock()
        stats = {"q": [], "qbad": [], "w": [], "wbad": [], "p": 0,
                 "pbad": []}

        def hostile_client(k):
            while not stop.is_set():
                if k % 2 == 0:
                    t0 = time.monotonic()
                    resp = srv.request("GET", "/pyroscope/render", q,
                                       timeout=60)
                else:
                    resp, _ = series_call(srv, hostile, now, timeout=60)
                    t0 = time.monotonic() - _
                dt = time.monotonic() - t0
                with lock:
                    stats["q"].append(dt)
                    if resp.status not in (400, 429):
                        stats["qbad"].append(resp.describe()[:200])

        def writer():
            i = 0
            while not stop.is_set():
                body = ("main;work;w%d 1\n" % (i % 50)).encode()
                t0 = time.monotonic()
                resp = srv.ingest({"name": "hqw.cpu{k=w%d}" % (i % 20)},
                                  body, retry_429=0)
                dt = time.monotonic() - t0
                with lock:
                    stats["w"].append(dt)
                    if resp.status != 200:
                        stats["wbad"].append(resp.describe()[:200])
                i += 1

        def prober():
            while not stop.is_set():
                resp = srv.request("GET", "/ready", timeout=5)
                with lock:
                    stats["p"] += 1
                    if resp.status != 200:
                        stats["pbad"].append(resp.describe()[:200])
                time.sleep(0.1)

        threads = [threading.Thread(target=hostile_client, args=(k,),
                                    daemon=True) for k in range(4)]
        threads += [threading.Thread(target=writer, daemon=True),
                    threading.Thread(target=prober, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(HOSTILE_S)
        stop.set()
        for t in threads:
            t.join(90)
        w = sorted(stats["w"])
        p99 = w[min(len(w) - 1, int(len(w) * 0.99))] if w else None
        print("# hostile phase: %d queries (max %.2f s), %d writes "
              "(p50 %.3f s, p99 %.3f s), %d probes" % (
                  len(stats["q"]), max(stats["q"] or [0]), len(w),
                  w[len(w) // 2] if w else -1, p99 or -1, stats["p"]),
              flush=True)
        r.check(len(stats["q"]) >= 4, "hostile clients ran queries",
                str(len(stats["q"])))
        r.eq(stats["qbad"][:3], [], "hostile queries answer 400 (or 429)")
        r.check(max(stats["q"] or [0]) < QUERY_MAX_S, "each hostile query "
                "answers within %.0f s" % QUERY_MAX_S,
                "max %.2f s" % max(stats["q"] or [0]))
        r.check(len(w) >= 10, "writes continued during the hostile "
                "queries", "%d writes" % len(w))
        r.eq(stats["wbad"][:3], [], "every write during the hostile "
             "queries succeeds")
        r.check(p99 is not None and p99 < WRITE_P99_S, "write p99 under "
                "hostile queries < %.1f s" % WRITE_P99_S, "p99 %s" % p99)
        r.eq(stats["pbad"][:3], [], "every /ready probe answers 200")

        # -- Series is linear in the series it returns --------------------
        def cpu_s():
            with open("/proc/%d/stat" % srv.proc.pid) as f:
                v = f.read().rsplit(")", 1)[1].split()
            return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

        def quiesce():
            """Wait (up to 20 s) until the server burns < 20 ms of CPU
            in 0.5 s: background flushes must not count as the query's."""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                c0 = cpu_s()
                time.sleep(0.5)
                if cpu_s() - c0 < 0.02:
                    return

        def timed_series(want):
            best, got = None, None
            for _ in range(3):
                quiesce()
                c0 = cpu_s()
                resp, _ = series_call(srv, sel_all, now)
                dt = cpu_s() - c0
                j = json_or_none(resp) or {}
                got = len(j.get("labelsSet") or [])
                best = dt if best is None else min(best, dt)
            r.eq(got, want, "Connect Series returns all %d series" % want)
            return best

        def upload_to(last):
            for first in range(upload_to.have, last, PER_UPLOAD):
                n = min(PER_UPLOAD, last - first)
                r.eq(upload(srv, first, n, now).status, 200,
                     "upload of series %d..%d" % (first, first + n - 1))
            upload_to.have = last
        upload_to.have = 2000

        upload_to(5000)
        t5 = timed_series(5000)
        upload_to(20000)
        t20 = timed_series(20000)
        print("# Series: server CPU 5k series %.3f s, 20k series %.3f s "
              "(ratio %.2f)" % (t5, t20, t20 / max(t5, 1e-6)), flush=True)
        r.check(t20 < SERIES_RATIO * t5 + 0.05, "Series over 20k series "
                "takes < %.1f x the server CPU time over 5k" % SERIES_RATIO,
                "5k %.3f s, 20k %.3f s" % (t5, t20))
        srv.check_stopped(r)
        srv = None
    finally:
        if srv is not None:
            srv.stop()
        ws.cleanup(r)
    return r.finish()


if __name__ == "__main__":
    main()
