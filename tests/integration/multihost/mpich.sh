#!/usr/bin/env bash
# MPICH across the test bed's hosts through accrun's PMI-1 server (accrun(7)
# "MPI libraries"): allreduce between hosts, split_type SHARED and the
# universe per host, MPI_Abort's code as the job's with no survivors
# anywhere, and PMI barriers along a chain of agents (--fanout 1).
# usage: mpich.sh SOURCE_DIR ACCRUN MPICH_PROGRAM
set -uo pipefail
src=$1
accrun=$2
prog=$3
. "$src/tests/testbed/env.sh" || exit $?
. "$(dirname "$0")/lib.sh"
agent="ssh -F $ACCRUN_TESTBED_SSH_CONFIG"

# MPICH 4.0 (Debian 12's, ch4:ucx) can hang in its own MPI_Finalize across
# hosts: a rank that finished its network disconnects waits in a PMI
# barrier while a peer still needs it to answer its disconnect.  It does so
# under mpiexec.hydra as under accrun (MPICH 4.2 dropped that barrier).  So
# each run is bounded by --timeout: it either ends 0, or every rank has
# printed its checked result and accrun ends the hung finalize at the
# timeout, naming the ranks, with nothing left on any host.
mpich_run() {  # mpich_run NAME RANKS GOOD-LINE ACCRUN-ARGS...
  local name=$1 ranks=$2 good=$3
  shift 3
  local out rc n
  out=$("$accrun" --timeout 8 --kill-grace 1 "$@" "$prog" 2>&1)
  rc=$?
  n=$(grep -c -- "$good" <<<"$out")
  if [ "$n" = "$ranks" ] && { [ "$rc" = 0 ] || { [ "$rc" = 124 ] && grep -q -- "--timeout 8 s reached on host h[12]; ranks still running" <<<"$out"; }; }; then
    ok "$name ($ranks good lines, exit $rc$([ "$rc" = 124 ] && echo ": MPICH's finalize hang, ended by --timeout"))"
  else
    bad "$name (exit $rc, $n good lines of $ranks)" "$out"
  fi
  nothing_left "$name" "$prog"
}

mpich_run "MPICH across 2 hosts: allreduce 10, SHARED 2, universe 4" 4 "ok size=4 sum=10 shared=2 local=2 universe=4" \
  -n 4 -H h1:2,h2:2 --launch-agent "$agent"

out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" "$prog" abort 3 9 2>&1)
check "MPI_Abort(9) on h2 gives 9" "^9$" "$?"
check "the abort is named" "rank 3 on host h2 called abort with status 9" "$out"
nothing_left "MPICH's abort" "$prog"

mpich_run "MPICH across a chain of 4 agents (--fanout 1): PMI barriers along the tree" 8 \
  "ok size=8 sum=36 shared=2 local=2 universe=8" -n 8 --fanout 1 --hostfile "$ACCRUN_TESTBED_HOSTFILE" --launch-agent "$agent"
exit $fail
