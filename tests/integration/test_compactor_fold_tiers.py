#!/usr/bin/env python3
"""
test_compactor_fold_tiers.py -- the compactor's folds get downsampling
tiers of their own in the bucket, and the replicas' tiers go: 3 ingesters
(RF 3), 1 distributor, 1 querier, 1 store-gateway and 1 compactor on one
filesystem bucket, with the default tiers (1h,1d), next to a single
binary fed the same uploads (the reference).  Every answer below is asked
over a whole past day, so the querier reads it at 1 d (and 1 h) widths.

  1. Uploads in three hours of yesterday (a day that has ended), one
     replica missing a batch.  Flushed and shipped; answers equal the
     reference.
  2. Pass 1: the ingesters build their tiers (shipped at the next flush)
     and the compactor folds the three hours.  Pass 2: the replicas' raw
     blocks are marked "folded" and the fold source gets a tier per width
     whose meta.json lists the folds it covers.  Pass 3: the replicas'
     tiers are marked "folded".  After the deletion delay the bucket holds
     three folds and two fold tiers; answers equal the reference at every
     step.
  3. A late upload into a folded hour: the hour is folded again under a
     larger gen, the fold tiers covering the old fold are no longer read
     (the gateway drops them when it takes the new fold), the next pass
     builds them again over the new fold and marks the old ones
     "superseded".  Answers equal the reference throughout.
  4. Every ingester's disk lost: the bucket alone answers as the
     reference, and the store-gateway reads tier blocks to do it
     (smolder_ingester_tier_blocks_read_total).
The gateway reads data parts by ranged GET in 4 KiB pages through a
12 KiB cache (ingester/remote.h).
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from durability import (Workspace, connect, gateway_sync,  # noqa: E402
                        limit_flags, metrics)
from smolder import metric_value, run_script  # noqa: E402
from test_compactor_fold import (Uploads, answers, bucket_blocks,  # noqa: E402
                                 flush_all, fold_rig, hourly_uploads,
                                 ingest_all, is_fold, miss_batch, run_pass,
                                 same, ship_late, wipe_ingester)

BUDGET_S = 240
HOUR, DAY = 3600, 86400
D0 = (int(time.time()) // DAY) * DAY - DAY       # yesterday: ended
HOURS = [D0 + 2 * HOUR, D0 + 9 * HOUR, D0 + 17 * HOUR]
SHARDS = 4
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0",
          "-validation.max-profile-stacktrace-samples=0"] + limit_flags()


def day_uploads(u):
    return hourly_uploads(u, "tier", HOURS, SHARDS, 3, 120, 700, 50)


def queries(ref):
    """Questions over the whole day (1 d), most of it (1 h) and per
    series."""
    rng = {"from": str(D0), "until": str(D0 + DAY)}
    resp = connect(ref, "ProfileTypes", {"start": str(D0 * 1000),
                                         "end": str((D0 + DAY) * 1000)})
    types = [t["ID"] for t in (resp.json().get("profileTypes") or [])]
    q = [("render day", "GET", "/render",
          dict(rng, query="tier.cpu{}"), None),
         ("render day collapsed", "GET", "/render",
          dict(rng, query="tier.cpu{}", format="collapsed"), None),
         ("render 1h..23h", "GET", "/render",
          {"from": str(D0 + HOUR), "until": str(D0 + 23 * HOUR),
           "query": "tier.cpu{}", "format": "collapsed"}, None)]
    for s in range(SHARDS):
        q.append(("render day shard s%d" % s, "GET", "/render",
                  dict(rng, query='tier.cpu{shard="s%d"}' % s), None))
    sel = '{service_name="tier"}'
    for t in types:
        q.append(("SelectMergeStacktraces day %s" % t, "POST",
                  "SelectMergeStacktraces", None,
                  {"profile_typeID": t, "label_selector": sel,
                   "start": str(D0 * 1000), "end": str((D0 + DAY) * 1000)}))
        for step in (HOUR, DAY):
            q.append(("SelectSeries day %s step %d" % (t, step), "POST",
                      "SelectSeries", None,
                      {"profile_typeID": t, "label_selector": sel,
                       "start": str(D0 * 1000),
                       "end": str((D0 + DAY) * 1000), "step": step,
                       "group_by": ["shard"]}))
    return q


def kinds(blocks):
    """Counts of the bucket's complete, unmarked blocks by kind."""
    out = {"fold": 0, "fold tier": 0, "replica": 0, "replica tier": 0}
    for b in blocks:
        m = b["meta"]
        if m is None or b["mark"]:
            continue
        tier = m.get("tier_ms", 0) > 0
        out[("fold" if is_fold(b) else "replica") +
            (" tier" if tier else "")] += 1
    return out


