#!/usr/bin/env bash
# MPICH hello (MPI_Init + MPI_Finalize) started by accrun (the PMI-1 server
# of launcher/src/pmi/) and by MPICH's own launcher, mpiexec.hydra, at
# N = 8 and 32 ranks on this host, interleaved (the order alternates each
# round), ROUNDS rounds (default 15).  Prints the medians of each and the
# median of the per-round ratios hydra/accrun (> 1: accrun is faster).  A run
# over LIMIT seconds (default 30) is a hang, counted and left out.
#
# A third column starts each accrun rank in a session of its own (setsid -w),
# as mpiexec.hydra does.  With the kernel's autogroup scheduling on
# (/proc/sys/kernel/sched_autogroup_enabled), every session is one
# scheduling group: hydra's N ranks then get N shares of a loaded machine,
# accrun's (which share accrun's session) one.  The column separates that
# from the launch itself.
# usage: pmi_bench.sh ACCRUN [ROUNDS]
set -uo pipefail
accrun=${1:?usage: pmi_bench.sh ACCRUN [ROUNDS]}
rounds=${2:-15}
limit=${LIMIT:-30}
if ! command -v mpicc.mpich >/dev/null || ! command -v mpiexec.hydra >/dev/null; then
  echo "pmi_bench: needs mpicc.mpich and mpiexec.hydra (Debian's mpich, libmpich-dev)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/hello.c" <<'C'
#include <mpi.h>
int main(int argc, char** argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }
C
mpicc.mpich -O2 -o "$work/hello" "$work/hello.c" || exit 1

t() {  # t CMD...: seconds, or "hang" (also a failed run: it is not a launch)
  local t0 t1
  t0=$(date +%s.%N)
  timeout -k 2 "$limit" "$@" >/dev/null 2>&1 || { echo hang; return; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b - a}'
}
median() { sort -g | awk '{a[NR]=$1} END{if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }

ms() { awk -v x="$1" 'BEGIN{printf "%.1f", x*1000}'; }
echo "# MPICH hello, accrun vs mpiexec.hydra, $rounds interleaved rounds on $(nproc) CPUs (medians);" \
  "autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 8 32; do
  as=() hs=() ss=() rs=() qs=() ah=0 hh=0 sh=0
  for i in $(seq "$rounds"); do
    # The order rotates each round.
    for k in 0 1 2; do
      case $(( (i + k) % 3 )) in
        0) a=$(t "$accrun" -n "$n" "$work/hello") ;;
        1) h=$(t mpiexec.hydra -n "$n" "$work/hello") ;;
        2) s=$(t "$accrun" -n "$n" setsid -w "$work/hello") ;;
      esac
    done
    [ "$a" = hang ] && ah=$((ah + 1)) || as+=("$a")
    [ "$h" = hang ] && hh=$((hh + 1)) || hs+=("$h")
    [ "$s" = hang ] && sh=$((sh + 1)) || ss+=("$s")
    [ "$a" != hang ] && [ "$h" != hang ] && rs+=("$(awk -v a="$a" -v h="$h" 'BEGIN{print h/a}')")
    [ "$s" != hang ] && [ "$h" != hang ] && qs+=("$(awk -v a="$s" -v h="$h" 'BEGIN{print h/a}')")
  done
  am=$(printf '%s\n' "${as[@]}" | median)
  hm=$(printf '%s\n' "${hs[@]}" | median)
  sm=$(printf '%s\n' "${ss[@]}" | median)
  rm_=$(printf '%s\n' "${rs[@]}" | median)
  qm=$(printf '%s\n' "${qs[@]}" | median)
  printf 'N=%-3s accrun %8s ms  mpiexec.hydra %8s ms  accrun+setsid %8s ms  hangs %d/%d/%d' \
    "$n" "$(ms "$am")" "$(ms "$hm")" "$(ms "$sm")" "$ah" "$hh" "$sh"
  printf '  median hydra/accrun %5.2fx  hydra/(accrun+setsid) %5.2fx\n' "$rm_" "$qm"
done
