#!/usr/bin/env python3
"""
test_span_profile.py -- querier.v1 SelectMergeSpanProfile (traces to
profiles), single binary and cluster (3 ingesters, RF=3), JSON and
proto codecs.

Generated pprof uploads (cpu nanoseconds) whose samples carry a `span_id`
label (some a `profile_id` label instead, which counts as the span id, one
an invalid span id) and, on some samples, an `env` string label that
splits the series.  Then:

  - span_id makes no series: LabelNames has no span_id, Series lists only
    the env splits;
  - for several span selections (one span, two, a profile_id span, a span
    with no samples, the same span twice, mixed case), with and without a
    label selector and over part of the time range, the span profile's
    stacks equal the sum of exactly the samples carrying those span ids,
    in both codecs; the whole-selection merge still counts every sample;
  - bad requests: a malformed span id and a missing range are
    invalid_argument, format DOT is unimplemented; format TREE answers
    Pyroscope's tree bytes, decoded to exactly the span samples;
  - the same answers after the heads are cut into blocks, after a restart
    (single: span samples replayed from the head log, then read from
    blocks), and from the cluster (RF=3, replicas de-duplicated) before
    and after its flush, and with one ingester down.
"""

import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import (CPU, PAST_HOUR, ingest_spread,  # noqa: E402
                     one_ingester_down, open_flags, single_then_cluster)
from durability import check_code, connect, connect_proto, flush  # noqa: E402
from oracle import build_profile  # noqa: E402
from pbwire import _read_uv, _uv, packed, pb_decode, pb_int, pb_str  # noqa: E402
from test_query_diff_pprof import decode_tree  # noqa: E402

BASE = PAST_HOUR
COMMON = open_flags()
APP = "spanapp"

S = ["00000000000000a1", "00000000000000b2", "0123456789abcdef",
     "fedcba9876543210", "1111111111111111"]
FUNCS = ["main", "handler", "db.Query", "json.Encode", "gc", "sleep"]

# Per upload: (unix seconds, [(stack root-first, value, {label: value})]).
UPLOADS = [
    (BASE + 100, [
        (("main", "handler", "db.Query"), 30, {"span_id": S[0]}),
        (("main", "handler", "json.Encode"), 20, {"span_id": S[0]}),
        (("main", "handler", "db.Query"), 7, {"span_id": S[1]}),
        (("main", "gc"), 11, {}),
        (("main", "handler"), 5, {"span_id": S[1], "env": "x"}),
        (("main", "sleep"), 3, {"profile_id": S[3]}),
        (("main", "handler", "json.Encode"), 4, {"span_id": "not-a-span"}),
    ]),
    (BASE + 130, [
        (("main", "handler", "db.Query"), 9, {"span_id": S[0]}),
        (("main", "handler", "db.Query"), 13, {"span_id": S[2],
                                                "env": "x"}),
        (("main", "gc"), 2, {"span_id": S[2]}),
        (("main", "sleep"), 6, {"span_id": S[2].upper()}),
    ]),
    (BASE + 900, [
        (("main", "handler", "json.Encode"), 17, {"span_id": S[0],
                                                   "env": "y"}),
        (("main", "handler", "db.Query"), 8, {"span_id": S[1]}),
        (("main", "gc"), 1, {}),
    ]),
]


def make_pprof(samples):
    strings = [""]

    def sid(s):
        if s not in strings:
            strings.append(s)
        return strings.index(s)
    sid("cpu")
    sid("nanoseconds")
    functions = [(i + 1, sid(f), sid(f), sid("main.go"))
                 for i, f in enumerate(FUNCS)]
    locations = [(i + 1, 0, 0x1000 + i, [(i + 1, 10 + i)])
                 for i in range(len(FUNCS))]
    out = []
    for stack, value, labels in samples:
        locs = [FUNCS.index(f) + 1 for f in reversed(stack)]  # leaf first
        out.append((locs, [value], [(sid(k), sid(v))
                                    for k, v in sorted(labels.items())]))
    return build_profile(strings, [(1, 2)], out, locations, functions,
                         period_type=(1, 2), period=10000000)


def span_of(labels):
    v = labels.get("span_id") or labels.get("profile_id")
    if v is None or len(v) != 16:
        return None
    try:
        return int(v, 16)
    except ValueError:
        return None


def expect(spans, env=None, t0=None, t1=None):
    """Stacks (';'-joined) of the samples with these span ids."""
    want = {int(s, 16) for s in spans}
    acc = {}
    for t, samples in UPLOADS:
        if t0 is not None and not t0 <= t < t1:
            continue
        for stack, value, labels in samples:
            if span_of(labels) not in want:
                continue
            if env is not None and labels.get("env") != env:
                continue
            k = ";".join(stack)
            acc[k] = acc.get(k, 0) + value
    return acc


def all_stacks():
    acc = {}
    for _, samples in UPLOADS:
        for stack, value, _ in samples:
            k = ";".join(stack)
            acc[k] = acc.get(k, 0) + value
    return acc


