#!/usr/bin/env python3
"""
test_compactor_fold.py -- the compactor folds the replicas' blocks in the
bucket into one block per tenant and clock hour, and no answer changes:
3 ingesters (RF 3, hinted hand-off off), 1 distributor, 1 querier, 1
store-gateway and 1 compactor, all on one filesystem bucket, next to a
single binary (-target=all) that receives the same uploads (the
reference).

  1. Uploads over three past clock hours (the middle one ended over 2 h
     ago), several series.  In ONE 10 s bucket of the middle hour the
     replicas diverge: ingester-0 is killed (-9) for batch 1 and comes
     back, ingester-1 for batch 2, so ingester-2 alone holds every upload
     of that bucket (docs/reliability.md §4.4: the read plan is exact).
     (With RF 3 a third batch missed by ingester-2 would leave no exact
     integer combination of the three sources -- compactor/fold.h: such
     an hour stays unfolded -- so that is not what this test does.)
  2. Every ingester flushed and shipped, the gateway synced: the bucket's
     metas show the divergence (nprofiles per source), and the querier's
     answers (/render JSON and collapsed, per series, SelectMergeStacktraces,
     SelectSeries) are byte-identical to the single binary's -- "before".
     The three replicas' bytes are the block_bytes of their blocks in the
     bucket.  Then the compactor is killed -9 in its first fold, after
     the object and before its meta.json (SMOLDER_TEST_FAULTS=fold-kill):
     the unfinished upload is never read, and the bucket pass deletes it
     after twice the deletion delay.
  3. POST /compactor/run (-compactor.fold-delay=0s): one fold block per
     hour (source instance "compactor", incarnation ff..ff, a `fold`
     object naming the hour and exactly the replica blocks as inputs,
     every upload once by nprofiles), nothing marked yet; answers
     byte-identical to "before".  The next pass marks every input
     (deletion-mark.json, reason "folded"), folds nothing again and
     deletes nothing; once the deletion delay (1 s: 0 is allowed, but
     then marking and deleting could not be told apart) has passed, a
     pass deletes them.  Answers unchanged after every step.
  4. Late uploads into the folded middle hour (its divergent bucket too)
     are shipped as new replica blocks holding only them; no single
     source holds a bucket's union, the first fold plus one replica does:
     the hour is folded again under a larger gen that replaces the first
     fold (nprofiles = first fold + late), the next pass marks the late
     blocks "folded" and the first fold "superseded"; answers follow the
     single binary fed the same late uploads at every step.
  5. All three ingesters killed -9 and wiped (restarted empty): every
     answer comes from the fold blocks via the gateway, still the single
     binary's.  Live bucket bytes over the three replicas' are printed
     and must be well below 1.
The gateway reads with 4 KiB pages and a 12 KiB data cache: blocks load
by range (the parts but the data) and every answer above reads data parts
by ranged GET through evictions (ingester/remote.h).
"""

import json
import os
import shutil
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, connect, flush,  # noqa: E402
                        gateway_sync, limit_flags, metrics, wait_metric)
from smolder import metric_value, run_script  # noqa: E402

BUDGET_S = 240
HOUR = 3600
NOW_H = (int(time.time()) // HOUR) * HOUR
MID = NOW_H - 3 * HOUR              # ended 2 h ago at least: foldable
HOURS = [MID - HOUR, MID, MID + HOUR]   # every one of them has ended
T_DIV = MID + 600                   # the divergent 10 s bucket
START, END = MID - HOUR, MID + 2 * HOUR
SHARDS = 6
COMPACTOR_INCARNATION = "f" * 32
DELETION_DELAY = "1s"
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0",
          "-validation.max-profile-stacktrace-samples=0",
          "-compactor.downsample-tiers=none"] + limit_flags()


# -- uploads ------------------------------------------------------------------

