#!/usr/bin/env python3
"""swift_s3.py -- a real one-node OpenStack Swift with s3api on loopback.

The S3 backend (common/bucket_s3.c) is tested against a real S3 server,
not a mock (npm's s3rver, for one, accepts a wrong secret).  This script starts Swift 2.30 (Debian 12) in a directory
of its own and stops it again:

    python3 tests/tools/swift_s3.py start DIR   # prints one JSON line
    python3 tests/tools/swift_s3.py stop DIR

`start` creates DIR (rings, configs, devices), picks four free loopback
ports, starts swift-object-server, swift-container-server,
swift-account-server and swift-proxy-server as four processes (each in
its own session, logs in DIR/<name>.log, pids in DIR/pids), waits at most
60 s until the three backends listen and then a SigV4-signed PUT of the
bucket through the proxy succeeds, and prints

    {"endpoint": "127.0.0.1:PORT", "region": "us-east-1",
     "access_key": "test:tester", "secret_key": "testing",
     "bucket": "smolder-test", "pids": [...]}

leaving the servers running.  On failure it kills what it started, writes
the reason and the logs' tails to stderr and exits 1.  `stop` sends
SIGTERM to every pid in DIR/pids, waits up to 5 s, then SIGKILLs.

Importable: start(dir) -> dict (raises SwiftError), stop(dir),
start_for(results, dir) (start, with the stop left to the test's end), and
smolder_flags(info, ...) -> the -storage.* flags of smolder and
smolder-admin for that server.

Decisions and traps found on this machine:
  - Swift reads swift.conf (hash path suffix, storage policies) from the
    fixed path /etc/swift/swift.conf, whatever swift_dir says (swift_dir
    only locates the rings).  We never write /etc: each server is started
    through a small Python shim that calls swift.common.utils.
    set_swift_dir(DIR) before running the real /usr/bin/swift-*-server
    script, so the test does not depend on what /etc holds (here: a
    "changeme" suffix and policy aliases) or whether it exists.
  - The servers drop privileges to `user` (default "swift") after
    binding; as root that user could not write DIR.  Every conf sets
    user = the current user, which is a no-op when not root.
  - The servers run under the Python of their #! line (/usr/bin/python3,
    which has the swift package), not the one running this script.
  - There is no /dev/log here: Swift then logs to syslog over UDP
    (localhost:514, dropped).  -v adds a console handler, so the log
    files hold the servers' own lines.
  - [filter:s3api] storage_domain = localhost makes virtual-hosted
    addressing (http://smolder-test.localhost:PORT/key) work; libcurl
    resolves *.localhost to loopback.
"""

import base64
import datetime
import hashlib
import hmac
import os
import pwd
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import loopback

REGION = "us-east-1"
ACCESS_KEY = "test:tester"
SECRET_KEY = "testing"
BUCKET = "smolder-test"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 5.0

SERVERS = [  # (name, script, conf)
    ("object", "/usr/bin/swift-object-server", "object.conf"),
    ("container", "/usr/bin/swift-container-server", "container.conf"),
    ("account", "/usr/bin/swift-account-server", "account.conf"),
    ("proxy", "/usr/bin/swift-proxy-server", "proxy.conf"),
]

# Runs a Swift server script (argv[2]) with swift.conf read from the
# directory argv[1].  set_swift_dir re-reads the hash path settings, which
# importing swift.common.utils already read from /etc (when it exists);
# storage policies are read later, from the new path.
SHIM = ("import runpy, sys\n"
        "import swift.common.utils as u\n"
        "u.set_swift_dir(sys.argv[1])\n"
        "sys.argv = sys.argv[2:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")

SWIFT_CONF = """[swift-hash]
swift_hash_path_suffix = smoldertest

[storage-policy:0]
name = Policy-0
default = yes
"""

STORAGE_CONF = """[DEFAULT]
devices = {d}/node
mount_check = false
disable_fallocate = true
swift_dir = {d}
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
user = {user}
recon_cache_path = {d}/cache

[pipeline:main]
pipeline = {kind}-server

[app:{kind}-server]
use = egg:swift#{kind}
"""

PROXY_CONF = """[DEFAULT]
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
user = {user}
swift_dir = {d}
{tls}
[pipeline:main]
pipeline = catch_errors proxy-logging cache s3api tempauth copy slo dlo \
{crypto}proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin

[filter:s3api]
use = egg:swift#s3api
location = {region}
storage_domain = localhost

[filter:cache]
use = egg:swift#memcache

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo

[filter:keymaster]
use = egg:swift#keymaster
encryption_root_secret = {root_secret}

[filter:encryption]
use = egg:swift#encryption
"""


