#!/usr/bin/env python3
"""
test_heatmap.py -- querier.v1 SelectHeatmap (individual-profile
heatmap), single binary and cluster (3 ingesters, RF=3), JSON and proto.

Known uploads (folded, one profile per upload and series, exact times and
totals) for service "hm" with env=a and env=b.  Then:

  - every cell (slot, row) counts exactly the profiles the documented
    layout puts there (slots at multiples of step, 20 equal rows over the
    series' [min, max] totals), per group_by env and with no group_by,
    over the whole range and over part of it, in both codecs;
  - exemplars (exemplar_type INDIVIDUAL): one per non-empty cell, the
    cell's largest profile: its (timestamp, value) is an uploaded
    profile's, its profile_id a UUID; the same profile keeps the same id
    in every query, after the heads are cut into blocks and after a
    restart (the ids are the stored upload ids, not made up per query);
  - limit=1 keeps the series with the most profiles;
  - SelectSeries exemplars (INDIVIDUAL): one per point, the step's
    largest profile, carrying the same stored id the heatmap gives it;
    none without exemplar_type; SPAN is unimplemented;
  - query_type SPAN is unimplemented, a bad step invalid_argument;
  - profile_id_selector (SelectMergeStacktraces, SelectMergeProfile):
    each exemplar's id selects exactly its upload (stacks and total),
    several ids their sum, an unknown id nothing, a non-UUID is 400,
    trace_id_selector 501; an upload sharing its series' 10 s bucket
    with another is 501 rather than answered with both;
  - the cluster (RF=3: every profile on three replicas) counts each
    profile once and answers as the single binary does (ids aside:
    uploads get their ids at the distributor), before and after its flush
    and with one ingester down.
"""

import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import (CPU, PAST_HOUR, ingest_spread,  # noqa: E402
                     one_ingester_down, open_flags, single_then_cluster)
from durability import check_code, connect, connect_proto, flush  # noqa: E402
from pbwire import _read_uv, _s64, _uv, pb_decode, pb_double, pb_int, pb_str  # noqa: E402

BASE = PAST_HOUR
COMMON = open_flags()
SCALE = 10 ** 7          # folded cpu at the default 100 Hz -> nanoseconds
STEP = 60

# (env, unix seconds, folded body)
UPLOADS = []
for _i, (_dt, _v) in enumerate([(5, 1), (15, 2), (25, 3), (65, 10), (75, 20),
                                (125, 4), (130, 4), (185, 19)]):
    UPLOADS.append(("a", BASE + _dt, "main;work %d\nmain;idle 1\n" % _v))
for _dt, _v in [(10, 7), (70, 7), (200, 100)]:
    UPLOADS.append(("b", BASE + _dt, "other %d\n" % _v))


def total_of(body):
    return sum(int(line.rsplit(" ", 1)[1]) for line in body.splitlines()) \
        * SCALE


def expect(group_by_env, t0, t1):
    """{labels tuple: {slot_ms: {y_min: (count, max total, its time)}}}."""
    groups = {}
    for env, t, body in UPLOADS:
        if not t0 <= t < t1:
            continue
        key = (("env", env),) if group_by_env else ()
        groups.setdefault(key, []).append((t * 1000, total_of(body)))
    out = {}
    for key, profs in groups.items():
        mn = min(v for _, v in profs)
        mx = max(v for _, v in profs)
        rows = 20 if mx > mn else 1
        width = (mx - mn) / 20 if mx > mn else 1
        cells = {}
        for t, v in profs:
            slot = t // (STEP * 1000) * STEP * 1000
            r = min(rows - 1, max(0, math.floor((v - mn) / width)))
            y = mn + r * width
            c = cells.setdefault(slot, {})
            n, best, bt = c.get(y, (0, None, None))
            if best is None or v > best or (v == best and t < bt):
                best, bt = v, t
            c[y] = (n + 1, best, bt)
        out[key] = cells
    return out


# --- calls --------------------------------------------------------------------

