#!/usr/bin/env bash
# accrun --detect across the test bed's hosts (accrun(1) "LAUNCHING ON
# SEVERAL HOSTS"): an agent on every host detects its own (fake) sysfs root,
# passed through the launch-agent template; a launch tree of fanout 1 and
# the default; a connection with a wrong secret is refused while the
# detection goes on; hosts that cannot be reached are named.
# usage: detect.sh SOURCE_DIR ACCRUN
set -uo pipefail
src=$1
accrun=$2
. "$src/tests/testbed/env.sh" || exit $?
fx=$src/tests/fixtures/sysfs
fail=0
check() {  # check NAME REGEX TEXT
  if ! grep -Eq -- "$2" <<<"$3"; then
    echo "FAIL $1: expected /$2/ in:"; echo "$3"; fail=1
  else
    echo "ok   $1"
  fi
}
state=$ACCRUN_TESTBED_STATE
i=0
for fixture in nvidia-8xh100 amd-8xmi300x gaudi2 decoys; do
  i=$((i + 1))
  rm -rf "$state/hosts/h$i/sys"; mkdir -p "$state/hosts/h$i"
  cp -r "$fx/$fixture" "$state/hosts/h$i/sys"
done
ssh_cfg=$ACCRUN_TESTBED_SSH_CONFIG
agent="ssh -F $ssh_cfg {host} env ACCRUN_NVML_LIBRARY= ACCRUN_SYSFS_ROOT=/run/testbed/sys {cmd}"

for fanout in 1 32; do
  out=$("$accrun" --detect --json --fanout $fanout --hostfile "$ACCRUN_TESTBED_HOSTFILE" --launch-agent "$agent" 2>&1)
  rc=$?
  check "json fanout=$fanout exit 0" "^0$" "$rc"
  check "json fanout=$fanout h1 H100" '"host": "h1", [^]]*"type": "H100-SXM"' "$out"
  check "json fanout=$fanout h2 MI300X" '"host": "h2", [^]]*"type": "MI300X"' "$out"
  check "json fanout=$fanout h3 GAUDI2" '"host": "h3", [^]]*"resource": "HPU", "id": 7, "type": "GAUDI2"' "$out"
  check "json fanout=$fanout h4 nothing" '"host": "h4", [^]]*"accelerators": \[\]' "$out"
done
table=$(ACCRUN_LOG=debug "$accrun" --detect --fanout 2 --hostfile "$ACCRUN_TESTBED_HOSTFILE" --launch-agent "$agent" 2>&1)
check "table" "h3: .*HPU +[0-9]+ +GAUDI2" "$(tr '\n' ' ' <<<"$table")"
check "tree of fanout 2: the controller starts 2" "launch tree: 4 agents, fanout 2, depth 2; 2 started here" "$table"

# Pod labels each host's agent detects (a TPU VM's environment: the slice and
# the host's worker id) reach the controller, which shows them and places a
# pod block in worker order with no label in the hostfile.
for i in 1 2 3 4; do
  rm -rf "$state/hosts/h$i/sys"; cp -r "$fx/tpu-v4" "$state/hosts/h$i/sys"
done
tagent="ssh -F $ssh_cfg {host} env ACCRUN_NVML_LIBRARY= ACCRUN_SYSFS_ROOT=/run/testbed/sys TPU_NAME=slice-t TPU_WORKER_HOSTNAMES=h4,h3,h2,h1 {cmd}"
table=$("$accrun" --detect --hostfile "$ACCRUN_TESTBED_HOSTFILE" --launch-agent "$tagent" 2>&1)
for i in 1 2 3 4; do
  check "h$i detected as worker $((4 - i)) of slice-t" "h$i: .*labels: pod=slice-t worker=$((4 - i))" "$table"
done
out=$("$accrun" -n 4 --hostfile "$ACCRUN_TESTBED_HOSTFILE" --launch-agent "$tagent" --resources-per-rank TPU=4 \
  --pod-blocks 4 sh -c 'echo "rank $ACCRUN_RANK on $(hostname)"' 2>&1)
check "a pod block in detected worker order" "rank 0 on h4.*rank 1 on h3.*rank 2 on h2.*rank 3 on h1" \
  "$(sort <<<"$out" | tr '\n' ' ')"

# A connection with a wrong secret, and one with garbage, while agents come up.
slow="sleep 2; ssh -F $ssh_cfg {host} {cmd}"
"$accrun" --detect -H h1,h2 --launch-agent "$slow" >"$state/scratch/slow.out" 2>"$state/scratch/slow.err" &
pid=$!
port=""
for _ in $(seq 50); do
  port=$(ss -ltnpH 2>/dev/null | grep "pid=$pid," | grep -F "$ACCRUN_TESTBED_HEAD_ADDR:" | awk '{print $4}' | sed 's/.*://' | head -1)
  [ -n "$port" ] && break
  sleep 0.05
done
if [ -z "$port" ]; then echo "FAIL: no listening port of the controller found"; fail=1; fi
addr=$ACCRUN_TESTBED_HEAD_ADDR
# garbage, then a well-formed hello with a random nonce and a wrong proof
"$ACCRUN_TESTBED" hx h3 bash -c "exec 3<>/dev/tcp/$addr/$port; printf 'GET / HTTP/1.0\r\n\r\n' >&3; timeout 3 cat <&3 >/dev/null" || true
"$ACCRUN_TESTBED" hx h3 bash -c "exec 3<>/dev/tcp/$addr/$port; printf 'ACCRUN1\0\002' >&3; head -c 32 /dev/urandom >&3; sleep 0.3; head -c 32 /dev/urandom >&3; timeout 3 cat <&3 >/dev/null" || true
wait $pid
rc=$?
check "detect goes on past bad connections" "^0$" "$rc"
check "both hosts listed" "h1: .*h2: " "$(tr '\n' ' ' <"$state/scratch/slow.out")"
check "bad connections refused and reported" "refused a connection from 10\.78\.0\.13.*refused a connection from 10\.78\.0\.13" "$(tr '\n' ' ' <"$state/scratch/slow.err")"

# Hosts that cannot be reached: one message naming the host, exit 1.
out=$("$accrun" --detect -H h1,nosuchhost --launch-agent "ssh -F $ssh_cfg" 2>&1)
check "unreachable host exit 1" "^1$" "$?"
check "unreachable host named" "host nosuchhost: its launch agent .* exited with status 255 before accrun --daemon connected" "$out"
check "ssh's own failure explained" "\\(255: ssh itself failed; 'ssh HOST true' must work without a password" "$out"
out=$(ACCRUN_AGENT_TIMEOUT=5 "$accrun" --detect -H h2 --daemon-path /nonexistent/accrun --launch-agent "ssh -F $ssh_cfg" 2>&1)
check "missing daemon path named" "host h2: .*exited with status 127" "$out"
check "and --daemon-path suggested" "\\(127: the shell there found no /nonexistent/accrun; .* with --daemon-path\\)$" "$out"

# Nothing is left on any host.
for h in h1 h2 h3 h4; do
  left=$("$ACCRUN_TESTBED" hx "$h" pgrep -f -- '--daemon' || true)
  [ -z "$left" ] || { echo "FAIL: agent processes left on $h: $left"; fail=1; }
done
rm -rf "$state"/hosts/h*/sys
exit $fail
