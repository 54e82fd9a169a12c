#!/usr/bin/env python3
"""
test_query_lookback.py -- the per-tenant max_query_lookback limit on every
query API (querier/qry_int.h qry_limit_range; Pyroscope's
-querier.max-query-lookback).

One server, -auth.multitenancy-enabled, -validation.reject-older-than=0
(so profiles 3 h old are accepted), a runtime config giving tenant `lim`
max_query_lookback: 1h; tenant `free` is not limited (flag 0; its
override max_query_lookback: 0 matters in part 7).  Both tenants get the
same two uploads of app `lbapp`: one at now-3h (stack main;old, label
era=old) and one at now-10min (stack main;new, label era=new, a
different total).

  1. Range [now-4h, now-2h] (wholly before the lookback): for `lim`, every
     API answers 200 / OK with its empty shape -- /render (no ticks, zero
     timeline), /render-diff, /labels, /label-values, /pyroscope/label-
     values, Connect LabelNames, LabelValues, Series, ProfileTypes,
     SelectMergeStacktraces (flamegraph and tree), SelectMergeProfile,
     SelectSeries, Diff, SelectHeatmap, AnalyzeQuery; for `free` the same
     calls see the old upload (so the empties are not vacuous).
  2. Range [now-4h, now] (starts before the lookback): `lim` sees only the
     recent upload -- totals equal to the now-10min write alone (the
     totals `free` gets over [now-1h, now]), era values only "new", the
     old stack absent; `free` sees both (old + new totals, both eras).
     SelectMergeSpanProfile before the lookback is 200 and empty;
     SelectSeries exemplars for `lim` are all after the lookback, `free`
     gets the old profile's too.
  3. Diff with the left side before the lookback and the right side
     after it: leftTicks 0, rightTicks the recent total (also
     /render-diff).
  4. All-time label listings (/labels, /label-values and /api/apps with no
     range; Connect LabelValues with start = end = 0) are the lookback
     window for `lim`: only era=new; `free` lists both.
  5. max_query_length is measured after the lookback moved the start (as
     Pyroscope): tenant `both` (lookback 1h, length 2h) may ask [now-30d,
     now] (200, recent data only), while [now-30d, now] for `len` (length
     2h, no lookback) is 400 naming max_query_length.
  6. The same rule in a cluster (3 ingesters, RF 3, a separate querier:
     replica plans over several targets): SelectMergeStacktraces and
     SelectSeries before the lookback are empty for `lim`, across it the
     recent write alone (counted once), a Diff with its left side before
     the lookback has leftTicks 0; `free` sees both writes.
  7. The flag: with -querier.max-query-lookback=1h a tenant without an
     override is limited by it; `free`'s override max_query_lookback: 0
     lifts it.
"""

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from durability import Workspace  # noqa: E402
from smolder import Server, run_script  # noqa: E402

BUDGET_S = 120
PTYPE = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
SEL = '{service_name="lbapp"}'
OVERRIDES = ("overrides:\n"
             "  lim:\n"
             "    max_query_lookback: 1h\n"
             "  both:\n"
             "    max_query_lookback: 1h\n"
             "    max_query_length: 2h\n"
             "  len:\n"
             "    max_query_length: 2h\n"
             "  free:\n"
             "    max_query_lookback: 0\n")
TENANTS = ("lim", "free", "both", "len")


