#!/usr/bin/env python3
"""
test_durability_kill9.py -- every write that got 200 survives kill -9.

Three cycles on one data dir.  In each, three threads post to /ingest for
about INGEST_S seconds: folded bodies with random stacks to five series
(k9f.alloc_objects{env=e0..e4}, unscaled, so the stored values are the
posted ones) and real pprof files from tests/data, each to its own app
(Go CPU parca__fib, pprof__sample.cpu, a Go heap profile), whose stacks
per sample type come from oracle.collapse_pb (a protobuf decode that does
not share code with the server).  Every request is recorded with its
outcome.  At a random moment the server gets SIGKILL while requests are in
flight; it is restarted on the same data dir.

Right after each restart (before /ready is 200) a tight loop alternates
POST /ingest (series k9early) and GET /ready: no write may be acknowledged
while /ready still says 503 (an ingest answered 200 followed by a /ready
that is not 200 fails), and a 503 from /ready is noted when the replay is
slow enough to see it (not required).

After /ready is 200, every series (collapsed render, fixed time range)
must equal the sum of the acknowledged requests plus some subset of the
requests that were in flight at the kill (sent before the process was
reaped and answered by a connection error) -- exactly that slack and
nothing else.  Once observed, an in-flight request is settled: later
cycles expect it present or absent as it was.  A request in flight whose
sample types ended up partly present is reported as a note (torn write).

Cycles 1 and 3 spill the heads' sealed buckets every second
(-ingester.head-spill-interval=1s).  Cycle 2 runs with
-ingester.block-duration=1s so heads are cut into blocks while the threads
write (a kill may land in a cut; -ingester.head-max-bytes is no longer a
way to force cuts: it bounds the process's RSS and refuses writes with 503
near it, db_test "memory bound"); cycle 3 with -ingester.wal-sync=true.
After cycle 3's kill, one process is killed again while it replays the
head log (as soon as /ready answers 503; noted when the replay is too fast
to catch).  At the end: more writes and a SIGTERM while they are in flight
(exit 0; writes answered 200 must be there, writes cut off by the shutdown
may or may not be, 503s must not), a restart, the full check again, and
SIGTERM.
"""

import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from durability import (DataServer, Workspace, limit_flags,  # noqa: E402
                        metric_value, metrics, stacks_add,
                        start_or_fail, supported_flags_have)
from smolder import run_script, ServerError, data_dir  # noqa

BUDGET_S = 170
INGEST_S = 6.0
THREADS = 3
MAX_NODES = 1000000

FOLDED_TYPE = "memory:alloc_objects:count::"
FOLDED_ENVS = ["e0", "e1", "e2", "e3", "e4"]
VOCAB = ["main;run;work;compute", "main;run;work;io", "main;run;idle",
         "main;gc", "main;gc;mark", "main;gc;sweep", "net;accept",
         "net;read;parse", "net;read;parse;json", "net;write",
         "main;run;work;compute;hash", "main;run;work;compute;sort",
         "timer;tick", "timer;tick;fire", "sys;epoll_wait"]
PPROF_FILES = [("k9fib", "parca__fib.pb.gz"),
               ("k9sample", "pprof__sample.cpu"),
               ("k9heap", "parca__many__1644509272337470000.pb.gz")]
EARLY_KEY = (FOLDED_TYPE, '{service_name="k9early"}')
EARLY_BODY = b"early;write 1\n"


class PprofInput:
    def __init__(self, app, fname):
        path = os.path.join(data_dir(), fname)
        with open(path, "rb") as f:
            self.body = f.read()
        pb = oracle.load_pb(self.body)
        ids = oracle.profile_type_ids(pb.sample_types, pb.period_type)
        per_type = oracle.collapse_pb(pb)
        sel = '{service_name="%s"}' % app
        self.app = app
        self.fname = fname
        self.keys = {}
        for tid, st in zip(ids, per_type):
            if st:
                self.keys[(tid, sel)] = st


class Req:
    __slots__ = ("rid", "keys", "t0", "t1", "status", "err", "cycle")

    def __init__(self, rid, keys, cycle):
        self.rid = rid
        self.keys = keys        # {series key: {stack: value}}
        self.cycle = cycle
        self.t0 = self.t1 = None
        self.status = None
        self.err = ""


