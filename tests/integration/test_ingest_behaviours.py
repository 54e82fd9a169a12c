#!/usr/bin/env python3
"""
test_ingest_behaviours.py -- four behaviours fixed along the way,
through the real binary:

  (a) an unknown path (and an unknown method) answers 404 (405) after
      reading the request body: a client that writes a 512 KiB body
      before reading gets the answer, not a broken pipe, and the
      connection stays usable (common/http.c; unit test in http_test);
  (b) __session_id__ does not make series: two uploads of one app with
      different session ids (as pyroscope-go sends after a restart) are
      one series, with the values of both;
  (c) Go goroutine profiles (pprof type goroutine/count, stored as
      goroutines:goroutine:count) appear as <app>.goroutines in
      /label-values?label=__name__ and /api/apps, and
      /render?query=<app>.goroutines finds them (and the og folded form);
  (d) signed values: a pprof with negative sample values (delta heap
      profiles carry them) is stored so that per-stack sums equal
      `go tool pprof -raw`'s, before and after the head is cut into a
      block and across a restart.
"""

import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durability import DataServer, Workspace, flush  # noqa: E402
from oracle import (build_profile, collapse_raw, cpu_pprof,  # noqa: E402
                    have_go, parse_collapsed, parse_raw, run_pprof_raw)
from smolder import Results, Server, install_timeout  # noqa: E402


