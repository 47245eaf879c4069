#!/usr/bin/env python3
"""Each man page names every option of the code it documents.

The lists come from the code, so an option added without its paragraph
fails here:
  * every URL option in the option table of src/core/url_options.c
    ([OPT_X] = { "name", ... }) must appear in dmutex_client_open(3) as
    *name*;
  * every subcommand in the table of tools/dmutex.c ({ "name", cli_cmd_...)
    and every option of the dmutex command (the struct option tables and
    the getopt_long option strings of tools/*.c) must appear in dmutex(1):
    *name*, *--long*, *-x*.

usage: check_doc_options.py SRCDIR
"""
import glob
import os
import re
import sys


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def url_options(src):
    text = read(os.path.join(src, 'src', 'core', 'url_options.c'))
    text += read(os.path.join(src, 'src', 'core', 'url_parse.h'))   # the enum
    names = re.findall(r'\[\s*OPT_\w+\s*\]\s*=\s*\{\s*"([A-Za-z0-9_]+)"', text)
    # Every enumerator OPT_X (but a count) must have been found in the table:
    # a table written another way must not make this test pass empty.
    enum = re.search(r'enum\s*\{([^}]*\bOPT_\w+[^}]*)\}', text)
    enumerators = [e for e in re.findall(r'\b(OPT_\w+)', enum.group(1))
                   if not re.search(r'COUNT|MAX|NUM|_N$', e)] if enum else []
    return names, enumerators


def cli_options(src):
    longs, shorts, commands = set(), set(), []
    for path in sorted(glob.glob(os.path.join(src, 'tools', '*.c'))):
        text = read(path)
        for name, _arg in re.findall(
                r'\{\s*"([A-Za-z0-9-]+)"\s*,\s*(no|required|optional)_argument\b', text):
            longs.add(name)
        for optstring in re.findall(r'getopt_long\s*\([^,]+,[^,]+,\s*"([^"]*)"', text):
            shorts.update(c for c in optstring if c.isalnum())
        commands += re.findall(r'\{\s*"([a-z][a-z0-9-]*)"\s*,\s*cli_cmd_\w+', text)
    return sorted(longs), sorted(shorts), commands


def main():
    src = sys.argv[1]
    failures = []

    page = read(os.path.join(src, 'docs', 'dmutex_client_open.3.scd'))
    names, enumerators = url_options(src)
    if not names:
        failures.append('no URL option found in src/core/url_options.c: has its option table changed shape?')
    if len(names) < len(enumerators):
        failures.append(f'src/core/url_options.c has {len(enumerators)} OPT_ enumerators but the test read '
                        f'{len(names)} options from its table: update the pattern')
    missing = [n for n in names if f'*{n}*' not in page]
    for n in missing:
        failures.append(f'URL option {n} (src/core/url_options.c) is not in docs/dmutex_client_open.3.scd '
                        f'(as *{n}*)')
    if names and not missing:
        print(f'ok: dmutex_client_open(3) names all {len(names)} URL options: {", ".join(names)}')

    page = read(os.path.join(src, 'docs', 'dmutex.1.scd'))
    longs, shorts, commands = cli_options(src)
    if not longs or not commands:
        failures.append('no option or subcommand found in tools/*.c: have the tables changed shape?')
    missing = [f'*{c}*' for c in commands if f'*{c}*' not in page]
    missing += [f'*--{o}*' for o in longs if f'*--{o}*' not in page]
    missing += [f'*-{o}*' for o in shorts if f'*-{o}*' not in page]
    for m in missing:
        failures.append(f'the dmutex command accepts {m.strip("*")} (tools/*.c), '
                        f'but docs/dmutex.1.scd does not name it as {m}')
    if longs and commands and not missing:
        print(f'ok: dmutex(1) names all {len(commands)} subcommands, {len(longs)} long and '
              f'{len(shorts)} short options')

    for f in failures:
        print('FAIL:', f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
