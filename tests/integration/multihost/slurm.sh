#!/usr/bin/env bash
# accrun inside a Slurm allocation on the test bed's Slurm cluster (accrun(1)
# "SLURM"): salloc -N 4 accrun -n 8 of an Open MPI program (agents started by
# srun, the allocation as the host list), accrun --detect of every node, an
# sbatch script's exit status, scancel ending everything within 5 s, and a
# node dropping off the network ending accrun within 5 s.
# usage: slurm.sh SOURCE_DIR ACCRUN MPI_HELLO
set -uo pipefail
src=$1
accrun=$2
mpi_hello=$3
. "$src/tests/testbed/env.sh" || exit $?
[ "${ACCRUN_TESTBED_SLURM:-0}" = 1 ] || { echo "Slurm is not up on the test bed (slurm-wlm and munge missing?)"; exit 77; }
. "$(dirname "$0")/lib.sh"

out=$(salloc -N 4 -n 8 -O --quiet "$accrun" --tag-output "${mpi_env[@]}" "$mpi_hello" 2>&1)
check "salloc -N 4 -n 8 accrun (-n from SLURM_NTASKS): exit 0" "^0$" "$?"
n=$(grep -cE "^\[h[1-4]:[0-7]\] rank=[0-7] size=8 shared=2 sum=36 expect=36$" <<<"$out")
[ "$n" = 8 ] && ok "8 ranks on the 4 allocated nodes, by direct launch" || bad "Open MPI inside salloc" "$out"
for h in h1 h2 h3 h4; do check "ranks on $h" "^\[$h:" "$out"; done

# -H inside the allocation: its nodes' agents come by the srun step too (the
# default ssh reaches no host of the test bed: it has no test-bed config).
out=$(salloc -N 2 -O --quiet "$accrun" -n 4 -H h1:2,h2:2 --tag-output hostname 2>&1)
check "-H inside salloc: exit 0" "^0$" "$?"
n=$(grep -cE "^\[(h1:[01]\] h1|h2:[23]\] h2)$" <<<"$out")
[ "$n" = 4 ] && ok "-H inside salloc: the agents came by srun" || bad "-H inside salloc" "$out"

out=$(salloc -N 4 --quiet "$accrun" -n 8 /bin/true 2>&1)
check "more ranks than the allocation's slots: a clear refusal" "cannot place rank 4 of -n 8: the hosts have 4 slots \\(h1: 1, h2: 1, h3: 1, h4: 1\\)" "$out"

out=$(salloc -N 4 --quiet "$accrun" --detect 2>&1)
check "accrun --detect inside salloc lists every node" "h1: .*h2: .*h3: .*h4: " "$(tr '\n' ' ' <<<"$out")"

cat >"$state/scratch/job.sh" <<JOB
#!/bin/bash
"$accrun" -n 4 sh -c 'exit \$(( ACCRUN_RANK == 3 ? 5 : 0 ))'
JOB
chmod +x "$state/scratch/job.sh"
sbatch -N 2 -n 4 -O --wait --quiet -o "$state/scratch/job.out" "$state/scratch/job.sh" >/dev/null 2>&1
check "sbatch --wait ends with the job's status" "^5$" "$?"
check "the batch job's output names the rank" "rank 3 on host h[12] exited with status 5" "$(cat "$state/scratch/job.out")"

salloc -N 4 -n 8 -O --quiet "$accrun" sleep 60 >"$state/scratch/cancel.out" 2>&1 &
job=$!
for _ in $(seq 100); do [ "$("$tb" hx h4 pgrep -c -x sleep)" -ge 1 ] && break; sleep 0.05; done
jobid=$(squeue -h -o %i | head -1)
t0=$(date +%s.%N)
scancel "$jobid"
wait $job 2>/dev/null
nothing_left "scancel" "sleep 60"
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
awk -v t="$took" 'BEGIN{exit !(t <= 5)}' && ok "scancel: all gone in $took s" || bad "scancel took $took s" "$(cat "$state/scratch/cancel.out")"
# A node that drops off the network mid-job (its link down): accrun ends
# within 5 s naming it, and nothing is left on any node once it is back.
# (Once its agent said its ranks started: until then a host's silence is
# judged over 30 s, its start being slow on a loaded host.)  accrun's end is
# timed apart from salloc's: salloc then releases the allocation through
# slurmctld, which has a node it cannot reach, and is given 30 s.
rm -f "$state/scratch/node.end"
ACCRUN_LOG=debug salloc -N 4 -n 8 -O --quiet sh -c '"$1" sleep 60; rc=$?; date +%s.%N >"$2"; exit $rc' sh \
  "$accrun" "$state/scratch/node.end" >"$state/scratch/node.out" 2>&1 &
job=$!
for _ in $(seq 200); do grep -q "host h3: its agent started its ranks" "$state/scratch/node.out" && break; sleep 0.05; done
t0=$(date +%s.%N)
ip link set vt-h3 down
wait $job
rc=$?
t1=$(date +%s.%N)
link_up h3
took=$(awk -v a="$t0" -v b="$(cat "$state/scratch/node.end" 2>/dev/null || echo "$t1")" 'BEGIN{printf "%.1f", b - a}')
all=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
awk -v t="$took" 'BEGIN{exit !(t <= 5)}' && [ "$rc" != 0 ] && ok "a node's link down: accrun ended in $took s (exit $rc)" ||
  bad "a node's link down: accrun ended after $took s, salloc with exit $rc" "$(cat "$state/scratch/node.out")"
awk -v t="$all" 'BEGIN{exit !(t <= 30)}' && ok "a node's link down: salloc ended in $all s" ||
  bad "a node's link down: salloc ended after $all s" "$(cat "$state/scratch/node.out")"
check "the lost node is named" "host h3: no word from its agent" "$(cat "$state/scratch/node.out")"
nothing_left "a node's link down" "sleep 60"
squeue -h -o %i | xargs -r scancel 2>/dev/null

exit $fail
