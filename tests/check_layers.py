#!/usr/bin/env python3
"""Calls go one way through the tree (README "Source layout"):

    tools/ (the dmutex command)   shim/ (the pthread face)
        |  core/admin.h              |  core/shim.h
    src/api/      the public calls of dmutex.h
    src/core/     client, holds, renewer, lease cache, release, metrics, URL
    src/backend/  backend.h: the face, one table of operations; create.c
    src/backend/redis/   the Redis backends that fill the table in
    src/backend/net/     sockets, TLS, secrets
    src/base/     time, tokens, log, lock order

A file may use its own floor and the floors below it, never one above, and
only through the doors drawn: the core and the public calls reach the
backend through backend/backend.h alone (never redis/ or net/), the shim
reaches the library through core/shim.h and the public header, the tool
through core/admin.h and the public header.  No two files of the library
call each other in a circle.

Checked two ways: the #include lines of every source file, and the symbols
each object file of the build needs and defines (nm), so a call made
without an include (an extern declared by hand) is caught too.  Known
exceptions are listed below with their reason; the list only shrinks.

usage: check_layers.py SOURCE_ROOT LIB_OBJDIR TOOL_OBJDIR
"""
import os
import re
import subprocess
import sys

FLOORS = [                      # (path prefix, floor name), most specific first
    ('src/backend/net/', 'net'),
    ('src/backend/redis/', 'redis'),
    ('src/backend/', 'face'),
    ('src/base/', 'base'),
    ('src/core/', 'core'),
    ('src/api/', 'api'),
    ('shim/', 'shim'),
    ('tools/', 'tools'),
]
RANK = {'base': 0, 'net': 1, 'redis': 2, 'face': 3, 'core': 4, 'api': 5, 'shim': 6,
        'tools': 6}
# Headers of a floor that floors above it may include: None means any.
OPEN_TO = {
    'base': None,
    'net': {'net', 'redis', 'face'},    # backend.h carries net/addr.h's address
    'redis': {'redis', 'face'},         # create.c picks the backend
    'face': None,                       # backend.h: the face itself
    'core': {'core', 'api'},            # shim and tools: through their doors
    'api': {'api'},
}
FACE = 'src/backend/backend.h'
DOORS = {'shim': {'src/core/shim.h'}, 'tools': {'src/core/admin.h'}}
# Known exceptions: (file, what it reaches).  Shrink, never grow.
EXCEPTIONS = set()
# struct dmutex__backend's fields that are the backend's own.
BACKEND_OWN = re.compile(r'\bbe->(nodes|nnodes|nsub|waiter)\b')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def floor(rel):
    for prefix, name in FLOORS:
        if rel.startswith(prefix):
            return name
    return None


def sources(root):
    for top in ('src', 'shim', 'tools'):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(('.c', '.h')):
                    yield os.path.relpath(os.path.join(d, f), root)


def resolve(root, rel, name):
    """Where an #include "name" in rel lands, as the build's paths find it
    (the file's own folder, then include/ and src/), relative to root."""
    for base in (os.path.dirname(rel), 'include', 'src'):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(root, p)):
            return p
    return None


def check_includes(root, bad):
    for rel in sources(root):
        mine = floor(rel)
        with open(os.path.join(root, rel)) as fh:
            for n, line in enumerate(fh, 1):
                if mine in ('core', 'api') and BACKEND_OWN.search(line):
                    bad.append('%s:%d reads a field of the backend\'s own (%s)' % (
                        rel, n, BACKEND_OWN.search(line).group(0)))
                m = INCLUDE.match(line)
                if not m:
                    continue
                to = resolve(root, rel, m.group(1))
                theirs = floor(to) if to else None
                if not theirs or theirs == mine or (rel, to) in EXCEPTIONS:
                    continue
                if mine in DOORS:
                    if to not in DOORS[mine]:
                        bad.append('%s:%d includes %s: %s reaches the library through %s'
                                   % (rel, n, to, mine, ', '.join(sorted(DOORS[mine]))))
                    continue
                if to == FACE and mine == 'redis':
                    continue            # an implementation includes what it fills in
                if mine == 'redis' and rel.endswith('/admin.c') and to in DOORS['tools']:
                    continue            # so does the Redis half of the tool's door
                if RANK[theirs] > RANK[mine]:
                    bad.append('%s:%d includes %s, a floor above (%s over %s)'
                               % (rel, n, to, theirs, mine))
                elif OPEN_TO[theirs] is not None and mine not in OPEN_TO[theirs]:
                    bad.append('%s:%d includes %s: %s reaches %s only through its face'
                               % (rel, n, to, mine, theirs))


