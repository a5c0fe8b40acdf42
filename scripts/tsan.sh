#!/usr/bin/env bash
# ThreadSanitizer build of the unit and in-process tiers (not run in CI:
# libpmix and libmpi are not instrumented, see tests/tsan.supp).
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install-deps.sh"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACCRUN_SANITIZE=thread \
  -DACCRUN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/tsan -j "${ACCRUN_JOBS:-2}" --target accrun_sanitized_tiers
cd build/tsan
TSAN_OPTIONS="suppressions=$PWD/../../tests/tsan.supp second_deadlock_stack=1" \
  exec ctest -L '^(unit|inproc)$' --output-on-failure
