#!/usr/bin/env python3
"""
test_tiers.py -- downsampling tiers end to end: the compactor
builds 1h and 1d tier blocks from days of history -- real pprof CPU
profiles (tests/data, Parca's ten captures of one Go program, cycled) for
one service and generated folded stacks for another, placed in the past
(-validation.reject-older-than=0 stands in for a fake clock) -- and no
query answer changes, in the single binary and in a cluster whose replicas
compacted differently.

The oracle is the same data read with -compactor.downsample-tiers=none:
such a querier asks no resolution, so ingesters read raw buckets only,
never a tier block.  With tiers the querier asks merges at the coarsest
widths the range allows and series at widths dividing the step; the
answers must be identical either way (common/tiers.h: tiers change speed,
never an answer):
  - flamegraphs (/render collapsed, SelectMergeStacktraces), for ranges
    aligned to days, unaligned, inside one day, across the raw edge;
  - series (SelectSeries, steps of 15 min, 1 h, 1 d);
  - diff (querier.v1 Diff) of two days;
  - pprof export (SelectMergeProfile, stacks and values).
The pass also merges small raw blocks lying in one past clock hour (tier
"raw" jobs), which changes no answer either.  Then: a second pass is a no-op; late data into a compacted day is served
at once and folded into a rebuilt tier by the next pass; kill -9 during a
pass and a rerun change nothing; a 3-day flamegraph reads less than half
the block bytes from disk with tiers (a restart empties the cache before
each; bench B7 measures the full-size ratio).
Cluster: 3 ingesters, RF 3, one stopped while the compactor runs, so two
replicas hold tiers and one only raw blocks; every answer equals the raw
single-binary oracle's.
"""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, connect, flush,  # noqa: E402
                        get_json, json_or_none, limit_flags, metrics)
from smolder import data_dir, metric_value, run_script  # noqa: E402

DAY = 86400
NOW = int(time.time())
# Three whole days of history ending at the last midnight, plus the part
# of today before the last hour.
D0 = (NOW // DAY) * DAY - 3 * DAY
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0",
          "-compactor.compaction-interval=24h"] + limit_flags()
RAW = ["-compactor.downsample-tiers=none"]
APP = "tiers.cpu"
CALL_SITE = ["main", "b3"]
STEP = 600          # one upload per series every 10 minutes


def real_profiles():
    """The project's real CPU profiles (tests/data: ten consecutive pprof
    captures of one Go program, from Parca's test data)."""
    d = data_dir()
    names = sorted(n for n in os.listdir(d) if n.startswith("parca__many__"))
    out = []
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            out.append(f.read())
    return out


def uploads(until):
    """(t, svc, body) for every upload of the history, deterministic: real
    pprof files for service a, folded stacks for service b."""
    rng = random.Random(11)
    real = real_profiles()
    out = []
    for i, t in enumerate(range(D0, until, STEP)):
        out.append((t, "a", real[i % len(real)]))
        lines = {}
        for _ in range(12):
            st = "main;b%d;g%d" % (rng.randrange(6), rng.randrange(9))
            lines[st] = lines.get(st, 0) + rng.randrange(1, 9)
        body = "".join("%s %d\n" % kv for kv in sorted(lines.items()))
        out.append((t, "b", body.encode()))
    return out


def small_uploads():
    """Three uploads in one clock hour of day 1, cut one by one in the
    single binary (small blocks for a merge)."""
    return [(D0 + DAY + 5 * 3600 + 600 * k + 7, "a",
             b"main;small;s%d 2\n" % k) for k in range(3)]


def push_all(r, s, ups, cut_every=None):
    bad = 0
    for i, (t, svc, body) in enumerate(ups):
        q = {"name": "%s{svc=%s}" % (APP, svc), "from": str(t),
             "until": str(t + 10)}
        if body[:2] == b"\x1f\x8b":      # a gzipped pprof
            resp = s.ingest_multipart(q, body)
        else:
            resp = s.ingest(q, body)
        bad += resp.status != 200
        if cut_every and i % cut_every == cut_every - 1:
            flush(s)
    r.eq(bad, 0, "every upload of the history acknowledged (%d)" % len(ups))


def ranges():
    day = DAY
    return [
        ("3 days, aligned", D0, D0 + 3 * day),
        ("4 days to now", D0 - day + 3600 * 5 + 17, NOW),
        ("unaligned, across days", D0 + 5 * 3600 + 123,
         D0 + 2 * day + 7 * 3600 + 999),
        ("inside one day", D0 + day + 3 * 3600 + 5, D0 + day + 9 * 3600),
        ("one hour and a bit", D0 + 2 * day + 3599, D0 + 2 * day + 7300),
    ]


