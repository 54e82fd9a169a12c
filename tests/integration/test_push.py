#!/usr/bin/env python3
"""
test_push.py -- push.v1.PusherService/Push, what
Grafana Alloy's pyroscope.write sends.

Single binary:
  - a pprof pushed with the proto codec is stored with exactly its stacks
    and values (read back with /render?format=collapsed), under the
    labels of the series (__name__ = metric, service_name, a custom label);
  - the same request sent again (a retry: same RawSample.ID) changes
    nothing; a new ID adds the profile again;
  - the JSON codec, with a gzip request body (Content-Encoding: gzip) and
    a gzipped raw_profile, camelCase and snake_case keys;
  - every error, with its Connect code and HTTP status: malformed pprof,
    a non-UUID ID, no labels, invalid label name, profile over the size
    limit (invalid_argument 400), samples limit (resource_exhausted 429),
    outside the ingestion window (400), unknown Content-Encoding
    (unimplemented 501), wrong Content-Type (415), no tenant with
    multitenancy on (unauthenticated 401); a request with one bad sample
    writes nothing.
Cluster (3 ingesters, RF=3, 2 distributors, 1 querier):
  - a Push, then the same Push retried through the other distributor:
    the querier counts it once; two ingesters down: unavailable 503.
"""

import base64
import gzip
import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import Workspace, limit_flags  # noqa: E402
from oracle import build_profile, field_bytes, parse_collapsed  # noqa: E402
from oracle import cpu_pprof as pprof  # noqa: E402
from smolder import Results, Server, install_timeout  # noqa: E402

PATH = "/push.v1.PusherService/Push"
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
PROTO = {"Content-Type": "application/proto"}
JSON = {"Content-Type": "application/json"}


def push_proto(series):
    """series: [([(name, value)], [(raw_profile, id)])] -> PushRequest."""
    out = b""
    for labels, samples in series:
        body = b""
        for n, v in labels:
            body += field_bytes(1, 2, field_bytes(1, 2, n.encode()) +
                                field_bytes(2, 2, v.encode()))
        for raw, sid in samples:
            s = field_bytes(1, 2, raw)
            if sid:
                s += field_bytes(2, 2, sid.encode())
            body += field_bytes(2, 2, s)
        out += field_bytes(1, 2, body)
    return out


def labels(app, metric="process_cpu", **extra):
    ls = [("__name__", metric), ("service_name", app)]
    ls += sorted(extra.items())
    return ls


def collapsed(s, app, type_id=CPU):
    now = int(time.time())
    r = s.render('%s{service_name="%s"}' % (type_id, app), frm=now - 3600,
                 until=now + 3600, fmt="collapsed")
    return parse_collapsed(r.text()) if r.status == 200 else None


UUID1 = "0b3c7c4e-4a8d-4b8e-9f5e-2d1c0a9b8e7f"
UUID2 = "5f2b1d3e-6c7a-4f80-9e1d-3b2a1c0d9e8f"
UUID3 = "c0ffee00-1234-4567-89ab-cdef01234567"
WANT = {"main;work": 300, "main;idle": 100}
STACKS = [(["main", "work"], 300), (["main", "idle"], 100)]