def body_for(app, shard, t, n, nstacks):
    """A folded body: `nstacks` stacks of the series, values by upload;
    some frames are the hour's own (as code changes between deploys), so
    a replica's block spanning the hours holds no more symbols than the
    hours' folds together."""
    lines = []
    for k in range(nstacks):
        lines.append("main;%s;handler%d;step%d_h%d;leaf%d_%d %d" % (
            app, shard, k % 7, (t // HOUR) % 24, k, (n + k) % 5,
            1 + (n * 7 + k * 3) % 23))
    return ("\n".join(lines) + "\n").encode()


class Uploads:
    """Every upload, in order, as (query, body); the same list goes to the
    single binary."""

    def __init__(self):
        self.n = 0

    def make(self, app, shard, t, nstacks):
        self.n += 1
        q = {"name": "%s.cpu{shard=s%d}" % (app, shard), "from": str(t),
             "until": str(t + 1)}
        return q, body_for(app, shard, t, self.n, nstacks)


def hourly_uploads(u, app, hours, shards, rounds, first, spacing, n):
    """`rounds` uploads of n samples to each of `shards` series in every
    hour: round k of shard s at first + spacing * k + s into the hour."""
    return [u.make(app, s, h + first + spacing * k + s, n)
            for h in hours for k in range(rounds) for s in range(shards)]


def common_uploads(u):
    """All replicas up: every hour, every series, several buckets."""
    out = hourly_uploads(u, "fold", HOURS, SHARDS, 4, 300, 610, 60)
    # the divergent bucket itself holds uploads every replica has
    for s in range(SHARDS):
        out.append(u.make("fold", s, T_DIV + s, 40))
    return out


def divergent_batch(u):
    """Two uploads per series, all in the bucket T_DIV."""
    out = []
    for rep in range(2):
        for s in range(SHARDS):
            out.append(u.make("fold", s, T_DIV + (s + 3 * rep) % 10, 40))
    return out


def ingest_all(r, srv, ups, what):
    bad = []
    for q, b in ups:
        resp = srv.ingest(q, b)
        if resp.status != 200:
            bad.append("%s -> %s" % (q, resp.describe()))
    r.check(not bad, "%s: %d uploads acknowledged" % (what, len(ups)),
            "\n".join(bad[:5]))


# -- answers ------------------------------------------------------------------

def queries(ref, app, shards):
    """[(label, method, path, query, body)]: the questions asked of the
    querier and the single binary about `app`."""
    rng = {"from": str(START), "until": str(END)}
    resp = connect(ref, "ProfileTypes", {"start": str(START * 1000),
                                         "end": str(END * 1000)})
    types = [t["ID"] for t in (resp.json().get("profileTypes") or [])]
    q = [("render %s{}" % app, "GET", "/render",
          dict(rng, query="%s.cpu{}" % app), None),
         ("render %s{} collapsed" % app, "GET", "/render",
          dict(rng, query="%s.cpu{}" % app, format="collapsed"), None),
         ("render %s{} maxNodes=16" % app, "GET", "/render",
          dict(rng, query="%s.cpu{}" % app, maxNodes="16"), None),
         ("render %s, the divergent bucket's minute" % app, "GET", "/render",
          {"from": str(T_DIV - 30), "until": str(T_DIV + 30),
           "query": "%s.cpu{}" % app, "format": "collapsed"}, None)]
    for s in range(shards):
        q.append(("render %s{shard=s%d}" % (app, s), "GET", "/render",
                  dict(rng, query='%s.cpu{shard="s%d"}' % (app, s)), None))
    sel = '{service_name="%s"}' % app
    for t in types:
        q.append(("SelectMergeStacktraces %s %s" % (t, sel), "POST",
                  "SelectMergeStacktraces", None,
                  {"profile_typeID": t, "label_selector": sel,
                   "start": str(START * 1000), "end": str(END * 1000)}))
        for step in (10, 600):
            q.append(("SelectSeries %s %s step %d by shard" % (t, sel, step),
                      "POST", "SelectSeries", None,
                      {"profile_typeID": t, "label_selector": sel,
                       "start": str(START * 1000), "end": str(END * 1000),
                       "step": step, "group_by": ["shard"]}))
    return q


def ask(srv, qd, patience=10):
    """The answer to one question; a 503 (a member just restarted) is
    retried for `patience` s."""
    _, method, path, query, body = qd
    deadline = time.monotonic() + patience
    while True:
        if method == "GET":
            resp = srv.request("GET", path, query)
        else:
            resp = connect(srv, path, body)
        if resp.status != 503 or time.monotonic() >= deadline:
            return resp
        time.sleep(0.2)


def answers(srv, qs):
    """{label: (status, body bytes)}."""
    return {qd[0]: (resp.status, resp.body)
            for qd, resp in ((qd, ask(srv, qd)) for qd in qs)}


def same(r, got, want, what):
    """Every answer 200 and byte-identical; one check, a diff per miss."""
    bad = []
    for label, (st, b) in want.items():
        g = got.get(label)
        if st != 200 or g is None or g[0] != 200 or g[1] != b:
            bad.append("%s:\n  want %s %s\n  got  %s %s" % (
                label, st, b[:300], g and g[0], g and g[1][:300]))
    return r.check(not bad, "%s: %d answers identical" % (what, len(want)),
                   "\n".join(bad[:4]))


def collapsed_total(body):
    tot = 0
    for ln in body.decode("utf-8", "replace").splitlines():
        if ln.strip():
            tot += int(ln.rpartition(" ")[2])
    return tot


# -- the bucket ---------------------------------------------------------------

def bucket_blocks(root):
    """Every block directory <...>/blocks/<ULID>/ under the filesystem
    bucket: [{ulid, dir, meta (dict or None), mark (dict or None),
    object (bool)}]."""
    out = []
    for d, dirs, files in os.walk(root):
        if os.path.basename(os.path.dirname(d)) != "blocks":
            continue
        b = {"ulid": os.path.basename(d), "dir": d, "meta": None,
             "mark": None, "object": "block" in files}
        for name, key in (("meta.json", "meta"),
                          ("deletion-mark.json", "mark")):
            if name in files:
                try:
                    with open(os.path.join(d, name)) as f:
                        b[key] = json.load(f)
                except (OSError, ValueError):
                    b[key] = {"unreadable": True}
        out.append(b)
    return out


def is_fold(b):
    src = (b["meta"] or {}).get("source") or {}
    return src.get("instance") == "compactor"


def src_key(b):
    src = b["meta"]["source"]
    return (src.get("incarnation"), src.get("gen"))


def live_bytes(blocks):
    """block_bytes of the complete, unmarked blocks."""
    return sum(b["meta"].get("block_bytes", 0) for b in blocks
               if b["meta"] and not b["mark"])


def flush_all(r, c, what):
    """Every ingester flushed (cut and shipped), nothing left pending."""
    for ing in c.ingesters:
        r.eq(flush(ing).status, 200, "%s: %s flushed and shipped"
             % (what, ing.name))
        v = wait_metric(ing, "smolder_ingester_ship_blocks_pending",
                        lambda x: x == 0, timeout=30)
        r.eq(v, 0, "%s: %s has nothing pending" % (what, ing.name))


def run_pass(r, c, what):
    resp = c.compactors[0].request("POST", "/compactor/run", body=b"",
                                   timeout=120)
    j = {}
    try:
        j = resp.json()
    except ValueError:
        pass
    r.check(resp.status == 200, "%s: the compactor's pass answers 200" % what,
            resp.describe())
    print("#   %s: %s" % (what, json.dumps(j, sort_keys=True)), flush=True)
    return j


class Applied:
    """Writes each ingester process applied since its start (an upload is
    one write on every replica): acknowledged at quorum, the last replica
    may still be applying it."""

    def __init__(self, c):
        self.c = c
        self.n = [0] * len(c.ingesters)

    def add(self, count, down=()):
        for i in range(len(self.n)):
            if i not in down:
                self.n[i] += count

    def wait(self, r, what):
        for i, ing in enumerate(self.c.ingesters):
            want = self.n[i]
            v = wait_metric(ing, "smolder_ingester_writes_total",
                            lambda x: x >= want, timeout=60, interval=0.05)
            r.check((v or 0) >= want, "%s: %s applied its %d writes (%s)"
                    % (what, ing.name, want, v))

    def restarted(self, i):
        self.n[i] = 0


def fold_rig(r, ws, extra, ref_uploads, common):
    """What both fold tests start with: the single binary (the reference)
    fed ref_uploads, then fold_cluster fed `common` with every replica up.
    Returns (the reference, the cluster, the bucket's path, its Applied)."""
    ref = DataServer(ws.data_dir("single"), ws.log_dir("single"),
                     name="single", extra_flags=extra).start()
    r.at_end(lambda: ref.stop())
    ingest_all(r, ref, ref_uploads, "single binary")
    c, bucket = fold_cluster(r, ws, extra)
    applied = Applied(c)
    ingest_all(r, c.distributors[0], common, "every replica up")
    applied.add(len(common))
    applied.wait(r, "common uploads")
    return ref, c, bucket, applied


def fold_cluster(r, ws, extra):
    """The cluster of both fold tests on a filesystem bucket, started;
    returns it and the bucket's path.  3 ingesters (RF 3) that ship only
    when flushed, a distributor without hints (a replica that was down
    misses what it missed for good), a querier, a compactor that passes
    only when asked and folds at once, and a store-gateway whose pages
    are far smaller than the blocks with a cache of a few of them: blocks
    load by range (the parts but the data) and every answer reads data by
    ranged GET through evictions."""
    bucket = ws.path("bucket")
    os.makedirs(bucket)
    storage = ["-storage.backend=filesystem",
               "-storage.filesystem.dir=%s" % bucket]
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, gateways=1, gateway_rf=1, extra=extra,
                ingester_extra=storage + [
                    "-ingester.ship-interval=1h",
                    "-ingester.leave-on-shutdown=false"],
                distributor_extra=["-distributor.hints-max-bytes=0"],
                gateway_extra=storage + ["-store-gateway.sync-interval=1h",
                                         "-store-gateway.data-page-bytes=4KiB",
                                         "-store-gateway.data-cache-bytes=12KiB"])
    c.compactor_extra = storage + c.gateway_flags() + [
        "-compactor.compaction-interval=1h",
        "-compactor.deletion-delay=%s" % DELETION_DELAY,
        "-compactor.fold-delay=0s"]
    c.start_for(r)
    return c, bucket


