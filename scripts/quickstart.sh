#!/usr/bin/env bash
# Builds accrun from a fresh clone and runs the main job: four ranks of the
# hello example on this host, on the embedded default (no MPI, no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install-deps.sh"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "${ACCRUN_JOBS:-2}" --target accrun hello
set -x
build/release/launcher/accrun --version
