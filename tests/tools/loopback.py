"""
loopback.py -- what the loopback servers of the tests (etcd_server.py,
swift_s3.py) share: free ports to give a server, and the command line
both offer, `start DIR` (print the connection facts as JSON once it is
ready) and `stop DIR`.
"""

import json
import os
import signal
import socket
import sys
import time

try:
    # The integration harness's ports: below the kernel's ephemeral
    # range and reserved among test processes (smolder.free_port), so an
    # outgoing connection of another test cannot take one between now and
    # the server's bind -- a Swift account server that lost its port that
    # way left the proxy answering 503 for good.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", "integration"))
    from smolder import free_port as _reserved_port
except ImportError:
    _reserved_port = None


def free_ports(n):
    """n ports free on 127.0.0.1 now, different from each other; a server
    must bind them soon."""
    if _reserved_port is not None:
        ports = []
        while len(ports) < n:
            p = _reserved_port()
            if p not in ports:
                ports.append(p)
        return ports
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def alive(pid):
    """Is process pid running (and not a zombie)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def read(d, name):
    """The stripped text of file d/name, or None."""
    try:
        with open(os.path.join(d, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def kill(pid, timeout):
    """SIGTERM pid, SIGKILL after `timeout` seconds, and reap it."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def main(argv, prog, start, stop, error, facts=None):
    """`start DIR` or `stop DIR`: start(dir) may raise `error` or OSError
    (exit 1, the reason on stderr); the keys `facts` of its info (all of
    them when None) are what is printed."""
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        sys.stderr.write("usage: %s start|stop DIR\n" % argv[0])
        return 2
    if argv[1] == "stop":
        stop(argv[2])
        return 0
    try:
        info = start(argv[2])
    except (error, OSError) as e:
        sys.stderr.write("%s: %s\n" % (prog, e))
        return 1
    if facts is not None:
        info = {k: info[k] for k in facts}
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()
    return 0
