#!/bin/sh
# Fails if libdmutex.so exports anything but dmutex_*, dcond_*, dsem_*, dbarrier_* and drwlock_* functions.
set -eu
lib=$1
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWw]$/ {print $3}' | grep -Ev '^(dmutex|dcond|dsem|dbarrier|drwlock)_' || true)
count=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | grep -Ec '^(dmutex|dcond|dsem|dbarrier|drwlock)_')
if [ -n "$bad" ]; then
	echo "symbols leaking from $lib:"; echo "$bad"; exit 1
fi
[ "$count" -ge 20 ] || { echo "only $count dmutex_ functions exported"; exit 1; }
echo "ok: $count dmutex_*/dcond_*/dsem_*/dbarrier_*/drwlock_* functions, nothing else"
