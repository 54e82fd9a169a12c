#!/usr/bin/env python3
"""
test_grpc_web.py -- every querier.v1, push.v1, settings.v1, capabilities.v1
and version.v1 method answers identically over Connect, gRPC-web and gRPC
(HTTP/2 cleartext, -grpc.listen-address), called by real client
libraries: connect-es (@connectrpc/connect-node, the Connect project's
own) and gRPC's C core (Debian's python3-grpcio), with the services'
descriptors from the repository's .proto files compiled by Debian's
protoc (no generated code).

One single binary is given profiles (folded text under two services and
a real pprof from tests/data).  tests/clients/client.mjs then calls each
method five ways -- Connect with the binary codec, gRPC-web binary
(application/grpc-web+proto), gRPC-web JSON (application/grpc-web+json),
gRPC binary (application/grpc+proto) and gRPC JSON (application/grpc
+json) -- and every call must give the same answer every way: the
same message (compared as proto3 JSON) or the same error code and
message.  tests/clients/grpc_client.py then makes each call with grpcio
and as a Connect binary POST of the same request bytes, and the answers
must be the same bytes (or the same error).  The data queries must answer
something (a flamegraph total above 0, series, a profile), so equality
is not two empty answers.  Errors cross gRPC-web and gRPC too: a bad
selector is invalid_argument, an unknown format unimplemented.  push.v1
Push runs once per protocol and client, and /render then counts the
pushed profile seven times.  grpc-web-text (base64 bodies), which
connect-es does not send, is checked by hand, and so are gRPC's protocol
refusals (curl --http2-prior-knowledge): GET 405, a foreign content-type
415, an unknown method unimplemented, a message over
-server.grpc-max-recv-msg-size-bytes resource_exhausted.

Set-up: `npm ci` in tests/clients when its node_modules is missing or
older than package-lock.json.  Without node, npm, protoc, curl or
/usr/bin/python3 with grpcio and protobuf (`make deps` installs them) the
test skips, except under CI=true, where that fails.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import node_clients  # noqa: E402
from durability import DataServer, workspace_for  # noqa: E402
from oracle import parse_collapsed  # noqa: E402
from smolder import data_dir, free_port, in_ci, run_script  # noqa: E402

CLIENT_DIR = node_clients.CLIENT_DIR
PROTOS = ["querier/v1/querier.proto", "push/v1/push.proto",
          "settings/v1/setting.proto", "capabilities/v1/feature_flags.proto",
          "version/v1/version.proto"]
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def calls_for(now, t0):
    ms = lambda s: s * 1000  # noqa: E731
    rng = {"start": str(ms(t0 - 60)), "end": str(ms(now + 60))}
    sel = '{service_name="gw"}'

    def q(method, req):
        return {"service": "querier.v1.QuerierService", "method": method,
                "request": req}
    merge = dict(rng, profileTypeID=CPU, labelSelector=sel)
    return [
        {"service": "version.v1.Version", "method": "Version",
         "request": {}},
        {"service": "capabilities.v1.FeatureFlagsService",
         "method": "GetFeatureFlags", "request": {}},
        {"service": "settings.v1.SettingsService", "method": "Get",
         "request": {}},
        q("ProfileTypes", rng),
        q("LabelNames", dict(rng, matchers=[sel])),
        q("LabelValues", dict(rng, name="service_name", matchers=["{}"])),
        q("Series", dict(rng, matchers=[sel],
                         labelNames=["service_name", "__profile_type__"])),
        q("SelectMergeStacktraces", merge),
        q("SelectMergeStacktraces", dict(merge, maxNodes="2")),
        q("SelectMergeStacktraces", dict(merge, format="PROFILE_FORMAT_TREE")),
        q("SelectSeries", dict(merge, step=60, groupBy=["service_name"])),
        q("SelectMergeProfile", merge),
        q("Diff", {"left": merge, "right": dict(
            merge, labelSelector='{service_name="gw2"}')}),
        q("GetProfileStats", {}),
        q("AnalyzeQuery", dict(rng, query=CPU + sel)),
        q("SelectMergeSpanProfile", dict(merge, spanSelector=[
            "0123456789abcdef"])),
        # errors
        q("SelectMergeStacktraces", dict(merge, labelSelector="{bad")),
        q("SelectMergeStacktraces", dict(merge, format=9)),
    ]


RECV_MAX = 1 << 20
SYS_PYTHON = "/usr/bin/python3"


def client_rows(r, what, argv):
    """Run a client over the calls file: its answers' rows, None when it
    failed."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    r.check(p.returncode == 0, "the %s client ran" % what, p.stderr[-1500:])
    return json.loads(p.stdout) if p.returncode == 0 else None


