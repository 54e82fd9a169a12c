#!/usr/bin/env python3
"""
test_cluster_rate_limit.py -- the per-tenant ingestion rate shared by the
healthy distributors (distributor/ratelimit.h, distributor/peers.h).

1 ingester (RF 1), 2 distributors given each other (and themselves) in
-distributor.peers, probed every 500ms; the tenant's rate R = 0.1 MiB/s,
burst B = 0.02 MiB (per distributor, not divided):

  1. Both distributors see 2 healthy distributors
     (smolder_distributor_healthy_peers = 2).
  2. Uploads sent through both at once, as fast as they are refused, for
     WINDOW seconds: the bytes accepted in total are about 2B + R x WINDOW
     (each distributor admits R/2), well below the 2B + 2R x WINDOW two
     unshared limiters would admit; each distributor's 429s are counted
     as discarded_profiles_total{reason="rate_limited"} exactly.
  3. One distributor stopped: once the survivor's gauge says 1 (polled,
     not slept for), it alone admits about R x WINDOW -- more than the
     half share it had, not more than B + R x WINDOW.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (Workspace, metric_value, metrics,  # noqa: E402
                        wait_metric)
from smolder import run_script  # noqa: E402

BUDGET_S = 240
MIB = 1 << 20
RATE_MB = 0.1
BURST_MB = 0.02
RATE = RATE_MB * MIB
BURST = BURST_MB * MIB
WINDOW = 6.0            # seconds of sending per phase
SENDERS = 2             # threads per distributor
GAUGE = "smolder_distributor_healthy_peers"
DISCARDED = "smolder_distributor_discarded_profiles_total"

COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"]
DIST = ["-distributor.ingestion-rate-limit-mb=%g" % RATE_MB,
        "-distributor.ingestion-burst-size-mb=%g" % BURST_MB,
        "-distributor.peers-probe-period=500ms",
        "-distributor.peers-probe-timeout=500ms"]


def body(k):
    """A ~4 KiB folded upload with distinct stacks."""
    lines = ["app;mod%d;fn%d_%d 1\n" % (k % 7, k, i) for i in range(200)]
    out = "".join(lines).encode()
    return out[:4096 - 1] + b"\n" if len(out) > 4096 else out


class Tally:
    def __init__(self):
        self.mu = threading.Lock()
        self.ok_bytes = {}
        self.status = {}

    def add(self, name, status, n):
        with self.mu:
            self.status.setdefault(name, {})
            self.status[name][status] = self.status[name].get(status,
                                                               0) + 1
            if status == 200:
                self.ok_bytes[name] = self.ok_bytes.get(name, 0) + n

    def bytes(self, name=None):
        if name is not None:
            return self.ok_bytes.get(name, 0)
        return sum(self.ok_bytes.values())

    def count(self, name, status):
        return self.status.get(name, {}).get(status, 0)


def hammer(dists, window, tally):
    """Send through every distributor in `dists` at once for `window`
    seconds; uploads started in the window are counted."""
    stop_at = time.monotonic() + window

    def run(d, t):
        k = t * 100000
        while time.monotonic() < stop_at:
            b = body(k)
            k += 1
            r = d.request("POST", "/ingest", {"name": "rl.cpu",
                                              "from": str(int(time.time())),
                                              "until": str(int(time.time()))},
                          b, timeout=30)
            tally.add(d.name, r.status, len(b))
            if r.status != 200:
                time.sleep(0.02)

    threads = [threading.Thread(target=run, args=(d, i * SENDERS + j))
               for i, d in enumerate(dists) for j in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(r):
    ws = Workspace("cluster-rate")
    r.at_end(lambda: ws.cleanup(r))
    c = Cluster(ws, ingesters=1, distributors=2, queriers=0, rf=1,
                extra=COMMON, distributor_extra=DIST,
                distributor_peers=True)
    c.run_checked(r, run)


def run(r, c):
    d0, d1 = c.distributors
    # 1. Both see both.
    for d in (d0, d1):
        v = wait_metric(d, GAUGE, lambda v: v == 2, timeout=30)
        r.eq(v, 2, "%s: %s = 2 (itself and its peer)" % (d.name, GAUGE))
    if r.failed:
        return

    # 2. Through both at once: about R in total, not 2R.
    t = Tally()
    hammer([d0, d1], WINDOW, t)
    total = t.bytes()
    shared = 2 * BURST + RATE * WINDOW
    unshared = 2 * BURST + 2 * RATE * WINDOW
    print("# phase 1: accepted %d bytes (shared ~%d, unshared ~%d); "
          "statuses %s" % (total, shared, unshared, t.status), flush=True)
    r.check(t.count(d0.name, 429) > 0 and t.count(d1.name, 429) > 0,
            "both distributors refuse some uploads with 429", str(t.status))
    r.check(total <= 2 * BURST + 1.2 * RATE * WINDOW,
            "both together accept about R x window + 2 bursts (%d bytes), "
            "well below the %d two unshared limits would" % (total,
                                                             unshared))
    r.check(total >= 0.6 * RATE * WINDOW,
            "and not much less (%d bytes >= 0.6 R x window)" % total)
    for d in (d0, d1):
        got = t.bytes(d.name)
        r.check(got <= BURST + 0.6 * RATE * WINDOW,
                "%s alone accepted about its half share (%d bytes)" %
                (d.name, got))
        _, p = metrics(d)
        r.eq(metric_value(p, DISCARDED, reason="rate_limited"),
             t.count(d.name, 429), "%s: rate_limited rejections counted "
             "exactly" % d.name)
    other = {s for d in (d0, d1) for s in t.status.get(d.name, {})} - \
        {200, 429}
    r.check(not other, "no status but 200 and 429", str(t.status))

    # 3. One distributor gone: the survivor takes the whole rate.
    c.stop_distributor(1)
    v = wait_metric(d0, GAUGE, lambda v: v == 1, timeout=30)
    r.eq(v, 1, "after the stop %s: %s = 1" % (d0.name, GAUGE))
    before_429 = t.count(d0.name, 429)
    t2 = Tally()
    hammer([d0], WINDOW, t2)
    alone = t2.bytes()
    print("# phase 2: accepted %d bytes alone (full rate ~%d, half share "
          "~%d); statuses %s" % (alone, BURST + RATE * WINDOW,
                                 BURST + RATE * WINDOW / 2, t2.status),
          flush=True)
    r.check(t2.count(d0.name, 429) > 0, "the survivor still refuses over "
            "the rate", str(t2.status))
    r.check(alone >= 0.8 * RATE * WINDOW,
            "the survivor alone accepts about R x window (%d bytes), more "
            "than its former half share" % alone)
    r.check(alone <= BURST + 1.2 * RATE * WINDOW,
            "and not more than R x window + a burst (%d bytes)" % alone)
    _, p = metrics(d0)
    r.eq(metric_value(p, DISCARDED, reason="rate_limited"),
         before_429 + t2.count(d0.name, 429),
         "%s: rate_limited rejections still counted exactly" % d0.name)


if __name__ == "__main__":
    run_script("test_cluster_rate_limit", BUDGET_S, main)
