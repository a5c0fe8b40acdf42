#!/usr/bin/env bash
# hosts.sh BUILD_DIR [LAUNCHES [PART...]] — the store backend across the namespace test bed's
# hosts against Open MPI's own collectives over its tcp BTL (raw-mpi) in the
# same launch, and the store's large sends against one raw TCP stream
# between the same two hosts.  Brings the test bed up if it is not (root).
#   2 hosts x 1 rank and 4 hosts x 2 ranks (8 B .. 4 MiB; on 4 x 2
#   both libraries told the 8 ranks oversubscribe this
#   machine's 2 CPUs): osu_allreduce,
#   osu_bcast, osu_allgather --backend store,raw-mpi (each table ends with a
#   ratio table, store / raw-mpi, per size; each runs in LAUNCHES launches,
#   default 3, followed by each size's ratio per launch and their median)
#   the same 2 x 1 tables with the store over libfabric's tcp provider;
#   torch.distributed's gloo (gloo_bench.py) on both layouts when
#   python3-torch is installed, each against the store alone (no MPI in
#   the process, as in gloo's), in three alternating launches of each,
#   each size's median over them, ratio gloo / store per size;
#   osu_bw --backend store between h1 and h2, object_get (accrun_get on h2
#   of objects put on h1), and tcp_stream h1 -> h2 under the hosts' and
#   the store's congestion control; the 2 x 1 tables again with every
#   host's congestion control set to Reno (Open MPI's too).
# PARTs (default all, in this order): mpi (the store/raw-mpi tables),
# libfabric, gloo, stream (osu_bw, object_get, tcp_stream), reno.
set -uo pipefail
b=${1:?usage: hosts.sh BUILD_DIR [LAUNCHES]}
# Each store/raw-mpi table runs in LAUNCHES launches (default 3): inside a
# launch the two libraries alternate per size, so a launch's ratio is a fair
# pair, but the test bed drifts between launches (the 2 x 1 broadcast of 8 B
# took 8.5 us in one and 12 us in the next, in both libraries alike).  After
# the launches' tables comes each size's median ratio over them.
launches=${2:-3}
case $launches in '' | *[!0-9]* | 0) echo "hosts.sh: LAUNCHES must be a whole number >= 1, not '$launches'" >&2; exit 2 ;; esac
shift $(($# < 2 ? $# : 2))
parts=" $* "
for p in "$@"; do
  case $p in mpi | libfabric | gloo | stream | reno) ;;
    *) echo "hosts.sh: unknown PART '$p' (known: mpi libfabric gloo stream reno)" >&2; exit 2 ;;
  esac
done
# part NAME: whether NAME is to run
part() { [ "$parts" = "  " ] || [[ $parts == *" $1 "* ]]; }
src=$(cd "$(dirname "$0")/../.." && pwd)
tb=$src/tests/testbed/testbed
"$tb" status >/dev/null 2>&1 || "$tb" up >/dev/null || exit $?
eval "$("$tb" env)"
agent="ssh -F $ACCRUN_TESTBED_SSH_CONFIG"
mpi=(-x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 -x OMPI_MCA_btl=self,vader,tcp
     -x OMPI_MCA_hwloc_base_binding_policy=none)
