"""
netpart.py -- real network partitions for cluster tests.

A test that calls enter_private_net() first is re-executed in a network
namespace of its own (unshare --net: a private loopback, brought up here),
so the iptables rules it adds touch no other test and nothing of the host.
Partition(ports).cut() then drops every TCP packet to and from those
ports -- a peer's connects hang unanswered and established connections go
silent, as when a switch or a security group cuts a node off, which a
SIGSTOP (the kernel still accepts connections for the stopped process)
does not show.  heal() removes the rules again.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), unshare (util-linux) and
iptables (Debian's iptables package; `make deps` installs it).
available() says why not when one is missing; the caller decides whether
that is a skip or a failure.
"""

import os
import shutil
import subprocess
import sys

ENV = "SM_PRIVATE_NETNS"


def available():
    """None when a private namespace with iptables can be had, else why
    not."""
    if os.environ.get(ENV) == "1":
        return None
    if os.geteuid() != 0:
        return "not root: a network namespace and iptables need it"
    for tool in ("unshare", "iptables", "ip"):
        if shutil.which(tool) is None:
            return "%s is not installed" % tool
    try:
        subprocess.run(["unshare", "--net", "--", "iptables", "-L", "-n"],
                       check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return "iptables in a private network namespace failed: %s" % e
    return None


def enter_private_net():
    """Re-execute this script in a private network namespace (the same
    pid: unshare execs the command) and return True there; False, with
    nothing changed, when available() says it cannot."""
    if os.environ.get(ENV) == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        return True
    if available() is not None:
        return False
    env = dict(os.environ)
    env[ENV] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe("unshare", ["unshare", "--net", "--", sys.executable,
                           os.path.abspath(sys.argv[0])] + sys.argv[1:], env)
    return False    # not reached


def _rules(ports):
    for p in ports:
        yield ["INPUT", "-p", "tcp", "--dport", str(p), "-j", "DROP"]
        yield ["OUTPUT", "-p", "tcp", "--sport", str(p), "-j", "DROP"]


class Partition:
    """Every TCP packet to or from `ports` dropped while cut (only inside
    the private namespace enter_private_net() made)."""

    def __init__(self, ports):
        if os.environ.get(ENV) != "1":
            raise RuntimeError("Partition outside a private network "
                               "namespace: call enter_private_net() first")
        self.ports = list(ports)
        self.is_cut = False

    def cut(self):
        for rule in _rules(self.ports):
            subprocess.run(["iptables", "-I"] + rule, check=True)
        self.is_cut = True

    def heal(self):
        if not self.is_cut:
            return
        for rule in _rules(self.ports):
            subprocess.run(["iptables", "-D"] + rule, check=True)
        self.is_cut = False

    def dropped(self):
        """Packets the rules dropped so far (iptables' counters)."""
        out = subprocess.run(["iptables", "-L", "-n", "-v", "-x"],
                             check=True, capture_output=True,
                             text=True).stdout
        n = 0
        for line in out.splitlines():
            f = line.split()
            if len(f) > 2 and f[2] == "DROP" and f[0].isdigit():
                n += int(f[0])
        return n
