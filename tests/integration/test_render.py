#!/usr/bin/env python3
"""
test_render.py -- folded/lines ingest and /render output, node by node.

  - The docs/wire-formats.md §3 worked example (a;b 3, a;c 1, d 2 as ex.alloc_objects, so
    values are not scaled) renders exactly: names
    ["total","d","a","c","b"], levels [[0,6,0,0],[0,4,0,2,0,2,2,1],
    [0,3,3,4,0,1,1,3]], numTicks 6, maxSelf 3; metadata format "single",
    name "alloc_objects", units "objects", sampleRate 100; timeline adds up
    to 6; groups and heatmap null; collapsed gives the three stacks back.
  - v1's groupBy and aggregation: one timeline per value of the label
    ('*' for series without it, keys sorted), the main timeline still the
    whole selection's; aggregation=avg makes each step the mean over its
    profiles (truncated), per group and overall.
  - Query forms: the legacy `ex.alloc_objects{}` and
    `memory:alloc_objects:count::{service_name="ex"}` and /pyroscope/render
    give the same flamebearer; tags select series.
  - maxNodes / max-nodes on an 8-node tree (hand-computed below from
    Pyroscope's algorithm: the cut is the maxNodes-th largest node total,
    smaller children fold into one "other" after their kept siblings, names
    are numbered in LIFO depth-first visit order): 0, 2, 3, 4 (a tie with
    3), 7 and 8 (no cut).
  - Folded scaling: app.cpu with sampleRate 100 / 250 multiplies by 1e9/rate
    (process_cpu:cpu:nanoseconds:cpu:nanoseconds), sampleRate=0 keeps counts
    (process_cpu:samples:count::), app.wall, format=lines, a dotted app
    name, duplicate stacks summed, lines without a count skipped.
  - format=tree (og's dictionary-free tree), by parameter and by
    Content-Type, gives the worked example's stacks; truncated is 400.
  - format=speedscope: speedscope's own sample files (evented, sampled, one
    profile and two, gzipped or not) give simple.txt's stacks, unit none at
    10 ms a sample, seconds in nanoseconds, two profiles as wall series
    labelled profile_name; bad documents are 400 with the reason.
  - The speedscope folded files in tests/data: simple (LF, CRLF, UTF-16 LE
    and BE with BOM, no trailing newline) give a=14 (self 0), b=14 (self 5),
    c=5, d=4 (SOURCES.md); recursion gives total 10, alternating 182, tall
    a 26-frame stack of 1.
"""

import os
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from oracle import parse_collapsed  # noqa: E402
from smolder import (Server, ServerError, data_dir,  # noqa: E402
                     run_script)

BUDGET_S = 150

# ---------------------------------------------------------------------------
# Hand-computed expectations.
#
# Worked example (docs/wire-formats.md §3): a;b 3, a;c 1, d 2.  Tree: total 6 -> a(4) ->
# {b(3), c(1)}, d(2).  DFS pops d before a (LIFO), c before b: names
# total, d, a, c, b.
EX_BODY = b"a;b 3\na;c 1\nd 2\n"
EX_NAMES = ["total", "d", "a", "c", "b"]
EX_LEVELS = [[0, 6, 0, 0], [0, 4, 0, 2, 0, 2, 2, 1], [0, 3, 3, 4, 0, 1, 1, 3]]

# The maxNodes tree:
#   a;b;c 5, a;b;d 3, a;e 2, a 1, f;g 4, f 1, h 2       (total 18)
#   a 11 (self 1) -> b 8 -> c 5, d 3;  a -> e 2
#   f 5 (self 1) -> g 4;  h 2
# Node totals, largest first: 11 a, 8 b, 5 c, 5 f, 4 g, 3 d, 2 e, 2 h.
MX_BODY = b"a;b;c 5\na;b;d 3\na;e 2\na 1\nf;g 4\nf 1\nh 2\n"
MX_FULL = {
    "names": ["total", "h", "f", "g", "a", "e", "b", "d", "c"],
    "levels": [[0, 18, 0, 0],
               [0, 11, 1, 4, 0, 5, 1, 2, 0, 2, 2, 1],
               [1, 8, 0, 6, 0, 2, 2, 5, 1, 4, 4, 3],
               [1, 5, 5, 8, 0, 3, 3, 7]],
    "numTicks": 18, "maxSelf": 5}
