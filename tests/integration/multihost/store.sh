#!/usr/bin/env bash
# The store backend across the test bed's hosts (accrun(7) "The store
# backend"): the exact-result suite through the C API on 2 hosts x 2 ranks
# and 4 hosts x 1 (shared memory inside a host, TCP or libfabric's tcp
# provider between hosts; large allreduces in lanes on 2 x 2), AUTO on
# host buffers across hosts, and a member that dies on another host during
# an allreduce: every survivor fails with ACCRUN_ERR_REMOTE naming it
# within 5 s; the links' TCP congestion control; objects put on one host and read on another; nothing is
# left on any host.
# usage: store.sh SOURCE_DIR ACCRUN SUITE PROBE BACKENDS_AUTO
set -uo pipefail
src=$1
accrun=$2
suite=$3
probe=$4
backends_auto=$5
. "$src/tests/testbed/env.sh" || exit $?
. "$(dirname "$0")/lib.sh"
agent="ssh -F $ACCRUN_TESTBED_SSH_CONFIG"

# Over TCP (the default) and over libfabric's tcp provider, where built.
transports=tcp
"$accrun" --version | grep -q "libfabric transport: built" && transports="tcp libfabric"
for transport in $transports; do
  case $transport in tcp) between="tcp";; libfabric) between="libfabric \(tcp;ofi_rxm\)";; esac
  for layout in "h1:2,h2:2" "h1:1,h2:1,h3:1,h4:1"; do
    out=$("$accrun" --timeout 200 -n 4 -H "$layout" --launch-agent "$agent" -x ACCRUN_LOG=debug \
      -x ACCRUN_STORE_TRANSPORT=$transport -x FI_PROVIDER=tcp "$suite" --host-staging 2>&1)
    rc=$?
    if [ "$rc" = 0 ] && grep -q "nccl_suite: PASS (4 ranks" <<<"$out" && ! grep -q FAIL <<<"$out"; then
      ok "the exact suite over a store group on $layout, $transport between hosts"
    else
      bad "the exact suite over a store group on $layout, $transport (exit $rc)" "$(grep -v '^accrun: ' <<<"$out" | tail -20; grep 'store backend ready' <<<"$out" | head -4)"
    fi
    check "$layout: a hierarchical group ($transport between hosts)" "store backend ready \(4 ranks on [24] hosts, shm inside a host, $between between" "$out"
    # Two ranks on each host, which read each other's memory: the large
    # allreduces run in lanes, each rank with its slice between the hosts.
    [ "$layout" = h1:2,h2:2 ] &&
      check "$layout: large allreduces in 2 lanes ($transport)" "allreduce between 2 hosts in 2 lanes: this member's part" "$out"
  done
done

# The congestion control of the store's connections between hosts, as the
# kernel reports them (ss on h2): Reno unless the job names another
# (ACCRUN_STORE_TCP_CONGESTION; "system": the host's own); a name the host
# lacks fails the group's set-up naming the variable and the host.
store_cc() {  # store_cc [VALUE]: the congestion controls of the probe's links on h2
  local extra=() pid
  [ -n "${1:-}" ] && extra=(-x "ACCRUN_STORE_TCP_CONGESTION=$1")
  "$accrun" --timeout 60 -n 2 -H h1:1,h2:1 --launch-agent "$agent" "${extra[@]}" "$probe" loop >"$state/cc.out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ "$(grep -c looping "$state/cc.out")" = 2 ] && break; sleep 0.1; done
  # The detail line names the congestion control after the options the
  # connection negotiated (ts, sack, ecn ...), before the first "key:value".
  "$tb" hx h2 ss -tinpH | awk '/runtime_probe/ && !/127\.0\.0\.1/ {
      getline
      for (i = 1; i <= NF; i++) if ($i !~ /:/ && $i !~ /^(ts|sack|ecn|ecnseen|fastopen|noecn)$/) { print $i; break }
    }' | sort -u | tr '\n' ' '
  kill "$pid"
  wait "$pid" 2>/dev/null
}
got=$(store_cc)
[ "$got" = "reno " ] && ok "the store's links between hosts use Reno by default" || bad "the store's congestion control by default: '$got'" "$(cat "$state/cc.out")"
host_cc=$("$tb" hx h2 cat /proc/sys/net/ipv4/tcp_congestion_control)
got=$(store_cc system)
if [ "$host_cc" = reno ]; then
  ok "ACCRUN_STORE_TCP_CONGESTION=system: the host's ($host_cc; the same as the default here, so not told apart)"
else
  [ "$got" = "$host_cc " ] && ok "ACCRUN_STORE_TCP_CONGESTION=system: the host's own ($host_cc)" \
    || bad "ACCRUN_STORE_TCP_CONGESTION=system gave '$got', the host's is $host_cc" "$(cat "$state/cc.out")"
fi
out=$("$accrun" --timeout 60 -n 2 -H h1:1,h2:1 --launch-agent "$agent" -x ACCRUN_STORE_TCP_CONGESTION=nosuchcc "$probe" loop 2>&1)
rc=$?
[ "$rc" != 0 ] && ! grep -q "^rank [01]: looping" <<<"$out" && ok "a congestion control the hosts lack fails the group's set-up (exit $rc)" \
  || bad "ACCRUN_STORE_TCP_CONGESTION=nosuchcc (exit $rc)" "$out"
check "its message names the variable and the host" "ACCRUN_STORE_TCP_CONGESTION='nosuchcc': host h[12] does not have it" "$out"

