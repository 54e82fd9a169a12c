"""
node_clients.py -- the Node.js clients of tests/clients (connect-es for
gRPC-web, protobuf-es for OTLP) and their one-time `npm ci`.

Several tests use the same node_modules and ctest runs them in parallel,
so the install runs under an exclusive lock (fcntl) and only when
node_modules is missing or older than package-lock.json: a second test
waits for the first's install instead of starting its own, which would
delete the modules from under the first.
"""

import fcntl
import os
import shutil
import subprocess

from smolder import source_dir

CLIENT_DIR = os.path.join(source_dir(), "tests", "clients")


def ensure(r):
    """(node, protoc) with tests/clients installed; r.skip_all() (a
    failure under CI=true) when node, npm or protoc is missing or the
    install fails."""
    node, npm, protoc = (shutil.which(x) for x in ("node", "npm", "protoc"))
    if not node or not npm or not protoc:
        r.skip_all("node, npm or protoc missing (make deps installs "
                   "nodejs, npm and protobuf-compiler)")
    lock = os.path.join(CLIENT_DIR, "package-lock.json")
    stamp = os.path.join(CLIENT_DIR, "node_modules", ".package-lock.json")
    with open(os.path.join(CLIENT_DIR, ".install.lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            if not os.path.exists(stamp) or \
                    os.path.getmtime(stamp) < os.path.getmtime(lock):
                p = subprocess.run([npm, "ci", "--no-audit", "--no-fund"],
                                   cwd=CLIENT_DIR, capture_output=True,
                                   text=True, timeout=240)
                if p.returncode != 0:
                    r.skip_all("npm ci failed (no registry?): " +
                               p.stderr[-500:])
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)
    return node, protoc


def descriptor_set(r, protoc, out, protos, what):
    """protoc compiles protos (paths under proto/ or
    third_party/opentelemetry-proto/) and their imports into the
    descriptor set `out` the clients read; checked as `what`.
    Returns out."""
    p = subprocess.run([protoc, "--include_imports",
                        "--descriptor_set_out=" + out,
                        "-I", os.path.join(source_dir(), "proto"),
                        "-I", os.path.join(source_dir(), "third_party",
                                           "opentelemetry-proto")] + protos,
                       capture_output=True, text=True, timeout=60)
    r.check(p.returncode == 0, what, p.stderr[-500:])
    return out
