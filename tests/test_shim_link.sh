#!/bin/sh
# The one-flag promise, checked on the build's products:
#  - dmutex-shim.pc puts the shim's directory first on the include path and
#    links libdmutex;
#  - a program built through the shim calls no pthread mutex or condition
#    variable function, nor C11 mtx_ or cnd_ one, any more: every one went
#    to dmutex.
# usage: test_shim_link.sh PCDIR BINARY...
set -eu
pcdir=$1; shift
out=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dmutex-shim)
first=$(printf '%s\n' $out | grep '^-I' | head -n 1)
case $first in
*/dmutex-shim) echo "ok: first include dir: $first" ;;
*) echo "FAIL: the first include dir is '$first', not the shim's: $out"; exit 1 ;;
esac
printf '%s\n' $out | grep -qx -- '-ldmutex' || { echo "FAIL: no -ldmutex in: $out"; exit 1; }
echo "ok: links -ldmutex"
for bin in "$@"; do
	left=$(nm -D --undefined-only "$bin" | awk '{print $2}' | grep -E '^(pthread_(mutex|mutexattr|cond|condattr)_|mtx_|cnd_)' || true)
	if [ -n "$left" ]; then
		echo "FAIL: $bin still calls:"; echo "$left"; exit 1
	fi
	n=$(nm -D --undefined-only "$bin" | grep -Ec ' (dmutex|dcond)_' || true)
	[ "$n" -gt 0 ] || { echo "FAIL: $bin calls no dmutex function"; exit 1; }
	echo "ok: $(basename "$bin"): $n dmutex/dcond calls, no pthread mutex/cond or C11 mtx/cnd call"
done
