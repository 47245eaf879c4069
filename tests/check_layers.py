#!/usr/bin/env python3
"""The core does not depend on the pthread shim (STYLE.md, "Layers"), and
reaches the backend only through its interface; the backend does not know
the core.

Two ways an arrow could run back up from src/ to shim/, both checked:
- an #include in src/ of a header that lives in shim/;
- a symbol the core's object files need that a shim object file defines
  (read with nm from the objects the build made, so it is the code's).
And the core (src/*.c, src/*.h) includes of src/backend/ only the headers
of its interface (BACKEND_FACE): it does not know which topology (one
Redis, Redlock, Sentinel, Cluster) it talks to, nor reach a node or a
connection itself; nor does it read the backend's own fields
(BACKEND_OWN: be->nodes...).  The backend (src/backend/) includes from src/
only its interface (backend.h) and the ground (GROUND: time, log, lock
order), which in turn includes nothing from src/: it is told what it needs
of the client (struct dmutex__backend_cfg), it does not read the client.

usage: check_layers.py SOURCE_ROOT OBJDIR
"""
import os
import re
import subprocess
import sys


def symbols(obj):
    defined, needed = set(), set()
    out = subprocess.run(['nm', obj], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            needed.add(parts[1])
        elif len(parts) == 3 and parts[1] in 'TDBR':
            defined.add(parts[2])
    return defined, needed


# What the core may include from src/backend/ (backend.h itself is in src/).
BACKEND_FACE = {'waiter.h', 'sync.h', 'counters.h'}
# Known exceptions, each with its reason; shrink, never grow.
BACKEND_EXCEPTIONS = set()
# What the backend may include from src/ outside src/backend/.
BACKEND_INTERFACE = {'backend.h'}
GROUND = {'base.h', 'log.h', 'lockorder.h'}
# struct dmutex__backend's fields that are the backend's own.
BACKEND_OWN = re.compile(r'\bbe->(nodes|nnodes|nsub|waiter)\b')


def main():
    root, objdir = sys.argv[1], sys.argv[2]
    bad = []
    # What the build's include path (meson.build's inc) would find.
    search = ['include', '.', 'src', 'src/backend']
    inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
    for d, _, files in os.walk(os.path.join(root, 'src')):
        for f in files:
            if not f.endswith(('.c', '.h')):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                for n, line in enumerate(fh, 1):
                    m = inc.match(line)
                    if not m:
                        continue
                    found = [os.path.realpath(os.path.join(b, m.group(1)))
                             for b in [d] + [os.path.join(root, s) for s in search]
                             if os.path.exists(os.path.join(b, m.group(1)))]
                    if found and found[0].startswith(
                            os.path.realpath(os.path.join(root, 'shim')) + os.sep):
                        bad.append('%s:%d includes %s from shim/' % (
                            os.path.relpath(path, root), n, m.group(1)))
                    backend = os.path.realpath(os.path.join(root, 'src', 'backend'))
                    srcdir = os.path.realpath(os.path.join(root, 'src'))
                    in_backend = os.path.realpath(d).startswith(backend)
                    if (found and in_backend
                            and os.path.dirname(found[0]) == srcdir
                            and os.path.basename(found[0]) not in BACKEND_INTERFACE | GROUND):
                        bad.append('%s:%d includes %s from the core: the backend '
                                   'includes of src/ only %s' % (
                                       os.path.relpath(path, root), n, m.group(1),
                                       ', '.join(sorted(BACKEND_INTERFACE | GROUND))))
                    if (found and d == os.path.join(root, 'src') and f in GROUND
                            and os.path.realpath(found[0]).startswith(srcdir + os.sep)):
                        bad.append('%s:%d includes %s: the ground includes nothing '
                                   'from src/' % (os.path.relpath(path, root), n, m.group(1)))
                    if (found and d == os.path.join(root, 'src')
                            and found[0].startswith(backend + os.sep)
                            and os.path.basename(found[0]) not in BACKEND_FACE
                            and (f, os.path.basename(found[0])) not in BACKEND_EXCEPTIONS):
                        bad.append('%s:%d includes %s from src/backend/: the core '
                                   'reaches the backend through backend.h and %s only' % (
                                       os.path.relpath(path, root), n, m.group(1),
                                       ', '.join(sorted(BACKEND_FACE))))
    for f in sorted(os.listdir(os.path.join(root, 'src'))):
        if not f.endswith(('.c', '.h')):
            continue
        with open(os.path.join(root, 'src', f)) as fh:
            for n, line in enumerate(fh, 1):
                if BACKEND_OWN.search(line):
                    bad.append('src/%s:%d reads a field of the backend\'s own (%s)' % (
                        f, n, BACKEND_OWN.search(line).group(0)))
    objs = [o for o in os.listdir(objdir) if o.endswith('.o')]
    shim_defs = {}
    for o in objs:
        if o.startswith('shim_'):
            for s in symbols(os.path.join(objdir, o))[0]:
                shim_defs[s] = o
    core = [o for o in objs if o.startswith('src_')]
    if not core or not shim_defs:
        print('no core or shim objects in %s' % objdir)
        return 1
    for o in core:
        for s in sorted(symbols(os.path.join(objdir, o))[1]):
            if s in shim_defs:
                bad.append('%s needs %s from %s' % (o, s, shim_defs[s]))
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
