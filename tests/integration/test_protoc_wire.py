#!/usr/bin/env python3
"""
test_protoc_wire.py -- the Connect APIs checked with the real protobuf
compiler: every push.v1 / settings.v1 / capabilities.v1 / version.v1 /
querier.v1 method answers a request encoded by
`protoc --encode=<msg> -I proto <file>.proto` from protobuf text format,
and its answer decodes with `protoc --decode=<msg>` (never --decode_raw).
The other tests hand-encode protobuf; this one checks the server against
the project's .proto files as compiled by protoc.

  1. Push: every real pprof in tests/data (and ../shared/testdata/profiles
     when present, skip_corpus otherwise) becomes a push.v1.PushRequest
     written in text format (raw_profile as an escaped byte string) and
     encoded by protoc, under its own service name, to the single binary
     and to a cluster (3 ingesters, RF=3).  A span-labelled profile made
     here is pushed the same way for SelectMergeSpanProfile.
  2. SelectMergeProfile per (file, sample type), protoc-encoded; the
     answer decodes as google.v1.Profile with protoc, and `go tool pprof
     -raw` of it equals the input (oracle.py); the cluster's equals too.
  3. Every other method: the protoc-encoded request's answer, decoded by
     protoc (text format parsed here), carries the real content (type ids,
     label names and values, series counts, flamegraph/series totals equal
     to the oracle's, Diff ticks, heatmap counts, span totals, settings
     set then read back); the same request in JSON -- snake_case with
     int64 as strings, camelCase with int64 as numbers -- gives the same
     answer (compared field by field after normalising names, int64
     strings and base64 bytes); single binary and cluster give identical
     decoded answers (AnalyzeQuery excepted: its scopes describe the
     topology, so only its content is checked).
     The proto codec answers the same with Accept: application/proto and
     Accept: */*; the JSON calls send Accept: application/json and
     Connect-Protocol-Version: 1 as connect-go does.  Push in JSON
     (raw_profile and rawProfile, base64) stores the same profile as the
     protoc-encoded Push.
  4. Diff of a range against itself (protoc-encoded) has equal sides; Diff
     of two real profiles has leftTicks/rightTicks = the inputs' totals,
     single and cluster; /render-diff agrees with the protoc-decoded
     Connect Diff (the JSON Diff/render-diff checks live in
     test_query_diff_pprof.py).
  5. Latency of SelectMergeStacktraces, SelectMergeProfile and Diff in the
     proto codec on the same data, same run (printed, not judged).

Profiles whose sample type has no name get __name__="unnamed" on Push
(Push takes the metric from __name__ and rejects an empty one with 400,
as Pyroscope does).

Without protoc the test fails under CI=true and skips elsewhere.
"""

import base64
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
import smolder  # noqa: E402
from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, connect,  # noqa: E402
                        p50_latencies)
from test_query_diff_pprof import (COMMON, pprof_files,  # noqa: E402
                                   raw_stacks, total)
from test_span_profile import make_pprof  # noqa: E402

PROTO_DIR = os.path.join(smolder.source_dir(), "proto")
FILES = {"push.v1": "push/v1/push.proto",
         "querier.v1": "querier/v1/querier.proto",
         "settings.v1": "settings/v1/setting.proto",
         "capabilities.v1": "capabilities/v1/feature_flags.proto",
         "version.v1": "version/v1/version.proto",
         "types.v1": "types/v1/types.proto",
         "google.v1": "google/v1/profile.proto"}
QUERIER = "/querier.v1.QuerierService/"
SPAN = "00000000000000a1"
SPAN_SAMPLES = [(("main", "handler", "db.Query"), 30, {"span_id": SPAN}),
                (("main", "handler", "json.Encode"), 12, {"span_id": SPAN}),
                (("main", "gc"), 11, {}),
                (("main", "sleep"), 5, {"span_id": "00000000000000b2"})]


# -- protoc ----------------------------------------------------------------

def _file_of(msg):
    return FILES[msg.rsplit(".", 1)[0]]


