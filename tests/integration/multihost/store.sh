#!/usr/bin/env bash
# The store backend across the test bed's hosts (accrun(7) "The store
# backend"): the exact-result suite through the C API on 2 hosts x 2 ranks
# and 4 hosts x 1 (shared memory inside a host, TCP between hosts), AUTO on
# host buffers across hosts, and a member that dies on another host during
# an allreduce: every survivor fails with ACCRUN_ERR_REMOTE naming it
# within 5 s; nothing is left on any host.
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

for layout in "h1:2,h2:2" "h1:1,h2:1,h3:1,h4:1"; do
  out=$("$accrun" --timeout 200 -n 4 -H "$layout" --launch-agent "$agent" -x ACCRUN_LOG=debug "$suite" --host-staging 2>&1)
  rc=$?
  if [ "$rc" = 0 ] && grep -q "nccl_suite: PASS (4 ranks" <<<"$out" && ! grep -q FAIL <<<"$out"; then
    ok "the exact suite over a store group on $layout"
  else
    bad "the exact suite over a store group on $layout (exit $rc)" "$(grep -v '^accrun: ' <<<"$out" | tail -20; grep 'store backend ready' <<<"$out" | head -4)"
  fi
  check "$layout: a hierarchical group (tcp between hosts)" "store backend ready \(4 ranks on [24] hosts, shm inside a host, tcp between" "$out"
done

out=$("$accrun" --timeout 60 -n 4 -H h1:2,h2:2 --launch-agent "$agent" -x ACCRUN_LOG=debug "$backends_auto" 2>&1)
n=$(grep -c "auto_backend: PASS" <<<"$out")
[ "$n" = 4 ] && ok "AUTO on host buffers across 2 hosts: the store, 4 exact sums" || bad "AUTO across hosts" "$out"

# Group rank 1 (on h2) exits with 3 after joining; the others (h1, h3) are
# in an allreduce loop and must fail naming it.
t0=$(now)
out=$("$accrun" --timeout 60 -n 3 -H h1:1,h2:1,h3:1 --launch-agent "$agent" --on-failure continue "$probe" death 2>&1)
n=$(grep -c "OK death" <<<"$out")
[ "$n" = 2 ] && ok "a member dying on another host: both survivors fail naming it ($(elapsed "$t0") s in all)" \
  || bad "a member dying on another host" "$out"
check "the survivors' error names rank 1" "rank [02]: .*rank 1.*\([0-4]\.[0-9]+ s\)" "$out"
nothing_left "store across hosts" "$probe"
exit $fail
