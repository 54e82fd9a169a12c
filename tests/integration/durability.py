"""
durability.py -- helpers for the storage tests (restart, kill -9, blocks,
corruption) on top of smolder.py.  Not a test.

    from durability import Workspace, DataServer, admin, flush, metrics

  Workspace      one temp dir per script holding data dirs and per-process
                 log dirs; removed at the end unless a check failed or
                 SM_KEEP_DATA=1 (then its path is printed).
  DataServer     a smolder.Server on a data dir the test owns, so processes
                 can follow one another on the same data (restart after
                 SIGTERM or SIGKILL).  start(wait=False) spawns without
                 waiting for /ready; kill9() is SIGKILL.  Each process logs
                 to its own directory, so a restart keeps the previous
                 process's stderr.  Cleanup (atexit, signals, PDEATHSIG) is
                 smolder.py's.
  admin()        runs smolder-admin (SMOLDER_ADMIN, default: smolder-admin
                 next to SMOLDER_BIN); only while no server uses the dir.
  flush(), metrics(), connect(), ...  HTTP helpers for the endpoints the
                 durable-storage change adds.

Stdlib only.
"""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

import smolder
from smolder import (Server, ServerError, free_port, metric_value,  # noqa: F401
                     parse_metrics, smolder_bin)

QUERIER = "/querier.v1.QuerierService/"


# --------------------------------------------------------------------------
# Files.
# --------------------------------------------------------------------------