def collapsed(s, frm, until, query=APP + "{}"):
    resp = s.render(query, frm=frm, until=until, fmt="collapsed")
    if resp.status != 200:
        return ("error", resp.status, resp.text()[:200])
    return sorted(ln for ln in resp.text().split("\n") if ln)


def type_id(s):
    """The CPU profile type of the history (both services have it)."""
    resp = connect(s, "ProfileTypes", {"start": (D0 - DAY) * 1000,
                                       "end": (NOW + 60) * 1000})
    ids = [pt["ID"] for pt in
           (json_or_none(resp) or {}).get("profileTypes", [])]
    want = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    return want if want in ids else None


def answers(s, tid):
    """Every answer the test compares, as plain values."""
    out = {}
    svc_sel = '{service_name="%s"}' % APP.split(".")[0]
    for name, frm, until in ranges():
        out["render " + name] = collapsed(s, frm, until)
        if tid is None:
            continue
        j = json_or_none(connect(s, "SelectMergeStacktraces", {
            "profileTypeID": tid, "labelSelector": svc_sel,
            "start": frm * 1000, "end": until * 1000, "maxNodes": 0}))
        fg = (j or {}).get("flamegraph", {})
        out["stacktraces total " + name] = str(fg.get("total"))
        for step in (900, 3600, DAY):
            j = json_or_none(connect(s, "SelectSeries", {
                "profileTypeID": tid, "labelSelector": svc_sel,
                "start": frm * 1000, "end": until * 1000, "step": step,
                "groupBy": ["svc"]}))
            out["series %s step %d" % (name, step)] = [
                (tuple((lp["name"], lp["value"]) for lp in se.get("labels",
                                                                  [])),
                 [(p.get("timestamp"), p.get("value")) for p in
                  se.get("points", [])])
                for se in (j or {}).get("series", [])] if j else None
        j = json_or_none(connect(s, "SelectMergeProfile", {
            "profileTypeID": tid, "labelSelector": svc_sel,
            "start": frm * 1000, "end": until * 1000}))
        out["pprof " + name] = pprof_stacks(j)
        # A function's series: the stacks through a call site.
        sts = {"call_site": [{"name": n} for n in CALL_SITE]}
        j = json_or_none(connect(s, "SelectSeries", {
            "profileTypeID": tid, "labelSelector": svc_sel,
            "start": frm * 1000, "end": until * 1000, "step": 3600,
            "stackTraceSelector": sts}))
        # A step whose profiles never pass the call site is a point of
        # value 0, which protojson leaves out: the last, partial hour of
        # "4 days to now" in the first minutes after midnight (UTC).
        out["series through a call site " + name] = [
            (p.get("timestamp"), p.get("value", 0)) for se in
            (j or {}).get("series", []) for p in se.get("points", [])] \
            if j else None
        j = json_or_none(connect(s, "SelectMergeStacktraces", {
            "profileTypeID": tid, "labelSelector": svc_sel,
            "start": frm * 1000, "end": until * 1000, "maxNodes": 0,
            "stackTraceSelector": sts}))
        out["stacktraces through a call site " + name] = str(
            (j or {}).get("flamegraph", {}).get("total"))
    if tid is not None:
        j = json_or_none(connect(s, "Diff", {
            "left": {"profileTypeID": tid, "labelSelector": svc_sel,
                     "start": D0 * 1000, "end": (D0 + DAY) * 1000},
            "right": {"profileTypeID": tid, "labelSelector": svc_sel,
                      "start": (D0 + DAY + 3600) * 1000,
                      "end": (D0 + 3 * DAY - 7) * 1000}}))
        fg = (j or {}).get("flamegraph", {})
        out["diff"] = (fg.get("total"), fg.get("leftTicks"),
                       fg.get("rightTicks"), fg.get("names"),
                       fg.get("levels"))
    return out


