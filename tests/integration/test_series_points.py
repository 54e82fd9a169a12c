#!/usr/bin/env python3
"""
test_series_points.py -- SelectSeries over the parca many/ profiles
(SOURCES.md item 9, parca TestColumnQueryAPIQueryRange).

The 10 parca__many__<ns>.pb.gz Go heap profiles, about 3 s apart, are
ingested with name=memory{job=default}, format=pprof and from=until=<the
file's timestamp in ns> (19 digits), on a server started with
-validation.reject-older-than=0 -ingester.bucket-duration=1s.

  - SelectSeries memory:alloc_objects:count:space:bytes,
    {service_name="memory",job="default"}, step=1 s, start/end around the
    files: exactly 1 series with 10 points, point i at the file's second
    (floor(ts_ms / 1000) * 1000, canonical JSON: timestamp a string),
    ascending, value = that file's alloc_objects total (computed from the
    file with oracle.collapse_pb; SOURCES.md lists the same totals);
  - groupBy ["job"]: 1 series labelled job=default, the same points;
    step=10: the files' totals summed per 10 s step;
  - the same for the other three sample types (step 1);
  - /render?format=json for the same range: numTicks and the timeline's
    samples both add up to the sum of the 10 totals;
  - SelectMergeStacktraces over the range: total = the same sum;
  - after POST /ingester/flush (the data is then in a block) every one of
    these answers is byte-identical, and again after a restart.
"""

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (Workspace, connect, fg_total,  # noqa
                        flush_ok, json_or_none, limit_flags,
                        restart_or_fail, series_points, start_or_fail)
from smolder import run_script, data_dir  # noqa

BUDGET_S = 170
SEL = '{service_name="memory",job="default"}'
ALLOC = "memory:alloc_objects:count:space:bytes"


def load_files():
    out = []
    for p in sorted(glob.glob(os.path.join(data_dir(),
                                           "parca__many__*.pb.gz"))):
        ts_ns = os.path.basename(p)[len("parca__many__"):-len(".pb.gz")]
        pb = oracle.load_pb(p)
        ids = oracle.profile_type_ids(pb.sample_types, pb.period_type)
        totals = {tid: sum(st.values())
                  for tid, st in zip(ids, oracle.collapse_pb(pb))}
        with open(p, "rb") as f:
            body = f.read()
        out.append({"path": p, "ts_ns": ts_ns, "ts_ms": int(ts_ns) // 10**6,
                    "totals": totals, "body": body})
    return out


def select_series(srv, type_id, start, end, step, group_by=None):
    msg = {"profileTypeID": type_id, "labelSelector": SEL, "start": start,
           "end": end, "step": step}
    if group_by:
        msg["groupBy"] = group_by
    return connect(srv, "SelectSeries", msg)


def want_points(files, type_id, step_s):
    acc = {}
    for f in files:
        t = f["ts_ms"] // (step_s * 1000) * step_s * 1000
        acc[t] = acc.get(t, 0) + f["totals"][type_id]
    return [(t, float(v)) for t, v in sorted(acc.items())]


def check_series(r, resp, want, labels, what):
    if not r.check(resp.status == 200, what + ": HTTP 200", resp.describe()):
        return
    try:
        j = resp.json()
    except ValueError:
        r.fail(what + ": JSON", resp.describe())
        return
    got = series_points(j)
    if not r.eq(len(got), 1, what + ": exactly 1 series"):
        print("      got %s" % resp.text()[:1000])
        return
    r.eq(got[0][0], labels, what + ": series labels")
    r.eq(len(got[0][1]), len(want), what + ": %d points" % len(want))
    r.eq(got[0][1], want, what + ": (timestamp, value) of every point")
    raw = (j.get("series") or [{}])[0].get("points") or []
    r.check(all(isinstance(p.get("timestamp"), str) for p in raw),
            what + ": timestamps are JSON strings (int64, canonical JSON)",
            json.dumps(raw[:3]))


