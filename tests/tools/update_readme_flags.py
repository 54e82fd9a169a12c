#!/usr/bin/env python3
"""
update_readme_flags.py -- rewrite the flag table of docs/configuration.md
from `smolder -help`, and tests/integration/golden/help.txt with it.

    python3 tests/tools/update_readme_flags.py [path/to/smolder]

The table sits between the markers <!-- flags:begin --> and
<!-- flags:end -->; tests/integration/test_cli.py checks both stay true.
"""
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "smolder")
out = subprocess.run([binary, "-help"], capture_output=True, text=True, check=True).stdout
with open(os.path.join(root, "tests", "integration", "golden", "help.txt"), "w") as f:
    f.write(out)

rows = []
lines = out.split("\n")[1:]
i = 0
while i < len(lines):
    m = re.match(r"  -(\S+) ?(\S*)$", lines[i])
    if m:
        name, typ = m.group(1), m.group(2) or "bool"
        text = lines[i + 1].strip()
        d = re.search(r" \(default (.*)\)$", text)
        default = d.group(1) if d else ""
        if d:
            text = text[:d.start()]
        if default == '""':
            default = ""
        default = default.strip('"')
        rows.append("| `-%s` | %s | `%s` | %s |" % (name, typ, default, text.replace("|", "\\|")))
        i += 2
    else:
        i += 1
table = "| Flag | Type | Default | Meaning |\n|---|---|---|---|\n" + "\n".join(rows)

name = os.path.join("docs", "configuration.md")
path = os.path.join(root, name)
with open(path) as f:
    doc = f.read()
new, n = re.subn(r"(<!-- flags:begin -->\n).*?(\n<!-- flags:end -->)",
                 lambda m: m.group(1) + table + m.group(2), doc, flags=re.S)
if n != 1:
    sys.exit("%s: markers <!-- flags:begin --> / <!-- flags:end --> not found" % name)
with open(path, "w") as f:
    f.write(new)
print("%s: %d flags" % (name, len(rows)))
