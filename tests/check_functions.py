#!/usr/bin/env python3
"""No function in src/, shim/ or tools/ runs over 100 lines (issue 26: a
function a reader holds in one screen).  A function is counted the way the
tree writes them (STYLE.md): its return type on the line before its name,
the name at the start of a line, the body closed by a '}' alone at the
start of a line; from the return type's line to that brace.

usage: check_functions.py SOURCE_ROOT
"""
import os
import re
import sys

LIMIT = 100
START = re.compile(r'^([A-Za-z_]\w*)\(')


def long_functions(path):
    with open(path) as fh:
        lines = fh.read().split('\n')
    start = name = None
    for i, line in enumerate(lines):
        m = START.match(line)
        if m and start is None:
            start, name = i - 1, m.group(1)     # the return type's line
        elif line == '}' and start is not None:
            n = i - start + 1
            if n > LIMIT:
                yield name, start + 1, n
            start = None
        elif line.endswith(';') and start is not None and not line.startswith(('\t', ' ')):
            start = None                        # a prototype, not a definition


def main():
    root = sys.argv[1]
    bad = []
    for top in ('src', 'shim', 'tools'):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith('.c'):
                    p = os.path.join(d, f)
                    for name, line, n in long_functions(p):
                        bad.append('%s:%d: %s is %d lines (at most %d)'
                                   % (os.path.relpath(p, root), line, name, n, LIMIT))
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
