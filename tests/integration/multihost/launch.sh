#!/usr/bin/env bash
# Ranks across the test bed's hosts (accrun(1) "SEVERAL HOSTS"): rank
# environment and tags, an Open MPI program by direct launch (allreduce over
# TCP between hosts, split_type SHARED), MPI_Abort, mpi4py, each host's own
# GPUs, output integrity; and every way a job ends — a rank failing on a
# remote host, Ctrl-C, kill -9 of the controller, kill -9 of an agent, a
# host's link going down — within 5 s with nothing left on any host.
# usage: launch.sh SOURCE_DIR ACCRUN MPI_HELLO FLOOD PMIX_CLIENT BACKENDS_AUTO MPI_SPAWN
set -uo pipefail
src=$1
accrun=$2
mpi_hello=$3
flood=$4
pmix_client=$5
backends_auto=$6
mpi_spawn=$7
. "$src/tests/testbed/env.sh" || exit $?
. "$(dirname "$0")/lib.sh"
hosts=$ACCRUN_TESTBED_HOSTFILE
agent="ssh -F $ACCRUN_TESTBED_SSH_CONFIG"

# 1. Rank environment and tags; Open MPI's and PMIx's settings in accrun's
# environment reach every host's ranks, as under mpirun.
out=$(OMPI_MCA_accrun_probe="a b" PMIX_MCA_accrun_probe=c "$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" --tag-output \
  sh -c 'echo "$(hostname) $ACCRUN_RANK/$ACCRUN_SIZE local $ACCRUN_LOCAL_RANK/$ACCRUN_LOCAL_SIZE node $ACCRUN_NODE_RANK $MASTER_ADDR:$MASTER_PORT mca=${OMPI_MCA_accrun_probe-unset} pmix=${PMIX_MCA_accrun_probe-unset}"' 2>&1)
check "exit 0 and 8 tagged lines" "^\[h1:0\] h1 0/8 local 0/2 node 0 h1:[0-9]+ mca=a b pmix=c$" "$out"
for r in 0 1 2 3 4 5 6 7; do
  h=h$((r / 2 + 1))
  check "rank $r on $h" "^\[$h:$r\] $h $r/8 local $((r % 2))/2 node $((r / 2)) h1:[1-9][0-9]* mca=a b pmix=c$" "$out"
done

# Open MPI is told to oversubscribe on the host that is (h1: 2 ranks in 1
# slot), not on the others (h2: 2 ranks in 2 slots, on 2 CPUs).
out=$("$accrun" -H h1:1,h2:2 --oversubscribe -n 4 --launch-agent "$agent" \
  sh -c 'echo "$(hostname) $ACCRUN_RANK over=$ACCRUN_OVERSUBSCRIBED mca=${OMPI_MCA_mpi_oversubscribe-unset}"' 2>&1)
for r in 0 1; do check "rank $r on oversubscribed h1 has it" "^h1 $r over=1 mca=1$" "$out"; done
for r in 2 3; do check "rank $r on h2 has not" "^h2 $r over=0 mca=unset$" "$out"; done

# 2. Open MPI by direct launch across 4 hosts x 2.
out=$("$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" "${mpi_env[@]}" "$mpi_hello" 2>&1)
rc=$?
n=$(grep -c "size=8 shared=2 sum=36 expect=36" <<<"$out")
[ "$rc" = 0 ] && [ "$n" = 8 ] && ok "Open MPI across 4 hosts: 8 ranks, allreduce 36, SHARED 2" || bad "Open MPI across hosts (exit $rc, $n good lines)" "$out"

# 2b. The same with the agents started as a chain (--fanout 1): h1 starts
# h2, h2 starts h3, h3 starts h4, and whole-job fences gather along the
# chain over the hosts' own links.
out=$(ACCRUN_LOG=debug PMIX_MCA_accrun_probe=on "$accrun" -n 8 --fanout 1 --hostfile "$hosts" --launch-agent "$agent {host} env ACCRUN_LOG=debug {cmd}" \
  "${mpi_env[@]}" "$mpi_hello" 2>&1)
