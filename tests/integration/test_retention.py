#!/usr/bin/env python3
"""
test_retention.py -- the compactor's retention (-target=compactor and in
the single binary).

With -compactor.blocks-retention-period=1h, data placed 3 h ago is gone
after a pass (POST /compactor/run) and data from 10 minutes ago stays,
whether the old data was in a block (cut by /ingester/flush) or still in
a head; the floor survives an ingester restart; a cluster's compactor
process reaches every ingester; with retention off the pass is a no-op.

Per tenant (multitenancy on, X-Scope-OrgID): a runtime config gives
tenant `keep` compactor_blocks_retention_period 0 (keep forever) and
`longM` 5h (a name ending in M, as a block meta key does), the default
staying 1h for `short`.  After a pass `short` loses its 3 h old data from
/render and from all-time label values (Connect LabelValues, start = end
= 0), its old-only block is retired (smolder_ingester_blocks drops by
one, blocks_retired = 1), while `keep` and `longM` still serve theirs,
across a restart, and smolder-admin verify passes over the tenant floor
keys.  The same with a cluster's compactor process holding the runtime
config: short's old block goes on every ingester, keep's stays.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster  # noqa: E402
from durability import (DataServer, Workspace, admin_listener,  # noqa
                        admin_verify, flush, limit_flags, metric_value,
                        metrics, operate)
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
    r = operate(s, "POST", "/compactor/run")
    try:
        return r.status, r.json()
    except ValueError:
        return r.status, None


OVERRIDES = """overrides:
  keep:
    compactor_blocks_retention_period: 0
  longM:
    compactor_blocks_retention_period: 5h
  short:
    max_query_length: 0
