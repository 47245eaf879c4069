#!/bin/sh
# The public header compiles alone with -std=c11 -pedantic -Werror, and in C++.
set -eu
hdr=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#include "%s"\nstatic dmutex_t m = DMUTEX_INITIALIZER("x");\nint main(void) { return dmutex_lock(&m); }\n' "$hdr" > "$dir/c.c"
cc -std=c11 -pedantic -Wall -Wextra -Werror -c "$dir/c.c" -o "$dir/c.o"
cp "$dir/c.c" "$dir/cxx.cc"
if command -v c++ >/dev/null 2>&1; then
	c++ -std=c++11 -pedantic -Wall -Wextra -Werror -c "$dir/cxx.cc" -o "$dir/cxx.o"
fi
echo "ok: header is strict C11 and C++ clean"
