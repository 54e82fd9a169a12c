#!/usr/bin/env python3
"""
test_otlp.py -- OpenTelemetry profiles in (OTLP/HTTP, POST
/v1development/profiles, and OTLP/gRPC, ProfilesService/Export on
-grpc.listen-address), sent by a client built from the upstream
opentelemetry-proto files: tests/clients/otlp_client.mjs encodes with
protobuf-es over the descriptor set Debian's protoc compiles from
third_party/opentelemetry-proto (v1.11.0's files, v1.10.0's wire format), and sends
gRPC with connect-es's gRPC transport -- no code of ours builds the
requests' bytes.

  1. Every real pprof in tests/data (and ../shared/testdata/profiles
     when present) that the oracle reads is converted to one OTLP request
     the way the Collector's pprof translator maps it (one OTLP Profile
     per sample type, the dictionary, labels as attributes, span ids as
     Links) and sent, half of them gzipped, a quarter over gRPC, a
     third of the rest in OTLP's JSON encoding (proto3 JSON with hex ids)
     and the rest in protobuf.  For every (file, sample
     type), SelectMergeProfile of its service is run through `go tool
     pprof -raw` and must equal the input's stacks and values
     (oracle.py): what went in comes out, exactly.
  2. Span profiles: a pprof whose samples carry span_id labels goes in as
     Links; SelectMergeSpanProfile of a span id answers exactly that
     span's samples.
  3. The profile id is the idempotency key: the same request sent twice
     counts once.
  4. Refusals, nothing stored: an index outside its table (what a
     request of an older alpha format looks like) is 400 naming the
     accepted version (over gRPC: INVALID_ARGUMENT, the same message); a
     body that is not protobuf is 400; another content type is 415.
"""

import base64
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
import node_clients  # noqa: E402
from durability import (DataServer, connect, limit_flags,  # noqa: E402
                        workspace_for)
from smolder import data_dir, free_port, run_script  # noqa
from test_query_diff_pprof import (merge_req_pb, pprof_files,  # noqa: E402
                                   proto_call, raw_stacks)

CLIENT_DIR = node_clients.CLIENT_DIR
PROTOS = ["google/v1/profile.proto",
          "opentelemetry/proto/collector/profiles/v1development/"
          "profiles_service.proto"]