def pprof_stacks(p):
    """Sorted (stack, values) of a pprof Profile in Connect JSON."""
    if not p:
        return None
    strs = p.get("stringTable", [])
    funcs = {int(f["id"]): strs[int(f.get("name", 0))]
             for f in p.get("function", [])}
    locs = {}
    for lo in p.get("location", []):
        locs[int(lo["id"])] = ";".join(
            funcs.get(int(ln.get("functionId", 0)), "?")
            for ln in lo.get("line", []))
    agg = {}
    for smp in p.get("sample", []):
        st = ";".join(locs.get(int(x), "?") for x in
                      reversed(smp.get("locationId", [])))
        v = tuple(int(x) for x in smp.get("value", []))
        old = agg.get(st)
        agg[st] = v if old is None else tuple(a + b for a, b in zip(old, v))
    return sorted(agg.items())


def compare(r, got, want, what):
    bad = [k for k in want if got.get(k) != want[k]]
    r.check(not bad, what + " (%d answers)" % len(want),
            "differ: %s; first: got %r want %r" % (
                bad[:5], str(got.get(bad[0]))[:300] if bad else "",
                str(want.get(bad[0]))[:300] if bad else ""))


def nonempty(r, ans):
    r.check(all(v for k, v in ans.items() if k.startswith("render ")),
            "the oracle has data in every range")


def run_pass(s):
    resp = s.request("POST", "/compactor/run", body=b"", timeout=300)
    return resp.status, json_or_none(resp) or resp.text()[:300]


def check_pass(r, s, what, **want):
    """A compactor pass on s answers 200 with the fields `want`."""
    st, j = run_pass(s)
    r.check(st == 200 and isinstance(j, dict) and
            all(j.get(k) == v for k, v in want.items()), what,
            "%s %s" % (st, j))


def bytes_read(s):
    _, m = metrics(s)
    return sum(metric_value(m, "smolder_ingester_block_bytes_read_total",
                            part=p) or 0 for p in ("data", "index", "tree",
                                                   "symbols"))


def cold_collapsed(s):
    """The 3-day flamegraph of the fresh server s, and the block bytes it
    read for it."""
    b0 = bytes_read(s)
    got = collapsed(s, D0, D0 + 3 * DAY)
    return got, bytes_read(s) - b0