def grpcio_calls(r, srv, gport, dset, cfile, calls):
    """Each call with gRPC's C core (grpcio) and as a Connect binary POST
    of the same bytes: the same answer bytes, or the same error."""
    p = subprocess.run([SYS_PYTHON, "-c", "import grpc, google.protobuf"],
                       capture_output=True, text=True, timeout=60) \
        if os.path.exists(SYS_PYTHON) else None
    if p is None or p.returncode != 0:
        (r.fail if in_ci() else r.skip)(
            "grpcio", "/usr/bin/python3 lacks python3-grpcio or "
            "python3-protobuf (make deps installs them)")
        return
    rows = client_rows(r, "grpcio", [
        SYS_PYTHON, os.path.join(CLIENT_DIR, "grpc_client.py"),
        "http://127.0.0.1:%d" % srv.port, "127.0.0.1:%d" % gport, dset,
        cfile])
    if rows is None:
        return
    same = 0
    for call, row in zip(calls, rows):
        if row["grpc"] == row["connect"]:
            same += 1
        else:
            r.fail("%s/%s: grpcio's answer is Connect's" % (
                call["service"], call["method"]), json.dumps(row)[:1500])
    r.check(same == len(calls) and same > 0, "%d of %d calls: grpcio's "
            "answer is the Connect answer to the same bytes" %
            (same, len(calls)))
    r.eq(rows[len(calls) - 3]["grpc"].get("error", {}).get("code"),
         "invalid_argument", "grpcio: a bad selector is INVALID_ARGUMENT")


def grpc_refusals(r, ws, gport):
    """gRPC's protocol checks, made with curl over HTTP/2 (prior
    knowledge): 405, 415, unimplemented, resource_exhausted."""
    import shutil
    curl = shutil.which("curl")
    if curl is None:
        (r.fail if in_ci() else r.skip)(
            "gRPC refusals", "curl missing (make deps installs it)")
        return
    url = "http://127.0.0.1:%d" % gport

    def h2(path, method="POST", ctype="application/grpc", body=b""):
        bf = ws.path("h2body")
        with open(bf, "wb") as f:
            f.write(body)
        p = subprocess.run([curl, "-s", "--http2-prior-knowledge", "-X",
                            method, "-H", "content-type: " + ctype,
                            "--data-binary", "@" + bf, "-D", "-",
                            "-o", "/dev/null", url + path],
                           capture_output=True, text=True, timeout=30)
        return p.stdout.lower()
    empty = b"\x00\x00\x00\x00\x00"
    out = h2("/version.v1.Version/Version", method="GET")
    r.check(out.startswith("http/2 405"), "gRPC: GET is 405", out[:200])
    out = h2("/version.v1.Version/Version", ctype="text/plain", body=empty)
    r.check(out.startswith("http/2 415"), "gRPC: a text/plain call is 415",
            out[:200])
    out = h2("/version.v1.Version/Version", body=empty)
    r.check(out.startswith("http/2 200") and "grpc-status: 0" in out,
            "gRPC: Version by hand is grpc-status 0", out[:300])
    out = h2("/nosuch.v1.Service/Method", body=empty)
    r.check("grpc-status: 12" in out, "gRPC: an unknown method is "
            "UNIMPLEMENTED (12)", out[:300])
    big = b"\x00" + (RECV_MAX + 10).to_bytes(4, "big") + b"x" * (RECV_MAX + 10)
    out = h2("/version.v1.Version/Version", body=big)
    r.check("grpc-status: 8" in out, "gRPC: a message over "
            "-server.grpc-max-recv-msg-size-bytes is RESOURCE_EXHAUSTED (8)",
            out[:300])


def push_call():
    """push.v1 Push of one small pprof: main;sleep = 7."""
    import base64
    from test_span_profile import make_pprof
    raw = make_pprof([(["main", "sleep"], 7, {})])
    return {"service": "push.v1.PusherService", "method": "Push",
            "request": {"series": [{
                "labels": [{"name": "__name__", "value": "process_cpu"},
                           {"name": "service_name", "value": "gwpush"}],
                "samples": [{"ID": "", "rawProfile":
                             base64.b64encode(raw).decode()}]}]}}


