#!/usr/bin/env python3
"""
test_profile_stats.py -- querier.v1 GetProfileStats and AnalyzeQuery,
single binary and cluster (3 ingesters, RF=3), JSON and proto codecs.

Known uploads (folded text, one per 10 s bucket, so the index's numbers
are exact): service "a" gets 5 profiles of 2 stacks each, service "b" 3
profiles of 3 stacks.  Then:

  - GetProfileStats before any upload: data_ingested false; after: true,
    oldest/newest are the buckets of the first and the last upload
    (10 s bucket width), in both codecs;
  - AnalyzeQuery for a, for b and for both: series, profiles and samples
    ((node, value) pairs) equal what was sent, first all in the heads,
    then, after /ingester/flush, all in blocks (bytes > 0 where data is);
    a time range covering part of the uploads counts only that part;
    bad requests are invalid_argument;
  - the cluster's de-duplicated numbers equal the single binary's; its
    block counts are three times as large (each replica's blocks are
    read), component_count is 3 and deduplication_needed is set; with one
    ingester stopped the numbers stay and component_count is 2.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import (CPU, PAST_HOUR, ingest_spread,  # noqa: E402
                     one_ingester_down, open_flags, single_then_cluster)
from durability import connect, connect_proto, flush  # noqa: E402
from pbwire import _read_uv, _uv, pb_decode, pb_int, pb_str  # noqa: E402

BASE = PAST_HOUR
COMMON = open_flags()

# (service, unix seconds, folded body, pairs)
UPLOADS = []
for _i in range(5):
    UPLOADS.append(("a", BASE + 100 + 20 * _i,
                    "main;work %d\nmain;idle 1\n" % (_i + 1), 2))
for _i in range(3):
    UPLOADS.append(("b", BASE + 1000 + 30 * _i,
                    "main;x;y 2\nmain;z 1\nother 4\n", 3))


# --- reading answers (the codec is pbwire.py) -------------------------------

def _one(d, f, default=0):
    return d.get(f, [default])[0]


# --- calls --------------------------------------------------------------------

def stats_json(srv):
    r = connect(srv, "GetProfileStats", {})
    if r.status != 200:
        return r, None
    j = r.json()
    return r, (bool(j.get("dataIngested", False)),
               int(j.get("oldestProfileTime", 0)),
               int(j.get("newestProfileTime", 0)))


def stats_proto(srv):
    r = connect_proto(srv, "GetProfileStats", b"")
    if r.status != 200:
        return r, None
    d = pb_decode(r.body, fixed_ints=True)
    return r, (bool(_one(d, 1)), _one(d, 2), _one(d, 3))


def analyze_json(srv, query, start_s, end_s):
    r = connect(srv, "AnalyzeQuery", {"start": str(start_s * 1000),
                                      "end": end_s * 1000, "query": query})
    if r.status != 200:
        return r, None
    j = r.json()
    scopes = {}
    for s in j.get("queryScopes") or []:
        scopes[s["componentType"]] = {
            k: int(s.get(k, 0)) for k in (
                "componentCount", "blockCount", "seriesCount",
                "profileCount", "sampleCount", "profileBytes")}
    imp = j.get("queryImpact") or {}
    return r, {"scopes": scopes,
               "bytes": int(imp.get("totalBytesInTimeRange", 0)),
               "series": int(imp.get("totalQueriedSeries", 0)),
               "dedup": bool(imp.get("deduplicationNeeded", False))}


def analyze_proto(srv, query, start_s, end_s):
    body = pb_int(2, start_s * 1000) + pb_int(3, end_s * 1000) + \
        pb_str(4, query)
    r = connect_proto(srv, "AnalyzeQuery", body)
    if r.status != 200:
        return r, None
    d = pb_decode(r.body, fixed_ints=True)
    names = {1: "componentType", 2: "componentCount", 3: "blockCount",
             4: "seriesCount", 5: "profileCount", 6: "sampleCount",
             8: "profileBytes"}
    scopes = {}
    for raw in d.get(1, []):
        s = pb_decode(raw, fixed_ints=True)
        e = {names[k]: _one(s, k) for k in names if k != 1}
        scopes[_one(s, 1, b"").decode()] = e
    imp = pb_decode(_one(d, 2, b""), fixed_ints=True)
    return r, {"scopes": scopes, "bytes": _one(imp, 2),
               "series": _one(imp, 3), "dedup": bool(_one(imp, 4))}


def expect(svcs, t0=None, t1=None):
    """(series, profiles, samples) sent for these services in [t0, t1)."""
    ups = [u for u in UPLOADS if u[0] in svcs and
           (t0 is None or t0 <= u[1] < t1)]
    return (len({u[0] for u in ups}), len(ups), sum(u[3] for u in ups))


def numbers(a, scope):
    s = a["scopes"].get(scope, {})
    return (s.get("seriesCount", 0), s.get("profileCount", 0),
            s.get("sampleCount", 0))


QUERIES = [
    ("a", CPU + '{service_name="a"}', ("a",)),
    ("b", 'b.cpu{}', ("b",)),
    ("both", CPU + '{service_name=~"a|b"}', ("a", "b")),
    ("none", CPU + '{service_name="zzz"}', ()),
]
START, END = BASE, BASE + 3600


def check_analyze(r, srv, tag, where, nodes):
    """Every query in both codecs; `where` is the scope that holds the
    data ("ingester heads" or "ingester blocks").  Returns the answers."""
    other = ("ingester blocks" if where == "ingester heads"
             else "ingester heads")
    got = {}
    for name, q, svcs in QUERIES:
        rj, aj = analyze_json(srv, q, START, END)
        rp, ap = analyze_proto(srv, q, START, END)
        if aj is None or ap is None:
            r.fail("%s: AnalyzeQuery %s answers" % (tag, name),
                   "%s / %s" % (rj.describe(), rp.describe()))
            continue
        r.eq(ap, aj, "%s: AnalyzeQuery %s: proto and JSON agree" % (tag, name))
        want = expect(svcs)
        r.eq(numbers(aj, where), want, "%s: %s %s: series, profiles, samples "
             "as sent" % (tag, name, where))
        r.eq(numbers(aj, other), (0, 0, 0), "%s: %s: nothing in %s" % (
            tag, name, other))
        r.eq(aj["series"], want[0], "%s: %s: total_queried_series" % (
            tag, name))
        sc = aj["scopes"].get(where, {})
        r.eq(sc.get("componentCount"), nodes, "%s: %s: component_count" % (
            tag, name))
        if want[1]:
            r.check(sc.get("blockCount", 0) >= nodes and
                    sc.get("profileBytes", 0) > 0 and
                    aj["bytes"] >= sc.get("profileBytes", 0),
                    "%s: %s: blocks and bytes reported" % (tag, name),
                    str(aj))
        else:
            r.eq((sc.get("blockCount"), aj["bytes"]), (0, 0),
                 "%s: %s: no blocks, no bytes" % (tag, name))
        r.eq(aj["dedup"], nodes > 1, "%s: %s: deduplication_needed" % (
            tag, name))
        got[name] = aj
    # Part of the range: the first three uploads of a only.
    t0, t1 = BASE + 100, BASE + 100 + 20 * 3
    _, aj = analyze_json(srv, CPU + '{service_name="a"}', t0, t1)
    r.eq(numbers(aj, where) if aj else None, expect(("a",), t0, t1),
         "%s: a part of the range counts only its profiles" % tag)
    got["part"] = aj
    return got


def check_bad(r, srv, tag):
    for what, body in (
            ("no range", {"query": CPU + "{}"}),
            ("start after end", {"start": "2000", "end": "1000",
                                 "query": CPU + "{}"}),
            ("empty query", {"start": "1000", "end": "2000", "query": ""}),
            ("bad selector", {"start": "1000", "end": "2000",
                              "query": CPU + '{service_name="a}'})):
        resp = connect(srv, "AnalyzeQuery", body)
        r.check(resp.status == 400 and
                resp.json().get("code") == "invalid_argument",
                "%s: AnalyzeQuery with %s is invalid_argument" % (tag, what),
                resp.describe())


def check_stats(r, srv, tag):
    want = (True, min(u[1] for u in UPLOADS) // 10 * 10000,
            max(u[1] for u in UPLOADS) // 10 * 10000)
    for codec, fn in (("json", stats_json), ("proto", stats_proto)):
        resp, got = fn(srv)
        r.eq(got, want, "%s: GetProfileStats (%s) names the first and last "
             "profile's buckets" % (tag, codec))


def ingest(r, srvs, tag):
    ingest_spread(r, srvs, [
        ({"name": "%s.cpu" % svc, "from": str(t), "until": str(t + 10)},
         body.encode()) for svc, t, body, _ in UPLOADS],
        "%s: %d uploads acknowledged" % (tag, len(UPLOADS)))


def strip_blocks(answers):
    """The de-duplicated part of the answers (what must equal across
    single binary and cluster)."""
    out = {}
    for k, a in answers.items():
        if a is None:
            out[k] = None
            continue
        out[k] = ({s: (v["seriesCount"], v["profileCount"], v["sampleCount"])
                   for s, v in a["scopes"].items()}, a["series"])
    return out


def single_phase(r, one):
    srv = one.srv
    for codec, fn in (("json", stats_json), ("proto", stats_proto)):
        _, got = fn(srv)
        r.eq(got, (False, 0, 0), "single: GetProfileStats (%s) before "
             "any upload: no data" % codec)
    check_bad(r, srv, "single")
    ingest(r, [srv], "single")
    check_stats(r, srv, "single")
    s_heads = check_analyze(r, srv, "single", "ingester heads", 1)
    r.check(flush(srv).status == 200, "single: heads cut into blocks")
    s_blocks = check_analyze(r, srv, "single", "ingester blocks", 1)
    check_stats(r, srv, "single, blocks")
    return s_heads, s_blocks


def cluster_phase(r, c, single_answers):
    s_heads, s_blocks = single_answers
    q = c.queriers[0]
    _, got = stats_json(q)
    r.eq(got, (False, 0, 0), "cluster: no data before any upload")
    ingest(r, c.distributors, "cluster")
    check_stats(r, q, "cluster")
    c_heads = check_analyze(r, q, "cluster", "ingester heads", 3)
    r.eq(strip_blocks(c_heads), strip_blocks(s_heads),
         "cluster heads: de-duplicated numbers equal the single "
         "binary's")
    for i in range(3):
        r.check(flush(c.ingesters[i]).status == 200,
                "cluster: ingester-%d cuts its heads" % i)
    c_blocks = check_analyze(r, q, "cluster", "ingester blocks", 3)
    r.eq(strip_blocks(c_blocks), strip_blocks(s_blocks),
         "cluster blocks: de-duplicated numbers equal the single "
         "binary's")
    sb = s_blocks["both"]["scopes"]["ingester blocks"]["blockCount"]
    cb = c_blocks["both"]["scopes"]["ingester blocks"]["blockCount"]
    r.eq(cb, 3 * sb, "cluster: every replica's blocks are counted "
         "as read")
    check_stats(r, q, "cluster, blocks")
    # One replica gone: the other two still answer the same.
    one_ingester_down(r, c)
    _, down = analyze_json(q, QUERIES[2][1], START, END)
    r.eq(strip_blocks({"both": down}),
         strip_blocks({"both": s_blocks["both"]}),
         "cluster, one ingester down: the same de-duplicated numbers")
    r.eq(down["scopes"]["ingester blocks"]["componentCount"]
         if down else None, 2,
         "cluster, one ingester down: component_count 2")
    check_stats(r, q, "cluster, one ingester down")


if __name__ == "__main__":
    single_then_cluster("test_profile_stats", 300, "profile-stats", COMMON,
                        single_phase, cluster_phase)
