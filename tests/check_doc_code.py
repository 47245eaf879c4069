#!/usr/bin/env python3
"""Code in the docs compiles, and runs where it is a program.

README.md and docs/*.md (Markdown): a block fenced ```c is a whole C translation unit:
it is compiled, and if it defines main it is linked with libdmutex and run
against a redis-server this test starts (DMUTEX_URL points at it), and
must exit with 0.  A block fenced ```c fragment is a piece of a program
and is not compiled.  A block with another or no language that starts
with #include is an error: say which of the two it is.

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
    units, failures, fragments = [], [], 0
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
    finally:
        if redis:
            redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print('FAIL:', f)
    if not units:
        print('FAIL: no code block found to compile')
        return 1
    print(f'{len(units)} blocks compiled ({ran} run), {fragments} fragments left alone')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