def single(r, ws, ups):
    data = ws.data_dir("single")

    def start(name, flags=COMMON):
        return DataServer(data, ws.log_dir(name), name=name,
                          extra_flags=flags).start()

    raw = start("raw", COMMON + RAW)
    try:
        # A block about every 8 hours of history, the rest in the head.
        push_all(r, raw, ups, cut_every=96)
        r.check(flush(raw).status == 200, "history cut into blocks")
        # Three small blocks inside one clock hour of day 1 (heads cut
        # early), which a pass merges into one.
        for k, up in enumerate(small_uploads()):
            push_all(r, raw, [up])
            r.check(flush(raw).status == 200, "small block %d cut" % k)
        tid = type_id(raw)
        r.check(tid is not None, "the profile type is listed")
        oracle = answers(raw, tid)
        nonempty(r, oracle)
        for name, _, _ in ranges():
            pts = oracle.get("series through a call site " + name) or []
            total = sum(v for _, v in pts)
            r.check(total > 0 and str(int(total)) == oracle.get(
                "stacktraces through a call site " + name),
                "%s: the series through %s sums to the flamegraph's total "
                "through it (%d)" % (name, ";".join(CALL_SITE), total),
                oracle.get("stacktraces through a call site " + name))
    finally:
        raw.check_stopped(r)
    # Cold bytes of a 3-day flamegraph on raw blocks.
    s = start("cold-raw")
    try:
        _, raw_bytes = cold_collapsed(s)
        st, j = run_pass(s)
        # Merge jobs (tier "raw": an hour's small raw blocks become one)
        # count as built jobs too.
        _, m = metrics(s)
        merges = int(metric_value(m, "smolder_compactor_jobs_total",
                                  tier="raw", status="built") or 0)
        r.check(merges == 1, "a pass merges the small raw blocks of a "
                "past hour into one", "%d merges" % merges)
        r.check(st == 200 and isinstance(j, dict) and
                j.get("tier_jobs_built") == 6 + merges and
                j.get("tier_jobs_failed") == 0,
                "a pass builds a 1h and a 1d tier for each of 3 days",
                "%s %s" % (st, j))
        _, cj = get_json(s, "/compactor")
        ing = (cj or {}).get("ingesters") or [{}]
        r.check(cj and cj.get("tiers") == ["1h", "1d"] and
                ing[0].get("built") == 6 + merges and
                ing[0].get("pending") == 0 and
                ing[0].get("bytes_written", 0) > 0,
                "GET /compactor shows the pass", str(cj))
        r.eq(metric_value(m, "smolder_compactor_jobs_total", tier="1d",
                          status="built"), 3.0,
             "smolder_compactor_jobs_total{tier=1d,status=built}")
        compare(r, answers(s, tid), oracle, "after compaction every answer "
                "equals the raw oracle's")
        check_pass(r, s, "a second pass has nothing to build",
                   tier_jobs_built=0)
    finally:
        s.check_stopped(r)
    s = start("cold-tier")
    try:
        got, tier_bytes = cold_collapsed(s)
        r.eq(got, oracle["render 3 days, aligned"], "the cold 3-day "
             "flamegraph is the oracle's")
        r.check(tier_bytes * 2 < raw_bytes, "a cold 3-day flamegraph reads "
                "%d block bytes with tiers, %d without (same run)" % (
                    tier_bytes, raw_bytes))
        # Late data into a compacted day: served at once, exactly.
        late = [(D0 + DAY + 4 * 3600 + 7, "a", b"main;late;x 5\n"),
                (D0 + 2 * DAY + 1, "b", b"main;late;y 3\n")]
        push_all(r, s, late)
        r.check(flush(s).status == 200, "late data cut into a raw block")
    finally:
        s.check_stopped(r)
    raw = start("raw-late", COMMON + RAW)
    try:
        oracle2 = answers(raw, tid)
        r.check(oracle2 != oracle, "the late data changes the oracle")
    finally:
        raw.check_stopped(r)
    s = start("late")
    try:
        compare(r, answers(s, tid), oracle2, "late data into compacted days "
                "is served exactly before the next pass")
        # kill -9 in the middle of the pass that rebuilds those days.
        th = threading.Thread(target=lambda: run_pass(s), daemon=True)
        th.start()
        time.sleep(0.02)
        probs = s.kill9()
        th.join(10)
        r.check(not probs, "kill -9 during a pass", "\n".join(probs))
    finally:
        if s.alive():
            s.check_stopped(r)
    s = start("rerun")
    try:
        compare(r, answers(s, tid), oracle2, "after kill -9 during a pass, "
                "every answer equals the oracle's")
        check_pass(r, s, "the rerun pass completes", tier_jobs_failed=0)
        compare(r, answers(s, tid), oracle2, "after the rerun (late data "
                "folded into rebuilt tiers) every answer equals the "
                "oracle's")
        check_pass(r, s, "then nothing is left to build", tier_jobs_built=0)
    finally:
        s.check_stopped(r)
    return tid, oracle


def cluster(r, ws, ups, tid, oracle):
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, extra=COMMON, name="tc")
    try:
        c.start()
        d, q = c.distributors[0], c.queriers[0]
        every = ups + small_uploads()
        push_all(r, d, every)
        r.check(c.wait_writes(len(every)), "cluster: every replica has "
                "applied every upload")
        r.check(all(flush(i).status == 200 for i in c.ingesters),
                "cluster: every ingester cuts its blocks")
        compare(r, answers(q, tid), oracle, "cluster, raw: every answer "
                "equals the single binary's")
        c.stop_ingester(2)
        deadline = time.monotonic() + 30
        while list(c.states(c.compactors[0]).values()).count("ACTIVE") != 2 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        st, j = run_pass(c.compactors[0])
        ok = isinstance(j, dict) and j.get("tier_jobs_built") == 12
        r.check(ok, "cluster: the compactor builds tiers on the two "
                "running ingesters", "%s %s\nGET /compactor: %s" % (
                    st, j, "" if ok else c.compactors[0].request(
                        "GET", "/compactor").text()[:3000]))
        c.restart_ingester(2)
        c.wait_ring(active=3)
        for i in range(3):
            compare(r, answers(q, tid), oracle, "cluster, two replicas "
                    "with tiers and one without (query %d): every answer "
                    "equals the oracle's" % (i + 1))
        c.stop_ingester(0)
        compare(r, answers(q, tid), oracle, "cluster, one tiered replica "
                "down: every answer equals the oracle's")
    finally:
        c.check_stopped(r)


def main(r):
    ws = Workspace("tiers")
    r.at_end(lambda: ws.cleanup(r))
    ups = uploads(D0 + 3 * DAY + 3 * 3600)
    tid, oracle = single(r, ws, ups)
    if tid is not None:
        cluster(r, ws, ups, tid, oracle)


if __name__ == "__main__":
    run_script("test_tiers", 600, main)
