#!/usr/bin/env python3
"""
test_query_series.py -- querier.v1 SelectSeries' limit, aggregation and
group-by on a label some series lack, single binary and a
cluster (3 ingesters, RF=3) given the same uploads.

Folded uploads of service "qs" (cpu, 100 Hz: a count c is c * 10^7 ns),
each its own profile, at BASE + s seconds:
    {region=eu}: 100 @0, 300 @3, 50 @12
    {region=us}: 1000 @1, 10 @14
    {env=dev} (no region): 700 @2, 900 @5, 1100 @8
Over [BASE, BASE+20 s) with step 10 s, grouped by region:
  - SUM: the per-step sums; the region-less group has no labels at all
    (not region=""); series come in label order;
  - AVERAGE (by enum name, by number, in proto): each point is the mean
    over the profiles of its step (eu: 200 then 50, region-less: 900);
  - limit 2 keeps the two largest totals, largest first, and the ranking
    follows the aggregation (SUM: region-less, us; AVERAGE: us,
    region-less); limit 0 and a limit above the count keep all;
  - a negative limit and an unknown aggregation are invalid_argument;
  - a stack_trace_selector's call_site makes each point the sum of the
    stacks through it (main;work;f3: only the upload @3 counts, the
    other uploads' steps are points of 0 that still count for AVERAGE;
    main;work: every stack; a frame no stack has: all 0), single binary
    and cluster alike; an empty selector changes nothing;
  - every request shape Grafana / Drilldown send gives the same answer:
    snake_case and camelCase keys, ints as JSON numbers and strings, the
    enum as name or number, Accept variants; and the proto codec gives
    the same series as JSON;
  - the cluster's answers are byte-identical to the single binary's in
    both codecs.
The other querier.v1 methods of this part, on the same data, in the
request shapes their callers send:
  - SelectMergeProfile and SelectMergeStacktraces as Profiles Drilldown's
    JSON client sends them (profile_typeID / label_selector snake_case
    beside camelCase stackTraceSelector {call_site} and maxNodes, a field
    Smolder does not know (frameFilter), an empty profileIdSelector, the
    X-Grafana-Org-Id header): only the call site's stacks (f0: 100);
  - SelectMergeProfile in proto with an unknown field (99) reads like the
    same request without it; one whose profile_id_selector (field 7) is
    not a UUID is 400;
  - Diff in camelCase with ints as numbers and Drilldown's extra
    top-level maxNodes / format: equal sides, each the whole total;
  - SelectMergeStacktraces format TREE by enum name with ints as strings,
    Accept and Connect-Protocol-Version headers: the tree's total is the
    flamegraph's;
  - each of these answers is the same from the cluster.
"""

import base64
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import reference_and_rf3  # noqa: E402
from durability import Workspace, connect, limit_flags  # noqa: E402
from pbwire import _read_uv, pb_double, pb_fields, pb_int, pb_str  # noqa: E402
from smolder import Results, install_timeout  # noqa: E402

