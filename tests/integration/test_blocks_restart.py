#!/usr/bin/env python3
"""
test_blocks_restart.py -- answers are byte-identical across a block cut and
a restart.

The server runs with -ingester.block-duration=2s and
-validation.reject-older-than=0, so data can be placed in two fixed windows
far in the past (W1 and W2, two hours apart) and every query uses fixed
absolute from/until:

  1. ingest folded series (br.alloc_objects{env=prod|dev} in W1, three
     buckets; br.cpu with sampleRate=100 and spyName=gospy in W1) and pprof
     uploads (Go CPU parca__fib and a Go heap profile as brgo, W2);
  2. poll /metrics until smolder_ingester_block_cuts_total >= 1 (the 2 s
     timer), then POST /ingester/flush (200); smolder_ingester_blocks >= 1;
  3. ingest more (W1 and W2 again, a new env=qa series), which sits in the
     head;
  4. capture many queries: /render JSON (maxNodes none/2/3), collapsed,
     W1-only and W2-only ranges, SelectMergeStacktraces, SelectSeries
     (groupBy, steps), /labels, /label-values (env, __name__),
     /pyroscope/label-values, /api/apps, ProfileTypes, LabelNames,
     LabelValues, Series; a few are also checked for content (collapsed
     stacks, numTicks of the pprof totals, SelectMergeStacktraces' flamegraph
     equal to /render's flamebearer node for node, int64s as JSON strings)
     so identical-but-empty answers cannot pass;
  5. smolder-admin refuses the data dir while the server runs (lock);
     SIGTERM (exit 0); smolder-admin blocks lists the blocks (format,
     tenant, ranges inside the ingested data and covering every profile
     flushed before the stop) and smolder-admin verify exits 0;
  6. restart on the same data dir: every captured query gives the same
     status and byte-identical body; after the replayed head is cut again
     (block_cuts_total >= 1 in the new process) the answers are still
     identical;
  7. three threads write while queries run for 6 s, across several 2 s
     cuts: every answer counts each acknowledged write exactly once
     (between the writes acknowledged before the query and those
     acknowledged or in flight after it; never decreasing);
     SIGTERM; smolder-admin verify exits 0 again.
"""

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (Workspace, admin, admin_verify,  # noqa: E402
                        flush, have_admin, limit_flags, metric_value,
                        metrics, missing_flags, parse_blocks, run_query,
                        start_or_fail, wait_metric)
from smolder import run_script, data_dir  # noqa

BUDGET_S = 170

T0 = 1700000000                   # W1 starts here (unix s), 2023-11-14
W1 = (T0, T0 + 60)
W2 = (T0 + 7200, T0 + 7260)
FROM, UNTIL = T0 - 600, T0 + 7200 + 3600
BUCKET_S = 10

FOLDED = [
    # (name, extra query, t offset in W1, body)
    ("br.alloc_objects{env=prod}", {}, 0, b"a;b;c 5\na;b;d 3\na;e 2\na 1\n"),
    ("br.alloc_objects{env=prod}", {}, 15, b"f;g 4\nf 1\nh 2\n"),
    ("br.alloc_objects{env=dev}", {}, 30, b"a;b;c 7\nx;y 9\n"),
    ("br.cpu{env=prod}", {"sampleRate": "100", "spyName": "gospy"}, 5,
     b"main;work 30\nmain;idle 10\n"),
]
FOLDED_MORE = [
    ("br.alloc_objects{env=prod}", {}, W1[0] + 45, b"a;b;c 100\nz 1\n"),
    ("br.alloc_objects{env=qa}", {}, W2[0] + 40, b"q;r 11\n"),
]
FIB = "parca__fib.pb.gz"
HEAP = "parca__many__1644509272337470000.pb.gz"

BR_STACKS_FLUSHED = {"a;b;c": 12, "a;b;d": 3, "a;e": 2, "a": 1, "f;g": 4,
                     "f": 1, "h": 2, "x;y": 9}
BR_STACKS_ALL = dict(BR_STACKS_FLUSHED)
BR_STACKS_ALL["a;b;c"] += 100
BR_STACKS_ALL["z"] = 1
BR_STACKS_ALL["q;r"] = 11


def ms(t):
    return t * 1000


