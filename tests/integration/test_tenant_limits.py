#!/usr/bin/env python3
"""
test_tenant_limits.py -- per-tenant ingestion rate limits and the runtime
overrides file (common/overrides.h, distributor/ratelimit.h).

One server, -auth.multitenancy-enabled (tenants by X-Scope-OrgID),
-distributor.ingestion-rate-limit-mb=100 (the default for every tenant),
-runtime-config.file giving tenant `slow` 0.05 MiB/s with a 0.05 MiB
burst, reloaded every 200 ms.

  1. Two threads upload ~10 KiB folded bodies as fast as they can for 3 s,
     one as `slow`, one as `fast`, at the same time: `slow` gets some 200s
     (the burst, then ~5 per second) and 429s with Pyroscope's message
     (`push rate limit (51 KiB) exceeded while adding 10 KiB`, code
     resource_exhausted); `fast` gets only 200s.  /metrics counts the
     429s as smolder_distributor_discarded_profiles_total{reason=
     "rate_limited",tenant="slow"} exactly, and none for `fast`.
  2. Push (Connect) over the rate: a 80 KiB raw_profile from `slow`
     (larger than its burst) -> 429 resource_exhausted before decoding.
  2b. A validation limit per tenant: tenant `few` has
     max_label_names_per_series: 10; its legacy upload with 3 extra labels
     (12 label names with the ones /ingest adds) is 400 naming the limit,
     `fast`'s same upload is 200 (flag: 30), `few`'s upload without extra
     labels (9) is 200.  Query limits per tenant: `few` has
     max_query_length 1h and max_flamegraph_nodes_max 100: /render over
     2h or with maxNodes=200 is 400 naming the limit for `few`, 200 for
     `fast` (flags: no length limit, 1048576 nodes).
  3. Reload while traffic flows: the file is replaced (mv over) giving
     `slow` 100 MiB/s; while both threads keep uploading, `slow` gets only
     200s within 1.5 s (two reload periods plus slack), with no restart.
  4. A malformed file keeps the previous overrides: `slow` keeps getting
     200s, the reload failure is counted, /ready stays 200.  A valid file
     after it lowers `slow` again and the 429s come back.
"""

import base64
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from smolder import Server, metric, run_script  # noqa: E402

BUDGET_S = 120
PERIOD_MS = 200
FEW = ("  few:\n"
       "    max_label_names_per_series: 10\n"
       "    max_query_length: 1h\n"
       "    max_flamegraph_nodes_max: 100\n")
LOW = ("overrides:\n" + FEW +
       "  slow:\n"
       "    ingestion_rate_mb: 0.05\n"
       "    ingestion_burst_size_mb: 0.05\n")
HIGH = ("overrides:\n" + FEW +
        "  slow:\n"
        "    ingestion_rate_mb: 100\n"
        "    ingestion_burst_size_mb: 10\n")
BAD = "overrides:\n  slow:\n    ingestion_rate_mb: [oops\n"


def folded_body(n=10 * 1024):
    lines = []
    size = 0
    i = 0
    while size < n:
        ln = "main;work;fn_%06d 1\n" % i
        lines.append(ln)
        size += len(ln)
        i += 1
    return "".join(lines).encode()[:n]


BODY = folded_body()


def write_atomic(path, text):
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Uploader(threading.Thread):
    """Uploads as `tenant` until stopped; records (time, status)."""

    def __init__(self, srv, tenant):
        super().__init__(daemon=True)
        self.srv = srv
        self.tenant = tenant
        self.log = []
        self.bodies = {}
        self.stop_flag = threading.Event()

    def run(self):
        while not self.stop_flag.is_set():
            now = int(time.time())
            resp = self.srv.request(
                "POST", "/ingest",
                {"name": "app%s{}" % self.tenant, "from": str(now),
                 "until": str(now)}, BODY,
                {"X-Scope-OrgID": self.tenant})
            self.log.append((time.monotonic(), resp.status))
            if resp.status not in self.bodies:
                self.bodies[resp.status] = resp.body
            time.sleep(0.01)

    def since(self, t0, t1=None):
        return [st for t, st in self.log if t >= t0 and
                (t1 is None or t < t1)]