# The test bed's hosts share this machine's CPUs.  A rank that moves from
# one CPU to the other reorders its TCP segments (a veth delivers them
# through the sending CPU's backlog; a NIC's receive hashing keeps a flow in
# order), and the spurious retransmissions slow its connection for seconds,
# in the store and Open MPI alike.  With one rank per host, each rank is
# pinned to a CPU of its own, as two real hosts would give it.
pin=(sh -c 'exec taskset -c "$ACCRUN_RANK" "$@"' pin)
# 8 ranks on the test bed's 2 CPUs are 4x oversubscribed: unpinned there,
# and both libraries are told so (1,000 iterations as on 2 x 1: with 100, a
# small size's calls lasted a few scheduler slices, benchmarks/README.md).  Each host gets one slot
# and --oversubscribe places 2 ranks on each (accrun then sets
# ACCRUN_OVERSUBSCRIBED=1: the store yields instead of spinning and keeps
# its broadcast off the path that waits for every reader of a host at once),
# and Open MPI gets mpi_yield_when_idle=1.
over=(--oversubscribe -x OMPI_MCA_mpi_yield_when_idle=1)
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
# median_table FILE...: each size's median over the files' "SIZE VALUE" lines
# (of an even count, the lower middle), printed as $fmt (default %12.2f)
median_table() {
  awk -v fmt="${fmt:-%12.2f}" '/^ *[0-9]/ { v[$1] = v[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
       END { for (i = 1; i <= n; i++) { k = split(substr(v[order[i]], 2), a, " ")
               for (x = 1; x <= k; x++) for (y = x + 1; y <= k; y++) if (a[y] + 0 < a[x] + 0) { t = a[x]; a[x] = a[y]; a[y] = t }
               printf "%-10s " fmt "\n", order[i], a[int((k + 1) / 2)] } }' "$@"
}
# launched COMMAND...: runs a store/raw-mpi table LAUNCHES times, printing
# each launch's tables, then each size's store/raw-mpi ratio per launch and
# the median of them.
launched() {
  local k
  for k in $(seq "$launches"); do
    [ "$launches" -gt 1 ] && echo "# launch $k of $launches"
    "$@" | tee "$runs/launch.$k"
    awk '/^# ratio/ { p = 1; next } /^# difference/ { p = 0 } p && /^[0-9]/ { print $1, $2 }' "$runs/launch.$k" >"$runs/ratio.$k"
  done
  if [ "$launches" -gt 1 ]; then
    echo "# ratio: store / raw-mpi per launch, and the median over the $launches launches"
    fmt=%.3f median_table "$runs"/ratio.* | awk -v dir="$runs" -v n="$launches" '
      { line = sprintf("%-10s", $1)
        for (k = 1; k <= n; k++) { v = "-"; f = dir "/ratio." k
          while ((getline l < f) > 0) { split(l, a, " "); if (a[1] == $1) v = a[2] }
          close(f); line = line sprintf(" %7s", v) }
        printf "%s   median %s\n", line, $2 }'
  fi
  rm -f "$runs"/launch.* "$runs"/ratio.*
}
part mpi && for layout in "2 h1:1,h2:1 -i 1000 8:4194304" "8 h1:1,h2:1,h3:1,h4:1 -i 1000 8:4194304"; do
  set -- $layout
  wrap=()
  extra=("${over[@]}")
  [ "$1" = 2 ] && wrap=("${pin[@]}") && extra=()
  for bench in allreduce bcast allgather; do
    echo "## $bench, $1 ranks on $2${extra[*]:+ (--oversubscribe: 2 ranks per host)}"
    launched "$b/launcher/accrun" --timeout 900 -n "$1" -H "$2" "${extra[@]}" --launch-agent "$agent" "${mpi[@]}" \
      "${wrap[@]}" "$b/benchmarks/osu_$bench" --backend store,raw-mpi -m "$5" "$3" "$4"
  done
done
# The store over libfabric's tcp provider instead of plain TCP, same hosts.
if part libfabric && "$b/launcher/accrun" --version | grep -q "libfabric transport: built"; then
  for bench in allreduce bcast allgather; do
    echo "## $bench, 2 ranks on h1:1,h2:1, store over libfabric (tcp provider)"
    "$b/launcher/accrun" --timeout 900 -n 2 -H h1:1,h2:1 --launch-agent "$agent" "${mpi[@]}" \
      -x ACCRUN_STORE_TRANSPORT=libfabric -x FI_PROVIDER=tcp \
      "${pin[@]}" "$b/benchmarks/osu_$bench" --backend store,raw-mpi -m 8:4194304 -i 1000
  done
fi
# torch.distributed's gloo on the same hosts and sizes (Debian's python3-torch)
# against the store alone (--backend store: no MPI in the process, as in
# gloo's; MPI_Init changes how malloc returns memory).  They cannot share a
# launch, so each runs in three launches, alternating, and the tables give
# each size's median over them (each launch's own figure being a median of
# rounds); the launches' spread is the test bed's, which drifts from one
# launch to the next.  Then the ratio gloo / store per size.  gloo runs
# fewer iterations (200 on 2 x 1, 20 on 4 x 2): its calls take 0.5-2 ms
# here, each handing the work from the caller to gloo's threads and back
# (on this VM one wake-up of a thread on the other CPU and back takes about
# 40 us), so 200 of them last longer than the store's 1,000.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! part gloo; then
  :