def encode(msg, text):
    p = subprocess.run(["protoc", "--encode=" + msg, "-I", PROTO_DIR,
                        _file_of(msg)], input=text.encode(),
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("protoc --encode=%s: %s" % (
            msg, p.stderr.decode(errors="replace")))
    return p.stdout


def decode(msg, data):
    """protoc --decode of `data` -> the text, or raises."""
    p = subprocess.run(["protoc", "--decode=" + msg, "-I", PROTO_DIR,
                        _file_of(msg)], input=data, capture_output=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError("protoc --decode=%s: %s" % (
            msg, p.stderr.decode(errors="replace")))
    return p.stdout.decode("utf-8", "surrogateescape")


def text_bytes(b):
    """Bytes as a protobuf text-format string literal."""
    out = []
    for c in b:
        if c in (0x22, 0x5c) or c < 0x20 or c >= 0x7f:
            out.append("\\%03o" % c)
        else:
            out.append(chr(c))
    return '"' + "".join(out) + '"'


def q(s):
    return text_bytes(s.encode())


_TOK = re.compile(r'\s*(?:(\{|\})|"((?:[^"\\]|\\.)*)"|([A-Za-z_][\w.]*)\s*:'
                  r'|([A-Za-z_][\w.]*)\s*(?=\{)|([^\s{}"]+))', re.S)
_ESC = re.compile(rb'\\([0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)', re.S)
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b'"': b'"', b"'": b"'",
           b"\\": b"\\", b"a": b"\a", b"b": b"\b", b"f": b"\f",
           b"v": b"\v", b"?": b"?"}


def _unescape(s):
    def one(m):
        e = m.group(1)
        if e[:1].isdigit():
            return bytes([int(e, 8)])
        if e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        return _SIMPLE.get(e, b"\\" + e)
    return _ESC.sub(one, s.encode("utf-8", "surrogateescape"))


def parse_text(text):
    """protoc's text format -> {field: [values]} (nested messages as dicts,
    strings as bytes, numbers as int/float, enums as their names)."""
    pos, stack, cur, key = 0, [], {}, None
    while pos < len(text):
        m = _TOK.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip():
                raise ValueError("text format at %r" % text[pos:pos + 40])
            break
        pos = m.end()
        brace, string, fkey, mkey, scalar = m.groups()
        if fkey or mkey:
            key = fkey or mkey
            continue
        if brace == "{":
            child = {}
            cur.setdefault(key, []).append(child)
            stack.append(cur)
            cur = child
        elif brace == "}":
            cur = stack.pop()
        elif string is not None:
            # adjacent literals concatenate
            lst = cur.setdefault(key, [])
            lst.append(_unescape(string))
        else:
            try:
                v = int(scalar)
            except ValueError:
                try:
                    v = float(scalar)
                except ValueError:
                    v = {"true": True, "false": False}.get(scalar, scalar)
            cur.setdefault(key, []).append(v)
    if stack:
        raise ValueError("unbalanced braces")
    return cur


def norm_key(k):
    return k.replace("_", "").lower()


def canon_text(d):
    """A parsed text message in a codec-neutral form."""
    out = {}
    for k, vs in d.items():
        out[norm_key(k)] = [canon_text(v) if isinstance(v, dict) else
                            _canon_scalar(v) for v in vs]
    return out


def _canon_scalar(v):
    if isinstance(v, bytes):
        try:
            v = v.decode("utf-8")
        except UnicodeDecodeError:
            return v
    if isinstance(v, str):
        if re.fullmatch(r"-?\d+", v):
            return int(v)
        return v
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v == int(v):
        return int(v)
    return v


BYTES_FIELDS = {"tree", "rawprofile"}


def canon_json(d):
    """A decoded proto3-JSON message in the same form as canon_text:
    defaults (empty lists, "", 0, false) dropped as protoc's text omits
    them; int64 strings -> ints; bytes fields base64-decoded."""
    out = {}
    for k, v in d.items():
        nk = norm_key(k)
        vs = v if isinstance(v, list) else [v]
        cv = []
        for x in vs:
            if isinstance(x, dict):
                cv.append(canon_json(x))
            elif nk in BYTES_FIELDS and isinstance(x, str):
                cv.append(_canon_scalar(base64.b64decode(x)))
            else:
                cv.append(_canon_scalar(x))
        if not isinstance(v, list) and cv[0] in ("", 0, False, {}):
            continue
        if cv:
            out[nk] = cv
    return out


def first(d, k, default=None):
    v = d.get(k)
    return v[0] if v else default


# -- the test ----------------------------------------------------------------

def push_text(labels, profile):
    ls = "".join(" labels { name: %s value: %s }" % (q(k), q(v))
                 for k, v in labels)
    return "series {%s samples { raw_profile: %s } }" % (
        ls, text_bytes(profile))


def rpc(srv, path, msg_in, text, msg_out, r, what, ctype="application/proto"):
    """POST the protoc-encoded `text` as `msg_in`; the parsed protoc decode
    of the answer as `msg_out`, or None (a failure is recorded)."""
    body = encode(msg_in, text)
    resp = srv.request("POST", path, body=body,
                       headers={"Content-Type": ctype}, timeout=120)
    if resp.status != 200:
        r.fail("%s answers 200" % what, resp.describe())
        return None
    try:
        return parse_text(decode(msg_out, resp.body))
    except (RuntimeError, ValueError) as e:
        r.fail("%s: the answer decodes with protoc --decode=%s" % (
            what, msg_out), str(e))
        return None


def main():
    smolder.run_script("test_protoc_wire", 180, body)


def body(r):
    if not shutil.which("protoc"):
        if smolder.in_ci():
            r.fail("protoc is installed (protobuf-compiler)",
                   "CI=true and protoc is not on PATH")
            return
        r.skip_all("protoc is not installed (apt-get install "
                   "protobuf-compiler)")
    if not oracle.have_go():
        r.skip_all("go tool pprof is not installed")
    if not smolder.shared_profiles_dir():
        r.skip_corpus("../shared/testdata/profiles", "not present: only "
                      "tests/data is pushed")
    ws = Workspace("protoc")
    r.at_end(lambda: ws.cleanup(r))
    ref = DataServer(ws.data_dir("single"), ws.log_dir("single"),
                     name="single", extra_flags=COMMON).start()
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=COMMON, name="rf3")
    c.start()
    run(r, ws, ref, c)
    c.check_stopped(r)
    probs = ref.stop()
    r.check(not probs, "single binary exits 0 on SIGTERM", "\n".join(probs))


