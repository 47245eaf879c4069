#!/usr/bin/env python3
"""The dmutex command's files depend on each other in one direction.

main (the file that defines `main`) only dispatches: it defines nothing
else, so nothing can depend on it.  A subcommand is the file NAME.c that
defines cli_cmd_NAME; only main calls it.  Subcommands use helper files,
helpers use other helpers, and no chain of calls comes back to where it
started.

The graph is read from the object files the build made (nm: the symbols
each one defines and the ones it needs), so it is the code's, not a list
kept by hand.

usage: check_tools_layout.py OBJDIR SOURCE...
"""
import os
import subprocess
import sys


def symbols(obj):
    defined, needed = set(), set()
    out = subprocess.run(['nm', '-g', obj], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            needed.add(parts[1])
        elif len(parts) == 3 and parts[1] not in ('U', 'w', 'v'):
            defined.add(parts[2])
    return defined, needed


def find_cycle(graph):
    """A list of nodes [a, b, ..., a] forming a cycle, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {n: WHITE for n in graph}
    stack = []

    def visit(n):
        colour[n] = GREY
        stack.append(n)
        for m in sorted(graph[n]):
            if colour[m] == GREY:
                return stack[stack.index(m):] + [m]
            if colour[m] == WHITE:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        colour[n] = BLACK
        return None

    for n in sorted(graph):
        if colour[n] == WHITE:
            c = visit(n)
            if c:
                return c
    return None


def main():
    objdir, sources = sys.argv[1], sys.argv[2:]
    files = [os.path.basename(s) for s in sources if s.endswith('.c')]
    defs, needs = {}, {}
    for f in files:
        obj = os.path.join(objdir, f + '.o')
        if not os.path.exists(obj):
            print(f'FAIL: no object {obj}: build the dmutex command first')
            return 1
        defs[f], needs[f] = symbols(obj)
    owner = {}
    for f, ds in defs.items():
        for s in ds:
            owner[s] = f
    # A -> B with the names A takes from B.
    uses = {f: {} for f in files}
    for f in files:
        for s in needs[f]:
            g = owner.get(s)
            if g and g != f:
                uses[f].setdefault(g, set()).add(s)

    failures = []
    mains = [f for f in files if 'main' in defs[f]]
    if len(mains) != 1:
        failures.append(f'expected one file defining main, found {mains}')
    else:
        m = mains[0]
        extra = sorted(defs[m] - {'main'})
        if extra:
            failures.append(f'{m} (main) must only dispatch, but defines {", ".join(extra)}: '
                            'move shared helpers into a helper file')
    subcommands = {}
    for f in files:
        for s in defs[f]:
            if s.startswith('cli_cmd_'):
                subcommands[s] = f
                if f != s[len('cli_cmd_'):] + '.c':
                    failures.append(f'{s} is defined in {f}, not in its own file '
                                    f'{s[len("cli_cmd_"):]}.c')
    if not subcommands:
        failures.append('no subcommand (cli_cmd_*) found: is the naming convention gone?')
    for f in files:
        for g, names in uses[f].items():
            taken = sorted(n for n in names if n.startswith('cli_cmd_'))
            if taken and f not in mains:
                failures.append(f'{f} calls the subcommand {", ".join(taken)} of {g}: '
                                'only main dispatches to subcommands')
    cycle = find_cycle({f: set(uses[f]) for f in files})
    if cycle:
        steps = [f'{a} -> {b} ({", ".join(sorted(uses[a][b]))})'
                 for a, b in zip(cycle, cycle[1:])]
        failures.append('files call each other in a circle:\n    ' + '\n    '.join(steps))

    for f in failures:
        print('FAIL:', f)
    if failures:
        return 1
    print(f'ok: {len(files)} files, {len(subcommands)} subcommands '
          f'({", ".join(sorted(subcommands.values()))}), no circle; main only dispatches')
    for f in sorted(files):
        if uses[f]:
            print(f'  {f} -> {", ".join(sorted(uses[f]))}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
