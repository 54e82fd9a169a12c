#!/usr/bin/env python3
"""
test_complete_answers.py -- an answer is complete or says it is not
(docs/architecture.md §4.3, "Complete answers"): RF 3, real processes on
loopback.

A. Scale-in without a bucket, 5 -> 4 -> 3, one ingester at a time, the
   distributor and querier restarted with each new -ring.members (static
   members).  With one ingester gone the old data is still exact; with
   two gone, an answer over the time they held data is 503 naming them
   ("incomplete"), never a short 200, while a range written after the
   scale-in is exact.  One more ingester down: the same.
B. Lost disks without a bucket: ingester-0's and then ingester-1's data
   directory wiped (each comes back as a new incarnation).  After the
   first, the old range is exact; after the second it is 503; what was
   written after both is exact, also with a third ingester down.
C. Scale-in with a bucket and store-gateways (a filesystem bucket on this
   machine): 5 -> 3 by POST /ingester/shutdown (the leave ships every
   block and waits for the gateways), then one more ingester down: every
   answer over the whole range is 200 and exact.

Every 200 in every phase is compared with what was acknowledged.
"""

import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from durability import (DataServer, StackUploads, Workspace,  # noqa: E402
                        collapsed_stacks, metrics)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 240
STACKS = ["main;serve;parse", "main;serve;encode", "main;gc",
          "main;idle"]
SHARDS = 24


class Front:
    """A distributor and a querier over a given set of ring members."""

    def __init__(self, r, ws, c, ids, tag, gateways=False):
        members = c.members.split(",")
        ring = ["-ring.members=%s" % ",".join(members[i] for i in ids),
                "-ring.heartbeat-period=100ms",
                "-ring.heartbeat-timeout=1s",
                "-distributor.replication-factor=3"] + c.extra
        self.r = r
        self.d = DataServer(ws.data_dir("dist-" + tag),
                            ws.log_dir("dist-" + tag),
                            name="distributor-" + tag, target="distributor",
                            extra_flags=ring).start()
        self.q = DataServer(ws.data_dir("qry-" + tag),
                            ws.log_dir("qry-" + tag), name="querier-" + tag,
                            target="querier", extra_flags=ring +
                            (c.gateway_flags() if gateways else [])).start()
        time.sleep(0.5)     # every member's health (and witness) heard

    def stop(self):
        for s in (self.d, self.q):
            probs = s.stop()
            self.r.check(not probs, "%s stopped cleanly" % s.name,
                         "\n".join(probs))


class Writes(StackUploads):
    """Uploads with known stacks at known data times; what was
    acknowledged, per stack and per time."""

    def __init__(self):
        super().__init__(STACKS)

    def batch(self, r, front, t0, count, what):
        self.upload(r, front.d, count, lambda k, n: (
            "ca.cpu{shard=s%d}" % (n % SHARDS), t0 + k),
            "%s: every upload acknowledged" % what)

    def want(self, frm, until, unit):
        out = {}
        for t, s in self.log:
            if frm <= t < until:
                out[s] = out.get(s, 0) + unit
        return out


def render(front, frm, until):
    resp = front.q.render("ca.cpu{}", frm=frm, until=until,
                          fmt="collapsed")
    if resp.status != 200:
        return resp.status, resp.text()
    return 200, collapsed_stacks(resp.text())


def expect(r, front, w, frm, until, unit, what, status=200):
    """The answer over [frm, until): exact when 200; `status` is what it
    must be.  A 503 right after a change is retried briefly (the querier
    may still be hearing from the members)."""
    deadline = time.monotonic() + 5
    while True:
        st, got = render(front, frm, until)
        if st == status or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if st == 200:
        r.eq(got, w.want(frm, until, unit), "%s: a 200 is exact" % what)
    r.check(st == status, "%s: answered %d" % (what, status),
            "%d %s" % (st, str(got)[:400]))
    if st == 503:
        r.check("incomplete" in got or "unavailable" in got,
                "%s: the 503 says why" % what, got[:300])
    return st, got