elif "$py" -c "import torch" 2>/dev/null; then
  for layout in "2 h1:1,h2:1 200 8:4194304 1000" "8 h1:1,h2:1,h3:1,h4:1 20 8:4194304 1000"; do
    set -- $layout
    wrap=()
    extra=(--oversubscribe)
    [ "$1" = 2 ] && wrap=("${pin[@]}") && extra=()
    for bench in allreduce bcast allgather; do
      for k in 1 2 3; do
        "$b/launcher/accrun" --timeout 900 -n "$1" -H "$2" "${extra[@]}" --launch-agent "$agent" -x GLOO_SOCKET_IFNAME=eth0 \
          "${wrap[@]}" "$py" "$src/benchmarks/osu/gloo_bench.py" "$bench" -m "$4" -i "$3" >"$runs/gloo.$k"
        "$b/launcher/accrun" --timeout 900 -n "$1" -H "$2" "${extra[@]}" --launch-agent "$agent" \
          "${wrap[@]}" "$b/benchmarks/osu_$bench" --backend store -m "$4" -i "$5" >"$runs/store.$k"
      done
      echo "## gloo $bench, $1 ranks on $2${extra[*]:+ (--oversubscribe: 2 ranks per host)}, median of 3 launches"
      head -1 "$runs/gloo.1"
      median_table "$runs"/gloo.? | tee "$runs/gloo"
      echo "## $bench, $1 ranks on $2, the store alone${extra[*]:+ (--oversubscribe: 2 ranks per host)}, median of 3 launches"
      median_table "$runs"/store.? | tee "$runs/store"
      echo "# ratio $bench: gloo / store alone"
      awk 'FNR == 1 { f++ } { if (f == 1) g[$1] = $2; else if ($1 in g) printf "%-10s %8.2f\n", $1, g[$1] / $2 }' \
        "$runs/gloo" "$runs/store"
    done
  done
else
  echo "## gloo: python3-torch is not installed (scripts/install-deps.sh --bench installs it); skipped"
fi
if part stream; then
  echo "## osu_bw, store, h1 -> h2"
  "$b/launcher/accrun" --timeout 300 -n 2 -H h1:1,h2:1 --launch-agent "$agent" "${mpi[@]}" \
    "${pin[@]}" "$b/benchmarks/osu_bw" --backend store,raw-mpi -m 1048576:16777216
  echo "## object_get: accrun_get on h2 of objects put on h1"
  "$b/launcher/accrun" --timeout 300 -n 2 -H h1:1,h2:1 --launch-agent "$agent" -x ACCRUN_STORE_SIZE=90% \
    "$b/benchmarks/object_get" -i 10 -m 268435456
  # One TCP stream h1 -> h2 under the hosts' congestion control and under the
  # store's (Reno, accrun/tcp_congestion.hpp), received into a 4 MiB buffer
  # (as osu_bw's of up to 4 MiB, reused), sent from and received into 16 MiB
  # ones (as osu_bw's 16 MiB messages: larger than the cache, like theirs),
  # and received into a 256 MiB one (as object_get's).
  for cc in system reno; do
    for into_from in "4 4" "16 16" "256 4"; do
      set -- $into_from
      echo "## one TCP stream, h1 -> h2, 2 GiB, congestion control $cc, from $2 MiB into $1 MiB"
      "$tb" hx h2 "$b/benchmarks/tcp_stream" serve 7999 "$1" &
      sleep 0.3
      "$tb" hx h1 "$b/benchmarks/tcp_stream" send h2 7999 2048 "$cc" "$2"
      wait
    done
  done
fi
# The same 2 x 1 store/raw-mpi tables with every host's default congestion
# control set to Reno, so Open MPI's connections use the store's too.
part reno || exit 0
was=$("$tb" hx h1 cat /proc/sys/net/ipv4/tcp_congestion_control)
for h in h1 h2; do "$tb" hx $h sysctl -q -w net.ipv4.tcp_congestion_control=reno; done
for bench in allreduce bcast allgather; do
  echo "## $bench, 2 ranks on h1:1,h2:1, every host's congestion control Reno (was $was)"
  launched "$b/launcher/accrun" --timeout 900 -n 2 -H h1:1,h2:1 --launch-agent "$agent" "${mpi[@]}" \
    "${pin[@]}" "$b/benchmarks/osu_$bench" --backend store,raw-mpi -m 8:4194304 -i 1000
done
for h in h1 h2; do "$tb" hx $h sysctl -q -w net.ipv4.tcp_congestion_control="$was"; done
