#!/usr/bin/env python3
"""The permission probe (src/backend/redis/scripts/probe.lua) must try every
command the other scripts run, and the ACL documented in
dmutex_client_open(3) must allow each: else a confined user passes the
check at open and fails later, maybe after a script's first write.

usage: check_probe.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
scripts = root / 'src' / 'backend' / 'redis' / 'scripts'
used = set()
for f in scripts.glob('*.lua'):
    if f.name != 'probe.lua':
        used |= set(re.findall(r"redis\.p?call\('([A-Z]+)'", f.read_text()))
probe = (scripts / 'probe.lua').read_text()
tried = set(re.findall(r"\{ '([A-Z]+)'", probe)) | set(re.findall(r"redis\.pcall\('([A-Z]+)'", probe))
man = (root / 'docs' / 'dmutex_client_open.3.scd').read_text()
acl = re.search(r'~dmutex:\* &dmutex:\* -@all ([^\n`*]+(?:\n\t?[^\n`*]+)*)', man)
fail = 0
for cmd in sorted(used - tried):
    print(f'probe.lua does not try {cmd}, which a script uses')
    fail = 1
if not acl:
    print('dmutex_client_open(3) does not show the ACL (~dmutex:* &dmutex:* -@all +...)')
    sys.exit(1)
allowed = {w[1:].upper() for w in acl.group(1).split() if w.startswith('+')}
for cmd in sorted(used - allowed):
    print(f'the ACL in dmutex_client_open(3) lacks +{cmd.lower()}, which a script uses')
    fail = 1
sys.exit(fail)