# --- flamegraph decoding ----------------------------------------------------

def fg_stacks(names, levels):
    """Pyroscope flamegraph (levels of [x delta, total, self, name]) ->
    {stack: self}."""
    nodes = []       # per level: [(x, total, name, parent path)]
    out = {}
    for li, lv in enumerate(levels):
        row, x = [], 0
        for i in range(0, len(lv), 4):
            x += lv[i]
            total, self_, name = lv[i + 1], lv[i + 2], lv[i + 3]
            path = ()
            if li > 0:
                for px, pt, pname, ppath in nodes[li - 1]:
                    if px <= x < px + pt:
                        path = ppath + (names[name],)
                        break
            row.append((x, total, names[name], path))
            if li > 0 and self_ > 0:
                k = ";".join(path)
                out[k] = out.get(k, 0) + self_
            x += total
        nodes.append(row)
    return out


# --- calls --------------------------------------------------------------------

def span_json(srv, spans, sel="{}", t0=None, t1=None, extra=None):
    body = {"profile_typeID": CPU,
            "labelSelector": sel if sel.startswith("{") else sel,
            "spanSelector": spans,
            "start": str((t0 if t0 is not None else BASE) * 1000),
            "end": (t1 if t1 is not None else BASE + 3600) * 1000}
    body.update(extra or {})
    r = connect(srv, "SelectMergeSpanProfile", body)
    if r.status != 200:
        return r, None
    fg = r.json().get("flamegraph") or {}
    levels = [[int(x) for x in (lv.get("values") or [])]
              for lv in fg.get("levels") or []]
    return r, (int(fg.get("total", 0)), fg_stacks(fg.get("names") or [],
                                                    levels))


def span_proto(srv, spans, sel="{}", t0=None, t1=None):
    body = pb_str(1, CPU) + pb_str(2, sel)
    for s in spans:
        body += pb_str(3, s)
    body += pb_int(4, (t0 if t0 is not None else BASE) * 1000)
    body += pb_int(5, (t1 if t1 is not None else BASE + 3600) * 1000)
    r = connect_proto(srv, "SelectMergeSpanProfile", body)
    if r.status != 200:
        return r, None
    d = pb_decode(r.body)
    fg = pb_decode(d.get(1, [b""])[0])
    names = [n.decode() for n in fg.get(1, [])]
    levels = []
    for lv in fg.get(2, []):
        ld = pb_decode(lv)
        vals = []
        for chunk in ld.get(1, []):
            vals += packed(chunk) if isinstance(chunk, bytes) else [chunk]
        levels.append(vals)
    return r, (fg.get(3, [0])[0], fg_stacks(names, levels))


def key_of(name, sel):
    return "%s %s" % (name, sel)


CASES = [
    # (name, spans, selector, range or None, env filter for the oracle)
    ("one span", [S[0]], '{service_name="%s"}' % APP, None, None),
    ("two spans", [S[1], S[2]], '{service_name="%s"}' % APP, None, None),
    ("profile_id span", [S[3]], "{}", None, None),
    ("no samples", [S[4]], "{}", None, None),
    ("same span twice, mixed case", [S[0], S[0].upper()], "{}", None, None),
    ("label selector", [S[0], S[1], S[2]], '{env="x"}', None, "x"),
    ("part of the range", [S[0], S[2]], "{}", (BASE, BASE + 600), None),
    ("no span ids", [], "{}", None, None),
]


def check_spans(r, srv, tag):
    got = {}
    for name, spans, sel, rng, env in CASES:
        t0, t1 = rng if rng else (None, None)
        want = expect(spans, env, t0, t1)
        rj, aj = span_json(srv, spans, sel, t0, t1)
        rp, ap = span_proto(srv, spans, sel, t0, t1)
        if aj is None or ap is None:
            r.fail("%s: %s answers" % (tag, name), "%s / %s" % (
                rj.describe(), rp.describe()))
            continue
        r.eq(aj[1], want, "%s: %s: stacks are exactly the span samples" % (
            tag, name))
        r.eq(aj[0], sum(want.values()), "%s: %s: total" % (tag, name))
        r.eq(ap, aj, "%s: %s: proto and JSON agree" % (tag, name))
        got[name] = aj
    return got


def check_bad(r, srv, tag):
    for what, spans, extra, status, code in (
            ("a malformed span id", ["xyz"], None, 400, "invalid_argument"),
            ("a 15-digit span id", [S[0][1:]], None, 400,
             "invalid_argument"),
            ("no range", [S[0]], {"start": "0", "end": "0"}, 400,
             "invalid_argument"),
            ("format DOT", [S[0]], {"format": "PROFILE_FORMAT_DOT"}, 501,
             "unimplemented")):
        resp, _ = span_json(srv, spans, "{}", extra=extra)
        check_code(r, resp, status, code, "%s: %s is %s" % (tag, what, code))


