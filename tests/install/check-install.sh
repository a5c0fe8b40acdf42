#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds an outside
# program against it twice: with find_package(accrun) and with pkg-config.
# Both must run, and the installed accrun must report its version.
set -euo pipefail
here=$1
src=$(cd "$here/../.." && pwd)
build=${ACCRUN_BUILD_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
"$prefix/bin/accrun" --version | grep -q '^accrun '
test -f "$prefix/include/accrun/accrun.h"
for page in man1/accrun.1 man5/accrun-hostfile.5 man7/accrun.7 man3/libaccrun.3 man3/accrun_put.3; do
  test -f "$prefix/share/man/$page" || { echo "man page $page not installed" >&2; exit 1; }
done

# `man NAME` opens a page for the command, the hostfile format, the library and
# every function accrun.h declares (man3 links lead to the family pages).
fns=$(grep -oE '\baccrun_[a-z0-9_]+ *\(' "$prefix/include/accrun/accrun.h" | tr -d ' (' | sort -u)
for name in accrun accrun-hostfile libaccrun $fns; do
  text=$(man -M "$prefix/share/man" "$name" 2>/dev/null) || { echo "man $name: no page after install" >&2; exit 1; }
  grep -q -- "$name" <<<"$text" || { echo "man $name opens a page that does not name it" >&2; exit 1; }
done

# libaccrun exports the C API and nothing else.
lib=$(find "$prefix" -name 'libaccrun.so.*' -type f | head -1)
extra=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^accrun_' || true)
if [ -n "$extra" ]; then
  echo "libaccrun exports symbols outside the accrun_ API:" >&2; echo "$extra" >&2; exit 1
fi

# The public header must not pull in any dependency's header.
if grep -E '#include *<(pmix|hwloc|mpi|nccl|cuda)' "$prefix/include/accrun/accrun.h"; then
  echo "accrun.h includes a dependency's header" >&2; exit 1
fi

# 1. CMake package.
cmake -S "$here/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$tmp/cmake-build/consumer"

# 2. pkg-config, with the tree moved elsewhere (the .pc file is relocatable).
mv "$prefix" "$tmp/moved"
pcdir=$(dirname "$(find "$tmp/moved" -name accrun.pc | head -1)")
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs accrun)
cc -o "$tmp/pc-consumer" "$here/consumer/consumer.c" $flags
"$tmp/pc-consumer"

# 3. A real program against the moved tree: alone, then as 4 ranks under the installed accrun.
cc -o "$tmp/allreduce" "$src/examples/allreduce.c" $flags
lone=$(env -u PMIX_SERVER_URI2 -u PMIX_SERVER_URI3 -u PMIX_SERVER_URI4 "$tmp/allreduce")
[ "$lone" = "rank 0 of 1: sum 0 ok" ] || { echo "lone allreduce printed: $lone" >&2; exit 1; }
out=$("$tmp/moved/bin/accrun" -n 4 "$tmp/allreduce" | sort)
expect=$(printf 'rank %d of 4: sum 6 ok\n' 0 1 2 3)
[ "$out" = "$expect" ] || { echo "allreduce under accrun -n 4 printed:" >&2; echo "$out" >&2; exit 1; }
echo "install: CMake and pkg-config consumers built and ran; allreduce ran alone and under accrun -n 4"