class Ledger:
    """What the server must hold: acked[key] = {stack: value}; `maybe` =
    requests in flight at a kill, not yet settled."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}
        self.maybe = []
        self.n = {"ok": 0, "inflight": 0, "refused": 0, "rejected": 0,
                  "unexpected": 0}
        self.unexpected = []
        self.rid = 0
        self.keys = set()

    def next_rid(self):
        with self.lock:
            self.rid += 1
            return self.rid

    def ack(self, req):
        for k, st in req.keys.items():
            stacks_add(self.acked.setdefault(k, {}), st)
            self.keys.add(k)

    def record(self, req, killed_at, reaped_at):
        """Classify a finished request.  killed_at/reaped_at: monotonic
        times of the SIGKILL of the current process (None while alive)."""
        with self.lock:
            for k in req.keys:
                self.keys.add(k)
            if req.status == 200:
                self.n["ok"] += 1
                self.ack(req)
            elif req.status == 0:
                refused = "refused" in req.err.lower()
                if killed_at is not None and req.t1 >= killed_at:
                    if reaped_at is None or req.t0 < reaped_at:
                        if refused:
                            self.n["refused"] += 1      # never reached it
                        else:
                            self.n["inflight"] += 1
                            self.maybe.append(req)
                    else:
                        self.n["refused"] += 1
                else:
                    # A connection error while the server was alive: it
                    # may or may not have the write; counted as in flight
                    # but reported.
                    self.n["unexpected"] += 1
                    self.unexpected.append("request %d: %s" % (req.rid,
                                                               req.err))
                    self.maybe.append(req)
            elif req.status in (429, 503):
                self.n["rejected"] += 1
            else:
                self.n["unexpected"] += 1
                self.unexpected.append("request %d: HTTP %d %s" % (
                    req.rid, req.status, req.err[:200]))


class Ingestors:
    """THREADS threads posting until stop()."""

    def __init__(self, srv, ledger, pprofs, cycle, seed):
        self.srv = srv
        self.ledger = ledger
        self.pprofs = pprofs
        self.cycle = cycle
        self.stop_ev = threading.Event()
        self.killed_at = None
        self.reaped_at = None
        self.threads = []
        self.seed = seed
        self.errors = []

    def one(self, rng):
        if rng.random() < 0.2:
            p = rng.choice(self.pprofs)
            req = Req(self.ledger.next_rid(), p.keys, self.cycle)
            q = {"name": p.app, "format": "pprof"}
            body = p.body
        else:
            env = rng.choice(FOLDED_ENVS)
            stacks = {}
            for _ in range(rng.randint(1, 4)):
                s = rng.choice(VOCAB)
                stacks[s] = stacks.get(s, 0) + rng.randint(1, 1000)
            body = "".join("%s %d\n" % kv for kv in stacks.items()).encode()
            key = (FOLDED_TYPE, '{service_name="k9f",env="%s"}' % env)
            req = Req(self.ledger.next_rid(), {key: stacks}, self.cycle)
            q = {"name": "k9f.alloc_objects{env=%s}" % env}
        now = str(int(time.time()))
        q["from"] = now
        q["until"] = now
        req.t0 = time.monotonic()
        r = self.srv.request("POST", "/ingest", q, body, timeout=30)
        req.t1 = time.monotonic()
        req.status = r.status
        if r.status != 200:
            req.err = r.text()
        self.ledger.record(req, self.killed_at, self.reaped_at)
        return r.status

    def run(self, idx):
        rng = random.Random(self.seed * 100 + idx)
        try:
            while not self.stop_ev.is_set():
                st = self.one(rng)
                if st == 0 and (self.killed_at is not None or
                                not self.srv.alive()):
                    break
        except Exception as e:      # report, never hang the main thread
            import traceback
            self.errors.append("%s\n%s" % (e, traceback.format_exc()))

    def start(self):
        for i in range(THREADS):
            t = threading.Thread(target=self.run, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)

    def join(self, timeout=40):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)


def render_stacks(srv, key, frm, until):
    tid, sel = key
    r = srv.render(tid + sel, frm=frm, until=until, fmt="collapsed",
                   max_nodes=MAX_NODES)
    if r.status != 200:
        return r, None
    return r, oracle.parse_collapsed(r.text())


def subset_sums(items):
    """items: [(rid, stacks)] -> [(frozenset rids, summed stacks)]."""
    out = []
    n = len(items)
    for mask in range(1 << n):
        acc = {}
        rids = []
        for i in range(n):
            if mask >> i & 1:
                stacks_add(acc, items[i][1])
                rids.append(items[i][0])
        out.append((frozenset(rids), acc))
    return out


def verify(r, srv, ledger, frm, until, what):
    """Check every series against the ledger; settle the in-flight
    requests.  Returns True when all series matched."""
    keys = sorted(ledger.keys)
    got = {}
    for k in keys:
        resp, st = render_stacks(srv, k, frm, until)
        if st is None:
            r.fail("%s: render %s%s" % (what, k[0], k[1]), resp.describe())
            got[k] = None
        else:
            got[k] = st
    maybe = ledger.maybe
    all_ok = True
    per_key_choices = {}
    for k in keys:
        if got[k] is None:
            all_ok = False
            continue
        want = ledger.acked.get(k, {})
        items = [(q.rid, q.keys[k]) for q in maybe if k in q.keys]
        diff = stacks_add(dict(got[k]), want, -1)
        if len(items) > 12:
            choices = None
            ok = (all(v > 0 for v in diff.values()) and
                  sum(diff.values()) <= sum(sum(s.values()) for _, s in items))
        else:
            choices = [rids for rids, s in subset_sums(items) if s == diff]
            ok = bool(choices)
        per_key_choices[k] = choices
        tot_want = sum(want.values())
        tot_got = sum(got[k].values())
        detail = ""
        if not ok:
            detail = ("acknowledged total %d, rendered total %d, %d request(s)"
                      " in flight at the kill could add %s\n%s" % (
                          tot_want, tot_got, len(items),
                          [sum(s.values()) for _, s in items],
                          oracle.diff_stacks(want, got[k])))
            all_ok = False
        r.check(ok, "%s: %s%s = acknowledged writes (total %d, +%d in "
                "flight allowed)" % (what, k[0], k[1], tot_want, len(items)),
                detail)
    # Settle: find one choice of present in-flight requests that explains
    # every series at once.
    rids = sorted({q.rid for q in maybe})
    by_rid = {q.rid: q for q in maybe}
    settled = None
    if len(rids) <= 12 and all(got[k] is not None for k in keys):
        for mask in range(1 << len(rids)):
            present = {rids[i] for i in range(len(rids)) if mask >> i & 1}
            good = True
            for k in keys:
                ch = per_key_choices.get(k)
                if ch is None:
                    continue
                mine = frozenset(x for x in present if k in by_rid[x].keys)
                if mine not in ch:
                    good = False
                    break
            if good:
                settled = present
                break
    if settled is not None:
        print("# %s: %d request(s) were in flight at the kill; %d of them "
              "are present" % (what, len(rids), len(settled)), flush=True)
        for rid in settled:
            ledger.ack(by_rid[rid])
    else:
        if rids:
            print("# NOTE %s: no single choice of in-flight requests explains"
                  " every series (a torn write, or a failure above)" % what,
                  flush=True)
        # Continue from what the server has, so one failure does not
        # cascade into the next cycles.
        for k in keys:
            if got[k] is not None:
                ledger.acked[k] = dict(got[k])
    ledger.maybe = []
    return all_ok


def early_writes(r, ws, data, flags, ledger, what):
    """Spawn without waiting; alternate ingest and /ready until ready.
    Returns the started DataServer (or None)."""
    for attempt in range(3):
        srv = DataServer(data, ws.log_dir(what), extra_flags=flags,
                         name="smolder(%s)" % what)
        srv.start(wait=False)
        saw = {"ready": [], "ingest": []}
        violation = []
        deadline = time.monotonic() + 90
        ready = False
        while time.monotonic() < deadline:
            if srv.proc.poll() is not None:
                break
            now = str(int(time.time()))
            req = Req(ledger.next_rid(), {EARLY_KEY: {"early;write": 1}}, 0)
            req.t0 = time.monotonic()
            ir = srv.request("POST", "/ingest",
                             {"name": "k9early.alloc_objects", "from": now,
                              "until": now}, EARLY_BODY, timeout=30)
            req.t1 = time.monotonic()
            req.status = ir.status
            req.err = ir.text() if ir.status != 200 else ""
            saw["ingest"].append(ir.status)
            rr = srv.request("GET", "/ready", timeout=5)
            saw["ready"].append(rr.status)
            if ir.status == 200 and rr.status != 200:
                violation.append("ingest got 200, then /ready said %d" %
                                 rr.status)
            with ledger.lock:
                ledger.keys.add(EARLY_KEY)
                if ir.status == 200:
                    ledger.n["ok"] += 1
                    ledger.ack(req)
                elif ir.status == 0 and "refused" not in req.err.lower():
                    ledger.maybe.append(req)    # reset mid-request
                elif ir.status not in (0, 503):
                    ledger.n["unexpected"] += 1
                    ledger.unexpected.append("early ingest: HTTP %d %s" % (
                        ir.status, req.err[:200]))
            if rr.status == 200:
                ready = True
                break
        if not ready and srv.port_lost() and attempt < 2:
            srv.stop()
            continue
        rs = saw["ready"]
        r.check(ready, "%s: /ready becomes 200 after the restart" % what,
                "ready answers %s\n%s" % (compress(rs), srv.stderr_tail()))
        r.check(not violation, "%s: no write acknowledged before /ready is "
                "200" % what, "\n".join(violation[:5]))
        bad = [s for s in rs if s not in (0, 200, 503)]
        r.check(not bad, "%s: /ready answers only 503 then 200" % what,
                compress(rs))
        print("# %s: /ready answers %s; early ingests %s" % (
            what, compress(rs), compress(saw["ingest"])), flush=True)
        if 503 in rs:
            r.ok("%s: /ready was 503 during the replay" % what)
        else:
            print("# NOTE %s: replay too fast to observe /ready 503" % what,
                  flush=True)
        if not ready:
            srv.stop()
            return None
        return srv
    return None


def kill_during_replay(r, ws, data, flags, what):
    """Start on the data dir and SIGKILL the process as soon as /ready
    answers (503 while it replays the head log, if that is slow enough to
    see).  The next start must still have every acknowledged write."""
    for attempt in range(3):
        srv = DataServer(data, ws.log_dir(what + " replay-kill"),
                         extra_flags=flags, name="smolder(%s, killed in "
                         "replay)" % what)
        srv.start(wait=False)
        seen = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and srv.proc.poll() is None:
            st = srv.request("GET", "/ready", timeout=5).status
            if st in (200, 503):
                seen = st
                break
            time.sleep(0.002)
        if seen is None and srv.port_lost() and attempt < 2:
            srv.stop()
            continue
        probs = srv.kill9()
        r.check(not probs, "%s: server alive until killed during its replay"
                % what, "\n".join(probs))
        if seen == 503:
            r.ok("%s: SIGKILL while /ready was 503 (replaying)" % what)
        else:
            print("# NOTE %s: replay too fast to kill it in the middle "
                  "(/ready %s)" % (what, seen), flush=True)
        return


def compress(seq):
    """[0,0,503,503,200] -> '0x2 503x2 200x1'."""
    out = []
    for s in seq:
        if out and out[-1][0] == s:
            out[-1][1] += 1
        else:
            out.append([s, 1])
    return " ".join("%sx%d" % (a, b) for a, b in out)


def main(r):
    ws = Workspace("kill9")
    r.at_end(lambda: ws.cleanup(r))
    data = ws.data_dir()
    seed = int(os.environ.get("SM_SEED") or random.randrange(1 << 30))
    print("# seed %d (SM_SEED=%d repeats the kill moments)" % (seed, seed),
          flush=True)
    rng = random.Random(seed)
    pprofs = [PprofInput(a, f) for a, f in PPROF_FILES]
    ledger = Ledger()
    t_start = int(time.time())
    frm, until = t_start - 3600, t_start + 3600
    base = limit_flags()
    # extra flags of the process that runs during cycle N (4: the final
    # writes before the clean SIGTERM)
    cycle_flags = {1: [], 2: [], 3: [], 4: []}
    if supported_flags_have("ingester.block-duration"):
        cycle_flags[2].append("-ingester.block-duration=1s")
    if supported_flags_have("ingester.wal-sync"):
        cycle_flags[3] = ["-ingester.wal-sync=true"]
    if supported_flags_have("ingester.head-spill-interval"):
        # Sealed buckets spilled every second (ingester/head.h): the
        # kills land in spills, and the replay rebuilds what was spilled.
        cycle_flags[1].append("-ingester.head-spill-interval=1s")
        cycle_flags[3].append("-ingester.head-spill-interval=1s")
    srv = None
    try:
        srv = start_or_fail(r, data, ws.log_dir("first"), base, "smolder(first)")
        if srv is None:
            return
        for cycle in range(1, 4):
            what = "cycle %d" % cycle
            ing = Ingestors(srv, ledger, pprofs, cycle, seed + cycle)
            kill_after = rng.uniform(1.5, INGEST_S - 0.5)
            ing.start()
            time.sleep(kill_after - 0.3)
            _, m = metrics(srv)
            cuts = metric_value(m, "smolder_ingester_block_cuts_total")
            time.sleep(0.3)
            n_before = ledger.n["ok"]
            ing.killed_at = time.monotonic()
            probs = srv.kill9()
            ing.reaped_at = time.monotonic()
            r.check(not probs, "%s: server alive until the SIGKILL at %.1fs"
                    % (what, kill_after), "\n".join(probs))
            joined = ing.join()
            r.check(joined and not ing.errors, "%s: ingest threads finished"
                    % what, "\n".join(ing.errors))
            print("# %s (flags %s): killed after %.1fs; %d block cuts in "
                  "this process just before; %d writes acknowledged so far; "
                  "%d in flight at the kill; counts %s" % (
                      what, " ".join(srv.extra_flags[len(base):]) or "-",
                      kill_after, cuts or 0, n_before, len(ledger.maybe),
                      ledger.n), flush=True)
            flags = base + cycle_flags[cycle + 1]
            if cycle == 3:
                kill_during_replay(r, ws, data, flags, what)
            srv = early_writes(r, ws, data, flags, ledger, what + " restart")
            if srv is None:
                break
            verify(r, srv, ledger, frm, until, what + " after kill -9")
            # writes after the restart are accepted and durable (the next
            # cycle's threads, and these)
            body = b"after;restart 7\n"
            resp = srv.ingest({"name": "k9after.alloc_objects"}, body)
            key = (FOLDED_TYPE, '{service_name="k9after"}')
            with ledger.lock:
                ledger.keys.add(key)
            if r.check(resp.status == 200, "%s: ingest after restart -> 200"
                       % what, resp.describe()):
                with ledger.lock:
                    stacks_add(ledger.acked.setdefault(key, {}),
                               {"after;restart": 7})
        if srv is not None:
            # more writes, a clean shutdown while they are in flight, a
            # restart and the full check
            ing = Ingestors(srv, ledger, pprofs, 4, seed + 4)
            ing.start()
            time.sleep(2.0)
            ing.killed_at = time.monotonic()
            srv.check_stopped(r, "SIGTERM under write load: exit 0")
            ing.reaped_at = time.monotonic()
            r.check(ing.join() and not ing.errors, "final ingest threads "
                    "finished", "\n".join(ing.errors))
            print("# SIGTERM under load: %d in flight; counts %s" % (
                len(ledger.maybe), ledger.n), flush=True)
            try:
                srv = DataServer(data, ws.log_dir("final"), extra_flags=base,
                                 name="smolder(final)").start()
            except ServerError as e:
                r.fail("restart after SIGTERM", str(e))
                srv = None
            if srv is not None:
                verify(r, srv, ledger, frm, until, "after SIGTERM + restart")
        r.check(not ledger.unexpected, "no unexpected ingest answers (only "
                "200, or connection errors at a kill)",
                "\n".join(ledger.unexpected[:20]))
        print("# totals: %s over %d series" % (ledger.n, len(ledger.keys)),
              flush=True)
    finally:
        if srv is not None:
            srv.check_stopped(r)


if __name__ == "__main__":
    run_script("test_durability_kill9", BUDGET_S, main)
