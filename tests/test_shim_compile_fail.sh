#!/bin/sh
# No silent miscompile: pthread calls that have no meaning for a distributed
# mutex fail to compile through the shim, with a message saying why: in
# C11, and in C99 and C89 with -pedantic (there glibc makes _Static_assert a
# macro that is a syntax error inside a struct; the shim says it otherwise).
# usage: test_shim_compile_fail.sh SRCDIR CC [CC ARGS...]
set -eu
src=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
compile() {
	"$@" $std -Wall -Wextra -Werror -I"$src/shim/include" -I"$src/include" \
		-c "$src/tests/test_shim_fail.c" -o "$dir/out.o" >"$dir/log" 2>&1
}
fail=0
for std in "-std=c11 -pedantic" "-std=c99 -pedantic" "-std=c89 -pedantic"; do
	# The control: the same file without the bad call compiles.
	if ! compile "$@" -DUSE=0; then
		cat "$dir/log"; echo "FAIL: $std: the control does not compile"; fail=1; continue
	fi
	for case in "1:pthread_mutex_setprioceiling is not available through the dmutex pthread shim: priority ceilings" \
	            "2:pthread_mutex_getprioceiling is not available through the dmutex pthread shim" \
	            "3:pthread_mutexattr_setprioceiling is not available through the dmutex pthread shim" \
	            "4:pthread_mutex_init__only_callable_through_the_dmutex_shim"; do
		n=${case%%:*}; want=${case#*:}
		if compile "$@" -DUSE="$n"; then
			echo "FAIL: $std: case $n compiled"; fail=1
		elif ! grep -qF "$want" "$dir/log"; then
			cat "$dir/log"; echo "FAIL: $std: case $n did not say: $want"; fail=1
		else
			echo "ok: $std: case $n: $(grep -m1 -F "$want" "$dir/log" | sed 's/^.*error: //')"
		fi
	done
done
exit $fail