def queries():
    """[(label, kind, args)]: kind 'get' (path, query) or 'connect'
    (method, body)."""
    q = []
    rng = {"from": str(FROM), "until": str(UNTIL)}
    t_alloc = 'memory:alloc_objects:count::{service_name="br"}'
    for mn in (None, "2", "3"):
        d = dict(rng, query=t_alloc)
        if mn:
            d["maxNodes"] = mn
        q.append(("render br alloc maxNodes=%s" % mn, "get", ("/render", d)))
    q.append(("render br.alloc_objects{} legacy", "get",
              ("/render", dict(rng, query="br.alloc_objects{}"))))
    q.append(("render br collapsed", "get",
              ("/render", dict(rng, query=t_alloc, format="collapsed"))))
    q.append(("render br env=prod W1 only", "get",
              ("/render", {"query": 'br.alloc_objects{env="prod"}',
                           "from": str(W1[0] - 60),
                           "until": str(W1[1] + 60)})))
    q.append(("render br W2 only", "get",
              ("/render", {"query": t_alloc, "from": str(W2[0] - 60),
                           "until": str(W2[1] + 60)})))
    q.append(("render br.cpu", "get",
              ("/render", dict(rng, query="br.cpu{}"))))
    cpu = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="brgo"}'
    q.append(("render brgo cpu", "get", ("/render", dict(rng, query=cpu))))
    q.append(("render brgo cpu collapsed", "get",
              ("/render", dict(rng, query=cpu, format="collapsed"))))
    q.append(("render brgo alloc_space maxNodes=5", "get",
              ("/render", dict(rng, maxNodes="5", query='memory:alloc_space:'
                               'bytes:space:bytes{service_name="brgo"}'))))
    q.append(("/pyroscope/render brgo inuse_objects", "get",
              ("/pyroscope/render", dict(rng, query='memory:inuse_objects:'
                                         'count:space:bytes{service_name='
                                         '"brgo"}'))))
    c_rng = {"start": ms(FROM), "end": ms(UNTIL)}
    q.append(("SelectMergeStacktraces br maxNodes=3", "connect",
              ("SelectMergeStacktraces",
               dict(c_rng, profileTypeID="memory:alloc_objects:count::",
                    labelSelector='{service_name="br"}', maxNodes=3))))
    q.append(("SelectMergeStacktraces brgo cpu", "connect",
              ("SelectMergeStacktraces",
               dict(c_rng, profileTypeID="process_cpu:cpu:nanoseconds:cpu:"
                    "nanoseconds", labelSelector='{service_name="brgo"}'))))
    q.append(("SelectSeries br by env step=15", "connect",
              ("SelectSeries",
               dict(c_rng, profileTypeID="memory:alloc_objects:count::",
                    labelSelector='{service_name="br"}', step=15,
                    groupBy=["env"]))))
    q.append(("SelectSeries brgo heap step=60", "connect",
              ("SelectSeries",
               dict(c_rng, profileTypeID="memory:alloc_space:bytes:space:"
                    "bytes", labelSelector='{service_name="brgo"}',
                    step=60))))
    q.append(("/labels", "get", ("/labels", {})))
    q.append(("/labels query+range", "get",
              ("/labels", dict(rng, query="br.alloc_objects{}"))))
    q.append(("/label-values env", "get", ("/label-values", {"label": "env"})))
    q.append(("/label-values __name__", "get",
              ("/label-values", {"label": "__name__"})))
    q.append(("/label-values env W1", "get",
              ("/label-values", {"label": "env", "from": str(W1[0] - 60),
                                 "until": str(W1[1] + 60)})))
    q.append(("/pyroscope/label-values __name__", "get",
              ("/pyroscope/label-values", {"label": "__name__"})))
    q.append(("/api/apps", "get", ("/api/apps", {})))
    q.append(("ProfileTypes", "connect", ("ProfileTypes", dict(c_rng))))
    q.append(("LabelNames", "connect",
              ("LabelNames", dict(c_rng, matchers=['{service_name="br"}']))))
    q.append(("LabelValues env", "connect",
              ("LabelValues", dict(c_rng, name="env"))))
    q.append(("Series br", "connect",
              ("Series", dict(c_rng, matchers=['{service_name="br"}'],
                              labelNames=["env", "service_name",
                                          "__profile_type__"]))))
    return q


