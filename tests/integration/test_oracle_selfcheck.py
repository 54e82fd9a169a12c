#!/usr/bin/env python3
"""
test_oracle_selfcheck.py -- the oracle is checked before it judges the
server (no server needed).

For every protobuf pprof in tests/data and, when present,
../shared/testdata/profiles: the stacks oracle.py derives from
`go tool pprof -raw` must equal an independent collapse of the protobuf,
type by type; the sample and period types must match; and the per-type
totals must equal the totals in the directory's SOURCES.md.  Skips (exit 0)
when `go` is not installed.
"""

import io
import os
import sys
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import oracle  # noqa: E402
from smolder import Results, data_dir, install_timeout, shared_profiles_dir  # noqa: E402


def main():
    r = Results("test_oracle_selfcheck")
    install_timeout(170)
    if not oracle.have_go():
        r.skip_all("go is not installed")
    dirs = [data_dir()]
    shared = shared_profiles_dir()
    if shared:
        dirs.append(shared)
    else:
        r.skip_corpus("../shared corpus",
                      "../shared/testdata/profiles is absent")
    for d in dirs:
        buf = io.StringIO()
        with redirect_stdout(buf):
            fails = oracle.self_check([d])
        out = buf.getvalue()
        print(out, end="")
        checked = sum(1 for ln in out.split("\n")
                      if ln.startswith(("ok ", "FAIL")))
        r.check(fails == 0 and checked > 0,
                "oracle self-check on %s (%d profiles)" % (d, checked),
                "\n".join(ln for ln in out.split("\n")
                          if ln.startswith("FAIL") or ln.startswith("  ")))
        r.check(" (not in a SOURCES.md table)" not in out,
                "every profile in %s has SOURCES.md totals" % d)
    r.finish()


if __name__ == "__main__":
    main()
