#!/usr/bin/env python3
"""
test_etcd_membership.py -- shared ring membership in a real etcd (Debian's
etcd-server on loopback): ingesters join and leave under steady writes
while one distributor and one querier, never restarted, follow etcd.
RF 3, store-gateways (RF 2) over a filesystem bucket, also in etcd.

  A. ingesters 0-2 register themselves (<prefix>ingesters/<id>); the
     distributor and the querier, given only -ring.etcd.endpoints, see
     the three ACTIVE; a writer thread uploads steadily (16 series) for
     the whole test.
  B. ingesters 3 and 4 start: both rings see five ACTIVE within seconds
     (a watch, no restart).
  C. ingesters 0 and 1 leave for good, one after another (POST
     /ingester/shutdown: shipped and served, then the process exits and
     deletes its key): both rings drop it by themselves.
  D. etcd itself stops and starts again mid-load: the rings keep their
     members meanwhile (an etcd outage never empties a ring), and an
     ingester restarted without leaving keeps its key and its place.
  E. at every stage the querier's answer counts every acknowledged
     upload exactly once; the distributor and the querier are the same
     processes from start to end.
  G. store-gateways in etcd too (-store-gateway.sharding-ring.store=etcd):
     gateway-2 joins and gateway-0 leaves for good (SIGTERM with
     -store-gateway.sharding-ring.unregister-on-shutdown), with the
     writer paused: the querier's store-gateway ring follows without a
     restart, and every answer meanwhile -- history the left ingesters
     shipped is only in the bucket -- is exact: no 503, no partial 200.
  F. two compactors: one holds the compactor lock in etcd and runs
     passes, the other's POST /compactor/run answers 503 naming the
     holder; once the holder stops, the other takes the lock and runs.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import etcd_server  # noqa: E402
from cluster import shipping_cluster  # noqa: E402
from durability import (SERVER_STACKS, UploadWriter,  # noqa: E402
                        leave_for_good, workspace_for)
from oracle import parse_collapsed  # noqa: E402
from smolder import run_script  # noqa: E402

STACKS = SERVER_STACKS
SHARDS = 16


def answer(q):
    now = int(time.time())
    resp = q.render("et.cpu{}", frm=now - 3600, until=now + 600,
                    fmt="collapsed")
    if resp.status != 200:
        return (resp.status, resp.text()[:300])
    return parse_collapsed(resp.text())


def etcd_keys(c, kind="ingesters"):
    """The member ids under the cluster's prefix, read with etcdctl."""
    import subprocess
    out = subprocess.run(
        ["etcdctl", "--endpoints=%s" % c.etcd, "get", "--prefix",
         "--keys-only", "%s/%s/" % (c.name, kind)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20,
        env=dict(os.environ, ETCDCTL_API="3")).stdout.decode()
    return sorted(k.rsplit("/", 1)[-1] for k in out.split() if k)


def body(r):
    ws = workspace_for(r, "etcd-membership")
    et_dir = ws.path("etcd")
    et = etcd_server.start_for(r, et_dir)
    bucket = ws.path("bucket")
    storage = ["-storage.backend=filesystem",
               "-storage.filesystem.dir=%s" % bucket]
    # as deploy/kubernetes runs them: SIGTERM is a restart that keeps its
    # claim; leaving for good is POST /ingester/shutdown
    c = shipping_cluster(
        ws, storage, ["-ingester.ship-interval=1s",
                      "-ingester.leave-timeout=15s",
                      "-ingester.leave-on-shutdown=false"],
        gateway_extra=[
            "-store-gateway.sharding-ring.unregister-on-shutdown=true"],
        ingesters=3, distributors=1, queriers=1, rf=3, compactors=2,
        gateways=2, gateway_rf=2, etcd=et["endpoint"], gateway_store="etcd")
    r.at_end(lambda: c.stop())

    # A. three ingesters, found in etcd
    c.start()
    r.eq(etcd_keys(c), ["ingester-0", "ingester-1", "ingester-2"],
         "the three ingesters registered themselves in etcd")
    d, q = c.distributors[0], c.queriers[0]
    pids = (d.proc.pid, q.proc.pid)
    w = UploadWriter("et.cpu", STACKS, SHARDS, d)
    w.start()
    r.at_end(w.halt.set)
    unit = [0]

    def check(what):
        acked = w.snapshot()
        got, want, deadline = None, None, time.monotonic() + 20
        while time.monotonic() < deadline:
            got = answer(q)
            if not unit[0] and isinstance(got, dict) and acked[STACKS[0]]:
                unit[0] = got.get(STACKS[0], 0) // acked[STACKS[0]]
            want = {s: n * unit[0] for s, n in acked.items() if n > 0}
            if unit[0] and got == want:
                break
            time.sleep(0.2)
        r.eq(got, want, "%s: every acknowledged upload counts once "
             "(%d acknowledged)" % (what, sum(acked.values())))
        w.paused.clear()

    time.sleep(2)
    check("3 ingesters")

    # B. two join; nobody restarts
    t0 = time.monotonic()
    for i in (3, 4):
        c.ingesters.append(c._ingester(i).start())
    r.check(c.wait_ring(active=5, timeout=20), "both rings see 5 ACTIVE "
            "ingesters without a restart (%.1f s)" % (time.monotonic() - t0),
            str(c.states(d)))
    time.sleep(2)
    check("5 ingesters")

    # C. two leave for good, one at a time
    for i in (0, 1):
        leave_for_good(r, c.ingesters[i], i)
        ok = False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not ok:
            ok = all("ingester-%d" % i not in c.states(s) for s in (d, q))
            time.sleep(0.1)
        r.check(ok, "ingester-%d left etcd and both rings dropped it by "
                "themselves" % i, str(c.states(d)))
        check("ingester-%d gone" % i)
    r.eq(etcd_keys(c), ["ingester-2", "ingester-3", "ingester-4"],
         "etcd lists the three that stay")

    # D. etcd down and back; an ingester restarted without leaving
    etcd_server.stop(et_dir)
    time.sleep(3)
    r.eq(sorted(c.states(d)), ["ingester-2", "ingester-3", "ingester-4"],
         "etcd down for 3 s: the distributor's ring keeps its members")
    check("etcd down")
    etcd_server.restart(et_dir)
    probs = c.ingesters[2].stop()
    r.check(not probs, "ingester-2 stopped (not left)", "\n".join(probs))
    c.restart_ingester(2)
    r.check(c.wait_ring(active=3, timeout=20), "etcd back, ingester-2 "
            "restarted: 3 ACTIVE in both rings", str(c.states(d)))
    r.eq(etcd_keys(c), ["ingester-2", "ingester-3", "ingester-4"],
         "ingester-2 kept its key across the restart")
    time.sleep(1)
    check("etcd back")

    # G. store-gateways join and leave through etcd
    r.eq(etcd_keys(c, "store-gateways"), ["gateway-0", "gateway-1"],
         "the two store-gateways registered themselves in etcd")
    gw_path = "/store-gateway/ring"

    def gateways_settle(what, want):
        """Poll the querier until its store-gateway ring shows `want`
        ACTIVE, then 2 s more (the gateways' 1.5 s unowned grace), each
        answer compared with the acknowledged uploads."""
        acked = w.snapshot()
        expect = {s: n * unit[0] for s, n in acked.items() if n > 0}
        bad, answers = [], []

        def probe():
            got = answer(q)
            answers.append(got)
            if got != expect:
                bad.append(got if not isinstance(got, dict) else
                           "200 with %d of %d" % (sum(got.values()),
                                                   sum(expect.values())))

        settled, took = c.poll_until_active(q, gw_path, want, 40, 0.1, probe)
        r.check(settled, "%s: the querier's store-gateway ring is %s, all "
                "ACTIVE, without a restart (%.1f s)" % (what, want, took),
                str(c.states(q, gw_path)))
        r.eq(bad[:5], [], "%s: every one of %d answers meanwhile is exact"
             % (what, len(answers)))
        w.paused.clear()

    c.gateways.append(c._gateway(2).start(wait=False))
    gateways_settle("gateway-2 joined", ["gateway-0", "gateway-1",
                                         "gateway-2"])
    probs = c.gateways[0].stop()
    r.check(not probs, "gateway-0 stopped", "\n".join(probs))
    gateways_settle("gateway-0 left", ["gateway-1", "gateway-2"])
    r.eq(etcd_keys(c, "store-gateways"), ["gateway-1", "gateway-2"],
         "gateway-0 deleted its key when it stopped")
    time.sleep(1)
    check("gateways changed")

    # F. one compactor at a time
    runs = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        runs = {k: c.compactors[k].request("POST", "/compactor/run",
                                           body=b"", timeout=30)
                for k in (0, 1)}
        if sorted(x.status for x in runs.values()) == [200, 503]:
            break
        time.sleep(0.5)
    st = {k: x.status for k, x in runs.items()}
    r.eq(sorted(st.values()), [200, 503], "two compactors: one runs the "
         "pass, the other answers 503 (%s)" % st)
    holder = 0 if st.get(0) == 200 else 1
    other = 1 - holder
    r.check("pid %d " % c.compactors[holder].proc.pid in
            runs[other].text(), "the 503 names the holder",
            runs[other].text()[:200])
    probs = c.compactors[holder].stop()
    r.check(not probs, "the holder stopped", "\n".join(probs))
    t0 = time.monotonic()
    got = None
    while time.monotonic() < t0 + 20:
        got = c.compactors[other].request("POST", "/compactor/run",
                                          body=b"", timeout=30)
        if got.status == 200:
            break
        time.sleep(0.5)
    r.check(got is not None and got.status == 200, "the other compactor "
            "took the lock and runs (%.1f s)" % (time.monotonic() - t0),
            got.describe() if got is not None else "")

    with w.lock:
        r.check(w.sent > 200 and w.refused == 0, "the writer kept writing "
                "(%d sent, %d refused)" % (w.sent, w.refused))
    r.eq((d.proc.pid, q.proc.pid), pids, "the distributor and the querier "
         "were never restarted")
    w.halt.set()
    w.join(10)
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_etcd_membership", 240, body)