def body(r):
    node, protoc = node_clients.ensure(r)
    ws = workspace_for(r, "grpc-web")
    dset = node_clients.descriptor_set(
        r, protoc, ws.path("services.pb"), PROTOS,
        "protoc wrote the services' descriptors")
    gport = free_port()
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-validation.reject-older-than=0",
        "-grpc.listen-address=127.0.0.1:%d" % gport,
        "-server.grpc-max-recv-msg-size-bytes=%d" % RECV_MAX]).start()
    now = int(time.time())
    t0 = now - 600
    for svc, stacks in (("gw", "main;work;parse 30\nmain;idle 10\n"),
                        ("gw2", "main;work;parse 20\nmain;gc 5\n")):
        resp = srv.ingest({"name": svc + ".cpu", "from": str(t0),
                           "until": str(t0 + 10), "sampleRate": "100"},
                          stacks.encode())
        r.eq(resp.status, 200, "ingest %s" % svc)
    with open(os.path.join(data_dir(), "parca__fib.pb.gz"), "rb") as f:
        resp = srv.ingest({"name": "gw", "from": str(t0 + 20),
                           "until": str(t0 + 30), "format": "pprof"},
                          f.read())
    r.eq(resp.status, 200, "ingest a real pprof (parca__fib)")

    calls = calls_for(now, t0)
    calls.append(push_call())
    cfile = ws.path("calls.json")
    with open(cfile, "w") as f:
        json.dump(calls, f)
    rows = client_rows(r, "connect-es", [
        node, os.path.join(CLIENT_DIR, "client.mjs"),
        "http://127.0.0.1:%d" % srv.port, dset, cfile,
        "http://127.0.0.1:%d" % gport])
    if rows is None:
        return
    same = 0
    for call, row in zip(calls, rows):
        what = "%s/%s%s" % (call["service"], call["method"],
                            " " + json.dumps(call["request"])[:60]
                            if call["method"] == "SelectMergeStacktraces"
                            else "")
        c = row["connect"]
        if all(row[k] == c for k in ("grpc-web", "grpc-web-json", "grpc",
                                     "grpc-json")):
            same += 1
        else:
            r.fail("%s: the same answer over Connect, gRPC-web and gRPC"
                   % what, json.dumps(row)[:1500])
    r.check(same == len(calls), "%d of %d calls answer identically over "
            "Connect, gRPC-web, gRPC-web JSON, gRPC and gRPC JSON "
            "(connect-es)" % (same, len(calls)))
    grpcio_calls(r, srv, gport, dset, cfile, calls)

    def resp_of(i):
        return rows[i]["connect"].get("response")
    names = [c["method"] for c in calls]
    smst = resp_of(names.index("SelectMergeStacktraces")) or {}
    r.check(int(smst.get("flamegraph", {}).get("total", 0)) > 0,
            "SelectMergeStacktraces answered a flamegraph (total %s)"
            % smst.get("flamegraph", {}).get("total"))
    r.check(len((resp_of(names.index("SelectSeries")) or {})
                .get("series", [])) > 0, "SelectSeries answered series")
    r.check(len((resp_of(names.index("SelectMergeProfile")) or {})
                .get("sample", [])) > 0, "SelectMergeProfile answered "
            "samples")
    for proto in ("grpc-web", "grpc"):
        bad = rows[len(calls) - 3][proto].get("error", {})
        r.eq(bad.get("code"), "invalid_argument", "a bad selector over %s: "
             "invalid_argument (%s)" % (proto, bad.get("message")))
        unk = rows[len(calls) - 2][proto].get("error", {})
        r.eq(unk.get("code"), "unimplemented", "an unknown format over "
             "%s: unimplemented" % proto)
    grpc_refusals(r, ws, gport)

    # grpc-web-text (base64 bodies, what browsers without binary XHR
    # send; connect-es does not speak it): Version by hand
    import base64
    tx = srv.request("POST", "/version.v1.Version/Version",
                     body=base64.b64encode(b"\x00\x00\x00\x00\x00"),
                     headers={"Content-Type": "application/grpc-web-text"})
    raw = base64.b64decode(tx.body) if tx.status == 200 else b""
    r.check(raw[:7] == b"\x00\x00\x00\x00\x02\x08\x01" and
            b"grpc-status:0" in raw[7:], "grpc-web-text: Version's frame "
            "(QuerierAPI 1) and grpc-status 0, in base64", tx.describe())

    # each protocol's Push landed
    got = {}
    for _ in range(50):
        resp = srv.render("gwpush.cpu{}", frm=t0 - 3600, until=now + 3600,
                          fmt="collapsed")
        got = parse_collapsed(resp.text()) if resp.status == 200 else {}
        if got:
            break
        time.sleep(0.1)
    r.eq(sorted(got.items()), [("main;sleep", 49)], "push.v1 Push over the "
         "five protocols and grpcio's two: the profile counted seven times")
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_grpc_web", 240, body)
