#!/usr/bin/env python3
"""
test_ingest_oracle.py -- every pprof we have goes in through /ingest and
comes back out of /render?format=collapsed exactly as `go tool pprof -raw`
reads it (oracle.py), for every sample type.

Inputs:
  - every protobuf pprof in tests/data (pprof__, parca__, speedscope__.prof);
    the legacy non-protobuf pprof__gobench.cpu / pprof__java.cpu and the
    .string text dumps must be rejected with 422, and so must
    parca__normalizer__profile.pb.gz (its sample types are empty strings,
    so the metric name is empty);
  - the files ../shared/testdata/profiles/SOURCES.md lists under Pyroscope's
    TestIngest ("Golden input/expected pairs" item 3), with their
    sample_type_config and spy names, and the upstream-expected profile
    type ids (skipped with a note when ../shared is absent);
  - the expected rejections there: invalid_utf8 (422), profile +
    prev_profile (422 "unsupported client version..."), the broken dotnet
    profile without spyName=dotnetspy (422);
  - fresh Go profiles from tests/tools/genprof (skipped when `go` is
    missing).

Uploads alternate between a raw body (format=pprof) and the multipart form
pyroscope-go sends (from/until in unix ns), and between /ingest and
/pyroscope/ingest.  Each file gets its own app name.  For each sample type
the expected __profile_type__ is computed with Pyroscope's metric rule and
/render's collapsed output must equal the oracle's stacks exactly.

The server runs with Pyroscope's limits raised where the corpus needs it
(pprof__large.cpu has 20430 samples > max_profile_stacktrace_samples 16000
and 2.3 MiB > the 2 MiB ingestion burst), using those of the flags the
binary lists in -help.  SMOLDER_ORACLE_FLAGS overrides them
(space-separated).  SM_INGEST_FORM=raw or multipart forces one upload form
(cases with a sample_type_config always use multipart).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from smolder import (Server, ServerError, check_error, data_dir,  # noqa: E402
                     run_script, shared_profiles_dir, source_dir,
                     supported_flags)

BUDGET_S = 175

LIMIT_FLAGS = [
    "-validation.max-profile-stacktrace-samples=100000",
    "-distributor.ingestion-rate-limit-mb=1000",
    "-distributor.ingestion-burst-size-mb=1000",
]

LEGACY_NON_PROTOBUF = ("pprof__gobench.cpu", "pprof__java.cpu")

GO_HEAP = ["memory:alloc_objects:count:space:bytes",
           "memory:alloc_space:bytes:space:bytes",
           "memory:inuse_objects:count:space:bytes",
           "memory:inuse_space:bytes:space:bytes"]
GO_CPU = ["process_cpu:samples:count:cpu:nanoseconds",
          "process_cpu:cpu:nanoseconds:cpu:nanoseconds"]

# Pyroscope's TestIngest (pkg/test/integration/ingest_pprof_test.go) as
# listed in SOURCES.md item 3: (file, spyName, sample_type_config, type ids
# upstream checks).  Each must ingest with 200 and round-trip.
SHARED_ROUND_TRIP = [
    ("pyroscope__heap", None, None, GO_HEAP),
    ("pyroscope__heap_delta", None, None, GO_HEAP),
    ("pyroscope__profile_java", None, None,
     ["process_cpu:cpu:nanoseconds:cpu:nanoseconds"]),
    ("pyroscope__go.cpu.labels.pprof", None, None, GO_CPU),
    ("pyroscope__cpu.pb.gz", None, None, GO_CPU),
    ("pyroscope__cpu-js.pb.gz", None, None,
     ["wall:sample:count:wall:microseconds",
      "wall:wall:microseconds:wall:microseconds"]),
    ("pyroscope__heap.pb", None, None, GO_HEAP),
    ("pyroscope__heap.pb.gz", None, None, GO_HEAP),
    ("pyroscope__heap-js.pprof", None, None,
     ["memory:objects:count:space:bytes", "memory:space:bytes:space:bytes"]),
    ("pyroscope__nodejs-heap.pb.gz", None, None,
     ["memory:inuse_objects:count:inuse_space:bytes",
      "memory:inuse_space:bytes:inuse_space:bytes"]),
    ("pyroscope__nodejs-wall.pb.gz", None, None,
     ["wall:samples:count:wall:microseconds",
      "wall:wall:microseconds:wall:microseconds"]),
    ("pyroscope__req_2.pprof", None, "pyroscope__req_2.st.json",
     ["goroutines:goroutine:count:goroutine:count"]),
    ("pyroscope__req_3.pprof", None, "pyroscope__req_3.st.json",
     ["block:contentions:count:contentions:count",
      "block:delay:nanoseconds:contentions:count"]),
    ("pyroscope__req_4.pprof", None, "pyroscope__req_4.st.json",
     ["mutex:contentions:count:contentions:count",
      "mutex:delay:nanoseconds:contentions:count"]),
    ("pyroscope__req_5.pprof", None, "pyroscope__req_5.st.json",
     ["memory:alloc_objects:count:space:bytes",
      "memory:alloc_space:bytes:space:bytes"]),
    ("pyroscope__pyspy-1.pb.gz", "scripting", None,
     ["process_cpu:samples:count::milliseconds"]),
    ("pyroscope__dotnet-pprof-3.pb.gz", "dotnetspy",
     "pyroscope__dotnet-pprof-3.st.json",
     ["process_cpu:cpu:nanoseconds::nanoseconds"]),
]

# Block profiles carry the same sample types as mutex profiles; pyroscope-go
# tells them apart with this sample_type_config.
GO_BLOCK_CONFIG = json.dumps({
    "contentions": {"units": "lock_samples", "display-name": "block_count"},
    "delay": {"units": "lock_nanoseconds", "display-name": "block_duration"},
}).encode()


def app_name(prefix, fname, idx):
    s = re.sub(r"[^A-Za-z0-9_-]", "_", fname)
    return "%s-%02d-%s" % (prefix, idx, s)[:120]


class Case:
    def __init__(self, path, spy=None, st_config_path=None, st_config=None,
                 upstream_ids=None, label=None, form=None):
        self.path = path
        self.name = label or os.path.basename(path)
        self.spy = spy
        self.st_bytes = st_config
        if st_config_path:
            with open(st_config_path, "rb") as f:
                self.st_bytes = f.read()
        self.upstream_ids = upstream_ids
        self.form = form


def post(srv, case, app, idx):
    """Upload a case: raw (format=pprof) or multipart, alternating paths.
    Returns (Response, description of the form used)."""
    with open(case.path, "rb") as f:
        body = f.read()
    q = {"name": app}
    if case.spy:
        q["spyName"] = case.spy
    path = "/pyroscope/ingest" if idx % 3 == 2 else "/ingest"
    form = case.form or os.environ.get("SM_INGEST_FORM") or None
    if case.st_bytes is not None:
        form = "multipart"
    multipart = form == "multipart" or (form is None and idx % 2 == 1)
    if multipart:
        now_ns = time.time_ns()
        q["from"] = str(now_ns)
        q["until"] = str(now_ns)
        q["sampleRate"] = "100"
        return (srv.ingest_multipart(q, body, case.st_bytes, path=path),
                "multipart%s %s" % ("+config" if case.st_bytes else "",
                                    path))
    q["format"] = "pprof"
    return srv.ingest(q, body, "application/octet-stream", path=path), \
        "raw %s" % path


def check_round_trip(r, srv, case, idx, workdir):
    app = app_name("oracle", case.name, idx)
    st_json = json.loads(case.st_bytes) if case.st_bytes else None
    try:
        exp = oracle.expected_for(case.path, spy=case.spy,
                                  st_config=st_json, workdir=workdir)
    except (oracle.OracleError, ValueError) as e:
        r.fail("%s: oracle failed" % case.name, str(e))
        return
    if case.upstream_ids is not None:
        missing = [t for t in case.upstream_ids if t not in exp.type_ids]
        r.check(not missing, "%s: metric rule gives upstream's type ids"
                % case.name, "upstream %r\nrule     %r" % (
                    case.upstream_ids, exp.type_ids))
    resp, form = post(srv, case, app, idx)
    if not r.check(resp.status == 200, "%s: ingest (%s) -> 200" % (
            case.name, form), resp.describe()):
        return
    if not srv.alive():
        r.fail("%s: server alive after ingest" % case.name)
        return
    for ti, type_id in enumerate(exp.type_ids):
        want = exp.stacks[ti]
        rpath = "/pyroscope/render" if (idx + ti) % 2 else "/render"
        rr, got = srv.render_collapsed(type_id, app, path=rpath)
        what = "%s: %s collapsed (%d stacks, total %d)" % (
            case.name, type_id, len(want), sum(want.values()))
        if got is None:
            r.fail(what, "render: " + rr.describe())
            continue
        r.check(got == want, what, oracle.diff_stacks(want, got))


def check_reject(r, srv, what, path, query, status, form="raw",
                 st_bytes=None, prev=False, message_has=None):
    with open(path, "rb") as f:
        body = f.read()
    if form == "multipart":
        resp = srv.ingest_multipart(query, body, st_bytes,
                                    prev_profile=body if prev else None)
    else:
        q = dict(query)
        q["format"] = "pprof"
        resp = srv.ingest(q, body, "application/octet-stream")
    check_error(r, resp, what, (status,), message_has and (
        lambda m: message_has in m), "lacks %r" % (message_has,))
    r.check(srv.alive(), "%s: server still alive" % what)


def genprof_dir(r, tmp):
    """Build and run tests/tools/genprof; returns the output dir or None."""
    if not oracle.have_go():
        r.skip("genprof profiles", "go is not installed")
        return None
    out = os.path.join(tmp, "genprof-out")
    exe, why = oracle.build_genprof(tmp)
    if exe is None:
        r.fail("genprof builds", why)
        return None
    try:
        g = subprocess.run([exe, "-out", out], capture_output=True,
                           timeout=60)
        if g.returncode != 0:
            r.fail("genprof runs", g.stderr.decode("utf-8", "replace"))
            return None
    except subprocess.TimeoutExpired as e:
        r.fail("genprof in time", str(e))
        return None
    r.ok("genprof: " + g.stdout.decode().strip())
    return out


def start_server(r):
    flags = os.environ.get("SMOLDER_ORACLE_FLAGS")
    if flags is not None:
        flags = flags.split()
    else:
        # Only the limits this binary has (unknown flags stop it).
        have = supported_flags()
        flags = []
        for f in LIMIT_FLAGS:
            name = f.lstrip("-").split("=")[0]
            if name in have:
                flags.append(f)
            else:
                print("# note: the server has no -%s flag; not raised" % name)
    try:
        return Server(extra_flags=flags, name="smolder").start()
    except ServerError as e:
        if not flags:
            raise
        r.fail("server starts with raised limits %s" % " ".join(flags),
               "%s\n(retrying with default limits; pprof__large.cpu will "
               "then be rejected)" % e)
        return Server(name="smolder").start()


def main(r):
    if not oracle.have_go():
        r.skip_all("go is not installed: go tool pprof is the oracle")
    shared = shared_profiles_dir()
    tmp = tempfile.mkdtemp(prefix="smolder-oracle-")
    r.at_end(lambda: shutil.rmtree(tmp, ignore_errors=True))
    try:
        srv = start_server(r)
    except ServerError as e:
        r.fail("server starts", str(e))
        return
    idx = 0

    # -- tests/data ------------------------------------------------------
    d = data_dir()
    for fname in sorted(os.listdir(d)):
        path = os.path.join(d, fname)
        if not os.path.isfile(path):
            continue
        if fname in LEGACY_NON_PROTOBUF or fname.endswith(".string"):
            check_reject(r, srv, "%s (not a protobuf pprof)" % fname,
                         path, {"name": app_name("reject", fname, idx)},
                         422)
            idx += 1
            continue
        if fname.startswith("jfrparser__") or fname.endswith(
                (".md", ".txt", ".jfr", ".json")):
            continue
        if not oracle.looks_like_pprof(path):
            continue
        if fname == "parca__normalizer__profile.pb.gz":
            check_reject(r, srv, "%s (empty sample type names: empty "
                         "metric)" % fname, path,
                         {"name": app_name("reject", fname, idx)}, 422)
            idx += 1
            continue
        check_round_trip(r, srv, Case(path), idx, tmp)
        idx += 1

    # -- ../shared TestIngest list ---------------------------------------
    if shared is None:
        r.skip_corpus("../shared TestIngest profiles",
                      "../shared/testdata/profiles is absent")
    else:
        for fname, spy, st, ids in SHARED_ROUND_TRIP:
            path = os.path.join(shared, fname)
            if not os.path.exists(path):
                r.fail("%s present in ../shared" % fname)
                continue
            case = Case(path, spy=spy, upstream_ids=ids,
                        st_config_path=os.path.join(shared, st)
                        if st else None)
            check_round_trip(r, srv, case, idx, tmp)
            idx += 1
        # The dotnet fix without a sample_type_config, as a raw body.
        case = Case(os.path.join(shared, "pyroscope__dotnet-pprof-3.pb.gz"),
                    spy="dotnetspy", form="raw",
                    upstream_ids=["process_cpu:cpu:nanoseconds::"
                                  "nanoseconds"],
                    label="pyroscope__dotnet-pprof-3.pb.gz (raw)")
        check_round_trip(r, srv, case, idx, tmp)
        idx += 1
        cpu = os.path.join(shared, "pyroscope__cpu.pb.gz")
        check_reject(r, srv, "pyroscope__cpu.pb.gz as profile + "
                     "prev_profile", cpu,
                     {"name": app_name("reject", "prev", idx),
                      "spyName": "gospy"}, 422, form="multipart",
                     prev=True, message_has="unsupported client version")
        idx += 1
        check_reject(r, srv, "pyroscope__invalid_utf8.pb.gz",
                     os.path.join(shared, "pyroscope__invalid_utf8.pb.gz"),
                     {"name": app_name("reject", "utf8", idx)}, 422)
        idx += 1
        check_reject(r, srv, "pyroscope__dotnet-pprof-3.pb.gz without "
                     "spyName=dotnetspy",
                     os.path.join(shared,
                                  "pyroscope__dotnet-pprof-3.pb.gz"),
                     {"name": app_name("reject", "dotnet", idx)}, 422)
        idx += 1

    # -- genprof ---------------------------------------------------------
    out = genprof_dir(r, tmp)
    if out:
        gen = [
            Case(os.path.join(out, "cpu.pb.gz"), spy="gospy",
                 upstream_ids=GO_CPU, label="genprof cpu", form="raw"),
            Case(os.path.join(out, "heap.pb.gz"), spy="gospy",
                 upstream_ids=GO_HEAP, label="genprof heap",
                 form="multipart"),
            Case(os.path.join(out, "mutex.pb.gz"), spy="gospy",
                 upstream_ids=["mutex:contentions:count:contentions:count",
                               "mutex:delay:nanoseconds:contentions:count"],
                 label="genprof mutex", form="raw"),
            Case(os.path.join(out, "block.pb.gz"), spy="gospy",
                 st_config=GO_BLOCK_CONFIG,
                 upstream_ids=["block:contentions:count:contentions:count",
                               "block:delay:nanoseconds:contentions:count"],
                 label="genprof block", form="multipart"),
            Case(os.path.join(out, "goroutine.pb.gz"), spy="gospy",
                 upstream_ids=["goroutines:goroutine:count:goroutine:count"],
                 label="genprof goroutine", form="raw"),
        ]
        for case in gen:
            check_round_trip(r, srv, case, idx, tmp)
            idx += 1

    r.check(srv.ready(), "server still ready after all uploads")


if __name__ == "__main__":
    run_script("test_ingest_oracle", BUDGET_S, main)
