#!/usr/bin/env python3
"""
test_selectors.py -- label matchers over data in blocks and in the head.

Series of one app (sel.alloc_objects, unscaled folded) with various labels:
env, region, both, neither, region values "ab" and "xaby" (anchoring), a
dotted tag key (k8s.pod), and an empty-looking case (no labels but
service_name).  Series i has its own stack "s<i>;leaf".

Phase A writes value 2^i to series i and is flushed into a block (POST
/ingester/flush); phase B writes 2^(i+20) to the series afterwards, so it
sits in the head.  Some series exist only in phase A (block only) or only
in phase B (head only).  A query's total therefore tells exactly which
(series, tier) pairs it matched, and its collapsed stacks tell which series.

Every selector is checked against a Python evaluation of PromQL matcher
semantics (missing label = "", regexes fully anchored): /render collapsed
(profile-type-id form and, where expressible, FlameQL form
sel.alloc_objects{...}) and SelectMergeStacktraces' flamegraph total.
Operators: =, !=, =~, !~; anchoring (=~"ab" does not match "xaby");
several matchers; k="" (series without k), k!="" (series with k),
k=~".*" (all), k=~".+", k!~".*" (none); dotted keys; a selector without
service_name.  Invalid regexes get 400 (/render) and invalid_argument
(Connect).  Queries are repeated after a restart (everything then comes
from the replayed head log and the blocks).
"""

import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (Workspace, connect, fg_total,  # noqa
                        flush_ok, limit_flags, restart_or_fail,
                        start_or_fail)
from smolder import run_script  # noqa: E402

BUDGET_S = 170
TYPE = "memory:alloc_objects:count::"
APP = "sel"

# (index, tags, in phase A (block), in phase B (head))
SERIES = [
    (0, {"env": "prod", "region": "eu"}, True, True),
    (1, {"env": "prod", "region": "us"}, True, True),
    (2, {"env": "dev", "region": "eu"}, True, True),
    (3, {"env": "staging"}, True, True),
    (4, {}, True, True),
    (5, {"region": "ab"}, True, True),
    (6, {"region": "xaby", "env": "prod"}, True, True),
    (7, {"k8s.pod": "web-1", "env": "prod"}, True, True),
    (8, {"k8s.pod": "web-2"}, True, True),
    (9, {"env": "dev"}, True, False),          # block only
    (10, {"env": "qa", "region": "eu"}, False, True),   # head only
    (11, {"region": "abab"}, True, True),
]
B_SHIFT = 20

# selectors (without service_name; it is added unless noted)
SELECTORS = [
    'env="prod"',
    'env!="prod"',
    'env=~"prod|dev"',
    'env!~"prod|dev"',
    'env=~"p.*"',
    'env=~"rod"',                 # anchored: no match
    'env=~".*rod"',
    'region=~"ab"',               # anchored: "ab" only, not "xaby"/"abab"
    'region=~"a.*"',
    'region=~"(ab)+"',
    'region!~"ab"',
    'region=~".*ab.*"',
    'env="prod",region="eu"',
    'env="prod",region=~"e.*|u.*"',
    'env!="prod",region!="eu"',
    'env="prod",env!="prod"',     # contradiction: nothing
    'region=""',                  # series without region
    'region!=""',                 # series with region
    'env=""',
    'env=~".*"',                  # all
    'env=~".+"',                  # with env
    'env!~".*"',                  # none
    'k8s.pod="web-1"',
    'k8s.pod=~"web-.*"',
    'k8s.pod!=""',
    'k8s.pod=""',
    'nosuchlabel=""',             # all
    'nosuchlabel!=""',            # none
    'nosuchlabel="x"',            # none
    'env="prod",k8s.pod!="web-1",region!~"x.*"',
    'region=~"EU"',               # case-sensitive: none
]
# selectors used without the service_name matcher (this is the only app)
BARE = ['{env="prod"}', '{region=~"ab"}', '{k8s.pod!=""}']
INVALID = ['env=~"("', 'env=~"[a-"']


def series_value(i, phase):
    return (1 << i) if phase == "A" else (1 << (i + B_SHIFT))


def stack(i):
    return "s%d;leaf" % i


def match_one(op, want, have):
    if op == "=":
        return have == want
    if op == "!=":
        return have != want
    if op == "=~":
        return re.fullmatch(want, have, re.DOTALL) is not None
    if op == "!~":
        return re.fullmatch(want, have, re.DOTALL) is None
    raise ValueError(op)


MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=~|!~|!=|=)\s*"([^"]*)"'
                     r'\s*,?')


def parse_sel(s):
    out = []
    pos = 0
    while pos < len(s):
        m = MATCHER.match(s, pos)
        if not m:
            raise ValueError("cannot parse %r at %d" % (s, pos))
        out.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
    return out