rc=$?
n=$(grep -c "size=8 shared=2 sum=36 expect=36" <<<"$out")
[ "$rc" = 0 ] && [ "$n" = 8 ] && ok "Open MPI across a chain of 4 agents: allreduce 36" || bad "Open MPI across a chain of agents (exit $rc, $n good lines)" "$out"
check "h4's fence contributions reach the controller through h3, h2 and h1" "fence \\*: 4 host\\(s\\) from here and below go up" "$out"
n=$(grep -c "PMIx server setting PMIX_MCA_accrun_probe=on (the ranks')" <<<"$out")
[ "$n" = 4 ] && ok "every host's PMIx server takes the ranks' PMIx settings" || bad "PMIx settings in the agents ($n of 4)" "$out"

# 3. MPI_Abort(7) on h3: exit 7, no survivors anywhere.
out=$("$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" "${mpi_env[@]}" "$mpi_hello" abort=5:7 2>&1)
check "MPI_Abort(7) on h3 gives 7" "^7$" "$?"
check "the abort is named" "rank 5 on host h3 called abort with status 7" "$out"
nothing_left "MPI_Abort" "$mpi_hello"

# 3b. One job-wide PMIx: put/fence/get, direct modex, publish (create-if-absent), lookup
# with wait and timeout, between ranks of two hosts; named groups meet
# through the job-wide directory (MPI backend; the store across hosts is in
# store.sh).
out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" "$pmix_client" 2>&1)
n=$(grep -c "^OK rank=" <<<"$out")
[ "$n" = 4 ] && ok "PMIx data and the name directory across 2 hosts" || bad "PMIx across hosts" "$out"
# Direct modex: no fence carries the data; each rank's get of a rank on the
# other host is answered by that host's agent.
out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" "$pmix_client" dmodex 2>&1)
n=$(grep -c "^OK dmodex" <<<"$out")
[ "$n" = 4 ] && ok "direct modex: 4 ranks each fetched a remote rank's data" || bad "direct modex across hosts" "$out"
# PMIx_Job_control across hosts: rank 0 on h1 terminates rank 1 on h2
# through the controller; the job ends without a failure.
out=$("$accrun" -n 2 -H h1:1,h2:1 --kill-grace 1 --launch-agent "$agent" "$pmix_client" control 2>&1)
rc=$?
[ "$rc" = 0 ] && grep -q "^OK control rank=0 terminated rank 1$" <<<"$out" && ! grep -q "rank 1 on host" <<<"$out" \
  && ok "PMIx_Job_control: rank 0 on h1 terminated rank 1 on h2" || bad "PMIx_Job_control across hosts (exit $rc)" "$out"
out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" "${mpi_env[@]}" "$backends_auto" mpi 2>&1)
n=$(grep -c "auto_backend: PASS" <<<"$out")
[ "$n" = 4 ] && ok "a named MPI group across 2 hosts" || bad "named MPI group across hosts" "$out"

# 3c. MPI_Comm_spawn across hosts: ranks 0 and 1 fill h1, so the 2 spawned
# processes go to h2's free slots and talk to their parents over TCP.
out=$("$accrun" -n 3 -H h1:2,h2:3 --launch-agent "$agent" "${mpi_env[@]}" "$mpi_spawn" 2 talk 2>&1)
rc=$?
n=$(grep -Ec "^child rank=[01] size=2 got=(7|14) total=704 env=[01],2,0,accrun\.[0-9a-f]+\.1 job=[0-9a-f]+ host=h2$" <<<"$out")
p=$(grep -Ec "^parent rank=[012] size=3 remote=2 sum=(23|0) merged=5 total=704$" <<<"$out")
[ "$rc" = 0 ] && [ "$n" = 2 ] && [ "$p" = 3 ] && ok "MPI_Comm_spawn across hosts: 2 processes on h2 talk to their parents on h1" \
  || bad "MPI_Comm_spawn across hosts (exit $rc, $n children, $p parents)" "$out"