def main(r):
    tmp = tempfile.mkdtemp(prefix="smolder-lookback-")
    path = os.path.join(tmp, "overrides.yaml")
    with open(path, "w") as f:
        f.write(OVERRIDES)
    r.at_end(lambda: (os.path.exists(path) and os.unlink(path),
                      os.rmdir(tmp)))
    srv = Server(extra_flags=[
        "-auth.multitenancy-enabled=true",
        "-validation.reject-older-than=0",
        "-runtime-config.file=%s" % path]).start()

    def hdr(tenant):
        return {"X-Scope-OrgID": tenant}

    def get(tenant, route, q):
        return srv.request("GET", route, q, headers=hdr(tenant))

    def connect(tenant, method, msg):
        return srv.request(
            "POST", "/querier.v1.QuerierService/" + method,
            body=json.dumps(msg).encode(),
            headers=dict(hdr(tenant), **{"Content-Type":
                                         "application/json"}))

    # Data: the same two uploads for every tenant.
    now = int(time.time())
    t_old, t_new = now - 3 * 3600, now - 600
    for tenant in TENANTS:
        for t, name, body in ((t_old, "lbapp{era=old}", b"main;old 30\n"),
                              (t_new, "lbapp{era=new}", b"main;new 7\n")):
            g = srv.request("POST", "/ingest", {
                "name": name, "from": str(t), "until": str(t)}, body,
                hdr(tenant))
            r.check(g.status == 200, "ingest %s for %s" % (name, tenant),
                    g.describe())

    now = int(time.time())
    old_rng = (now - 4 * 3600, now - 2 * 3600)     # before the lookback
    wide_rng = (now - 4 * 3600, now)               # across it
    new_rng = (now - 3600 + 60, now)               # after it

    # -- the calls, each returning (status, total-ish, details) -----------

    def render(tenant, rng):
        g = get(tenant, "/render", {"query": PTYPE + SEL,
                                    "from": str(rng[0]),
                                    "until": str(rng[1])})
        if g.status != 200:
            return g.status, None, g.describe()
        j = g.json()
        fb = j.get("flamebearer") or {}
        tl = (j.get("timeline") or {}).get("samples") or []
        return 200, (fb.get("numTicks", 0), sum(tl), fb.get("names")), ""

    def render_diff(tenant, left, right):
        q = {"leftQuery": PTYPE + SEL, "rightQuery": PTYPE + SEL,
             "leftFrom": str(left[0]), "leftUntil": str(left[1]),
             "rightFrom": str(right[0]), "rightUntil": str(right[1])}
        g = get(tenant, "/render-diff", q)
        if g.status != 200:
            return g.status, None, g.describe()
        j = g.json()
        return 200, (j.get("leftTicks", 0), j.get("rightTicks", 0)), ""

    def http_list(tenant, route, q):
        g = get(tenant, route, q)
        if g.status != 200:
            return g.status, None, g.describe()
        return 200, sorted(g.json()), ""

    def c(tenant, method, msg):
        g = connect(tenant, method, msg)
        if g.status != 200:
            return g.status, None, g.describe()
        return 200, g.json(), ""

    def ms(rng):
        return rng[0] * 1000, rng[1] * 1000

    def merge_msg(rng, **kw):
        s, e = ms(rng)
        return dict({"profileTypeID": PTYPE, "labelSelector": SEL,
                     "start": s, "end": e}, **kw)

    def fg_total(j):
        return int((j.get("flamegraph") or {}).get("total", 0))

    def series_total(j):
        return sum(float(p.get("value", 0)) for s in j.get("series") or []
                   for p in s.get("points") or [])

    def pprof_total(j):
        return sum(int(v) for s in j.get("sample") or []
                   for v in s.get("value") or [])

    def heatmap_profiles(j):
        return sum(int(n) for s in j.get("series") or []
                   for sl in s.get("slots") or []
                   for n in sl.get("counts") or [])

    # 1. Wholly before the lookback: empty for lim, data for free.
    def all_apis(tenant, rng):
        """{api: (status, value)}; value None when not 200."""
        s, e = ms(rng)
        out = {}

        def put(name, res, fn=lambda v: v):
            st, v, d = res
            out[name] = (st, fn(v) if st == 200 else None, d)
        put("/render", render(tenant, rng))
        put("/render-diff", render_diff(tenant, rng, rng))
        q = {"from": str(rng[0]), "until": str(rng[1])}
        put("/labels", http_list(tenant, "/labels", q),
            lambda v: [n for n in v if n == "era"])
        put("/label-values", http_list(tenant, "/label-values",
                                       dict(q, label="era")))
        put("/pyroscope/label-values", http_list(
            tenant, "/pyroscope/label-values", dict(q, label="__name__")))
        put("LabelNames", c(tenant, "LabelNames", {
            "matchers": [SEL], "start": s, "end": e}),
            lambda j: j.get("names") or [])
        put("LabelValues", c(tenant, "LabelValues", {
            "name": "era", "matchers": [SEL], "start": s, "end": e}),
            lambda j: j.get("names") or [])
        put("Series", c(tenant, "Series", {
            "matchers": [SEL], "start": s, "end": e}),
            lambda j: len(j.get("labelsSet") or []))
        put("ProfileTypes", c(tenant, "ProfileTypes", {"start": s,
                                                       "end": e}),
            lambda j: len(j.get("profileTypes") or []))
        put("SelectMergeStacktraces", c(tenant, "SelectMergeStacktraces",
                                        merge_msg(rng, maxNodes=50)),
            fg_total)
        put("SelectMergeStacktraces tree", c(
            tenant, "SelectMergeStacktraces",
            merge_msg(rng, format="PROFILE_FORMAT_TREE")),
            lambda j: len(j.get("tree") or ""))
        put("SelectMergeProfile", c(tenant, "SelectMergeProfile",
                                    merge_msg(rng)), pprof_total)
        put("SelectSeries", c(tenant, "SelectSeries",
                              merge_msg(rng, step=15)), series_total)
        put("Diff", c(tenant, "Diff", {"left": merge_msg(rng),
                                       "right": merge_msg(rng)}),
            lambda j: (int((j.get("flamegraph") or {}).get(
                "leftTicks", 0)), int((j.get("flamegraph") or {}).get(
                    "rightTicks", 0))))
        put("SelectHeatmap", c(tenant, "SelectHeatmap", merge_msg(
            rng, step=15, queryType="HEATMAP_QUERY_TYPE_INDIVIDUAL")),
            heatmap_profiles)
        put("AnalyzeQuery", c(tenant, "AnalyzeQuery", {
            "query": PTYPE + SEL, "start": s, "end": e}),
            lambda j: int((j.get("queryImpact") or {}).get(
                "totalQueriedSeries", 0)))
        return out

    def is_empty(api, v):
        if api == "/render":
            return v[0] == 0 and v[1] == 0
        if api in ("/render-diff", "Diff"):
            return v == (0, 0)
        return v in (0, [], 0.0)

    lim_old = all_apis("lim", old_rng)
    free_old = all_apis("free", old_rng)
    for api, (st, v, d) in lim_old.items():
        r.check(st == 200 and is_empty(api, v),
                "%s before the lookback for lim: 200 and empty" % api,
                "%s %r %s" % (st, v, d))
    for api, (st, v, d) in free_old.items():
        r.check(st == 200 and not is_empty(api, v),
                "%s over the same range for free: the old data" % api,
                "%s %r %s" % (st, v, d))

    # 2. Across the lookback: lim sees the recent upload alone.
    st, lim_w, d = render("lim", wide_rng)
    st2, free_w, d2 = render("free", wide_rng)
    st3, free_n, d3 = render("free", new_rng)
    print("render totals: lim [now-4h,now] %s, free [now-4h,now] %s, "
          "free [now-1h,now] %s" % (lim_w and lim_w[:2], free_w and
                                    free_w[:2], free_n and free_n[:2]))
    ok = st == st2 == st3 == 200
    r.check(ok, "/render across the lookback: 200", d + d2 + d3)
    if ok:
        r.check(free_n[0] > 0 and lim_w[0] == free_n[0] and
                lim_w[1] == free_n[1],
                "/render for lim over [now-4h, now] = the now-10min write "
                "alone (ticks and timeline)", "%r vs %r" % (lim_w, free_n))
        r.check(free_w[0] > free_n[0] and free_w[1] == free_w[0],
                "/render for free over [now-4h, now] has both writes",
                "%r vs %r" % (free_w, free_n))
        r.check("old" not in (lim_w[2] or []) and "new" in (lim_w[2] or [])
                and "old" in (free_w[2] or []),
                "the old stack is absent for lim, present for free",
                "%r / %r" % (lim_w[2], free_w[2]))
    lim_all = all_apis("lim", wide_rng)
    free_all = all_apis("free", wide_rng)
    free_new = all_apis("free", new_rng)
    for api in ("SelectMergeStacktraces", "SelectMergeProfile",
                "SelectSeries", "SelectHeatmap", "Series", "AnalyzeQuery"):
        lv, fv, nv = lim_all[api][1], free_all[api][1], free_new[api][1]
        r.check(lim_all[api][0] == 200 and lv == nv and fv is not None and
                nv is not None and fv > nv,
                "%s over [now-4h, now]: lim = the recent data alone (%r), "
                "free has more (%r)" % (api, lv, fv),
                "%r %r %r" % (lim_all[api], free_all[api], free_new[api]))
    for api in ("LabelValues", "/label-values"):
        r.eq(lim_all[api][1], ["new"], "%s era for lim over [now-4h, now]"
             % api)
        r.eq(free_all[api][1], ["new", "old"], "%s era for free over "
             "[now-4h, now]" % api)
    lt = lim_all["Diff"][1]
    r.check(lt is not None and lt[0] == lt[1] == free_new[
        "SelectMergeStacktraces"][1],
            "Diff over [now-4h, now] for lim: both sides the recent total",
            "%r" % (lim_all["Diff"],))

    # SelectMergeSpanProfile (no span data here: 200 and empty for both)
    # and SelectSeries exemplars (looked up under the same limits).
    for tenant in ("lim", "free"):
        st, v, d = c(tenant, "SelectMergeSpanProfile", merge_msg(
            old_rng, spanSelector=["0000000000000001"]))
        r.check(st == 200 and fg_total(v or {}) == 0,
                "SelectMergeSpanProfile before the lookback for %s: 200, "
                "empty" % tenant, "%s %r %s" % (st, v, d))
    cutoff_ms = (now - 3600) * 1000
    for tenant, want_old in (("lim", False), ("free", True)):
        st, v, d = c(tenant, "SelectSeries", merge_msg(
            wide_rng, step=15, exemplarType="EXEMPLAR_TYPE_INDIVIDUAL"))
        ts = [int(e.get("timestamp", 0)) for se in (v or {}).get(
            "series") or [] for p in se.get("points") or []
            for e in p.get("exemplars") or []]
        r.check(st == 200 and len(ts) > 0 and
                any(t < cutoff_ms for t in ts) == want_old,
                "SelectSeries exemplars over [now-4h, now] for %s: %s" % (
                    tenant, "the old one too" if want_old else
                    "only after the lookback"), "%s %r %s" % (st, ts, d))

    # 3. A Diff whose sides fall on either side of the lookback.
    st, v, d = c("lim", "Diff", {"left": merge_msg(old_rng),
                                 "right": merge_msg(new_rng)})
    fg = (v or {}).get("flamegraph") or {}
    r.check(st == 200 and int(fg.get("leftTicks", 0)) == 0 and
            int(fg.get("rightTicks", 0)) ==
            free_new["SelectMergeStacktraces"][1],
            "Diff, left before the lookback: leftTicks 0, rightTicks the "
            "recent total", "%s %r %s" % (st, fg, d))
    st, v, d = render_diff("lim", old_rng, new_rng)
    r.check(st == 200 and v is not None and v[0] == 0 and v[1] > 0,
            "/render-diff, left before the lookback: no leftTicks, "
            "rightTicks", "%s %r %s" % (st, v, d))

    # 4. All-time label listings are the lookback window for lim.
    for tenant, want in (("lim", ["new"]), ("free", ["new", "old"])):
        st, v, d = http_list(tenant, "/label-values", {"label": "era"})
        r.check(st == 200 and v == want, "/label-values era with no range "
                "for %s: %r" % (tenant, want), "%s %r %s" % (st, v, d))
        st, v, d = c(tenant, "LabelValues", {"name": "era", "start": 0,
                                              "end": 0})
        got = sorted((v or {}).get("names") or [])
        r.check(st == 200 and got == want, "LabelValues era, start = end "
                "= 0, for %s: %r" % (tenant, want), "%s %r %s" % (st, got,
                                                                 d))
        st, v, d = http_list(tenant, "/labels", {})
        r.check(st == 200 and "era" in (v or []), "/labels with no range "
                "for %s lists era" % tenant, "%s %r %s" % (st, v, d))
        g = get(tenant, "/api/apps", {})
        r.check(g.status == 200 and any(
            a.get("name") == "lbapp.cpu" for a in g.json()),
            "/api/apps for %s lists the recent app" % tenant, g.describe())
    st, v, d = http_list("lim", "/label-values", {
        "label": "era", "from": str(old_rng[0]), "until": str(old_rng[1])})
    r.check(st == 200 and v == [], "/label-values before the lookback: []",
            "%s %r" % (st, v))

    # 5. max_query_length after the lookback.
    month = (now - 30 * 86400, now)
    st, v, d = render("both", month)
    r.check(st == 200 and v is not None and
            v[0] == free_n[0] if free_n else False,
            "30 days for `both` (lookback 1h, length 2h): 200, the recent "
            "data", "%s %r %s" % (st, v, d))
    st, v, d = c("both", "SelectMergeStacktraces", merge_msg(month))
    r.check(st == 200, "SelectMergeStacktraces over 30 days for `both`: "
            "200", d)
    for api, res in (("/render", render("len", month)),
                     ("SelectMergeStacktraces", c(
                         "len", "SelectMergeStacktraces",
                         merge_msg(month)))):
        st, v, d = res
        r.check(st == 400 and "max_query_length" in d,
                "%s over 30 days for `len` (no lookback): 400 "
                "max_query_length" % api, "%s %s" % (st, d))
    srv.check_stopped(r)
    cluster_phase(r, path)
    flag_phase(r, path)


