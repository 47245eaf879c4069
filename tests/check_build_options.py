#!/usr/bin/env python3
"""The build's options work as README documents them.

1. A fresh `meson setup` with the defaults prints no warning: the
   meson_version the project declares covers every feature it uses.
2. `-Dtests=false -Dbench=false -Dman=disabled` configures where criterion
   cannot be found (pkg-config sees every .pc file of this machine but
   criterion's), with no warning, and leaves out the tests, the benchmark
   and the man pages.
3. Every option of meson_options.txt has a description (`meson configure`
   shows it) and is named in README.md as -DNAME.
4. Installed into a prefix, the library serves what README promises:
   a C program with <dmutex.h>, a C++ program with <dmutex.hpp> and a
   pthread program through the shim each compile and link with nothing
   but `pkg-config --cflags --libs dmutex` (or dmutex-shim).
5. README's quick start `meson setup` line builds what it says, the
   library, the dmutex command and the examples: no benchmark, no tests.

usage: check_build_options.py MESON SRCDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def setup(meson, src, build, args, env=None):
    p = subprocess.run([meson, 'setup', build, src] + args, capture_output=True, text=True,
                       env=env)
    return p.returncode, p.stdout + p.stderr


def warnings(out):
    return [l for l in out.splitlines() if 'WARNING' in l or 'DEPRECATION' in l]


def introspect(meson, build, what):
    p = subprocess.run([meson, 'introspect', '--' + what, build], capture_output=True,
                       text=True, check=True)
    return json.loads(p.stdout)


def pc_dirs():
    out = subprocess.run(['pkg-config', '--variable', 'pc_path', 'pkg-config'],
                         capture_output=True, text=True, check=True).stdout.strip()
    return [d for d in out.split(':') if os.path.isdir(d)]


PROGRAMS = {
    'c.c': ('cc', 'dmutex', '''#include <dmutex.h>
int main(void) { dmutex_t m; return dmutex_init(&m, "x", NULL) == 12345; }
'''),
    'cpp.cpp': ('c++', 'dmutex', '''#include <dmutex.hpp>
#include <mutex>
int main() { dmutex::mutex m("x"); std::lock_guard<dmutex::mutex> g(m); return 0; }
'''),
    'shim.c': ('cc', 'dmutex-shim', '''#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int main(void) { pthread_mutex_lock(&m); return pthread_mutex_unlock(&m); }
'''),
}


def installed_tree(meson, src, tmp):
    prefix = os.path.join(tmp, 'prefix')
    build = os.path.join(tmp, 'install')
    rc, out = setup(meson, src, build, ['--prefix=' + prefix, '-Dtests=false',
                                        '-Dbench=false', '-Dman=disabled'])
    if rc:
        return ['meson setup --prefix failed:\n' + out]
    p = subprocess.run([meson, 'install', '-C', build], capture_output=True, text=True)
    if p.returncode:
        return ['meson install failed:\n' + p.stdout + p.stderr]
    pcs = [d for d, _, f in os.walk(prefix) if 'dmutex.pc' in f]
    if not pcs:
        return ['meson install wrote no dmutex.pc under ' + prefix]
    env = dict(os.environ, PKG_CONFIG_PATH=pcs[0])
    failures = []
    for name, (cc, pkg, text) in PROGRAMS.items():
        path = os.path.join(tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        flags = subprocess.run(['pkg-config', '--cflags', '--libs', pkg], env=env,
                               capture_output=True, text=True)
        if flags.returncode:
            failures.append(f'pkg-config {pkg} failed: {flags.stderr.strip()}')
            continue
        p = subprocess.run([cc, path, '-o', path + '.out'] + flags.stdout.split(),
                           capture_output=True, text=True)
        if p.returncode:
            failures.append(f'{name} does not build against the installed tree '
                            f'({cc} ... {flags.stdout.strip()}):\n{p.stdout}{p.stderr}')
    if not failures:
        print('ok: installed into a prefix, ' + ', '.join(PROGRAMS)
              + ' build with pkg-config alone')
    return failures


def quick_start(meson, src, tmp):
    readme = open(os.path.join(src, 'README.md'), encoding='utf-8').read()
    start = readme.find('## Quick start')
    m = re.search(r'^meson setup build((?: -D\S+)*) && ninja -C build', readme[start:], re.M)
    if start < 0 or not m:
        return ["README's quick start has no line 'meson setup build [-D...] && ninja -C build'"]
    args = m.group(1).split()
    build = os.path.join(tmp, 'quick')
    rc, out = setup(meson, src, build, args)
    if rc:
        return ["the quick start's meson setup " + ' '.join(args) + ' failed:\n' + out]
    names = {t['name'] for t in introspect(meson, build, 'targets')}
    extra = sorted(n for n in names if n.startswith('test_') or n == 'dmutex-bench')
    missing = sorted({'dmutex', 'bank-shim'} - names)
    if extra or missing:
        return ["the quick start's build (" + ' '.join(args) + ') builds ' + ', '.join(extra)
                + (' and lacks ' + ', '.join(missing) if missing else '')]
    print("ok: the quick start's build (" + ' '.join(args) + f') makes {len(names)} targets: '
          'the library, the dmutex command and the examples, no benchmark or tests')
    return []


def main():
    meson, src = sys.argv[1], sys.argv[2]
    failures = []
    tmp = tempfile.mkdtemp(prefix='dmutex-options-')
    try:
        # 1. defaults
        b1 = os.path.join(tmp, 'default')
        rc, out = setup(meson, src, b1, [])
        default_ok = rc == 0
        if rc:
            failures.append('meson setup with the defaults failed:\n' + out)
        elif warnings(out):
            failures.append('meson setup with the defaults warns:\n  ' + '\n  '.join(warnings(out)))
        else:
            print('ok: a fresh meson setup with the defaults prints no warning')

        # 2. without tests, bench and man pages, criterion out of sight
        pcdir = os.path.join(tmp, 'pc')
        os.mkdir(pcdir)
        for d in pc_dirs():
            for f in os.listdir(d):
                if f.endswith('.pc') and not f.startswith('criterion') and \
                        not os.path.exists(os.path.join(pcdir, f)):
                    os.symlink(os.path.join(d, f), os.path.join(pcdir, f))
        env = dict(os.environ, PKG_CONFIG_LIBDIR=pcdir, PKG_CONFIG_PATH='')
        b2 = os.path.join(tmp, 'minimal')
        rc, out = setup(meson, src, b2, ['-Dtests=false', '-Dbench=false', '-Dman=disabled'], env)
        if rc:
            failures.append('meson setup -Dtests=false -Dbench=false -Dman=disabled failed '
                            'without criterion:\n' + out)
        else:
            if warnings(out):
                failures.append('the minimal setup warns:\n  ' + '\n  '.join(warnings(out)))
            if re.search(r'criterion|Program scdoc found', out, re.I):
                failures.append('the minimal setup still looks for criterion or scdoc:\n' + out)
            names = {t['name'] for t in introspect(meson, b2, 'targets')}
            left = sorted(n for n in names if n.startswith('test_') or n == 'dmutex-bench'
                          or re.fullmatch(r'[a-z_]+\.[1-8]', n))
            if left:
                failures.append('the minimal setup still builds ' + ', '.join(left))
            if 'dmutex' not in names:
                failures.append('the minimal setup lost the library or the dmutex command: '
                                + ', '.join(sorted(names)))
            if not failures:
                print('ok: -Dtests=false -Dbench=false -Dman=disabled configures without '
                      f'criterion or scdoc: {len(names)} targets, none of them tests, '
                      'bench or man pages')

        # 3. described, and documented in README
        if default_ok:
            readme = open(os.path.join(src, 'README.md'), encoding='utf-8').read()
            opts = [o for o in introspect(meson, b1, 'buildoptions') if o['section'] == 'user']
            if not opts:
                failures.append('no project option found')
            for o in opts:
                if not o.get('description', '').strip():
                    failures.append(f"option {o['name']} has no description")
                if f"-D{o['name']}" not in readme:
                    failures.append(f"option {o['name']} is not in README.md (as -D{o['name']})")
            if opts and not failures:
                print('ok: every option is described and in README.md: '
                      + ', '.join('-D' + o['name'] for o in opts))
        # 4. the installed tree
        if default_ok:
            failures += installed_tree(meson, src, tmp)
        # 5. the quick start's build
        failures += quick_start(meson, src, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print('FAIL:', f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