def check_single(r):
    flags = ["-validation.max-profile-stacktrace-samples=50",
             "-validation.max-profile-size-bytes=65536"] + limit_flags()
    with Server(flags, name="push") as s:
        req = push_proto([(labels("pa", env="prod"),
                           [(pprof(STACKS), UUID1)])])
        p = s.request("POST", PATH, body=req, headers=PROTO)
        r.check(p.status == 200 and p.headers.get("content-type") ==
                "application/proto" and p.body == b"",
                "proto Push answers 200 with an empty PushResponse",
                p.describe())
        r.eq(collapsed(s, "pa"), WANT, "pushed stacks and values stored")
        lv = s.request("GET", "/label-values", {"label": "env"})
        r.check(lv.status == 200 and "prod" in lv.text(),
                "series labels of the Push are series labels",
                lv.describe())
        p = s.request("POST", PATH, body=req, headers=PROTO)
        r.check(p.status == 200, "the retried Push answers 200",
                p.describe())
        r.eq(collapsed(s, "pa"), WANT, "a retried Push (same ID) is "
             "applied once")
        req2 = push_proto([(labels("pa", env="prod"),
                            [(pprof(STACKS), UUID2)])])
        p = s.request("POST", PATH, body=req2, headers=PROTO)
        r.eq(collapsed(s, "pa"), {k: 2 * v for k, v in WANT.items()},
             "a Push with a new ID is added")
        # ID forms Go's uuid.Parse accepts: 32 hex digits, braces.
        u3 = "7a0e8b1c2d3f4a5b6c7d8e9f0a1b2c3d"
        for sid in (u3, "{%s}" % UUID1.upper()):
            p = s.request("POST", PATH, body=push_proto(
                [(labels("pforms"), [(pprof(STACKS), sid)])]),
                headers=PROTO)
            r.check(p.status == 200, "ID form %s accepted" % sid,
                    p.describe())
        r.eq(collapsed(s, "pforms"), WANT, "the braced upper-case form "
             "of an ID already written is that same id (not applied again)")

        # JSON codec, gzip body, gzipped raw_profile, godeltaprof relabel.
        body = {"series": [{
            "labels": [{"name": "__name__", "value": "process_cpu"},
                       {"name": "service_name", "value": "pj"},
                       {"name": "__delta__", "value": "false"}],
            "samples": [{"rawProfile": base64.b64encode(
                gzip.compress(pprof(STACKS))).decode(), "ID": UUID3}]}]}
        data = gzip.compress(json.dumps(body).encode())
        p = s.request("POST", PATH, body=data, headers={
            "Content-Type": "application/json", "Content-Encoding": "gzip"})
        r.check(p.status == 200 and p.json() == {},
                "JSON Push with a gzip body answers 200 {}", p.describe())
        r.eq(collapsed(s, "pj"), WANT, "JSON Push stored exactly")
        snake = {"series": [{
            "labels": [{"name": "__name__", "value": "process_cpu"},
                       {"name": "service_name", "value": "pj"}],
            "samples": [{"raw_profile": base64.b64encode(
                pprof(STACKS)).decode(), "ID": UUID3}]}]}
        p = s.request("POST", PATH, body=json.dumps(snake).encode(),
                      headers=JSON)
        r.check(p.status == 200, "snake_case JSON accepted", p.describe())
        r.eq(collapsed(s, "pj"), WANT, "the JSON retry is applied once")
        d = {"series": [{
            "labels": [{"name": "__name__", "value": "godeltaprof_memory"},
                       {"name": "service_name", "value": "pdelta"}],
            "samples": [{"rawProfile": base64.b64encode(build_profile(
                ["", "alloc_space", "bytes", "f"], [(1, 2)],
                [([1], [4096])], [(1, 0, 0, [(1, 1)])],
                [(1, 3, 3, 0)])).decode(), "ID": str(uuid.uuid4())}]}]}
        p = s.request("POST", PATH, body=json.dumps(d).encode(),
                      headers=JSON)
        r.eq(collapsed(s, "pdelta", "memory:alloc_space:bytes::"),
             {"f": 4096}, "godeltaprof_memory is stored as memory")

        # Errors.
        def err(req, want_status, want_code, what, headers=PROTO):
            p = s.request("POST", PATH, body=req, headers=headers)
            r.check(p.status == want_status and
                    p.error_code() == want_code and
                    p.headers.get("content-type", "").startswith(
                        "application/json"),
                    "%s: %d %s" % (what, want_status, want_code),
                    p.describe())
            return p

        err(push_proto([(labels("pe"), [(b"\x0a\xff\xff", UUID1)])]),
            400, "invalid_argument", "malformed pprof")
        err(push_proto([(labels("pe"), [(pprof(STACKS), "not-a-uuid")])]),
            400, "invalid_argument", "an ID that is not a UUID")
        err(push_proto([([], [(pprof(STACKS), UUID1)])]), 400,
            "invalid_argument", "a series with no labels")
        err(push_proto([(labels("pe") + [("", "x")],
                         [(pprof(STACKS), UUID1)])]),
            400, "invalid_argument", "an empty label name")
        err(push_proto([(labels("pe", metric="bad metric"),
                         [(pprof(STACKS), UUID1)])]),
            400, "invalid_argument", "an invalid metric name (__name__)")
        big = pprof([(["f%d" % i], 1) for i in range(40)] +
                    [(["x" * 3000], 1)] * 30)
        err(push_proto([(labels("pe"), [(gzip.compress(big), UUID1)])]),
            429, "resource_exhausted", "more samples than "
            "-validation.max-profile-stacktrace-samples")
        bomb = pprof([(["y" * 60000, "z" * 60000], 1)])
        err(push_proto([(labels("pe"), [(gzip.compress(bomb), UUID1)])]),
            400, "invalid_argument", "a profile over "
            "-validation.max-profile-size-bytes")
        old = int((time.time() - 7200) * 1e9)
        err(push_proto([(labels("pe"), [(pprof(STACKS, old), UUID1)])]),
            400, "invalid_argument", "a profile outside the ingestion "
            "window (time_nanos 2 h ago)")
        err(push_proto([(labels("pe"), [(pprof(STACKS), UUID1)])]), 501,
            "unimplemented", "Content-Encoding: br",
            headers={"Content-Type": "application/proto",
                     "Content-Encoding": "br"})
        p = s.request("POST", PATH, body=b"x",
                      headers={"Content-Type": "text/plain"})
        r.check(p.status == 415, "a non-Connect Content-Type: 415",
                p.describe())
        mixed = push_proto([(labels("pmixed"), [(pprof(STACKS), UUID1),
                                               (b"garbage", str(uuid.uuid4()))])])
        p = err(mixed, 400, "invalid_argument", "a request with one bad "
                "sample")
        r.check("sample 1" in p.error_message(), "the error names the "
                "bad sample", p.error_message())
        r.eq(collapsed(s, "pmixed"), {}, "a request with one bad sample "
             "writes nothing")
        r.check(s.request("GET", PATH).status == 405, "GET Push: 405")
        s.check_stopped(r)

    with Server(["-auth.multitenancy-enabled=true"] + limit_flags(),
                name="push-mt") as s:
        req = push_proto([(labels("pt"), [(pprof(STACKS), UUID1)])])
        p = s.request("POST", PATH, body=req, headers=PROTO)
        r.check(p.status == 401 and p.error_code() == "unauthenticated",
                "multitenancy without X-Scope-OrgID: 401 unauthenticated",
                p.describe())
        p = s.request("POST", PATH, body=req, headers=dict(
            PROTO, **{"X-Scope-OrgID": "t1"}))
        r.check(p.status == 200, "with X-Scope-OrgID: 200", p.describe())
        now = int(time.time())
        q = s.request("GET", "/render", {
            "query": '%s{service_name="pt"}' % CPU, "format": "collapsed",
            "from": str(now - 3600), "until": str(now + 3600)},
            headers={"X-Scope-OrgID": "t1"})
        r.eq(parse_collapsed(q.text()) if q.status == 200 else None, WANT,
             "the tenant's Push is visible to the tenant")
        s.check_stopped(r)


