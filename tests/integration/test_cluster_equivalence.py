#!/usr/bin/env python3
"""
test_cluster_equivalence.py -- a cluster answers exactly as the single
binary does.

One single binary (-target=all) and one cluster -- 3 ingesters, RF=3, 2
distributors, 1 querier, each its own process on loopback -- receive the
same uploads: real pprof files from tests/data (Go, Java, C++ CPU and
heap, with sample labels that make several series per upload) and folded
text, for three services, spread over 30 minutes with several uploads in
one 10 s bucket.  The cluster's uploads alternate between its two
distributors.  Halfway, one ingester cuts its heads into blocks, so the
replicas hold the same data split differently between head and blocks.

Then every query is asked of both and the answers compared byte for
byte: /render flamebearer JSON (each profile type, with and without a
label filter, maxNodes default and small), collapsed output, the og label
endpoints and /api/apps, and the Connect QuerierService methods
(ProfileTypes, LabelNames, LabelValues, Series, SelectMergeStacktraces,
SelectSeries with group-by).

A second cluster pass checks the de-duplication itself: one ingester is
stopped before the second half of the uploads and restarted after, so
replicas disagree per bucket; answers must still equal the single
binary's.
"""

import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, connect, flush,  # noqa: E402
                        limit_flags, metric_value, metrics)
from smolder import data_dir, run_script  # noqa: E402

