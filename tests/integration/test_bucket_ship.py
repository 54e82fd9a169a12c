#!/usr/bin/env python3
"""
test_bucket_ship.py -- blocks go to the bucket, on a real S3 server
(OpenStack Swift's s3api on loopback, tests/tools/swift_s3.py) and on the
filesystem backend, and nothing about writes depends on it.

  1. Swift up; the single binary with -storage.backend=s3 and its flags,
     -ingester.ship-interval=1s.  Ingest, POST /ingester/flush: 200, and
     then the block is in the bucket: smolder_ingester_ship_blocks_total
     >= 1, pending 0; `smolder-admin bucket ls` lists
     <tenant>/blocks/<ULID>/block and meta.json; `bucket verify` exits 0;
     meta.json (fetched with `bucket get`) names the tenant, the source
     (instance, incarnation, gen) and a time range holding the upload.
  2. The bucket hangs (Swift's proxy SIGSTOPped): writes are still
     acknowledged and answered; a flush answers 503 "blocks wait for the
     bucket"; the pending gauge counts the block and failures are counted.
     Swift back (SIGCONT): the backlog drains by itself (pending 0) and
     `bucket verify` shows every block, each uploaded once.
     With the default timeouts (30 s, 4 retries), SIGTERM while an upload
     hangs on the store stops the process in seconds, exit 0.
  3. Restart on the same data dir: nothing is uploaded again (the ship
     records are durable), the answers are the same.
  4. The compactor owns the bucket: with a 24 h retention, a block of
     3-day-old data is marked (deletion-mark.json), listed as marked in
     <tenant>/bucket-index.json, and deleted after -compactor.deletion-delay
     (meta.json first); the recent block stays; verify stays clean.
  5. kill -9 between a block's object and its meta.json
     (SMOLDER_TEST_FAULTS=ship-kill): the bucket holds the object alone,
     `bucket verify` says PARTIAL; after a restart the same ULID is
     completed -- no second copy -- and verify is clean.
  5b. 24 tenants: one flush cuts a block each; the
     -ingester.ship-concurrency workers ship all 24, each whole.
  6. A data dir from before shipping (blocks cut without a bucket), one
     block's tree damaged with smolder-admin corrupt: with a bucket the
     whole block ships, the damaged one is not uploaded (the bucket would
     serve the damage) but stays pending, counted and logged.
  7. The filesystem backend (<data.dir>/bucket by default): a flush ships,
     `bucket verify` with the same flags exits 0; a damaged object is
     reported DAMAGED (exit 1) and a block object without meta.json is
     reported PARTIAL.
Every process started here is stopped by PID (Swift by the harness).
"""

import json
import os
import re
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import swift_s3  # noqa: E402
from durability import (DataServer, Workspace, admin, admin_listener, flush,  # noqa: E402
                        metrics, parse_blocks, wait_metric)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 240


def s3_flags(sw):
    return swift_s3.smolder_flags(sw, timeout="2s", retries=1)


def ingest(srv, name, n=3):
    now = int(time.time())
    ok = 0
    for i in range(n):
        resp = srv.ingest({"name": name, "from": now - 10 - i,
                           "until": now - 9 - i},
                          b"main;work;step%d 100\nmain;idle 5\n" % i)
        ok += resp.status == 200
    return ok


def render_total(srv, name):
    resp = srv.render(name + "{}", fmt="json")
    if resp.status != 200:
        return None
    return resp.json()["flamebearer"]["numTicks"]


def blocks_in(listing):
    """{ulid: set of object names} from `bucket ls` output."""
    out = {}
    for line in listing.splitlines():
        m = re.match(r"\s*\d+ ([^/\s]+)/blocks/([0-9A-Z]{26})/(block|meta\.json)$",
                     line)
        if m:
            out.setdefault(m.group(2), set()).add(m.group(3))
    return out


def m(srv, name):
    _, p = metrics(srv)
    return metric_value(p, name)


def bucket_whole(r, flags, nblocks, what):
    """smolder-admin bucket verify finds nblocks whole blocks and no
    problem."""
    ver = admin("bucket", "verify", *flags)
    r.check(ver.rc == 0 and "%d blocks, 0 problems" % nblocks in ver.out,
            what, ver.describe())


