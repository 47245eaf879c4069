#!/bin/sh
# Every public header compiles included first and alone, with -pedantic
# -Werror, in each language version it claims (include/dmutex.h says which):
#   include/dmutex.h    C89 (with glibc's <stdint.h>), C99, C11, C17, GNU C11;
#                       C++98, C++11, C++17 (a C++ namespace `dmutex` beside it)
#   shim/include/dmutex_shim.h  C99, C11, C++11
#   shim/include/pthread.h      C99, C11; in C++ it stops with its #error, on purpose
#   shim/include/threads.h      C11, C17 (C11's header)
# The programs also use what a caller compares with (EOWNERDEAD from
# <errno.h>) and the static initializers at file scope.
# usage: check_header.sh SRCDIR CC [CC ARGS...]   (C++: c++ from PATH, if any)
set -eu
src=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
warn="-pedantic -Wall -Wextra -Werror"

cat > "$dir/dmutex.c" <<'PROG'
#include <dmutex.h>
static dmutex_t m = DMUTEX_INITIALIZER("x");
static dcond_t c = DCOND_INITIALIZER("y");
int main(void)
{
	const struct timespec *never = 0;
	int err = dmutex_lock(&m);
	if (err == EOWNERDEAD || err == ENOTRECOVERABLE || err == ENOLCK)
		return dmutex_timedlock(&m, never) == ETIMEDOUT;
	return dcond_signal(&c) == EIO;
}
PROG
cat > "$dir/dmutex.cc" <<'PROG'
#include <dmutex.h>
namespace dmutex { int later; }     /* the C++ header's namespace */
static dmutex_t m = DMUTEX_INITIALIZER("x");
int main()
{
	int err = dmutex_lock(&m);
	return err == EOWNERDEAD ? dmutex::later : dmutex_unlock(&m);
}
PROG
cat > "$dir/shim.c" <<'PROG'
#include <dmutex_shim.h>
int main(void)
{
	dmutex_t m;
	return dmutex_shim_mutex_init(&m, 0, "here:1") == EINVAL;
}
PROG
cat > "$dir/pthread.c" <<'PROG'
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int main(void)
{
	int err = pthread_mutex_lock(&m);
	return err == EOWNERDEAD ? 1 : pthread_mutex_unlock(&m);
}
PROG
cat > "$dir/threads.c" <<'PROG'
#include <threads.h>
int main(void)
{
	mtx_t m;
	cnd_t c;
	if (mtx_init(&m, mtx_timed | mtx_recursive) != thrd_success || cnd_init(&c) != thrd_success)
		return 1;
	return mtx_trylock(&m) == thrd_busy ? 2 : mtx_unlock(&m);
}
PROG

# compile LABEL FILE COMPILER... : must compile
compile() {
	label=$1; file=$2; shift 2
	if "$@" -I"$src/shim/include" -I"$src/include" -c "$dir/$file" -o "$dir/out.o" >"$dir/log" 2>&1; then
		echo "ok: $label"
	else
		cat "$dir/log"; echo "FAIL: $label"; fail=1
	fi
}

for std in c89 c99 c11 c17 gnu11; do
	compile "dmutex.h alone, -std=$std" dmutex.c "$@" -std=$std $warn
done
for std in c99 c11; do
	compile "dmutex_shim.h alone, -std=$std" shim.c "$@" -std=$std $warn
	compile "shim pthread.h alone, -std=$std" pthread.c "$@" -std=$std $warn
done
for std in c11 c17; do
	compile "shim threads.h alone, -std=$std" threads.c "$@" -std=$std $warn
done

if command -v c++ >/dev/null 2>&1; then
	cp "$dir/shim.c" "$dir/shim.cc"
	cp "$dir/pthread.c" "$dir/pthread.cc"
	for std in c++98 c++11 c++17; do
		compile "dmutex.h alone, -std=$std, beside namespace dmutex" dmutex.cc c++ -std=$std $warn
	done
	compile "dmutex_shim.h alone, -std=c++11" shim.cc c++ -std=c++11 $warn
	if c++ -std=c++11 -I"$src/shim/include" -I"$src/include" -c "$dir/pthread.cc" -o "$dir/out.o" \
			>"$dir/log" 2>&1; then
		echo "FAIL: shim pthread.h compiled in C++ (it must stop with its #error)"; fail=1
	elif grep -q 'error: #error "the dmutex pthread shim is for C' "$dir/log"; then
		echo "ok: shim pthread.h in C++ stops with its #error"
	else
		cat "$dir/log"; echo "FAIL: shim pthread.h in C++ failed, but not with its #error"; fail=1
	fi
else
	echo "skip: no c++ compiler"
fi
exit $fail