def capture(srv):
    out = {}
    for label, kind, args in queries():
        resp = run_query(srv, kind, args)
        out[label] = (resp.status, resp.body)
    return out


def compare(r, base, now, what):
    for label, (st, body) in base.items():
        st2, body2 = now.get(label, (None, None))
        detail = ""
        if (st2, body2) != (st, body):
            detail = "before: HTTP %s %s\nnow:    HTTP %s %s" % (
                st, body[:600].decode("utf-8", "replace"), st2,
                (body2 or b"")[:600].decode("utf-8", "replace"))
        r.check(st == 200 and (st2, body2) == (st, body),
                "%s: %s HTTP 200 and byte-identical" % (what, label), detail)


def ingest_all(r, srv, items, what):
    for name, extra, t, body in items:
        q = dict(extra, name=name, **{"from": str(t), "until": str(t)})
        resp = srv.ingest(q, body)
        r.check(resp.status == 200, "%s: ingest %s at %d" % (what, name, t),
                resp.describe())


def jl(body):
    try:
        j = json.loads(body)
        return j if isinstance(j, dict) else {}
    except (ValueError, UnicodeDecodeError):
        return {}


def content_checks(r, cap, fib_total, heap_space, what):
    st, body = cap["render br collapsed"]
    got = oracle.parse_collapsed(body.decode("utf-8", "replace")) \
        if st == 200 else None
    r.eq(got, BR_STACKS_ALL, "%s: br collapsed = every write (head + "
         "blocks)" % what)
    st, body = cap["render brgo cpu"]
    if r.check(st == 200, "%s: render brgo cpu -> 200" % what, st):
        fb = jl(body).get("flamebearer") or {}
        r.eq(fb.get("numTicks"), fib_total, "%s: brgo cpu numTicks = "
             "parca__fib cpu total" % what)
    st, body = cap["SelectSeries brgo heap step=60"]
    if r.check(st == 200, "%s: SelectSeries brgo heap -> 200" % what, st):
        ser = jl(body).get("series") or []
        tot = sum(float(p.get("value", 0)) for s in ser
                  for p in s.get("points") or [])
        r.eq(tot, float(heap_space), "%s: SelectSeries brgo alloc_space "
             "total = the heap file's" % what)
    st, body = cap["render br env=prod W1 only"]
    if st == 200:
        fb = jl(body).get("flamebearer") or {}
        r.eq(fb.get("numTicks"), 5 + 3 + 2 + 1 + 4 + 1 + 2 + 101,
             "%s: br env=prod in W1 numTicks" % what)
    # SelectMergeStacktraces and /render build the same flamegraph
    for rl, cl in (("render br alloc maxNodes=3",
                    "SelectMergeStacktraces br maxNodes=3"),
                   ("render brgo cpu", "SelectMergeStacktraces brgo cpu")):
        fb = jl(cap[rl][1]).get("flamebearer") or {}
        fg = jl(cap[cl][1]).get("flamegraph") or {}
        try:
            conv = {"names": fg.get("names"),
                    "levels": [[int(v) for v in lv.get("values") or []]
                               for lv in fg.get("levels") or []],
                    "numTicks": int(fg.get("total", 0)),
                    "maxSelf": int(fg.get("maxSelf", 0))}
        except (TypeError, ValueError) as e:
            conv = "not convertible: %s" % e
        want = {k: fb.get(k) for k in ("names", "levels", "numTicks",
                                        "maxSelf")}
        r.check(conv == want and fb.get("numTicks"), "%s: %s flamegraph = "
                "%s flamebearer" % (what, cl, rl),
                "render:  %r\nconnect: %r" % (want, conv))
        raw = [v for lv in fg.get("levels") or []
               for v in lv.get("values") or []]
        r.check(raw and all(isinstance(v, str) for v in raw) and
                isinstance(fg.get("total"), str),
                "%s: %s int64 values are JSON strings" % (what, cl),
                repr(fg)[:300])
    for label in cap:
        if cap[label][0] != 200:
            r.fail("%s: %s -> 200" % (what, label), "HTTP %s %s" % (
                cap[label][0], cap[label][1][:300]))


