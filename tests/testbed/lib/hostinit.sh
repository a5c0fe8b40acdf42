#!/bin/bash
# hostinit.sh HOST -- becomes PID 1 of test bed host HOST. `testbed up` starts it under
#   unshare --net --uts --mount --ipc --pid --fork --mount-proc --propagation private
# so /proc already shows the new PID namespace. It makes the host look like a machine of its
# own, then execs nsinit (the reaper). Environment from `testbed up`:
#   TB_STATE  the state dir;  TB_CARRY  colon-separated directories under /tmp, /run or
#   /dev/shm that must stay visible at their own path (state dir, test bed dir, TESTBED_SHARE)
set -euo pipefail
h=$1
stage=$TB_STATE/.stage/$h            # empty directory where mounts are assembled before moving
mkdir -p "$stage"
IFS=: read -ra carry <<<"${TB_CARRY:-}"

# private_tmpfs DIR OPTS: a fresh tmpfs on DIR that still shows the carried directories in it
private_tmpfs() { local p rel
  mount -n -t tmpfs -o "$2" "tb-$h" "$stage"
  for p in "${carry[@]}"; do
    case $p in "$1"/*) rel=${p#"$1"/}; mkdir -p "$stage/$rel"; mount -n --bind "$p" "$stage/$rel";; esac
  done
  mount -n --move "$stage" "$1"; }

hostname "$h"
# A sysfs of this network namespace (/sys/class/net lists this host's interfaces only), with the
# machine's cgroup tree carried over: slurmd 22.05 refuses to start without a cgroup file system.
mount -n --rbind /sys/fs/cgroup "$stage"
mount -n -t sysfs "sysfs-$h" /sys
mount -n --move "$stage" /sys/fs/cgroup
# Private POSIX shared memory, /tmp and /run (SysV IPC is private through the IPC namespace).
private_tmpfs /dev/shm "mode=1777,size=512m,nosuid,nodev"
private_tmpfs /tmp "mode=1777,nosuid,nodev"
private_tmpfs /run "mode=755,nosuid,nodev"
mkdir -p /run/sshd /run/lock /run/testbed; chmod 1777 /run/lock
# /run/testbed is this host's own directory, $TB_STATE/hosts/HOST (e.g. a fake sysfs root)
mount -n --bind "$TB_STATE/hosts/$h" /run/testbed
# h1..hN and head; the machine's /etc/hosts is not touched
mount -n --bind "$TB_STATE/etc/hosts" /etc/hosts
# Debian's bash reads ~/.bashrc for every ssh command; a slow one slows every launch
if [ -f "$TB_STATE/etc/root.bashrc" ] && [ -f /root/.bashrc ]; then
  mount -n --bind "$TB_STATE/etc/root.bashrc" /root/.bashrc
fi
ip link set lo up
rmdir "$stage" 2>/dev/null || true
: >"$TB_STATE/run/$h.ready"
exec "$TB_STATE/bin/nsinit"