class SwiftError(Exception):
    pass


def _run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    # swift-ring-builder exits 1 for warnings (e.g. "balance"), 2 on error.
    if p.returncode >= 2:
        raise SwiftError("%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                              p.stdout.strip()))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _setup(d, ports, tls=None, encryption=False):
    os.makedirs(os.path.join(d, "node", "d1"), exist_ok=True)
    os.makedirs(os.path.join(d, "cache"), exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    _write(os.path.join(d, "swift.conf"), SWIFT_CONF)
    for (kind, port) in zip(("object", "container", "account"), ports):
        b = os.path.join(d, kind + ".builder")
        _run(["swift-ring-builder", b, "create", "10", "1", "1"])
        _run(["swift-ring-builder", b, "add",
              "r1z1-127.0.0.1:%d/d1" % port, "1"])
        _run(["swift-ring-builder", b, "rebalance"])
        _write(os.path.join(d, kind + ".conf"), STORAGE_CONF.format(
            d=d, port=port, user=user, kind=kind))
    _write(os.path.join(d, "proxy.conf"), PROXY_CONF.format(
        d=d, port=ports[3], user=user, region=REGION,
        tls="cert_file = %s\nkey_file = %s\n" % tls[:2] if tls else "",
        crypto="keymaster encryption " if encryption else "",
        root_secret=base64.b64encode(os.urandom(32)).decode()))


def _sign(method, host, path, payload=b""):
    """SigV4 headers for a request without a query string."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amzdate = now.strftime("%Y%m%dT%H%M%SZ")
    day = amzdate[:8]
    phash = hashlib.sha256(payload).hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canon = "\n".join([method, path, "",
                       "host:" + host, "x-amz-content-sha256:" + phash,
                       "x-amz-date:" + amzdate, "", signed, phash])
    scope = "%s/%s/s3/aws4_request" % (day, REGION)
    sts = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                     hashlib.sha256(canon.encode()).hexdigest()])
    k = ("AWS4" + SECRET_KEY).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    return {
        "x-amz-date": amzdate,
        "x-amz-content-sha256": phash,
        "Authorization": "AWS4-HMAC-SHA256 Credential=%s/%s, "
                         "SignedHeaders=%s, Signature=%s" %
                         (ACCESS_KEY, scope, signed, sig),
    }


def _create_bucket(endpoint, tls=None):
    """0: bucket there; else a short reason to retry on."""
    path = "/" + BUCKET
    req = urllib.request.Request("%s://%s%s" % ("https" if tls else "http",
                                                endpoint, path), data=b"",
                                 method="PUT",
                                 headers=_sign("PUT", endpoint, path))
    ctx = ssl.create_default_context(cafile=tls[2]) if tls else None
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return 0 if r.status == 200 else "HTTP %d" % r.status
    except urllib.error.HTTPError as e:
        body = e.read(4096).decode("utf-8", "replace")
        if e.code == 409 and "BucketAlreadyOwnedByYou" in body:
            return 0
        return "HTTP %d %s" % (e.code, body.strip()[:300])
    except (OSError, urllib.error.URLError) as e:
        return str(e)


def _tail(d, n=20):
    out = []
    for (name, _, _) in SERVERS:
        p = os.path.join(d, name + ".log")
        try:
            with open(p, errors="replace") as f:
                lines = f.readlines()[-n:]
        except OSError:
            continue
        out.append("--- %s (last %d lines)\n%s" % (p, len(lines),
                                                   "".join(lines)))
    return "\n".join(out)


def _read_pids(d):
    try:
        with open(os.path.join(d, "pids")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _alive(pid):
    try:
        # Reap it if it is our exited child, so it does not count as alive.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _interpreter(script):
    """The Python of the script's #! line (Debian's, which has swift)."""
    try:
        with open(script, "rb") as f:
            line = f.readline().decode("utf-8", "replace")
    except OSError as e:
        raise SwiftError("%s: %s (is swift installed?)" % (script, e))
    if not line.startswith("#!") or not line[2:].split():
        raise SwiftError("%s: no #! line" % script)
    return line[2:].split()[0]


def _spawn(d):
    procs = []
    _write(os.path.join(d, "pids"), "")
    try:
        for (name, script, conf) in SERVERS:
            with open(os.path.join(d, name + ".log"), "ab") as log:
                p = subprocess.Popen(
                    [_interpreter(script), "-c", SHIM, d, script,
                     os.path.join(d, conf), "-v"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, close_fds=True)
            procs.append(p)
            with open(os.path.join(d, "pids"), "a") as f:
                f.write("%d\n" % p.pid)
    except (OSError, SwiftError) as e:
        _kill([p.pid for p in procs])
        os.unlink(os.path.join(d, "pids"))
        raise SwiftError("cannot start %s: %s" % (name, e))
    return procs


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_ready(d, procs, ports, endpoint, tls=None):
    """Wait until the object, container and account servers listen on
    ports[0..3), then until the bucket is created through the proxy.  The
    proxy is not asked before the others listen: ten refused connections
    to a node in a row make it skip that node for a minute
    (error_suppression_limit, _interval), so a backend slow to start
    under load (seen with four tests at a time) failed the whole start."""
    deadline = time.monotonic() + START_TIMEOUT
    why = "not started"
    while time.monotonic() < deadline:
        for (p, (name, _, _)) in zip(procs, SERVERS):
            if p.poll() is not None:
                raise SwiftError("swift %s server exited with %d" %
                                 (name, p.returncode))
        down = [name for (name, _, _), port in zip(SERVERS[:3], ports)
                if not _listening(port)]
        if down:
            why = "not listening yet: " + ", ".join(down)
            time.sleep(0.2)
            continue
        why = _create_bucket(endpoint, tls)
        if why == 0:
            return
        time.sleep(0.2)
    raise SwiftError("not ready after %.0f s: %s" % (START_TIMEOUT, why))


def start(d, tls=None, encryption=False):
    """Start Swift in directory d; return the connection facts (a dict).
    tls = (certificate, key, CA) files: the proxy (the S3 endpoint) then
    speaks HTTPS only, with that certificate (Swift's own cert_file and
    key_file settings).  encryption: Swift's encryption middleware
    (keymaster + encryption) in the proxy, so objects are encrypted at
    rest and s3api accepts x-amz-server-side-encryption: AES256."""
    d = os.path.abspath(d)
    if any(_alive(p) for p in _read_pids(d)):
        raise SwiftError("%s/pids names running processes: stop that "
                         "Swift first" % d)
    os.makedirs(d, exist_ok=True)
    ports = loopback.free_ports(4)
    _setup(d, ports, tls, encryption)
    procs = _spawn(d)
    endpoint = "127.0.0.1:%d" % ports[3]
    try:
        _wait_ready(d, procs, ports, endpoint, tls)
    except BaseException as e:
        _kill([p.pid for p in procs])
        os.unlink(os.path.join(d, "pids"))
        if isinstance(e, SwiftError):
            raise SwiftError("%s\n%s" % (e, _tail(d)))
        raise
    return {"endpoint": endpoint, "region": REGION, "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY, "bucket": BUCKET,
            "pids": [p.pid for p in procs], "tls": bool(tls)}


def start_for(r, d, tls=None, encryption=False):
    """start(d) for a test: stop(d) is queued on its Results r (at_end),
    so the servers go whichever way the test ends."""
    info = start(d, tls, encryption)
    r.at_end(lambda: stop(d))
    return info


def start_in(r, ws):
    """start_for(r) in the Workspace ws's swift/ directory, for a cluster
    test: the server's info and the -storage.* flags for it, with the 5 s
    timeout and 2 retries a cluster of processes needs."""
    info = start_for(r, ws.path("swift"))
    return info, smolder_flags(info, timeout="5s", retries=2)


def stop(d):
    """Stop the Swift started in directory d (a no-op if none)."""
    d = os.path.abspath(d)
    _kill(_read_pids(d))
    try:
        os.unlink(os.path.join(d, "pids"))
    except FileNotFoundError:
        pass


def smolder_flags(info, timeout="2s", retries=1):
    """The -storage.* flags that point smolder (and smolder-admin) at the
    server start() described: path-style, plain http (https when it was
    started with tls: add -storage.s3.http.tls-ca-path), short
    timeouts."""
    return ["-storage.backend=s3",
            "-storage.s3.endpoint=%s" % info["endpoint"],
            "-storage.s3.bucket-name=%s" % info["bucket"],
            "-storage.s3.region=%s" % info["region"],
            "-storage.s3.access-key-id=%s" % info["access_key"],
            "-storage.s3.secret-access-key=%s" % info["secret_key"],
            "-storage.s3.insecure=%s" % ("false" if info.get("tls")
                                         else "true"),
            "-storage.s3.bucket-lookup-type=path",
            "-storage.s3.timeout=%s" % timeout,
            "-storage.s3.max-retries=%d" % retries]


def main(argv):
    return loopback.main(argv, "swift_s3", start, stop, SwiftError)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
