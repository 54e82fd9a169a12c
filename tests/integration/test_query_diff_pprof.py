#!/usr/bin/env python3
"""
test_query_diff_pprof.py -- querier.v1 Diff, SelectMergeProfile, the
stack-trace selector and /render-diff, single binary and a
cluster (3 ingesters, RF=3) given the same uploads.

  1. Every real protobuf pprof in tests/data (and ../shared/testdata/
     profiles when present) is ingested under its own service name at its
     own time, and so is a diff of two of them made by `go tool pprof
     -proto -diff_base` (negative stacks, as a delta heap profile has).
     For every sample type, SelectMergeProfile (proto codec) of
     that service and range is run through `go tool pprof -raw` and must
     give exactly the oracle's stacks and values, signed (oracle.py); the cluster's
     profile must read the same (compared as pprof -raw stacks: sample
     order may differ between merges).
  2. Diff of a range against itself: every node's left and right
     (x, total, self) are equal.  Diff of two real profiles: leftTicks and
     rightTicks equal the two files' oracle totals; /render-diff (and
     /pyroscope/render-diff) gives the same names, levels and ticks as
     Connect Diff; the request in proto, JSON snake_case and JSON
     camelCase with ints as numbers gives the same answer; single and
     cluster answers are byte-identical.
  3. SelectMergeStacktraces with stack_trace_selector.call_site keeps only
     the stacks under that prefix (checked against the oracle's stacks);
     format PPROF equals SelectMergeProfile (pprof -raw) for every (file,
     sample type); format DOT is drawn by Graphviz's `dot -Tsvg` and names
     the top function; an unknown format is 501 unimplemented.  The
     legacy API's exports: /render format=pprof is SelectMergeProfile's
     answer byte for byte, /pyroscope/render format=dot is drawn by `dot`;
     an unknown format is 415, and /render-diff answers JSON only
     (format=html is test_webui's).
  3b. SelectMergeStacktraces format TREE: the tree bytes, decoded here
     (Pyroscope's encoding: depth-first, uvarint name length, name,
     uvarint self, uvarint child count, from a virtual root), give exactly
     the oracle's stacks for every (file, sample type) (cut by Pyroscope's
     rule at the default 8192 nodes for the big ones) and the same total
     as the flamegraph answer; with max_nodes=5 they equal Pyroscope's
     truncation computed here from the oracle's stacks (cut children summed
     into "other"); JSON (base64) carries the same bytes; the cluster's
     bytes are identical to the single binary's.
  4. Latency of SelectMergeStacktraces, Diff and SelectMergeProfile on the
     same data in the same run (printed; the report quotes it).
"""

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from cluster import reference_and_rf3  # noqa: E402
from durability import (Workspace, connect, limit_flags,  # noqa: E402
                        p50_latencies)
from pbwire import _read_uv, pb_fields  # noqa: E402
from smolder import (Results, data_dir, install_timeout,  # noqa: E402
                     shared_profiles_dir)

