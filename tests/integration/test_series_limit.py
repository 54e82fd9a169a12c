#!/usr/bin/env python3
"""
test_series_limit.py -- the per-tenant active-series limit (Pyroscope's
max_global_series_per_tenant; ingester/db.h, distributor/push.c).

One server (-target=all, one ingester, RF 1), -auth.multitenancy-enabled,
-runtime-config.file giving tenant `a` max_global_series_per_tenant: 50 and
tenant `b` nothing (the flag's default: no limit).

  1. `a` uploads 50 distinct series (legacy /ingest, `sl.cpu{i="k"}`):
     all 200.  Its 51st distinct series, and 9 more, get 429 with
     code resource_exhausted and Pyroscope's message `Maximum active
     series limit exceeded (51/50), ...` (no internal address in it).
  2. Meanwhile `b` writes 80 distinct series: all 200.
  3. `a`'s existing series still take writes (all 50 again: 200).
  4. /metrics: discarded_profiles_total{reason="series_limit",tenant="a"}
     equals the 429s exactly, none for `b` and no other reason for `a`;
     smolder_ingester_active_series is 50 for `a`, 80 for `b`;
     smolder_ingester_series_limit_refusals_total{tenant="a"} counts them.
  5. Every acknowledged write is queryable with exact totals (per stack,
     for both tenants), and nothing of a refused one is.  Then 2000
     uploads of new series of `a` (all 429) leave the ingester's head
     bytes exactly as they were: a refused series keeps no memory.
  6. After /ingester/flush (the head is cut: its series stop being
     active) `a` can add new series again, up to the limit: 50 fresh ones
     pass, the next is 429; totals stay exact across the cut.
  7. Connect Push of a new series over the limit: 429
     resource_exhausted with the same message.
"""

import gzip
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from oracle import parse_collapsed  # noqa: E402
from durability import admin_listener, flush  # noqa: E402
from smolder import Server, metric, run_script  # noqa: E402

BUDGET_S = 150
LIMIT = 50
FLOOD = 2000
OVERRIDES = ("overrides:\n"
             "  a:\n"
             "    max_global_series_per_tenant: %d\n" % LIMIT)
PREFIX = "Maximum active series limit exceeded"


# A folded upload's value is samples; stored as nanoseconds of CPU at the
# default sampleRate 100 (1e9 / 100 per sample).
SCALE = 10**7


class Writer:
    """Uploads folded stacks as one tenant; remembers what was acked."""

    def __init__(self, srv, tenant):
        self.srv = srv
        self.tenant = tenant
        self.acked = {}          # stack -> total acknowledged
        self.refused = []        # responses of 429s
        self.other = []          # anything else

    def up(self, series, stack, value):
        now = int(time.time())
        resp = self.srv.request(
            "POST", "/ingest",
            {"name": 'sl.cpu{i="%s"}' % series, "from": str(now),
             "until": str(now)},
            ("%s %d\n" % (stack, value)).encode(),
            {"X-Scope-OrgID": self.tenant})
        if resp.status == 200:
            self.acked[stack] = self.acked.get(stack, 0) + value * SCALE
        elif resp.status == 429:
            self.refused.append(resp)
        else:
            self.other.append(resp)
        return resp

    def stored(self):
        now = int(time.time())
        resp = self.srv.request(
            "GET", "/render",
            {"query": "sl.cpu{}", "from": str(now - 3600),
             "until": str(now + 3600), "format": "collapsed"},
            headers={"X-Scope-OrgID": self.tenant})
        if resp.status != 200:
            return None, resp
        return parse_collapsed(resp.text()), resp


def pprof_body():
    """A tiny valid pprof (cpu samples/count, one sample of 'f' = 7)."""
    def varint(n):
        out = b""
        while True:
            b = n & 0x7f
            n >>= 7
            if n:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])

    def field(num, payload):
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    def vfield(num, v):
        return varint(num << 3) + varint(v)

    strings = [b"", b"samples", b"count", b"f"]
    p = field(1, vfield(1, 1) + vfield(2, 2))          # sample_type
    p += field(2, field(1, varint(1)) + field(2, varint(7)))  # sample
    p += field(4, vfield(1, 1) + field(4, vfield(1, 1)))  # location 1
    p += field(5, vfield(1, 1) + vfield(2, 3))          # function 1: f
    for s in strings:
        p += field(6, s)
    p += vfield(9, int(time.time()) * 10**9)            # time_nanos
    return gzip.compress(p)


