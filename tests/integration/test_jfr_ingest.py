#!/usr/bin/env python3
"""
test_jfr_ingest.py -- Java Flight Recorder uploads through the real binary.

Every jfrparser__<name>.jfr.gz in tests/data and ../shared/testdata/profiles
(grafana/jfr-parser's test recordings, see tests/data/SOURCES.md) is sent to
/ingest?format=jfr&sampleRate=100 the ways pyroscope-java and other clients
send it:
  - raw body, gzipped as stored (no labels);
  - multipart form, "jfr" part decompressed, and, when the recording has a
    labels sidecar (<name>.labels.pb.gz / .labels.gz), a gzipped "labels"
    part (the LabelsSnapshot);
  - /pyroscope/ingest with the multipart form and no labels part (for
    the recordings below 256 KiB gzipped, to keep the ASan run short).
Each upload gets its own app name.  For every golden
<name>_<i>_<metric>_<type>__<unit>[ <type>__<unit>]_expected_collapsed.txt.gz
(written by jfr-parser's own test) and each of its value columns, /render
?format=collapsed for the profile type id must equal the golden's stacks,
with the golden's frames formatted the server's way (jfr-parser's goldens
append ":<line>" to every frame; stored frames carry no line) and equal
stacks summed.

Then the refusals: a corrupt recording, a truncated gzip recording, an
unsupported JFR version, a multipart form without a "jfr" part and a
corrupt labels part each get a 4xx (never a 5xx) with a message that says
what was wrong, and the server stays up.
"""

import gzip
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from smolder import (Results, Server, data_dir, encode_multipart,  # noqa: E402
                     install_timeout, shared_profiles_dir, supported_flags)

BUDGET_S = 280

LIMIT_FLAGS = [
    "-validation.max-profile-stacktrace-samples=1000000",
    "-distributor.ingestion-rate-limit-mb=1000",
    "-distributor.ingestion-burst-size-mb=1000",
]

# (metric, period type, period unit) as the reader names JFR profiles.
PERIODS = {
    ("process_cpu", "cpu"): ("cpu", "nanoseconds"),
    ("wall", "wall"): ("wall", "nanoseconds"),
    ("mutex", "contentions"): ("mutex", "count"),
    ("mutex", "delay"): ("mutex", "count"),
    ("block", "contentions"): ("block", "count"),
    ("block", "delay"): ("block", "count"),
    ("memory", "live"): ("objects", "count"),
    ("memory", "malloc_objects"): ("", ""),
    ("memory", "malloc_bytes"): ("", ""),
}
METRICS = ("process_cpu", "memory", "mutex", "block", "wall")
SUFFIX = "_expected_collapsed.txt.gz"
LINE_RE = re.compile(r":\d+(;|$)")


def type_id(metric, st, su):
    pt, pu = PERIODS.get((metric, st), ("space", "bytes"))
    return "%s:%s:%s:%s:%s" % (metric, st, su, pt, pu)


def goldens_of(d, base):
    """[(file, metric, [(type, unit), ...])] for recording `base` in d."""
    out = []
    pat = re.compile(re.escape(base) + r"_(\d+)_(.*)" + re.escape(SUFFIX)
                     + "$")
    for fn in sorted(os.listdir(d)):
        m = pat.match(fn)
        if not m:
            continue
        spec = m.group(2)
        metric = next((x for x in METRICS if spec.startswith(x + "_")), None)
        if metric is None:
            continue
        cols = []
        for tok in spec[len(metric) + 1:].split(" "):
            t, _, u = tok.partition("__")
            cols.append((t, u))
        out.append((fn, metric, cols))
    return out


def golden_stacks(path, col):
    """{stack without line numbers: value of column col}, values <= 0
    dropped (the server stores none)."""
    acc = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for ln in f:
            ln = ln.rstrip("\n")
            if not ln:
                continue
            stack, _, vals = ln.rpartition(" [")
            v = int(vals.rstrip("]").split()[col])
            # drop each frame's ":<line>"; frame names may hold ';'
            # (async-profiler's "libc-2.17.so;649be141 (deleted)")
            k = LINE_RE.sub(r"\1", stack)
            acc[k] = acc.get(k, 0) + v
    return {k: v for k, v in acc.items() if v > 0}


def recordings():
    """[(dir, base, jfr path, labels path or None)], tests/data first;
    a recording in both directories is taken once."""
    seen = set()
    out = []
    for d in (data_dir(), shared_profiles_dir()):
        if d is None or not os.path.isdir(d):
            continue
        for fn in sorted(os.listdir(d)):
            if not (fn.startswith("jfrparser__") and fn.endswith(".jfr.gz")):
                continue
            base = fn[:-len(".jfr.gz")]
            if base in seen:
                continue
            seen.add(base)
            lab = None
            for s in (".labels.pb.gz", ".labels.gz"):
                if os.path.exists(os.path.join(d, base + s)):
                    lab = os.path.join(d, base + s)
            out.append((d, base, os.path.join(d, fn), lab))
    return out


