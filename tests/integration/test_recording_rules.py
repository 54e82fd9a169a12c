#!/usr/bin/env python3
"""
test_recording_rules.py -- recording rules (querier/rules.c) into a real
Prometheus (Debian's prometheus, remote-write receiver on, old samples
accepted: tests/tools/prometheus_server.py).

The single binary holds two hours of history of service "rr" -- one
upload per region (eu, us) every 30 s, stacks main;work;hot and main;idle
with known values -- written before any rule exists.  Then:
  1. settings.v1.RecordingRulesService: Upsert creates two rules (a
     generated id, generation 1, the profile type read from the
     __profile_type__ matcher): rr_cpu (grouped by region, an external
     label) and rr_hot (only the samples through function "hot"); List
     and Get return them; an Upsert with a stale generation is
     already_exists; bad rules (no profile type, a bad metric name) are
     invalid_argument; settings.v1 Get does not show them.
  2. Backfill: without any new upload, both metrics appear in
     Prometheus over the whole history; PromQL's raw samples
     (rr_cpu[3h]) equal Smolder's own SelectSeries for the same
     selection, group and step, point for point (rr_hot: the SelectSeries
     through the call site main;work;hot, the only path to hot), the
     external label is on every series, and nothing is sent twice.
  3. A restart of Smolder sends nothing again (the marks are durable)
     and new uploads are evaluated once their step is over.
  4. Delete removes a rule from List.
"""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))

