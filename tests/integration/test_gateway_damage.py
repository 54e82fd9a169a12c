#!/usr/bin/env python3
"""
test_gateway_damage.py -- a damaged block object in the bucket fails only
the queries that need it: a store-gateway reads data parts by range
(ingester/remote.h) and checks each as a query decodes it.

  1. The single binary, with a filesystem bucket, ingests service
     "dmg-a", flushes (one block shipped), ingests "dmg-b", flushes
     (another), and stops: the bucket alone holds the data.
  2. One byte of a data part of dmg-a's block object is flipped.
  3. A store-gateway loads both blocks (the damaged one too: the parts a
     load imports are whole; the damage is logged), and a querier whose
     only ingester is empty reads through it:
       - dmg-b's answer is exact;
       - dmg-a's is an error, never 200, and the gateway counts a damaged
         data part (smolder_ingester_corruptions_total{part="data"}).
  4. The same with 4 KiB pages (the object loaded by range, its data read
     by ranged GET): the same answers.
  5. A part a load imports (not data) of dmg-b's block object is damaged
     too: a new gateway cannot load that block and says so in its
     Sources answers, so every query of the tenant over the block's
     range answers 503 naming the block -- before, the block was skipped
     and its service answered 200 with nothing -- while a range the
     block does not cover still answers 200.
"""

import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import (DataServer, Workspace, collapsed_stacks,  # noqa: E402
                        flush, metrics)
from smolder import free_port, metric_value, run_script  # noqa: E402

BUDGET_S = 120
STACKS = {"dmg-a": ["main;a;x", "main;a;y"], "dmg-b": ["main;b;x", "main;b;y"]}
N = 12


def damage_first_part(path, pick):
    """Flip the last byte of the object's first part whose kind and
    length pick(kind, n) takes; that kind, or None when none does."""
    with open(path, "rb") as f:
        obj = bytearray(f.read())
    np_, toc_off = struct.unpack(">IQ", obj[-24:-12])
    for i in range(np_):
        e = obj[toc_off + 17 * i: toc_off + 17 * (i + 1)]
        kind, _, off, n = struct.unpack(">cIQI", bytes(e))
        if pick(kind, n):
            obj[off + n - 1] ^= 0xFF
            with open(path, "wb") as f:
                f.write(obj)
            return kind.decode()
    return None


def damage_first_data_part(path):
    """Flip the last byte of the object's first data part ('D'); whether
    there was one."""
    return damage_first_part(path, lambda kind, n: kind == b"D") is not None


def damage_first_loaded_part(path):
    """Flip the last byte of the object's first part that is not data;
    its kind, or None."""
    return damage_first_part(path, lambda kind, n: kind != b"D" and n > 0)