def cut_consistency(r, srv, seconds=6.0):
    """Three threads write cc.alloc_objects (1 per write, now) while the
    main thread renders its total in a loop; with a 2 s block duration the
    head is cut several times meanwhile.  Every answer must lie between
    the writes acknowledged before the query was sent and those
    acknowledged or in flight when it returned, and never decrease: a cut
    must neither hide nor double-count data."""
    lock = threading.Lock()
    st = {"acked": 0, "inflight": 0, "errors": []}
    stop = threading.Event()
    t0 = int(time.time())

    def writer():
        while not stop.is_set():
            with lock:
                st["inflight"] += 1
            now = str(int(time.time()))
            resp = srv.ingest({"name": "cc.alloc_objects", "from": now,
                               "until": now}, b"cut;consistency 1\n")
            with lock:
                st["inflight"] -= 1
                if resp.status == 200:
                    st["acked"] += 1
                elif len(st["errors"]) < 5:
                    st["errors"].append(resp.describe())

    _, m = metrics(srv)
    cuts0 = metric_value(m, "smolder_ingester_block_cuts_total") or 0
    threads = [threading.Thread(target=writer, daemon=True)
               for _ in range(3)]
    for t in threads:
        t.start()
    bad, n, last = [], 0, 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            with lock:
                lo = st["acked"]
            resp = srv.render("cc.alloc_objects{}", frm=t0 - 60,
                              until=t0 + 600, fmt="collapsed")
            with lock:
                hi = st["acked"] + st["inflight"]
            n += 1
            if resp.status != 200:
                bad.append(resp.describe())
                continue
            v = sum(oracle.parse_collapsed(resp.text()).values())
            if not lo <= v <= hi or v < last:
                bad.append("query %d: total %d, acknowledged before %d, "
                           "acknowledged or in flight after %d, previous "
                           "answer %d" % (n, v, lo, hi, last))
            last = max(last, v)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    _, m = metrics(srv)
    cuts = (metric_value(m, "smolder_ingester_block_cuts_total") or 0) - cuts0
    print("# cut consistency: %d queries, %d writes, %d cuts meanwhile" % (
        n, st["acked"], cuts), flush=True)
    r.check(not st["errors"], "writes during cuts -> 200",
            "\n".join(st["errors"]))
    r.check(cuts >= 1, "block cuts happened during the consistency run",
            "cuts %r" % cuts)
    r.check(not bad, "every query during cuts sees each acknowledged write "
            "exactly once (%d queries)" % n, "\n".join(bad[:10]))