def flag_phase(r, path):
    """-querier.max-query-lookback=1h for every tenant; `free`'s override
    0 lifts it."""
    srv = Server(extra_flags=[
        "-auth.multitenancy-enabled=true",
        "-validation.reject-older-than=0",
        "-querier.max-query-lookback=1h",
        "-runtime-config.file=%s" % path]).start()
    now = int(time.time())
    for tenant in ("other", "free"):
        for t, body in ((now - 3 * 3600, b"main;old 30\n"),
                        (now - 600, b"main;new 7\n")):
            g = srv.request("POST", "/ingest", {
                "name": "lbapp", "from": str(t), "until": str(t)}, body,
                {"X-Scope-OrgID": tenant})
            r.check(g.status == 200, "flag: ingest for %s" % tenant,
                    g.describe())

    def ticks(tenant, a, b):
        g = srv.request("GET", "/render", {
            "query": PTYPE + SEL, "from": str(a), "until": str(b)},
            headers={"X-Scope-OrgID": tenant})
        return (g.json().get("flamebearer") or {}).get("numTicks", 0) \
            if g.status == 200 else g.describe()

    old, wide = (now - 4 * 3600, now - 2 * 3600), (now - 4 * 3600, now)
    r.eq(ticks("other", *old), 0, "flag: a tenant without an override "
         "gets the flag's lookback (empty before it)")
    r.check(0 < ticks("other", *wide) < ticks("free", *wide),
            "flag: across it, the recent write alone for that tenant; "
            "`free` (max_query_lookback: 0) reads both",
            "%r %r" % (ticks("other", *wide), ticks("free", *wide)))
    fo = ticks("free", *old)
    r.check(isinstance(fo, int) and fo > 0,
            "flag: override 0 lifts the limit for `free`", "%r" % (fo,))
    srv.check_stopped(r)