# maxNodes=3: cut = 3rd largest = 5: keep a, b, c, f; h, g, e, d fold.
MX_3 = {
    "names": ["total", "other", "f", "a", "b", "c"],
    "levels": [[0, 18, 0, 0],
               [0, 11, 1, 3, 0, 5, 1, 2, 0, 2, 2, 1],
               [1, 8, 0, 4, 0, 2, 2, 1, 1, 4, 4, 1],
               [1, 5, 5, 5, 0, 3, 3, 1]],
    "numTicks": 18, "maxSelf": 5}
# maxNodes=2: cut = 8: keep a, b.  Root's f+h -> other 7, a's e -> other
# 2, b's c+d -> other 8.
MX_2 = {
    "names": ["total", "other", "a", "b"],
    "levels": [[0, 18, 0, 0],
               [0, 11, 1, 2, 0, 7, 7, 1],
               [1, 8, 0, 3, 0, 2, 2, 1],
               [1, 8, 8, 1]],
    "numTicks": 18, "maxSelf": 8}
MX_CASES = [(None, MX_FULL), (0, MX_FULL), (2, MX_2), (3, MX_3),
            (4, MX_3),          # 4th largest is also 5: same cut as 3
            (7, MX_FULL),       # 7th largest is 2: nothing below it
            (8, MX_FULL), (1000, MX_FULL)]

SIMPLE_TOTALS = {"a": (14, 0), "b": (14, 5), "c": (5, 5), "d": (4, 4)}


def frame_totals(stacks):
    """{frame: (total, self)} from collapsed stacks; a frame that appears
    several times in one stack counts once for that stack's total."""
    tot = defaultdict(int)
    slf = defaultdict(int)
    for stack, v in stacks.items():
        frames = stack.split(";")
        for f in set(frames):
            tot[f] += v
        slf[frames[-1]] += v
    return {f: (tot[f], slf[f]) for f in tot}


def local_folded(path):
    """What a folded file means, decoded here (BOM, UTF-16, CRLF)."""
    with open(path, "rb") as f:
        b = f.read()
    if b.startswith(b"\xff\xfe") or b.startswith(b"\xfe\xff"):
        text = b.decode("utf-16")
    else:
        text = b.decode("utf-8")
    return parse_collapsed(text.replace("\r\n", "\n"))


def alloc_stacks(r, srv, path, app):
    """Ingest the folded file at path as app.alloc_objects: its stacks as
    rendered back ({} when the render fails), None when the ingest does."""
    with open(path, "rb") as f:
        body = f.read()
    resp = srv.ingest({"name": app + ".alloc_objects"}, body)
    if not r.check(resp.status == 200, "ingest " + os.path.basename(path),
                   resp.describe()):
        return None
    resp = srv.render('memory:alloc_objects:count::{service_name="%s"}'
                      % app, fmt="collapsed")
    return parse_collapsed(resp.text()) if resp.status == 200 else {}


def fb_of(resp):
    j = resp.json()
    return j, j.get("flamebearer") or {}


def check_fb(r, resp, want, what):
    if resp.status != 200:
        r.fail(what, resp.describe())
        return None
    try:
        j, fb = fb_of(resp)
    except ValueError as e:
        r.fail(what, "not JSON: %s %s" % (e, resp.describe()))
        return None
    got = {k: fb.get(k) for k in ("names", "levels", "numTicks", "maxSelf")}
    ok = got == want
    detail = ""
    if not ok:
        for k in ("names", "levels", "numTicks", "maxSelf"):
            if got[k] != want[k]:
                detail += "%s:\n  want %r\n  got  %r\n" % (k, want[k], got[k])
    r.check(ok, what, detail)
    return j


