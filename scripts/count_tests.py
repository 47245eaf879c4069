#!/usr/bin/env python3
"""Sum individual test cases across meson runs (one testlog.json each):
criterion binaries count each Test(), other tests count once.  A sanitizer
report anywhere in a test's output fails that test.  Last line printed:
'N passed, N failed'."""
import json, re, sys

synth = re.compile(r'Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)')
sanitizer = re.compile(r'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error:')
passed = failed = 0
for path in sys.argv[1:]:
  with open(path) as f:
    for line in f:
        t = json.loads(line)
        out = (t.get('stdout') or '') + (t.get('stderr') or '')
        m = synth.findall(re.sub(r'\x1b\[[0-9;]*m', '', out))
        ok = t.get('result') in ('OK', 'EXPECTEDFAIL')
        if sanitizer.search(out):
            print(f"{path}: {t.get('name')}: sanitizer report", file=sys.stderr)
            failed += 1
            continue
        if m:
            _, p, fl, cr = map(int, m[-1])
            passed += p
            failed += fl + cr
            if not ok and fl + cr == 0:
                failed += 1        # the binary failed outside any test (timeout, crash)
        elif t.get('result') == 'SKIP':
            continue
        elif ok:
            passed += 1
        else:
            failed += 1
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