out=$("$accrun" --timeout 60 -n 4 -H h1:2,h2:2 --launch-agent "$agent" -x ACCRUN_LOG=debug "$backends_auto" 2>&1)
n=$(grep -c "auto_backend: PASS" <<<"$out")
[ "$n" = 4 ] && ok "AUTO on host buffers across 2 hosts: the store, 4 exact sums" || bad "AUTO across hosts" "$out"

# The object store between hosts: 1 KiB and 256 MiB objects read on the
# other host, exactly, and deleted from there; an object whose rank has
# exited is still served by its host's agent; every rank reads every other
# rank's object on 3 hosts.
out=$("$accrun" --timeout 120 -n 2 -H h1:1,h2:1 -x ACCRUN_STORE_SIZE=90% --launch-agent "$agent" "$probe" objects 256 2>&1)
rc=$?
n=$(grep -c "^OK objects" <<<"$out")
[ "$rc" = 0 ] && [ "$n" = 2 ] && ok "objects of 1 KiB and 256 MiB between h1 and h2: exact, deleted from the other host, served after their rank exited ($(grep -o 'in [0-9.]* s' <<<"$out" | tr '\n' ' '))" \
  || bad "objects between hosts (exit $rc)" "$out"
out=$("$accrun" --timeout 60 -n 3 -H h1:1,h2:1,h3:1 --launch-agent "$agent" "$probe" store 2>&1)
n=$(grep -c "^OK store" <<<"$out")
[ "$n" = 3 ] && ok "every rank reads every other host's object; the next host deletes it" || bad "objects on 3 hosts" "$out"

# Group rank 1 (on h2) exits with 3 after joining; the others (h1, h3) are
# in an allreduce loop and must fail naming it.
t0=$(now)
out=$("$accrun" --timeout 60 -n 3 -H h1:1,h2:1,h3:1 --launch-agent "$agent" --on-failure continue "$probe" death 2>&1)
n=$(grep -c "OK death" <<<"$out")
[ "$n" = 2 ] && ok "a member dying on another host: both survivors fail naming it ($(elapsed "$t0") s in all)" \
  || bad "a member dying on another host" "$out"
check "the survivors' error names rank 1" "rank [02]: .*rank 1.*\([0-4]\.[0-9]+ s\)" "$out"
# Rank 2 leaves the group properly (destroy, finalize, exit 0) on h2; the
# allreduce that needed it fails on h2 (rank 1 leads the host and stays in
# the group for 8 s more), and rank 0 on h1 hears at once from rank 1 why,
# naming rank 2, instead of waiting for rank 1's connection to close.
out=$("$accrun" --timeout 60 -n 3 -H h1:1,h2:2 --launch-agent "$agent" "$probe" leave 2>&1)
rc=$?
[ "$rc" = 0 ] && [ "$(grep -c "^OK leave rank [01]$" <<<"$out")" = 2 ] && grep -q "^rank 2 left the group$" <<<"$out" \
  && ok "a member leaving properly: the others' allreduce fails naming it" || bad "a member leaving properly (exit $rc)" "$out"
check "h1 hears from h2's leader why, within 5 s" \
  "^rank 0: .*group rank 1 \(job rank 1 on host h2\) gave up: .*job rank 2 on h2.*\([0-4]\.[0-9]+ s\)" "$out"
# During an allreduce loop (1 MiB: the ring between hosts), group rank 1's
# process on h2 is killed with SIGKILL, then, in a second job, h2's link is
# set down (--on-failure continue: the controller tells the others that
# h2's ranks are lost).  Each survivor fails with ACCRUN_ERR_REMOTE naming
# rank 1 within 5 s of the event.
survivors_fail() {  # survivors_fail NAME ACTION [TRANSPORT]
  local out t_event t_last
  "$accrun" --timeout 60 -n 3 -H h1:1,h2:1,h3:1 --launch-agent "$agent" --on-failure continue \
    -x ACCRUN_STORE_TRANSPORT="${3:-tcp}" "$probe" loop \
    >"$state/loop.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do [ "$(grep -c looping "$state/loop.out")" = 3 ] && break; sleep 0.1; done
  sleep 0.5
  t_event=$(now)
  eval "$2"
  wait "$pid"
  out=$(cat "$state/loop.out")
  n=$(grep -c "^rank [02]: failed at .*rank 1 .*h2" <<<"$out")
  t_last=$(grep -o "^rank [02]: failed at [0-9.]*" <<<"$out" | awk '{print $5}' | sort -n | tail -1)
  if [ "$n" = 2 ] && awk -v a="$t_event" -v b="$t_last" 'BEGIN{exit !(b - a < 5)}'; then
    ok "$1: both survivors fail naming rank 1 on h2, $(awk -v a="$t_event" -v b="$t_last" 'BEGIN{printf "%.1f", b - a}') s after it"
  else
    bad "$1 (event at $t_event)" "$out"
  fi
}
survivors_fail "kill -9 of a member on h2 mid-allreduce" '"$tb" hx h2 pkill -9 -f "runtime_probe loop"'
survivors_fail "h2's link down mid-allreduce" 'ip link set vt-h2 down'
link_up h2
if [[ $transports == *libfabric* ]]; then
  sleep 1
  survivors_fail "libfabric: kill -9 of a member on h2 mid-allreduce" '"$tb" hx h2 pkill -9 -f "runtime_probe loop"' libfabric
  survivors_fail "libfabric: h2's link down mid-allreduce" 'ip link set vt-h2 down' libfabric
  link_up h2
fi
nothing_left "store across hosts" "$probe"
exit $fail