def miss_batch(r, c, applied, i, batch):
    """ingester-i killed -9 while `batch` is uploaded, then back: its
    replica lacks the batch."""
    c.kill9_ingester(i)
    r.check(c.wait_ring(active=2), "ingester-%d down (kill -9)" % i,
            str(c.states()))
    ingest_all(r, c.distributors[0], batch, "ingester-%d down" % i)
    applied.add(len(batch), down=(i,))
    c.restart_ingester(i)
    applied.restarted(i)
    r.check(c.wait_ring(active=3), "ingester-%d back" % i, str(c.states()))


def ship_late(r, ref, c, applied, qs, late):
    """The late uploads to the reference and, every replica up, to the
    cluster, flushed and shipped; the cluster must answer as the
    reference.  Returns the reference's answers."""
    ingest_all(r, ref, late, "single binary, late uploads")
    ingest_all(r, c.distributors[0], late, "late uploads, every replica up")
    applied.add(len(late))
    applied.wait(r, "late uploads")
    flush_all(r, c, "the late uploads")
    want = answers(ref, qs)
    gateway_sync(r, c.gateways[0], "late blocks shipped")
    same(r, answers(c.queriers[0], qs), want, "late blocks shipped, before "
         "the fold: as the single binary")
    return want


def wipe_ingester(r, c, i):
    """ingester-i killed -9, its disk lost, started again empty."""
    data = c.ingesters[i].data
    c.kill9_ingester(i)
    shutil.rmtree(data)
    os.makedirs(data)
    c.restart_ingester(i)
    r.check(c.wait_ring(active=3), "ingester-%d back empty" % i,
            str(c.states()))


