#!/usr/bin/env bash
# Installs every system package accrun needs to build, test and run, from
# Debian's archive.  Idempotent: packages already present are skipped, and
# `apt-get update` runs only when something is missing.  Works as root or
# through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libpmix-dev libpmix2
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  libfabric-dev
  libboost-program-options-dev
  nlohmann-json3-dev              # the JSON accrun reads and writes
  libsodium-dev
  libgtest-dev libgmock-dev googletest
  python3 python3-mpi4py
  iproute2 procps groff-base man-db
  openssh-server openssh-client   # tests/testbed: sshd per test bed host
  slurm-wlm munge                 # tests/testbed: up --slurm
  clang libclang-rt-14-dev        # tests/fuzz: libFuzzer targets (run-fuzzers.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: not root and sudo is absent; install as root: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