def main(r):
    tmp = tempfile.mkdtemp(prefix="smolder-limits-")
    path = os.path.join(tmp, "overrides.yaml")
    write_atomic(path, LOW)
    r.at_end(lambda: (os.path.exists(path) and os.unlink(path),
                      os.rmdir(tmp)))
    srv = Server(extra_flags=[
        "-auth.multitenancy-enabled=true",
        "-distributor.ingestion-rate-limit-mb=100",
        "-distributor.ingestion-burst-size-mb=10",
        "-runtime-config.file=%s" % path,
        "-runtime-config.reload-period=%dms" % PERIOD_MS]).start()

    slow = Uploader(srv, "slow")
    fast = Uploader(srv, "fast")
    t0 = time.monotonic()
    slow.start()
    fast.start()

    # 1. Over the rate while another tenant keeps succeeding.
    time.sleep(3)
    t1 = time.monotonic()
    s1, f1 = slow.since(t0, t1), fast.since(t0, t1)
    n429 = s1.count(429)
    print("phase 1 (3 s): slow %d x 200, %d x 429, other %s; fast %d x 200,"
          " other %s" % (s1.count(200), n429,
                         sorted(set(s1) - {200, 429}), f1.count(200),
                         sorted(set(f1) - {200})))
    r.check(n429 > 0 and s1.count(200) > 0 and
            set(s1) <= {200, 429},
            "tenant over its rate gets 429s (and its burst/rate of 200s)",
            "slow: %s" % s1)
    r.check(len(f1) > 0 and set(f1) == {200},
            "the other tenant keeps getting 200 at the same time",
            "fast: %s" % sorted(set(f1)))
    # ~51 KiB burst + 51 KiB/s of 10 KiB bodies over 3 s: about 5 + 15.
    r.check(s1.count(200) <= 30, "slow's 200s stay near burst + rate x "
            "time (<= 30 in 3 s)", "%d" % s1.count(200))
    body = slow.bodies.get(429, b"")
    try:
        err = json.loads(body)
    except ValueError:
        err = {}
    r.eq(err.get("code"), "resource_exhausted", "429 code")
    r.eq(err.get("message"), "push rate limit (51 KiB) exceeded while "
         "adding 10 KiB", "429 message in Pyroscope's words")

    # 2. Push (Connect) over the rate.
    push = {"series": [{
        "labels": [{"name": "__name__", "value": "process_cpu"},
                   {"name": "service_name", "value": "pushed"}],
        "samples": [{"rawProfile": base64.b64encode(
            b"\0" * (80 * 1024)).decode()}]}]}
    p = srv.request("POST", "/push.v1.PusherService/Push",
                    body=json.dumps(push).encode(),
                    headers={"Content-Type": "application/json",
                             "X-Scope-OrgID": "slow"})
    r.check(p.status == 429 and "push rate limit" in p.text(),
            "Push over the rate -> 429 resource_exhausted", p.describe())

    # 2b. A per-tenant validation limit.
    def up(tenant, name):
        now = int(time.time())
        return srv.request("POST", "/ingest", {
            "name": name, "from": str(now), "until": str(now)},
            b"main;work 1\n", {"X-Scope-OrgID": tenant})
    wide = "wide{a=1,b=2,c=3}"
    p5 = up("few", wide)
    print("few, 12 label names: %d %s" % (p5.status, p5.text()[:200]))
    r.check(p5.status == 400 and "limit 10" in p5.text(),
            "max_label_names_per_series override: 400 for few",
            p5.describe())
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                reason="max_label_names_per_series", tenant="few"), 1.0,
         "the refusal is counted under Pyroscope's reason "
         "max_label_names_per_series")
    p5 = srv.request("POST", "/ingest", {
        "name": "old", "from": "1000000000", "until": "1000000000"},
        b"main;work 1\n", {"X-Scope-OrgID": "few"})
    r.check(p5.status // 100 == 4, "an upload from 2001 is refused",
            p5.describe())
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                reason="not_in_ingestion_window", tenant="few"), 1.0,
         "... counted under not_in_ingestion_window")
    p5 = up("fast", wide)
    r.check(p5.status == 200, "the same upload is 200 for fast (flag: 30)",
            p5.describe())
    p5 = up("few", "narrow")
    r.check(p5.status == 200, "few's upload under its limit is 200",
            p5.describe())

    def render(tenant, **q):
        now = int(time.time())
        qs = {"query": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
              '{service_name="narrow"}', "from": str(now - 1800),
              "until": str(now)}
        qs.update(q)
        return srv.request("GET", "/render", qs,
                           headers={"X-Scope-OrgID": tenant})
    now = int(time.time())
    for tenant, want in (("few", 400), ("fast", 200)):
        g = render(tenant, **{"from": str(now - 7200)})
        r.check(g.status == want and (want == 200 or "max_query_length"
                                      in g.text()),
                "2h query for %s -> %d" % (tenant, want), g.describe())
        g = render(tenant, maxNodes="200")
        r.check(g.status == want and (want == 200 or "allowed 100"
                                      in g.text()),
                "maxNodes=200 for %s -> %d" % (tenant, want), g.describe())
    g = render("few", maxNodes="50")
    r.check(g.status == 200, "few's query within its limits -> 200",
            g.describe())

    # max_query_length holds for every API that reads profiles or labels,
    # not only /render (querier/qry_int.h qry_limit_range).
    def connect(tenant, method, msg):
        return srv.request(
            "POST", "/querier.v1.QuerierService/" + method,
            body=json.dumps(msg).encode(),
            headers={"Content-Type": "application/json",
                     "X-Scope-OrgID": tenant})
    ptype = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    sel = '{service_name="narrow"}'
    now_ms = int(time.time() * 1000)
    calls = (
        ("SelectMergeStacktraces", {"profileTypeID": ptype,
                                    "labelSelector": sel, "maxNodes": 50}),
        ("SelectSeries", {"profileTypeID": ptype, "labelSelector": sel,
                          "step": 15}),
        ("Diff", None),
        ("SelectHeatmap", {"profileTypeID": ptype, "labelSelector": sel,
                           "step": 15,
                           "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL"}),
        ("AnalyzeQuery", {"query": ptype + sel}),
        ("LabelNames", {"matchers": [sel]}),
        ("Series", {"matchers": [sel]}),
    )
    for span_h, tenant, want in ((2, "few", 400), (2, "fast", 200),
                                 (0.5, "few", 200)):
        start, end = now_ms - int(span_h * 3600000), now_ms
        for method, msg in calls:
            if msg is None:
                one = {"profileTypeID": ptype, "labelSelector": sel,
                       "start": start, "end": end, "maxNodes": 50}
                msg = {"left": one, "right": one}
            else:
                msg = dict(msg, start=start, end=end)
            g = connect(tenant, method, msg)
            r.check(g.status == want and
                    (want == 200 or "max_query_length" in g.text()),
                    "%s over %gh for %s -> %d" % (method, span_h, tenant,
                                                  want), g.describe())

    # Metrics: exact per-tenant count (the uploaders' 429s and the Push).
    time.sleep(0.1)
    slow.stop_flag.set()
    fast.stop_flag.set()
    slow.join()
    fast.join()
    want = slow.since(t0).count(429) + (1 if p.status == 429 else 0)
    got = metric(srv, "smolder_distributor_discarded_profiles_total",
                 reason="rate_limited", tenant="slow")
    r.eq(int(got), want, "rate_limited rejections of slow in /metrics")
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                tenant="fast"), 0.0, "no rejections of fast in /metrics")

    # 3. Reload while traffic flows.
    slow = Uploader(srv, "slow")
    fast = Uploader(srv, "fast")
    slow.start()
    fast.start()
    time.sleep(0.5)
    r.check(429 in slow.since(0), "slow still limited before the change")
    t_change = time.monotonic()
    write_atomic(path, HIGH)
    took = None
    while time.monotonic() - t_change < 10:
        recent = [(t, st) for t, st in slow.log if t > t_change]
        # Ten 200s in a row, the first of them the start of the run.
        run = 0
        for t, st in recent:
            run = run + 1 if st == 200 else 0
            if run == 1:
                start = t
            if run >= 10:
                took = start - t_change
                break
        if took is not None:
            break
        time.sleep(0.05)
    print("phase 3: new limit effective %.0f ms after the rewrite "
          "(reload period %d ms)" % ((took or -1) * 1000, PERIOD_MS))
    r.check(took is not None,
            "raised limit takes effect without a restart",
            "not within 10 s")
    t3 = time.monotonic()
    time.sleep(1)
    r.check(set(slow.since(t3)) == {200},
            "after the reload slow gets only 200s",
            "%s" % sorted(set(slow.since(t3))))

    # 4. A malformed file keeps the previous (high) limits.
    fails0 = metric(srv, "smolder_runtime_config_reload_failures_total")
    write_atomic(path, BAD)
    time.sleep(4 * PERIOD_MS / 1000.0)
    t4 = time.monotonic()
    time.sleep(1)
    r.check(set(slow.since(t4)) == {200},
            "malformed file: the previous overrides stay (slow all 200)",
            "%s" % sorted(set(slow.since(t4))))
    r.check(metric(srv, "smolder_runtime_config_reload_failures_total") >
            fails0, "the failed reload is counted")
    r.check(srv.ready(), "/ready stays 200 with a malformed file")
    r.check("keeping the previous overrides" in srv.stderr_text(),
            "the failed reload is logged with its reason")
    write_atomic(path, LOW)
    time.sleep(4 * PERIOD_MS / 1000.0 + 0.5)
    t5 = time.monotonic()
    time.sleep(1)
    s5 = slow.since(t5)
    r.check(429 in s5, "a valid file after the bad one applies (429s "
            "again)", "%s" % sorted(set(s5)))
    r.check(set(fast.since(t0)) == {200},
            "fast never refused throughout")
    slow.stop_flag.set()
    fast.stop_flag.set()
    slow.join()
    fast.join()
    print("totals: slow %d x 200, %d x 429; fast %d x 200" % (
        slow.since(0).count(200), slow.since(0).count(429),
        fast.since(0).count(200)))
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_tenant_limits", BUDGET_S, main)