def answers(srv, files, start, end):
    """The queries compared across flush and restart."""
    out = {}
    for tid in files[0]["totals"]:
        out["SelectSeries %s step=1" % tid] = select_series(
            srv, tid, start, end, 1)
    out["SelectSeries groupBy job"] = select_series(srv, ALLOC, start, end, 1,
                                                    ["job"])
    out["SelectSeries step=10"] = select_series(srv, ALLOC, start, end, 10)
    out["render json"] = srv.render(ALLOC + SEL, frm=start // 1000,
                                    until=end // 1000 + 1, fmt="json")
    out["SelectMergeStacktraces"] = connect(srv, "SelectMergeStacktraces", {
        "profileTypeID": ALLOC, "labelSelector": SEL, "start": start,
        "end": end})
    return out


def check_answers(r, ans, files, what):
    for tid in files[0]["totals"]:
        check_series(r, ans["SelectSeries %s step=1" % tid],
                     want_points(files, tid, 1), {},
                     "%s: SelectSeries %s step=1" % (what, tid))
    check_series(r, ans["SelectSeries groupBy job"],
                 want_points(files, ALLOC, 1), {"job": "default"},
                 what + ": SelectSeries groupBy job")
    check_series(r, ans["SelectSeries step=10"], want_points(files, ALLOC, 10),
                 {}, what + ": SelectSeries step=10")
    total = sum(f["totals"][ALLOC] for f in files)
    resp = ans["render json"]
    if r.check(resp.status == 200, what + ": render json -> 200",
               resp.describe()):
        j = json_or_none(resp) or {}
        fb = j.get("flamebearer") or {}
        r.eq(fb.get("numTicks"), total, what + ": render numTicks = sum of "
             "the 10 totals")
        tl = j.get("timeline") or {}
        r.eq(sum(tl.get("samples") or []), total, what + ": render timeline "
             "adds up to the sum of the 10 totals")
    resp = ans["SelectMergeStacktraces"]
    j = json_or_none(resp)
    tot = fg_total(j) if j is not None else None
    r.check(tot == total, what + ": SelectMergeStacktraces total %d" % total,
            "got %r %s" % (tot, resp.describe()))


def same(r, a, b, what):
    for k in a:
        ok = (a[k].status == 200 and
              (a[k].status, a[k].body) == (b[k].status, b[k].body))
        r.check(ok, "%s: %s identical (HTTP 200)" % (what, k),
                "before: %s\nafter:  %s" % (a[k].describe(), b[k].describe()))


def main(r):
    ws = Workspace("series")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    files = load_files()
    if len(files) != 10:
        r.fail("10 parca__many__*.pb.gz files in tests/data",
               "found %d" % len(files))
        return
    r.eq([f["totals"][ALLOC] for f in files],
         [83487] * 8 + [112767] * 2,
         "alloc_objects totals of the files (as SOURCES.md lists them)")
    flags = limit_flags() + ["-validation.reject-older-than=0",
                             "-ingester.bucket-duration=1s"]
    start = files[0]["ts_ms"] // 1000 * 1000 - 5000
    end = files[-1]["ts_ms"] // 1000 * 1000 + 5000
    srv = None
    try:
        srv = start_or_fail(r, data, ws.log_dir("first"), flags, "smolder")
        if srv is None:
            return
        for f in files:
            resp = srv.ingest({"name": "memory{job=default}",
                               "format": "pprof", "from": f["ts_ns"],
                               "until": f["ts_ns"]}, f["body"])
            r.check(resp.status == 200, "ingest %s" % os.path.basename(
                f["path"]), resp.describe())
        head = answers(srv, files, start, end)
        check_answers(r, head, files, "head")
        flush_ok(r, srv)
        blk = answers(srv, files, start, end)
        check_answers(r, blk, files, "block")
        same(r, head, blk, "head vs block")
        srv = restart_or_fail(r, srv, data, ws.log_dir("restart"), flags)
        if srv is None:
            return
        again = answers(srv, files, start, end)
        same(r, head, again, "head vs after restart")
    finally:
        if srv is not None:
            srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_series_points", BUDGET_S, main)