BASE = (int(time.time()) // 3600) * 3600 - 2 * 3600
COMMON = ["-validation.reject-older-than=0", "-validation.reject-newer-than=0",
          "-validation.max-profile-stacktrace-samples=100000",
          "-querier.max-flamegraph-nodes-max=0"] + limit_flags()
MAX_FILES = 40


# -- hand-made protobuf encoding (no protoc on the test machines) ----------

def _key(field, wt):
    return oracle.encode_varint(field << 3 | wt)


def pb_str(field, s):
    b = s.encode() if isinstance(s, str) else s
    return _key(field, 2) + oracle.encode_varint(len(b)) + b


def pb_int(field, v):
    return _key(field, 0) + oracle.encode_varint(v & (2 ** 64 - 1))


def merge_req_pb(type_id, sel, start, end, max_nodes=0, fmt=0):
    b = pb_str(1, type_id) + pb_str(2, sel) + pb_int(3, start) + \
        pb_int(4, end)
    if max_nodes:
        b += pb_int(5, max_nodes)
    if fmt:
        b += pb_int(6, fmt)
    return b


def proto_call(srv, method, body):
    return srv.request("POST", "/querier.v1.QuerierService/" + method,
                       body=body,
                       headers={"Content-Type": "application/proto"})


def pb_bytes_field(buf, want):
    """The last length-delimited field `want` of a message (b"" if none)."""
    out = b""
    for f, wt, v in pb_fields(buf):
        if f == want and wt == 2:
            out = v
    return out


def decode_tree(b):
    """Pyroscope's tree bytes -> {root-first stack: self} (self != 0)."""
    stacks = {}
    if not b:
        return stacks
    parents = [None]
    i = 0
    first = True
    while parents:
        path = parents.pop()
        n, i = _read_uv(b, i)
        name = b[i:i + n].decode("utf-8", "replace")
        i += n
        self_v, i = _read_uv(b, i)
        if self_v >= 2 ** 63:
            self_v -= 2 ** 64
        nch, i = _read_uv(b, i)
        if first:
            if name != "" or self_v != 0:
                raise ValueError("virtual root %r %d" % (name, self_v))
            me = ()
            first = False
        else:
            me = path + (name,)
            if self_v:
                key = ";".join(me)
                stacks[key] = stacks.get(key, 0) + self_v
        parents.extend([me] * nch)
    if i != len(b):
        raise ValueError("%d trailing bytes" % (len(b) - i))
    return stacks


def truncate_like_pyroscope(stacks, max_nodes):
    """Pyroscope's MarshalTruncate on the tree of `stacks`: children whose
    total is below the max_nodes-th largest total are cut into "other"."""
    kids, selfv, tot = {(): set()}, {}, {(): 0}
    for st, v in stacks.items():
        path = tuple(st.split(";"))
        for d in range(1, len(path) + 1):
            p = path[:d]
            kids.setdefault(p, set())
            kids[path[:d - 1]].add(p)
            tot[p] = tot.get(p, 0) + v
        selfv[path] = selfv.get(path, 0) + v
    nodes = [p for p in tot if p]
    minv = 0
    if len(nodes) > max_nodes:
        minv = sorted((tot[p] for p in nodes), reverse=True)[max_nodes - 1]
    out = {}

    def walk(p, extra):
        sv = selfv.get(p, 0) + extra
        if p and sv:
            k = ";".join(p)
            out[k] = out.get(k, 0) + sv
        cut, keep = 0, []
        for c in kids.get(p, ()):
            if tot[c] >= minv or c[-1] == "other":
                keep.append(c)
            else:
                cut += tot[c]
        oth = p + ("other",)
        for c in keep:
            walk(c, cut if c == oth else 0)
        if cut and oth not in keep:
            k = ";".join(oth)
            out[k] = out.get(k, 0) + cut

    walk((), 0)
    return out


# -- the corpus -------------------------------------------------------------

def pprof_files():
    files = []
    for d in (data_dir(), shared_profiles_dir()):
        if not d or not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            p = os.path.join(d, f)
            if os.path.isfile(p) and oracle.looks_like_pprof(p):
                files.append(p)
    return files[:MAX_FILES]


def raw_stacks(pb_bytes, workdir):
    """pprof -raw of a google.v1.Profile (plain bytes) -> {stack: value}
    per sample type."""
    fd, path = tempfile.mkstemp(suffix=".pb.gz", dir=workdir)
    with os.fdopen(fd, "wb") as f:
        f.write(gzip.compress(pb_bytes))
    try:
        rp = oracle.parse_raw(oracle.run_pprof_raw(path))
    finally:
        os.unlink(path)
    st = oracle.collapse_raw(rp)
    return st[0] if len(st) == 1 else {}


def total(stacks):
    return sum(stacks.values())



def dot_draws(resp, text, exp):
    """Why the DOT `text` of answer `resp` fails -- not 200, not drawn by
    Graphviz's `dot -Tsvg`, or without the leaf of the profile's largest
    stack -- or "" when it passes."""
    drawn = subprocess.run(["dot", "-Tsvg"], input=text,
                           capture_output=True, timeout=60)
    top = max(exp.stacks[0].items(), key=lambda kv: abs(kv[1]))[0]
    if resp.status != 200 or drawn.returncode != 0 or \
            b"<svg" not in drawn.stdout or \
            top.split(";")[-1].encode() not in text:
        return "%s %s" % (resp.describe(), drawn.stderr[-300:])
    return ""

def main():
    r = Results("test_query_diff_pprof")
    install_timeout(580)
    if not oracle.have_go():
        r.skip_all("go tool pprof is not installed")
        return r.finish()
    ws = Workspace("qdiff")
    reference_and_rf3(r, ws, COMMON, lambda ref, c: run(r, ws, ref, c))
    return r.finish()


def diff_profile(r, ws):
    """A profile with negative stacks, as a delta or diff of heap profiles
    has: `go tool pprof -proto -diff_base` of two of the in-repo heap
    profiles of one program (tests/data/parca__many__*), or None."""
    many = sorted(f for f in os.listdir(data_dir())
                  if f.startswith("parca__many__"))
    out = os.path.join(ws.root, "diff_base.pb.gz")
    try:
        with open(out, "wb") as fh:
            rc = subprocess.run(
                ["go", "tool", "pprof", "-proto", "-diff_base=%s" %
                 os.path.join(data_dir(), many[0]),
                 os.path.join(data_dir(), many[-1])], stdout=fh,
                stderr=subprocess.PIPE, env=oracle.go_env(),
                timeout=120).returncode
    except (OSError, IndexError, subprocess.TimeoutExpired) as e:
        r.fail("a diff profile made by go tool pprof -diff_base", str(e))
        return None
    r.check(rc == 0, "a diff profile made by go tool pprof -diff_base")
    return out if rc == 0 else None


def run(r, ws, ref, c):
    cases = []   # (svc, t, Expected)
    paths = pprof_files()
    diff = diff_profile(r, ws)
    if diff is not None:
        paths.append(diff)
    for i, path in enumerate(paths):
        exp = oracle.expected_or_skip(r, path, workdir=ws.root)
        if exp is None or exp.notes or not exp.type_ids:
            continue     # transformations are the ingest oracle's job
        if path == diff:
            neg = sum(1 for st in exp.stacks for v in st.values() if v < 0)
            r.check(neg > 0, "the diff profile has negative stacks (%d)"
                    % neg)
        svc = "qd%02d" % i
        t = BASE + 60 * i
        with open(path, "rb") as f:
            body = f.read()
        q = {"name": svc, "from": str(t), "until": str(t + 10),
             "format": "pprof"}
        a = ref.ingest(q, body)
        b = c.distributors[0].ingest(q, body)
        if a.status != 200 or b.status != 200:
            r.skip(os.path.basename(path), "not ingested: %s / %s" % (
                a.describe(), b.describe()))
            continue
        cases.append((svc, t, exp, os.path.basename(path)))
    qry = c.queriers[0]
    r.check(len(cases) >= 5, "%d real profiles ingested" % len(cases))

    # 1. SelectMergeProfile == the oracle, per sample type.
    good = 0
    ntypes = 0
    for svc, t, exp, name in cases:
        for k, tid in enumerate(exp.type_ids):
            ntypes += 1
            req = merge_req_pb(tid, '{service_name="%s"}' % svc,
                               t * 1000, (t + 10) * 1000)
            a = proto_call(ref, "SelectMergeProfile", req)
            b = proto_call(qry, "SelectMergeProfile", req)
            if a.status != 200 or b.status != 200:
                r.fail("SelectMergeProfile %s %s" % (name, tid),
                       "%s / %s" % (a.describe(), b.describe()))
                continue
            got = raw_stacks(a.body, ws.root)
            gotc = raw_stacks(b.body, ws.root)
            want = exp.stacks[k]
            if got != want:
                r.fail("pprof -raw of SelectMergeProfile equals the input: "
                       "%s %s" % (name, tid), oracle.diff_stacks(want, got))
            elif gotc != want:
                r.fail("cluster SelectMergeProfile equals the input: %s %s"
                       % (name, tid), oracle.diff_stacks(want, gotc))
            else:
                good += 1
    r.check(good == ntypes, "SelectMergeProfile -> pprof -raw equals the "
            "input for %d of %d (file, sample type) pairs, single and "
            "cluster" % (good, ntypes))

    # JSON codec of SelectMergeProfile: ints as strings and numbers.
    svc, t, exp, name = cases[0]
    js = connect(ref, "SelectMergeProfile", {
        "profile_typeID": exp.type_ids[0],
        "label_selector": '{service_name="%s"}' % svc,
        "start": str(t * 1000), "end": (t + 10) * 1000})
    pj = js.json() if js.status == 200 else {}
    r.check(js.status == 200 and len(pj.get("sample", [])) > 0 and
            pj.get("stringTable", pj.get("string_table", [None]))[0] == "",
            "SelectMergeProfile in JSON", js.describe())

    # max_nodes: truncated stacks end in "other", totals kept.
    svc, t, exp, name = max(cases, key=lambda c: len(c[2].stacks[0]))
    a = proto_call(ref, "SelectMergeProfile", merge_req_pb(
        exp.type_ids[0], '{service_name="%s"}' % svc, t * 1000,
        (t + 10) * 1000, max_nodes=5))
    tr = raw_stacks(a.body, ws.root) if a.status == 200 else {}
    r.check(a.status == 200 and total(tr) == total(exp.stacks[0]) and
            any(s.endswith("other") for s in tr) and
            len({f for s in tr for f in s.split(";")}) <= 6,
            "SelectMergeProfile max_nodes=5: 'other' leaves, same total",
            "%d %d %s" % (a.status, total(exp.stacks[0]), list(tr)[:8]))

    # 2. Diff.
    by_type = {}
    for case in cases:
        by_type.setdefault(case[2].type_ids[0], []).append(case)
    pair = next((v for v in by_type.values() if len(v) >= 2), None)
    if pair is None:
        r.fail("two profiles of one type for Diff")
        return
    (s1, t1, e1, n1), (s2, t2, e2, n2) = pair[0], pair[1]
    tid = e1.type_ids[0]

    def side(svc, t, snake=True):
        if snake:
            return {"profile_typeID": tid,
                    "label_selector": '{service_name="%s"}' % svc,
                    "start": str(t * 1000), "end": str((t + 10) * 1000)}
        return {"profileTypeID": tid,
                "labelSelector": '{service_name="%s"}' % svc,
                "start": t * 1000, "end": (t + 10) * 1000}

    d = connect(ref, "Diff", {"left": side(s1, t1), "right": side(s2, t2)})
    dj = d.json() if d.status == 200 else {}
    fg = dj.get("flamegraph", {})
    lt = int(fg.get("leftTicks", -1))
    rt = int(fg.get("rightTicks", -1))
    r.check(d.status == 200 and lt == total(e1.stacks[0]) and
            rt == total(e2.stacks[0]) and int(fg.get("total", 0)) == lt + rt,
            "Diff of %s and %s: leftTicks/rightTicks = the merges' totals "
            "(%d, %d)" % (n1, n2, total(e1.stacks[0]), total(e2.stacks[0])),
            d.describe())
    dc = connect(ref, "Diff", {"left": side(s1, t1, False),
                               "right": side(s2, t2, False)})
    r.check(dc.status == 200 and dc.json() == dj,
            "Diff in camelCase JSON with ints as numbers: same answer")
    dpb = merge_req_pb(tid, '{service_name="%s"}' % s1, t1 * 1000,
                       (t1 + 10) * 1000)
    dpb2 = merge_req_pb(tid, '{service_name="%s"}' % s2, t2 * 1000,
                        (t2 + 10) * 1000)
    p1 = proto_call(ref, "Diff", pb_str(1, dpb) + pb_str(2, dpb2))
    p2 = proto_call(qry, "Diff", pb_str(1, dpb) + pb_str(2, dpb2))
    r.check(p1.status == 200 and p1.body == p2.body and len(p1.body) > 0,
            "Diff in proto: cluster answer byte-identical to the single "
            "binary's", "%s / %s" % (p1.describe(), p2.describe()))
    dq = connect(qry, "Diff", {"left": side(s1, t1), "right": side(s2, t2)})
    r.check(dq.status == 200 and dq.body == d.body,
            "Diff in JSON: cluster == single binary", dq.describe())

    same = connect(qry, "Diff", {"left": side(s1, t1), "right": side(s1, t1)})
    sj = same.json().get("flamegraph", {}) if same.status == 200 else {}
    eq = same.status == 200 and sj.get("leftTicks") == sj.get("rightTicks")
    for lv in sj.get("levels", []):
        v = [int(x) for x in lv.get("values", [])]
        for i in range(0, len(v), 7):
            eq = eq and v[i:i + 3] == v[i + 3:i + 6]
    r.check(eq and int(sj.get("leftTicks", 0)) == total(e1.stacks[0]),
            "Diff of a range against itself has equal sides (cluster)")

    for path in ("/render-diff", "/pyroscope/render-diff"):
        q = {"leftQuery": '%s{service_name="%s"}' % (tid, s1),
             "leftFrom": str(t1), "leftUntil": str(t1 + 10),
             "rightQuery": '%s{service_name="%s"}' % (tid, s2),
             "rightFrom": str(t2), "rightUntil": str(t2 + 10)}
        for srv, tag in ((ref, "single"), (qry, "cluster")):
            rd = srv.request("GET", path, q)
            rj = rd.json() if rd.status == 200 else {}
            fb = rj.get("flamebearer", {})
            ok = (rd.status == 200 and
                  rj.get("metadata", {}).get("format") == "double" and
                  fb.get("names") == fg.get("names") and
                  [[int(x) for x in lv] for lv in fb.get("levels", [])] ==
                  [[int(x) for x in lv["values"]] for lv in
                   fg.get("levels", [])] and
                  fb.get("numTicks") == int(fg.get("total", 0)) and
                  rj.get("leftTicks") == lt and rj.get("rightTicks") == rt)
            r.check(ok, "%s (%s) agrees with Connect Diff" % (path, tag),
                    rd.describe())
    bad = ref.request("GET", "/render-diff", {
        "leftQuery": '%s{}' % tid, "rightQuery": "x:y:z:w:v{}"})
    r.check(bad.status == 400, "/render-diff of two types is 400",
            bad.describe())

    # 3. call_site and unsupported formats.
    st = e1.stacks[0]
    root = sorted({s.split(";")[0] for s in st})[0]
    want = {s: v for s, v in st.items() if s.split(";")[0] == root}
    cs = connect(qry, "SelectMergeStacktraces", dict(
        side(s1, t1), max_nodes=0,
        stack_trace_selector={"call_site": [{"name": root}]}))
    full = connect(qry, "SelectMergeStacktraces", dict(side(s1, t1)))
    csj = cs.json().get("flamegraph", {}) if cs.status == 200 else {}
    r.check(cs.status == 200 and int(csj.get("total", 0)) == total(want) and
            (total(want) < total(st)) == (
                int(csj.get("total", 0)) < int(full.json()["flamegraph"]
                                                ["total"])),
            "SelectMergeStacktraces call_site [%s] keeps only its stacks "
            "(%d of %d)" % (root, total(want), total(st)), cs.describe())
    # PPROF: what SelectMergeProfile answers; DOT: a graph `dot` draws.
    have_dot = shutil.which("dot") is not None
    if not have_dot:
        r.skip("SelectMergeStacktraces DOT drawn by Graphviz",
               "no `dot` (Debian graphviz, which make deps installs)")
    npp = ndot = 0
    for svc, t, exp, name in cases:
        sel_k = '{service_name="%s"}' % svc
        for k, tid_k in enumerate(exp.type_ids):
            pp = proto_call(qry, "SelectMergeStacktraces", merge_req_pb(
                tid_k, sel_k, t * 1000, (t + 10) * 1000, fmt=4))
            mp = proto_call(qry, "SelectMergeProfile", merge_req_pb(
                tid_k, sel_k, t * 1000, (t + 10) * 1000))
            prof = pb_bytes_field(pb_bytes_field(pp.body, 5), 1) \
                if pp.status == 200 else b""
            if pp.status != 200 or mp.status != 200 or \
                    raw_stacks(prof, ws.root) != raw_stacks(mp.body, ws.root):
                r.fail("SelectMergeStacktraces PPROF equals SelectMerge"
                       "Profile: %s %s" % (name, tid_k), pp.describe())
            else:
                npp += 1
            if k > 0 or not have_dot:
                continue
            d = proto_call(qry, "SelectMergeStacktraces", merge_req_pb(
                tid_k, sel_k, t * 1000, (t + 10) * 1000, fmt=3))
            why = dot_draws(d, pb_bytes_field(d.body, 3)
                            if d.status == 200 else b"", exp)
            if why:
                r.fail("SelectMergeStacktraces DOT drawn by Graphviz: %s %s"
                       % (name, tid_k), why)
            else:
                ndot += 1
    r.check(npp == ntypes, "SelectMergeStacktraces format PPROF equals "
            "SelectMergeProfile for %d of %d (file, sample type) pairs"
            % (npp, ntypes))
    if have_dot:
        r.check(ndot == len(cases), "SelectMergeStacktraces format DOT: "
                "Graphviz's dot draws each of %d profiles, their top "
                "function in it" % ndot)
    # The legacy API's exports: og's /render?format=pprof is byte for
    # byte what SelectMergeProfile answers (uncompressed, as an
    # attachment; SelectMergeProfile is read by go tool pprof above); v1's
    # /pyroscope/render?format=dot a graph `dot` draws.
    nrp = nrd = 0
    for svc, t, exp, name in cases:
        tid_k, sel_k = exp.type_ids[0], '{service_name="%s"}' % svc
        q = {"query": tid_k + sel_k, "from": str(t), "until": str(t + 10)}
        rp = qry.request("GET", "/render", dict(q, format="pprof"))
        mp = proto_call(qry, "SelectMergeProfile", merge_req_pb(
            tid_k, sel_k, t * 1000, (t + 10) * 1000))
        if rp.status != 200 or mp.status != 200 or \
                rp.headers.get("content-type") != "application/octet-stream" or \
                "attachment" not in rp.headers.get("content-disposition", "") or \
                rp.body != mp.body:
            r.fail("/render format=pprof equals SelectMergeProfile: %s %s"
                   % (name, tid_k), rp.describe())
        else:
            nrp += 1
        if not have_dot:
            continue
        rd = qry.request("GET", "/pyroscope/render", dict(q, format="dot"))
        why = dot_draws(rd, rd.body, exp)
        if why:
            r.fail("/pyroscope/render format=dot drawn by Graphviz: %s %s"
                   % (name, tid_k), why)
        else:
            nrd += 1
    r.check(nrp == len(cases), "/render format=pprof is SelectMerge"
            "Profile's answer, byte for byte, for %d of %d profiles"
            % (nrp, len(cases)))
    if have_dot:
        r.check(nrd == len(cases), "/pyroscope/render format=dot: "
                "Graphviz's dot draws each of %d profiles, their top "
                "function in it" % nrd)
    bad = qry.request("GET", "/render", {"query": tid + "{}",
                                         "format": "svg"})
    r.check(bad.status == 415 and "json, collapsed, dot, pprof, html" in
            bad.text(), "/render format=svg -> 415 naming the formats "
            "served", bad.describe())
    bad = qry.request("GET", "/render-diff", {
        "leftQuery": tid + "{}", "rightQuery": tid + "{}",
        "format": "dot"})
    r.check(bad.status == 415, "/render-diff format=dot -> 415 (JSON "
            "only)", bad.describe())
    u = proto_call(qry, "SelectMergeStacktraces", merge_req_pb(
        tid, "{}", t1 * 1000, (t1 + 10) * 1000, fmt=9))
    r.check(u.status == 501 and u.error_code() == "unimplemented",
            "SelectMergeStacktraces format 9 (unknown) -> 501 "
            "unimplemented", u.describe())

    # 3b. format TREE.
    good = ntypes = 0
    for svc, t, exp, name in cases:
        for k, tid_k in enumerate(exp.type_ids):
            ntypes += 1
            sel_k = '{service_name="%s"}' % svc
            a = proto_call(ref, "SelectMergeStacktraces", merge_req_pb(
                tid_k, sel_k, t * 1000, (t + 10) * 1000, fmt=2))
            b = proto_call(qry, "SelectMergeStacktraces", merge_req_pb(
                tid_k, sel_k, t * 1000, (t + 10) * 1000, fmt=2))
            f = connect(ref, "SelectMergeStacktraces", {
                "profile_typeID": tid_k, "label_selector": sel_k,
                "start": str(t * 1000), "end": str((t + 10) * 1000)})
            try:
                got = decode_tree(pb_bytes_field(a.body, 2)) \
                    if a.status == 200 else None
            except (ValueError, IndexError) as e:
                got = None
                r.fail("TREE bytes of %s %s decode" % (name, tid_k), str(e))
            fgt = int(f.json()["flamegraph"]["total"]) \
                if f.status == 200 else -1
            # max_nodes 0 is the default 8192: big profiles are cut.
            want = truncate_like_pyroscope(exp.stacks[k], 8192)
            if got != want:
                r.fail("TREE of %s %s equals the input" % (name, tid_k),
                       a.describe() if got is None else
                       oracle.diff_stacks(want, got))
            elif total(got) != fgt:
                r.fail("TREE total of %s %s equals the flamegraph's" % (
                    name, tid_k), "%d != %d" % (total(got), fgt))
            elif b.status != 200 or b.body != a.body:
                r.fail("TREE of %s %s: cluster bytes == single" % (
                    name, tid_k), b.describe())
            else:
                good += 1
    r.check(good == ntypes, "SelectMergeStacktraces format TREE decodes to "
            "the input's stacks (max_nodes 8192) and the flamegraph's total for %d of %d "
            "(file, sample type) pairs, cluster byte-identical" % (
                good, ntypes))
    svc, t, exp, name = max(cases, key=lambda c: len(c[2].stacks[0]))
    sel_k = '{service_name="%s"}' % svc
    for mn in (5, 40):
        a = proto_call(ref, "SelectMergeStacktraces", merge_req_pb(
            exp.type_ids[0], sel_k, t * 1000, (t + 10) * 1000,
            max_nodes=mn, fmt=2))
        tb = pb_bytes_field(a.body, 2) if a.status == 200 else b""
        got = decode_tree(tb) if tb else {}
        want = truncate_like_pyroscope(exp.stacks[0], mn)
        r.check(a.status == 200 and got == want and
                total(got) == total(exp.stacks[0]),
                "TREE max_nodes=%d of %s: Pyroscope's truncation, total "
                "kept" % (mn, name), a.describe() if got == {} else
                oracle.diff_stacks(want, got))
        js = connect(ref, "SelectMergeStacktraces", {
            "profileTypeID": exp.type_ids[0], "labelSelector": sel_k,
            "start": t * 1000, "end": (t + 10) * 1000, "maxNodes": mn,
            "format": "PROFILE_FORMAT_TREE"})
        jt = js.json().get("tree", "") if js.status == 200 else None
        r.check(jt is not None and base64.b64decode(jt) == tb and
                "flamegraph" not in js.json(),
                "TREE max_nodes=%d in JSON (camelCase, enum by name): the "
                "same bytes in base64, no flamegraph" % mn, js.describe())

    # 4. Latency on the same data, same run.
    whole = {"profile_typeID": tid, "label_selector": "{}",
             "start": str(BASE * 1000), "end": str((BASE + 3600) * 1000)}
    reqs = [("SelectMergeStacktraces", whole),
            ("SelectMergeProfile", whole),
            ("Diff", {"left": whole, "right": side(s1, t1)})]
    for srv, tag in ((ref, "single"), (qry, "cluster RF=3")):
        print("latency (%s, %d profiles): %s" % (
            tag, len(cases), p50_latencies(r, srv, tag, reqs, 15, connect)))


if __name__ == "__main__":
    sys.exit(main())