def run(r, ws, ref, c):
    dist, qry = c.distributors[0], c.queriers[0]
    push_path = "/push.v1.PusherService/Push"

    # 1. Push every real pprof, protoc-encoded.
    cases = []    # (svc, Expected, name, type ids as pushed)
    eligible = 0
    for i, path in enumerate(pprof_files()):
        name = os.path.basename(path)
        exp = oracle.expected_or_skip(r, path, workdir=ws.root)
        if exp is None:
            continue
        # drop_frames/keep_frames are ignored on ingest (as Pyroscope does),
        # and the oracle's stacks are those of the stripped profile: such
        # files are covered too.  Other oracle notes (pprof warnings) are
        # the ingest oracle's job.
        if [n for n in exp.notes if n != "drop_frames/keep_frames removed"] \
                or not exp.type_ids:
            r.skip(name, "oracle notes %s" % exp.notes)
            continue
        eligible += 1
        svc = "pw%02d" % i
        with open(path, "rb") as f:
            raw = f.read()
        # Push takes the metric from the __name__ label: the oracle's
        # (Pyroscope's rule on the sample types), or, when that is empty
        # (a profile whose sample type has no name; Push rejects an empty
        # __name__ with 400 as Pyroscope does), a name of our own.
        metric = exp.type_ids[0].split(":")[0] or "unnamed"
        tids = [metric + t[t.index(":"):] for t in exp.type_ids]
        text = push_text([("__name__", metric), ("service_name", svc)], raw)
        ok = True
        for srv, tag in ((ref, "single"), (dist, "cluster")):
            pr = rpc(srv, push_path, "push.v1.PushRequest", text,
                     "push.v1.PushResponse", r, "Push %s (%s)" % (name, tag))
            ok = ok and pr == {}
        if ok:
            cases.append((svc, exp, name, tids))
    r.check(len(cases) == eligible and eligible >= 5, "Push "
            "(protoc-encoded) of %d of %d real profiles answers an empty "
            "PushResponse, single and cluster" % (len(cases), eligible))
    span_pb = make_pprof(SPAN_SAMPLES)
    for srv in (ref, dist):
        rpc(srv, push_path, "push.v1.PushRequest", push_text(
            [("__name__", "process_cpu"), ("service_name", "pwspan")],
            span_pb), "push.v1.PushResponse", r, "Push of the span profile")

    now_ms = int(time.time() * 1000)
    start, end = 1000, now_ms + 3600 * 1000

    def sel(svc):
        return '{service_name="%s"}' % svc

    # 2. SelectMergeProfile -> google.v1.Profile -> pprof -raw == input.
    good = ntypes = 0
    for svc, exp, name, tids in cases:
        for k, tid in enumerate(tids):
            ntypes += 1
            req = encode("querier.v1.SelectMergeProfileRequest",
                         'profile_typeID: %s label_selector: %s start: %d '
                         'end: %d' % (q(tid), q(sel(svc)), start, end))
            got = []
            for srv in (ref, qry):
                a = smolder_proto(srv, "SelectMergeProfile", req)
                if a.status != 200:
                    got.append(a.describe())
                    continue
                try:
                    pt = parse_text(decode("google.v1.Profile", a.body))
                except (RuntimeError, ValueError) as e:
                    got.append("protoc --decode: %s" % e)
                    continue
                if first(pt, "string_table") != b"":
                    got.append("string_table[0] is not empty")
                    continue
                got.append(raw_stacks(a.body, ws.root))
            want = exp.stacks[k]
            if got[0] != want:
                r.fail("SelectMergeProfile (protoc) -> pprof -raw equals "
                       "the input: %s %s" % (name, tid),
                       got[0] if isinstance(got[0], str) else
                       oracle.diff_stacks(want, got[0]))
            elif got[1] != want:
                r.fail("cluster SelectMergeProfile (protoc) equals the "
                       "input: %s %s" % (name, tid),
                       got[1] if isinstance(got[1], str) else
                       oracle.diff_stacks(want, got[1]))
            else:
                good += 1
    r.check(good == ntypes and ntypes > 0, "SelectMergeProfile "
            "(protoc-encoded, protoc-decoded google.v1.Profile) -> pprof "
            "-raw equals the input for %d of %d (file, sample type) pairs, "
            "single and cluster" % (good, ntypes))

    # 3. Every method in proto (protoc) and JSON, single and cluster.
    svc, exp, name, tids = cases[0]
    tid = tids[0]
    want_total = total(exp.stacks[0])
    all_tids = sorted({t for c in cases for t in c[3]})
    svcs = sorted({c[0] for c in cases} | {"pwspan"})

    def both(service, method, msg_in, text, msg_out, snake, camel,
             same_cluster=True, ctype="application/proto"):
        """The protoc answer (canonical) of the single binary after
        checking JSON snake/camel and the cluster agree; None on error."""
        path = "/%s/%s" % (service, method)
        what = "%s.%s" % (service.split(".")[0], method)
        a = rpc(ref, path, msg_in, text, msg_out, r, what + " (protoc)")
        if a is None:
            return None
        ca = canon_text(a)
        for js, tag, hdr in (
                (snake, "snake_case, int64 as strings", None),
                (camel, "camelCase, int64 as numbers",
                 {"Accept": "application/json",
                  "Connect-Protocol-Version": "1"})):
            if js is None:
                continue
            j = connect(ref, method, js, service="/%s/" % service,
                        timeout=120, headers=hdr)
            cj = canon_json(j.json()) if j.status == 200 else j.describe()
            r.check(cj == ca, "%s in JSON (%s) == the protoc answer" % (
                what, tag), "json %r\nproto %r" % (cj, ca))
        # Accept variants of the proto codec (Grafana sends
        # application/proto; a wildcard Accept must not change the codec).
        for acc in ("application/proto", "*/*"):
            x = ref.request("POST", path, body=encode(msg_in, text),
                            headers={"Content-Type": "application/proto",
                                     "Accept": acc}, timeout=120)
            try:
                cx = canon_text(parse_text(decode(msg_out, x.body))) \
                    if x.status == 200 else x.describe()
            except (RuntimeError, ValueError) as e:
                cx = str(e)
            r.check(cx == ca, "%s (protoc) with Accept: %s: same answer" % (
                what, acc), repr(cx)[:300])
        if same_cluster:
            b = rpc(qry, path,
                    msg_in, text, msg_out, r, what + " (protoc, cluster)")
            r.check(b is not None and canon_text(b) == ca,
                    "%s: cluster answer == single binary's (decoded)" % what,
                    "cluster %r\nsingle %r" % (b, a))
        return a

    Q = "querier.v1.QuerierService"
    rng_s = {"start": str(start), "end": str(end)}
    rng_c = {"start": start, "end": end}

    a = both(Q, "ProfileTypes", "querier.v1.ProfileTypesRequest",
             "start: %d end: %d" % (start, end),
             "querier.v1.ProfileTypesResponse", rng_s, rng_c)
    if a is not None:
        ids = sorted(first(p, "ID").decode() for p in a.get(
            "profile_types", []))
        r.check(set(all_tids) <= set(ids), "ProfileTypes lists every pushed "
                "type id (%d)" % len(all_tids), "%s vs %s" % (ids, all_tids))

    a = both(Q, "LabelNames", "types.v1.LabelNamesRequest",
             "matchers: %s start: %d end: %d" % (q(sel(svc)), start, end),
             "types.v1.LabelNamesResponse",
             dict(rng_s, matchers=[sel(svc)]),
             dict(rng_c, matchers=[sel(svc)]))
    if a is not None:
        names = [x.decode() for x in a.get("names", [])]
        r.check("service_name" in names and "__name__" in names and
                names == sorted(names), "LabelNames: sorted, has "
                "service_name and __name__", repr(names))

    a = both(Q, "LabelValues", "types.v1.LabelValuesRequest",
             "name: \"service_name\" start: %d end: %d" % (start, end),
             "types.v1.LabelValuesResponse",
             dict(rng_s, name="service_name"),
             dict(rng_c, name="service_name"))
    if a is not None:
        vals = [x.decode() for x in a.get("names", [])]
        r.eq([v for v in vals if v.startswith("pw")], svcs,
             "LabelValues service_name: exactly the pushed services")

    a = both(Q, "Series", "querier.v1.SeriesRequest",
             "matchers: %s label_names: \"service_name\" label_names: "
             "\"__profile_type__\" start: %d end: %d" % (
                 q(sel(svc)), start, end),
             "querier.v1.SeriesResponse",
             dict(rng_s, matchers=[sel(svc)],
                  label_names=["service_name", "__profile_type__"]),
             dict(rng_c, matchers=[sel(svc)],
                  labelNames=["service_name", "__profile_type__"]))
    if a is not None:
        got = sorted(tuple(sorted((first(p, "name").decode(),
                                   first(p, "value").decode())
                                  for p in ls.get("labels", [])))
                     for ls in a.get("labels_set", []))
        want = sorted(tuple(sorted((("service_name", svc),
                                    ("__profile_type__", t))))
                      for t in tids)
        r.eq(got, want, "Series of %s: one label set per sample type" % svc)

    ms_text = "profile_typeID: %s label_selector: %s start: %d end: %d" % (
        q(tid), q(sel(svc)), start, end)
    snake = dict(rng_s, profile_typeID=tid, label_selector=sel(svc))
    camel = dict(rng_c, profileTypeID=tid, labelSelector=sel(svc))
    a = both(Q, "SelectMergeStacktraces",
             "querier.v1.SelectMergeStacktracesRequest", ms_text,
             "querier.v1.SelectMergeStacktracesResponse", snake, camel)
    fg = first(a, "flamegraph", {}) if a else {}
    r.check(first(fg, "total") == want_total and len(fg.get("names", []))
            > 1, "SelectMergeStacktraces (protoc): total %d = the input's"
            % want_total, repr(first(fg, "total")))
    a = both(Q, "SelectMergeStacktraces",
             "querier.v1.SelectMergeStacktracesRequest",
             ms_text + " format: PROFILE_FORMAT_TREE",
             "querier.v1.SelectMergeStacktracesResponse",
             dict(snake, format="PROFILE_FORMAT_TREE"),
             dict(camel, format=2))
    r.check(a is not None and len(first(a, "tree", b"")) > 0 and
            "flamegraph" not in a, "SelectMergeStacktraces format "
            "PROFILE_FORMAT_TREE (enum by name in text): tree bytes only")

    a = both(Q, "SelectMergeProfile", "querier.v1.SelectMergeProfileRequest",
             ms_text, "google.v1.Profile", snake, camel)
    r.check(a is not None and len(a.get("sample", [])) > 0,
            "SelectMergeProfile: JSON google.v1.Profile == protoc decode")

    step = 3600.0 * 24 * 365
    ss_text = ms_text + " step: %g group_by: \"service_name\"" % step
    a = both(Q, "SelectSeries", "querier.v1.SelectSeriesRequest", ss_text,
             "querier.v1.SelectSeriesResponse",
             dict(snake, step=step, group_by=["service_name"]),
             dict(camel, step=step, groupBy=["service_name"]))
    if a is not None:
        pts = [p for s in a.get("series", []) for p in s.get("points", [])]
        r.check(len(a.get("series", [])) == 1 and
                sum(first(p, "value", 0) for p in pts) == want_total,
                "SelectSeries: one series, points sum to %d" % want_total,
                repr(a))

    a = both(Q, "Diff", "querier.v1.DiffRequest",
             "left { %s } right { %s }" % (ms_text, ms_text),
             "querier.v1.DiffResponse", {"left": snake, "right": snake},
             {"left": camel, "right": camel})
    dfg = first(a, "flamegraph", {}) if a else {}
    eq = first(dfg, "leftTicks") == first(dfg, "rightTicks") == want_total
    for lv in dfg.get("levels", []):
        v = lv.get("values", [])
        for i in range(0, len(v), 7):
            eq = eq and v[i:i + 3] == v[i + 3:i + 6]
    r.check(eq and len(dfg.get("levels", [])) > 0, "Diff of a range "
            "against itself (protoc): equal sides, leftTicks = rightTicks "
            "= %d" % want_total, repr(dfg)[:400])
    # Diff of two different real profiles of one type (protoc): the ticks
    # are the two inputs' totals, single and cluster alike.
    by_type = {}
    for cs in cases:
        by_type.setdefault(cs[3][0], []).append(cs)
    pair = next((v for v in by_type.values() if len(v) >= 2 and
                 total(v[0][1].stacks[0]) != total(v[1][1].stacks[0])), None)
    if pair is None:
        r.fail("two real profiles of one type for Diff")
    else:
        (s1, e1, n1, t1), (s2, e2, n2, t2) = pair[0], pair[1]
        dt = "left { %s } right { %s }" % tuple(
            "profile_typeID: %s label_selector: %s start: %d end: %d" % (
                q(t[0]), q(sel(sv)), start, end)
            for sv, t in ((s1, t1), (s2, t2)))
        got = []
        for srv in (ref, qry):
            d = rpc(srv, QUERIER + "Diff", "querier.v1.DiffRequest", dt,
                    "querier.v1.DiffResponse", r, "Diff of %s and %s" % (
                        n1, n2))
            f2 = first(d or {}, "flamegraph", {})
            got.append((first(f2, "leftTicks"), first(f2, "rightTicks"),
                        first(f2, "total")))
        w1, w2 = total(e1.stacks[0]), total(e2.stacks[0])
        r.check(got[0] == got[1] == (w1, w2, w1 + w2), "Diff (protoc) of "
                "%s and %s: leftTicks/rightTicks = the inputs' totals "
                "(%d, %d), single and cluster" % (n1, n2, w1, w2), repr(got))

    # Push in JSON (snake_case raw_profile, camelCase rawProfile, bytes as
    # base64) stores what the protoc-encoded Push stored.
    with open(next(p for p in pprof_files()
                   if os.path.basename(p) == name), "rb") as f:
        raw0 = f.read()
    for srv, qsrv, tag in ((ref, ref, "single"), (dist, qry, "cluster")):
        for js_svc, key in (("pwjsnake", "raw_profile"),
                            ("pwjcamel", "rawProfile")):
            pj = connect(srv, "Push", {"series": [{
                "labels": [{"name": "__name__", "value": tid.split(":")[0]},
                           {"name": "service_name", "value": js_svc}],
                "samples": [{key: base64.b64encode(raw0).decode()}]}]},
                service="/push.v1.PusherService/", timeout=120)
            ok = pj.status == 200 and pj.json() == {}
            outs = []
            for sv in (svc, js_svc):
                m = smolder_proto(qsrv, "SelectMergeProfile", encode(
                    "querier.v1.SelectMergeProfileRequest",
                    "profile_typeID: %s label_selector: %s start: %d "
                    "end: %d" % (q(tid), q(sel(sv)), start, end)))
                outs.append(raw_stacks(m.body, ws.root)
                            if m.status == 200 else m.describe())
            r.check(ok and outs[0] == outs[1] == exp.stacks[0],
                    "Push in JSON (%s, %s): the same profile as the "
                    "protoc-encoded Push" % (key, tag), pj.describe())

    # /render-diff agrees with the protoc-decoded Connect Diff.
    rd = ref.request("GET", "/render-diff", {
        "leftQuery": "%s%s" % (tid, sel(svc)), "leftFrom": "1",
        "leftUntil": str(end // 1000),
        "rightQuery": "%s%s" % (tid, sel(svc)), "rightFrom": "1",
        "rightUntil": str(end // 1000)})
    rj = rd.json() if rd.status == 200 else {}
    fb = rj.get("flamebearer", {})
    r.check(rd.status == 200 and
            fb.get("names") == [x.decode() for x in dfg.get("names", [])]
            and fb.get("levels") == [lv.get("values", [])
                                     for lv in dfg.get("levels", [])] and
            rj.get("leftTicks") == first(dfg, "leftTicks") and
            rj.get("rightTicks") == first(dfg, "rightTicks"),
            "/render-diff == the protoc-decoded Connect Diff (names, "
            "levels, ticks)", rd.describe())

    a = both(Q, "GetProfileStats", "querier.v1.GetProfileStatsRequest", "",
             "querier.v1.GetProfileStatsResponse", {}, {}, same_cluster=False)
    # The Push checks above write "now" to each side at a different moment
    # and the stats are rounded to 10 s buckets, so the newest profile may
    # be one bucket apart between the two (seen once in a -j1 run).
    b = rpc(qry, "/%s/GetProfileStats" % Q,
            "querier.v1.GetProfileStatsRequest", "",
            "querier.v1.GetProfileStatsResponse", r,
            "querier.GetProfileStats (protoc, cluster)")
    r.check(a is not None and b is not None and
            first(b, "data_ingested") == first(a, "data_ingested") and
            first(b, "oldest_profile_time") == first(a, "oldest_profile_time")
            and abs(first(b, "newest_profile_time", 0) -
                    first(a, "newest_profile_time", 0)) <= 10000,
            "querier.GetProfileStats: cluster answer == single binary's "
            "(newest within one 10 s bucket)", "cluster %r\nsingle %r" % (b, a))
    r.check(a is not None and first(a, "data_ingested") is True and
            0 < first(a, "oldest_profile_time", 0) <=
            first(a, "newest_profile_time", 0) <= end,
            "GetProfileStats: data_ingested, oldest <= newest", repr(a))

    a = both(Q, "AnalyzeQuery", "querier.v1.AnalyzeQueryRequest",
             "start: %d end: %d query: %s" % (start, end,
                                              q(tid + sel(svc))),
             "querier.v1.AnalyzeQueryResponse",
             dict(rng_s, query=tid + sel(svc)),
             dict(rng_c, query=tid + sel(svc)), same_cluster=False)
    if a is not None:
        imp = first(a, "query_impact", {})
        r.check(first(imp, "total_queried_series") == 1 and
                first(imp, "total_bytes_in_time_range", 0) > 0 and
                sum(first(s, "profile_count", 0)
                    for s in a.get("query_scopes", [])) >= 1,
                "AnalyzeQuery: 1 series queried, bytes > 0, >= 1 profile",
                repr(a))
    b = rpc(qry, "/%s/AnalyzeQuery" % Q, "querier.v1.AnalyzeQueryRequest",
            "start: %d end: %d query: %s" % (start, end, q(tid + sel(svc))),
            "querier.v1.AnalyzeQueryResponse", r, "AnalyzeQuery (cluster)")
    r.check(b is not None and first(first(b, "query_impact", {}),
                                     "total_queried_series") == 1,
            "AnalyzeQuery (cluster, protoc): 1 series queried", repr(b))

    sp_tid = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    sp_text = ("profile_typeID: %s label_selector: %s span_selector: %s "
               "start: %d end: %d" % (q(sp_tid), q(sel("pwspan")), q(SPAN),
                                      start, end))
    a = both(Q, "SelectMergeSpanProfile",
             "querier.v1.SelectMergeSpanProfileRequest", sp_text,
             "querier.v1.SelectMergeSpanProfileResponse",
             dict(rng_s, profile_typeID=sp_tid, label_selector=sel("pwspan"),
                  span_selector=[SPAN]),
             dict(rng_c, profileTypeID=sp_tid, labelSelector=sel("pwspan"),
                  spanSelector=[SPAN]))
    sfg = first(a, "flamegraph", {}) if a else {}
    want_span = sum(v for _, v, lb in SPAN_SAMPLES
                    if lb.get("span_id") == SPAN)
    r.check(first(sfg, "total") == want_span, "SelectMergeSpanProfile "
            "(protoc): total %d = the samples of span %s" % (want_span, SPAN),
            repr(sfg))

    hm_text = ("profile_typeID: %s label_selector: %s start: %d end: %d "
               "step: %g query_type: HEATMAP_QUERY_TYPE_INDIVIDUAL" % (
                   q(tid), q(sel(svc)), start, end, step))
    a = both(Q, "SelectHeatmap", "querier.v1.SelectHeatmapRequest", hm_text,
             "querier.v1.SelectHeatmapResponse",
             dict(snake, step=step, query_type="HEATMAP_QUERY_TYPE_"
                  "INDIVIDUAL"),
             dict(camel, step=step, queryType=1))
    if a is not None:
        counts = sum(sum(sl.get("counts", []))
                     for s in a.get("series", []) for sl in s.get("slots",
                                                                   []))
        r.check(counts == 1, "SelectHeatmap: the one pushed profile is "
                "counted once", repr(a)[:400])

    # Latency in the proto codec on every pushed profile of tid's type,
    # same run (printed for the report, not judged).
    whole = encode("querier.v1.SelectMergeStacktracesRequest",
                   "profile_typeID: %s label_selector: \"{}\" start: %d "
                   "end: %d" % (q(tid), start, end))
    whole_p = encode("querier.v1.SelectMergeProfileRequest",
                     "profile_typeID: %s label_selector: \"{}\" start: %d "
                     "end: %d" % (q(tid), start, end))
    diff = encode("querier.v1.DiffRequest", "left { %s } right { %s }" % (
        "profile_typeID: %s label_selector: \"{}\" start: %d end: %d" % (
            q(tid), start, end), ms_text))
    reqs = (("SelectMergeStacktraces", whole),
            ("SelectMergeProfile", whole_p), ("Diff", diff))
    for srv, tag in ((ref, "single"), (qry, "cluster RF=3")):
        print("latency, proto codec (%s, %d profiles of %s): %s" % (
            tag, len(by_type.get(tid, [])), tid,
            p50_latencies(r, srv, tag, reqs, 7, smolder_proto)))

    # settings.v1, capabilities.v1, version.v1.
    S = "settings.v1.SettingsService"
    for srv, tag in ((ref, "single"), (qry, "cluster querier")):
        a = rpc(srv, "/%s/Set" % S, "settings.v1.SetSettingsRequest",
                'setting { name: "pluginSettings" value: "{\\"p\\":1}" '
                'modifiedAt: 1700000000000 }',
                "settings.v1.SetSettingsResponse", r, "Set (%s)" % tag)
        st = first(a or {}, "setting", {})
        r.check(first(st, "name") == b"pluginSettings" and
                first(st, "value") == b'{"p":1}', "settings.v1 Set "
                "(protoc, %s) answers the setting" % tag, repr(a))
    a = both(S, "Get", "settings.v1.GetSettingsRequest", "",
             "settings.v1.GetSettingsResponse", {}, None)
    r.check(a is not None and any(
        first(s, "name") == b"pluginSettings" and
        first(s, "value") == b'{"p":1}' and
        first(s, "modifiedAt") == 1700000000000
        for s in a.get("settings", [])),
        "settings.v1 Get (protoc) reads the set value and modifiedAt",
        repr(a))
    for srv, tag in ((ref, "single"), (qry, "cluster querier")):
        a = rpc(srv, "/%s/Delete" % S, "settings.v1.DeleteSettingsRequest",
                'name: "pluginSettings"', "settings.v1.DeleteSettingsResponse",
                r, "Delete (%s)" % tag)
        g = rpc(srv, "/%s/Get" % S, "settings.v1.GetSettingsRequest", "",
                "settings.v1.GetSettingsResponse", r, "Get (%s)" % tag)
        r.check(a == {} and g is not None and not any(
            first(s, "name") == b"pluginSettings"
            for s in g.get("settings", [])),
            "settings.v1 Delete (protoc, %s) removes it" % tag, repr(g))

    a = both("capabilities.v1.FeatureFlagsService", "GetFeatureFlags",
             "capabilities.v1.GetFeatureFlagsRequest", "",
             "capabilities.v1.GetFeatureFlagsResponse", {}, None)
    r.check(a is not None and len(a.get("feature_flags", [])) >= 1 and
            all(first(f, "name") for f in a["feature_flags"]),
            "GetFeatureFlags (protoc): named feature flags", repr(a))
    a = both("version.v1.Version", "Version", "version.v1.VersionRequest",
             "", "version.v1.VersionResponse", {}, None)
    r.check(a == {"QuerierAPI": [1]}, "Version (protoc): QuerierAPI 1",
            repr(a))


def smolder_proto(srv, method, body):
    return srv.request("POST", QUERIER + method, body=body,
                       headers={"Content-Type": "application/proto"},
                       timeout=120)


if __name__ == "__main__":
    main()
