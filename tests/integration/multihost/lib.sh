# lib.sh — what the multi-host test scripts share; sourced after the test
# bed's env.sh.  Sets: tb, state, mpi_env, fail; defines ok, bad, check,
# nothing_left, now, elapsed, link_up.
tb=$ACCRUN_TESTBED
state=$ACCRUN_TESTBED_STATE
mpi_env=(-x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x OMPI_MCA_hwloc_base_binding_policy)
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && echo "$2" | head -40; fail=1; }
check() {  # check NAME REGEX TEXT
  if grep -Eq -- "$2" <<<"$3"; then ok "$1"; else bad "$1: expected /$2/ in:" "$3"; fi
}
nothing_left() {  # nothing_left NAME PATTERN: no process matching, no job directory, on any host
  local h left i
  for i in $(seq 50); do
    left=""
    for h in h1 h2 h3 h4; do
      # (the shell itself carries the pattern in its arguments: leave it out)
      left+=$("$tb" hx "$h" sh -c 'pgrep -f -- "$1" | grep -vx "$$" | sed "s/^/$2:/"; ls -d /tmp/accrun.* /dev/shm/accrun.* 2>/dev/null | sed "s/^/$2:/"' sh "$2" "$h")
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  if [ -z "$left" ]; then ok "$1: nothing left on any host"; else bad "$1: left behind" "$left"; fi
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b - a}'; }
# link_up HOST: its link (set down by a test) up again, and the next test
# not started before HOST reaches every other host's sshd: until the
# neighbours are resolved again a connection there fails with "No route to
# host" (MPICH's UCX start-up did, right after the store's link-down test).
link_up() {
  ip link set "vt-$1" up
  local h i
  for h in h1 h2 h3 h4; do
    [ "$h" = "$1" ] && continue
    for i in $(seq 50); do
      "$tb" hx "$1" timeout 1 bash -c "exec 3<>/dev/tcp/$h/22" 2>/dev/null && break
      sleep 0.1
    done
  done
}