def wait_active(c, front, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(list(c.states(s).values()).count("ACTIVE") == n
               for s in (front.d, front.q)):
            time.sleep(0.3)     # and the members' witness records
            return True
        time.sleep(0.05)
    return False


def unit_of(r, front, w, frm, until):
    st, got = render(front, frm, until)
    n = sum(1 for _, s in w.log if s == STACKS[0])
    u = got.get(STACKS[0], 0) // n if st == 200 and n else 0
    r.check(u > 0, "one upload's value is known (%d)" % u)
    return u


EXTRA = ["-validation.reject-older-than=0",
         "-compactor.downsample-tiers=none"]


def start(r, ws, c, front, seconds, what, **kw):
    """Start c and write `seconds` from 20 minutes ago through a front
    over all its ingesters: (w, base, f, unit)."""
    c.start_for(r)
    w = Writes()
    base = int(time.time()) - 1200
    f = Front(r, ws, c, list(range(len(c.ingesters))), front, **kw)
    w.batch(r, f, base, seconds, what)
    unit = unit_of(r, f, w, base - 60, base + 600)
    return w, base, f, unit


def phase_a(r, ws):
    c = Cluster(ws, ingesters=5, distributors=0, queriers=0, rf=3,
                name="a", extra=EXTRA)
    w, base, f, unit = start(r, ws, c, "a5", 120, "A: 5 ingesters")
    expect(r, f, w, base - 60, base + 600, unit, "A: 5 ingesters")
    f.stop()
    # one leaves (no bucket: its copy is gone), the ring is changed
    c.stop_ingester(4)
    f = Front(r, ws, c, [0, 1, 2, 3], "a4")
    expect(r, f, w, base - 60, base + 600, unit,
           "A: ingester-4 gone (one replica missing)")
    f.stop()
    c.stop_ingester(3)
    f = Front(r, ws, c, [0, 1, 2], "a3")
    st, got = expect(r, f, w, base - 60, base + 600, unit,
                     "A: ingesters 3 and 4 gone, the old range",
                     status=503)
    r.check("ingester-3" in str(got) and "ingester-4" in str(got) and
            "not in the ring" in str(got),
            "A: the 503 names the ingesters that left", str(got)[:400])
    _, p = metrics(f.q)
    r.check((metric_value(p, "smolder_querier_incomplete_total") or 0) >= 1,
            "A: the querier counts the refusal "
            "(smolder_querier_incomplete_total)")
    after = base + 300
    w.batch(r, f, after, 60, "A: 3 ingesters")
    expect(r, f, w, after, after + 200, unit,
           "A: the range written after the scale-in")
    one_more_down(r, c, f, w, (base - 60, base + 600), (after, after + 200),
                  unit, "A: and one more down")
    f.stop()


def one_more_down(r, c, f, w, old, new, unit, what):
    """Ingester 2 killed too: the old range (frm, until), which needed it,
    answers 503; the new one, written after the change, still 200."""
    c.kill9_ingester(2)
    time.sleep(1.5)
    expect(r, f, w, old[0], old[1], unit, "%s, the old range" % what,
           status=503)
    expect(r, f, w, new[0], new[1], unit, "%s, the new range" % what)


def phase_b(r, ws):
    c = Cluster(ws, ingesters=3, distributors=0, queriers=0, rf=3,
                name="b", extra=EXTRA)
    w, base, f, unit = start(r, ws, c, "b", 90, "B: before the lost disks")
    def incarnation(i):
        j = c.ring(f.q) or {"members": []}
        return {m["id"]: m.get("incarnation")
                for m in j["members"]}.get("ingester-%d" % i)

    for i in (0, 1):
        before = incarnation(i)
        data = c.ingesters[i].data
        c.kill9_ingester(i)
        shutil.rmtree(data)
        os.makedirs(data)
        c.restart_ingester(i)
        r.check(wait_active(c, f, 3), "B: ingester-%d back empty" % i)
        after_inc = incarnation(i)
        r.check(before and after_inc and before != after_inc and
                len(after_inc) == 32, "B: /ring shows ingester-%d's new "
                "incarnation" % i, "%s -> %s" % (before, after_inc))
        expect(r, f, w, base - 60, base + 200, unit,
               "B: %d disk(s) lost, the old range" % (i + 1),
               status=200 if i == 0 else 503)
    after = base + 400
    w.batch(r, f, after, 60, "B: after the lost disks")
    expect(r, f, w, after, after + 200, unit, "B: the new range")
    one_more_down(r, c, f, w, (base - 60, base + 200), (after, after + 200),
                  unit, "B: a third ingester down")
    f.stop()


def phase_c(r, ws):
    bucket = ws.path("bucket-c")
    os.makedirs(bucket, exist_ok=True)
    flags = ["-storage.backend=filesystem",
             "-storage.filesystem.dir=%s" % bucket]
    c = Cluster(ws, ingesters=5, distributors=0, queriers=0, rf=3,
                name="c", gateways=2, gateway_rf=2,
                gateway_extra=flags + ["-store-gateway.sync-interval=300ms"],
                extra=EXTRA)
    c.ingester_extra = flags + c.gateway_flags() + [
        "-ingester.ship-interval=1s", "-ingester.leave-timeout=20s"]
    w, base, f, unit = start(r, ws, c, "c5", 120, "C: 5 ingesters",
                             gateways=True)
    left = [0, 1, 2, 3, 4]
    for i in (4, 3):
        resp = c.ingesters[i].request("POST", "/ingester/shutdown",
                                      body=b"", timeout=60)
        r.eq(resp.status, 200, "C: ingester-%d left (its blocks shipped "
             "and served) %s" % (i, resp.text()[:200]))
        probs = c.ingesters[i].reap(60)
        r.check(not probs, "C: ingester-%d exited 0" % i, "\n".join(probs))
        left.remove(i)
        f.stop()
        f = Front(r, ws, c, left, "c%d" % len(left), gateways=True)
        expect(r, f, w, base - 60, base + 600, unit,
               "C: ring of %s" % left)
    c.kill9_ingester(2)
    time.sleep(1.5)
    expect(r, f, w, base - 60, base + 600, unit,
           "C: 3 left for good and one more down: the bucket holds their "
           "data")
    f.stop()


def body(r):
    ws = Workspace("complete-answers")
    r.at_end(lambda: ws.cleanup(r))
    phase_a(r, ws)
    phase_b(r, ws)
    phase_c(r, ws)


if __name__ == "__main__":
    run_script("test_complete_answers", BUDGET_S, body)