BASE = (int(time.time()) // 3600) * 3600 - 2 * 3600
TID = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
SEL = '{service_name="qs"}'
NS = 10 ** 7          # 100 Hz
COMMON = ["-validation.reject-older-than=0", "-validation.reject-newer-than=0",
          "-ingester.bucket-duration=1s"] + limit_flags()
UPLOADS = [({"region": "eu"}, 100, 0), ({"region": "eu"}, 300, 3),
           ({"region": "eu"}, 50, 12),
           ({"region": "us"}, 1000, 1), ({"region": "us"}, 10, 14),
           ({"env": "dev"}, 700, 2), ({"env": "dev"}, 900, 5),
           ({"env": "dev"}, 1100, 8)]
START = BASE * 1000
END = (BASE + 20) * 1000
STEP = 10


def stack_of(s):
    return ["main", "work", "f%d" % s]


def expected(agg, call_site=None):
    """{labels tuple: [(ts_ms, value)]} for group_by [region]; with a
    call site, an upload whose stack does not start with it adds 0."""
    acc = {}
    for lab, v, s in UPLOADS:
        key = (("region", lab["region"]),) if "region" in lab else ()
        t = (BASE + s) // STEP * STEP * 1000
        if call_site is not None and \
                stack_of(s)[:len(call_site)] != call_site:
            v = 0
        acc.setdefault(key, {}).setdefault(t, []).append(v * NS)
    out = {}
    for key, pts in acc.items():
        out[key] = [(t, float(sum(vs)) if agg == "sum" else
                     sum(vs) / len(vs)) for t, vs in sorted(pts.items())]
    return out


def decode_json_series(j):
    out = []
    for s in j.get("series", []):
        key = tuple((lp["name"], lp["value"]) for lp in s.get("labels", []))
        pts = [(int(p.get("timestamp", 0)), float(p.get("value", 0)))
               for p in s.get("points", [])]
        out.append((key, pts))
    return out


# -- hand-made protobuf (no protoc on the test machines) --------------------

def series_req_pb(agg=0, limit=0, group_by=("region",)):
    b = pb_str(1, TID) + pb_str(2, SEL) + pb_int(3, START) + pb_int(4, END)
    for g in group_by:
        b += pb_str(5, g)
    b += pb_double(6, float(STEP))
    if agg:
        b += pb_int(7, agg)
    if limit:
        b += pb_int(9, limit)
    return b


def decode_pb_series(body):
    out = []
    for f, _, sb in pb_fields(body):
        if f != 1:
            continue
        labels, pts = [], []
        for g, _, v in pb_fields(sb):
            if g == 1:
                lp = {h: x.decode() for h, _, x in pb_fields(v)}
                labels.append((lp.get(1, ""), lp.get(2, "")))
            elif g == 2:
                ts, val = 0, 0.0
                for h, wt, x in pb_fields(v):
                    if h == 1 and wt == 1:
                        val = struct.unpack("<d", x)[0]
                    elif h == 2 and wt == 0:
                        ts = x if x < 2 ** 63 else x - 2 ** 64
                pts.append((ts, val))
        out.append((tuple(labels), pts))
    return out


def proto_call(srv, body):
    return srv.request("POST", "/querier.v1.QuerierService/SelectSeries",
                       body=body,
                       headers={"Content-Type": "application/proto"})


def main():
    r = Results("test_query_series")
    install_timeout(400)
    ws = Workspace("qseries")
    reference_and_rf3(r, ws, COMMON, lambda ref, c: run(r, ref, c))
    return r.finish()


def run(r, ref, c):
    for lab, v, s in UPLOADS:
        name = "qs.cpu{%s}" % ",".join("%s=%s" % kv for kv in lab.items())
        q = {"name": name, "from": str(BASE + s), "until": str(BASE + s),
             "sampleRate": "100"}
        body = ("%s %d\n" % (";".join(stack_of(s)), v)).encode()
        for srv in (ref, c.distributors[0]):
            resp = srv.ingest(q, body)
            if not r.check(resp.status == 200, "ingest %s @%d" % (name, s),
                           resp.describe()):
                return
    qry = c.queriers[0]

    def call(srv, msg, headers=None):
        return connect(srv, "SelectSeries", msg, headers=headers)

    base = {"profileTypeID": TID, "labelSelector": SEL, "start": START,
            "end": END, "step": STEP, "groupBy": ["region"]}
    for agg, aggv in (("sum", None), ("sum", "TIME_SERIES_AGGREGATION_TYPE_"
                                               "SUM"),
                      ("avg", "TIME_SERIES_AGGREGATION_TYPE_AVERAGE"),
                      ("avg", 1)):
        msg = dict(base)
        if aggv is not None:
            msg["aggregation"] = aggv
        want = expected(agg)
        a = call(ref, msg)
        b = call(qry, msg)
        got = decode_json_series(a.json()) if a.status == 200 else []
        r.check(a.status == 200 and dict(got) == want and
                [k for k, _ in got] == sorted(want),
                "SelectSeries %s (aggregation %r): points per step, the "
                "region-less group without labels, label order" % (agg, aggv),
                "%s\nwant %s\ngot %s" % (a.describe(), sorted(want.items()),
                                         got))
        r.check(b.status == 200 and b.body == a.body,
                "SelectSeries %s (aggregation %r): cluster answer "
                "byte-identical to the single binary's" % (agg, aggv),
                b.describe())

    # limit: the top N by the aggregated totals, largest first.
    for agg, aggv in (("sum", 0), ("avg", 1)):
        want = expected(agg)
        order = sorted(want, key=lambda k: -sum(v for _, v in want[k]))
        for lim in (1, 2):
            msg = dict(base, aggregation=aggv, limit=lim)
            a = call(ref, msg)
            b = call(qry, msg)
            got = decode_json_series(a.json()) if a.status == 200 else []
            r.check(a.status == 200 and [k for k, _ in got] == order[:lim]
                    and all(pts == want[k] for k, pts in got),
                    "SelectSeries %s limit %d keeps %s" % (
                        agg, lim, order[:lim]),
                    "%s got %s" % (a.describe(), got))
            r.check(b.status == 200 and b.body == a.body,
                    "SelectSeries %s limit %d: cluster == single" % (agg, lim),
                    b.describe())
        for lim in (0, 3, 50):
            a = call(ref, dict(base, aggregation=aggv, limit=lim))
            got = decode_json_series(a.json()) if a.status == 200 else []
            r.check(a.status == 200 and dict(got) == want,
                    "SelectSeries %s limit %d keeps all 3" % (agg, lim),
                    a.describe())

    # Request shapes Grafana and Drilldown send: the same answer.
    want_body = call(ref, dict(base, aggregation=1, limit=2)).body
    shapes = {
        "snake_case, ints as strings": {
            "profile_typeID": TID, "label_selector": SEL,
            "start": str(START), "end": str(END), "step": STEP,
            "group_by": ["region"], "aggregation":
            "TIME_SERIES_AGGREGATION_TYPE_AVERAGE", "limit": "2"},
        "camelCase, ints as numbers, step as string": dict(
            base, step=str(STEP), aggregation=1, limit=2),
        "camelCase, enum by name": dict(
            base, aggregation="TIME_SERIES_AGGREGATION_TYPE_AVERAGE",
            limit=2),
    }
    for what, msg in shapes.items():
        a = call(ref, msg)
        r.check(a.status == 200 and a.body == want_body,
                "SelectSeries request %s: same answer" % what, a.describe())
    for acc in ("application/json", "*/*", "application/json, text/plain, "
                "*/*"):
        a = call(ref, dict(base, aggregation=1, limit=2),
                 headers={"Accept": acc})
        r.check(a.status == 200 and a.body == want_body,
                "SelectSeries with Accept: %s" % acc, a.describe())

    # Proto codec: same series as JSON, cluster byte-identical.
    for agg, aggv, lim in (("sum", 0, 0), ("avg", 1, 0), ("avg", 1, 2)):
        req = series_req_pb(aggv, lim)
        a = proto_call(ref, req)
        b = proto_call(qry, req)
        j = call(ref, dict(base, aggregation=aggv, limit=lim))
        got = decode_pb_series(a.body) if a.status == 200 else None
        r.check(a.status == 200 and j.status == 200 and
                got == decode_json_series(j.json()),
                "SelectSeries proto %s limit %d: same series as JSON" % (
                    agg, lim), "%s %s" % (a.describe(), got))
        r.check(b.status == 200 and b.body == a.body,
                "SelectSeries proto %s limit %d: cluster == single" % (
                    agg, lim), b.describe())

    shapes_of_other_methods(r, ref, qry)

    # A call site: each point sums the stacks through it.
    for cs in (["main", "work", "f3"], ["main", "work"], ["main", "nope"]):
        for agg, aggv in (("sum", 0), ("avg", 1)):
            msg = dict(base, aggregation=aggv, stackTraceSelector={
                "call_site": [{"name": n} for n in cs]})
            want = expected(agg, cs)
            got = {}
            for srv, tag in ((ref, "single"), (qry, "cluster")):
                a = call(srv, msg)
                got[tag] = dict(decode_json_series(a.json())) \
                    if a.status == 200 else a.describe()
                r.eq(got[tag], want, "SelectSeries %s through %s (%s)" % (
                    agg, ";".join(cs), tag))
    a = call(ref, dict(base, stackTraceSelector={"call_site": [
        {"name": ""}]}))
    r.check(a.status == 400 and a.error_code() == "invalid_argument",
            "a call site frame without a name -> 400", a.describe())
    a = call(ref, dict(base, stackTraceSelector={}))
    r.check(a.status == 200 and dict(decode_json_series(a.json())) ==
            expected("sum"), "SelectSeries with an empty stack-trace "
            "selector answers", a.describe())

    # Bad values are invalid_argument.
    for what, msg in (("negative limit", dict(base, limit=-1)),
                      ("unknown aggregation", dict(base, aggregation=7))):
        for srv, tag in ((ref, "single"), (qry, "cluster")):
            a = call(srv, msg)
            r.check(a.status == 400 and a.error_code() == "invalid_argument",
                    "SelectSeries %s -> 400 invalid_argument (%s)" % (
                        what, tag), a.describe())


def tree_total(b):
    """Sum of the self values in Pyroscope's tree bytes."""
    i, tot, todo = 0, 0, 1
    while todo:
        todo -= 1
        n, i = _read_uv(b, i)
        i += n
        v, i = _read_uv(b, i)
        nch, i = _read_uv(b, i)
        tot += v
        todo += nch
    return tot


def shapes_of_other_methods(r, ref, qry):
    grafana = {"X-Grafana-Org-Id": "1"}
    everything = sum(v for _, v, _ in UPLOADS) * NS
    f0 = 100 * NS
    drill = {"profile_typeID": TID, "label_selector": SEL, "start": START,
             "end": END,
             "stackTraceSelector": {
                 "call_site": [{"name": "main"}, {"name": "work"},
                               {"name": "f0"}],
                 "frameFilter": {"exclude": []}},
             "maxNodes": 100, "profileIdSelector": []}
    for srv, tag in ((ref, "single"), (qry, "cluster")):
        a = connect(srv, "SelectMergeProfile", drill, headers=grafana)
        j = a.json() if a.status == 200 else {}
        vals = [int(v) for s in j.get("sample", []) for v in s["value"]]
        r.check(a.status == 200 and sum(vals) == f0,
                "SelectMergeProfile in Drilldown's JSON shape keeps the call "
                "site's stacks (%s)" % tag, a.describe())
        a = connect(srv, "SelectMergeStacktraces", drill, headers=grafana)
        j = a.json() if a.status == 200 else {}
        r.check(a.status == 200 and
                int(j.get("flamegraph", {}).get("total", -1)) == f0,
                "SelectMergeStacktraces in Drilldown's JSON shape keeps the "
                "call site's stacks (%s)" % tag, a.describe())

    plain = (pb_str(1, TID) + pb_str(2, SEL) + pb_int(3, START) +
             pb_int(4, END))
    a = srv_proto(ref, "SelectMergeProfile", plain)
    b = srv_proto(ref, "SelectMergeProfile", plain + pb_str(99, "x"))
    c = srv_proto(qry, "SelectMergeProfile", plain + pb_str(99, "x"))
    r.check(a.status == 200 and b.status == 200 and c.status == 200 and
            len(a.body) > 0 and b.body == a.body,
            "SelectMergeProfile proto with an unknown field 99 reads as "
            "without it", "%s / %s / %s" % (a.describe(), b.describe(),
                                          c.describe()))
    for srv, tag in ((ref, "single"), (qry, "cluster")):
        d = srv_proto(srv, "SelectMergeProfile", plain + pb_str(7, "x"))
        r.eq(d.status, 400, "SelectMergeProfile proto with "
             "profile_id_selector \"x\" (not a UUID): 400 (%s)" % tag)

    side = {"profileTypeID": TID, "labelSelector": SEL, "start": START,
            "end": END}
    diff = {"left": side, "right": side, "maxNodes": 16,
            "format": "PROFILE_FORMAT_FLAMEGRAPH"}
    a = connect(ref, "Diff", diff, headers=grafana)
    b = connect(qry, "Diff", diff, headers=grafana)
    fg = a.json().get("flamegraph", {}) if a.status == 200 else {}
    r.check(a.status == 200 and
            int(fg.get("leftTicks", -1)) == everything and
            int(fg.get("rightTicks", -1)) == everything,
            "Diff camelCase, ints as numbers, Drilldown's extra fields: "
            "equal sides of the whole total", a.describe())
    r.check(b.status == 200 and b.body == a.body, "Diff: cluster == single",
            b.describe())

    tree_req = {"profileTypeID": TID, "labelSelector": SEL,
                "start": str(START), "end": str(END), "maxNodes": "3",
                "format": "PROFILE_FORMAT_TREE"}
    hdr = {"Accept": "application/json", "Connect-Protocol-Version": "1"}
    a = connect(ref, "SelectMergeStacktraces", tree_req, headers=hdr)
    b = connect(qry, "SelectMergeStacktraces", tree_req, headers=hdr)
    tb = base64.b64decode(a.json().get("tree", "")) if a.status == 200 \
        else b""
    r.check(a.status == 200 and tb and tree_total(tb) == everything,
            "SelectMergeStacktraces TREE (enum name, ints as strings, "
            "maxNodes 3): the tree's total is everything", a.describe())
    r.check(b.status == 200 and b.body == a.body,
            "SelectMergeStacktraces TREE: cluster == single", b.describe())


def srv_proto(srv, method, body):
    return srv.request("POST", "/querier.v1.QuerierService/" + method,
                       body=body,
                       headers={"Content-Type": "application/proto"})


if __name__ == "__main__":
    sys.exit(main())