def expected(sel, phases):
    """{stack: value} the selector should give from the phases written."""
    ms = parse_sel(sel)
    out = {}
    for i, tags, in_a, in_b in SERIES:
        labels = dict(tags, service_name=APP)
        if not all(match_one(op, v, labels.get(k, "")) for k, op, v in ms):
            continue
        val = 0
        if "A" in phases and in_a:
            val += series_value(i, "A")
        if "B" in phases and in_b:
            val += series_value(i, "B")
        if val:
            out[stack(i)] = val
    return out


def flameql_ok(sel):
    """Sent also as FlameQL sel.alloc_objects{...}: not the dotted keys,
    unknown labels or empty values (og FlameQL has no such forms)."""
    return ("k8s" not in sel and "nosuchlabel" not in sel and
            '""' not in sel)


def ingest_phase(r, srv, phase):
    now = int(time.time())
    for i, tags, in_a, in_b in SERIES:
        if not (in_a if phase == "A" else in_b):
            continue
        tagstr = ",".join("%s=%s" % kv for kv in sorted(tags.items()))
        name = "%s.alloc_objects{%s}" % (APP, tagstr)
        body = ("%s %d\n" % (stack(i), series_value(i, phase))).encode()
        resp = srv.ingest({"name": name, "from": str(now),
                           "until": str(now)}, body)
        r.check(resp.status == 200, "phase %s: ingest %s" % (phase, name),
                resp.describe())


def check_all(r, srv, phases, frm, until, what):
    for sel in SELECTORS + ["__BARE__" + b for b in BARE]:
        if sel.startswith("__BARE__"):
            bare = sel[len("__BARE__"):]
            want = expected(bare[1:-1], phases)
            full = bare
        else:
            want = expected(sel, phases)
            full = '{service_name="%s",%s}' % (APP, sel)
        resp = srv.render(TYPE + full, frm=frm, until=until, fmt="collapsed")
        got = (oracle.parse_collapsed(resp.text()) if resp.status == 200
               else None)
        r.check(got == want, "%s: collapsed %s" % (what, full),
                "want %r\ngot  %r %s" % (want, got, "" if got is not None
                                          else resp.describe()))
        if not sel.startswith("__BARE__") and flameql_ok(sel):
            q = "%s.alloc_objects{%s}" % (APP, sel)
            resp = srv.render(q, frm=frm, until=until, fmt="collapsed")
            got = (oracle.parse_collapsed(resp.text()) if resp.status == 200
                   else None)
            r.check(got == want, "%s: FlameQL %s" % (what, q),
                    "want %r\ngot  %r %s" % (want, got, "" if got is not None
                                              else resp.describe()))
        resp = connect(srv, "SelectMergeStacktraces", {
            "profileTypeID": TYPE, "labelSelector": full,
            "start": frm * 1000, "end": until * 1000})
        tot = None
        if resp.status == 200:
            try:
                tot = fg_total(resp.json())
            except ValueError:
                pass
        r.check(tot == sum(want.values()), "%s: SelectMergeStacktraces %s "
                "total %d" % (what, full, sum(want.values())),
                "got %r %s" % (tot, resp.describe()))
    for bad in INVALID:
        full = '{service_name="%s",%s}' % (APP, bad)
        resp = srv.render(TYPE + full, frm=frm, until=until)
        r.check(resp.status == 400, "%s: invalid regex %s -> 400" % (
            what, bad), resp.describe())
        resp = connect(srv, "SelectMergeStacktraces", {
            "profileTypeID": TYPE, "labelSelector": full,
            "start": frm * 1000, "end": until * 1000})
        r.check(resp.status == 400 and resp.error_code() ==
                "invalid_argument", "%s: invalid regex %s -> Connect "
                "invalid_argument" % (what, bad), resp.describe())


def main(r):
    ws = Workspace("selectors")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    flags = limit_flags()
    now = int(time.time())
    frm, until = now - 3600, now + 3600
    srv = None
    try:
        srv = start_or_fail(r, data, ws.log_dir("first"), flags, "smolder")
        if srv is None:
            return
        # self-check of the expectations (no server): the anchoring cases
        assert expected('region=~"ab"', "A") == {stack(5): 1 << 5}
        assert stack(6) not in expected('region=~"ab"', "A")
        assert expected('env!~".*"', "AB") == {}
        ingest_phase(r, srv, "A")
        check_all(r, srv, "A", frm, until, "head only")
        flush_ok(r, srv)
        check_all(r, srv, "A", frm, until, "after flush (block)")
        ingest_phase(r, srv, "B")
        check_all(r, srv, "AB", frm, until, "block + head")
        srv = restart_or_fail(r, srv, data, ws.log_dir("restart"), flags)
        if srv is None:
            return
        check_all(r, srv, "AB", frm, until, "after restart")
    finally:
        if srv is not None:
            srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_selectors", BUDGET_S, main)