BASE = (int(time.time()) // 3600) * 3600 - 3600   # an hour-aligned past
START, END = BASE - 60, BASE + 3600
COMMON = ["-validation.reject-older-than=0", "-validation.reject-newer-than=0",
          "-validation.max-profile-stacktrace-samples=0"] + limit_flags()


def corpus():
    """[(query dict, body bytes)] -- deterministic."""
    d = data_dir()
    files = sorted(glob.glob(os.path.join(d, "parca__many__*.pb.gz")))[:6]
    files += [os.path.join(d, f) for f in (
        "parca__labels.pb.gz", "parca__alloc_objects.pb.gz",
        "parca__fib.pb.gz", "parca__fgprof.pb.gz", "pprof__sample.cpu",
        "parca__two-stacks.pb.gz", "parca__profile-with-labels.pb.gz")]
    services = ["api", "web", "db"]
    out = []
    for i, f in enumerate(files):
        with open(f, "rb") as fh:
            body = fh.read()
        svc = services[i % 3]
        t = BASE + 60 * i + (i % 2) * 3      # some share a bucket
        out.append(({"name": "%s.cpu{env=%s}" % (svc, "ab"[i % 2]),
                     "from": str(t), "until": str(t + 10),
                     "format": "pprof"}, body))
        # The same file again, later, for another service.
        t2 = BASE + 1800 + 60 * i
        out.append(({"name": "%s.cpu{env=c}" % services[(i + 1) % 3],
                     "from": str(t2), "until": str(t2 + 10),
                     "format": "pprof"}, body))
    for i in range(12):
        t = BASE + 7 + 5 * i                  # two per 10 s bucket
        body = ("main;work;step%d %d\nmain;idle %d\n" % (i % 4, i + 1,
                                                         2 * i + 1)).encode()
        out.append(({"name": "web.cpu{env=a}", "from": str(t),
                     "until": str(t + 5), "spyName": "gospy"}, body))
    return out


def queries(ref):
    """[(label, method, path, query or None, body or None)] built from
    what the single binary holds."""
    q = []
    rng = {"from": str(START), "until": str(END)}
    r = connect(ref, "ProfileTypes", {"start": str(START * 1000),
                                      "end": str(END * 1000)})
    types = [t["ID"] for t in (r.json().get("profileTypes") or [])]
    for t in types:
        for sel in ("{}", '{service_name="api"}', '{env=~"a|c"}'):
            for mn in (None, "16"):
                qq = dict(rng, query=t + sel)
                if mn:
                    qq["maxNodes"] = mn
                q.append(("render %s%s maxNodes=%s" % (t, sel, mn), "GET",
                          "/render", qq, None))
        q.append(("render %s collapsed" % t, "GET", "/render",
                  dict(rng, query=t + "{}", format="collapsed"), None))
        q.append(("SelectMergeStacktraces %s" % t, "POST",
                  "SelectMergeStacktraces",
                  None, {"profile_typeID": t, "label_selector": "{}",
                         "start": str(START * 1000), "end": str(END * 1000)}))
        q.append(("SelectSeries %s by service_name" % t, "POST",
                  "SelectSeries", None,
                  {"profile_typeID": t, "label_selector": "{}",
                   "start": str(START * 1000), "end": str(END * 1000),
                   "step": 60, "group_by": ["service_name"]}))
    for app in ("api.cpu", "web.cpu", "db.cpu"):
        q.append(("render %s{}" % app, "GET", "/render",
                  dict(rng, query=app + "{}"), None))
    q.append(("/labels", "GET", "/labels", dict(rng), None))
    q.append(("/label-values env", "GET", "/label-values",
              dict(rng, label="env"), None))
    q.append(("/label-values __name__", "GET", "/label-values",
              dict(rng, label="__name__"), None))
    q.append(("/api/apps", "GET", "/api/apps", None, None))
    q.append(("ProfileTypes", "POST", "ProfileTypes", None, {}))
    q.append(("LabelNames", "POST", "LabelNames", None,
              {"start": str(START * 1000), "end": str(END * 1000)}))
    q.append(("LabelValues service_name", "POST", "LabelValues", None,
              {"name": "service_name", "start": str(START * 1000),
               "end": str(END * 1000)}))
    q.append(("Series", "POST", "Series", None,
              {"matchers": ['{service_name=~"api|web"}'],
               "start": str(START * 1000), "end": str(END * 1000)}))
    return q


def ask(srv, qd):
    _, method, path, query, body = qd
    if method == "GET":
        return srv.request("GET", path, query)
    return connect(srv, path, body)


def compare(r, ref, qry, qs, tag):
    same = 0
    for qd in qs:
        a, b = ask(ref, qd), ask(qry, qd)
        if a.status == b.status == 200 and a.body == b.body:
            same += 1
            continue
        r.fail("%s: %s equals the single binary's" % (tag, qd[0]),
               "single  %s\ncluster %s" % (a.describe(), b.describe()))
    r.check(same == len(qs), "%s: %d of %d answers identical" % (
        tag, same, len(qs)))


def ingest_all(r, srvs, ups, tag):
    bad = []
    for i, (q, body) in enumerate(ups):
        s = srvs[i % len(srvs)]
        resp = s.ingest(q, body)
        if resp.status != 200:
            bad.append("%s -> %s" % (q, resp.describe()))
    r.check(not bad, "%s: %d uploads acknowledged" % (tag, len(ups)),
            "\n".join(bad[:5]))


def main(r):
    ws = Workspace("cluster-eq")
    r.at_end(lambda: ws.cleanup(r))
    ups = corpus()
    half = len(ups) // 2
    ref = DataServer(ws.data_dir("single"), ws.log_dir("single"),
                     name="single", extra_flags=COMMON).start()
    try:
        ingest_all(r, [ref], ups, "single binary")

        # 1. Everything replicated; one replica cut into blocks halfway.
        c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                    extra=COMMON, name="replicated")
        try:
            c.start()
            ingest_all(r, c.distributors, ups[:half], "cluster, first half")
            r.check(flush(c.ingesters[0]).status == 200,
                    "ingester-0 cuts its heads into blocks")
            ingest_all(r, c.distributors, ups[half:], "cluster, second half")
            qs = queries(ref)
            r.check(len(qs) > 30, "%d queries to compare" % len(qs))
            compare(r, ref, c.queriers[0], qs, "replicated")
            _, m = metrics(c.queriers[0])
            r.eq(metric_value(m, "smolder_querier_divergent_series_total"),
                 0.0, "consistent replicas need no per-bucket picks")
            r.check((metric_value(m, "smolder_querier_dedup_plans_total") or
                     0) >= len(qs) // 2, "queries were de-duplicated by plan")
            # Each series is on all three ingesters, counted once.
            j = c.ring()
            r.check(j is not None and all(m["head_series"] > 0
                                          for m in j["members"][1:]),
                    "/ring shows every ingester holding series",
                    str(j)[:600])
        finally:
            c.check_stopped(r)

        # 2. Replicas that disagree: ingester-2 misses the second half
        # (hinted handoff off, or the distributors would hand it over when
        # it rejoins: the per-bucket picks are what this part tests).
        c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                    extra=COMMON + ["-distributor.hints-max-bytes=0"],
                    name="diverging")
        try:
            c.start()
            ingest_all(r, c.distributors, ups[:half], "diverging, first half")
            c.stop_ingester(2)
            r.check(c.wait_ring(active=2), "the ring sees ingester-2 gone",
                    str(c.states()))
            ingest_all(r, c.distributors, ups[half:],
                       "diverging, second half (ingester-2 down)")
            compare(r, ref, c.queriers[0], queries(ref)[:12],
                    "one replica down")
            c.restart_ingester(2)
            r.check(c.wait_ring(active=3), "ingester-2 rejoins the ring",
                    str(c.states()))
            compare(r, ref, c.queriers[0], queries(ref),
                    "replicas disagree per bucket")
            _, m = metrics(c.queriers[0])
            div = metric_value(m, "smolder_querier_divergent_series_total")
            r.check(div is not None and div > 0, "the querier saw diverging "
                    "replicas and picked them bucket by bucket (%s series)"
                    % div)
        finally:
            c.check_stopped(r)
    finally:
        ref.check_stopped(r)


if __name__ == "__main__":
    run_script("test_cluster_equivalence", 420, main)
