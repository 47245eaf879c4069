#!/usr/bin/python3
"""redis-py's Lock (Debian's python3-redis) through dmutex-bench's scenarios 2
and 4.  Run with /usr/bin/python3 (a pyenv python3 lacks Debian's module):

    /usr/bin/python3 redis_py_lock.py URL uncontended ITERATIONS
    /usr/bin/python3 redis_py_lock.py URL handoff PROCS SECONDS

Prints the line protocol of bench/peers.c.  The Lock is used as its users
would: defaults (blocking, sleep=0.1 s between tries), a 10 s lease
(timeout=10), like dmutex's default.

Handoff: each process records, for every hold, when its acquire returned
and when it called release, on CLOCK_MONOTONIC (time.monotonic_ns), the
clock dmutex-bench uses.  Holds do not overlap, so sorted by acquire time
they are the order of the holds; a handoff is a hold whose process differs
from the previous one, from that one's release call to this acquire's return.
"""
import math
import os
import struct
import sys
import time

import redis

LEASE_S = 10


def pct(values, p):
    """Nearest rank, as dmutex-bench computes it."""
    if not values:
        return float('nan')
    v = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(v)))
    return float(v[k - 1])


def uncontended(url, name, iters):
    r = redis.Redis.from_url(url)
    lock = r.lock(name, timeout=LEASE_S)
    warm = iters // 10
    samples = []
    for i in range(iters + warm):
        t0 = time.monotonic_ns()
        if not lock.acquire():
            raise RuntimeError('acquire failed')
        lock.release()
        t1 = time.monotonic_ns()
        if i >= warm:
            samples.append(t1 - t0)
    r.close()
    return pct(samples, 50), pct(samples, 99)


def child(url, name, ready_w, go_r, out_w):
    r = redis.Redis.from_url(url)
    lock = r.lock(name, timeout=LEASE_S)
    os.write(ready_w, b'!')
    stop = struct.unpack('q', os.read(go_r, 8))[0]
    holds = []
    while time.monotonic_ns() < stop:
        if not lock.acquire():
            os._exit(12)
        t_lock = time.monotonic_ns()
        t_unlock = time.monotonic_ns()
        lock.release()
        holds.append((t_lock, t_unlock))
    data = b''.join(struct.pack('qq', a, b) for a, b in holds)
    view = memoryview(data)
    while view:
        n = os.write(out_w, view)
        view = view[n:]
    os._exit(0)


def handoff(url, name, procs, secs):
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    outs, pids = [], []
    for p in range(procs):
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            try:
                child(url, name, ready_w, go_r, out_w)
            finally:
                os._exit(11)
        os.close(out_w)
        outs.append(out_r)
        pids.append(pid)
    for _ in range(procs):
        if os.read(ready_r, 1) != b'!':
            raise RuntimeError('a process did not start')
    stop = time.monotonic_ns() + int(secs * 1e9)
    os.write(go_w, struct.pack('q', stop) * procs)
    holds, counts = [], []
    for p, fd in enumerate(outs):
        chunks = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(fd)
        data = b''.join(chunks)
        mine = [struct.unpack_from('qq', data, 16 * i) for i in range(len(data) // 16)]
        counts.append(len(mine))
        holds.extend((a, b, p) for a, b in mine)
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        if st != 0:
            raise RuntimeError('a process failed: status %d' % st)
    for fd in (ready_r, ready_w, go_r, go_w):
        os.close(fd)
    holds.sort()
    lat, overlaps = [], 0
    for prev, cur in zip(holds, holds[1:]):
        if cur[0] < prev[1]:
            overlaps += 1
        if cur[2] != prev[2]:
            lat.append(cur[0] - prev[1])
    if overlaps:
        print('error mutual exclusion violated: %d overlapping holds' % overlaps)
    total = len(holds)
    span = holds[-1][1] - holds[0][0] if total > 1 else float('nan')
    acq = (total - 1) / span * 1e9 if total > 1 else 0.0
    return (procs, acq, pct(lat, 50), pct(lat, 99),
            min(counts) / total if total else 0.0, max(counts) / total if total else 0.0)


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == 'uncontended':
        url, iters = args[0], int(args[2])
    elif len(args) == 4 and args[1] == 'handoff':
        url, procs, secs = args[0], int(args[2]), float(args[3])
    else:
        sys.exit('usage: redis_py_lock.py URL uncontended ITERATIONS\n'
                 '       redis_py_lock.py URL handoff PROCS SECONDS')
    base = 'peer-py%d' % os.getpid()
    print('name redis-py %s Lock (Debian python3-redis)' % redis.__version__, flush=True)
    if args[1] == 'uncontended':
        med, p99 = uncontended(url, base + ':uncontended', iters)
        print('uncontended %.0f %.0f' % (med, p99), flush=True)
    else:
        h = handoff(url, base + ':handoff', procs, secs)
        print('handoff %d %.1f %.0f %.0f %.4f %.4f' % h, flush=True)


if __name__ == '__main__':
    main()
