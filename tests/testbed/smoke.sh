#!/bin/bash
# smoke.sh -- checks of the running test bed (CTest: testbed.smoke). Exit 0 all passed,
# 1 a check failed, 77 this machine cannot run the test bed.
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/env.sh" || exit $?
fail=0
ok()  { echo "PASS: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
IFS=, read -ra hosts <<<"$ACCRUN_TESTBED_HOSTS"

# 1. ssh from the root namespace to every host: its own hostname
for h in "${hosts[@]}"; do
  out=$(timeout 30 ssh -F "$ACCRUN_TESTBED_SSH_CONFIG" "$h" hostname 2>&1)
  [ "$out" = "$h" ] && ok "ssh $h hostname -> $out" || bad "ssh $h hostname -> '$out'"
done

# 2. private /dev/shm: a file made in h1's is seen neither in h2's nor in the root namespace's
f=/dev/shm/accrun-smoke-$$
tb_ssh h1 "echo h1 > $f" || bad "cannot write $f in h1"
if tb_ssh h1 "test -e $f" && ! tb_ssh h2 "test -e $f" && [ ! -e "$f" ]; then
  ok "$f made in h1 is not in h2's /dev/shm nor the root namespace's"
else bad "/dev/shm is not private per host"; fi
tb_ssh h1 "rm -f $f"

# 3. TCP from h2 to the head address (a listener in the root namespace), by address and by name
for target in "$ACCRUN_TESTBED_HEAD_ADDR" head; do
  port=$((20000 + RANDOM % 20000)) ready=$ACCRUN_TESTBED_STATE/scratch/smoke-ready-$$
  rm -f "$ready"
  timeout 20 python3 - "$ACCRUN_TESTBED_HEAD_ADDR" "$port" "$ready" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); open(sys.argv[3], "w").close()
c, peer = s.accept(); c.sendall(("hello from head to %s\n" % peer[0]).encode()); c.close()
PY
  srv=$!
  for i in $(seq 100); do [ -e "$ready" ] && break; sleep 0.05; done
  out=$(timeout 10 ssh -F "$ACCRUN_TESTBED_SSH_CONFIG" h2 "exec 3<>/dev/tcp/$target/$port && cat <&3" 2>&1)
  wait $srv
  rm -f "$ready"
  [[ $out == "hello from head to ${ACCRUN_TESTBED_HEAD_ADDR%.*}.12" ]] && ok "TCP h2 -> $target:$port: $out" || bad "TCP h2 -> $target:$port: '$out'"
done

# 4. hosts launching on hosts: ssh from inside h1 to h2
out=$(timeout 30 ssh -F "$ACCRUN_TESTBED_SSH_CONFIG" h1 ssh -F "$ACCRUN_TESTBED_SSH_CONFIG" h2 hostname 2>&1)
[ "$out" = h2 ] && ok "ssh h1 -> ssh h2 hostname -> $out" || bad "ssh h1 -> ssh h2 hostname -> '$out'"

# 5. per-host directory: $ACCRUN_TESTBED_STATE/hosts/hN is /run/testbed inside hN
for h in "${hosts[@]}"; do echo "$h" >"$ACCRUN_TESTBED_STATE/hosts/$h/smoke-$$"; done
for h in "${hosts[@]}"; do
  out=$(tb_ssh "$h" cat "/run/testbed/smoke-$$" 2>&1)
  [ "$out" = "$h" ] && ok "/run/testbed in $h is \$ACCRUN_TESTBED_STATE/hosts/$h" || bad "/run/testbed in $h: '$out'"
  rm -f "$ACCRUN_TESTBED_STATE/hosts/$h/smoke-$$"
done

# 6. with Slurm: one task on every node
if [ "$ACCRUN_TESTBED_SLURM" = 1 ]; then
  out=$(timeout 60 srun -N "${#hosts[@]}" hostname 2>&1 | sort | paste -sd,)
  [ "$out" = "$ACCRUN_TESTBED_HOSTS" ] && ok "srun -N ${#hosts[@]} hostname -> $out" || bad "srun -N ${#hosts[@]} hostname -> '$out'"
fi

[ $fail = 0 ] && echo "smoke: all passed" || echo "smoke: FAILED"
exit $fail