def check_tree(r, srv, tag):
    """format TREE: Pyroscope's tree bytes alone, as its query frontend
    asks its queriers, decoded: exactly the span samples."""
    spans = [S[0], S[1]]
    resp, _ = span_json(srv, spans, "{}",
                        extra={"format": "PROFILE_FORMAT_TREE"})
    j = resp.json() if resp.status == 200 else {}
    try:
        got = decode_tree(base64.b64decode(j.get("tree") or ""))
    except ValueError as e:
        got = "undecodable: %s" % e
    want = expect(spans)
    r.check(resp.status == 200 and "flamegraph" not in j and want and
            got == want, "%s: format TREE answers the tree bytes of "
            "exactly the span samples" % tag, "%s %r" % (resp.describe(),
                                                          got))


def check_no_series_label(r, srv, tag):
    resp = connect(srv, "LabelNames", {"matchers": [
        '{service_name="%s"}' % APP]})
    names = (resp.json() or {}).get("names") or [] \
        if resp.status == 200 else None
    r.check(names is not None and "span_id" not in names and
            "profile_id" not in names and "env" in names,
            "%s: span_id is not a series label" % tag, json.dumps(names))
    resp = connect(srv, "Series", {"matchers": [
        '{service_name="%s", __profile_type__="%s"}' % (APP, CPU)],
        "labelNames": ["env", "span_id"]})
    sets = (resp.json() or {}).get("labelsSet") or [] \
        if resp.status == 200 else None
    r.eq(len(sets) if sets is not None else None, 3,
         "%s: only the env splits make series (none, x, y)" % tag)
    # The ordinary merge still sees every sample.
    resp = connect(srv, "SelectMergeStacktraces", {
        "profile_typeID": CPU, "labelSelector": '{service_name="%s"}' % APP,
        "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000)})
    tot = int(((resp.json() or {}).get("flamegraph") or {}).get("total", 0)) \
        if resp.status == 200 else None
    r.eq(tot, sum(all_stacks().values()), "%s: the whole merge counts "
         "every sample" % tag)
    # SelectMergeStacktraces with span_selector: the span merge, the same
    # flamegraph as SelectMergeSpanProfile
    spans = [S[0], S[1]]
    _, want = span_json(srv, spans, '{service_name="%s"}' % APP)
    resp = connect(srv, "SelectMergeStacktraces", {
        "profile_typeID": CPU, "labelSelector": '{service_name="%s"}' % APP,
        "spanSelector": spans,
        "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000)})
    fg = (resp.json() or {}).get("flamegraph") or {} \
        if resp.status == 200 else {}
    levels = [[int(x) for x in (lv.get("values") or [])]
              for lv in fg.get("levels") or []]
    got = (int(fg.get("total", 0)), fg_stacks(fg.get("names") or [],
                                              levels)) if fg else None
    r.check(want is not None and got == want and 0 < got[0] < tot,
            "%s: SelectMergeStacktraces span_selector [%s] answers "
            "SelectMergeSpanProfile's flamegraph (%s of %s)" % (
                tag, ",".join(spans), got and got[0], tot), resp.describe())


def ingest(r, srvs, tag):
    ingest_spread(r, srvs, [
        ({"name": APP, "format": "pprof", "from": str(t),
          "until": str(t + 10)}, make_pprof(samples),
         "application/octet-stream") for t, samples in UPLOADS],
        "%s: %d pprof uploads acknowledged" % (tag, len(UPLOADS)))


def single_phase(r, one):
    srv = one.srv
    check_bad(r, srv, "single")
    ingest(r, [srv], "single")
    check_no_series_label(r, srv, "single")
    check_tree(r, srv, "single")
    heads = check_spans(r, srv, "single heads")
    # Restart with the data still in the head log: replay.
    srv = one.restart(r)
    r.eq(check_spans(r, srv, "single after restart (replay)"), heads,
         "single: the replayed heads answer the same")
    r.check(flush(srv).status == 200, "single: heads cut into blocks")
    r.eq(check_spans(r, srv, "single blocks"), heads,
         "single: blocks answer as the heads did")
    srv = one.restart(r)
    r.eq(check_spans(r, srv, "single blocks after restart"), heads,
         "single: blocks answer the same after a restart")
    return heads


def cluster_phase(r, c, heads):
    q = c.queriers[0]
    ingest(r, c.distributors, "cluster")
    check_no_series_label(r, q, "cluster")
    r.eq(check_spans(r, q, "cluster heads"), heads,
         "cluster heads: the single binary's answers")
    check_bad(r, q, "cluster")
    check_tree(r, q, "cluster")
    for i in range(3):
        r.check(flush(c.ingesters[i]).status == 200,
                "cluster: ingester-%d cuts its heads" % i)
    r.eq(check_spans(r, q, "cluster blocks"), heads,
         "cluster blocks: the single binary's answers")
    one_ingester_down(r, c)
    r.eq(check_spans(r, q, "cluster, one ingester down"), heads,
         "cluster, one ingester down: the same answers")


if __name__ == "__main__":
    single_then_cluster("test_span_profile", 400, "span-profile", COMMON,
                        single_phase, cluster_phase)