# -- the test -----------------------------------------------------------------

def body(r):
    ws = Workspace("compactor-fold")
    r.at_end(lambda: ws.cleanup(r))
    u = Uploads()
    common = common_uploads(u)
    batch1 = divergent_batch(u)
    batch2 = divergent_batch(u)

    # 1. uploads; two replicas each miss a different batch of one bucket
    ref, c, bucket, applied = fold_rig(r, ws, COMMON,
                                       common + batch1 + batch2, common)
    q, gw = c.queriers[0], c.gateways[0]
    for i, batch in ((0, batch1), (1, batch2)):
        miss_batch(r, c, applied, i, batch)
        applied.wait(r, "after batch %d" % (i + 1))

    # 2. flushed and shipped; "before"
    flush_all(r, c, "shipped")
    j = gateway_sync(r, gw, "shipped")
    r.check(j.get("loaded", 0) >= 3, "the gateway loaded every replica's "
            "blocks (%s)" % j)

    qs = queries(ref, "fold", SHARDS)
    want = answers(ref, qs)
    r.check(all(st == 200 for st, _ in want.values()),
            "the single binary answers every question")
    r.check(collapsed_total(want["render fold{} collapsed"][1]) > 0,
            "the reference holds data")
    before = answers(q, qs)
    same(r, before, want, "before compaction (ingesters and sources) vs. "
         "the single binary")
    _, m = metrics(q)
    r.check((metric_value(m, "smolder_querier_divergent_series_total") or 0)
            > 0, "the querier saw replicas diverge per bucket")

    blocks0 = bucket_blocks(bucket)
    replicas = [b for b in blocks0 if b["meta"] and not is_fold(b)]
    incs = {b["meta"]["source"]["incarnation"] for b in replicas}
    r.eq(len(incs), 3, "the bucket holds blocks of three sources")
    r.check(not any(is_fold(b) for b in blocks0) and
            all(b["meta"] and not b["mark"] for b in blocks0),
            "before the pass: complete, unmarked replica blocks only",
            str([(b["ulid"], b["meta"] is not None, b["mark"])
                 for b in blocks0]))
    per_inst = {}
    for b in replicas:
        k = b["meta"]["source"].get("instance")
        per_inst[k] = per_inst.get(k, 0) + b["meta"].get("nprofiles", 0)
    r.eq(per_inst, {"ingester-0": len(common) + len(batch2),
                    "ingester-1": len(common) + len(batch1),
                    "ingester-2": len(common) + len(batch1) + len(batch2)},
         "the replicas diverge in the bucket: ingester-0 lacks batch 1, "
         "ingester-1 batch 2, ingester-2 has every upload (nprofiles)")
    replica_bytes = sum(b["meta"]["block_bytes"] for b in replicas)
    r.check(replica_bytes > 0, "the three replicas' blocks hold %d bytes "
            "(%d blocks)" % (replica_bytes, len(replicas)))
    # the compactor killed -9 mid-fold (SMOLDER_TEST_FAULTS=fold-kill:
    # after the first fold's object, before its meta.json): an unfinished
    # upload that no reader takes, answers unchanged
    c.compactors[0].stop()
    os.environ["SMOLDER_TEST_FAULTS"] = "fold-kill"
    try:
        victim = c._stateless("compactor", 0).start()
    finally:
        del os.environ["SMOLDER_TEST_FAULTS"]
    try:
        victim.request("POST", "/compactor/run", body=b"", timeout=60)
    except OSError:
        pass                      # the process died under the request
    r.eq(victim.wait_self_killed(60), -signal.SIGKILL,
         "the compactor killed itself mid-fold")
    partial = [b for b in bucket_blocks(bucket) if b["object"] and
               b["meta"] is None]
    r.eq(len(partial), 1, "one fold object without its meta.json")
    gateway_sync(r, gw, "after the kill")
    same(r, answers(q, qs), before, "the unfinished fold is not read")
    c.compactors[0] = c._stateless("compactor", 0).start()

    # 3. the fold pass: one block per hour, nothing marked yet.  The
    # unfinished upload goes in the first pass that runs twice the
    # deletion delay after the kill: pass 1 or 2 on a slow machine, so
    # every pass from here on counts it.
    j = run_pass(r, c, "pass 1")
    gone = (j.get("bucket") or {}).get("partial_deleted", 0)
    fj = j.get("fold") or {}
    r.check(fj.get("folded", 0) >= len(HOURS) and fj.get("unresolved") == 0
            and fj.get("failed") == 0, "pass 1 folds every due hour (%d), "
            "none unresolved or failed" % len(HOURS), str(fj))
    r.eq(fj.get("marked"), 0, "pass 1 marks nothing (the gateways load the "
         "fold first)")
    blocks1 = bucket_blocks(bucket)
    folds = [b for b in blocks1 if b["meta"] and is_fold(b)]
    r.check(not any(b["mark"] for b in blocks1), "pass 1: no "
            "deletion-mark.json yet")
    hours = sorted((b["meta"].get("fold") or {}).get("start", -1)
                   for b in folds)
    r.eq(hours, [h * 1000 for h in HOURS], "one fold block per hour")
    inputs = set()
    for b in folds:
        mt = b["meta"]
        f = mt.get("fold") or {}
        src = mt.get("source") or {}
        r.check(src.get("incarnation") == COMPACTOR_INCARNATION and
                f.get("end", 0) - f.get("start", 0) == HOUR * 1000 and
                f.get("start", 1) % (HOUR * 1000) == 0 and
                f.get("start", 0) <= mt.get("min_t", -1) and
                mt.get("max_t", 1 << 62) <= f.get("end", 0) and
                b["object"] and mt.get("block_bytes", 0) > 0,
                "fold block %s: source compactor/ff..ff, one clock hour, "
                "its data inside it" % b["ulid"], json.dumps(mt)[:1500])
        got = {(x.get("incarnation"), x.get("gen"))
               for x in f.get("inputs") or []}
        r.eq({i for i, _ in got}, incs, "fold of %d: inputs from every "
             "source" % f.get("start", 0))
        inputs |= got
    r.eq(inputs, {src_key(b) for b in replicas}, "the folds' inputs are "
         "exactly the replica blocks")
    r.eq(sum(b["meta"].get("nprofiles", 0) for b in folds),
         len(common) + len(batch1) + len(batch2), "the folds hold every "
         "upload once (nprofiles: the union of the replicas')")
    gateway_sync(r, gw, "pass 1")
    same(r, answers(q, qs), before, "after the fold, byte-identical to "
         "before")

    # the next pass marks the inputs and folds nothing again
    j = run_pass(r, c, "pass 2")
    gone += (j.get("bucket") or {}).get("partial_deleted", 0)
    fj = j.get("fold") or {}
    r.check(fj.get("folded") == 0 and fj.get("unresolved") == 0 and
            fj.get("failed") == 0, "pass 2 folds nothing again", str(fj))
    r.eq(fj.get("marked"), len(replicas), "pass 2 marks every input")
    r.eq((j.get("bucket") or {}).get("deleted"), 0, "pass 2 deletes "
         "nothing (the deletion delay, %s, runs from the mark)"
         % DELETION_DELAY)
    blocks2 = bucket_blocks(bucket)
    marks = {b["ulid"]: b["mark"] for b in blocks2 if b["mark"]}
    r.eq(sorted(marks), sorted(b["ulid"] for b in replicas),
         "pass 2: exactly the inputs carry a deletion-mark.json")
    r.check(all((mk or {}).get("reason") == "folded"
                for mk in marks.values()),
            "every mark says reason \"folded\"", str(marks)[:800])
    r.eq(sorted(b["ulid"] for b in blocks2 if b["meta"] and is_fold(b)),
         sorted(b["ulid"] for b in folds), "no second fold block")
    gateway_sync(r, gw, "pass 2")
    same(r, answers(q, qs), before, "inputs marked, byte-identical to "
         "before")

    # after the deletion delay the inputs go, and after twice the delay
    # the unfinished upload the kill left
    deleted, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1.2)
        j = run_pass(r, c, "pass 3+")
        deleted += (j.get("bucket") or {}).get("deleted", 0)
        gone += (j.get("bucket") or {}).get("partial_deleted", 0)
        if deleted >= len(replicas) and gone >= 1:
            break
    r.eq(deleted, len(replicas), "after the deletion delay a pass deletes "
         "every input")
    r.eq(gone, 1, "the unfinished fold upload is deleted")
    blocks3 = bucket_blocks(bucket)
    r.eq(sorted(b["ulid"] for b in blocks3),
         sorted(b["ulid"] for b in folds),
         "the bucket holds the fold blocks only")
    gateway_sync(r, gw, "inputs deleted")
    same(r, answers(q, qs), before, "inputs deleted, byte-identical to "
         "before")

    # 4. late uploads into the folded hour (its bucket T_DIV too): the
    # replicas' new blocks hold only them and the fold only the earlier
    # ones, so no single source holds a bucket's union -- the fold plus
    # one replica does (compactor/fold.h); the hour is folded again under
    # a larger gen that replaces the first fold
    late = []
    for s_ in range(SHARDS):
        late.append(u.make("fold", s_, T_DIV + (s_ + 5) % 10, 30))
        late.append(u.make("fold", s_, MID + 1500 + s_, 30))
    want = ship_late(r, ref, c, applied, qs, late)
    old_fold = [b for b in folds
                if (b["meta"].get("fold") or {}).get("start") == MID * 1000]
    j = run_pass(r, c, "pass after the late uploads")
    fj = j.get("fold") or {}
    r.check(fj.get("folded") == 1 and fj.get("unresolved") == 0 and
            fj.get("failed") == 0, "the late hour is folded again, exactly",
            str(fj))
    blocks4 = bucket_blocks(bucket)
    refold = [b for b in blocks4 if b["meta"] and is_fold(b) and
              b["ulid"] not in {x["ulid"] for x in folds}]
    r.eq(len(refold), 1, "one new fold block")
    if refold and old_fold:
        mt = refold[0]["meta"]
        r.eq((mt.get("fold") or {}).get("start"), MID * 1000,
             "the new fold is of the late hour")
        r.eq(mt["source"].get("replaces"), [old_fold[0]["meta"]["source"]
             ["gen"]], "it replaces the hour's first fold")
        r.check(mt["source"]["gen"] > old_fold[0]["meta"]["source"]["gen"],
                "under a larger gen")
        r.eq(mt.get("nprofiles"), old_fold[0]["meta"].get("nprofiles") +
             len(late), "it holds the first fold's uploads and the late "
             "ones, each once")
    gateway_sync(r, gw, "re-fold")
    same(r, answers(q, qs), want, "after the re-fold, as the single binary")
    late_inputs = [b for b in blocks4 if b["meta"] and not is_fold(b)]
    j = run_pass(r, c, "pass marking the re-fold's inputs")
    fj = j.get("fold") or {}
    r.eq(fj.get("marked"), len(late_inputs) + 1, "the late blocks are "
         "marked folded and the first fold superseded")
    reasons = sorted((b["mark"] or {}).get("reason", "")
                     for b in bucket_blocks(bucket) if b["mark"])
    r.eq(reasons, ["folded"] * len(late_inputs) + ["superseded"],
         "deletion marks: folded, superseded")
    deleted, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline and deleted < len(late_inputs) + 1:
        time.sleep(1.2)
        j = run_pass(r, c, "pass 3+ (late)")
        deleted += (j.get("bucket") or {}).get("deleted", 0)
    r.eq(deleted, len(late_inputs) + 1, "then deleted")
    folds = [b for b in bucket_blocks(bucket) if b["meta"] and is_fold(b)]
    r.eq(len(folds), len(HOURS), "one fold block per hour again")
    gateway_sync(r, gw, "late inputs deleted")
    same(r, answers(q, qs), want, "late inputs deleted, as the single "
         "binary")
    replica_bytes += sum(b["meta"]["block_bytes"] for b in late_inputs)

    # 5. every ingester's disk lost: the bucket alone answers
    for i in range(3):
        wipe_ingester(r, c, i)
        _, p = metrics(c.ingesters[i])
        r.eq(metric_value(p, "smolder_ingester_restored_blocks_total") or 0,
             0, "ingester-%d restored nothing (its blocks were folded and "
             "deleted)" % i)
    gateway_sync(r, gw, "ingesters wiped")
    same(r, answers(q, qs), want, "ingesters wiped: the bucket alone "
         "answers as the single binary")

    _, p = metrics(gw)
    loaded = metric_value(p, "smolder_store_gateway_blocks_loaded_total") or 0
    gets = metric_value(p, "smolder_store_gateway_load_fetches_total") or 0
    data_gets = metric_value(p, "smolder_store_gateway_data_fetches_total") or 0
    hits = metric_value(p, "smolder_store_gateway_data_cache_hits_total") or 0
    cached = metric_value(p, "smolder_store_gateway_data_cache_bytes") or 0
    print("#   gateway: %d blocks loaded with %d GETs; data: %d ranged GETs, "
          "%d page hits, %d bytes cached" % (loaded, gets, data_gets, hits,
                                             cached), flush=True)
    r.check(gets > loaded, "blocks larger than a page were loaded by range "
            "(%d GETs for %d blocks)" % (gets, loaded))
    r.check(data_gets > 0 and cached <= 12 * 1024, "answers read data by "
            "ranged GET within the cache's budget (%d GETs, %d bytes cached)"
            % (data_gets, cached))

    live = live_bytes(bucket_blocks(bucket))
    ratio = live / replica_bytes if replica_bytes else float("inf")
    print("#   bucket bytes: three replicas %d, after the fold %d, ratio "
          "%.3f" % (replica_bytes, live, ratio), flush=True)
    r.check(ratio <= 0.6, "live bucket bytes after the fold are %.2f of "
            "the three replicas' (%d / %d)" % (ratio, live, replica_bytes))
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_compactor_fold", BUDGET_S, body)