def norm_series(series):
    """[(labels tuple, [(slot, [(y_min, count)], [(ts, value, id, labels)])])]
    -> {labels: {slot: {y_min: (count, exemplar)}}} plus the exemplar list."""
    out, ex = {}, []
    for labels, slots in series:
        cells = {}
        for ts, ys, counts, exs in slots:
            c = {}
            for k, y in enumerate(ys):
                e = exs[k] if k < len(exs) else None
                c[y] = (counts[k], e[1] if e else None, e[0] if e else None)
                if e:
                    ex.append(e)
            cells[ts] = c
        out[labels] = cells
    return out, ex


def heatmap_json(srv, group_by, t0, t1, exemplars=True, extra=None):
    body = {"profileTypeID": CPU, "labelSelector": '{service_name="hm"}',
            "start": str(t0 * 1000), "end": t1 * 1000, "step": STEP,
            "groupBy": group_by, "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL",
            "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL" if exemplars
            else "EXEMPLAR_TYPE_NONE"}
    body.update(extra or {})
    r = connect(srv, "SelectHeatmap", body)
    if r.status != 200:
        return r, None
    series = []
    for s in r.json().get("series") or []:
        labels = tuple((p["name"], p["value"]) for p in s.get("labels") or [])
        slots = []
        for sl in s.get("slots") or []:
            exs = [(int(e.get("timestamp", 0)), int(e.get("value", 0)),
                    e.get("profileId", ""),
                    tuple((p["name"], p["value"])
                          for p in e.get("labels") or []))
                   for e in sl.get("exemplars") or []]
            slots.append((int(sl.get("timestamp", 0)),
                          [float(y) for y in sl.get("yMin") or []],
                          [int(c) for c in sl.get("counts") or []], exs))
        series.append((labels, slots))
    return r, series