def raw_roundtrip(port, head, body):
    """Send head+body on one connection, read one response; then GET
    /ready on the same connection.  Returns (status1, status2, error)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(head + body)
        f = s.makefile("rb")
        line = f.readline()
        st1 = int(line.split()[1])
        clen = 0
        while True:
            h = f.readline()
            if h in (b"\r\n", b""):
                break
            k, _, v = h.decode().partition(":")
            if k.lower() == "content-length":
                clen = int(v)
        f.read(clen)
        s.sendall(b"GET /ready HTTP/1.1\r\nHost: t\r\n\r\n")
        line = f.readline()
        st2 = int(line.split()[1]) if line else 0
        return st1, st2, None
    except OSError as e:
        return None, None, "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()


def check_drain(r, s):
    body = b"x" * (512 << 10)
    for method, path, want in (("POST", "/no/such/path", 404),
                               ("POST", "/ready", 405)):
        head = ("%s %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/"
                "proto\r\nContent-Length: %d\r\n\r\n" % (
                    method, path, len(body))).encode()
        st1, st2, e = raw_roundtrip(s.port, head, body)
        r.check(e is None and st1 == want and st2 == 200,
                "%s %s with a 512 KiB body: %d, then the connection is "
                "reused" % (method, path, want),
                "status %s / %s, error %s" % (st1, st2, e))


def collapsed(s, q):
    now = int(time.time())
    resp = s.render(q, frm=now - 3600, until=now + 3600, fmt="collapsed")
    return parse_collapsed(resp.text()) if resp.status == 200 else None


def check_session_id(r, s):
    for sid in ("aaaa1111", "bbbb2222"):
        p = s.ingest({"name": "sess{__session_id__=%s,env=x}" % sid,
                      "format": "pprof", "spyName": "gospy"},
                     cpu_pprof([(["main", "run"], 10)]))
        r.check(p.status == 200, "upload with __session_id__=%s" % sid,
                p.describe())
    now = int(time.time())
    lv = s.request("GET", "/label-values", {
        "label": "__session_id__", "from": str(now - 3600),
        "until": str(now + 3600)})
    r.check(lv.status == 200 and lv.json() in ([], None),
            "__session_id__ is not a series label", lv.describe())
    r.eq(collapsed(s, 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                      '{service_name="sess"}'), {"main;run": 20},
         "both sessions land in one series")
    ser = s.request("POST", "/querier.v1.QuerierService/Series",
                    body=b'{"matchers":["{service_name=\\"sess\\"}"]}',
                    headers={"Content-Type": "application/json"})
    sets = ser.json().get("labelsSet", []) if ser.status == 200 else None
    r.check(sets is not None and len(sets) == 1,
            "Series lists one series for the two sessions", ser.describe())


def goroutine_pprof():
    strings = ["", "goroutine", "count", "main", "gopark", "runtime.main"]
    return build_profile(
        strings, [(1, 2)],
        [([2, 1], [3]), ([3], [1])],
        [(1, 0, 0, [(1, 1)]), (2, 0, 0, [(2, 1)]), (3, 0, 0, [(3, 1)])],
        [(1, 3, 3, 0), (2, 4, 4, 0), (3, 5, 5, 0)],
        period_type=(1, 2), period=1)


def check_goroutines(r, s):
    p = s.ingest({"name": "gor", "format": "pprof", "spyName": "gospy"},
                 goroutine_pprof())
    r.check(p.status == 200, "Go goroutine pprof accepted", p.describe())
    p = s.ingest({"name": "gold.goroutines"}, b"a;b 4\n")
    r.check(p.status == 200, "og folded <app>.goroutines accepted",
            p.describe())
    now = int(time.time())
    rng = {"from": str(now - 3600), "until": str(now + 3600)}
    lv = s.request("GET", "/label-values", dict(rng, label="__name__"))
    names = lv.json() if lv.status == 200 else []
    r.check("gor.goroutines" in names and "gold.goroutines" in names,
            "/label-values?label=__name__ lists gor.goroutines and "
            "gold.goroutines", lv.describe())
    apps = s.request("GET", "/api/apps", rng)
    an = [a.get("name") for a in apps.json()] if apps.status == 200 else []
    r.check("gor.goroutines" in an and "gold.goroutines" in an,
            "/api/apps lists both", apps.describe())
    r.eq(collapsed(s, "gor.goroutines"), {"main;gopark": 3,
                                          "runtime.main": 1},
         "/render?query=gor.goroutines finds the Go profile")
    r.eq(collapsed(s, "gold.goroutines"), {"a;b": 4},
         "/render?query=gold.goroutines still finds the og upload")
    r.eq(collapsed(s, "gor.goroutines{env=\"none\"}"), {},
         "tags still filter")


def delta_heap_pprof():
    """A Go-style heap profile whose delta samples are partly negative
    (frees outweighing allocations since the previous profile)."""
    strings = ["", "alloc_objects", "count", "alloc_space", "bytes",
               "space", "main", "alloc", "free", "grow", "shrink"]
    # functions 1..5 = main, alloc, free, grow, shrink (names 6..10)
    funcs = [(i, 5 + i, 5 + i, 0) for i in range(1, 6)]
    locs = [(i, 0, 0, [(i, 1)]) for i in range(1, 6)]
    samples = [
        ([2, 1], [3, 3072]),          # main;alloc  +3 / +3072
        ([3, 1], [-2, -2048]),        # main;free   -2 / -2048
        ([4, 2, 1], [5, 640]),        # main;alloc;grow
        ([5, 2, 1], [-7, -896]),      # main;alloc;shrink: negative
        ([3, 1], [-1, -1024]),        # main;free again: summed
        ([4, 1], [4, -512]),          # mixed signs per type
        ([5, 1], [0, 100]),           # zero in one type only
    ]
    return build_profile(strings, [(1, 2), (3, 4)], samples, locs, funcs,
                         period_type=(5, 4), period=524288)


def check_signed(r, ws):
    if not have_go():
        r.skip("signed values vs go tool pprof -raw", "go is not installed")
        return
    raw = delta_heap_pprof()
    path = os.path.join(tempfile.mkdtemp(prefix="smolder-neg-"), "heap.pb")
    with open(path, "wb") as f:
        f.write(raw)
    want = collapse_raw(parse_raw(run_pprof_raw(path)))
    r.check(any(v < 0 for v in want[0].values()),
            "the oracle (go tool pprof -raw) has negative stacks",
            str(want))
    types = ["memory:alloc_objects:count:space:bytes",
             "memory:alloc_space:bytes:space:bytes"]
    data = ws.data_dir("signed")
    s = DataServer(data, ws.log_dir("signed"), name="signed", extra_flags=[
        "-validation.reject-older-than=0",
        "-validation.reject-newer-than=0"]).start()
    p = s.ingest({"name": "delta", "format": "pprof", "spyName": "gospy"},
                 raw)
    r.check(p.status == 200, "delta heap pprof accepted", p.describe())

    def compare(srv, when):
        for ti, t in enumerate(types):
            got = collapsed(srv, '%s{service_name="delta"}' % t)
            r.eq(got, want[ti], "%s: per-stack sums equal go tool pprof "
                 "-raw's (%s)" % (t, when))
        now = int(time.time())
        fb = srv.request("GET", "/render", {
            "query": '%s{service_name="delta"}' % types[0],
            "from": str(now - 3600), "until": str(now + 3600)})
        ticks = fb.json().get("flamebearer", {}).get("numTicks") \
            if fb.status == 200 else None
        r.eq(ticks, sum(want[0].values()), "flamebearer numTicks is the "
             "signed total (%s)" % when)

    compare(s, "head")
    fl = flush(s)
    r.check(fl.status == 200, "flush the head into a block", fl.describe())
    compare(s, "block")
    probs = s.stop()
    r.check(not probs, "signed server exits 0", "\n".join(probs))
    s = DataServer(data, ws.log_dir("signed2"), name="signed2").start()
    compare(s, "block, after a restart")
    s.check_stopped(r)


def main():
    install_timeout(240)
    r = Results("ingest_behaviours")
    ws = Workspace("behaviours")
    with Server(["-validation.reject-older-than=0",
                 "-validation.reject-newer-than=0"],
                name="behaviours") as s:
        check_drain(r, s)
        check_session_id(r, s)
        check_goroutines(r, s)
        s.check_stopped(r)
    check_signed(r, ws)
    ws.cleanup(r)
    r.finish()


if __name__ == "__main__":
    main()