import prometheus_server  # noqa: E402
from durability import DataServer, Workspace, connect, limit_flags  # noqa: E402
from smolder import metric, run_script  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
STEP = 10
NOW = int(time.time())
H0 = (NOW // STEP) * STEP - 2 * 3600
SVC = "rr"


def values(k, region):
    hot = 10 + k % 7 + (5 if region == "eu" else 0)
    idle = 3 + k % 5
    return hot, idle


def ingest(s, r, k0, k1):
    bad = []
    for k in range(k0, k1):
        t = H0 + 30 * k
        for region in ("eu", "us"):
            hot, idle = values(k, region)
            body = ("main;work;hot %d\nmain;idle %d\n" % (hot, idle)).encode()
            resp = s.ingest({"name": "%s.cpu{region=%s}" % (SVC, region),
                             "from": str(t), "until": str(t),
                             "sampleRate": "100"}, body)
            if resp.status != 200:
                bad.append(resp.describe())
    r.check(not bad, "%d uploads acknowledged" % (2 * (k1 - k0)),
            "\n".join(bad[:3]))


def rpc(s, method, body):
    return connect(s, method, body,
                   service="/settings.v1.RecordingRulesService/")


def selectseries(s, start, end, call_site=None):
    body = {"profileTypeID": CPU, "labelSelector": '{service_name="%s"}' %
            SVC, "start": start * 1000, "end": end * 1000, "step": STEP,
            "groupBy": ["region"]}
    if call_site:
        body["stackTraceSelector"] = {"call_site": [{"name": n}
                                                    for n in call_site]}
    resp = connect(s, "SelectSeries", body)
    out = {}
    for se in (resp.json() if resp.status == 200 else {}).get("series", []):
        reg = dict((lp["name"], lp["value"]) for lp in se.get("labels", []))
        out[reg.get("region", "")] = [
            (int(p["timestamp"]), float(p["value"]))
            for p in se.get("points", [])]
    return out


def prom_samples(url, metric_name):
    """{region: [(ts_ms, value)]} of every raw sample, and the label sets."""
    res = prometheus_server.query(url, "%s[4h]" % metric_name, time.time())
    out, labels = {}, []
    for se in res:
        m = se["metric"]
        labels.append(m)
        out[m.get("region", "")] = [(int(round(float(t) * 1000)), float(v))
                                    for t, v in se["values"]]
    return out, labels


def wait_samples(s, want, timeout=60):
    deadline = time.monotonic() + timeout
    v = 0
    while time.monotonic() < deadline:
        v = metric(s, "smolder_recording_rules_samples_total")
        if v >= want:
            break
        time.sleep(0.3)
    return v


def rules_api(r, s):
    sel = '{__profile_type__="%s", service_name="%s"}' % (CPU, SVC)
    a = rpc(s, "UpsertRecordingRule", {
        "metricName": "rr_cpu", "matchers": [sel], "groupBy": ["region"],
        "externalLabels": [{"name": "source", "value": "smolder"}]})
    b = rpc(s, "UpsertRecordingRule", {
        "metricName": "rr_hot", "matchers": [sel], "groupBy": ["region"],
        "stacktraceFilter": {"functionName": {"functionName": "hot"}}})
    ra = (a.json() if a.status == 200 else {}).get("rule", {})
    rb = (b.json() if b.status == 200 else {}).get("rule", {})
    r.check(ra.get("id") and ra.get("generation") in (1, "1") and
            ra.get("profileType") == CPU, "Upsert creates rr_cpu (an id, "
            "generation 1, the profile type)", a.describe())
    r.check(rb.get("id") and rb.get("id") != ra.get("id"),
            "Upsert creates rr_hot with an id of its own", b.describe())
    lst = rpc(s, "ListRecordingRules", {})
    names = sorted(x.get("metricName") for x in
                   (lst.json() if lst.status == 200 else {}).get("rules", []))
    r.eq(names, ["rr_cpu", "rr_hot"], "List returns both rules")
    g = rpc(s, "GetRecordingRule", {"id": ra.get("id", "")})
    r.check(g.status == 200 and g.json().get("rule", {}).get(
        "metricName") == "rr_cpu", "Get returns a rule", g.describe())
    stale = rpc(s, "UpsertRecordingRule", {
        "id": ra.get("id", ""), "generation": 7, "metricName": "rr_cpu",
        "matchers": [sel]})
    r.check(stale.status == 409, "an Upsert with a stale generation is "
            "already_exists", stale.describe())
    for what, body in (("no profile type", {"metricName": "x",
                                            "matchers": ['{a="b"}']}),
                       ("a bad metric name", {"metricName": "1x",
                                              "matchers": [sel]})):
        resp = rpc(s, "UpsertRecordingRule", body)
        r.check(resp.status == 400, "a rule with %s is invalid_argument" %
                what, resp.describe())
    st = connect(s, "Get", {}, service="/settings.v1.SettingsService/")
    r.check(st.status == 200 and "recording" not in st.text(),
            "settings.v1 Get does not list the rules' registers", st.text())
    return ra.get("id"), rb.get("id")


def compare(r, s, url, what):
    end = NOW - 60
    want = selectseries(s, H0 - 60, end)
    want_hot = selectseries(s, H0 - 60, end, ["main", "work", "hot"])
    got, labels = prom_samples(url, "rr_cpu")
    got_hot, _ = prom_samples(url, "rr_hot")
    cut = lambda d: {k: [p for p in v if p[0] < end * 1000 - STEP * 1000]
                     for k, v in d.items()}
    r.eq(cut(got), cut(want), "%s: rr_cpu's samples in Prometheus are "
         "SelectSeries' points" % what)
    r.eq(cut(got_hot), cut(want_hot), "%s: rr_hot's samples are the "
         "SelectSeries through main;work;hot" % what)
    r.check(labels and all(m.get("source") == "smolder" for m in labels),
            "%s: the external label is on every series" % what, str(labels))
    first = min(p[0] for v in got.values() for p in v) if got else None
    r.eq(first, H0 * 1000, "%s: the backfill starts at the first upload, "
         "made before the rule" % what)


def main(r):
    if shutil.which("prometheus") is None:
        r.skip_all("prometheus is not installed (make deps installs it)")
    ws = Workspace("rules")
    r.at_end(lambda: ws.cleanup(r))
    try:
        prom = prometheus_server.start_for(r, ws.path("prometheus"))
    except prometheus_server.PromError as e:
        r.fail("prometheus starts", str(e))
        return
    flags = ["-validation.reject-older-than=0",
             "-recording-rules.remote-write-url=%s/api/v1/write" %
             prom["url"],
             "-recording-rules.evaluation-interval=%ds" % STEP,
             "-recording-rules.evaluation-delay=0s",
             "-recording-rules.backfill-period=3h"] + limit_flags()
    data = ws.data_dir("single")
    s = DataServer(data, ws.log_dir("s1"), name="s1",
                   extra_flags=flags).start()
    try:
        ingest(s, r, 0, 240)
        ida, idb = rules_api(r, s)
        # every group's points of both rules
        npts = sum(len(v) for v in selectseries(s, H0 - 60, NOW).values())
        got = wait_samples(s, 2 * npts)
        r.check(got >= 2 * npts, "the backfill sends both rules' history "
                "(%d samples of %d points x 2)" % (got, npts))
        time.sleep(1)
        compare(r, s, prom["url"], "backfill")
        sent = metric(s, "smolder_recording_rules_samples_total")
        r.check(sent == got, "nothing is sent twice (%d)" % sent)
    finally:
        s.stop()
    s = DataServer(data, ws.log_dir("s2"), name="s2",
                   extra_flags=flags).start()
    try:
        time.sleep(2 * STEP / 10 + 1)
        r.eq(metric(s, "smolder_recording_rules_samples_total"), 0,
             "after a restart nothing old is sent again (the marks are "
             "durable)")
        # a new upload, in the step under way: sent once the step ended
        t = int(time.time())
        resp = s.ingest({"name": "%s.cpu{region=eu}" % SVC, "from": str(t),
                         "until": str(t), "sampleRate": "100"},
                        b"main;work;hot 42\nmain;idle 8\n")
        r.check(resp.status == 200, "a new upload", resp.describe())
        v = wait_samples(s, 2, timeout=4 * STEP)
        r.eq(v, 2, "its step is evaluated once over: one sample per rule")
        got, _ = prom_samples(prom["url"], "rr_cpu")
        hot, _ = prom_samples(prom["url"], "rr_hot")
        ts = (t // STEP) * STEP * 1000
        r.eq(([p for p in got.get("eu", []) if p[0] == ts],
              [p for p in hot.get("eu", []) if p[0] == ts]),
             ([(ts, 50 * 1e7)], [(ts, 42 * 1e7)]),
             "Prometheus has the new step's samples (rr_cpu 0.5 s, rr_hot "
             "0.42 s)")
        d = rpc(s, "DeleteRecordingRule", {"id": idb or ""})
        r.check(d.status == 200, "Delete answers", d.describe())
        lst = rpc(s, "ListRecordingRules", {})
        r.eq([x.get("metricName") for x in lst.json().get("rules", [])],
             ["rr_cpu"], "Delete removes the rule from List")
        miss = rpc(s, "GetRecordingRule", {"id": idb or ""})
        r.check(miss.status == 404, "Get of a deleted rule is not_found",
                miss.describe())
    finally:
        s.check_stopped(r)


if __name__ == "__main__":
    run_script("test_recording_rules", 170, main)