def heatmap_proto(srv, group_by, t0, t1, exemplars=True):
    body = pb_str(1, CPU) + pb_str(2, '{service_name="hm"}') + \
        pb_int(3, t0 * 1000) + pb_int(4, t1 * 1000) + pb_double(5, STEP)
    for g in group_by:
        body += pb_str(6, g)
    body += pb_int(7, 1) + pb_int(8, 2 if exemplars else 1)
    r = connect_proto(srv, "SelectHeatmap", body)
    if r.status != 200:
        return r, None

    def labels_of(raws):
        out = []
        for raw in raws:
            d = pb_decode(raw)
            out.append((d.get(1, [b""])[0].decode(),
                        d.get(2, [b""])[0].decode()))
        return tuple(out)
    series = []
    for raw in pb_decode(r.body).get(1, []):
        d = pb_decode(raw)
        slots = []
        for sraw in d.get(2, []):
            sd = pb_decode(sraw)
            ys = []
            for chunk in sd.get(2, []):
                if len(chunk) % 8 == 0 and not isinstance(chunk, int):
                    ys += list(struct.unpack("<%dd" % (len(chunk) // 8),
                                             chunk))
            counts = []
            for chunk in sd.get(3, []):
                i = 0
                while i < len(chunk):
                    v, i = _read_uv(chunk, i)
                    counts.append(v)
            exs = []
            for eraw in sd.get(4, []):
                ed = pb_decode(eraw)
                exs.append((_s64(ed.get(1, [0])[0]), _s64(ed.get(4, [0])[0]),
                            ed.get(2, [b""])[0].decode(),
                            labels_of(ed.get(5, []))))
            slots.append((_s64(sd.get(1, [0])[0]), ys, counts, exs))
        series.append((labels_of(d.get(1, [])), slots))
    return r, series


CASES = [
    ("by env", ["env"], BASE, BASE + 3600),
    ("no group_by", [], BASE, BASE + 3600),
    ("part of the range", ["env"], BASE + 60, BASE + 190),
]


def uploaded_pairs():
    return {(t * 1000, total_of(body)) for _, t, body in UPLOADS}


def check_heatmap(r, srv, tag):
    """Returns {case: normalised answer} and {(ts, value): profile id}."""
    got, ids = {}, {}
    real = uploaded_pairs()
    for name, gb, t0, t1 in CASES:
        rj, sj = heatmap_json(srv, gb, t0, t1)
        rp, sp = heatmap_proto(srv, gb, t0, t1)
        if sj is None or sp is None:
            r.fail("%s: %s answers" % (tag, name), "%s / %s" % (
                rj.describe(), rp.describe()))
            continue
        nj, exj = norm_series(sj)
        np_, _ = norm_series(sp)
        want = expect(bool(gb), t0, t1)
        r.eq({k: {s: {y: v[0] for y, v in c.items()} for s, c in cells.items()}
              for k, cells in nj.items()},
             {k: {s: {y: v[0] for y, v in c.items()} for s, c in cells.items()}
              for k, cells in want.items()},
             "%s: %s: every cell counts the right profiles" % (tag, name))
        r.eq({k: {s: {y: v[1:] for y, v in c.items()} for s, c in cells.items()}
              for k, cells in nj.items()},
             {k: {s: {y: v[1:] for y, v in c.items()} for s, c in cells.items()}
              for k, cells in want.items()},
             "%s: %s: each cell's exemplar is its largest profile" % (
                 tag, name))
        r.eq(sp, sj, "%s: %s: proto and JSON agree" % (tag, name))
        bad = [e for e in exj if (e[0], e[1]) not in real or len(e[2]) != 36
               or e[2].count("-") != 4]
        r.check(not bad, "%s: %s: exemplars are uploaded profiles with UUID "
                "ids" % (tag, name), str(bad[:3]))
        for ts, v, pid, _ in exj:
            ids.setdefault((ts, v), set()).add(pid)
        got[name] = nj
    r.check(all(len(s) == 1 for s in ids.values()),
            "%s: a profile has one id in every query" % tag,
            str([k for k, s in ids.items() if len(s) != 1][:3]))
    # limit=1: env a has the most profiles.
    rj, sj = heatmap_json(srv, ["env"], BASE, BASE + 3600,
                          extra={"limit": "1"})
    r.eq([s[0] for s in sj] if sj is not None else rj.describe(),
         [(("env", "a"),)], "%s: limit=1 keeps the busiest series" % tag)
    return got, {k: next(iter(s)) for k, s in ids.items()}


def expect_exemplars():
    """{(env, step start ms): (time ms, total)} of each step's largest."""
    out = {}
    for env, t, body in UPLOADS:
        k = (env, t // STEP * STEP * 1000)
        v = (t * 1000, total_of(body))
        o = out.get(k)
        if o is None or v[1] > o[1] or (v[1] == o[1] and v[0] < o[0]):
            out[k] = v
    return out


def check_series_exemplars(r, srv, tag, ids):
    """SelectSeries exemplars: one per point, the step's largest profile,
    with the id the heatmap gives that profile."""
    body = {"profileTypeID": CPU, "labelSelector": '{service_name="hm"}',
            "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000),
            "step": STEP, "groupBy": ["env"],
            "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"}
    resp = connect(srv, "SelectSeries", body)
    if resp.status != 200:
        r.fail("%s: SelectSeries with exemplars answers" % tag,
               resp.describe())
        return
    got, bad_ids, counts = {}, [], []
    for s in resp.json().get("series") or []:
        env = {p["name"]: p["value"] for p in s.get("labels") or []}.get("env")
        for p in s.get("points") or []:
            exs = p.get("exemplars") or []
            counts.append(len(exs))
            for e in exs:
                v = (int(e.get("timestamp", 0)), int(e.get("value", 0)))
                got[(env, int(p.get("timestamp", 0)))] = v
                if ids.get(v) != e.get("profileId"):
                    bad_ids.append((v, e.get("profileId"), ids.get(v)))
    r.check(counts and all(c == 1 for c in counts), "%s: SelectSeries: one "
            "exemplar per point" % tag, str(counts))
    r.eq(got, expect_exemplars(), "%s: SelectSeries: each point's exemplar "
         "is its step's largest profile" % tag)
    r.check(not bad_ids, "%s: SelectSeries exemplars carry the stored "
            "profile ids (the heatmap's)" % tag, str(bad_ids[:3]))
    body["exemplarType"] = "EXEMPLAR_TYPE_NONE"
    resp = connect(srv, "SelectSeries", body)
    r.check(resp.status == 200 and not any(
        p.get("exemplars") for s in resp.json().get("series") or []
        for p in s.get("points") or []),
        "%s: SelectSeries without exemplar_type has none" % tag,
        resp.describe())
    body["exemplarType"] = "EXEMPLAR_TYPE_SPAN"
    resp = connect(srv, "SelectSeries", body)
    r.eq(resp.status, 501, "%s: SelectSeries span exemplars are "
         "unimplemented" % tag)


def smst(srv, ids, service="hm", extra=None):
    body = {"profileTypeID": CPU,
            "labelSelector": '{service_name="%s"}' % service,
            "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000),
            "profileIdSelector": ids}
    body.update(extra or {})
    resp = connect(srv, "SelectMergeStacktraces", body)
    fg = resp.json().get("flamegraph", {}) if resp.status == 200 else {}
    return resp, int(fg.get("total", -1)), set(fg.get("names") or [])


def check_profile_selector(r, srv, tag, ids):
    """SelectMergeStacktraces / SelectMergeProfile with profile_id_selector:
    exactly the selected uploads."""
    bodies = {(t * 1000, total_of(body)): body for _, t, body in UPLOADS}
    bad = []
    for k, pid in sorted(ids.items()):
        resp, total, names = smst(srv, [pid])
        want = {f for ln in bodies[k].splitlines()
                for f in ln.rsplit(" ", 1)[0].split(";")} | {"total"}
        if resp.status != 200 or total != k[1] or names != want:
            bad.append((k, pid, resp.status, total, sorted(names)))
    r.check(ids and not bad, "%s: profile_id_selector: each of %d uploads "
            "alone, its stacks and total" % (tag, len(ids)), str(bad[:2]))
    ks = sorted(ids)[:3]
    resp, total, _ = smst(srv, [ids[k] for k in ks])
    r.eq(total, sum(k[1] for k in ks), "%s: three ids: the sum of the three "
         "uploads" % tag)
    resp = connect(srv, "SelectMergeProfile", {
        "profile_typeID": CPU, "label_selector": '{service_name="hm"}',
        "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000),
        "profileIdSelector": [ids[ks[0]]]})
    vals = [int(v) for smp in (resp.json().get("sample", [])
                               if resp.status == 200 else [])
            for v in smp["value"]]
    r.eq(sum(vals), ks[0][1], "%s: SelectMergeProfile with one id: that "
         "upload's total" % tag)
    resp, total, _ = smst(srv, ["00000000-0000-4000-8000-000000000000"])
    r.check(resp.status == 200 and total in (0, -1), "%s: an id not in the "
            "selection selects nothing" % tag, resp.describe())
    resp, _, _ = smst(srv, ["x"])
    check_code(r, resp, 400, "invalid_argument", "%s: an id that is not a "
               "UUID is invalid_argument" % tag)
    resp, _, _ = smst(srv, [], extra={"traceIdSelector": ["ab" * 16]})
    check_code(r, resp, 501, "unimplemented", "%s: trace_id_selector is "
               "unimplemented, not ignored" % tag)


# Two uploads of one series in one 10 s bucket: stored merged.
SHARED = [(BASE + 301, "shared;one 5\n"), (BASE + 303, "shared;two 9\n")]


def check_shared_bucket(r, srv, tag):
    rj = connect(srv, "SelectHeatmap", {
        "profileTypeID": CPU, "labelSelector": '{service_name="hms"}',
        "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000),
        "step": 10, "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL",
        "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"})
    pids = sorted({e.get("profileId") for s in (
        rj.json().get("series") or [] if rj.status == 200 else [])
        for sl in s.get("slots") or [] for e in sl.get("exemplars") or []})
    if len(pids) != 2:
        r.fail("%s: the two uploads' exemplars" % tag, rj.describe())
        return
    resp, _, _ = smst(srv, pids[:1], service="hms")
    check_code(r, resp, 501, "unimplemented", "%s: an upload that shares "
               "its 10 s bucket with another is unimplemented, not "
               "answered with both" % tag)
    resp, total, _ = smst(srv, pids, service="hms")
    r.eq(total, 14 * SCALE, "%s: both ids: the bucket, exact" % tag)


def ingest_shared(r, srv, tag):
    r.eq([srv.ingest({"name": "hms.cpu", "from": str(t), "until": str(t)},
                     body.encode()).status for t, body in SHARED],
         [200, 200], "%s: two uploads into one 10 s bucket" % tag)


def check_bad(r, srv, tag):
    for what, extra, status, code in (
            ("query_type SPAN", {"queryType": "HEATMAP_QUERY_TYPE_SPAN"},
             501, "unimplemented"),
            ("step 0", {"step": 0}, 400, "invalid_argument"),
            ("no range", {"start": "0"}, 400, "invalid_argument")):
        resp, _ = heatmap_json(srv, [], BASE, BASE + 3600, extra=extra)
        check_code(r, resp, status, code, "%s: %s is %s" % (tag, what, code))


def ingest(r, srvs, tag):
    ingest_spread(r, srvs, [
        ({"name": "hm.cpu{env=%s}" % env, "from": str(t), "until": str(t)},
         body.encode()) for env, t, body in UPLOADS],
        "%s: %d uploads acknowledged" % (tag, len(UPLOADS)))


def single_phase(r, one):
    srv = one.srv
    check_bad(r, srv, "single")
    ingest(r, [srv], "single")
    heads, ids = check_heatmap(r, srv, "single heads")
    check_series_exemplars(r, srv, "single heads", ids)
    check_profile_selector(r, srv, "single heads", ids)
    ingest_shared(r, srv, "single")
    check_shared_bucket(r, srv, "single heads")
    r.check(flush(srv).status == 200, "single: heads cut into blocks")
    blocks, ids2 = check_heatmap(r, srv, "single blocks")
    r.eq(blocks, heads, "single: blocks answer as the heads did")
    r.eq(ids2, ids, "single: exemplar ids are the same from blocks")
    srv = one.restart(r)
    again, ids3 = check_heatmap(r, srv, "single after restart")
    r.eq(again, heads, "single: the same after a restart")
    r.eq(ids3, ids, "single: exemplar ids survive a restart")
    check_series_exemplars(r, srv, "single blocks", ids)
    check_profile_selector(r, srv, "single blocks", ids)
    check_shared_bucket(r, srv, "single blocks")
    return heads


def cluster_phase(r, c, heads):
    q = c.queriers[0]
    ingest(r, c.distributors, "cluster")
    ch, cids = check_heatmap(r, q, "cluster heads")
    check_series_exemplars(r, q, "cluster heads", cids)
    check_profile_selector(r, q, "cluster heads", cids)
    ingest_shared(r, c.distributors[0], "cluster")
    check_shared_bucket(r, q, "cluster heads")
    r.eq(ch, heads, "cluster heads: the single binary's cells and "
         "exemplar values")
    check_bad(r, q, "cluster")
    for i in range(3):
        r.check(flush(c.ingesters[i]).status == 200,
                "cluster: ingester-%d cuts its heads" % i)
    cb, _ = check_heatmap(r, q, "cluster blocks")
    check_series_exemplars(r, q, "cluster blocks", cids)
    r.eq(cb, heads, "cluster blocks: the single binary's answers")
    one_ingester_down(r, c)
    cd, _ = check_heatmap(r, q, "cluster, one ingester down")
    r.eq(cd, heads, "cluster, one ingester down: the same answers")
    check_profile_selector(r, q, "cluster, one ingester down", cids)


if __name__ == "__main__":
    single_then_cluster("test_heatmap", 400, "heatmap", COMMON, single_phase,
                        cluster_phase)
