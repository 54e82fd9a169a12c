#!/usr/bin/env python3
"""
test_settings.py -- settings.v1 Get/Set/Delete, capabilities.v1 and
version.v1: what Grafana's Profiles Drilldown asks at start-up.

Single binary (one data dir, restarted):
  - Get on a fresh tenant: 200 {} (Drilldown's start-up call);
  - Set answers the stored setting (modifiedAt kept, or now when 0), Get
    lists settings sorted by name, JSON and proto codecs;
  - a Set older than the stored one: 409 already_exists, value kept;
  - Delete removes one setting; Delete of an unknown name is 200;
  - no name, no setting: 400 invalid_argument;
  - tenants do not see each other's settings;
  - after SIGTERM and after kill -9 and restart, Get returns the same.
  - GetFeatureFlags lists flags {name, enabled, description};
    Version answers {"QuerierAPI": "1"}; vcs.v1 answers 501
    unimplemented, as Pyroscope without a GitHub app does.
Cluster (3 ingesters, RF=3, 1 distributor, 2 queriers):
  - Set through querier 0 is read through querier 1;
  - with one ingester killed, Set and Get still work (majority);
  - after it restarts (it missed v2), Get still answers v2, and with
    another ingester down too; with a minority left: 503 unavailable.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import DataServer, Workspace, limit_flags  # noqa: E402
from oracle import field_bytes, iter_fields  # noqa: E402
from smolder import Results, install_timeout  # noqa: E402

SVC = "/settings.v1.SettingsService/"
JSON = {"Content-Type": "application/json"}
PROTO = {"Content-Type": "application/proto"}


def call(s, method, body, headers=None):
    import json as _j
    h = dict(JSON)
    h.update(headers or {})
    return s.request("POST", SVC + method, body=_j.dumps(body).encode(),
                     headers=h)


def settings(s, headers=None):
    r = call(s, "Get", {}, headers)
    if r.status != 200:
        return None
    return [(x["name"], x.get("value", ""))
            for x in r.json().get("settings", [])]


def check_single(r, ws):
    data = ws.data_dir("single")
    s = DataServer(data, ws.log_dir("first"), name="settings").start()
    g = call(s, "Get", {})
    r.check(g.status == 200 and g.json() == {}, "Get on a fresh tenant: "
            "200 {} (what Drilldown needs at start-up)", g.describe())
    p = call(s, "Set", {"setting": {"name": "pluginSettings",
                                    "value": '{"a":1}',
                                    "modifiedAt": "1700000000000"}})
    r.check(p.status == 200 and p.json() == {"setting": {
        "name": "pluginSettings", "value": '{"a":1}',
        "modifiedAt": "1700000000000"}},
        "Set answers the stored setting, modifiedAt as sent", p.describe())
    t0 = int(time.time() * 1000)
    p = call(s, "Set", {"setting": {"name": "alpha", "value": "x"}})
    m = int(p.json()["setting"]["modifiedAt"]) if p.status == 200 else 0
    r.check(p.status == 200 and t0 - 5000 <= m <= t0 + 60000,
            "Set without modifiedAt stores now", p.describe())
    r.eq(settings(s), [("alpha", "x"), ("pluginSettings", '{"a":1}')],
         "Get lists both, sorted by name")
    # proto codec: SetSettingsRequest{setting{name, value, modifiedAt}}.
    body = field_bytes(1, 2, field_bytes(1, 2, b"beta") +
                       field_bytes(2, 2, b"proto") +
                       field_bytes(3, 0, 1700000000001))
    p = s.request("POST", SVC + "Set", body=body, headers=PROTO)
    ok = p.status == 200
    if ok:
        top = list(iter_fields(p.body))
        inner = {f: v for f, _, v, _, _ in iter_fields(top[0][2])}
        ok = inner == {1: b"beta", 2: b"proto", 3: 1700000000001}
    r.check(ok, "proto codec Set answers the setting", p.describe())
    g = s.request("POST", SVC + "Get", body=b"", headers=PROTO)
    names = []
    if g.status == 200:
        for f, _, v, _, _ in iter_fields(g.body):
            names.append({ff: vv for ff, _, vv, _, _ in
                          iter_fields(v)}.get(1))
    r.eq(names, [b"alpha", b"beta", b"pluginSettings"],
         "proto codec Get lists the settings")
    p = call(s, "Set", {"setting": {"name": "pluginSettings",
                                    "value": "old",
                                    "modifiedAt": "1600000000000"}})
    r.check(p.status == 409 and p.error_code() == "already_exists",
            "an older Set: 409 already_exists", p.describe())
    r.eq(dict(settings(s))["pluginSettings"], '{"a":1}',
         "the newer value is kept")
    for body, what in (({"setting": {"name": "", "value": "v"}},
                        "an empty name"),
                       ({}, "no setting"),
                       ({"setting": {"name": "n" * 300}}, "a 300-byte name")):
        p = call(s, "Set", body)
        r.check(p.status == 400 and p.error_code() == "invalid_argument",
                "Set with %s: 400 invalid_argument" % what, p.describe())
    p = call(s, "Set", {"setting": {"name": "big", "value": "v" * 300000}})
    r.check(p.status == 400, "a 300 KB value: 400", p.describe())
    d = call(s, "Delete", {"name": "beta"})
    r.check(d.status == 200 and d.json() == {}, "Delete answers {}",
            d.describe())
    d = call(s, "Delete", {"name": "never-set"})
    r.check(d.status == 200, "Delete of an unknown name: 200", d.describe())
    d = call(s, "Delete", {})
    r.check(d.status == 400, "Delete without a name: 400", d.describe())
    want = [("alpha", "x"), ("pluginSettings", '{"a":1}')]
    r.eq(settings(s), want, "Delete removed beta only")

    f = s.request("POST", "/capabilities.v1.FeatureFlagsService/"
                  "GetFeatureFlags", body=b"{}", headers=JSON)
    ff = f.json().get("featureFlags", []) if f.status == 200 else []
    r.check(f.status == 200 and len(ff) >= 1 and
            all(isinstance(x.get("name"), str) and
                x.get("enabled") in (True, None) and
                isinstance(x.get("description"), str) for x in ff),
            "GetFeatureFlags: featureFlags [{name, enabled, description}]",
            f.describe())
    v = s.request("POST", "/version.v1.Version/Version", body=b"{}",
                  headers=JSON)
    r.check(v.status == 200 and v.json() == {"QuerierAPI": "1"},
            "Version: {\"QuerierAPI\": \"1\"}", v.describe())
    vp = s.request("POST", "/version.v1.Version/Version", body=b"",
                   headers=PROTO)
    r.check(vp.status == 200 and vp.body == b"\x08\x01",
            "Version in proto: field 1 = 1", vp.describe())
    for m in ("GithubApp", "GetFile", "GetCommit", "GetCommits"):
        u = s.request("POST", "/vcs.v1.VCSService/" + m, body=b"{}",
                      headers=JSON)
        r.check(u.status == 501 and u.error_code() == "unimplemented",
                "vcs.v1 %s: 501 unimplemented (no source links), not 404"
                % m, u.describe())

    probs = s.stop()
    r.check(not probs, "exits 0 on SIGTERM", "\n".join(probs))
    s = DataServer(data, ws.log_dir("restart"), name="settings2").start()
    r.eq(settings(s), want, "settings survive a restart")
    call(s, "Set", {"setting": {"name": "gamma", "value": "g"}})
    s.kill9()
    s = DataServer(data, ws.log_dir("kill9"), name="settings3").start()
    r.eq(settings(s), sorted(want + [("gamma", "g")]),
         "an acknowledged Set survives kill -9")
    s.check_stopped(r)

    mt = DataServer(ws.data_dir("mt"), ws.log_dir("mt"),
                    extra_flags=["-auth.multitenancy-enabled=true"],
                    name="settings-mt").start()
    a = {"X-Scope-OrgID": "a"}
    call(mt, "Set", {"setting": {"name": "k", "value": "for-a"}}, a)
    r.eq(settings(mt, a), [("k", "for-a")], "tenant a sees its setting")
    r.eq(settings(mt, {"X-Scope-OrgID": "b"}), [],
         "tenant b does not see a's settings")
    g = call(mt, "Get", {})
    r.check(g.status == 401, "multitenancy without a tenant: 401",
            g.describe())
    mt.check_stopped(r)


def check_cluster(r, ws):
    c = Cluster(ws, ingesters=3, distributors=1, queriers=2, rf=3,
                extra=limit_flags(), name="cs")
    try:
        c.start()
        q0, q1 = c.queriers

        def set_read(setter, reader, value, set_what, read_what):
            p = call(setter, "Set", {"setting": {"name": "pluginSettings",
                                                 "value": value}})
            r.check(p.status == 200, set_what, p.describe())
            r.eq(settings(reader), [("pluginSettings", value)], read_what)
        set_read(q0, q1, "v1", "cluster: Set through querier 0",
                 "cluster: querier 1 reads it")
        c.kill9_ingester(2)
        set_read(q1, q0, "v2", "cluster: Set with one ingester down",
                 "cluster: Get with one ingester down sees the new value")
        c.restart_ingester(2)
        r.check(c.wait_ring(active=3), "cluster: ingester 2 rejoins",
                str(c.states()))
        r.eq(settings(q0), [("pluginSettings", "v2")],
             "cluster: Get after the restart of the ingester that missed "
             "v2 answers v2")
        c.kill9_ingester(0)
        r.check(c.wait_ring(active=2), "cluster: ingester 0 seen down",
                str(c.states()))
        r.eq(settings(q1), [("pluginSettings", "v2")],
             "cluster: with ingester 0 down, ingesters 1 and 2 give v2")
        c.kill9_ingester(1)
        r.check(c.wait_ring(active=1), "cluster: ingester 1 seen down",
                str(c.states()))
        g = call(q0, "Get", {})
        r.check(g.status == 503 and g.error_code() == "unavailable",
                "cluster: a minority of ingesters: 503 unavailable",
                g.describe())
    finally:
        c.check_stopped_after_kills(r)


def main():
    install_timeout(300)
    r = Results("settings")
    ws = Workspace("settings")
    try:
        check_single(r, ws)
        check_cluster(r, ws)
    finally:
        ws.cleanup(r)
    r.finish()


if __name__ == "__main__":
    main()
