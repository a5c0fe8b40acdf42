#!/usr/bin/env bash
# Builds accrun from a fresh clone and runs the main job on this host, on the
# embedded default (no MPI, no GPU needed): four ranks of examples/hello,
# each handed half of one of two logical GPUs and bound to a CPU, then four
# ranks of examples/allreduce summing through a named group.
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install-deps.sh"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "${ACCRUN_JOBS:-2}" --target accrun hello allreduce_example
bin=build/release
set -x
"$bin/launcher/accrun" --version
"$bin/launcher/accrun" -n 4 --num-gpus 2 --gpus-per-rank 0.5 --tag-output "$bin/examples/hello"
"$bin/launcher/accrun" -n 4 --tag-output "$bin/examples/allreduce"