# No free slot on either host: refused with one line; --oversubscribe spreads them.
out=$("$accrun" -n 2 -H h1:1,h2:1 --launch-agent "$agent" "${mpi_env[@]}" "$mpi_spawn" 2 talk 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "rank 0's MPI_Comm_spawn (PMIx_Spawn) of 2 process(es) was refused: the job's hosts have 0 free slot(s) (h1 0 of 1, h2 0 of 1); give them more slots" <<<"$out" \
  && ok "a spawn beyond the hosts' slots is refused, named (exit $rc)" || bad "a spawn beyond the slots (exit $rc)" "$out"
out=$("$accrun" -n 2 -H h1:1,h2:1 --oversubscribe --launch-agent "$agent" "${mpi_env[@]}" "$mpi_spawn" 2 talk 2>&1)
rc=$?
n=$(grep -Ec "^child rank=0 .* host=h1$|^child rank=1 .* host=h2$" <<<"$out")
[ "$rc" = 0 ] && [ "$n" = 2 ] && ok "--oversubscribe: the spawned processes go round the hosts" || bad "spawn with --oversubscribe (exit $rc, $n)" "$out"
# A spawned process failing on h2 ends the job on every host.
out=$("$accrun" -n 3 -H h1:2,h2:3 --launch-agent "$agent" "${mpi_env[@]}" "$mpi_spawn" 2 child-fails 2>&1)
check "a spawned process's status is the job's" "^5$" "$?"
check "and it is named" "spawned process 1 of accrun\.[0-9a-f]+\.1 \(started by rank 0\) on host h2 exited with status 5" "$out"
nothing_left "the spawns" "$mpi_spawn"

# 4. mpi4py across 2 hosts.
py=/usr/bin/python3
if "$py" -c 'import mpi4py' 2>/dev/null; then
  out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" "${mpi_env[@]}" "$py" -c \
    'from mpi4py import MPI; c = MPI.COMM_WORLD; print("mpi4py", c.rank, c.size, c.allreduce(c.rank + 1), MPI.Get_processor_name())' 2>&1)
  n=$(grep -cE "^mpi4py [0-3] 4 10 h[12]$" <<<"$out")
  [ "$n" = 4 ] && ok "mpi4py across 2 hosts" || bad "mpi4py across 2 hosts" "$out"
else
  echo "skip mpi4py: python3-mpi4py is not installed"
fi

# 5. Each host's own GPUs, detected by its agent from its own sysfs root.
for i in 1 2 3 4; do rm -rf "$state/hosts/h$i/sys"; mkdir -p "$state/hosts/h$i"; cp -r "$src/tests/fixtures/sysfs/nvidia-8xh100" "$state/hosts/h$i/sys"; done
gpu_agent="$agent {host} env ACCRUN_NVML_LIBRARY= ACCRUN_SYSFS_ROOT=/run/testbed/sys {cmd}"
out=$("$accrun" -n 8 --hostfile "$hosts" --gpus-per-rank 1 --launch-agent "$gpu_agent" \
  sh -c 'echo "gpu $(hostname) $ACCRUN_RANK $CUDA_VISIBLE_DEVICES $ACCRUN_GPU_IDS"' 2>&1)
for r in 0 1 2 3 4 5 6 7; do check "rank $r: its host's GPU $((r % 2))" "^gpu h$((r / 2 + 1)) $r $((r % 2)) $((r % 2))$" "$out"; done
rm -rf "$state"/hosts/h*/sys

# 5b. --bind-to core binds the ranks on every host from that host's own
# cores, which its agent reports (they were left out: every rank on another
# host ran unbound).
out=$("$accrun" -n 8 --hostfile "$hosts" --bind-to core --report-bindings --launch-agent "$agent" \
  sh -c 'echo "cpus $(hostname) $ACCRUN_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"' 2>&1)
for r in 0 1 2 3 4 5 6 7; do
  check "rank $r bound to its core on h$((r / 2 + 1))" "^cpus h$((r / 2 + 1)) $r $((r % 2))$" "$out"
  check "rank $r's binding is reported" "rank $r on host h$((r / 2 + 1)) bound to cpus $((r % 2)) with no devices" "$out"
done

# 6. A rank failing on a remote host.
out=$("$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" sh -c '[ "$ACCRUN_RANK" = 5 ] && exit 3; sleep 20' 2>&1)
check "a remote rank's status is the job's" "^3$" "$?"
check "the failure names rank and host" "rank 5 on host h3 exited with status 3" "$out"
check "the others are ended on every host, not counted on one" \
  "terminating the ranks still running on every host \(--on-failure kill\)" "$out"
nothing_left "remote failure" "sleep 20"

# 6b. --timeout across hosts: exit 124, each host's agent names its host
# and its ranks still running.
out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" --timeout 1 sh -c '[ "$ACCRUN_RANK" = 3 ] && exit 0; sleep 21' 2>&1)
check "--timeout across hosts gives 124" "^124$" "$?"
check "h1 names its ranks" "--timeout 1 s reached on host h1; ranks still running: 0-1; terminating them" "$out"
check "h2 names its rank" "--timeout 1 s reached on host h2; ranks still running: 2; terminating them" "$out"
nothing_left "--timeout across hosts" "sleep 21"

# 6c. A program that exists on h1 only (each host has its own /tmp): h2
# refuses it, naming itself, and h1's rank is ended at once.
"$tb" hx h1 sh -c 'printf "#!/bin/sh\nexec sleep 22\n" >/tmp/only-h1.sh; chmod +x /tmp/only-h1.sh'
t0=$(now)
out=$("$accrun" -n 2 -H h1:1,h2:1 --launch-agent "$agent" /tmp/only-h1.sh 2>&1)
check "a program missing on h2 gives 127" "^127$" "$?"
took=$(elapsed "$t0")
check "h2 is named" "^accrun: on host h2: '/tmp/only-h1.sh': no such file; nothing was started there$" "$out"
awk -v t="$took" 'BEGIN{exit !(t < 5)}' && ok "and the job ended in $took s" || bad "the job took $took s" "$out"
nothing_left "a program missing on one host" "sleep 22"
"$tb" hx h1 rm -f /tmp/only-h1.sh

# 6d. A relative --wdir or --output-dir is under accrun's working directory
# on every host (as under mpirun), not under each agent's home.
od=accrun-od-$$
for h in h1 h2; do "$tb" hx $h mkdir "/tmp/$od-w"; done
out=$(cd /tmp && "$accrun" -n 2 -H h1:1,h2:1 --launch-agent "$agent" --tag-output --wdir "$od-w" pwd 2>&1)
check "a relative --wdir: h1's rank starts in it" "^\[h1:0\] /tmp/$od-w$" "$out"
check "a relative --wdir: h2's rank starts in it" "^\[h2:1\] /tmp/$od-w$" "$out"
for h in h1 h2; do "$tb" hx $h rmdir "/tmp/$od-w"; done
out=$(cd /tmp && "$accrun" -n 2 -H h1:1,h2:1 --launch-agent "$agent" --output-dir "$od" sh -c 'echo "out $ACCRUN_RANK"' 2>&1)
check "a relative --output-dir across hosts gives 0" "^0$" "$?"
for r in 0 1; do
  got=$("$tb" hx h$((r + 1)) sh -c "cat /tmp/$od/rank.$r/stdout; ls -d ~/$od 2>/dev/null" 2>&1)
  [ "$got" = "out $r" ] && ok "rank $r's output is in h$((r + 1)):/tmp/$od" || bad "rank $r's output in h$((r + 1)):/tmp/$od" "$got"
  "$tb" hx h$((r + 1)) rm -rf "/tmp/$od"
done

# 7. Output: 4 hosts x 2 ranks x 50,000 lines, every line whole and tagged once.
"$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" --tag-output "$flood" 50000 >"$state/scratch/flood.out" 2>&1
rc=$?
total=$(wc -l <"$state/scratch/flood.out")
badlines=$(grep -cvE '^\[h[1-4]:([0-7])\] rank \1 line [0-9]+$' "$state/scratch/flood.out")
[ "$rc" = 0 ] && [ "$total" = 400000 ] && [ "$badlines" = 0 ] && ok "400,000 lines intact and tagged once" ||
  bad "flood: exit $rc, $total lines, $badlines bad" "$(grep -vE '^\[h[1-4]:([0-7])\] rank \1 line [0-9]+$' "$state/scratch/flood.out" | head -5)"
rm -f "$state/scratch/flood.out"

# 7a. A reader that pauses longer than the hosts' silence limits (a pager):
# the ranks wait, no line is lost, no host is taken for lost.
n=$("$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" sh -c 'seq 1 200000' 2>"$state/scratch/slow.err" | (sleep 5; wc -l))
[ "$n" = 1600000 ] && [ ! -s "$state/scratch/slow.err" ] && ok "a reader paused 5 s: 1,600,000 lines, no message" ||
  bad "slow reader: $n lines" "$(cat "$state/scratch/slow.err")"

# 7b. A reader that goes away ends the job on every host (141), as in a pipeline.
"$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" yes 2>"$state/scratch/pipe.err" | head -1 >/dev/null
check "| head -1 ends the job with 141" "^141$" "${PIPESTATUS[0]}"
check "and says why" "cannot write the ranks' standard output" "$(cat "$state/scratch/pipe.err")"
nothing_left "| head -1" "yes"

# 7c. Standard input reaches a rank on another host whole, with
# backpressure (3 MB through a 1 MiB window), or every rank with --stdin all.
head -c 3000000 /dev/urandom >"$state/scratch/in.bin"
want=$(md5sum <"$state/scratch/in.bin" | cut -d' ' -f1)
out=$("$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" --stdin 3 sh -c 'sleep 0.5; echo "$(hostname) $ACCRUN_RANK $(md5sum)"' <"$state/scratch/in.bin" 2>&1)
check "stdin reaches rank 3 on h2 whole" "^h2 3 $want" "$out"
check "and no other rank" "^h1 0 d41d8cd98f00b204e9800998ecf8427e" "$out"
out=$("$accrun" -n 3 -H h1:1,h2:1,h3:1 --launch-agent "$agent" --stdin all sh -c 'echo "$(hostname) $(md5sum)"' <"$state/scratch/in.bin" 2>&1)
[ "$(grep -c " $want" <<<"$out")" = 3 ] && ok "--stdin all: every host's rank gets it whole" || bad "--stdin all across hosts" "$out"
out=$(seq 1 300000 | "$accrun" -n 2 -H h1:1,h2:1 --launch-agent "$agent" --stdin 1 sh -c 'head -1' 2>&1)
check "a rank that stops reading its stdin ends normally" "^1$" "$out"
rm -f "$state/scratch/in.bin"

# 7d. A rank's descendant that starts a new session dies with the job on
# its host.
out=$("$accrun" -n 2 -H h2:1,h3:1 --launch-agent "$agent" sh -c 'setsid sleep 611 </dev/null >/dev/null 2>&1 & sleep 0.3' 2>&1)
check "setsid job exits 0" "^$" "$out"
nothing_left "a rank's setsid descendant" "sleep 611"

# 7e. A controller that is stopped (kill -STOP: a debugger, or Slurm
# suspending the job, which stops the agents too) is silent, but its host
# still acknowledges: the agents wait for it, and the job goes on after
# kill -CONT (it ended 4 s into the stop).
for who in "the controller" "the controller and every agent"; do
  "$accrun" -n 4 -H h1:2,h2:2 --launch-agent "$agent" sh -c 'sleep 9; echo done' >"$state/scratch/stop.out" 2>&1 &
  job=$!
  for _ in $(seq 100); do [ "$("$tb" hx h2 pgrep -c -f 'sleep 9')" = 2 ] && break; sleep 0.05; done
  kill -STOP $job
  [ "$who" = "the controller" ] || for h in h1 h2; do "$tb" hx $h pkill -STOP -f -- "accrun --daemon"; done
  sleep 6
  [ "$who" = "the controller" ] || for h in h1 h2; do "$tb" hx $h pkill -CONT -f -- "accrun --daemon"; done
  kill -CONT $job
  wait $job
  rc=$?
  n=$(grep -c "^done$" "$state/scratch/stop.out")
  [ "$rc" = 0 ] && [ "$n" = 4 ] && ok "$who stopped for 6 s: the job goes on" ||
    bad "$who stopped for 6 s (exit $rc, $n of 4 ranks done)" "$(cat "$state/scratch/stop.out")"
done
nothing_left "a stopped controller" "sleep 9"

# 8. The job ends within 5 s, however it is ended.
ends() {  # ends NAME SECONDS-BUDGET ACTION [ACCRUN-OPTION...]: starts a sleeping job, runs ACTION (with $job set), times the end
  local name=$1 budget=$2 action=$3
  shift 3
  "$accrun" -n 8 "$@" --hostfile "$hosts" --launch-agent "$agent" sleep 60 >"$state/scratch/end.out" 2>&1 &
  job=$!
  for _ in $(seq 100); do
    [ "$("$tb" hx h4 pgrep -c -f 'sleep 60')" = 2 ] && break
    sleep 0.05
  done
  local t0; t0=$(now)
  eval "$action"
  for _ in $(seq 200); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
  wait "$job" 2>/dev/null
  rc=$?
  local took; took=$(elapsed "$t0")
  if awk -v t="$took" -v b="$budget" 'BEGIN{exit !(t <= b)}'; then ok "$name: ended in $took s (exit $rc)"; else bad "$name: took $took s" "$(cat "$state/scratch/end.out")"; fi
  nothing_left "$name" "sleep 60"
}
# Ctrl-Z stops every host's ranks and accrun; fg resumes them all.
states() { "$tb" hx h4 sh -c 'for p in $(pgrep -x sleep); do cut -d" " -f3 /proc/$p/stat; done' | sort -u | tr -d '\n'; }
"$accrun" -n 8 --hostfile "$hosts" --launch-agent "$agent" sleep 60 >"$state/scratch/stop.out" 2>&1 &
job=$!
for _ in $(seq 100); do [ "$("$tb" hx h4 pgrep -c -x sleep)" = 2 ] && break; sleep 0.05; done
kill -TSTP $job
for _ in $(seq 40); do [ "$(states)" = T ] && break; sleep 0.05; done
check "SIGTSTP stops the ranks on h4" "^T$" "$(states)"
check "and accrun" "^T$" "$(cut -d' ' -f3 /proc/$job/stat)"
kill -CONT $job
for _ in $(seq 40); do [ "$(states)" = S ] && break; sleep 0.05; done
check "SIGCONT resumes them" "^S$" "$(states)"
kill -INT $job
wait $job 2>/dev/null
nothing_left "after Ctrl-Z, fg, Ctrl-C" "sleep 60"
ends "Ctrl-C" 5 'kill -INT $job'
check "Ctrl-C exit 130" "^130$" "$rc"
ends "kill -9 of the controller" 5 'kill -9 $job'
ends "kill -9 of the agent on h2" 5 '"$tb" hx h2 pkill -9 -o -f -- "accrun --daemon"'
check "the lost host is named" "host h2: .*lost" "$(cat "$state/scratch/end.out")"
# h2 relays h3's and h4's fences in a chain of agents: they end as well.
ends "kill -9 of the agent on h2, inside a chain (--fanout 1)" 5 '"$tb" hx h2 pkill -9 -o -f -- "accrun --daemon"' --fanout 1
# An agent that hears SIGTERM itself (scancel of its step, a kill on its
# host) passes it to its ranks, whose deaths are failures like any other.
ends "SIGTERM to the agent on h3" 5 '"$tb" hx h3 pkill -TERM -o -f -- "accrun --daemon"'
check "it ends with the ranks' status" "^143$" "$rc"
check "the rank, its host and the cause are named" \
  "rank [45] on host h3 was killed by SIGTERM .*this host's agent received TERM and passed it on" "$(cat "$state/scratch/end.out")"
# Under --on-failure continue a whole-job fence that waits for a lost
# host's ranks fails on the others, instead of waiting for ever.
t0=$(now)
# (h2's agent dies once its two ranks run: a loss during the start ends the job.)
kill_h2_agent_once() {  # kill_h2_agent_once PATTERN: when h2 runs 2 processes matching PATTERN
  for _ in $(seq 200); do [ "$("$tb" hx h2 pgrep -c -f -- "$1")" = 2 ] && break; sleep 0.05; done
  "$tb" hx h2 pkill -9 -o -f -- "accrun --daemon"
}
fences_failed() {  # fences_failed NAME OUTPUT: the 6 ranks off h2 each print that their fence failed
  if [ "$(grep -c "^fence rank [014567]: ERROR" <<<"$2")" = 6 ]; then ok "$1"; else bad "$1" "$2"; fi
}
out=$(timeout 30 "$accrun" -n 8 --on-failure continue --hostfile "$hosts" --launch-agent "$agent" \
  "$pmix_client" fence-after=2 2>&1 &
  kill_h2_agent_once "pmix_client fence-after=2"; wait)
fences_failed "a fence with a lost host's ranks fails on the 6 others" "$out"
took=$(elapsed "$t0")
if awk -v t="$took" 'BEGIN{exit !(t <= 10)}'; then ok "and the job ends in $took s"; else bad "the job took $took s" "$out"; fi
nothing_left "a lost host under --on-failure continue" "accrun --daemon"
# The same along a chain of agents (--fanout 1), with the fence waiting when
# h2's agent dies: the parts of h3 and h4 went up through h2, and h1 waits
# for h2's part; every host's fence fails all the same.
t0=$(now)
out=$(timeout 30 "$accrun" -n 8 --fanout 1 --on-failure continue --hostfile "$hosts" --launch-agent "$agent" \
  sh -c 'case $ACCRUN_RANK in 2|3) exec "$0" fence-after=30;; *) exec "$0" fence-after=0;; esac' "$pmix_client" 2>&1 &
  kill_h2_agent_once "pmix_client fence-after=30"; wait)
fences_failed "a waiting fence along a chain cut at h2 fails on the 6 others" "$out"
took=$(elapsed "$t0")
if awk -v t="$took" 'BEGIN{exit !(t <= 10)}'; then ok "and the job ends in $took s"; else bad "the job took $took s" "$out"; fi
nothing_left "a host lost from a chain under --on-failure continue" "accrun --daemon"
ends "h3's link down" 5 'ip link set vt-h3 down'
link_up h3
check "the silent host is named" "host h3: no word from its agent" "$(cat "$state/scratch/end.out")"
# a host whose link went down cleans up after itself
nothing_left "h3 after its link came back" "accrun --daemon"
# A host lost while the job starts, before its agent has word of the launch
# (here h3's link goes down while h4's agent is still on its way, 4 s late):
# what the controller sends it goes unacknowledged, and 5 s of that name
# the host lost, where waiting for its agent's first word took 30 s.
late=$state/scratch/late-h4-agent
printf '#!/bin/sh\n[ "$1" = h4 ] && sleep 4\nexec ssh -F %s "$@"\n' "$ACCRUN_TESTBED_SSH_CONFIG" >"$late"
chmod +x "$late"
t0=$(now)
ACCRUN_LOG=debug "$accrun" -n 8 --hostfile "$hosts" --launch-agent "$late" sleep 60 >"$state/scratch/start.out" 2>&1 &
job=$!
for _ in $(seq 200); do grep -q "host h3: its agent said hello" "$state/scratch/start.out" && break; sleep 0.05; done
ip link set vt-h3 down
wait $job
rc=$?
took=$(elapsed "$t0")
# h3's agent never had its launch: it leaves by itself, its link still down,
# once the controller's host has acknowledged none of its beats for 5 s.
for _ in $(seq 100); do [ "$("$tb" hx h3 pgrep -c -f -- "accrun --daemon")" = 0 ] && break; sleep 0.1; done
check "h3's agent leaves while its link is still down" "^0$" "$("$tb" hx h3 pgrep -c -f -- "accrun --daemon")"
link_up h3
if [ "$rc" != 0 ] && awk -v t="$took" 'BEGIN{exit !(t <= 14)}'; then ok "h3's link down during the start: ended in $took s (exit $rc)"
else bad "h3's link down during the start: took $took s (exit $rc)" "$(cat "$state/scratch/start.out")"; fi
check "the unreachable host is named" "host h3: acknowledged nothing accrun sent it for 5 s" "$(cat "$state/scratch/start.out")"
nothing_left "a host lost during the start" "sleep 60"
nothing_left "h3 after its link came back, lost during the start" "accrun --daemon"
exit $fail