def upload(srv, app, how, jfr_gz, labels_gz):
    q = {"name": app, "format": "jfr", "sampleRate": "100",
         "spyName": "javaspy"}
    if how == "raw":
        return srv.ingest(q, jfr_gz, "application/octet-stream")
    parts = [("jfr", "jfr", gzip.decompress(jfr_gz), None)]
    if how == "multipart+labels":
        parts.append(("labels", "labels", labels_gz, None))
    body, ctype = encode_multipart(parts)
    path = "/pyroscope/ingest" if how == "multipart-pyroscope" else "/ingest"
    return srv.ingest(q, body, ctype, path=path)


def check_recording(r, srv, d, base, jfr_path, lab_path, idx):
    with open(jfr_path, "rb") as f:
        jfr_gz = f.read()
    labels_gz = None
    if lab_path:
        with open(lab_path, "rb") as f:
            labels_gz = f.read()
    gl = goldens_of(d, base)
    if not r.check(gl, "%s: has goldens" % base):
        return
    # the multipart/pyroscope path once per small recording (the big ones
    # only raw and with labels, to stay in budget under ASan)
    hows = ["raw"]
    if len(jfr_gz) < 256 << 10:
        hows.append("multipart-pyroscope")
    if labels_gz is not None:
        hows.append("multipart+labels")
    short = base[len("jfrparser__"):]
    for hi, how in enumerate(hows):
        app = re.sub(r"[^A-Za-z0-9_-]", "_", "jfr-%02d-%d-%s" % (
            idx, hi, short))[:100]
        resp = upload(srv, app, how, jfr_gz, labels_gz)
        if not r.check(resp.status == 200, "%s: ingest %s -> 200" % (
                short, how), resp.describe()):
            continue
        for fn, metric, cols in gl:
            for ci, (st, su) in enumerate(cols):
                tid = type_id(metric, st, su)
                want = golden_stacks(os.path.join(d, fn), ci)
                rr, got = srv.render_collapsed(tid, app)
                what = "%s (%s): %s equals golden (%d stacks, total %d)" % (
                    short, how, tid, len(want), sum(want.values()))
                if got is None:
                    r.fail(what, "render: " + rr.describe())
                    continue
                r.check(got == want, what, oracle.diff_stacks(want, got))


def check_refusals(r, srv):
    with open(os.path.join(data_dir(), "jfrparser__nativemem.jfr.gz"),
              "rb") as f:
        gz = f.read()
    raw = bytearray(gzip.decompress(gz))
    v3 = bytearray(raw)
    v3[4:6] = b"\x00\x03"
    cut = bytes(raw[:len(raw) // 2])
    cases = [
        ("garbage body", b"this is not a flight recording", None,
         "invalid JFR"),
        ("truncated recording", cut, None, "invalid JFR"),
        ("truncated gzip", gz[:len(gz) // 2], None, ""),
        ("JFR version 3", bytes(v3), None, "version"),
    ]
    for what, body, _, needle in cases:
        resp = srv.ingest({"name": "jfr-bad", "format": "jfr"}, body,
                          "application/octet-stream")
        r.check(400 <= resp.status < 500 and needle in resp.error_message(),
                "%s -> 4xx with %r" % (what, needle), resp.describe())
    body, ctype = encode_multipart([("profile", "p", bytes(raw), None)])
    resp = srv.ingest({"name": "jfr-bad", "format": "jfr"}, body, ctype)
    r.check(400 <= resp.status < 500 and '"jfr"' in resp.error_message(),
            "multipart without a jfr part -> 4xx", resp.describe())
    body, ctype = encode_multipart([("jfr", "jfr", bytes(raw), None),
                                    ("labels", "labels", b"\x0a\x7f\x01",
                                     None)])
    resp = srv.ingest({"name": "jfr-bad", "format": "jfr"}, body, ctype)
    r.check(400 <= resp.status < 500 and "label" in resp.error_message(),
            "corrupt labels part -> 4xx", resp.describe())
    r.check(srv.alive() and srv.ready(), "server up after the refusals")


def main():
    r = Results("test_jfr_ingest")
    install_timeout(BUDGET_S)
    recs = recordings()
    if not recs:
        r.skip_all("no jfrparser__*.jfr.gz in tests/data or ../shared")
    if shared_profiles_dir() is None:
        print("note: ../shared absent; checking tests/data only")
    have = supported_flags()
    flags = [f for f in LIMIT_FLAGS if f[1:].split("=")[0] in have]
    t0 = time.monotonic()
    with Server(extra_flags=flags) as srv:
        for idx, (d, base, jp, lp) in enumerate(recs):
            check_recording(r, srv, d, base, jp, lp, idx)
        check_refusals(r, srv)
        srv.check_stopped(r)
    print("%d recordings in %.1fs" % (len(recs), time.monotonic() - t0))
    r.finish()


if __name__ == "__main__":
    main()
