#!/usr/bin/env python3
"""
test_retention.py -- the compactor's retention (-target=compactor and in
the single binary).

With -compactor.blocks-retention-period=1h, data placed 3 h ago is gone
after a pass (POST /compactor/run) and data from 10 minutes ago stays,
whether the old data was in a block (cut by /ingester/flush) or still in
a head; the floor survives an ingester restart; a cluster's compactor
process reaches every ingester; with retention off the pass is a no-op.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, flush, limit_flags,  # noqa
                        metric_value, metrics)
from smolder import run_script  # noqa: E402

NOW = int(time.time())
OLD, NEW = NOW - 3 * 3600, NOW - 600
COMMON = ["-validation.reject-older-than=0",
          "-validation.reject-newer-than=0"] + limit_flags()


def push(s, t, stack):
    return s.ingest({"name": "ret.cpu", "from": str(t), "until": str(t + 10)},
                    ("%s 1\n" % stack).encode()).status


def stacks(q):
    r = q.render("ret.cpu{}", frm=NOW - 4 * 3600, until=NOW + 60,
                 fmt="collapsed")
    if r.status != 200:
        return None
    return sorted(ln.split(" ")[0] for ln in r.text().split("\n") if ln)


def run(s):
    r = s.request("POST", "/compactor/run", body=b"")
    try:
        return r.status, r.json()
    except ValueError:
        return r.status, None


def main(r):
    ws = Workspace("retention")
    r.at_end(lambda: ws.cleanup(r))

    # Single binary: a block and a head both older than the period.
    data = ws.data_dir("single")
    flags = COMMON + ["-compactor.blocks-retention-period=1h"]
    s = DataServer(data, ws.log_dir("single"), name="single",
                   extra_flags=flags).start()
    try:
        r.eq([push(s, OLD, "old;block"), push(s, NEW, "new;block")],
             [200, 200], "uploads acknowledged")
        r.check(flush(s).status == 200, "cut into blocks")
        r.eq([push(s, OLD + 60, "old;head"), push(s, NEW + 60, "new;head")],
             [200, 200], "more uploads, in the head")
        r.eq(stacks(s), ["new;block", "new;head", "old;block", "old;head"],
             "everything is served before the pass")
        st, j = run(s)
        r.check(st == 200 and j and j["ingesters"] == 1 and
                j["blocks_retired"] == 0 and j["failed"] == 0,
                "POST /compactor/run reaches the ingester (the block "
                "holds new data too, so it stays)", "%s %s" % (st, j))
        r.eq(stacks(s), ["new;block", "new;head"],
             "data older than the retention period is no longer served")
        _, m = metrics(s)
        r.check((metric_value(m, "smolder_compactor_runs_total",
                              status="ok") or 0) >= 1,
                "smolder_compactor_runs_total{status=ok} counts the pass")
    finally:
        s.check_stopped(r)
    s = DataServer(data, ws.log_dir("single-2"), name="single-2",
                   extra_flags=COMMON).start()
    try:
        r.eq(stacks(s), ["new;block", "new;head"],
             "the retention floor holds after a restart (retention now "
             "off)")
        st, j = run(s)
        r.check(st == 200 and j and j.get("retention") == "disabled",
                "with retention off a pass is a no-op", "%s %s" % (st, j))
    finally:
        s.check_stopped(r)

    # A cluster with its own compactor process: only old blocks.
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, extra=COMMON, name="ret",
                compactor_extra=["-compactor.blocks-retention-period=1h"])
    try:
        c.start()
        d = c.distributors[0]
        r.eq([push(d, OLD, "old;a"), push(d, OLD + 30, "old;b")],
             [200, 200], "cluster: old uploads acknowledged")
        r.check(all(flush(i).status == 200 for i in c.ingesters),
                "cluster: every ingester cuts a block of old data only")
        r.eq(push(d, NEW, "new;a"), 200, "cluster: a new upload")
        st, j = run(c.compactors[0])
        r.check(st == 200 and j and j["ingesters"] == 3 and
                j["blocks_retired"] == 3,
                "the compactor process retires the old block on every "
                "ingester", "%s %s" % (st, j))
        r.eq(stacks(c.queriers[0]), ["new;a"],
             "cluster: only data within the period is served")
    finally:
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_retention", 240, main)
