#!/usr/bin/env python3
"""
test_corruption.py -- a damaged block part is detected, reported as
data_loss, counted, and does not affect queries that do not touch it.

Setup (server with -validation.reject-older-than=0, fixed windows):
  - W1: app cor (alloc_objects folded, series env=a|b|c, several buckets),
    POST /ingester/flush -> block 1;
  - W2: app cor (env=a) and cor2, flush -> block 2;
  - capture the baseline answers, SIGTERM; smolder-admin blocks must list
    two blocks, one inside W1 and one inside W2; smolder-admin verify exits
    0; a control restart on a copy gives the same answers.

Then for each (part, mode) in symbols/flip, tree/flip, index/flip,
data/flip, tree/truncate, data/truncate with -series=2 and meta/flip (the
admin tool's fifth part), on a fresh copy of the pristine data dir:
  - smolder-admin corrupt -tenant=anonymous -block=<block 1> -part=P
    -mode=M exits 0; smolder-admin verify exits 1 and names the block;
  - the server starts (/ready 200) on the damaged copy;
  - every query over W2 only answers exactly as before (status and bytes);
  - every query over W1 answers either 500 with JSON code "data_loss" and
    a message containing "corrupt" and the block id, or 200 byte-identical
    to the baseline (a query that does not need the damaged part) --
    anything else (another status, a different 200 answer, a dropped
    connection) fails: no crash, no silently wrong numbers;
  - for data (one series' data), exactly one of the three per-series
    queries over W1 fails and the other two are unaffected;
  - for symbols, tree and data, the whole-app flamegraph queries over W1
    (render JSON, collapsed, SelectMergeStacktraces, and a range covering
    W1 and W2) must be data_loss; for index and meta, whatever the server
    does must still be one of the two outcomes above (an empty or partial
    200 over W1 is silent data loss and fails);
  - when a query reported a corruption (always for symbols, tree, data,
    meta), /metrics has
    smolder_ingester_corruptions_total > 0, also for the label part=P;
  - /ready is still 200 and SIGTERM gives exit 0 with no sanitizer report.
Finally smolder-admin verify is run again on the pristine copy (exit 0).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (DataServer, Workspace, admin,  # noqa: E402
                        admin_verify, copy_tree, flush, have_admin,
                        limit_flags, metric_value, metrics, names_block,
                        parse_blocks, run_query, start_or_fail)
from smolder import run_script, ServerError  # noqa: E402

BUDGET_S = 175
T0 = 1700000000
W1 = (T0, T0 + 60)
W2 = (T0 + 7200, T0 + 7260)
TYPE = "memory:alloc_objects:count::"
RUNS = [("symbols", "flip", None), ("tree", "flip", None),
        ("index", "flip", None), ("data", "flip", None),
        ("tree", "truncate", None), ("data", "truncate", 2),
        ("meta", "flip", None)]
# Parts whose damage the server may handle another way (documented per
# part by the server, or none): their W1 queries must still be data_loss
# or the exact baseline answer, never a different 200.
LENIENT = ("index", "meta")

W1_DATA = [
    ("cor.alloc_objects{env=a}", 0, b"main;a;x 5\nmain;a;y 3\nmain 1\n"),
    ("cor.alloc_objects{env=b}", 10, b"main;b;x 7\nother;b 2\n"),
    ("cor.alloc_objects{env=c}", 20, b"main;c 11\nmain;a;x 4\n"),
    ("cor.alloc_objects{env=a}", 40, b"main;a;z 6\n"),
]
W2_DATA = [
    ("cor.alloc_objects{env=a}", 5, b"main;a;x 50\nlater;w2 8\n"),
    ("cor2.alloc_objects{env=d}", 15, b"p;q 13\np;r 17\n"),
]
W1_STACKS = {"main;a;x": 9, "main;a;y": 3, "main": 1, "main;b;x": 7,
             "other;b": 2, "main;c": 11, "main;a;z": 6}


def ms(t):
    return t * 1000


def rng(w):
    return {"from": str(w[0] - 30), "until": str(w[1] + 30)}


def c_rng(w):
    return {"start": ms(w[0] - 30), "end": ms(w[1] + 30)}


def queries():
    """[(label, window, must_fail, kind, args)]; window W1, W2 or BOTH;
    must_fail: data_loss required for symbols/tree/data damage."""
    q = []
    cor = TYPE + '{service_name="cor"}'
    for wname, w in (("W1", W1), ("W2", W2)):
        mf = wname == "W1"
        q += [
            ("render cor " + wname, wname, mf, "get",
             ("/render", dict(rng(w), query=cor))),
            ("render cor collapsed " + wname, wname, mf, "get",
             ("/render", dict(rng(w), query=cor, format="collapsed"))),
            ("render cor maxNodes=2 " + wname, wname, False, "get",
             ("/render", dict(rng(w), query=cor, maxNodes="2"))),
            ("SelectMergeStacktraces cor " + wname, wname, mf, "connect",
             ("SelectMergeStacktraces",
              dict(c_rng(w), profileTypeID=TYPE,
                   labelSelector='{service_name="cor"}'))),
            ("SelectSeries cor " + wname, wname, False, "connect",
             ("SelectSeries", dict(c_rng(w), profileTypeID=TYPE,
                                   labelSelector='{service_name="cor"}',
                                   step=10, groupBy=["env"]))),
            ("render cor env=a " + wname, wname, False, "get",
             ("/render", dict(rng(w), query='cor.alloc_objects{env="a"}'))),
            ("/labels " + wname, wname, False, "get", ("/labels", rng(w))),
            ("/label-values env " + wname, wname, False, "get",
             ("/label-values", dict(rng(w), label="env"))),
            ("/label-values __name__ " + wname, wname, False, "get",
             ("/label-values", dict(rng(w), label="__name__"))),
            ("ProfileTypes " + wname, wname, False, "connect",
             ("ProfileTypes", c_rng(w))),
            ("LabelValues env " + wname, wname, False, "connect",
             ("LabelValues", dict(c_rng(w), name="env"))),
            ("Series cor " + wname, wname, False, "connect",
             ("Series", dict(c_rng(w), matchers=['{service_name="cor"}']))),
        ]
    for e in ("b", "c"):
        q.append(("render cor env=%s W1" % e, "W1", False, "get",
                  ("/render", dict(rng(W1),
                                   query='cor.alloc_objects{env="%s"}' % e))))
    q.append(("render cor2 W2", "W2", False, "get",
              ("/render", dict(rng(W2), query=TYPE +
                               '{service_name="cor2"}'))))
    both = {"from": str(W1[0] - 30), "until": str(W2[1] + 30)}
    q.append(("render cor W1+W2", "BOTH", True, "get",
              ("/render", dict(both, query=cor))))
    return q


def capture(srv):
    return {label: run_query(srv, kind, args)
            for label, _, _, kind, args in queries()}


def ingest(r, srv, items, w, what):
    for name, off, body in items:
        t = str(w[0] + off)
        resp = srv.ingest({"name": name, "from": t, "until": t}, body)
        r.check(resp.status == 200, "%s: ingest %s" % (what, name),
                resp.describe())


def is_data_loss(resp, block_id):
    """(True, "") for a proper data_loss answer, else (False, why)."""
    if resp.status != 500:
        return False, "HTTP %d" % resp.status
    try:
        j = resp.json()
    except (ValueError, UnicodeDecodeError):
        return False, "500 without a JSON body: %s" % resp.describe()
    if not isinstance(j, dict) or j.get("code") != "data_loss":
        return False, "500 but code %r" % (j.get("code") if isinstance(
            j, dict) else j)
    msg = str(j.get("message", ""))
    if "corrupt" not in msg.lower():
        return False, "message does not say corrupt: %r" % msg
    if not names_block(msg, block_id):
        return False, "message does not name block %s: %r" % (block_id, msg)
    return True, ""


def main(r):
    ws = Workspace("corrupt")
    r.at_end(lambda: ws.cleanup(r))
    pristine = ws.data_dir("pristine")
    flags = limit_flags() + ["-validation.reject-older-than=0"]
    srv = None
    try:
        if not have_admin():
            r.fail("smolder-admin exists (SMOLDER_ADMIN)",
                   "no smolder-admin next to the binary")
            return
        srv = start_or_fail(r, pristine, ws.log_dir("setup"), flags, "smolder(setup)")
        if srv is None:
            return
        ingest(r, srv, W1_DATA, W1, "W1")
        resp = flush(srv)
        r.check(resp.status == 200, "flush W1 -> 200", resp.describe())
        ingest(r, srv, W2_DATA, W2, "W2")
        resp = flush(srv)
        r.check(resp.status == 200, "flush W2 -> 200", resp.describe())
        base = capture(srv)
        resp = base["render cor collapsed W1"]
        got = (oracle.parse_collapsed(resp.text()) if resp.status == 200
               else None)
        r.eq(got, W1_STACKS, "baseline: cor in W1 collapsed")
        bad = [k for k, v in base.items() if v.status != 200]
        r.check(not bad, "baseline: every query answers 200",
                "\n".join("%s: %s" % (k, base[k].describe()) for k in bad))
        srv.check_stopped(r, "setup server exits 0 on SIGTERM")
        srv = None

        a = admin("blocks", "-data.dir=%s" % pristine)
        r.check(a.rc == 0, "smolder-admin blocks exits 0", a.describe())
        blocks, badl = parse_blocks(a.out)
        r.check(not badl, "blocks lines parse", "\n".join(badl))
        b1 = [b for b in blocks if ms(W1[0] - 10) <= b["min"] and
              b["max"] <= ms(W1[1] + 10)]
        b2 = [b for b in blocks if ms(W2[0] - 10) <= b["min"] and
              b["max"] <= ms(W2[1] + 10)]
        r.check(len(blocks) == 2 and len(b1) == 1 and len(b2) == 1,
                "two blocks: one inside W1, one inside W2", a.out)
        if not b1:
            return
        blk = b1[0]
        r.eq(blk["series"], 3, "block 1 has the 3 W1 series")
        admin_verify(r, pristine, 0,
                     "smolder-admin verify exits 0 on pristine data")

        # control: a restart on an untouched copy answers the same
        ctl = ws.path("control")
        copy_tree(pristine, ctl)
        try:
            srv = DataServer(ctl, ws.log_dir("control"), extra_flags=flags,
                             name="smolder(control)").start()
            now = capture(srv)
            diff = [k for k in base if (now[k].status, now[k].body) !=
                    (base[k].status, base[k].body)]
            r.check(not diff, "control restart: every answer identical",
                    "\n".join("%s:\n  before %s\n  now    %s" % (
                        k, base[k].describe(), now[k].describe())
                        for k in diff[:8]))
            srv.check_stopped(r, "control server exits 0 on SIGTERM")
        except ServerError as e:
            r.fail("control server starts", str(e))
        srv = None

        for part, mode, series in RUNS:
            what = "%s/%s" % (part, mode)
            extra = []
            if series is not None:
                what += "/series=%d" % series
                extra = ["-series=%d" % series]
            d = ws.path("damaged-%s-%s-%s" % (part, mode, series))
            copy_tree(pristine, d)
            a = admin("corrupt", "-data.dir=%s" % d, "-tenant=anonymous",
                      "-block=%s" % blk["block"], "-part=%s" % part,
                      "-mode=%s" % mode, *extra)
            if not r.check(a.rc == 0, "%s: smolder-admin corrupt exits 0" %
                           what, a.describe()):
                continue
            a = admin_verify(r, d, 1,
                             "%s: smolder-admin verify exits 1" % what)
            badl = [ln for ln in (a.out + "\n" + a.err).split("\n")
                    if names_block(ln, blk["block"]) and
                    "checked" not in ln]
            r.check(badl, "%s: verify reports a problem naming block %s" % (
                what, blk["block"]), a.describe())
            try:
                srv = DataServer(d, ws.log_dir(what), extra_flags=flags,
                                 name="smolder(%s)" % what).start()
            except ServerError as e:
                r.fail("%s: server starts on the damaged data" % what, str(e))
                srv = None
                continue
            r.ok("%s: server starts on the damaged data" % what)
            lost = detected = 0
            per_env_lost = []
            for label, win, must_fail, kind, args in queries():
                resp = run_query(srv, kind, args)
                b = base[label]
                same = (resp.status, resp.body) == (b.status, b.body)
                if win == "W2":
                    r.check(same, "%s: %s answers as before" % (what, label),
                            "before %s\nnow    %s" % (b.describe(),
                                                      resp.describe()))
                    continue
                dl, why = is_data_loss(resp, blk["block"])
                lost += dl
                detected += (resp.status == 500 and
                             "corrupt" in resp.text().lower())
                if label.startswith("render cor env=") and resp.status != 200:
                    per_env_lost.append(label)
                if must_fail and part not in LENIENT:
                    r.check(dl, "%s: %s -> 500 data_loss naming the block" %
                            (what, label), "%s\n%s" % (why, resp.describe()))
                else:
                    r.check(dl or same, "%s: %s -> data_loss or the exact "
                            "baseline answer" % (what, label),
                            "%s\nbaseline %s\nnow      %s" % (
                                why, b.describe(), resp.describe()))
                if resp.status == 0:
                    break       # the server is gone; reported below
            print("# %s: %d quer%s over W1 reported data_loss, %d a "
                  "corruption" % (what, lost, "y" if lost == 1 else "ies",
                                  detected), flush=True)
            if part == "data":
                # one series' data is damaged: exactly one of the three
                # per-series queries needs it, the other two are unaffected
                r.check(len(per_env_lost) == 1, "%s: exactly one of the "
                        "per-series queries over W1 fails" % what,
                        repr(per_env_lost))
            _, m = metrics(srv)
            tot = metric_value(m, "smolder_ingester_corruptions_total")
            mine = metric_value(m, "smolder_ingester_corruptions_total",
                                part=part)
            if detected or part not in LENIENT or part == "meta":
                r.check(tot is not None and tot > 0, "%s: smolder_ingester_"
                        "corruptions_total > 0" % what, repr(m and m.get(
                            "smolder_ingester_corruptions_total")))
                r.check(mine is not None and mine > 0, "%s: smolder_ingester"
                        "_corruptions_total{part=\"%s\"} > 0" % (what, part),
                        repr(m and m.get(
                            "smolder_ingester_corruptions_total")))
            r.check(srv.alive() and srv.ready(), "%s: server still up and "
                    "ready" % what)
            srv.check_stopped(r, "%s: server exits 0 on SIGTERM" % what)
            srv = None
            admin_verify(r, d, 1, "%s: smolder-admin verify still exits 1 "
                         "after the server ran" % what)
        admin_verify(r, pristine, 0, "smolder-admin verify exits 0 on the "
                     "pristine copy at the end")
    finally:
        if srv is not None:
            srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_corruption", BUDGET_S, main)
