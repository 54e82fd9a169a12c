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

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
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


def copy_tree(src, dst):
    """Copy a (stopped server's) data dir."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


def tree_bytes(path):
    n = 0
    for d, _, files in os.walk(path):
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

def flush(srv, timeout=120):
    return srv.request("POST", "/ingester/flush", body=b"", timeout=timeout)


def metrics(srv):
    """(Response, parsed or None)."""
    r = srv.request("GET", "/metrics", timeout=30)
    if r.status != 200:
        return r, None
    return r, parse_metrics(r.text())


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


def stacks_add(acc, stacks, sign=1):
    for k, v in stacks.items():
        acc[k] = acc.get(k, 0) + sign * v
        if acc[k] == 0:
            del acc[k]
    return acc


def qs(d):
    return urllib.parse.urlencode(d)
