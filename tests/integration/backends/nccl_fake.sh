#!/bin/sh
# nccl_fake.sh ACCRUN FAKE_DIR [VAR=VALUE...] -- PROGRAM [ARGS...]
# Runs PROGRAM on 2 ranks under accrun, each holding one whole logical GPU,
# with the fake CUDA runtime and NCCL of FAKE_DIR first on LD_LIBRARY_PATH
# and the VAR=VALUE settings (FAKE_NCCL_MODE, ...) in the environment.  The
# fake NCCL's call log goes to a fresh file, printed at the end.
accrun=$1 fake=$2
shift 2
while [ $# -gt 0 ] && [ "$1" != "--" ]; do export "$1"; shift; done
[ "$1" = "--" ] && shift
log=$(mktemp "${TMPDIR:-/tmp}/fake-nccl.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
export FAKE_NCCL_LOG="$log"
export LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 100 "$accrun" --timeout 60 -n 2 --num-gpus 2 --gpus-per-rank 1 --on-failure continue "$@"
rc=$?
echo "--- fake NCCL log"
cat "$log"
exit $rc
