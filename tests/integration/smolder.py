"""
smolder.py -- the integration-test harness: start the real `smolder`
binary on a free loopback port with a throw-away data dir, talk HTTP to it,
stop it, and judge how it ended.

    from smolder import Server, Results
    r = Results("test_x")
    with Server() as s:
        resp = s.ingest({"name": "app.cpu"}, b"a;b 1\\n")
        r.check(resp.status == 200, "ingest folded", resp.text())
    r.finish()        # prints "N passed, N failed, N skipped", exits

Environment:
  SMOLDER_BIN     the binary (ctest sets it; default ./build/smolder)
  SM_SOURCE_DIR   the source tree (default: two levels above this file)
  SM_SHARED_DIR   the shared tree (default: <source>/../shared)
  CI              true: a missing shared corpus fails the test
                  (Results.skip_corpus) instead of skipping it
  SM_SANITIZE     ON when the binary is built with ASan/UBSan (reports in
                  stderr fail the test either way)
  SM_KEEP_DATA    1 keeps the server's data dir and logs for inspection

Every server is stopped (SIGTERM, then SIGKILL after a timeout) when its
`with` block ends, at interpreter exit, on SIGTERM/SIGINT of the test, and
by the kernel if the test process dies (PR_SET_PDEATHSIG).  A server that
died on its own, did not exit 0 on SIGTERM, or printed a sanitizer report
is a failure.  Only 127.0.0.1 is used.  Stdlib only.
"""

import atexit
import contextlib
import ctypes
import fcntl
import http.client
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SM_SOURCE_DIR") or os.path.normpath(
    os.path.join(HERE, "..", ".."))

SANITIZER_MARKERS = (
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "runtime error:",
    "WARNING: ThreadSanitizer",
)