def body(r):
    ws = Workspace("bucket-ship")
    r.at_end(lambda: ws.cleanup(r))
    sw = swift_s3.start_for(r, ws.path("swift"))
    flags = s3_flags(sw)
    data = ws.data_dir()
    common = ["-ingester.ship-interval=1s", "-instance.id=ing-a"]

    # 1. a flush ships
    srv = DataServer(data, ws.log_dir("s3"), extra_flags=flags + common)
    srv.start()
    r.eq(ingest(srv, "ship.cpu"), 3, "writes acknowledged")
    resp = flush(srv)
    r.eq(resp.status, 200, "flush with the bucket up: " + resp.text()[:200])
    r.check((m(srv, "smolder_ingester_ship_blocks_total") or 0) >= 1,
            "ship_blocks_total >= 1 after the flush")
    r.eq(m(srv, "smolder_ingester_ship_blocks_pending"), 0,
         "nothing pending after the flush")
    r.check((m(srv, "smolder_ingester_ship_bytes_total") or 0) > 0,
            "ship_bytes_total counts the upload")
    total1 = render_total(srv, "ship.cpu")
    r.check(total1 is not None and total1 > 0,
            "the flamegraph counts the uploads", str(total1))
    ls = admin("bucket", "ls", *flags)
    r.eq(ls.rc, 0, "bucket ls: " + ls.describe())
    bl = blocks_in(ls.out)
    r.check(len(bl) >= 1 and all(v == {"block", "meta.json"}
                                 for v in bl.values()),
            "every block has its object and meta.json", ls.out)
    ver = admin("bucket", "verify", *flags)
    r.eq(ver.rc, 0, "bucket verify after the flush: " + ver.describe())
    ulid = sorted(bl)[0] if bl else "none"
    tenant = re.search(r"(\S+)/blocks/", ls.out)
    meta_key = "%s/blocks/%s/meta.json" % (
        tenant.group(1) if tenant else "?", ulid)
    got = admin("bucket", "get", "-key=" + meta_key, *flags)
    r.eq(got.rc, 0, "bucket get meta.json: " + got.describe())
    try:
        mj = json.loads(got.out)
    except ValueError:
        mj = {}
    r.eq(mj.get("ulid"), ulid, "meta.json names its block")
    r.eq(mj.get("source", {}).get("instance"), "ing-a",
         "meta.json names its source instance")
    r.check(re.fullmatch(r"[0-9a-f]{32}",
                         mj.get("source", {}).get("incarnation", "")),
            "meta.json carries the data dir's incarnation", got.out)
    now_ms = int(time.time() * 1000)
    r.check(mj.get("min_t", 0) <= now_ms - 10000 <= mj.get("max_t", 0) + 10000
            and mj.get("max_t", 0) <= now_ms + 60000,
            "meta.json's time range holds the uploads", got.out)
    r.check(sw["secret_key"] not in srv.stderr_text(),
            "the secret key is never logged")

    # 2. the bucket hangs: writes go on, blocks wait, then drain
    proxy = sw["pids"][-1]
    os.kill(proxy, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r.eq(ingest(srv, "ship.cpu"), 3, "writes acknowledged while the "
             "bucket hangs")
        r.check(time.monotonic() - t0 < 5, "writes do not wait on the bucket")
        r.eq(render_total(srv, "ship.cpu"), 2 * (total1 or 0),
             "answers while the bucket hangs count every write")
        resp = flush(srv)
        r.eq(resp.status, 503, "flush while the bucket hangs: 503")
        r.check("bucket" in resp.text(), "the 503 names the bucket",
                resp.text()[:300])
        r.check((m(srv, "smolder_ingester_ship_blocks_pending") or 0) >= 1,
                "the pending gauge counts the waiting block")
        r.check((m(srv, "smolder_ingester_ship_failures_total") or 0) >= 1,
                "failures are counted")
        r.check((m(srv, "smolder_ingester_ship_oldest_pending_age_seconds")
                 or 0) > 0, "the oldest pending block has an age")
    finally:
        os.kill(proxy, signal.SIGCONT)
    v = wait_metric(srv, "smolder_ingester_ship_blocks_pending",
                    lambda x: x == 0, timeout=60)
    r.eq(v, 0, "the backlog drains once the bucket is back")
    ls = admin("bucket", "ls", *flags)
    bl2 = blocks_in(ls.out)
    r.check(len(bl2) >= 2 and set(bl) <= set(bl2),
            "the bucket holds the old and the new blocks", ls.out)
    shipped = m(srv, "smolder_ingester_ship_blocks_total")
    r.eq(shipped, len(bl2), "each block uploaded once (ship_blocks_total "
         "== blocks in the bucket)")
    ver = admin("bucket", "verify", *flags)
    r.eq(ver.rc, 0, "bucket verify after the drain: " + ver.describe())
    srv.stop()
    srv.check_stopped(r, "the s3 server")

    # 2b. a hung store does not hold the shutdown (default timeouts:
    #     30 s a request, 4 retries -- minutes without the cancel) past
    #     the leave's bound, -ingester.leave-timeout
    hflags = [a for a in flags if not a.startswith(("-storage.s3.timeout",
                                                    "-storage.s3.max-retries"))]
    data_h = ws.data_dir("data-hung")
    hsrv = DataServer(data_h, ws.log_dir("hung"),
                      extra_flags=hflags + ["-storage.prefix=hung",
                                            "-ingester.leave-timeout=5s"] +
                      common)
    hsrv.start()
    ingest(hsrv, "hung.cpu")
    os.kill(proxy, signal.SIGSTOP)
    try:
        holder = threading.Thread(target=lambda: flush(hsrv, timeout=120),
                                  daemon=True)
        holder.start()          # a flush whose upload hangs
        time.sleep(1.5)
        t0 = time.monotonic()
        hsrv.stop()
        took = time.monotonic() - t0
    finally:
        os.kill(proxy, signal.SIGCONT)
    r.check(took < 15, "SIGTERM with an upload hanging on the store stops "
            "in %.1f s (< 15)" % took)
    hsrv.check_stopped(r, "the server stopped with the store hanging")
    holder.join(30)

    # 3. restart: nothing uploaded again
    srv = DataServer(data, ws.log_dir("s3-restart"),
                     extra_flags=flags + common)
    srv.start()
    time.sleep(2.5)          # two ship passes
    r.eq(m(srv, "smolder_ingester_ship_blocks_total") or 0, 0,
         "a restart uploads nothing again")
    r.eq(m(srv, "smolder_ingester_ship_blocks_pending"), 0,
         "nothing pending after the restart")
    r.eq(render_total(srv, "ship.cpu"), 2 * (total1 or 0),
         "answers after the restart")
    r.eq(len(blocks_in(admin("bucket", "ls", *flags).out)), len(bl2),
         "the bucket has the same blocks")
    srv.stop()
    srv.check_stopped(r, "the restarted s3 server")

    # 4. the compactor owns the bucket: retention marks, deletes after
    #    the delay, and writes the bucket index
    rflags = flags + ["-storage.prefix=ret"]
    data3 = ws.data_dir("data-ret")
    srv = DataServer(data3, ws.log_dir("retention"), extra_flags=rflags + [
        "-instance.id=ing-r", "-validation.reject-older-than=0",
        "-compactor.blocks-retention-period=24h",
        "-compactor.deletion-delay=2s", "-compactor.compaction-interval=1h"])
    srv.start()
    old = int(time.time()) - 3 * 86400
    resp = srv.ingest({"name": "ret.cpu", "from": old, "until": old + 1},
                      b"old;stack 7\n")
    r.eq(resp.status, 200, "an old upload is acknowledged")
    r.eq(flush(srv).status, 200, "flush ships the old block")
    ingest(srv, "ret.cpu")
    r.eq(flush(srv).status, 200, "flush ships the recent block")
    before = blocks_in(admin("bucket", "ls", *rflags).out)
    r.eq(len(before), 2, "two blocks shipped under the prefix")
    run = srv.request("POST", "/compactor/run", body=b"", timeout=120)
    r.eq(run.status, 200, "compactor run: " + run.text()[:300])
    bj = (run.json() if run.status == 200 else {}).get("bucket", {})
    r.eq(bj.get("marked"), 1, "the block past retention is marked")
    r.eq(bj.get("blocks"), 2, "both blocks are indexed until the delay")
    idx = admin("bucket", "get", "-key=anonymous/bucket-index.json", *rflags)
    try:
        ij = json.loads(idx.out)
    except ValueError:
        ij = {}
    marked = [b for b in ij.get("blocks", []) if "deletion_time_ms" in b]
    r.check(len(ij.get("blocks", [])) == 2 and len(marked) == 1 and
            marked[0].get("max_t", 0) < (old + 86400) * 1000,
            "the bucket index lists both blocks, the old one marked",
            idx.describe())
    time.sleep(2.2)
    run = srv.request("POST", "/compactor/run", body=b"", timeout=120)
    bj = (run.json() if run.status == 200 else {}).get("bucket", {})
    r.eq(bj.get("deleted"), 1, "the marked block is deleted after the delay")
    after = blocks_in(admin("bucket", "ls", *rflags).out)
    r.check(len(after) == 1 and set(after) < set(before),
            "one block left in the bucket", str(after))
    ver = admin("bucket", "verify", *rflags)
    r.eq(ver.rc, 0, "bucket verify after the deletion: " + ver.describe())
    r.eq(m(srv, "smolder_compactor_bucket_blocks_deleted_total"), 1,
         "smolder_compactor_bucket_blocks_deleted_total counts it")
    srv.stop()
    srv.check_stopped(r, "the retention server")

    # 5. kill -9 between a block's object and its meta.json
    kflags = flags + ["-storage.prefix=crash"]
    data4 = ws.data_dir("data-crash")
    os.environ["SMOLDER_TEST_FAULTS"] = "ship-kill"
    try:
        srv = DataServer(data4, ws.log_dir("crash"),
                         extra_flags=kflags + common)
        srv.start()
    finally:
        del os.environ["SMOLDER_TEST_FAULTS"]
    ingest(srv, "crash.cpu")
    try:
        flush(srv, timeout=30)
    except Exception:
        pass                      # the process dies under the request
    r.eq(srv.wait_self_killed(30), -signal.SIGKILL, "the ingester killed "
         "itself between the object and its meta.json")
    bl = blocks_in(admin("bucket", "ls", *kflags).out)
    r.check(len(bl) == 1 and list(bl.values())[0] == {"block"},
            "the bucket holds the object without its meta.json", str(bl))
    ver = admin("bucket", "verify", *kflags)
    r.check(ver.rc == 1 and "PARTIAL" in ver.out,
            "verify reports the unfinished upload", ver.describe())
    srv = DataServer(data4, ws.log_dir("crash-restart"),
                     extra_flags=kflags + common)
    srv.start()
    # shipped by this process (the pending gauge reads 0 before its first
    # pass has counted anything)
    v = wait_metric(srv, "smolder_ingester_ship_blocks_total",
                    lambda x: x >= 1, timeout=30)
    r.check((v or 0) >= 1, "the restarted ingester finishes the upload")
    r.eq(m(srv, "smolder_ingester_ship_blocks_pending"), 0,
         "nothing pending after it")
    bl2 = blocks_in(admin("bucket", "ls", *kflags).out)
    r.check(set(bl2) == set(bl) and all(x == {"block", "meta.json"}
                                        for x in bl2.values()),
            "the same ULID, now complete: no second copy", str(bl2))
    ver = admin("bucket", "verify", *kflags)
    r.eq(ver.rc, 0, "verify after the restart: " + ver.describe())
    srv.stop()
    srv.check_stopped(r, "the restarted crash server")

    # 5b. many tenants: one flush cuts a block each, shipped by
    #     -ingester.ship-concurrency workers, every one whole
    mflags = flags + ["-storage.prefix=mt"]
    data_mt = ws.data_dir("data-mt")
    srv = DataServer(data_mt, ws.log_dir("tenants"), extra_flags=admin_listener(
        mflags + ["-instance.id=ing-mt", "-auth.multitenancy-enabled=true",
                  "-ingester.ship-concurrency=4"]))
    srv.start()
    now = int(time.time())
    acked = 0
    for k in range(24):
        resp = srv.request("POST", "/ingest",
                           {"name": "mt.cpu", "from": now - 5,
                            "until": now - 4},
                           b"main;tenant%d 1\n" % k,
                           {"X-Scope-OrgID": "team-%02d" % k})
        acked += resp.status == 200
    r.eq(acked, 24, "24 tenants' uploads acknowledged")
    resp = flush(srv)
    r.eq(resp.status, 200, "one flush ships every tenant's block")
    r.eq(m(srv, "smolder_ingester_ship_blocks_total"), 24,
         "24 blocks shipped")
    bucket_whole(r, mflags, 24, "every tenant's block is whole in the "
                 "bucket")
    srv.stop()
    srv.check_stopped(r, "the multi-tenant server")

    # 6. a data dir from before shipping, one of its blocks damaged
    data5 = ws.data_dir("data-old")
    srv = DataServer(data5, ws.log_dir("noship"), extra_flags=common)
    srv.start()
    for name in ("old1.cpu", "old2.cpu"):
        ingest(srv, name)
        r.eq(flush(srv).status, 200, "flush without a bucket")
    srv.stop()
    srv.check_stopped(r, "the server without a bucket")
    blocks, _ = parse_blocks(admin("blocks", "-data.dir=" + data5).out)
    r.eq(len(blocks), 2, "two blocks cut without a bucket")
    if blocks:
        a = admin("corrupt", "-data.dir=" + data5, "-tenant=anonymous",
                  "-block=%s" % blocks[0]["block"], "-part=tree")
        r.eq(a.rc, 0, "smolder-admin corrupt: " + a.describe())
    oflags = flags + ["-storage.prefix=old"]
    srv = DataServer(data5, ws.log_dir("old-ship"),
                     extra_flags=oflags + common)
    srv.start()
    resp = flush(srv)
    r.eq(resp.status, 200, "a flush ships what it can: " + resp.text()[:200])
    r.eq(m(srv, "smolder_ingester_ship_blocks_total"), 1,
         "the whole block from before shipping is shipped")
    r.eq(m(srv, "smolder_ingester_ship_blocks_pending"), 1,
         "the damaged block stays pending")
    r.check((m(srv, "smolder_ingester_ship_failures_total") or 0) >= 1,
            "the damaged block counts as a failure")
    r.check("damaged block not shipped" in srv.stderr_text(),
            "the damaged block is logged")
    bucket_whole(r, oflags, 1, "the bucket holds the whole block only")
    srv.stop()
    srv.check_stopped(r, "the server shipping an old data dir")

    # 7. the filesystem backend, under <data.dir>/bucket by default
    data2 = ws.data_dir("data-fs")
    fsflags = ["-storage.backend=filesystem"]
    srv = DataServer(data2, ws.log_dir("fs"),
                     extra_flags=fsflags + common)
    srv.start()
    ingest(srv, "fs.cpu")
    resp = flush(srv)
    r.eq(resp.status, 200, "filesystem flush ships: " + resp.text()[:200])
    srv.stop()
    srv.check_stopped(r, "the filesystem server")
    aflags = fsflags + ["-data.dir=" + data2]
    ver = admin("bucket", "verify", *aflags)
    r.eq(ver.rc, 0, "filesystem bucket verify: " + ver.describe())
    objs = []
    for d, _, files in os.walk(os.path.join(data2, "bucket")):
        objs += [os.path.join(d, f) for f in files if f == "block"]
    r.check(len(objs) >= 1, "the block object is under <data.dir>/bucket")
    if objs:
        with open(objs[0], "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 0xFF]))
        ver = admin("bucket", "verify", *aflags)
        r.eq(ver.rc, 1, "a damaged object fails verify")
        r.check("DAMAGED" in ver.out, "verify says DAMAGED", ver.out)
        os.unlink(os.path.join(os.path.dirname(objs[0]), "meta.json"))
        ver = admin("bucket", "verify", *aflags)
        r.check("PARTIAL" in ver.out and ver.rc == 1,
                "a block object without meta.json is PARTIAL", ver.out)


if __name__ == "__main__":
    run_script("test_bucket_ship", BUDGET_S, body)
