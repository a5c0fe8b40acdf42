#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the system packages,
# builds an ASan/UBSan tree and runs the unit and in-process tiers there,
# then builds the optimised tree (-Werror) and runs every test.  The last
# lines printed are ctest's summary of the optimised run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${ACCRUN_JOBS:-2}

"$root/scripts/install-deps.sh"

# Open MPI refuses to run as root without these; ranks under accrun inherit them.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== sanitized build (address,undefined): unit and in-process tiers"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACCRUN_SANITIZE=address,undefined \
  -DACCRUN_WERROR=ON -DACCRUN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/asan -j "$jobs" --target accrun_sanitized_tiers
(cd build/asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
   UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -L '^(unit|inproc)$' -j "$jobs" --output-on-failure --timeout 300) | tail -n 25

echo "== optimised build: every test"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCRUN_WERROR=ON >/dev/null
cmake --build build/release -j "$jobs"
cd build/release
exec ctest -j "$jobs" --output-on-failure --timeout 600