BASE = (int(time.time()) // 3600) * 3600 - 2 * 3600
COMMON = ["-validation.reject-older-than=0", "-validation.reject-newer-than=0",
          "-validation.max-profile-stacktrace-samples=100000",
          "-querier.max-flamegraph-nodes-max=0"] + limit_flags()
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def send(r, node, base_url, dset, ws, jobs, name):
    path = ws.path(name + ".json")
    with open(path, "w") as f:
        json.dump(jobs, f)
    p = subprocess.run([node, os.path.join(CLIENT_DIR, "otlp_client.mjs"),
                        base_url, dset, path], capture_output=True,
                       text=True, timeout=300)
    r.check(p.returncode == 0, "%s: the OTLP client ran" % name,
            p.stderr[-1500:])
    return json.loads(p.stdout) if p.returncode == 0 else []


def body(r):
    node, protoc = node_clients.ensure(r)
    if not oracle.have_go():
        r.skip_all("go is not installed (go tool pprof is the oracle)")
    ws = workspace_for(r, "otlp")
    dset = node_clients.descriptor_set(
        r, protoc, ws.path("otlp.pb"), PROTOS,
        "protoc compiled the upstream OTLP protos")
    gport = free_port()
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=COMMON + [
        "-grpc.listen-address=127.0.0.1:%d" % gport]).start()
    url = "http://127.0.0.1:%d" % srv.port
    gurl = "http://127.0.0.1:%d" % gport

    # 1. real profiles in, SelectMergeProfile out
    cases, jobs = [], []
    for i, path in enumerate(pprof_files()):
        exp = oracle.expected_or_skip(r, path, workdir=ws.root)
        if exp is None or exp.notes or not exp.type_ids:
            continue
        svc, t = "ot%02d" % i, BASE + 60 * i
        job = {"file": path, "service": svc, "time_ms": t * 1000,
               "gzip": i % 2 == 1, "json": i % 3 == 2}
        if i % 4 == 3:
            job.update(grpc=gurl, json=False)
        jobs.append(job)
        cases.append((svc, t, exp, os.path.basename(path)))
    got = send(r, node, url, dset, ws, jobs, "real")
    for g in got:               # a gRPC refusal reads as its HTTP status
        if g["status"] == -1:
            g["status"] = 400 if g.get("code") == "InvalidArgument" else 500
    r.check(sum(1 for j in jobs if j.get("grpc")) >= 2, "%d of the real "
            "profiles go over gRPC" % sum(1 for j in jobs if j.get("grpc")))
    bad = [(c[3], g["status"], base64.b64decode(g["body"])[:200])
           for c, g in zip(cases, got) if g["status"] != 200]
    # the oracle's 422s (a profile /ingest refuses) are 400s here
    ok_cases = [c for c, g in zip(cases, got) if g["status"] == 200]
    # /ingest refuses Parca's normalizer profile too (no sample type
    # names: an empty metric), 422 there, 400 here as for Push
    r.check(len(ok_cases) >= 5 and all(
        b[0] == "parca__normalizer__profile.pb.gz" and b[1] == 400
        for b in bad), "%d real profiles accepted as OTLP; refused only "
        "what /ingest refuses (%s)" % (len(ok_cases), [b[0] for b in bad]),
        str(bad)[:600])
    good = ntypes = 0
    for svc, t, exp, name in ok_cases:
        for k, tid in enumerate(exp.type_ids):
            ntypes += 1
            resp = proto_call(srv, "SelectMergeProfile", merge_req_pb(
                tid, '{service_name="%s"}' % svc, t * 1000,
                (t + 10) * 1000))
            stacks = raw_stacks(resp.body, ws.root) \
                if resp.status == 200 else None
            if stacks == exp.stacks[k]:
                good += 1
            else:
                r.fail("OTLP in, SelectMergeProfile out: %s %s" % (name, tid),
                       oracle.diff_stacks(exp.stacks[k], stacks or {}))
    r.check(good == ntypes and ntypes > 0, "SelectMergeProfile -> pprof "
            "-raw equals the input for %d of %d (file, sample type) pairs "
            "sent as OTLP" % (good, ntypes))

    # 2. span ids as Links
    from test_span_profile import S, UPLOADS, make_pprof, span_json
    t0, samples = UPLOADS[0]
    span_file = ws.path("spans.pb")
    with open(span_file, "wb") as f:
        f.write(make_pprof(samples))
    g = send(r, node, url, dset, ws, [
        {"file": span_file, "service": "otspan", "time_ms": t0 * 1000},
        {"file": span_file, "service": "otspanjs", "time_ms": t0 * 1000,
         "json": True}], "spans")
    r.check(len(g) == 2 and all(x["status"] == 200 for x in g),
            "a pprof with span_id labels, as OTLP Links (protobuf and JSON "
            "with hex span ids)", str(g)[:300])
    want = {}
    for stack, value, labels in samples:
        if labels.get("span_id", "").lower() == S[0]:
            k = ";".join(stack)
            want[k] = want.get(k, 0) + value
    resp, fg = span_json(srv, [S[0]], '{service_name="otspan"}', t0 - 10,
                         t0 + 60)
    r.check(fg is not None and fg[1] == want and fg[0] == sum(want.values()),
            "SelectMergeSpanProfile of span %s: exactly its samples (%s)"
            % (S[0], want), resp.describe() if fg is None else str(fg))
    resp, fgj = span_json(srv, [S[0]], '{service_name="otspanjs"}', t0 - 10,
                          t0 + 60)
    r.check(fgj is not None and fgj == fg, "the same through OTLP JSON (hex "
            "span ids)", resp.describe() if fgj is None else str(fgj))

    # 3. the same request twice, with a profile id: counted once
    pid = "5a6b7c8d9e0f11223344556677889900"
    g = send(r, node, url, dset, ws, [
        {"file": span_file, "service": "otdup", "time_ms": t0 * 1000,
         "profile_id": pid}] * 2, "dup")
    r.check(len(g) == 2 and all(x["status"] == 200 for x in g),
            "the same request with a profile id, sent twice: 200 both")
    resp = srv.render("otdup.cpu{}", frm=t0 - 3600, until=t0 + 3600,
                      fmt="collapsed")
    tot = sum(oracle.parse_collapsed(resp.text()).values()) \
        if resp.status == 200 else None
    r.eq(tot, sum(v for _, v, _ in samples), "the profile id made the "
         "second request a no-op: every sample counted once")
    # 4. refusals
    def post(body, ctype="application/x-protobuf"):
        return srv.request("POST", "/v1development/profiles", body=body,
                           headers={"Content-Type": ctype})
    resp = post(b"\x0a\x05garbage")
    r.check(resp.status == 400, "a body that is not an "
            "ExportProfilesServiceRequest: 400", resp.describe())
    resp = post(b"{}", "application/xml")
    r.check(resp.status == 415, "another content type: 415",
            resp.describe())
    g = send(r, node, url, dset, ws, [{"file": span_file, "service":
                                       "otold", "time_ms": t0 * 1000,
                                       "corrupt": "stack"}], "old")
    msg = base64.b64decode(g[0]["body"]).decode("utf-8", "replace") \
        if g else ""
    r.check(g and g[0]["status"] == 400 and "v1.10.0" in msg,
            "an index outside its table (as an older alpha's Sample): 400 "
            "naming the accepted version", msg[:300])
    g = send(r, node, url, dset, ws, [{"file": span_file, "service":
                                       "otold", "time_ms": t0 * 1000,
                                       "corrupt": "stack", "grpc": gurl}],
             "old-grpc")
    msg = base64.b64decode(g[0]["body"]).decode("utf-8", "replace") \
        if g else ""
    r.check(g and g[0].get("code") == "InvalidArgument" and "v1.10.0" in msg,
            "over gRPC too: INVALID_ARGUMENT naming the accepted version",
            str(g)[:300])
    resp = srv.render("otold.cpu{}", frm=t0 - 3600, until=t0 + 3600,
                      fmt="collapsed")
    r.check(resp.status == 200 and resp.text().strip() == "",
            "nothing of the refused request was stored", resp.text()[:200])
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_otlp", 400, body)
