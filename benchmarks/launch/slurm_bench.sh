#!/usr/bin/env bash
# Inside a 4-node Slurm allocation on the test bed (tests/testbed up --slurm):
# accrun -n 64 /bin/true vs srun -n 64 /bin/true vs mpirun -n 64 /bin/true,
# interleaved, ROUNDS rounds (default 20): medians and hangs (over 30 s).
# usage: slurm_bench.sh ACCRUN [ROUNDS]
set -uo pipefail
accrun=$1
rounds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/testbed/env.sh" || exit $?
[ "${ACCRUN_TESTBED_SLURM:-0}" = 1 ] || { echo "Slurm is not up on the test bed"; exit 77; }
# The test bed's nodes have one CPU each: 16 tasks a node need --overcommit.
inner=$(mktemp "$ACCRUN_TESTBED_STATE/scratch/slurm_bench.XXXXXX")
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<'INNER'
accrun=$1; rounds=$2
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_oversubscribe=1
t() { local t0=$(date +%s.%N); timeout -k 2 30 "$@" >/dev/null 2>&1; local rc=$?; [ $rc -ge 124 ] && { echo hang; return; }; awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.4f", b - a}'; }
median() { sort -n | awk '{a[NR]=$1} END{if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
declare -A all hangs
for i in $(seq "$rounds"); do
  for who in accrun srun mpirun; do
    case $who in
      accrun) v=$(t "$accrun" /bin/true) ;;
      srun) v=$(t srun --overlap -n 64 /bin/true) ;;
      mpirun) v=$(t mpirun --allow-run-as-root --oversubscribe -n 64 /bin/true) ;;
    esac
    if [ "$v" = hang ]; then hangs[$who]=$(( ${hangs[$who]:-0} + 1 )); else all[$who]+="$v "; fi
  done
done
for who in accrun srun mpirun; do
  m=$(tr ' ' '\n' <<<"${all[$who]}" | grep . | median)
  printf '%-7s median %8.1f ms  hangs %d/%d\n' "$who" "$(awk -v x="$m" 'BEGIN{print x*1000}')" "${hangs[$who]:-0}" "$rounds"
  eval "med_$who=$m"
done
awk -v a="$med_accrun" -v s="$med_srun" -v m="$med_mpirun" 'BEGIN{printf "accrun/srun %.2fx (target <= 1.5x)   mpirun/accrun %.2fx (target > 1x)\n", a/s, m/a}'
INNER
salloc -N 4 -n 64 -O --quiet bash "$inner" "$accrun" "$rounds"
