#!/bin/sh
# nccl_launch.sh ACCRUN NP [ACCRUN OPTIONS...] -- PROGRAM [ARGS...]
# Runs an NCCL test on NP ranks under accrun when this host has at least NP
# GPUs (as accrun --detect sees them); otherwise prints why and a SKIP line
# for CTest.  NCCL refuses two ranks on one GPU, so nothing smaller can run.
accrun=$1 np=$2
shift 2
gpus=$("$accrun" --detect --json 2>/dev/null | grep -o '"resource": "GPU"' | wc -l)
if [ "$gpus" -lt "$np" ]; then
  echo "nccl_suite: SKIP: $np ranks need $np GPUs (one each); accrun --detect finds $gpus here"
  exit 0
fi
opts=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts="$opts $1"; shift; done
[ "$1" = "--" ] && shift
echo "nccl_launch.sh: accrun -n $np$opts $*"
# shellcheck disable=SC2086
exec timeout 170 "$accrun" --timeout 160 -n "$np" $opts "$@"