def check_cluster(r):
    ws = Workspace("push-cluster")
    c = Cluster(ws, ingesters=3, distributors=2, queriers=1, rf=3,
                extra=limit_flags())
    try:
        c.start()
        req = push_proto([(labels("pc"), [(pprof(STACKS), UUID1)]),
                          (labels("pc", env="b"),
                           [(pprof(STACKS), UUID2)])])
        p = c.distributors[0].request("POST", PATH, body=req, headers=PROTO)
        r.check(p.status == 200, "cluster: Push through distributor 0",
                p.describe())
        p = c.distributors[1].request("POST", PATH, body=req, headers=PROTO)
        r.check(p.status == 200, "cluster: the same Push retried through "
                "distributor 1", p.describe())
        r.eq(collapsed(c.queriers[0], "pc"),
             {k: 2 * v for k, v in WANT.items()},
             "cluster: the querier counts each sample once (2 series)")
        c.kill9_ingester(1)
        c.kill9_ingester(2)
        p = c.distributors[0].request("POST", PATH, body=push_proto(
            [(labels("pc"), [(pprof(STACKS),
                              "11111111-2222-3333-4444-555555555555")])]),
            headers=PROTO)
        r.check(p.status == 503 and p.error_code() == "unavailable",
                "cluster: two of three ingesters down: 503 unavailable",
                p.describe())
    finally:
        c.check_stopped_after_kills(r)
        ws.cleanup(r)


def main():
    install_timeout(300)
    r = Results("push")
    check_single(r)
    check_cluster(r)
    r.finish()


if __name__ == "__main__":
    main()
