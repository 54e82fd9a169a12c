"""
loopback.py -- what the loopback servers of the tests (etcd_server.py,
swift_s3.py) share: free ports to give a server, and the command line
both offer, `start DIR` (print the connection facts as JSON once it is
ready) and `stop DIR`.
"""

import json
import socket
import sys


def free_ports(n):
    """n ports free on 127.0.0.1 now.  All are held until the last is
    found, so no two are the same; a server must bind them soon."""
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


def main(argv, prog, start, stop, error, facts=lambda info: info):
    """`start DIR` or `stop DIR`: start(dir) may raise `error` or OSError
    (exit 1, the reason on stderr); facts(info) is what is printed."""
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
    sys.stdout.write(json.dumps(facts(info)) + "\n")
    sys.stdout.flush()
    return 0
