#!/usr/bin/env python3
"""Every function libdmutex.so exports has a section 3 man page entry.

    check_man.py LIB BUILT_DOCS SOURCE_DOCS HEADER...

For each function that `nm -D` lists as defined text in LIB:
  - BUILT_DOCS/F.3 exists: a page, or a one-line ".so man3/PAGE.3" whose
    PAGE.3 is a page in BUILT_DOCS;
  - the page's source, SOURCE_DOCS/PAGE.3.scd, names F in its NAME section;
  - every errno the header comment before F's declaration names (following
    "As dmutex_x" to x's comment) appears in that page.
Also: every function a page names in NAME is exported (no stale pages), and
when man(1) is installed, with the pages laid out as installed, `man 3 F`
shows a page naming F, and no page renders with a warning.
"""
import concurrent.futures
import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile

ERRNOS = set(errno.errorcode.values())


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    # "dmutex_lock@@DMUTEX_0": the version script's node follows the name.
    return sorted({f[2].split("@")[0] for f in (l.split() for l in out.splitlines())
                   if len(f) == 3 and f[1] == "T"})


def header_errnos(headers):
    """{function: (set of errnos, set of functions its comment refers to)}"""
    found = {}
    for h in headers:
        text = open(h).read()
        # A declaration, with the comment block (if any) right before it.
        for m in re.finditer(r"(/\*(?:(?!\*/).)*\*/\s*)?DMUTEX_EXPORT[^;(]*?\b(\w+)\s*\(",
                             text, re.S):
            comment = m.group(1) or ""
            words = set(re.findall(r"\bE[A-Z0-9]+\b", comment))
            refs = set(re.findall(r"\bAs (d(?:mutex|cond|sem|barrier|rwlock)_\w+|dmutex_shim_\w+)", comment))
            found[m.group(2)] = (words & ERRNOS, refs)
    return found


def all_errnos(fn, table, seen=None):
    seen = seen or set()
    if fn in seen or fn not in table:
        return set()
    seen.add(fn)
    errs, refs = table[fn]
    errs = set(errs)
    for r in refs:
        errs |= all_errnos(r, table, seen)
    return errs


def name_section(scd):
    m = re.search(r"^# NAME\n(.*?)^# ", scd, re.S | re.M)
    if not m:
        return set()
    names = m.group(1).split(" - ")[0]
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", names))


def rendered(built, funcs):
    """As installed: `man 3 F` finds F for every F, and no page warns.

    man(1) finds each name (`man -w`, no formatting); each distinct page is
    then formatted once, in parallel: most names are ".so" links to a shared
    page, and formatting every name took most of this check's time."""
    problems = []
    with tempfile.TemporaryDirectory() as root:
        for name in os.listdir(built):
            m = re.search(r"\.([137])$", name)
            if m:
                os.makedirs(os.path.join(root, "man" + m.group(1)), exist_ok=True)
                shutil.copy(os.path.join(built, name), os.path.join(root, "man" + m.group(1)))
        env = dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
        wanted = [("3", f) for f in funcs] + [("1", "dmutex"), ("7", "dmutex")]
        def where(sf):
            return subprocess.run(["man", "-w", "-M", root, sf[0], sf[1]],
                                  capture_output=True, text=True, env=env)

        page_of = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            found = list(pool.map(where, wanted))
        for (section, f), p in zip(wanted, found):
            if p.returncode or not p.stdout.strip():
                problems.append(f"man {section} {f}: {p.stderr.strip()[:300] or 'not found'}")
                continue
            path = p.stdout.strip().splitlines()[0]
            with open(path, encoding="utf-8", errors="replace") as fh:
                so = re.match(r"\.so\s+(\S+)", fh.readline())
            page_of[(section, f)] = os.path.join(root, so.group(1)) if so else path

        def show(path):
            p = subprocess.run(["man", "--warnings", "-l", path],
                               capture_output=True, text=True, env=env)
            text = re.sub(r".\x08", "", p.stdout)     # overstrike bold/underline
            return p.returncode, p.stderr.strip(), re.sub(r"\u2010\n\s*", "", text)

        pages = sorted(set(page_of.values()))
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            shown = dict(zip(pages, pool.map(show, pages)))
        for (section, f), path in page_of.items():
            rc, err, text = shown[path]
            if not os.path.exists(path):
                problems.append(f"man {section} {f}: {path} does not exist")
            elif rc or err:
                problems.append(f"man {section} {f}: {err[:300]}")
            elif not re.search(r"NAME\s.*?\b" + re.escape(f) + r"\b", text, re.S):
                problems.append(f"man {section} {f}: the page shown does not name it")
    return problems


def main():
    lib, built, src, headers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    funcs = exported(lib)
    table = header_errnos(headers)
    problems = []
    pages = {}
    for f in funcs:
        path = os.path.join(built, f + ".3")
        if not os.path.exists(path):
            problems.append(f"{f}: no man page {f}.3 (add it to docs/meson.build)")
            continue
        first = open(path).readline().strip()
        page = f
        if first.startswith(".so "):
            page = os.path.basename(first[4:]).removesuffix(".3")
            if not os.path.exists(os.path.join(built, page + ".3")):
                problems.append(f"{f}: {f}.3 points to {page}.3, which was not built")
                continue
        scd_path = os.path.join(src, page + ".3.scd")
        if not os.path.exists(scd_path):
            problems.append(f"{f}: no source {page}.3.scd")
            continue
        scd = pages.setdefault(page, open(scd_path).read())
        if f not in name_section(scd):
            problems.append(f"{f}: not in the NAME section of {page}(3)")
        for e in sorted(all_errnos(f, table)):
            if not re.search(r"\b" + e + r"\b", scd):
                problems.append(f"{f}: the header says it returns {e}; {page}(3) does not")
    for name in sorted(os.listdir(src)):
        if name.endswith(".3.scd"):
            scd = open(os.path.join(src, name)).read()
            for n in sorted(name_section(scd) - set(funcs)):
                problems.append(f"{name}: names {n}, which the library does not export")
    if shutil.which("man"):
        problems += rendered(built, funcs)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok: {len(funcs)} exported functions, each with a section 3 entry listing its errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
