#!/usr/bin/env bash
# Launch across hosts (the test bed of tests/testbed must be up):
#   1. 4 hosts x 16 ranks of /bin/true: accrun vs mpirun with the same ssh and
#      hostfile, interleaved, ROUNDS rounds (default 20); medians and hangs
#      (a run over LIMIT seconds, default 30, is a hang, left out of medians).
#   2. Open MPI hello (MPI_Init+MPI_Finalize) across 4 hosts x 2: accrun vs mpirun.
#   3. Scale by simulation: agents started on this machine through the
#      template '{cmd}' under distinct host names, 32..256 agents x 1 rank,
#      --fanout 8 and the default: launch-to-exit time, and how many launch
#      agents the controller itself started; with FENCE_BENCH set (the
#      fence_bench program), a PMIx fence's median time, with and without
#      data, at each agent count.
# SSH_KEX=ALGORITHMS: both launchers' ssh use that key exchange (a copy of
# the test bed's ssh config with KexAlgorithms first).  OpenSSH 9.2's default,
# sntrup761x25519-sha512, costs the client ~0.1 s of CPU per connection on
# this machine; curve25519-sha256 ~0.01 s.
# usage: [FENCE_BENCH=path] [SSH_KEX=ALGORITHMS] multihost_bench.sh ACCRUN MPI_HELLO [ROUNDS]
set -uo pipefail
accrun=$1
hello=$2
rounds=${3:-20}
limit=${LIMIT:-30}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/testbed/env.sh" || exit $?
ssh_cfg=$ACCRUN_TESTBED_SSH_CONFIG
if [ -n "${SSH_KEX:-}" ]; then
  kex_cfg=$(mktemp)
  trap 'rm -f "$kex_cfg"' EXIT
  { echo "KexAlgorithms $SSH_KEX"; cat "$ssh_cfg"; } >"$kex_cfg"
  ssh_cfg=$kex_cfg
fi
export OMPI_MCA_plm_rsh_agent="ssh -F $ssh_cfg"
export OMPI_MCA_hwloc_base_binding_policy=none
hosts16=h1:16,h2:16,h3:16,h4:16

t() {  # t CMD...: seconds, or "hang"
  local t0 t1
  t0=$(date +%s.%N)
  if ! timeout -k 2 "$limit" "$@" >/dev/null 2>&1; then
    [ $? -ge 124 ] && { echo hang; return; }
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b - a}'
}
median() { sort -n | awk '{a[NR]=$1} END{if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }
compare() {  # compare NAME ROUNDS -- ACCRUN-CMD -- MPIRUN-CMD
  local name=$1 n=$2
  shift 3
  local acmd=() mcmd=()
  while [ "$1" != "--" ]; do acmd+=("$1"); shift; done
  shift
  mcmd=("$@")
  local a m ah=0 mh=0 as=() ms=() i
  for i in $(seq "$n"); do
    a=$(t "${acmd[@]}"); [ "$a" = hang ] && ah=$((ah + 1)) || as+=("$a")
    m=$(t "${mcmd[@]}"); [ "$m" = hang ] && mh=$((mh + 1)) || ms+=("$m")
  done
  local am mm
  am=$(printf '%s\n' "${as[@]}" | median)
  mm=$(printf '%s\n' "${ms[@]}" | median)
  printf '%-34s accrun %8.1f ms  mpirun %8.1f ms  hangs %d/%d  mpirun/accrun %5.2fx\n' "$name" \
    "$(awk -v x="$am" 'BEGIN{print x*1000}')" "$(awk -v x="$mm" 'BEGIN{print x*1000}')" "$ah" "$mh" \
    "$(awk -v a="$am" -v m="$mm" 'BEGIN{print m/a}')"
}

echo "# launch across the test bed's 4 hosts, $rounds interleaved rounds (medians)"
# The floor both launchers stand on: one ssh to each host, all at once (the
# handshakes share this machine's CPUs).  With the test bed's ssh
# multiplexing (TESTBED_SSH_MUX=1 at 'testbed up') it is a few ms, and the
# launchers' own costs show.
floor=()
for _ in $(seq "$rounds"); do
  floor+=("$(t bash -c 'for h in h1 h2 h3 h4; do ssh -F "$0" "$h" true & done; wait' "$ssh_cfg")")
done
printf '%-34s %8.1f ms  (ControlMaster: %s, key exchange: %s)\n' "4 concurrent 'ssh hN true'" \
  "$(printf '%s\n' "${floor[@]}" | grep -v hang | median | awk '{print $1*1000}')" \
  "$(grep -q '^ *ControlMaster auto' "$ssh_cfg" && echo on || echo off)" \
  "$(ssh -G -F "$ssh_cfg" h1 | sed -n 's/^kexalgorithms \([^,]*\).*/\1/p')"
compare "4 hosts x 16 /bin/true" "$rounds" -- "$accrun" -n 64 -H "$hosts16" --launch-agent "ssh -F $ssh_cfg" /bin/true \
  -- mpirun --allow-run-as-root -n 64 --host "$hosts16" /bin/true
hr=$(( rounds < 10 ? rounds : 10 ))
compare "Open MPI hello, 4 hosts x 2" "$hr" -- "$accrun" -n 8 --hostfile "$ACCRUN_TESTBED_HOSTFILE" \
  --launch-agent "ssh -F $ssh_cfg" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$hello" \
  -- mpirun --allow-run-as-root -n 8 --host h1:2,h2:2,h3:2,h4:2 "$hello"

echo "# scale by simulation: agents on this machine ('{cmd}'), 1 rank each, median of 3"
printf '%8s %8s %10s %8s %14s\n' agents fanout ms depth started_here
for n in 32 64 128 256; do
  for f in 8 32; do
    runs=()
    for _ in 1 2 3; do runs+=("$(t "$accrun" -n "$n" -H "sim[1-$n]:1" --fanout "$f" --launch-agent '{cmd}' /bin/true)"); done
    line=$(ACCRUN_LOG=debug "$accrun" -n "$n" -H "sim[1-$n]:1" --fanout "$f" --launch-agent '{cmd}' /bin/true 2>&1 | grep -m1 "launch tree")
    depth=$(sed -n 's/.*depth \([0-9]*\).*/\1/p' <<<"$line")
    here_n=$(sed -n 's/.*; \([0-9]*\) started here.*/\1/p' <<<"$line")
    fence=""
    [ -n "${FENCE_BENCH:-}" ] && fence=$(timeout "$limit" "$accrun" -n "$n" -H "sim[1-$n]:1" --fanout "$f" --launch-agent '{cmd}' "$FENCE_BENCH" 20 2>/dev/null)
    printf '%8d %8d %10.1f %8s %14s %s\n' "$n" "$f" "$(printf '%s\n' "${runs[@]}" | grep -v hang | median | awk '{print $1*1000}')" "$depth" "$here_n" "$fence"
  done
done