def body(r):
    ws = Workspace("gateway-damage")
    r.at_end(lambda: ws.cleanup(r))
    bucket = ws.path("bucket")
    os.makedirs(bucket)
    storage = ["-storage.backend=filesystem",
               "-storage.filesystem.dir=%s" % bucket]

    # 1. two blocks in the bucket, one per service
    one = DataServer(ws.data_dir("single"), ws.log_dir("single"),
                     name="single", extra_flags=storage + [
                         "-validation.reject-older-than=0",
                         "-compactor.compaction-interval=1h"]).start()
    r.at_end(lambda: one.stop())
    now = int(time.time())
    for app in ("dmg-a", "dmg-b"):
        ok = 0
        for k in range(N):
            t = now - 300 + k
            resp = one.ingest({"name": "%s.cpu" % app, "from": t,
                               "until": t + 1},
                              ("%s 1\n" % STACKS[app][k % 2]).encode())
            ok += resp.status == 200
        r.eq(ok, N, "%s: every upload acknowledged" % app)
        r.eq(flush(one).status, 200, "%s: flushed and shipped" % app)
    _, p = metrics(one)
    r.eq(metric_value(p, "smolder_ingester_ship_blocks_pending") or 0, 0,
         "nothing pending")
    want = {}
    for app in ("dmg-a", "dmg-b"):
        resp = one.render("%s.cpu{}" % app, frm=now - 600, until=now + 60,
                          fmt="collapsed")
        want[app] = collapsed_stacks(resp.text())
    r.check(all(len(w) == 2 for w in want.values()), "the single binary "
            "answers both services", str(want))
    r.check(not one.stop(), "the single binary stops cleanly")

    # 2. damage dmg-a's block: the object of the smaller source gen
    blocks = []
    for d, _, files in os.walk(bucket):
        if "meta.json" in files and "block" in files:
            import json
            with open(os.path.join(d, "meta.json")) as f:
                m = json.load(f)
            blocks.append((m["source"]["gen"], os.path.join(d, "block")))
    r.eq(len(blocks), 2, "two block objects in the bucket")
    blocks.sort()
    r.check(damage_first_data_part(blocks[0][1]), "a data part of dmg-a's "
            "block object damaged")

    # 3. and 4. a gateway, an empty ingester and a querier; twice; then
    # 5. with a part of dmg-b's block that a load needs damaged
    for page in ("256KiB", "4KiB", "unloadable"):
        if page == "unloadable":
            kind = damage_first_loaded_part(blocks[1][1])
            r.check(kind is not None, "a part a load imports ('%s') of "
                    "dmg-b's block object damaged" % kind)
            page = "256KiB"
            tag = "unloadable"
        else:
            tag = page.lower()
        gport, iport = free_port(), free_port()
        gw_ring = ["-store-gateway.sharding-ring.members="
                   "gw-0=tcp://127.0.0.1:%d" % gport,
                   "-store-gateway.sharding-ring.replication-factor=1"]
        gw = DataServer(ws.data_dir("gw-" + tag), ws.log_dir("gw-" + tag),
                        name="gateway-" + tag, target="store-gateway",
                        extra_flags=storage + gw_ring + [
                            "-instance.id=gw-0",
                            "-rpc.listen-address=tcp://127.0.0.1:%d" % gport,
                            "-store-gateway.sync-interval=1h",
                            "-store-gateway.data-page-bytes=" + page,
                            "-ingester.min-ready-duration=0s"]).start()
        r.at_end(lambda g=gw: g.stop())
        ing = DataServer(ws.data_dir("ing-" + tag), ws.log_dir("ing-" + tag),
                         name="ingester-" + tag, target="ingester",
                         extra_flags=[
                             "-instance.id=ing-0",
                             "-rpc.listen-address=tcp://127.0.0.1:%d" % iport,
                             "-ingester.min-ready-duration=0s"]).start()
        r.at_end(lambda i=ing: i.stop())
        q = DataServer(ws.data_dir("q-" + tag), ws.log_dir("q-" + tag),
                       name="querier-" + tag, target="querier",
                       extra_flags=gw_ring + [
                           "-ring.members=ing-0=tcp://127.0.0.1:%d" % iport,
                           "-distributor.replication-factor=1"]).start()
        r.at_end(lambda x=q: x.stop())
        if tag == "unloadable":
            _, p = metrics(gw)
            r.eq(metric_value(p, "smolder_store_gateway_block_load_failures"
                              "_total") or 0, 1, "the gateway could not load "
                 "dmg-b's block, and counted it")
            for app in ("dmg-b", "dmg-a"):
                resp = q.render("%s.cpu{}" % app, frm=now - 600,
                                until=now + 60, fmt="collapsed")
                r.check(resp.status == 503 and "could load block" in
                        resp.text() and "meta.json" in resp.text(),
                        "%s over the unloadable block's range: 503 naming "
                        "it, never a short 200" % app, "%d %s" % (
                            resp.status, resp.text()[:300]))
            resp = q.render("dmg-b.cpu{}", frm=now - 7200, until=now - 3600,
                            fmt="collapsed")
            r.eq(resp.status, 200, "a range the block does not cover still "
                 "answers 200")
            for s in (q, ing, gw):
                r.check(not s.stop(), "%s stops cleanly" % s.name)
            continue
        _, p = metrics(gw)
        r.eq(metric_value(p, "smolder_store_gateway_blocks_loaded_total")
             or 0, 2, "%s pages: the gateway loaded both blocks, the "
             "damaged one too" % page)
        resp = q.render("dmg-b.cpu{}", frm=now - 600, until=now + 60,
                        fmt="collapsed")
        r.eq(collapsed_stacks(resp.text()) if resp.status == 200
             else resp.status, want["dmg-b"], "%s pages: the whole "
             "block's service answers exactly" % page)
        resp = q.render("dmg-a.cpu{}", frm=now - 600, until=now + 60,
                        fmt="collapsed")
        r.check(resp.status >= 500, "%s pages: the damaged block's service "
                "answers an error, not 200 (%d %s)" % (
                    page, resp.status, resp.text()[:200]))
        _, p = metrics(gw)
        r.check((metric_value(p, "smolder_ingester_corruptions_total",
                              part="data") or 0) >= 1,
                "%s pages: the gateway counted the damaged data part" % page)
        for s in (q, ing, gw):
            r.check(not s.stop(), "%s stops cleanly" % s.name)


if __name__ == "__main__":
    run_script("test_gateway_damage", BUDGET_S, body)
