#!/usr/bin/env python3
"""Code in the docs compiles, and runs where it is a program.

README.md and docs/*.md (Markdown): a block fenced ```c is a whole C translation unit:
it is compiled, and if it defines main it is linked with libdmutex and run
against a redis-server this test starts (DMUTEX_URL points at it), and
must exit with 0.  A block fenced ```c fragment is a piece of a program
and is not compiled.  A block with another or no language that starts
with #include is an error: say which of the two it is.

A block fenced ```sh build-tree (README's quick start, and using the build
tree without installing) is run by bash -e from a scratch directory that
holds `build` (this build directory) and `prog.c` (an ordinary pthread
program, as "prog.c any pthread program" says), with DMUTEX_URL pointing
at the test's redis-server and `cc` the compiler the C blocks use; what it
started in the background is waited for, and everything must exit 0.

Man pages (docs/*.scd): scdoc allows nothing after the ``` that opens a
literal block, so a block whose first line is an #include is a whole
translation unit (every SYNOPSIS is one: compiling it checks the
prototypes against the header) and is treated as above; a block preceded
by the scdoc comment line "; c fragment" is left alone; other blocks are
text (URLs, shell commands, pieces of code).

usage: check_doc_code.py SRCDIR LIBDMUTEX CC [CC ARGS...]
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CFLAGS = ['-std=c11', '-pedantic', '-Wall', '-Wextra', '-Werror',
          # A SYNOPSIS declares what it does not use.
          '-Wno-unused-variable', '-Wno-unused-function']


def markdown_blocks(path):
    """(line, info, text) for each fenced block."""
    blocks, info, start, buf = [], None, 0, []
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'^(\s*)```(.*)$', line.rstrip('\n'))
            if info is None and m:
                info, start, buf = m.group(2).strip(), n, []
            elif info is not None and m and not m.group(2).strip():
                blocks.append((start, info, ''.join(buf)))
                info = None
            elif info is not None:
                buf.append(line)
    return blocks


def scdoc_blocks(path):
    """(line, marker, text): marker is the scdoc comment line before it."""
    blocks, inside, start, buf, prev = [], False, 0, [], ''
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            s = line.rstrip('\n')
            if s.strip() == '```':
                if inside:
                    blocks.append((start, marker, ''.join(buf)))
                    inside = False
                else:
                    inside, start, buf = True, n, []
                    marker = prev[1:].strip() if prev.startswith(';') else ''
                continue
            if inside:
                buf.append(line)
            elif s.strip():
                prev = s.strip()
    return blocks


def unescape_scdoc(text):
    # In a literal block scdoc still reads \\ as one backslash.
    return text.replace('\\\\', '\\')


def first_line(text):
    for l in text.splitlines():
        if l.strip():
            return l.strip()
    return ''


# The program a build-tree block compiles as "prog.c": it must come
# through the shim, and its threads' counts must add up.
PROG_C = r'''#include <pthread.h>
#include <stdio.h>

#ifndef DMUTEX_SHIM_PTHREAD_H
#error "<pthread.h> is not the dmutex shim's"
#endif

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void *
work(void *arg)
{
	for (int i = 0; i < 50; i++) {
		pthread_mutex_lock(&m);
		counter++;
		pthread_mutex_unlock(&m);
	}
	return arg;
}

int
main(void)
{
	pthread_t t[4];

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	return counter != 200;
}
'''


def run_build_tree(where, text, tmp, i, builddir, cc, env):
    """A ```sh build-tree block: None, or why it failed."""
    d = os.path.join(tmp, f'tree{i}')
    os.makedirs(os.path.join(d, 'bin'))
    os.symlink(builddir, os.path.join(d, 'build'))
    with open(os.path.join(d, 'prog.c'), 'w') as f:
        f.write(PROG_C)
    wrapper = os.path.join(d, 'bin', 'cc')
    # The compiler by its full path: a wrapper named cc would find itself.
    real = [shutil.which(cc[0], path=env.get('PATH')) or cc[0]] + cc[1:]
    with open(wrapper, 'w') as f:
        f.write('#!/bin/sh\nexec ' + ' '.join(shlex.quote(a) for a in real) + ' "$@"\n')
    os.chmod(wrapper, 0o755)
    env = dict(env, PATH=os.path.join(d, 'bin') + os.pathsep + env.get('PATH', ''))
    try:
        p = subprocess.run(['bash', '-e', '-c', text + '\nwait\n'], capture_output=True,
                           text=True, timeout=60, env=env, cwd=d)
    except subprocess.TimeoutExpired:
        return f'{where}: still running after 60 s'
    if p.returncode:
        return f'{where}: exited with {p.returncode}:\n{p.stdout}{p.stderr}--- the block:\n{text}'
    return None


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, tmp):
        self.dir = os.path.join(tmp, 'redis')
        os.mkdir(self.dir)
        self.port = free_port()
        self.proc = subprocess.Popen(
            ['redis-server', '--port', str(self.port), '--bind', '127.0.0.1', '--save', '',
             '--appendonly', 'no', '--dir', self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(('127.0.0.1', self.port), timeout=1) as c:
                    c.sendall(b'PING\r\n')
                    if c.recv(16).startswith(b'+PONG'):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError('redis-server did not start')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def main():
    src, lib, cc = sys.argv[1], sys.argv[2], sys.argv[3:]
    docs = [os.path.join(src, 'README.md')] + sorted(
        os.path.join(src, 'docs', f) for f in os.listdir(os.path.join(src, 'docs'))
        if f.endswith('.scd') or f.endswith('.md'))
    units, failures, fragments, trees = [], [], 0, []
    for path in docs:
        rel = os.path.relpath(path, src)
        if path.endswith('.md'):
            for line, info, text in markdown_blocks(path):
                words = info.split()
                if words[:1] == ['c']:
                    if words[1:] == ['fragment']:
                        fragments += 1
                    elif words[1:]:
                        failures.append(f'{rel}:{line}: unknown marker ```{info} '
                                        '(```c or ```c fragment)')
                    else:
                        units.append((f'{rel}:{line}', text))
                elif words == ['sh', 'build-tree']:
                    trees.append((f'{rel}:{line}', text))
                elif first_line(text).startswith('#include'):
                    failures.append(f'{rel}:{line}: a block that starts with #include is '
                                    'marked neither ```c (compiled) nor ```c fragment')
        else:
            for line, marker, text in scdoc_blocks(path):
                if marker == 'c fragment':
                    fragments += 1
                elif marker.startswith('c') and marker.split()[0] == 'c':
                    failures.append(f'{rel}:{line}: unknown marker "; {marker}" '
                                    '(only "; c fragment")')
                elif first_line(text).startswith('#include'):
                    units.append((f'{rel}:{line}', unescape_scdoc(text)))

    tmp = tempfile.mkdtemp(prefix='dmutex-doc-code-')
    redis = None
    try:
        libdir = os.path.dirname(os.path.abspath(lib))
        ran = 0
        for i, (where, text) in enumerate(units):
            c = os.path.join(tmp, f'unit{i}.c')
            with open(c, 'w') as f:
                f.write(text)
            has_main = re.search(r'^(?:int\s+)?main\s*\(', text, re.M)
            inc = ['-I' + os.path.join(src, 'include')]
            if has_main:
                exe = os.path.join(tmp, f'unit{i}')
                cmd = cc + CFLAGS + inc + [c, '-o', exe, lib, '-Wl,-rpath,' + libdir]
            else:
                cmd = cc + CFLAGS + inc + ['-c', c, '-o', os.path.join(tmp, f'unit{i}.o')]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                failures.append(f'{where}: does not compile:\n{p.stdout}{p.stderr}'
                                f'--- the block:\n{text}')
                continue
            if not has_main:
                print(f'ok: {where}: compiles')
                continue
            if redis is None:
                redis = Redis(tmp)
            env = dict(os.environ, DMUTEX_URL=f'redis://127.0.0.1:{redis.port}',
                       DMUTEX_LOG='warn')
            try:
                p = subprocess.run([exe], capture_output=True, text=True, timeout=30, env=env,
                                   cwd=tmp)
            except subprocess.TimeoutExpired:
                failures.append(f'{where}: still running after 30 s')
                continue
            if p.returncode:
                failures.append(f'{where}: exited with {p.returncode}:\n{p.stdout}{p.stderr}')
            else:
                ran += 1
                print(f'ok: {where}: compiles and runs')
        for i, (where, text) in enumerate(trees):
            if redis is None:
                redis = Redis(tmp)
            env = dict(os.environ, DMUTEX_URL=f'redis://127.0.0.1:{redis.port}',
                       DMUTEX_LOG='warn')
            why = run_build_tree(where, text, tmp, i, libdir, cc, env)
            if why:
                failures.append(why)
            else:
                print(f'ok: {where}: runs in the build tree')
    finally:
        if redis:
            redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print('FAIL:', f)
    if not units:
        print('FAIL: no code block found to compile')
        return 1
    print(f'{len(units)} blocks compiled ({ran} run), {len(trees)} build-tree blocks run, '
          f'{fragments} fragments left alone')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
