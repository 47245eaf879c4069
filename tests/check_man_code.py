#!/usr/bin/env python3
"""The man pages say what the code does (issue 29): the shim's pages once
said read-write locks, spin locks and barriers stay local while the code
distributes them, and left out an environment variable.

    check_man_code.py SRCDIR

Checks, on the scdoc sources (no build needed):
  - every name a shim header maps (`#define pthread_x ...`, `sem_x`,
    `mtx_x`, `cnd_x`, `PTHREAD_X`) appears in a shim page (dmutex_shim*.3),
    in full, as `\\_suffix` after a name of its family, or as a family
    `pthread_spin_\\*`;
  - every call the shim leaves to the C library that a page says is kept
    local is not one the headers map, and no shim page says a kind of object
    the headers map "stays local" or "stay local";
  - every DMUTEX_* variable the library, the shim or the tool reads from the
    environment is in the ENVIRONMENT section of dmutex(7), and the shim's
    (read in shim/) in that of dmutex_shim(3).
"""
import glob
import os
import re
import sys

MAPPED = re.compile(r"^#\s*define\s+((?:pthread|sem|mtx|cnd)_\w+|PTHREAD_\w+)\b", re.M)
# the names a shim header maps, and the kinds of object they are
KINDS = {
    "mutex": r"pthread_mutex_lock|mtx_lock",
    "condition variable": r"pthread_cond_wait|cnd_wait",
    "read-write lock": r"pthread_rwlock_rdlock",
    "spin lock": r"pthread_spin_lock",
    "barrier": r"pthread_barrier_wait",
    "semaphore": r"sem_wait",
}


def mapped_names(src):
    names = set()
    for h in glob.glob(os.path.join(src, "shim", "include", "*.h")):
        for m in MAPPED.finditer(open(h).read()):
            n = m.group(1)
            # the helper macros of a refused call, not names a program uses
            if "__" in n or n.endswith("_only_callable_through_the_dmutex_shim"):
                continue
            names.add(n)
    return names


def page_prefixes(text):
    """Families a page names whole: `pthread_spin_\\*` (scdoc's escaped *)."""
    return set(re.findall(r"\b([A-Za-z][A-Za-z0-9_]*_)\\\*", text))


def page_names(text):
    """Identifiers a page names: in full, and `X_a_b, \\_c, \\_d` as X_a_c..."""
    text = text.replace("\\_", "\x00")
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text.replace("\x00", " ")))
    # a list of suffixes after a full name: the full name's family (its last
    # _component dropped) with each suffix
    for m in re.finditer(r"([A-Za-z][A-Za-z0-9_]*_[A-Za-z0-9]+)\**((?:\s*(?:,|and|or)\s*\**\x00[A-Za-z0-9_]+\**)+)",
                         text):
        family = m.group(1).rsplit("_", 1)[0]
        for suffix in re.findall(r"\x00([A-Za-z0-9_]+)", m.group(2)):
            names.add(family + "_" + suffix)
    return names


def section(text, title):
    m = re.search(r"^# " + title + r"\n(.*?)(?=^# |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


def env_read(src, dirs):
    found = set()
    for d in dirs:
        for f in glob.glob(os.path.join(src, d, "**", "*.c"), recursive=True):
            found |= set(re.findall(r'getenv\(\s*"(DMUTEX_\w+)"', open(f).read()))
    return found


def main():
    src = sys.argv[1]
    docs = os.path.join(src, "docs")
    shim_pages = {p: open(p).read() for p in glob.glob(os.path.join(docs, "dmutex_shim*.3.scd"))}
    problems = []

    documented, families = set(), set()
    for text in shim_pages.values():
        documented |= page_names(text)
        families |= page_prefixes(text)
    names = mapped_names(src)
    for n in sorted(n for n in names - documented if not any(n.startswith(f) for f in families)):
        problems.append(f"{n}: mapped by shim/include but named in no dmutex_shim*(3) page")

    mapped_kinds = [k for k, pat in KINDS.items() if any(re.fullmatch(pat, n) for n in names)]
    for path, text in shim_pages.items():
        flat = re.sub(r"\s+", " ", text)
        for sentence in re.split(r"(?<=[.;:])\s", flat):
            if not re.search(r"\bstays? local\b", sentence):
                continue
            for kind in mapped_kinds:
                if re.search(r"\b" + kind.replace("-", "[- ]") + r"s?\b", sentence, re.I) and \
                        not re.search(r"\bDMUTEX_SHIM_LOCAL|match|local\.|with the same|is local|are local",
                                      sentence):
                    problems.append(f"{os.path.basename(path)}: says {kind}s stay local, but the shim "
                                    f"maps them: \"{sentence.strip()[:160]}\"")

    seven = section(open(os.path.join(docs, "dmutex.7.scd")).read(), "ENVIRONMENT")
    shim3 = section(shim_pages.get(os.path.join(docs, "dmutex_shim.3.scd"), ""), "ENVIRONMENT")
    for var in sorted(env_read(src, ["src", "shim", "tools"])):
        if not re.search(r"\*" + var + r"\*", seven):
            problems.append(f"{var}: read from the environment, missing in ENVIRONMENT of dmutex(7)")
    for var in sorted(env_read(src, ["shim"])):
        if var not in shim3:
            problems.append(f"{var}: read by the shim, missing in ENVIRONMENT of dmutex_shim(3)")

    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"ok: {len(names)} mapped names documented; environment sections complete")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
