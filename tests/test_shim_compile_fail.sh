#!/bin/sh
# No silent miscompile: pthread calls that have no meaning for a distributed
# mutex fail to compile through the shim, with a message saying why.
# usage: test_shim_compile_fail.sh SRCDIR CC [CC ARGS...]
set -eu
src=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
compile() {
	"$@" -std=c11 -pedantic -Wall -Wextra -Werror -I"$src/shim" -I"$src/include" \
		-c "$src/tests/test_shim_fail.c" -o "$dir/out.o" >"$dir/log" 2>&1
}
# The control: the same file without the bad call compiles.
if ! compile "$@" -DUSE=0; then
	cat "$dir/log"; echo "FAIL: the control does not compile"; exit 1
fi
fail=0
for case in "1:pthread_mutex_setprioceiling is not available through the dmutex pthread shim: priority ceilings" \
            "2:pthread_mutex_getprioceiling is not available through the dmutex pthread shim" \
            "3:pthread_mutexattr_setprioceiling is not available through the dmutex pthread shim" \
            "4:pthread_mutex_init__only_callable_through_the_dmutex_shim"; do
	n=${case%%:*}; want=${case#*:}
	if compile "$@" -DUSE="$n"; then
		echo "FAIL: case $n compiled"; fail=1
	elif ! grep -qF "$want" "$dir/log"; then
		cat "$dir/log"; echo "FAIL: case $n did not say: $want"; fail=1
	else
		echo "ok: case $n: $(grep -m1 -F "$want" "$dir/log" | sed 's/^.*error: //')"
	fi
done
exit $fail