def cluster_phase(r, path):
    ws = Workspace("lookback")
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                extra=["-auth.multitenancy-enabled=true",
                       "-validation.reject-older-than=0",
                       "-runtime-config.file=%s" % path], name="lookback")
    try:
        c.start()
        dist, qry = c.distributors[0], c.queriers[0]
        now = int(time.time())
        for tenant in ("lim", "free"):
            for t, name, body in ((now - 3 * 3600, "lbapp{era=old}",
                                   b"main;old 30\n"),
                                  (now - 600, "lbapp{era=new}",
                                   b"main;new 7\n")):
                g = dist.request("POST", "/ingest", {
                    "name": name, "from": str(t), "until": str(t)}, body,
                    {"X-Scope-OrgID": tenant})
                r.check(g.status == 200, "cluster: ingest %s for %s" % (
                    name, tenant), g.describe())

        def call(tenant, method, msg):
            g = qry.request(
                "POST", "/querier.v1.QuerierService/" + method,
                body=json.dumps(msg).encode(),
                headers={"Content-Type": "application/json",
                         "X-Scope-OrgID": tenant})
            return g.status, (g.json() if g.status == 200 else {}), \
                g.describe()

        def msg(a, b, **kw):
            return dict({"profileTypeID": PTYPE, "labelSelector": SEL,
                         "start": a * 1000, "end": b * 1000}, **kw)

        def totals(tenant, a, b):
            st1, j1, d1 = call(tenant, "SelectMergeStacktraces", msg(a, b))
            st2, j2, d2 = call(tenant, "SelectSeries", msg(a, b, step=15))
            if st1 != 200 or st2 != 200:
                return None, d1 + d2
            fg = int((j1.get("flamegraph") or {}).get("total", 0))
            se = sum(float(p.get("value", 0)) for x in j2.get("series") or []
                     for p in x.get("points") or [])
            return (fg, se), ""

        old, wide, new = ((now - 4 * 3600, now - 2 * 3600),
                          (now - 4 * 3600, now), (now - 3000, now))
        lo, d = totals("lim", *old)
        r.check(lo == (0, 0), "cluster: before the lookback, lim's merge "
                "and series are 200 and empty", "%r %s" % (lo, d))
        fo, d = totals("free", *old)
        r.check(fo is not None and fo[0] > 0, "cluster: free sees the old "
                "write", "%r %s" % (fo, d))
        lw, d1 = totals("lim", *wide)
        fn, d2 = totals("free", *new)
        fw, d3 = totals("free", *wide)
        r.check(lw is not None and fn is not None and lw == fn and
                fn[0] > 0, "cluster: across the lookback, lim = the recent "
                "write alone (replicas counted once)", "%r %r %s%s" % (
                    lw, fn, d1, d2))
        r.check(fw is not None and fo is not None and fn is not None and
                fw[0] == fo[0] + fn[0], "cluster: free over [now-4h, now] "
                "= old + new", "%r %r %r %s" % (fw, fo, fn, d3))
        st, j, d = call("lim", "Diff", {"left": msg(*old),
                                        "right": msg(*wide)})
        f = j.get("flamegraph") or {}
        r.check(st == 200 and int(f.get("leftTicks", 0)) == 0 and
                fn is not None and int(f.get("rightTicks", 0)) == fn[0],
                "cluster: Diff with the left side before the lookback: "
                "leftTicks 0, rightTicks the recent write", "%s %r %s" % (
                    st, f, d))
    finally:
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_query_lookback", BUDGET_S, main)
