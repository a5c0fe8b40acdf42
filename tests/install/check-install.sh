#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds an outside
# program against it twice: with find_package(accrun) and with pkg-config.
# Both must run, and the installed accrun must report its version.
set -euo pipefail
here=$1
build=${ACCRUN_BUILD_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
"$prefix/bin/accrun" --version | grep -q '^accrun '
test -f "$prefix/include/accrun/accrun.h"
ls "$prefix"/share/man/man1/accrun.1 >/dev/null

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
echo "install: CMake and pkg-config consumers built and ran"
