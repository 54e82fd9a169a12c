#!/usr/bin/env python3
"""
test_grpc_web.py -- every querier.v1, push.v1, settings.v1, capabilities.v1
and version.v1 method answers identically over Connect and gRPC-web,
called by a real client library: connect-es (@connectrpc/connect-node,
the Connect project's own), with the services' descriptors from the
repository's .proto files compiled by Debian's protoc (no generated code).

One single binary is given profiles (folded text under two services and
a real pprof from tests/data).  tests/clients/client.mjs then calls each
method three ways -- Connect with the binary codec, gRPC-web binary
(application/grpc-web+proto) and gRPC-web JSON (application/grpc-web
+json) -- and every call must give the same answer all three ways: the
same message (compared as proto3 JSON) or the same error code and
message.  The data queries must answer something (a flamegraph total
above 0, series, a profile), so equality is not two empty answers.
Errors cross gRPC-web too: a bad selector is invalid_argument, an
unknown format unimplemented.  push.v1 Push runs once per protocol, and
/render then counts the pushed profile three times.  grpc-web-text
(base64 bodies), which connect-es does not send, is checked by hand.

Set-up: `npm ci` in tests/clients when its node_modules is missing or
older than package-lock.json.  Without node, npm or protoc (`make deps`
installs them) the test skips, except under CI=true, where that fails.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import node_clients  # noqa: E402
from durability import DataServer, Workspace  # noqa: E402
from oracle import parse_collapsed  # noqa: E402
from smolder import data_dir, run_script, source_dir  # noqa: E402

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
    ws = Workspace("grpc-web")
    r.at_end(lambda: ws.cleanup(r))
    dset = ws.path("services.pb")
    p = subprocess.run([protoc, "--include_imports",
                        "--descriptor_set_out=" + dset,
                        "-I", os.path.join(source_dir(), "proto")] + PROTOS,
                       capture_output=True, text=True, timeout=60)
    r.check(p.returncode == 0, "protoc wrote the services' descriptors",
            p.stderr[-500:])
    srv = DataServer(ws.data_dir("s"), ws.log_dir("s"), extra_flags=[
        "-validation.reject-older-than=0"]).start()
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
    p = subprocess.run([node, os.path.join(CLIENT_DIR, "client.mjs"),
                        "http://127.0.0.1:%d" % srv.port, dset, cfile],
                       capture_output=True, text=True, timeout=120)
    r.check(p.returncode == 0, "the connect-es client ran", p.stderr[-1500:])
    if p.returncode != 0:
        return
    rows = json.loads(p.stdout)
    same = 0
    for call, row in zip(calls, rows):
        what = "%s/%s%s" % (call["service"], call["method"],
                            " " + json.dumps(call["request"])[:60]
                            if call["method"] == "SelectMergeStacktraces"
                            else "")
        c = row["connect"]
        if row["grpc-web"] == c and row["grpc-web-json"] == c:
            same += 1
        else:
            r.fail("%s: the same answer over Connect and gRPC-web" % what,
                   json.dumps(row)[:1200])
    r.check(same == len(calls), "%d of %d calls answer identically over "
            "Connect, gRPC-web and gRPC-web JSON" % (same, len(calls)))

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
    bad = rows[len(calls) - 3]["grpc-web"].get("error", {})
    r.eq(bad.get("code"), "invalid_argument", "a bad selector over gRPC-web: "
         "invalid_argument (%s)" % bad.get("message"))
    unk = rows[len(calls) - 2]["grpc-web"].get("error", {})
    r.eq(unk.get("code"), "unimplemented", "an unknown format over gRPC-web: "
         "unimplemented")

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
    r.eq(sorted(got.items()), [("main;sleep", 21)], "push.v1 Push over the "
         "three protocols: the profile counted three times")
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_grpc_web", 240, body)