"""
TENANTS = ("short", "keep", "longM")


def t_push(s, tenant, name, t, stack):
    return s.request("POST", "/ingest", {
        "name": name, "from": str(t), "until": str(t + 10)},
        ("%s 1\n" % stack).encode(), {"X-Scope-OrgID": tenant}).status


def t_stacks(s, tenant):
    r = s.request("GET", "/render", {
        "query": "ret.cpu{}", "from": str(NOW - 4 * 3600),
        "until": str(NOW + 60), "format": "collapsed"},
        headers={"X-Scope-OrgID": tenant})
    if r.status != 200:
        return None
    return sorted(ln.split(" ")[0] for ln in r.text().split("\n") if ln)


def t_services(s, tenant):
    """All-time service_name values (Connect LabelValues, start = end =
    0)."""
    r = s.request("POST", "/querier.v1.QuerierService/LabelValues",
                  body=json.dumps({"name": "service_name", "start": 0,
                                   "end": 0}).encode(),
                  headers={"X-Scope-OrgID": tenant,
                           "Content-Type": "application/json"})
    if r.status != 200:
        return None
    return sorted(r.json().get("names") or [])


def tenants_part(r, ws):
    path = os.path.join(ws.data_dir("tenants-cfg"), "overrides.yaml")
    with open(path, "w") as f:
        f.write(OVERRIDES)
    data = ws.data_dir("tenants")
    flags = COMMON + ["-auth.multitenancy-enabled=true",
                      "-runtime-config.file=%s" % path,
                      "-compactor.blocks-retention-period=1h"]
    everything = ["new;block", "new;head", "old;block", "old;head"]
    s = DataServer(data, ws.log_dir("tenants"), name="tenants",
                   extra_flags=admin_listener(flags)).start()
    try:
        # Per tenant: a block of old data only, a block of new data, and
        # old and new data in the head; old data under a second service.
        r.eq([t_push(s, t, n, OLD, "old;block") for t in TENANTS
              for n in ("ret.cpu", "retold.cpu")], [200] * 6,
             "tenants: old uploads acknowledged")
        r.check(flush(s).status == 200, "tenants: old data cut into blocks")
        r.eq([t_push(s, t, "ret.cpu", NEW, "new;block") for t in TENANTS],
             [200] * 3, "tenants: new uploads acknowledged")
        r.check(flush(s).status == 200, "tenants: new data cut into blocks")
        r.eq([t_push(s, t, "ret.cpu", x, st) for t in TENANTS
              for x, st in ((OLD + 60, "old;head"), (NEW + 60, "new;head"))],
             [200] * 6, "tenants: more uploads, in the heads")
        r.eq([t_stacks(s, t) for t in TENANTS], [everything] * 3,
             "tenants: everything is served before the pass")
        r.eq([t_services(s, t) for t in TENANTS], [["ret", "retold"]] * 3,
             "tenants: both services listed before the pass")
        _, m = metrics(s)
        blocks0 = metric_value(m, "smolder_ingester_blocks")
        st, j = run(s)
        r.check(st == 200 and j and j["ingesters"] == 1 and
                j["tenant_overrides"] == 2 and j["blocks_retired"] == 1 and
                j["failed"] == 0,
                "tenants: the pass sends both overrides and retires only "
                "short's old block", "%s %s" % (st, j))
        r.eq(t_stacks(s, "short"), ["new;block", "new;head"],
             "tenants: short (default 1h) no longer serves its old data")
        r.eq(t_services(s, "short"), ["ret"],
             "tenants: short's old-only service is gone from all-time "
             "label values")
        r.eq([t_stacks(s, t) for t in ("keep", "longM")], [everything] * 2,
             "tenants: keep (0) and long (5h) still serve their old data")
        r.eq([t_services(s, t) for t in ("keep", "longM")],
             [["ret", "retold"]] * 2,
             "tenants: keep and long still list their old service")
        _, m = metrics(s)
        blocks1 = metric_value(m, "smolder_ingester_blocks")
        r.check(blocks0 is not None and blocks1 == blocks0 - 1,
                "tenants: smolder_ingester_blocks drops by short's old "
                "block", "%s -> %s" % (blocks0, blocks1))
    finally:
        s.check_stopped(r)
    # Restart without the retention flag, with overrides of other limits
    # only: every floor holds, and a pass has no retention to do.
    other = os.path.join(ws.data_dir("tenants-cfg"), "other.yaml")
    with open(other, "w") as f:
        f.write("overrides:\n  short:\n    max_query_length: 0\n")
    s = DataServer(data, ws.log_dir("tenants-2"), name="tenants-2",
                   extra_flags=admin_listener(COMMON + [
                       "-auth.multitenancy-enabled=true",
                       "-runtime-config.file=%s" % other])).start()
    try:
        r.eq(t_stacks(s, "short"), ["new;block", "new;head"],
             "tenants: short's floor holds after a restart")
        r.eq([t_stacks(s, t) for t in ("keep", "longM")], [everything] * 2,
             "tenants: keep and long keep their old data after a restart")
        st, j = run(s)
        r.check(st == 200 and j and j.get("retention") == "disabled",
                "tenants: overrides without a retention period and no "
                "flag: the pass has no retention to do", "%s %s" % (st, j))
    finally:
        s.check_stopped(r)
    admin_verify(r, data, 0, "tenants: smolder-admin verify passes over "
                 "the tenant floor keys")


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

    tenants_part(r, ws)

    # A cluster with its own compactor process: only old blocks.
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, extra=COMMON, name="ret",
                compactor_extra=["-compactor.blocks-retention-period=1h"])
    try:
        c.start()
        d = c.distributors[0]
        r.eq([push(d, OLD, "old;a"), push(d, OLD + 30, "old;b")],
             [200, 200], "cluster: old uploads acknowledged")
        r.check(c.wait_writes(2), "cluster: every replica applied both")
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

    # A cluster whose compactor process alone has the overrides.
    path = os.path.join(ws.data_dir("tenants-cfg"), "overrides.yaml")
    c = Cluster(ws, ingesters=3, distributors=1, queriers=1, rf=3,
                compactors=1, name="rett", admin_listeners=True,
                extra=COMMON + ["-auth.multitenancy-enabled=true"],
                compactor_extra=["-compactor.blocks-retention-period=1h",
                                 "-runtime-config.file=%s" % path])
    try:
        c.start()
        d, q = c.distributors[0], c.queriers[0]
        r.eq([t_push(d, t, "ret.cpu", OLD, "old;block")
              for t in ("short", "keep")], [200, 200],
             "cluster tenants: old uploads acknowledged")
        r.check(c.wait_writes(2), "cluster tenants: every replica applied "
                "both")
        r.check(all(flush(i).status == 200 for i in c.ingesters),
                "cluster tenants: every ingester cuts old-only blocks")
        r.eq([t_push(d, t, "ret.cpu", NEW, "new;block")
              for t in ("short", "keep")], [200, 200],
             "cluster tenants: new uploads acknowledged")
        st, j = run(c.compactors[0])
        r.check(st == 200 and j and j["ingesters"] == 3 and
                j["tenant_overrides"] == 2 and j["blocks_retired"] == 3,
                "cluster tenants: the compactor retires short's old block "
                "on every ingester, not keep's", "%s %s" % (st, j))
        r.eq(t_stacks(q, "short"), ["new;block"],
             "cluster tenants: short serves only data within 1h")
        r.eq(t_stacks(q, "keep"), ["new;block", "old;block"],
             "cluster tenants: keep (0) still serves its old data")
    finally:
        c.check_stopped(r)


if __name__ == "__main__":
    run_script("test_retention", 240, main)