def body(r):
    ws = Workspace("compactor-fold-tiers")
    r.at_end(lambda: ws.cleanup(r))
    u = Uploads()
    common = day_uploads(u)
    batch = [u.make("tier", s, HOURS[1] + 300 + s, 40)
             for s in range(SHARDS)]

    # 1. uploads, one replica missing a batch; flushed and shipped
    ref, c, bucket, applied = fold_rig(r, ws, COMMON, common + batch, common)
    q, gw = c.queriers[0], c.gateways[0]
    miss_batch(r, c, applied, 0, batch)
    applied.wait(r, "after the batch")
    flush_all(r, c, "shipped")
    gateway_sync(r, gw, "shipped")
    qs = queries(ref)
    want = answers(ref, qs)
    r.check(all(st == 200 for st, _ in want.values()),
            "the single binary answers every question")
    same(r, answers(q, qs), want, "shipped: as the single binary")

    # 2. folds, fold tiers, the replicas' blocks and tiers marked
    j = run_pass(r, c, "pass 1")
    fj = j.get("fold") or {}
    r.check(j.get("tier_jobs_built", 0) >= 3, "pass 1: the ingesters "
            "built their tiers of yesterday", str(j))
    r.check(fj.get("folded") == len(HOURS) and fj.get("unresolved") == 0
            and fj.get("failed") == 0, "pass 1 folds the three hours",
            str(fj))
    flush_all(r, c, "the ingesters' tiers")
    gateway_sync(r, gw, "pass 1")
    k = kinds(bucket_blocks(bucket))
    r.eq((k["fold"], k["fold tier"]), (len(HOURS), 0), "after pass 1: "
         "three folds, no fold tier yet (%s)" % k)
    r.check(k["replica tier"] >= 3, "the replicas' tiers are in the "
            "bucket (%s)" % k)
    same(r, answers(q, qs), want, "pass 1: as the single binary")

    j = run_pass(r, c, "pass 2")
    fj = j.get("fold") or {}
    r.eq(fj.get("tiers"), 2, "pass 2 builds the fold source's 1h and 1d "
         "tiers")
    blocks = bucket_blocks(bucket)
    folds = sorted(b["meta"]["source"]["gen"] for b in blocks
                   if b["meta"] and is_fold(b) and not b["mark"] and
                   b["meta"].get("tier_ms", 0) == 0)
    ftiers = [b for b in blocks if b["meta"] and is_fold(b) and
              b["meta"].get("tier_ms", 0) > 0]
    for b in ftiers:
        m = b["meta"]
        f = m.get("fold") or {}
        r.check(f.get("start") == D0 * 1000 and
                f.get("end") == (D0 + DAY) * 1000 and
                sorted(f.get("covers") or []) == folds and
                m.get("cover_gen") == max(folds) and
                m.get("cover_start") == D0 * 1000 and
                m.get("tier_ms") in (HOUR * 1000, DAY * 1000),
                "fold tier %s covers yesterday's three folds"
                % b["ulid"], str(m)[:800])
    gateway_sync(r, gw, "pass 2")
    same(r, answers(q, qs), want, "pass 2: as the single binary")

    j = run_pass(r, c, "pass 3")
    marks = [(b["mark"] or {}).get("reason") for b in bucket_blocks(bucket)
             if b["mark"] and b["meta"] and not is_fold(b) and
             b["meta"].get("tier_ms", 0) > 0]
    r.check(len(marks) >= 3 and set(marks) == {"folded"}, "pass 3 marks "
            "the replicas' tiers \"folded\" (%s)" % marks)
    gateway_sync(r, gw, "pass 3")
    same(r, answers(q, qs), want, "pass 3: as the single binary")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1.2)
        run_pass(r, c, "deletions")
        k = kinds(bucket_blocks(bucket))
        if k["replica"] == 0 and k["replica tier"] == 0 and \
                len(bucket_blocks(bucket)) == len(HOURS) + 2:
            break
    r.eq(kinds(bucket_blocks(bucket)), {"fold": len(HOURS), "fold tier": 2,
                                        "replica": 0, "replica tier": 0},
         "the bucket holds three folds and two fold tiers")
    gateway_sync(r, gw, "deleted")
    same(r, answers(q, qs), want, "the replicas' blocks deleted: as the "
         "single binary")

    # 3. a late upload into a folded hour
    late = [u.make("tier", s, HOURS[1] + 900 + s, 30) for s in range(SHARDS)]
    want = ship_late(r, ref, c, applied, qs, late)
    j = run_pass(r, c, "re-fold")
    fj = j.get("fold") or {}
    r.eq((fj.get("folded"), fj.get("unresolved"), fj.get("failed")),
         (1, 0, 0), "the late hour is folded again")
    r.eq(fj.get("tiers"), 0, "no fold tier yet over the new fold (this "
         "pass's scan did not see it)")
    s = gateway_sync(r, gw, "re-fold")
    r.check(s.get("dropped", 0) >= 3, "the gateway dropped the old fold "
            "and both fold tiers with it (%s)" % s)
    same(r, answers(q, qs), want, "re-folded, the stale fold tiers "
         "dropped: as the single binary")
    j = run_pass(r, c, "fold tiers again")
    fj = j.get("fold") or {}
    r.eq(fj.get("tiers"), 2, "the fold tiers are built again over the new "
         "fold")
    reasons = sorted((b["mark"] or {}).get("reason", "")
                     for b in bucket_blocks(bucket) if b["mark"])
    r.eq(reasons.count("superseded"), 3, "the old fold and its two tiers "
         "are marked superseded (%s)" % reasons)
    gateway_sync(r, gw, "fold tiers again")
    same(r, answers(q, qs), want, "new fold tiers: as the single binary")

    # 4. the bucket alone
    for i in range(3):
        wipe_ingester(r, c, i)
    gateway_sync(r, gw, "ingesters wiped")
    _, p = metrics(gw)
    t0 = metric_value(p, "smolder_ingester_tier_blocks_read_total") or 0
    same(r, answers(q, qs), want, "ingesters wiped: the bucket alone "
         "answers as the single binary")
    _, p = metrics(gw)
    t1 = metric_value(p, "smolder_ingester_tier_blocks_read_total") or 0
    r.check(t1 > t0, "the store-gateway read fold tiers to answer "
            "(%s -> %s)" % (t0, t1))
    blocks = bucket_blocks(bucket)
    raw = sum(b["meta"]["block_bytes"] for b in blocks if b["meta"] and
              not b["mark"] and is_fold(b) and
              b["meta"].get("tier_ms", 0) == 0)
    tiers = sum(b["meta"]["block_bytes"] for b in blocks if b["meta"] and
                not b["mark"] and is_fold(b) and
                b["meta"].get("tier_ms", 0) > 0)
    print("#   fold bytes %d, fold tier bytes %d (%.2f of the folds; sparse "
          "test data: bench B13 measures the ratio)" % (
              raw, tiers, tiers / raw if raw else 0), flush=True)
    c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_compactor_fold_tiers", BUDGET_S, body)