class Workspace:
    """A temp dir for one script.  cleanup(results) removes it unless the
    script failed or SM_KEEP_DATA=1."""

    def __init__(self, name):
        self.root = tempfile.mkdtemp(prefix="smolder-%s-" % name)
        self.n = 0

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def data_dir(self, name="data"):
        p = self.path(name)
        os.makedirs(p, exist_ok=True)
        return p

    def log_dir(self, tag):
        self.n += 1
        p = self.path("run-%02d-%s" % (self.n, re.sub(r"[^A-Za-z0-9_-]", "_",
                                                       tag)))
        os.makedirs(p)
        return p

    def cleanup(self, results):
        if results.failed or os.environ.get("SM_KEEP_DATA") == "1":
            print("# data dirs and server logs kept in %s" % self.root,
                  flush=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def workspace_for(r, name):
    """Workspace(name) for a test: its cleanup is queued on Results r
    (at_end), so it is kept exactly when the test failed."""
    ws = Workspace(name)
    r.at_end(lambda: ws.cleanup(r))
    return ws


def copy_tree(src, dst):
    """Copy a (stopped server's) data dir."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


def tree_bytes(path, skip=()):
    """Bytes of the files under path, leaving out directories named in
    skip."""
    n = 0
    for d, dirs, files in os.walk(path):
        dirs[:] = [x for x in dirs if x not in skip]
        for f in files:
            try:
                n += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return n


# --------------------------------------------------------------------------
# A server on a data dir that outlives the process.
# --------------------------------------------------------------------------

class DataServer(Server):
    """smolder on `data` (owned by the caller), logs in `logdir`.  One
    object per process: to restart, make a new DataServer on the same
    data dir."""

    def __init__(self, data, logdir, extra_flags=(), name="smolder",
                 ready_timeout=90, stop_timeout=60, log_level="info",
                 target="all", port=None):
        super().__init__(extra_flags=extra_flags, name=name,
                         ready_timeout=ready_timeout,
                         stop_timeout=stop_timeout, log_level=log_level,
                         target=target, port=port)
        self.data = data
        self.tmp = logdir
        self.spawned_at = None
        self.killed = False

    _log_mode = "ab"

    def _prepare(self):
        pass                 # data and logdir belong to the caller

    def _start_failed(self):
        self.stopped = True

    def wait_ready(self):
        """After start(wait=False): poll /ready until 200 (ServerError when
        the process exits or the time runs out)."""
        self._wait_ready()

    def port_lost(self):
        """The process exited because its port was taken."""
        return (self.proc is not None and self.proc.poll() is not None and
                "in use" in self.stderr_text().lower())

    def wait_self_killed(self, timeout=60):
        """The process ends by a SIGKILL it sends itself (a
        SMOLDER_TEST_FAULTS kill): wait up to `timeout` s for it, then
        forget it as stopped.  Returns its exit status."""
        rc = self.proc.wait(timeout)
        self.stopped = True
        smolder._live.discard(self)
        self._out.close()
        self._err.close()
        return rc

    def kill9(self):
        """SIGKILL, reap.  Returns the problems seen (died before)."""
        if self.stopped or self.proc is None:
            return self.problems
        self.stopped = True
        self.killed = True
        rc = self.proc.poll()
        if rc is not None:
            self.problems.append("%s died before the SIGKILL (exit status "
                                 "%d)" % (self.name, rc))
        else:
            self.proc.send_signal(signal.SIGKILL)
            rc = self.proc.wait(30)
        self.exit_code = rc
        smolder._live.discard(self)
        for f in (self._out, self._err):
            f.close()
        if self.problems:
            self.problems.append("stderr tail:\n" + self.stderr_tail(60))
        return self.problems

    def _remove_tmp(self, force=False):
        pass    # the Workspace owns the log dir

    # -- HTTP helpers ---------------------------------------------------------

    def get(self, path, query=None, headers=None, timeout=60):
        return self.request("GET", path, query, headers=headers,
                            timeout=timeout)


# --------------------------------------------------------------------------
# smolder-admin.
# --------------------------------------------------------------------------

def admin_bin():
    b = os.environ.get("SMOLDER_ADMIN") or os.path.join(
        os.path.dirname(smolder_bin()), "smolder-admin")
    return os.path.abspath(b)


def have_admin():
    return os.access(admin_bin(), os.X_OK)


class AdminResult:
    def __init__(self, argv, rc, out, err):
        self.argv = argv
        self.rc = rc
        self.out = out
        self.err = err

    def describe(self):
        t = "$ %s\nexit %s\n" % (" ".join(self.argv), self.rc)
        if self.out:
            t += "stdout:\n" + self.out[-3000:]
        if self.err:
            t += "\nstderr:\n" + self.err[-3000:]
        return t


def admin(*args, timeout=120):
    """Run smolder-admin with `args`; never raises (rc None when it could
    not run or timed out)."""
    argv = [admin_bin()] + [str(a) for a in args]
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout)
        return AdminResult(argv, p.returncode,
                           p.stdout.decode("utf-8", "replace"),
                           p.stderr.decode("utf-8", "replace"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return AdminResult(argv, None, "", "%s: %s" % (type(e).__name__, e))



def admin_verify(r, data, rc, what):
    """smolder-admin verify over the data dir `data` must exit rc; its
    result."""
    a = admin("verify", "-data.dir=%s" % data)
    r.check(a.rc == rc, what, a.describe())
    return a


def run_query(srv, kind, args):
    """One query of a captured list: ("get", (path, params)) over HTTP,
    else ("connect", (method, message))."""
    if kind == "get":
        return srv.request("GET", args[0], args[1])
    return connect(srv, args[0], args[1])


BLOCK_LINE = re.compile(
    r"^tenant=(\S*) block=(\S+) min=(-?\d+) max=(-?\d+) series=(\d+) "
    r"nodes=(\d+) bytes=(\d+)"
    r"(?: tier_ms=(\d+) cover_start=(-?\d+) cover_end=(-?\d+) "
    r"cover_gen=(\d+))?$")


def names_block(text, block_id):
    """True when `text` names block `block_id` ("block=7", "block 7",
    "anonymous/7")."""
    return re.search(r"(block\D{0,3}|/)%s\b" % re.escape(str(block_id)),
                     text) is not None


def parse_blocks(text):
    """`smolder-admin blocks` output -> ([block dict], [lines that do not
    parse])."""
    blocks, bad = [], []
    for ln in text.split("\n"):
        ln = ln.rstrip("\r")
        if not ln.strip():
            continue
        m = BLOCK_LINE.match(ln)
        if not m:
            bad.append(ln)
            continue
        blocks.append({"tenant": m.group(1), "block": m.group(2),
                       "min": int(m.group(3)), "max": int(m.group(4)),
                       "series": int(m.group(5)), "nodes": int(m.group(6)),
                       "bytes": int(m.group(7)),
                       "tier_ms": int(m.group(8) or 0)})
    return blocks, bad


# --------------------------------------------------------------------------
# HTTP: flush, metrics, Connect, labels.
# --------------------------------------------------------------------------

ADMIN_FLAG = "-server.admin-listen-address="


def admin_listener(flags=()):
    """`flags` plus an admin listener on a free loopback port.  Cluster
    operations (flush, compactor runs) then answer there only -- which
    multitenancy by header without API keys needs (common/http.h);
    operate() and flush() find the port in the server's flags."""
    return list(flags) + [ADMIN_FLAG + "127.0.0.1:%d" % free_port()]


def operate(srv, method, path, body=b"", timeout=120, headers=None):
    """A cluster operation: to srv's admin listener when its flags give
    one (admin_listener), else to its API port."""
    port = None
    for f in srv.extra_flags:
        if f.startswith(ADMIN_FLAG):
            port = int(f.rsplit(":", 1)[1])
    if port is None:
        return srv.request(method, path, body=body, timeout=timeout,
                           headers=headers)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        r = conn.getresponse()
        data = r.read()
        return smolder.Response(r.status, {k.lower(): v for k, v in
                                           r.getheaders()}, data)
    except (OSError, http.client.HTTPException) as e:
        return smolder.Response(0, {}, ("connection error: %s" % e).encode())
    finally:
        conn.close()


def flush(srv, timeout=120):
    return operate(srv, "POST", "/ingester/flush", timeout=timeout)


def flush_ok(r, srv):
    """flush(srv), recorded as the check that it answered 200."""
    resp = flush(srv)
    r.check(resp.status == 200, "POST /ingester/flush -> 200",
            resp.describe())


def metrics(srv):
    """(Response, parsed or None)."""
    r = srv.request("GET", "/metrics", timeout=30)
    if r.status != 200:
        return r, None
    return r, parse_metrics(r.text())


def start_or_fail(r, data, log_dir, flags, name, what="server starts"):
    """DataServer(data, log_dir, ...).start(), or None with the failure
    recorded as the check `what`."""
    try:
        return DataServer(data, log_dir, extra_flags=flags,
                          name=name).start()
    except ServerError as e:
        r.fail(what, str(e))
        return None


def restart_or_fail(r, srv, data, log_dir, flags):
    """Stop srv (recorded as the check that it exits 0) and start a
    server on the same data: it, or None as start_or_fail gives it."""
    srv.check_stopped(r, "server exits 0 on SIGTERM")
    return start_or_fail(r, data, log_dir, flags, "smolder(restart)",
                         "server restarts")


def wait_metric(srv, name, pred, timeout, interval=0.2):
    """Poll /metrics until pred(value of name) is true.  Returns the last
    value seen (None when the metric never appeared)."""
    deadline = time.monotonic() + timeout
    v = None
    while True:
        _, p = metrics(srv)
        v = metric_value(p, name)
        if v is not None and pred(v):
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def connect(srv, method, msg, timeout=60, service=QUERIER, headers=None):
    """Connect unary call with a JSON body (dict, or bytes sent as is)."""
    body = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return srv.request("POST", service + method, body=body, headers=h,
                       timeout=timeout)


def connect_proto(srv, method, body, timeout=60, service=QUERIER):
    return srv.request("POST", service + method, body=body,
                       headers={"Content-Type": "application/proto"},
                       timeout=timeout)


def get_json(srv, path, query=None, timeout=60):
    """(Response, decoded JSON or None)."""
    r = srv.request("GET", path, query, timeout=timeout)
    if r.status != 200:
        return r, None
    try:
        return r, r.json()
    except ValueError:
        return r, None


def json_or_none(resp):
    """The decoded JSON body of a 200 answer, else None."""
    if resp.status != 200:
        return None
    try:
        return resp.json()
    except (ValueError, UnicodeDecodeError):
        return None


def limit_flags():
    """Raise the ingestion rate/burst limits where the binary has them
    (rate limits are not what the storage tests are about)."""
    want = {"distributor.ingestion-rate-limit-mb": "1000",
            "distributor.ingestion-burst-size-mb": "1000"}
    have = smolder.supported_flags()
    return ["-%s=%s" % (k, v) for k, v in want.items() if k in have]


def supported_flags_have(name):
    """True when the binary lists -name in -help."""
    return name in smolder.supported_flags()


def missing_flags(names):
    """Those of `names` the binary does not list in -help."""
    have = smolder.supported_flags()
    if not have:
        return []
    return [n for n in names if n not in have]


# --------------------------------------------------------------------------
# Values.
# --------------------------------------------------------------------------

def fg_total(j):
    """SelectMergeStacktraces JSON -> flamegraph total as int (None when
    absent or malformed).  Canonical JSON has int64 as a string; an empty
    flamegraph may omit it."""
    if not isinstance(j, dict):
        return None
    fg = j.get("flamegraph")
    if fg is None:
        return 0
    t = fg.get("total", "0")
    try:
        return int(t)
    except (TypeError, ValueError):
        return None


def series_points(j):
    """SelectSeries JSON -> [(labels dict, [(ts_ms int, value float)])]."""
    out = []
    for s in (j or {}).get("series") or []:
        labels = {p.get("name"): p.get("value") for p in s.get("labels") or []}
        pts = []
        for p in s.get("points") or []:
            pts.append((int(p.get("timestamp", 0)), float(p.get("value", 0))))
        out.append((labels, pts))
    return out


class StackUploads:
    """Uploads of one sample each, stacks[n % len(stacks)] for upload n;
    what was acknowledged, per stack (acked) and as (t, stack) in order
    (log)."""

    def __init__(self, stacks):
        self.stacks = stacks
        self.acked = {s: 0 for s in stacks}
        self.log = []
        self.n = 0

    def upload(self, r, dist, count, place,
               what="every upload of the batch acknowledged"):
        """`count` uploads through dist, upload k of them (n overall) to
        the series and time place(k, n) gives; every one acknowledged."""
        ok = 0
        for k in range(count):
            stack = self.stacks[self.n % len(self.stacks)]
            name, t = place(k, self.n)
            self.n += 1
            resp = dist.ingest({"name": name, "from": t, "until": t + 1},
                               ("%s 1\n" % stack).encode())
            if resp.status == 200:
                self.acked[stack] += 1
                self.log.append((t, stack))
                ok += 1
        r.eq(ok, count, what)

    def expected(self, unit):
        """{stack: value} of what was acknowledged, at `unit` an upload."""
        return {s: c * unit for s, c in self.acked.items() if c > 0}

    def first_unit(self, r, got):
        """One upload's value, learned from the first answer `got` (a
        {stack: value}, or anything else when the query failed): checked
        to have every stack, and the value checked to be known (> 0)."""
        ok = isinstance(got, dict)
        r.check(ok and len(got) == len(self.stacks),
                "the first answer has every stack", str(got))
        unit = (got.get(self.stacks[0], 0) if ok else 0) \
            // max(self.acked[self.stacks[0]], 1)
        r.check(unit > 0, "one upload's value is known (%d)" % unit)
        return unit


class UploadWriter(threading.Thread):
    """Uploads one at a time, `gap` s apart, through the distributor
    target(n) names (by default whichever is current, `dist`; None waits
    for one): upload n is one sample of stacks[n % len(stacks)] to
    <app>{shard=s<n % shards>} at `ago` s before the start plus n % span.
    Counts what was sent, acknowledged (per stack) and refused."""

    def __init__(self, app, stacks, shards, dist=None, ago=900, span=600,
                 gap=0.01):
        super().__init__(daemon=True)
        self.app, self.stacks, self.shards = app, stacks, shards
        self.dist = dist
        self.span, self.gap = span, gap
        self.lock = threading.Lock()
        self.acked = {s: 0 for s in stacks}
        self.sent = self.refused = self.n = 0
        self.base = int(time.time()) - ago
        self.halt = threading.Event()
        self.paused = threading.Event()

    def target(self, n):
        """The distributor upload n goes through (None: not yet)."""
        return self.dist

    def run(self):
        while not self.halt.is_set():
            with self.lock:
                d = None if self.paused.is_set() else self.target(self.n)
                if d is not None:
                    stack = self.stacks[self.n % len(self.stacks)]
                    shard = self.n % self.shards
                    t = self.base + self.n % self.span
                    self.n += 1
            if d is None:
                time.sleep(0.02)
                continue
            try:
                resp = d.ingest({"name": "%s{shard=s%d}" % (self.app, shard),
                                 "from": t, "until": t + 1},
                                ("%s 1\n" % stack).encode())
                ok = resp.status == 200
            except OSError:
                ok = False
            with self.lock:
                self.sent += 1
                if ok:
                    self.acked[stack] += 1
                else:
                    self.refused += 1
            time.sleep(self.gap)

    def switch(self, d):
        """Pause, swap the distributor, resume (in-flight upload done)."""
        self.paused.set()
        time.sleep(0.2)
        with self.lock:
            self.dist = d
        self.paused.clear()

    def snapshot(self):
        """Pause (the caller resumes with paused.clear()); what was
        acknowledged so far."""
        self.paused.set()
        time.sleep(0.2)
        with self.lock:
            return dict(self.acked)


def local_blocks_dropped(ing):
    """The blocks ing dropped from its disk (-ingester.local-retention)
    since its start."""
    _, p = metrics(ing)
    return metric_value(p, "smolder_ingester_local_blocks_dropped_total") or 0


def leave_for_good(r, ing, i):
    """ingester-i leaves for good by POST /ingester/shutdown, which must
    answer 200 (its blocks shipped and served); it then exits 0 by
    itself."""
    t0 = time.monotonic()
    resp = ing.request("POST", "/ingester/shutdown", body=b"", timeout=60)
    r.eq(resp.status, 200, "ingester-%d left: its blocks are shipped "
         "and served (%.1fs) %s" % (i, time.monotonic() - t0,
                                    resp.text()[:200]))
    probs = ing.reap(60)
    r.check(not probs, "ingester-%d exited 0 by itself" % i,
            "\n".join(probs))


def check_code(r, resp, status, code, what):
    """One check: resp has `status` and a JSON error whose code is
    `code`."""
    try:
        c = resp.json().get("code")
    except (ValueError, AttributeError):
        c = None
    r.check(resp.status == status and c == code, what, resp.describe())


def p50_latencies(r, srv, tag, reqs, n, call):
    """The line "<method> p50 <ms> ms; ..." of n calls call(srv, method,
    body) of each (method, body) in reqs; a call that is not 200 is a
    failure and ends its method's calls."""
    line = []
    for m, body in reqs:
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            resp = call(srv, m, body)
            ts.append(time.perf_counter() - t0)
            if resp.status != 200:
                r.fail("latency %s %s" % (tag, m), resp.describe())
                break
        ts.sort()
        line.append("%s p50 %.1f ms" % (m, 1000 * ts[len(ts) // 2]))
    return "; ".join(line)


def gateway_sync(r, gw, what):
    """POST /store-gateway/sync to gw, which must answer 200; its JSON
    ({} when it is not JSON)."""
    resp = gw.request("POST", "/store-gateway/sync", body=b"", timeout=120)
    r.eq(resp.status, 200, "%s: %s synced" % (what, gw.name))
    try:
        return resp.json()
    except ValueError:
        return {}


# The stacks the cluster tests upload, one server's worth.
SERVER_STACKS = ["main;serve;parse", "main;serve;encode", "main;gc",
                 "main;serve;db;query", "main;idle"]


def collapsed_stacks(text):
    """{stack: value} of a collapsed answer: one "a;b;c 12" line a stack,
    blank lines skipped."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            stack, _, v = line.rpartition(" ")
            out[stack] = int(v)
    return out


def collapsed_answer(q, query):
    """{stack: value} of q's collapsed render of `query` over the last hour
    and the next ten minutes, or (status, the start of the body) when it
    is not 200."""
    now = int(time.time())
    resp = q.render(query, frm=now - 3600, until=now + 600, fmt="collapsed")
    if resp.status != 200:
        return (resp.status, resp.text()[:300])
    return collapsed_stacks(resp.text())


def stacks_add(acc, stacks, sign=1):
    for k, v in stacks.items():
        acc[k] = acc.get(k, 0) + sign * v
        if acc[k] == 0:
            del acc[k]
    return acc


def qs(d):
    return urllib.parse.urlencode(d)