def main(r):
    try:
        srv = Server(name="smolder").start()
    except ServerError as e:
        r.fail("server starts", str(e))
        return
    try:
        now = int(time.time())

        # -- worked example ----------------------------------------------------
        resp = srv.ingest({"name": "ex.alloc_objects"}, EX_BODY)
        r.check(resp.status == 200, "folded ingest of the worked example",
                resp.describe())
        r.check(resp.body == b"", "successful ingest has an empty body",
                resp.describe())
        q_new = 'memory:alloc_objects:count::{service_name="ex"}'
        resp = srv.render(q_new)
        want = {"names": EX_NAMES, "levels": EX_LEVELS, "numTicks": 6,
                "maxSelf": 3}
        j = check_fb(r, resp, want, "worked example flamebearer (%s)" % q_new)
        if j is not None:
            r.eq(j.get("version"), 1, "version is 1")
            md = j.get("metadata") or {}
            r.eq(md.get("format"), "single", "metadata.format")
            r.eq(md.get("name"), "alloc_objects", "metadata.name is the "
                 "sample type")
            r.eq(md.get("units"), "objects", "metadata.units")
            r.eq(md.get("sampleRate"), 100, "metadata.sampleRate")
            r.check("spyName" in md, "metadata.spyName present", repr(md))
            r.check(j.get("groups", "absent") is None, "groups is null",
                    repr(j.get("groups", "absent")))
            r.check(j.get("heatmap", "absent") is None, "heatmap is null",
                    repr(j.get("heatmap", "absent")))
            tl = j.get("timeline")
            if r.check(isinstance(tl, dict), "timeline is an object",
                       repr(tl)):
                r.eq(sum(tl.get("samples") or []), 6, "timeline samples add "
                     "up to numTicks")
                r.check(isinstance(tl.get("startTime"), int) and
                        abs(tl["startTime"] - now) <= 3700,
                        "timeline.startTime is near now (unix s)", repr(tl))
                r.check(isinstance(tl.get("durationDelta"), int) and
                        tl["durationDelta"] >= 15,
                        "timeline.durationDelta >= 15 s", repr(tl))
        check_fb(r, srv.render("ex.alloc_objects{}"), want,
                 "legacy query ex.alloc_objects{} gives the same")
        check_fb(r, srv.render(q_new, path="/pyroscope/render"), want,
                 "/pyroscope/render gives the same")
        check_fb(r, srv.render(q_new, frm="now-1h", until="now+5m"), want,
                 "attime from=now-1h until=now+5m")
        check_fb(r, srv.render(q_new, frm=now - 600, until=(now + 600) * 1000),
                 want, "until in unix ms")
        check_fb(r, srv.render(q_new, extra={"format": "json"}), want,
                 "format=json")
        # og's format=pprof on a legacy query (no period named), read
        # back by `go tool pprof` (test_query_diff_pprof compares it with
        # SelectMergeProfile on real profiles).
        resp = srv.render("ex.alloc_objects{}", fmt="pprof")
        if r.check(resp.status == 200 and resp.headers.get(
                "content-disposition") == "attachment; filename=ex.pprof",
                "format=pprof of a legacy query: an attachment ex.pprof",
                resp.describe()):
            if oracle.have_go():
                fd, path = tempfile.mkstemp(suffix=".pprof")
                with os.fdopen(fd, "wb") as f:
                    f.write(resp.body)
                try:
                    st = oracle.collapse_raw(oracle.parse_raw(
                        oracle.run_pprof_raw(path)))
                finally:
                    os.unlink(path)
                r.eq(st, [{"a;b": 3, "a;c": 1, "d": 2}], "format=pprof "
                     "read by go tool pprof: the worked example's stacks")
            else:
                r.skip("format=pprof read by go tool pprof",
                       "go is not installed")
        resp = srv.render(q_new, fmt="collapsed")
        if r.check(resp.status == 200, "collapsed render", resp.describe()):
            r.check(resp.headers.get("content-type", "").startswith(
                "text/plain"), "collapsed is text/plain",
                resp.headers.get("content-type"))
            r.eq(parse_collapsed(resp.text()), {"a;b": 3, "a;c": 1, "d": 2},
                 "collapsed stacks of the worked example")
            r.check(resp.text().endswith("\n"), "collapsed lines end in \\n",
                    repr(resp.text()[-20:]))
        resp = srv.render('memory:alloc_objects:count::{service_name="nope"}')
        if r.check(resp.status == 200, "query for an unknown app -> 200",
                   resp.describe()):
            r.eq(fb_of(resp)[1].get("numTicks"), 0, "unknown app: numTicks 0")
        resp = srv.render(q_new, frm=now - 7200, until=now - 3600)
        if r.check(resp.status == 200, "query for an earlier hour -> 200",
                   resp.describe()):
            r.eq(fb_of(resp)[1].get("numTicks"), 0,
                 "earlier hour: numTicks 0 (placed at from=now)")

        # -- tags ----------------------------------------------------------------
        for env, body in (("prod", b"x;y 2\n"), ("dev", b"x;z 5\n")):
            resp = srv.ingest({"name": "tagged.alloc_space{env=%s,region=eu}"
                               % env}, body)
            r.check(resp.status == 200, "ingest with tags env=%s" % env,
                    resp.describe())
        t = "memory:alloc_space:bytes::"
        for sel, stacks in (
                ('{service_name="tagged",env="prod"}', {"x;y": 2}),
                ('{service_name="tagged",env!="prod"}', {"x;z": 5}),
                ('{service_name="tagged",env=~"p.*|d.*"}',
                 {"x;y": 2, "x;z": 5}),
                ('{service_name="tagged",region="eu"}', {"x;y": 2, "x;z": 5}),
                ('{service_name="tagged",region="us"}', {})):
            resp = srv.render(t + sel, fmt="collapsed")
            got = parse_collapsed(resp.text()) if resp.status == 200 else None
            r.check(got == stacks, "selector %s" % sel,
                    "%r %s" % (got, resp.describe()))

        # -- groupBy and aggregation (v1) -------------------------------------------
        # Four uploads in one step: region=eu totals 2 and 4, region=us 5,
        # and one without the label, 7.
        for tags, body in (("{region=eu}", b"g;h 2\n"),
                           ("{region=eu}", b"g;i 4\n"),
                           ("{region=us}", b"g;h 5\n"),
                           ("", b"k 7\n")):
            resp = srv.ingest({"name": "grp.alloc_objects" + tags,
                               "from": str(now), "until": str(now)}, body)
            r.check(resp.status == 200, "ingest grp %s" % tags,
                    resp.describe())
        qg = 'memory:alloc_objects:count::{service_name="grp"}'

        def timelines(extra, what):
            resp = srv.render(qg, extra=extra)
            if not r.check(resp.status == 200, what, resp.describe()):
                return None, None
            j = resp.json()
            return j.get("timeline") or {}, j.get("groups")

        tl, groups = timelines({"groupBy": "region"}, "render groupBy=region")
        if tl is not None:
            r.eq(sum(tl.get("samples") or []), 18, "groupBy: the timeline "
                 "is still the whole selection's")
            r.check(isinstance(groups, dict), "groupBy: groups is an "
                    "object", repr(groups))
            if isinstance(groups, dict):
                r.eq(list(groups), ["*", "eu", "us"], "groupBy: one group "
                     "per value, '*' without the label, keys sorted")
                r.eq({k: sum(g.get("samples") or []) for k, g in
                      groups.items()}, {"*": 7, "eu": 6, "us": 5},
                     "groupBy: each group's total")
                r.check(all(g.get("startTime") == tl.get("startTime") and
                            g.get("durationDelta") == tl.get(
                                "durationDelta") and
                            len(g.get("samples") or []) == len(
                                tl.get("samples") or []) and
                            "watermarks" in g for g in groups.values()),
                        "groupBy: every group has the timeline's steps",
                        repr(groups))
        tl, groups = timelines({"groupBy": "region", "aggregation": "avg"},
                               "render groupBy=region aggregation=avg")
        if tl is not None:
            r.eq(sum(tl.get("samples") or []), 4, "aggregation=avg: the "
                 "timeline's step is the mean of its 4 profiles, 18/4, "
                 "truncated")
            r.eq({k: sum(g.get("samples") or []) for k, g in
                  (groups or {}).items()}, {"*": 7, "eu": 3, "us": 5},
                 "aggregation=avg: each group's mean (eu: (2+4)/2)")
        tl, groups = timelines({"aggregation": "sum"}, "aggregation=sum")
        if tl is not None:
            r.eq(sum(tl.get("samples") or []), 18, "aggregation=sum")
            r.check(groups is None, "no groupBy: groups is null",
                    repr(groups))
        tl, groups = timelines({"groupBy": "nolabel"}, "groupBy a label "
                               "no series has")
        if tl is not None:
            r.eq({k: sum(g.get("samples") or []) for k, g in
                  (groups or {}).items()}, {"*": 18}, "groupBy a label no "
                 "series has: one group '*'")

        # -- maxNodes --------------------------------------------------------------
        resp = srv.ingest({"name": "mx.alloc_objects"}, MX_BODY)
        r.check(resp.status == 200, "folded ingest of the maxNodes tree",
                resp.describe())
        qmx = 'memory:alloc_objects:count::{service_name="mx"}'
        for mn, want in MX_CASES:
            check_fb(r, srv.render(qmx, max_nodes=mn), want,
                     "maxNodes=%s" % mn)
        check_fb(r, srv.render(qmx, extra={"max-nodes": "2"}), MX_2,
                 "max-nodes=2 (dash spelling)")
        resp = srv.render(qmx, fmt="collapsed", max_nodes=2)
        if resp.status == 200:
            st = parse_collapsed(resp.text())
            r.eq(sum(st.values()), 18, "collapsed total unchanged with "
                 "maxNodes=2")

        # -- folded scaling and formats ------------------------------------------
        cases = [
            ({"name": "sc100.cpu", "sampleRate": "100"}, b"a;b 1\na;b 2\nc 1\n",
             'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name='
             '"sc100"}', {"a;b": 30000000, "c": 10000000},
             "app.cpu sampleRate=100: x1e7, duplicates summed"),
            ({"name": "sc250.cpu", "sampleRate": "250"}, b"a;b 3\n",
             'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name='
             '"sc250"}', {"a;b": 12000000}, "app.cpu sampleRate=250: x4e6"),
            ({"name": "sc0.cpu", "sampleRate": "0"}, b"a;b 3\n",
             'process_cpu:samples:count::{service_name="sc0"}', {"a;b": 3},
             "app.cpu sampleRate=0: samples:count, unscaled"),
            ({"name": "scwall.wall", "sampleRate": "100"}, b"w;x 2\n",
             'wall:wall:nanoseconds:cpu:nanoseconds{service_name="scwall"}',
             {"w;x": 20000000}, "app.wall sampleRate=100"),
            ({"name": "nodot"}, b"n;m 1\n",
             'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name='
             '"nodot"}', {"n;m": 10000000}, "no suffix means cpu"),
            ({"name": "my.dotted.app.alloc_objects"}, b"p;q 4\n",
             'memory:alloc_objects:count::{service_name="my.dotted.app"}',
             {"p;q": 4}, "dotted app name: type after the last dot"),
            ({"name": "lines.alloc_objects", "format": "lines"},
             b"a;b\na;b\nc\n",
             'memory:alloc_objects:count::{service_name="lines"}',
             {"a;b": 2, "c": 1}, "format=lines counts identical lines"),
            ({"name": "skip.alloc_objects"}, b"a;b 2\nnocount\n\nc 1\n",
             'memory:alloc_objects:count::{service_name="skip"}',
             {"a;b": 2, "c": 1}, "folded line without a count is skipped"),
            ({"name": "sp.alloc_objects"}, b"a b;c d 3\n",
             'memory:alloc_objects:count::{service_name="sp"}',
             {"a b;c d": 3}, "frames with spaces: split at the last space"),
        ]
        for q, body, query, stacks, what in cases:
            resp = srv.ingest(q, body)
            if not r.check(resp.status == 200, "ingest: " + what,
                           resp.describe()):
                continue
            resp = srv.render(query, fmt="collapsed")
            got = parse_collapsed(resp.text()) if resp.status == 200 else None
            r.check(got == stacks, what, "want %r\ngot  %r %s" % (
                stacks, got, resp.describe()))
        # og's pprof of a legacy cpu query carries the cpu period its
        # series have, as SelectMergeProfile of the type id does (one
        # range for both: the profile's time is the range's)
        legacy = srv.render("sc100.cpu{}", fmt="pprof", frm=now - 3600,
                            until=now + 3600)
        typed = srv.render('process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                           '{service_name="sc100"}', fmt="pprof",
                           frm=now - 3600, until=now + 3600)
        r.check(legacy.status == 200 and legacy.body == typed.body,
                "format=pprof of sc100.cpu{} is the type id query's, "
                "byte for byte", legacy.describe())
        if oracle.have_go() and legacy.status == 200:
            fd, path = tempfile.mkstemp(suffix=".pprof")
            with os.fdopen(fd, "wb") as f:
                f.write(legacy.body)
            try:
                raw = oracle.run_pprof_raw(path)
            finally:
                os.unlink(path)
            r.check("PeriodType: cpu nanoseconds" in raw, "format=pprof "
                    "of a legacy cpu query: period cpu/nanoseconds "
                    "(go tool pprof -raw)", raw[:300])
        resp = srv.render('process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                          '{service_name="sc100"}')
        if resp.status == 200:
            md = resp.json().get("metadata") or {}
            r.eq((md.get("name"), md.get("units"), md.get("sampleRate")),
                 ("cpu", "samples", 1000000000),
                 "cpu metadata: name cpu, units samples, sampleRate 1e9")

        # -- speedscope folded files ---------------------------------------------
        d = data_dir()
        for i, fname in enumerate(["speedscope__simple.txt",
                                   "speedscope__simple-crlf.txt",
                                   "speedscope__simple-utf16-le.txt",
                                   "speedscope__simple-utf16-be.txt"]):
            got = alloc_stacks(r, srv, os.path.join(d, fname), "ss%d" % i)
            if got is None:
                continue
            r.eq(frame_totals(got), SIMPLE_TOTALS,
                 "%s frame totals (SOURCES.md: a 14, b 14/self 5, c 5, d 4)"
                 % fname)
            r.eq(got, {"a;b;c": 5, "a;b;d": 4, "a;b": 5},
                 "%s aggregated stacks" % fname)
        # the CPU path scales the same file
        with open(os.path.join(d, "speedscope__simple.txt"), "rb") as f:
            resp = srv.ingest({"name": "sscpu.cpu", "sampleRate": "100"},
                              f.read())
        resp = srv.render('process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                          '{service_name="sscpu"}', fmt="collapsed")
        got = parse_collapsed(resp.text()) if resp.status == 200 else {}
        r.eq(frame_totals(got).get("a"), (140000000, 0),
             "speedscope__simple.txt as app.cpu: a total 14 x 1e7")
        for i, (fname, total) in enumerate([
                ("speedscope__recursion.txt", 10),
                ("speedscope__alternating.txt", 182),
                ("speedscope__tall.txt", 1)]):
            path = os.path.join(d, fname)
            got = alloc_stacks(r, srv, path, "ssx%d" % i)
            if got is None:
                continue
            r.eq(sum(got.values()), total, "%s total %d (SOURCES.md)" % (
                fname, total))
            r.eq(got, local_folded(path), "%s stacks" % fname)
            if fname == "speedscope__recursion.txt":
                ft = frame_totals(got)
                r.eq(ft.get("a"), (9, 1), "recursion: a total 9 (once per "
                     "stack), self 1")
            if fname == "speedscope__tall.txt":
                r.eq(list(got), [";".join(chr(97 + k) for k in range(26))],
                     "tall: one 26-frame stack a..z")

        # -- og's dictionary-free tree (format=tree) --------------------------
        def tnode(name, value, kids=()):
            def uv(v):
                out = b""
                while v >= 0x80:
                    out += bytes([v & 0x7f | 0x80])
                    v >>= 7
                return out + bytes([v])
            return uv(len(name)) + name + uv(value) + uv(len(kids)) + \
                b"".join(kids)
        tree = tnode(b"", 0, [tnode(b"a", 0, [tnode(b"b", 3),
                                              tnode(b"c", 1)]),
                              tnode(b"d", 2)])
        for i, (q, ctype) in enumerate((
                ({"format": "tree"}, None),
                ({}, "binary/octet-stream+tree"))):
            q = dict(q, name="tree%d.alloc_objects" % i)
            resp = srv.ingest(q, tree, content_type=ctype)
            if r.check(resp.status == 200, "tree ingest (%s)" % (
                    ctype or "format=tree"), resp.describe()):
                resp = srv.render('memory:alloc_objects:count::'
                                  '{service_name="tree%d"}' % i,
                                  fmt="collapsed")
                got = parse_collapsed(resp.text()) \
                    if resp.status == 200 else None
                r.eq(got, {"a;b": 3, "a;c": 1, "d": 2}, "tree: the worked "
                     "example's stacks (%s)" % (ctype or "format=tree"))
        resp = srv.ingest({"name": "treebad", "format": "tree"}, tree[:-2])
        r.check(resp.status == 400 and "tree" in resp.text(),
                "a truncated tree is 400", resp.describe())

        # -- speedscope's file format (format=speedscope) ---------------------
        simple = {"a;b;c": 5, "a;b;d": 4, "a;b": 5}
        for i, (fname, name, query, scale) in enumerate([
                # unit none as cpu: a sample is 10 ms (100 Hz)
                ("speedscope__simple.speedscope.json", "sse0",
                 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                 '{service_name="sse0",profile_name="simple.txt"}',
                 10000000),
                ("speedscope__simple-no-pretty-print.speedscope.json",
                 "sse1.alloc_objects", 'memory:alloc_objects:count::'
                 '{service_name="sse1"}', 1),
                # unit seconds: nanoseconds
                ("speedscope__simple-sampled.speedscope.json", "sse2",
                 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                 '{service_name="sse2"}', 1000000000),
                # two profiles: named by unit, seconds is wall (as v1)
                ("speedscope__two-sampled.speedscope.json", "sse3",
                 'wall:wall:nanoseconds:cpu:nanoseconds'
                 '{service_name="sse3",profile_name="two"}', 1000000000)]):
            with open(os.path.join(d, fname), "rb") as f:
                body = f.read()
            if i == 3:
                import gzip
                body = gzip.compress(body)
            resp = srv.ingest({"name": name, "format": "speedscope"}, body)
            if not r.check(resp.status == 200, "format=speedscope: ingest "
                           "%s%s" % (fname, " gzipped" if i == 3 else ""),
                           resp.describe()):
                continue
            resp = srv.render(query, fmt="collapsed")
            got = parse_collapsed(resp.text()) if resp.status == 200 else None
            r.eq(got, {k: v * scale for k, v in simple.items()},
                 "format=speedscope: %s as %s" % (fname, query))
        resp = srv.render('wall:wall:nanoseconds:cpu:nanoseconds'
                          '{service_name="sse3"}', fmt="collapsed")
        got = parse_collapsed(resp.text()) if resp.status == 200 else None
        r.eq(got, {k: 2 * v * 1000000000 for k, v in simple.items()},
             "format=speedscope: both profiles of two-sampled, one series "
             "each (profile_name one and two)")
        resp = srv.request("GET", "/label-values", {"label": "profile_name"})
        r.check(resp.status == 200 and {"one", "two", "simple.txt"} <=
                set(resp.json()), "profile_name label values",
                resp.describe())
        for body, what, msg in (
                (b'{"$schema":"x"}', "another schema",
                 "speedscope: unknown schema: x"),
                (b"{", "truncated JSON", "speedscope: unexpected end at "
                 "byte 1"),
                (b'{"$schema":"https://www.speedscope.app/file-format-'
                 b'schema.json","profiles":[{"type":"sampled","unit":"none",'
                 b'"samples":[[0]],"weights":[1]}]}', "a frame index out of "
                 "range", "speedscope: invalid frame 0 (the file has 0)")):
            resp = srv.ingest({"name": "ssbad", "format": "speedscope"},
                              body)
            r.check(resp.status == 400 and resp.json().get("message") ==
                    msg, "format=speedscope, %s: 400 %s" % (what, msg),
                    resp.describe())

        r.check(srv.ready(), "server still ready")
    finally:
        srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_render", BUDGET_S, main)
