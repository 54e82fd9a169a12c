#!/usr/bin/env python3
"""
test_labels_api.py -- the label endpoints (og and v1) and the Connect label
methods.

Data (server with -validation.reject-older-than=0):
  window A (now), folded: lapp.cpu{env=prod,region=eu|us} with
    sampleRate=100 and spyName=gospy, lapp.alloc_objects{env=dev},
    lapp.mutex_count{env=dev}, other.alloc_space{zone=z1}; and a pprof
    built here with the custom sample type widgets/count as app custom
    (profile type widgets:widgets:count::, which has no legacy suffix);
  window B (fixed, 2020-09-13): a Go CPU profile (parca__fib) and a Go
    heap profile (parca__many__...) as goapp, spyName=gospy.

Checks:
  - GET /labels: all time, ?query= in the three /render forms, from/until
    restricting to A or B; names sorted, no "__" names except __name__;
  - GET /label-values?label=env|region|zone|service_name|nosuch, with
    query and time ranges; label=__name__ gives the og app names
    (<service_name>.<legacy suffix>, only for types with a suffix: never
    custom.*); no label or an empty one -> 400 with "label parameter is
    required";
  - GET /pyroscope/label-values?label=__name__: the profile type ids,
    sorted; label=env: values; no label -> 400;
  - GET /api/apps: sorted by name, the same names as /label-values
    __name__, each {"name","spyName","sampleRate","units"};
    lapp.cpu is {"name":"lapp.cpu","spyName":"gospy","sampleRate":100,
    "units":"samples"};
  - Connect ProfileTypes over B: exactly the 6 Go types sorted by ID, each
    with name/sampleType/sampleUnit/periodType/periodUnit = the ID's parts;
    over A: the folded and custom types; the same over application/proto
    (decoded here);
  - LabelNames (all names, __* included) with and without matchers;
    LabelValues with matchers and ranges; Series with and without
    labelNames (labelNames restricts every returned set to those names);
  - Connect errors: malformed JSON and a bad matcher -> 400
    invalid_argument, an unsupported Content-Type -> 415.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (Workspace, connect, connect_proto,  # noqa: E402
                        get_json, json_or_none, limit_flags, start_or_fail)
from smolder import run_script, data_dir  # noqa

BUDGET_S = 150
TB = 1600000000          # window B (unix s)
FIB = "parca__fib.pb.gz"
HEAP = "parca__many__1644509272337470000.pb.gz"

FOLDED = [
    ("lapp.cpu{env=prod,region=eu}", {"sampleRate": "100",
                                      "spyName": "gospy"}, b"main;work 3\n"),
    ("lapp.cpu{env=prod,region=us}", {"sampleRate": "100",
                                      "spyName": "gospy"}, b"main;idle 2\n"),
    ("lapp.alloc_objects{env=dev}", {}, b"main;alloc 7\n"),
    ("lapp.mutex_count{env=dev}", {}, b"main;lock 4\n"),
    ("other.alloc_space{zone=z1}", {}, b"o;p 100\n"),
]
GO_TYPES = sorted([
    "process_cpu:samples:count:cpu:nanoseconds",
    "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    "memory:alloc_objects:count:space:bytes",
    "memory:alloc_space:bytes:space:bytes",
    "memory:inuse_objects:count:space:bytes",
    "memory:inuse_space:bytes:space:bytes"])
A_TYPES = sorted([
    "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    "memory:alloc_objects:count::",
    "mutex:contentions:count::",
    "memory:alloc_space:bytes::",
    "widgets:widgets:count::"])
A_APPS = ["lapp.alloc_objects", "lapp.cpu", "lapp.mutex_count",
          "other.alloc_space"]
B_APPS = ["goapp.alloc_objects", "goapp.alloc_space", "goapp.cpu",
          "goapp.inuse_objects", "goapp.inuse_space"]
LAPP_LABEL_NAMES = sorted([
    "__name__", "__period_type__", "__period_unit__", "__profile_type__",
    "__service_name__", "__type__", "__unit__", "env", "pyroscope_spy",
    "region", "service_name"])


def custom_pprof():
    return oracle.build_profile(
        strings=["", "widgets", "count", "make_widget", "main"],
        sample_types=[(1, 2)],
        samples=[([1, 2], [5]), ([2], [3])],
        locations=[(1, 0, 0, [(1, 0)]), (2, 0, 0, [(2, 0)])],
        functions=[(1, 3, 3, 0), (2, 4, 4, 0)])


def split_type(tid):
    p = tid.split(":")
    return {"ID": tid, "name": p[0], "sampleType": p[1], "sampleUnit": p[2],
            "periodType": p[3], "periodUnit": p[4]}


def pt_norm(pt):
    """A ProfileType JSON object with omitted (default) strings as ""."""
    return {k: pt.get(k, "") for k in ("ID", "name", "sampleType",
                                        "sampleUnit", "periodType",
                                        "periodUnit")}


def decode_profile_types(body):
    """ProfileTypesResponse (binary proto) -> [dict] like pt_norm."""
    names = {1: "ID", 2: "name", 4: "sampleType", 5: "sampleUnit",
             6: "periodType", 7: "periodUnit"}
    out = []
    for f, wt, v, _, _ in oracle.iter_fields(body):
        if f != 1 or wt != 2:
            continue
        d = {k: "" for k in names.values()}
        for f2, wt2, v2, _, _ in oracle.iter_fields(v):
            if f2 in names and wt2 == 2:
                d[names[f2]] = v2.decode("utf-8")
        out.append(d)
    return out


def main(r):
    ws = Workspace("labels")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    flags = limit_flags() + ["-validation.reject-older-than=0"]
    now = int(time.time())
    A = (now - 600, now + 600)
    B = (TB - 600, TB + 600)
    ALL = (TB - 3600, now + 3600)
    srv = None

    def gj(what, path, query, want):
        resp, j = get_json(srv, path, query)
        r.check(j == want, "%s %s" % (path, what), "want %r\ngot  %r %s" % (
            want, j, "" if j is not None else resp.describe()))
        return j

    def cj(what, method, msg):
        resp = connect(srv, method, msg)
        j = json_or_none(resp)
        if j is None:
            r.fail("%s %s: HTTP 200 with JSON" % (method, what),
                   resp.describe())
        return j

    def rq(w):
        return {"from": str(w[0]), "until": str(w[1])}

    def crq(w):
        return {"start": w[0] * 1000, "end": w[1] * 1000}

    try:
        srv = start_or_fail(r, data, ws.log_dir("labels"), flags, "smolder")
        if srv is None:
            return
        for name, extra, body in FOLDED:
            resp = srv.ingest(dict(extra, name=name), body)
            r.check(resp.status == 200, "ingest %s" % name, resp.describe())
        resp = srv.ingest({"name": "custom", "format": "pprof"},
                          custom_pprof())
        r.check(resp.status == 200, "ingest custom widgets pprof",
                resp.describe())
        for fname in (FIB, HEAP):
            with open(os.path.join(data_dir(), fname), "rb") as f:
                body = f.read()
            resp = srv.ingest({"name": "goapp", "format": "pprof",
                               "spyName": "gospy", "from": str(TB),
                               "until": str(TB)}, body)
            r.check(resp.status == 200, "ingest %s at %d" % (fname, TB),
                    resp.describe())

        # -- og /labels -------------------------------------------------------
        gj("all time", "/labels", {},
           ["__name__", "env", "pyroscope_spy", "region", "service_name",
            "zone"])
        gj("window A", "/labels", rq(A),
           ["__name__", "env", "pyroscope_spy", "region", "service_name",
            "zone"])
        gj("window B", "/labels", rq(B),
           ["__name__", "pyroscope_spy", "service_name"])
        # /ingest without spyName labels the series pyroscope_spy=unknown
        # (og's default), so every series here has pyroscope_spy
        gj("query=lapp.alloc_objects{}", "/labels",
           {"query": "lapp.alloc_objects{}"},
           ["__name__", "env", "pyroscope_spy", "service_name"])
        gj("query={service_name=\"other\"}", "/labels",
           {"query": '{service_name="other"}'},
           ["__name__", "pyroscope_spy", "service_name", "zone"])
        gj("label=pyroscope_spy", "/label-values", {"label": "pyroscope_spy"},
           ["gospy", "unknown"])
        gj("query=<type id>{service_name=\"lapp\"}", "/labels",
           {"query": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
                     '{service_name="lapp"}'},
           ["__name__", "env", "pyroscope_spy", "region", "service_name"])
        gj("query in window B matches nothing", "/labels",
           dict(rq(B), query='{service_name="lapp"}'), [])

        # -- og /label-values ---------------------------------------------------
        gj("label=env", "/label-values", {"label": "env"}, ["dev", "prod"])
        gj("label=region", "/label-values", {"label": "region"}, ["eu", "us"])
        gj("label=zone", "/label-values", {"label": "zone"}, ["z1"])
        gj("label=nosuch", "/label-values", {"label": "nosuch"}, [])
        gj("label=service_name", "/label-values", {"label": "service_name"},
           ["custom", "goapp", "lapp", "other"])
        gj("label=service_name window B", "/label-values",
           dict(rq(B), label="service_name"), ["goapp"])
        gj("label=env query=lapp.cpu{}", "/label-values",
           {"label": "env", "query": "lapp.cpu{}"}, ["prod"])
        gj("label=env query other", "/label-values",
           {"label": "env", "query": '{service_name="other"}'}, [])
        gj("label=__name__ (og app names)", "/label-values",
           {"label": "__name__"}, sorted(A_APPS + B_APPS))
        gj("label=__name__ window A", "/label-values",
           dict(rq(A), label="__name__"), A_APPS)
        gj("label=__name__ window B", "/label-values",
           dict(rq(B), label="__name__"), B_APPS)
        gj("label=__name__ query lapp", "/label-values",
           {"label": "__name__", "query": '{service_name="lapp"}'},
           ["lapp.alloc_objects", "lapp.cpu", "lapp.mutex_count"])
        for q in ({}, {"label": ""}):
            resp = srv.request("GET", "/label-values", q)
            r.check(resp.status == 400 and "label parameter is required" in
                    resp.text(), "/label-values %r -> 400 label parameter is "
                    "required" % q, resp.describe())

        # -- v1 /pyroscope/label-values -----------------------------------------
        gj("label=__name__ (type ids)", "/pyroscope/label-values",
           {"label": "__name__"}, sorted(set(GO_TYPES + A_TYPES)))
        gj("label=__name__ window B", "/pyroscope/label-values",
           dict(rq(B), label="__name__"), GO_TYPES)
        gj("label=env", "/pyroscope/label-values", {"label": "env"},
           ["dev", "prod"])
        resp = srv.request("GET", "/pyroscope/label-values", {})
        r.check(resp.status == 400, "/pyroscope/label-values without label "
                "-> 400", resp.describe())

        # -- /api/apps ----------------------------------------------------------
        resp, apps = get_json(srv, "/api/apps")
        if r.check(isinstance(apps, list), "/api/apps is a JSON array",
                   resp.describe()):
            names = [a.get("name") for a in apps if isinstance(a, dict)]
            r.eq(names, sorted(A_APPS + B_APPS), "/api/apps names (sorted, "
                 "only types with a legacy suffix)")
            shape = all(isinstance(a, dict) and
                        set(a) == {"name", "spyName", "sampleRate", "units"}
                        and isinstance(a["spyName"], str)
                        and isinstance(a["sampleRate"], int)
                        and isinstance(a["units"], str) for a in apps)
            r.check(shape, "/api/apps entries are {name, spyName, sampleRate,"
                    " units}", repr(apps[:4]))
            byname = {a.get("name"): a for a in apps if isinstance(a, dict)}
            r.eq(byname.get("lapp.cpu"),
                 {"name": "lapp.cpu", "spyName": "gospy", "sampleRate": 100,
                  "units": "samples"}, "/api/apps lapp.cpu entry")
            r.eq((byname.get("lapp.alloc_objects") or {}).get("units"),
                 "objects", "/api/apps lapp.alloc_objects units objects")
            r.eq((byname.get("goapp.cpu") or {}).get("spyName"), "gospy",
                 "/api/apps goapp.cpu spyName gospy")

        # -- Connect ProfileTypes -----------------------------------------------
        for what, w, want in (("window B", B, GO_TYPES),
                              ("window A", A, A_TYPES),
                              ("all", ALL, sorted(set(GO_TYPES + A_TYPES)))):
            j = cj(what, "ProfileTypes", crq(w))
            if j is None:
                continue
            pts = j.get("profileTypes") or []
            r.eq([pt_norm(p) for p in pts], [split_type(t) for t in want],
                 "ProfileTypes %s: ids sorted, parts split" % what)
        req = (oracle.field_bytes(1, 0, B[0] * 1000) +
               oracle.field_bytes(2, 0, B[1] * 1000))
        resp = connect_proto(srv, "ProfileTypes", req)
        if r.check(resp.status == 200 and resp.headers.get(
                "content-type", "").startswith("application/proto"),
                "ProfileTypes over application/proto -> 200 "
                "application/proto", resp.describe()):
            try:
                got = decode_profile_types(resp.body)
            except ValueError as e:
                got = "undecodable: %s" % e
            r.eq(got, [split_type(t) for t in GO_TYPES],
                 "ProfileTypes (proto) window B")

        # -- Connect LabelNames / LabelValues / Series --------------------------
        j = cj("lapp", "LabelNames", dict(crq(ALL),
                                          matchers=['{service_name="lapp"}']))
        if j is not None:
            r.eq(j.get("names"), LAPP_LABEL_NAMES, "LabelNames "
                 "{service_name=\"lapp\"}: every name incl. __*, sorted")
        j = cj("no matchers", "LabelNames", crq(A))
        if j is not None:
            names = j.get("names") or []
            r.check(names == sorted(names) and "zone" in names and
                    "__name__" in names and "__profile_type__" in names,
                    "LabelNames without matchers: sorted, all series' names",
                    repr(names))
        j = cj("window B", "LabelNames", dict(
            crq(B), matchers=['{service_name="lapp"}']))
        if j is not None:
            r.eq(j.get("names") or [], [], "LabelNames lapp in window B: "
                 "none")
        for what, msg, want in (
                ("env lapp", dict(crq(ALL), name="env",
                                  matchers=['{service_name="lapp"}']),
                 ["dev", "prod"]),
                ("env process_cpu", dict(crq(ALL), name="env",
                                         matchers=['{__name__="process_cpu"'
                                                   ',service_name="lapp"}']),
                 ["prod"]),
                ("region window B", dict(crq(B), name="region"), []),
                ("__profile_type__ goapp", dict(
                    crq(ALL), name="__profile_type__",
                    matchers=['{service_name="goapp"}']), GO_TYPES),
                ("service_name", dict(crq(ALL), name="service_name"),
                 ["custom", "goapp", "lapp", "other"])):
            j = cj(what, "LabelValues", msg)
            if j is not None:
                r.eq(j.get("names") or [], want, "LabelValues %s" % what)
        j = cj("labelNames env,service_name", "Series", dict(
            crq(ALL), matchers=['{service_name="lapp"}'],
            labelNames=["env", "service_name"]))
        if j is not None:
            sets = [tuple(sorted((p.get("name"), p.get("value"))
                                 for p in (ls.get("labels") or [])))
                    for ls in j.get("labelsSet") or []]
            r.eq(set(sets), {(("env", "dev"), ("service_name", "lapp")),
                             (("env", "prod"), ("service_name", "lapp"))},
                 "Series with labelNames: only those names")
            if len(sets) != len(set(sets)):
                print("# NOTE Series with labelNames returns duplicate label"
                      " sets: %r" % sets, flush=True)
        j = cj("lapp cpu", "Series", dict(
            crq(ALL), matchers=['{service_name="lapp",__name__="process_cpu"'
                                '}']))
        if j is not None:
            sets = [{p.get("name"): p.get("value")
                     for p in (ls.get("labels") or [])}
                    for ls in j.get("labelsSet") or []]
            r.eq(sorted(s.get("region", "") for s in sets), ["eu", "us"],
                 "Series lapp cpu: two series (regions eu, us)")
            r.check(all(s.get("__profile_type__") == "process_cpu:cpu:"
                        "nanoseconds:cpu:nanoseconds" and
                        s.get("env") == "prod" and
                        s.get("pyroscope_spy") == "gospy" for s in sets),
                    "Series lapp cpu: full label sets", repr(sets))
        j = cj("window B", "Series", dict(crq(B),
                                          matchers=['{service_name="lapp"}']))
        if j is not None:
            r.eq(j.get("labelsSet") or [], [], "Series lapp in window B: "
                 "none")

        # -- Connect errors -------------------------------------------------------
        resp = connect(srv, "LabelNames", b"{not json")
        r.check(resp.status == 400 and resp.error_code() ==
                "invalid_argument", "malformed JSON -> 400 invalid_argument",
                resp.describe())
        resp = connect(srv, "LabelValues", dict(crq(ALL), name="env",
                                                matchers=['{env=~"("}']))
        r.check(resp.status == 400 and resp.error_code() ==
                "invalid_argument", "bad matcher -> 400 invalid_argument",
                resp.describe())
        resp = srv.request("POST", "/querier.v1.QuerierService/LabelNames",
                           body=b"{}", headers={"Content-Type": "text/plain"})
        r.check(resp.status == 415, "Content-Type text/plain -> 415",
                resp.describe())
        r.check(srv.ready(), "server still ready")
    finally:
        if srv is not None:
            srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_labels_api", BUDGET_S, main)
