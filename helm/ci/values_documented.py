#!/usr/bin/env python3
"""Checks that helm/README.md's values table and helm/values.yaml name the same values.

Usage: values_documented.py VALUES.yaml README.md

Every leaf of values.yaml must have a row (`a.b.c` in the first column), or an ancestor
below the top level must (`gateway.resources` documents its requests and limits). Every
row must name a value that exists. Exit code 1 with the differences listed.
"""

import re
import sys

import yaml


def leaves(node, prefix=()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, prefix + (str(key),))
    else:
        yield prefix


def rows(readme):
    """First-column names of the table under '## Values'."""
    section = readme.split("## Values", 1)[-1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.M)}


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        values = yaml.safe_load(f)
    with open(argv[2], encoding="utf-8") as f:
        documented = rows(f.read())
    paths = [p for p in leaves(values)]
    known = {".".join(p[:i]) for p in paths for i in range(1, len(p) + 1)}
    missing = [
        ".".join(p)
        for p in paths
        if not any(".".join(p[:i]) in documented for i in range(min(2, len(p)), len(p) + 1))
    ]
    stale = sorted(documented - known)
    for name in missing:
        print(f"UNDOCUMENTED {name}: no row in the values table of {argv[2]}", file=sys.stderr)
    for name in stale:
        print(f"STALE {name}: documented in {argv[2]} but not in {argv[1]}", file=sys.stderr)
    print(f"values: {len(paths)} leaves, {len(documented)} rows, {len(missing)} undocumented, {len(stale)} stale")
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
