#!/usr/bin/env bash
# Installs every system package accrun needs to build, test and run, from
# Debian's archive.  Idempotent: packages already present are skipped, and
# `apt-get update` runs only when something is missing.  Works as root or
# through sudo.
#   install-deps.sh           what the build and the tests need
#   install-deps.sh --bench   also the benchmarks' anchors that the tests do
#                             not need: torch.distributed's gloo
#                             (python3-torch; large, so left out of the rest)
set -euo pipefail
bench=0
for a in "$@"; do
  case $a in
    --bench) bench=1 ;;
    *) echo "install-deps.sh: unknown option '$a' (known: --bench)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git
  libpmix-dev libpmix2
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  mpich libmpich-dev              # MPICH programs through the PMI server (mpicc.mpich)
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
[ "$bench" = 1 ] && packages+=(python3-torch)  # benchmarks/osu/gloo_bench.py

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

sudo_cmd=()
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
  sudo_cmd=(sudo)
fi

# Open MPI stays the default MPI (mpicc, mpirun, mpi.h, mpi.pc) with MPICH
# installed beside it: Debian 12 ranks Open MPI first on amd64, but an
# alternative once set by hand, or another architecture's ranking, could
# point them at MPICH.  MPICH is reached through mpicc.mpich/mpiexec.hydra.
pin_openmpi() {
  local multiarch name path
  multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
  for pin in "mpi /usr/bin/mpicc.openmpi" "mpirun /usr/bin/mpirun.openmpi" \
             "mpi-$multiarch /usr/lib/$multiarch/openmpi/include"; do
    read -r name path <<<"$pin"
    [ -e "$path" ] || continue
    if [ "$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p')" != "$path" ]; then
      echo "install-deps: pointing the '$name' alternative back at Open MPI ($path)"
      "${sudo_cmd[@]}" update-alternatives --set "$name" "$path"
    fi
  done
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  pin_openmpi
  exit 0
fi

if [ "$(id -u)" -ne 0 ] && [ ${#sudo_cmd[@]} -eq 0 ]; then
  echo "install-deps: not root and sudo is absent; install as root: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
pin_openmpi
echo "install-deps: done"