def symbols(obj):
    defined, needed = set(), set()
    out = subprocess.run(['nm', obj], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            needed.add(parts[1])
        elif len(parts) == 3 and parts[1] in 'TDBRC':
            defined.add(parts[2])
    return defined, needed


def objects(root, objdir):
    """{source rel path: object path} for the objects meson made of them."""
    by_name = {}
    for o in os.listdir(objdir):
        if o.endswith('.o'):
            by_name[o] = os.path.join(objdir, o)
    out = {}
    for rel in sources(root):
        # meson names an object by its source's path from the target's
        # folder: src_core_hold.c.o for the library, cli.c.o for the tool
        for o in (rel.replace('/', '_') + '.o', os.path.basename(rel) + '.o'):
            if o in by_name and (o.count('_') or rel.startswith('tools/')):
                out[rel] = by_name[o]
                break
    for o in by_name:           # generated: the embedded scripts
        if 'scripts.c' in o and o.startswith('meson-generated'):
            out['src/backend/redis/scripts/scripts.c'] = by_name[o]
    return out


def door_names(root, door):
    names = set()
    if not os.path.exists(os.path.join(root, door)):
        return names
    with open(os.path.join(root, door)) as fh:
        names.update(re.findall(r'\b(dmutex__\w+)\s*\(', fh.read()))
    return names


def cycles(graph):
    """Strongly connected parts of more than one node (Tarjan)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_symbols(root, libdir, tooldir, bad):
    lib = objects(root, libdir)
    tool = objects(root, tooldir)
    if not any(floor(r) == 'core' for r in lib) or not any(floor(r) == 'shim' for r in lib) \
            or not tool:
        bad.append('no library, shim or tool objects in %s, %s' % (libdir, tooldir))
        return
    syms = {r: symbols(o) for r, o in list(lib.items()) + list(tool.items())}
    owner = {}
    for r in lib:
        for s in syms[r][0]:
            owner[s] = r
    graph = {r: set() for r in lib}
    for r in list(lib) + list(tool):
        mine = floor(r)
        for s in sorted(syms[r][1]):
            to = owner.get(s)
            if not to or to == r:
                continue
            if r in graph:
                graph[r].add(to)
            theirs = floor(to)
            if theirs == mine or (r, s) in EXCEPTIONS:
                continue
            if mine in DOORS:
                # the door, and the ground it stands on (base/: time, log)
                if theirs != 'base' and s.startswith('dmutex__') \
                        and s not in door_names(root, next(iter(DOORS[mine]))):
                    bad.append('%s calls %s (%s), not through %s'
                               % (r, s, to, ', '.join(sorted(DOORS[mine]))))
                continue
            if RANK[theirs] > RANK[mine]:
                bad.append('%s calls %s from %s, a floor above' % (r, s, to))
            elif mine in ('core', 'api') and theirs in ('redis', 'net'):
                bad.append('%s calls %s from %s: the core reaches a backend only '
                           'through the table of backend.h' % (r, s, to))
    for part in cycles(graph):
        bad.append('a circle of calls: %s' % ' -> '.join(part))


def main():
    root, libdir, tooldir = sys.argv[1], sys.argv[2], sys.argv[3]
    bad = []
    check_includes(root, bad)
    check_symbols(root, libdir, tooldir, bad)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
