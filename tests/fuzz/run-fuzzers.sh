#!/usr/bin/env bash
# run-fuzzers.sh [BUILD_DIR] — builds the libFuzzer targets with clang in
# BUILD_DIR (default build/fuzz-clang; the libraries instrumented with
# ASan/UBSan and fuzzer coverage) and runs each for ACCRUN_FUZZ_SECONDS
# (default 20) over tests/fuzz/corpus/<target>/.  New interesting inputs go
# to a scratch copy of the corpus, never into the source tree; a crash
# leaves its input in BUILD_DIR/findings/<target>/.
# Exit 0 when no fuzzer found anything, 1 on a finding or a build failure,
# 77 (skip) when clang or libFuzzer is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build/fuzz-clang}
seconds=${ACCRUN_FUZZ_SECONDS:-20}
jobs=${ACCRUN_FUZZ_BUILD_JOBS:-2}

command -v clang++ >/dev/null || { echo "SKIP: clang++ is not installed (scripts/install-deps.sh)"; exit 77; }
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "SKIP: clang++ cannot link -fsanitize=fuzzer (libclang-rt-*-dev missing?):"; cat "$probe/err"; exit 77
fi

san="-fsanitize=address,undefined -fsanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACCRUN_BUILD_FUZZERS=ON -DACCRUN_BUILD_TESTS=ON -DACCRUN_BUILD_BENCHMARKS=OFF -DACCRUN_WERROR=ON \
    "-DCMAKE_CXX_FLAGS=$san -fsanitize=fuzzer-no-link" "-DCMAKE_C_FLAGS=$san" \
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; echo "FAIL: configuring the clang build"; exit 1; }
fi
cmake --build "$build" -j "$jobs" --target fuzz_hostfile fuzz_options fuzz_json fuzz_frame fuzz_pmi ||
  { echo "FAIL: building the fuzzers with clang"; exit 1; }

status=0
for t in hostfile options json frame pmi; do
  work="$build/corpus/$t"
  findings="$build/findings/$t"
  rm -rf "$work" "$findings"
  mkdir -p "$work" "$findings"
  cp "$here/corpus/$t/"* "$work/" 2>/dev/null
  log="$build/fuzz_$t.log"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -artifact_prefix="$findings/" -print_final_stats=1 "$work" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(ls "$findings" | wc -l)
  echo "fuzz_$t: exit $rc, ${execs:-?} executions in ${seconds} s, corpus $(ls "$work" | wc -l), findings $found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    grep -E "ERROR|runtime error|SUMMARY|#[0-9]+ 0x" "$log" | head -30
    for f in "$findings"/*; do [ -f "$f" ] && { echo "input $f:"; od -c "$f" | head -8; }; done
  fi
done
exit $status
