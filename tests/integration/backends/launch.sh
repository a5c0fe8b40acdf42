#!/bin/sh
# launch.sh ACCRUN NP PROGRAM [ARGS...]
# Runs an Open MPI test program on NP ranks under accrun (PMIx direct launch,
# no mpirun), bounded in time.
accrun=$1 np=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "launch.sh: accrun -n $np $*"
exec timeout 110 "$accrun" --timeout 100 -n "$np" "$@"