def main(r):
    tmp = tempfile.mkdtemp(prefix="smolder-series-")
    path = os.path.join(tmp, "overrides.yaml")
    with open(path, "w") as f:
        f.write(OVERRIDES)
    r.at_end(lambda: (os.unlink(path), os.rmdir(tmp)))
    # Spills off: step 5b compares the head's bytes before and after a
    # flood, and a spill in between (ingester/head.h) would move them.
    srv = Server(extra_flags=admin_listener([
        "-auth.multitenancy-enabled=true",
        "-ingester.head-spill-interval=0",
        "-runtime-config.file=%s" % path])).start()
    a, b = Writer(srv, "a"), Writer(srv, "b")

    # 1-2. Up to the limit, past it, and the other tenant at once.
    t0 = time.monotonic()
    for k in range(LIMIT):
        a.up("a%d" % k, "main;a%d" % k, k + 1)
        b.up("b%d" % k, "main;b%d" % k, k + 1)
    r.check(len(a.acked) == LIMIT and not a.refused and not a.other,
            "a's first %d distinct series are accepted" % LIMIT,
            "acked %d, refused %d, other %s" % (
                len(a.acked), len(a.refused),
                [x.describe() for x in a.other[:3]]))
    first = a.up("a%d" % LIMIT, "main;new%d" % LIMIT, 1000)
    r.eq(first.status, 429, "a's 51st distinct series -> 429")
    r.eq(first.error_code(), "resource_exhausted", "429 code")
    msg = first.error_message() or ""
    print("429 message: %s" % msg)
    r.check(msg.startswith("%s (%d/%d)" % (PREFIX, LIMIT + 1, LIMIT)) and
            "reduce the number of active streams" in msg,
            "429 message in Pyroscope's words", msg)
    r.check("tcp://" not in msg and "inproc://" not in msg and
            "replicas" not in msg, "the message names no internal address",
            msg)
    for k in range(LIMIT + 1, LIMIT + 10):
        a.up("a%d" % k, "main;new%d" % k, 1000)
    for k in range(LIMIT, LIMIT + 30):
        b.up("b%d" % k, "main;b%d" % k, k + 1)
    r.eq(len(a.refused), 10, "every new series of a past the limit is 429")
    r.check(len(b.acked) == LIMIT + 30 and not b.refused and not b.other,
            "b (no limit) keeps adding new series: 80 x 200",
            "acked %d refused %d other %d" % (len(b.acked),
                                              len(b.refused), len(b.other)))

    # 3. Existing series of a still take writes.
    for k in range(LIMIT):
        a.up("a%d" % k, "main;a%d" % k, 2)
    r.check(len(a.refused) == 10 and not a.other,
            "a's existing series keep taking writes (50 x 200)",
            "refused %d other %d" % (len(a.refused), len(a.other)))
    print("phase 1-3: %d uploads in %.1f s" % (
        2 * LIMIT + 10 + 30 + LIMIT, time.monotonic() - t0))

    # 4. Metrics.
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                reason="series_limit", tenant="a"), 10,
         "discarded{reason=series_limit,tenant=a} counts every 429")
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                tenant="a"), 10, "no other discard reason for a")
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                tenant="b"), 0, "nothing discarded for b")
    r.eq(metric(srv, "smolder_ingester_active_series", tenant="a"), LIMIT,
         "active series gauge of a = 50")
    r.eq(metric(srv, "smolder_ingester_active_series", tenant="b"), 80,
         "active series gauge of b = 80")
    r.eq(metric(srv, "smolder_ingester_series_limit_refusals_total",
                tenant="a"), 10, "ingester refusals of a = 10")

    # 5. Exact totals; nothing of a refused write.
    for w in (a, b):
        got, resp = w.stored()
        r.check(got == w.acked, "tenant %s: every acknowledged write is "
                "queryable with exact totals" % w.tenant,
                resp.describe() if got is None else
                "missing/extra: %s" % sorted(set(got.items()) ^
                                             set(w.acked.items()))[:6])

    # 5b. A flood of new series past the limit allocates nothing that
    # lasts: the head's bytes do not move (RSS printed for the record).
    def rss_kib():
        try:
            with open("/proc/%d/status" % srv.proc.pid) as f:
                for ln in f:
                    if ln.startswith("VmRSS:"):
                        return int(ln.split()[1])
        except (OSError, AttributeError, ValueError):
            return -1
        return -1
    hb0, rss0 = metric(srv, "smolder_ingester_head_bytes"), rss_kib()
    t5 = time.monotonic()
    n0 = len(a.refused)
    for k in range(FLOOD):
        a.up("flood%d" % k, "main;flood;f%d" % k, 1)
    took = time.monotonic() - t5
    hb1, rss1 = metric(srv, "smolder_ingester_head_bytes"), rss_kib()
    print("flood: %d refused uploads of new series in %.2f s (%.0f/s); "
          "head bytes %d -> %d; RSS %d -> %d KiB" % (
              FLOOD, took, FLOOD / took, hb0, hb1, rss0, rss1))
    r.eq(len(a.refused) - n0, FLOOD, "every flood upload is 429")
    r.eq(hb1, hb0, "head bytes unchanged by %d refused series" % FLOOD)
    r.eq(metric(srv, "smolder_ingester_active_series", tenant="a"), LIMIT,
         "a's active series still 50")

    # 6. A cut: the head's series stop being active.
    fl = flush(srv)
    r.eq(fl.status, 200, "/ingester/flush")
    r.eq(metric(srv, "smolder_ingester_active_series", tenant="a"), 0,
         "a's active series are 0 after the cut")
    refused0 = len(a.refused)
    for k in range(LIMIT):
        a.up("c%d" % k, "main;c%d" % k, 3)
    r.check(len(a.refused) == refused0 and not a.other,
            "after the cut a adds 50 new series again",
            "refused %d" % (len(a.refused) - refused0))
    over = a.up("c%d" % LIMIT, "main;c%d" % LIMIT, 3)
    r.eq(over.status, 429, "and the next new one is 429 again")
    got, resp = a.stored()
    r.check(got == a.acked, "totals exact across the cut (block + head)",
            resp.describe() if got is None else
            "diff: %s" % sorted(set(got.items()) ^
                                set(a.acked.items()))[:6])

    # 7. Connect Push of a new series over the limit.
    push = {"series": [{
        "labels": [{"name": "__name__", "value": "process_cpu"},
                   {"name": "service_name", "value": "pushed-new"}],
        "samples": [{"rawProfile": __import__("base64").b64encode(
            pprof_body()).decode()}]}]}
    p = srv.request("POST", "/push.v1.PusherService/Push",
                    body=json.dumps(push).encode(),
                    headers={"Content-Type": "application/json",
                             "X-Scope-OrgID": "a"})
    try:
        pj = json.loads(p.body)
    except ValueError:
        pj = {}
    r.check(p.status == 429 and pj.get("code") == "resource_exhausted" and
            pj.get("message", "").startswith(PREFIX),
            "Push of a new series over the limit -> 429 "
            "resource_exhausted", p.describe())
    p2 = srv.request("POST", "/push.v1.PusherService/Push",
                     body=json.dumps(push).encode(),
                     headers={"Content-Type": "application/json",
                              "X-Scope-OrgID": "b"})
    r.eq(p2.status, 200, "the same Push for b -> 200")
    r.eq(metric(srv, "smolder_distributor_discarded_profiles_total",
                reason="series_limit", tenant="a"), len(a.refused) + 1,
         "series_limit discards = every 429 (ingest and Push)")

    srv.stop()
    srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_series_limit", BUDGET_S, main)
