"""
test_cli.py -- the command line is an interface too (docs/style.md §15, after
Pyroscope's help-all.txt.tmpl golden test):

  - `smolder -help` prints exactly tests/integration/golden/help.txt (update
    the golden file deliberately when a flag changes);
  - the flag table of docs/configuration.md lists exactly the flags -help
    lists (tests/tools/update_readme_flags.py regenerates both);
  - bad invocations fail at once with a message: unknown flag, bad value,
    unknown or internal target, a component that has no ingester to use,
    a second process on the same data directory.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smolder import Results, Server, install_timeout, smolder_bin, source_dir  # noqa: E402


def run(args, timeout=20):
    p = subprocess.run([smolder_bin()] + args, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def main():
    install_timeout(120)
    r = Results("test_cli")
    golden_path = os.path.join(source_dir(), "tests", "integration",
                               "golden", "help.txt")

    code, out, err = run(["-help"])
    r.eq(code, 0, "-help exits 0")
    with open(golden_path) as f:
        golden = f.read()
    r.check(out == golden, "-help matches golden/help.txt",
            "regenerate with: smolder -help > %s\n--- got ---\n%s" %
            (golden_path, out))

    help_flags = set(re.findall(r"^  -(\S+)", out, re.M))
    with open(os.path.join(source_dir(), "docs", "configuration.md")) as f:
        doc = f.read()
    doc_flags = set(re.findall(r"^\| `-([^`]+)` \|", doc, re.M))
    r.check(help_flags == doc_flags,
            "docs/configuration.md flag table == -help flags",
            "only in -help: %s; only in docs/configuration.md: %s" % (
                sorted(help_flags - doc_flags),
                sorted(doc_flags - help_flags)))

    cases = [
        (["-no.such-flag=1"], "flag provided but not defined"),
        (["-server.http-threads=many"], "invalid value"),
        (["-target=bogus"], "unrecognised target"),
        (["-target=server"], "unrecognised target"),
        (["-log.level=loud"], "invalid -log.level"),
    ]
    for args, want in cases:
        code, out, err = run(args)
        r.check(code != 0 and want in err, "%s fails with '%s'" %
                (" ".join(args), want), "exit %d, stderr: %s" % (code, err))

    # A querier alone has no ingester to talk to yet: it must say so and
    # exit, not serve errors.
    with Server() as s:
        data = s.data
        code, out, err = run(["-target=querier",
                              "-http.listen-address=127.0.0.1:0",
                              "-data.dir=%s" % (data + "-q")])
        r.check(code != 0 and "no ingesters: set -ring.members" in err,
                "-target=querier without an ingester fails at start",
                "exit %d, stderr: %s" % (code, err))
        # The data directory is locked by the running server.
        code, out, err = run(["-http.listen-address=127.0.0.1:0",
                              "-data.dir=%s" % data])
        r.check(code != 0 and "in use by another process" in err,
                "a second process on the same -data.dir is refused",
                "exit %d, stderr: %s" % (code, err))
        r.check(s.ready(), "the first server still serves")
        # -server.http-write-workers -1 (the default) chooses: the event
        # threads in single-binary mode, the pool with -ingester.wal-sync
        # (a write then waits on fdatasync).
        r.check(' msg="listening" ' in s.stderr_text() and
                " write_workers=0 " in s.stderr_text(),
                "single-binary mode: writes run on the event threads",
                s.stderr_tail())
    s.check_stopped(r)
    with Server(["-ingester.wal-sync"]) as s2:
        r.check(' msg="listening" ' in s2.stderr_text() and
                " write_workers=8 " in s2.stderr_text(),
                "-ingester.wal-sync: writes run on a pool of 8",
                s2.stderr_tail())
    s2.check_stopped(r)
    r.finish()


if __name__ == "__main__":
    main()