def main(r):
    ws = Workspace("blocks")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    flags = limit_flags() + ["-ingester.block-duration=2s",
                             "-validation.reject-older-than=0"]
    miss = missing_flags(["ingester.block-duration"])
    if miss:
        print("# NOTE the binary does not list %s yet" % miss, flush=True)
    fib = oracle.load_pb(os.path.join(data_dir(), FIB))
    fib_ids = oracle.profile_type_ids(fib.sample_types, fib.period_type)
    fib_total = sum(oracle.collapse_pb(fib)[fib_ids.index(
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds")].values())
    heap = oracle.load_pb(os.path.join(data_dir(), HEAP))
    heap_ids = oracle.profile_type_ids(heap.sample_types, heap.period_type)
    heap_space = sum(oracle.collapse_pb(heap)[heap_ids.index(
        "memory:alloc_space:bytes:space:bytes")].values())
    srv = start_or_fail(r, data, ws.log_dir("first"), flags, "smolder(first)")
    if srv is None:
        return
    flushed_ts = []
    ingest_all(r, srv, [(n, e, W1[0] + t, b) for n, e, t, b in FOLDED],
               "W1")
    flushed_ts += [W1[0] + t for _, _, t, _ in FOLDED]
    for fname, t in ((FIB, W2[0] + 5), (HEAP, W2[0] + 20)):
        with open(os.path.join(data_dir(), fname), "rb") as f:
            body = f.read()
        resp = srv.ingest({"name": "brgo", "format": "pprof",
                           "spyName": "gospy", "from": str(t),
                           "until": str(t)}, body)
        r.check(resp.status == 200, "W2: ingest %s" % fname,
                resp.describe())
        flushed_ts.append(t)
    v = wait_metric(srv, "smolder_ingester_block_cuts_total",
                    lambda x: x >= 1, timeout=20)
    r.check(v is not None and v >= 1, "smolder_ingester_block_cuts_total "
            ">= 1 within 20 s with -ingester.block-duration=2s",
            "last value %r" % v)
    resp = flush(srv)
    r.check(resp.status == 200, "POST /ingester/flush -> 200",
            resp.describe())
    _, m = metrics(srv)
    nb = metric_value(m, "smolder_ingester_blocks")
    r.check(nb is not None and nb >= 1, "smolder_ingester_blocks >= 1",
            repr(nb))
    ingest_all(r, srv, FOLDED_MORE, "more")
    cap1 = capture(srv)
    content_checks(r, cap1, fib_total, heap_space, "before restart")
    # the same answers a second time in the same process
    compare(r, cap1, capture(srv), "same process, again")
    if have_admin():
        a = admin("blocks", "-data.dir=%s" % data, timeout=30)
        print("# smolder-admin blocks while the server runs: exit %s "
              "(%s)" % (a.rc, (a.err or a.out).strip()[:200]),
              flush=True)
        r.check(a.rc not in (0, None), "smolder-admin refuses a data "
                "dir a running server holds (RocksDB lock)",
                a.describe())
        r.check(srv.alive() and srv.ready(), "server unaffected by "
                "smolder-admin run against its data dir")
    srv.check_stopped(r, "first server exits 0 on SIGTERM")

    if not have_admin():
        r.fail("smolder-admin exists", "set SMOLDER_ADMIN")
    else:
        a = admin("blocks", "-data.dir=%s" % data)
        if r.check(a.rc == 0, "smolder-admin blocks exits 0",
                   a.describe()):
            blocks, bad = parse_blocks(a.out)
            r.check(not bad, "every blocks line has the documented "
                    "format", "\n".join(bad[:10]))
            r.check(len(blocks) >= 1, "at least one block listed",
                    a.out)
            r.check(all(b["tenant"] == "anonymous" for b in blocks),
                    "blocks belong to tenant anonymous", a.out)
            r.check(all(b["min"] <= b["max"] and b["series"] > 0 and
                        b["nodes"] > 0 and b["bytes"] > 0
                        for b in blocks),
                    "min <= max and series, nodes, bytes > 0", a.out)
            lo = ms(W1[0] // BUCKET_S * BUCKET_S)
            hi = ms(W2[1] + BUCKET_S)
            r.check(all(lo <= b["min"] and b["max"] <= hi
                        for b in blocks),
                    "block ranges lie within the ingested data "
                    "[%d, %d] ms" % (lo, hi), a.out)
            unc = [t for t in flushed_ts
                   if not any(b["min"] <= ms(t // BUCKET_S * BUCKET_S)
                              and ms(t) <= b["max"] + ms(BUCKET_S)
                              for b in blocks)]
            r.check(not unc, "every profile flushed before the stop "
                    "lies in a listed block's range",
                    "not covered: %s\n%s" % (unc, a.out))
            ids = [b["block"] for b in blocks]
            r.eq(len(set(ids)), len(ids), "block ids are unique")
        admin_verify(r, data, 0,
                     "smolder-admin verify exits 0 on intact data")

    srv = start_or_fail(r, data, ws.log_dir("restart"), flags, "smolder(restart)",
                        "server restarts on the same data dir")
    if srv is None:
        return
    cap2 = capture(srv)
    compare(r, cap1, cap2, "after restart")
    content_checks(r, cap2, fib_total, heap_space, "after restart")
    v = wait_metric(srv, "smolder_ingester_block_cuts_total",
                    lambda x: x >= 1, timeout=20)
    if v is not None and v >= 1:
        compare(r, cap1, capture(srv), "after restart and a new cut")
    else:
        print("# NOTE no block cut in the restarted process within 20 s "
              "(last %r); flushing instead" % v, flush=True)
        resp = flush(srv)
        r.check(resp.status == 200, "flush after restart -> 200",
                resp.describe())
        compare(r, cap1, capture(srv), "after restart and a flush")
    cut_consistency(r, srv)
    srv.check_stopped(r, "restarted server exits 0 on SIGTERM")
    if have_admin():
        admin_verify(r, data, 0, "smolder-admin verify exits 0 after "
                     "the second run")


if __name__ == "__main__":
    run_script("test_blocks_restart", BUDGET_S, main)