def thread_stacks(pid, limit=16000):
    """Where every thread of a live process waits, from gdb (make deps
    installs it), so a hang in CI says where it is: each thread's name and
    its frames that have a source line (the project's code; libc and nng
    frames have none).  Best effort: a message when gdb is missing or
    cannot attach."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb not installed)"
    try:
        out = subprocess.run(
            [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
             "-ex", "thread apply all bt 40"], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return "(gdb failed: %s)" % e
    keep = []
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("Thread "):
            keep.append(line)
        elif line.startswith("#") and re.search(r" at [^ ]+\.[ch]:\d+", line) \
                and "/nptl/" not in line and "sysdeps/" not in line:
            keep.append("  " + line)
    text = "\n".join(keep)
    return text[-limit:] or "(gdb printed no stack)"


def freeze(pid, timeout=10.0):
    """SIGSTOP pid and return once every one of its threads is stopped
    (state T in /proc/PID/task/*/stat).  kill() only queues the stop:
    a thread that is running when it is sent stops when it next enters
    the kernel, so a request sent right after kill() can still be
    answered.  Returns False when some thread is still running at the
    timeout (the caller's check says so)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        running = False
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return False
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    st = f.read()
            except OSError:
                continue    # the thread exited
            # the state follows the command name's closing parenthesis
            if st[st.rindex(")") + 2] not in "Tt":
                running = True
                break
        if not running:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


@contextlib.contextmanager
def frozen(pid, timeout=10.0):
    """freeze(pid) for the length of a with block, whose value is
    freeze's answer; SIGCONT when the block ends, however it ends."""
    ok = freeze(pid, timeout)
    try:
        yield ok
    finally:
        os.kill(pid, signal.SIGCONT)


def source_dir():
    return SOURCE_DIR


def data_dir():
    return os.path.join(SOURCE_DIR, "tests", "data")


def shared_profiles_dir():
    """../shared/testdata/profiles, or None when absent."""
    base = os.environ.get("SM_SHARED_DIR") or os.path.join(SOURCE_DIR, "..",
                                                           "shared")
    d = os.path.normpath(os.path.join(base, "testdata", "profiles"))
    return d if os.path.isdir(d) else None


# The exit status ctest's SKIP_RETURN_CODE property names (CMakeLists.txt).
SKIPPED = 77


def in_ci():
    """CI=true (or 1) in the environment: missing corpora fail, not skip."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def smolder_bin():
    b = os.environ.get("SMOLDER_BIN") or os.path.join(SOURCE_DIR, "build",
                                                      "smolder")
    return os.path.abspath(b)


_flags_cache = None


def supported_flags():
    """Flag names the binary lists in its -help output (a set; empty when
    -help cannot be run).  Lets a test raise a limit only where the server
    has the flag, since unknown flags are refused at start."""
    global _flags_cache
    if _flags_cache is None:
        names = set()
        try:
            p = subprocess.run([smolder_bin(), "-help"], capture_output=True,
                               timeout=30)
            text = (p.stdout + p.stderr).decode("utf-8", "replace")
            for ln in text.split("\n"):
                ln = ln.strip()
                if ln.startswith("-"):
                    names.add(ln[1:].split()[0].split("=")[0])
        except (OSError, subprocess.TimeoutExpired):
            pass
        _flags_cache = names
    return _flags_cache


# --------------------------------------------------------------------------
# Results: counting checks, the final line, the exit status.
# --------------------------------------------------------------------------

class Results:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.failures = []
        self.t0 = time.monotonic()
        self.cleanups = []     # run by run_script after the servers stop

    def at_end(self, fn):
        """Run fn() when the script ends (run_script), after every server
        it started has stopped: workspaces outlive their processes."""
        self.cleanups.append(fn)

    def ok(self, what):
        self.passed += 1
        print("ok    %s" % what, flush=True)

    def fail(self, what, detail=""):
        self.failed += 1
        self.failures.append(what)
        print("FAIL  %s" % what, flush=True)
        if detail:
            for ln in str(detail).rstrip("\n").split("\n"):
                print("      " + ln, flush=True)

    def skip(self, what, why):
        self.skipped += 1
        print("skip  %s: %s" % (what, why), flush=True)

    def skip_corpus(self, what, why):
        """A test corpus (the shared tree, SM_SHARED_DIR) is missing: under
        CI=true this is a failure naming the missing corpus, so a CI run
        cannot pass without checking what it was meant to check; elsewhere
        (a fresh clone) the part is skipped with the message."""
        if in_ci():
            self.fail("%s: test corpus missing under CI=true" % what, why)
        else:
            self.skip(what, why)

    def check(self, cond, what, detail=""):
        if cond:
            self.ok(what)
        else:
            self.fail(what, detail)
        return bool(cond)

    def eq(self, got, want, what):
        return self.check(got == want, what,
                          "want %r\ngot  %r" % (want, got))

    def finish(self):
        """Print the summary line and exit (non-zero on any failure)."""
        dt = time.monotonic() - self.t0
        if self.failures:
            print("failed checks:", flush=True)
            for f in self.failures:
                print("  - " + f, flush=True)
        print("%s: %d passed, %d failed, %d skipped (%.1fs)" % (
            self.name, self.passed, self.failed, self.skipped, dt),
            flush=True)
        sys.exit(1 if self.failed else 0)

    def skip_all(self, why, expected=False):
        """The whole script cannot run here: say so and exit SKIPPED, which
        ctest reports as a skip.  Under CI=true a skip that is not
        `expected` (a missing tool or corpus, rather than a build that
        never runs the script, such as benchmarks under sanitizers) is a
        failure: a CI run must not pass by skipping."""
        if in_ci() and not expected:
            print("skipped under CI=true, which is a failure: %s" % why,
                  flush=True)
            print("%s: 0 passed, 1 failed, 0 skipped" % self.name,
                  flush=True)
            sys.exit(1)
        print("skipped: %s" % why, flush=True)
        print("%s: 0 passed, 0 failed, 1 skipped" % self.name, flush=True)
        sys.exit(SKIPPED)


class TestTimeout(Exception):
    pass


def install_timeout(seconds):
    """Bound the whole script against a hang: SIGALRM raises TestTimeout in
    the main thread, so `with Server()` blocks still stop their servers.
    SIGTERM and SIGINT exit through the same cleanup.

    `seconds` is what the script needs on an idle machine.  It is not a
    speed check (benchmarks in bench/ are): the waits inside are on
    conditions, and the suite runs two tests at a time beside other work,
    so the alarm fires at three times that, at least 240 s, and always
    before ctest's own 600 s limit for integration tests -- unless the
    script says it needs longer than that (a long run outside ctest)."""
    limit = max(3 * int(seconds), 240)
    if seconds < 590:
        limit = min(590, limit)

    def on_alarm(signum, frame):
        raise TestTimeout("test exceeded its %ds bound (expected %ds)" %
                          (limit, seconds))

    def on_term(signum, frame):
        sys.exit(128 + signum)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(limit)


def run_script(name, budget, body):
    """The main() of an integration script, written once: a Results, the
    hang bound (install_timeout), then body(r).  Whatever ends the body --
    its last line, an early return, an exception (TestTimeout included,
    recorded as a failure with its traceback) -- every server it started
    and did not stop is stopped and checked (exit 0 on SIGTERM, no
    sanitizer report), the r.at_end() cleanups run, and the summary line is
    printed with the exit status.  r.skip_all() still exits at once."""
    import traceback
    r = Results(name)
    install_timeout(budget)
    try:
        body(r)
    except Exception as e:  # includes TestTimeout
        r.fail("test ran to completion", "%s: %s\n%s" % (
            type(e).__name__, e, traceback.format_exc()))
    finally:
        signal.alarm(0)
        for srv in list(_live):
            srv.check_stopped(r)
        for fn in reversed(r.cleanups):
            try:
                fn()
            except Exception as e:
                r.fail("cleanup", "%s: %s" % (type(e).__name__, e))
    r.finish()


# --------------------------------------------------------------------------
# HTTP.
# --------------------------------------------------------------------------

class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # {lower-case name: value}
        self.body = body

    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def error_message(self):
        """The "message" of a JSON error body, else the body text."""
        try:
            j = self.json()
            if isinstance(j, dict) and "message" in j:
                return str(j["message"])
        except (ValueError, UnicodeDecodeError):
            pass
        return self.text()

    def has_error_body(self):
        """Whether the body is Smolder's JSON error, {"code", "message"},
        both set."""
        try:
            j = self.json()
        except ValueError:
            return False
        return (isinstance(j, dict) and bool(j.get("message")) and
                bool(j.get("code")))

    def error_code(self):
        try:
            j = self.json()
            if isinstance(j, dict):
                return j.get("code")
        except (ValueError, UnicodeDecodeError):
            pass
        return None

    def describe(self):
        t = self.text()
        if len(t) > 400:
            t = t[:400] + "..."
        return "HTTP %d %s" % (self.status, t)


def check_error(r, resp, what, statuses, message_ok=None, wanted=""):
    """One check, "<what> -> <statuses>": resp has one of `statuses` and
    Smolder's JSON error body and, with message_ok, message_ok(its
    message) holds (`wanted` says how it did not).  Its result."""
    ok = resp.status in statuses
    detail = resp.describe()
    if ok and not resp.has_error_body():
        ok = False
        detail = 'error body is not {"code","message"}: ' + detail
    if (ok and message_ok is not None and
            not message_ok(resp.error_message())):
        ok = False
        detail = "message %s: %s" % (wanted, detail)
    return r.check(ok, "%s -> %s" % (what, "/".join(str(s) for s in statuses)),
                   detail)


def encode_multipart(parts):
    """parts: [(field, filename, bytes, content_type or None)] ->
    (body, content_type).  The boundary is random and checked against the
    contents."""
    while True:
        boundary = "smolder" + secrets.token_hex(16)
        b = boundary.encode()
        if not any(b in p[2] for p in parts):
            break
    out = bytearray()
    for field, filename, content, ctype in parts:
        out += b"--" + b + b"\r\n"
        disp = 'Content-Disposition: form-data; name="%s"' % field
        if filename is not None:
            disp += '; filename="%s"' % filename
        out += disp.encode() + b"\r\n"
        out += ("Content-Type: %s\r\n" % (ctype or "application/octet-stream")
                ).encode()
        out += b"\r\n" + content + b"\r\n"
    out += b"--" + b + b"--\r\n"
    return bytes(out), "multipart/form-data; boundary=%s" % boundary


_PORT_DIR = os.path.join(tempfile.gettempdir(), "smolder-test-ports")
_ports_held = []   # flock'd files, held until this process exits


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def run_seed():
    """This run's random seed: SM_SEED, or else the time; printed, so that
    SM_SEED can repeat a failed run."""
    seed = int(os.environ.get("SM_SEED", str(int(time.time()))))
    print("# seed %d (SM_SEED to repeat)" % seed, flush=True)
    return seed


def recv_to_close(sock, chunk=65536):
    """Everything `sock` receives until the peer closes it."""
    data = b""
    while True:
        got = sock.recv(chunk)
        if not got:
            return data
        data += got


def http_exchange(conn, method, path, body=None, headers=None):
    """One request on the http.client connection `conn`, which it closes.
    A connection failure (refused, reset, closed without a response,
    timeout, TLS) is returned as status 0 with the error in the body, so
    a check fails instead of the script."""
    try:
        hdrs = dict(headers or {})
        if body is not None and "Content-Length" not in hdrs:
            hdrs["Content-Length"] = str(len(body))
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, {k.lower(): v for k, v in
                                   r.getheaders()}, data)
    except (OSError, http.client.HTTPException) as e:
        return Response(0, {}, ("connection error: %s: %s" % (
            type(e).__name__, e)).encode())
    finally:
        conn.close()


def free_port():
    """A loopback port for a server this process starts.  A port the
    kernel hands out (bind to 0) can be taken again, before the server
    binds it, by any outgoing connection or by another test process doing
    the same (seen as "Address in use" when two suites shared the
    machine).  So the port is chosen below the kernel's ephemeral range
    (outgoing connections never get it) and reserved among test processes
    by an flock'd file under /tmp/smolder-test-ports, held until this
    process exits; it is also checked free by binding it."""
    low = _ephemeral_low()
    if low > 12000:
        os.makedirs(_PORT_DIR, exist_ok=True)
        rnd = random.SystemRandom()
        for _ in range(500):
            port = rnd.randrange(10000, low)
            f = open(os.path.join(_PORT_DIR, str(port)), "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                f.close()
                continue
            finally:
                s.close()
            _ports_held.append(f)
            return port
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


# --------------------------------------------------------------------------
# The server process.
# --------------------------------------------------------------------------

_live = set()


def _cleanup_all():
    for s in list(_live):
        try:
            s.stop()
        except Exception:
            pass


atexit.register(_cleanup_all)

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


# --- /metrics ----------------------------------------------------------------

_METRIC_LINE = re.compile(
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_metrics(text):
    """Prometheus text format -> {name: [({label: value}, float)]}."""
    out = {}
    for ln in text.split("\n"):
        if not ln or ln.startswith("#"):
            continue
        m = _METRIC_LINE.match(ln.strip())
        if not m:
            continue
        labels = {}
        if m.group(3):
            for lm in _LABEL_PAIR.finditer(m.group(3)):
                labels[lm.group(1)] = (lm.group(2).replace('\\"', '"')
                                       .replace("\\n", "\n")
                                       .replace("\\\\", "\\"))
        try:
            v = float(m.group(4))
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append((labels, v))
    return out


def metric_value(parsed, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`; None
    when the family has no such sample."""
    if parsed is None or name not in parsed:
        return None
    vals = [v for lab, v in parsed[name]
            if all(lab.get(k) == want for k, want in labels.items())]
    return sum(vals) if vals else None


def metric(srv, name, default=0.0, **labels):
    """The sum of `name`'s samples on srv's /metrics whose labels include
    `labels` (metric_value), or `default` when none does."""
    v = metric_value(parse_metrics(srv.request("GET", "/metrics").text()),
                     name, **labels)
    return default if v is None else v


class ServerError(Exception):
    pass


class Server:
    """One smolder process.  Use as a context manager, or start()/stop()."""

    def __init__(self, extra_flags=(), name="smolder", ready_timeout=60,
                 stop_timeout=30, log_level="info", target="all",
                 port=None):
        self.extra_flags = list(extra_flags)
        self.fixed_port = port   # None: a free one, retried on a race
        self.target = target
        self.name = name
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.log_level = log_level
        self.proc = None
        self.port = None
        self.tmp = None
        self.data = None
        self.problems = []     # filled by stop()
        self.stopped = False
        self.exit_code = None

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, et, ev, tb):
        self.stop()
        return False

    def argv(self):
        return [smolder_bin(), "-target=%s" % self.target,
                "-http.listen-address=127.0.0.1:%d" % self.port,
                "-data.dir=%s" % self.data,
                "-log.level=%s" % self.log_level] + self.extra_flags

    _log_mode = "wb"       # DataServer appends: one log across restarts

    def _prepare(self):
        """Where the process runs: a fresh temp dir with data/ inside."""
        self.tmp = tempfile.mkdtemp(prefix="smolder-it-")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.data)

    def _start_failed(self):
        self._remove_tmp(force=True)

    def _spawn(self):
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        self.port = self.fixed_port or free_port()
        self._out = open(os.path.join(self.tmp, "stdout.log"), self._log_mode)
        self._err = open(os.path.join(self.tmp, "stderr.log"), self._log_mode)
        self.proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, stdout=self._out,
            stderr=self._err, cwd=self.tmp, env=env,
            preexec_fn=_die_with_parent)
        self.spawned_at = time.monotonic()
        _live.add(self)

    def start(self, wait=True):
        """Spawn and (unless wait=False) poll /ready until 200; a process
        that lost the race for its port is retried on another one, up to
        three times.  ServerError when it exits or is not ready in time."""
        b = smolder_bin()
        if not os.access(b, os.X_OK):
            raise ServerError("no smolder binary at %s (set SMOLDER_BIN)" % b)
        self._prepare()
        last = None
        for attempt in range(3):
            self._spawn()
            if not wait:
                return self
            try:
                self._wait_ready()
                print("# %s started: pid %d, port %d, data %s" % (
                    self.name, self.proc.pid, self.port, self.data),
                    flush=True)
                return self
            except ServerError as e:
                last = e
                err = self.stderr_text()
                self._kill()
                if ("in use" in err.lower() and attempt < 2 and
                        self.fixed_port is None):
                    continue   # lost the port race; try another one
                break
        self._start_failed()
        raise last

    def _wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerError("%s exited with %d before it was ready:\n%s"
                                  % (self.name, rc, self.stderr_tail()))
            if self.request("GET", "/ready", timeout=2).status == 200:
                return
            time.sleep(0.05)
        raise ServerError("%s not ready after %ds:\n%s" % (
            self.name, self.ready_timeout, self.stderr_tail()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        _live.discard(self)
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f:
                f.close()

    def reap(self, timeout):
        """The process ends by itself (POST /ingester/shutdown): wait up
        to `timeout` s, then judge it as stop() does -- exit 0, no
        sanitizer report.  Returns the problems."""
        if self.stopped or self.proc is None:
            return self.problems
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.problems.append("%s did not exit by itself within %ds" %
                                 (self.name, timeout))
        return self.stop(exited_ok=True)

    def stop(self, exited_ok=False):
        """SIGTERM, wait, SIGKILL if needed.  Returns the list of problems:
        died early, no clean exit 0, sanitizer reports.  Idempotent."""
        if self.stopped or self.proc is None:
            return self.problems
        self.stopped = True
        rc = self.proc.poll()
        if rc is not None and exited_ok:
            if rc != 0:
                self.problems.append("%s exited with status %d (want 0)"
                                     % (self.name, rc))
        elif rc is not None:
            self.problems.append("%s died unexpectedly (exit status %d)" % (
                self.name, rc))
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(self.stop_timeout)
                if rc != 0:
                    self.problems.append(
                        "%s exited with status %d on SIGTERM (want 0)" % (
                            self.name, rc))
            except subprocess.TimeoutExpired:
                self.problems.append("%s did not exit within %ds of SIGTERM;"
                                     " killed" % (self.name, self.stop_timeout))
                self.problems.append("threads of the hung process:\n" +
                                     thread_stacks(self.proc.pid))
                self.proc.kill()
                rc = self.proc.wait(10)
        self.exit_code = rc
        _live.discard(self)
        for f in (self._out, self._err):
            f.close()
        err = self.stderr_text()
        for m in SANITIZER_MARKERS:
            if m in err:
                self.problems.append("%s stderr has a sanitizer report (%r)"
                                     % (self.name, m))
                break
        if self.problems:
            self.problems.append("stderr tail:\n" + self.stderr_tail(60))
        self._remove_tmp()
        return self.problems

    def _remove_tmp(self, force=False):
        if self.tmp and os.environ.get("SM_KEEP_DATA") != "1":
            if force or not self.problems:
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                print("# %s logs kept in %s" % (self.name, self.tmp))

    def stderr_text(self):
        try:
            with open(os.path.join(self.tmp, "stderr.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_tail(self, n=30):
        lines = self.stderr_text().rstrip("\n").split("\n")
        return "\n".join(lines[-n:])

    def check_stopped(self, results, what=None):
        """stop() and record one check for the way it ended."""
        probs = self.stop()
        results.check(not probs, what or ("%s exits 0 on SIGTERM with no "
                                          "sanitizer report" % self.name),
                      "\n".join(probs))

    # -- HTTP ----------------------------------------------------------------

    def request(self, method, path, query=None, body=None, headers=None,
                timeout=60):
        """One HTTP request.  A connection failure (refused, reset, closed
        without a response, timeout) is returned as status 0 with the
        error in the body, so a check fails instead of the script."""
        if query:
            path = path + "?" + urllib.parse.urlencode(query, doseq=True)
        return http_exchange(self.connection(timeout), method, path, body,
                             headers)

    def connection(self, timeout):
        """An http.client connection to the server (plain HTTP here)."""
        return http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=timeout)

    def ready(self):
        return self.request("GET", "/ready", timeout=5).status == 200

    def ingest(self, query, body, content_type=None, path="/ingest",
               retry_429=20):
        """POST /ingest with `query` (dict; from/until default to now, in
        unix seconds).  A 429 (rate limit) is retried after a short wait."""
        q = dict(query)
        now = int(time.time())
        q.setdefault("from", str(now))
        q.setdefault("until", str(now))
        hdrs = {}
        if content_type:
            hdrs["Content-Type"] = content_type
        for _ in range(retry_429 + 1):
            r = self.request("POST", path, q, body, hdrs)
            if r.status != 429:
                return r
            time.sleep(0.5)
        return r

    def ingest_multipart(self, query, profile, sample_type_config=None,
                         prev_profile=None, path="/ingest"):
        parts = [("profile", "profile.pprof", profile, None)]
        if sample_type_config is not None:
            parts.append(("sample_type_config", "sample_type_config.json",
                          sample_type_config, "application/json"))
        if prev_profile is not None:
            parts.append(("prev_profile", "profile.pprof", prev_profile, None))
        body, ctype = encode_multipart(parts)
        return self.ingest(query, body, ctype, path=path)

    def render(self, query, frm=None, until=None, fmt=None, max_nodes=None,
               path="/render", extra=None):
        now = int(time.time())
        q = {"query": query,
             "from": str(frm if frm is not None else now - 3600),
             "until": str(until if until is not None else now + 3600)}
        if fmt:
            q["format"] = fmt
        if max_nodes is not None:
            q["maxNodes"] = str(max_nodes)
        if extra:
            q.update(extra)
        return self.request("GET", path, q)

    def render_collapsed(self, type_id, app, **kw):
        """(Response, {stack: value} or None)."""
        from oracle import parse_collapsed
        r = self.render('%s{service_name="%s"}' % (type_id, app),
                        fmt="collapsed", **kw)
        if r.status != 200:
            return r, None
        return r, parse_collapsed(r.text())
