#!/bin/sh
# hwloc_plugins.sh ACCRUN: which of hwloc's plugins `accrun --detect` loads
# (hwloc says so with HWLOC_PLUGINS_VERBOSE=1).  Where hwloc's plugins are
# not installed there is nothing to see: a SKIP line for CTest.
out=$(HWLOC_PLUGINS_VERBOSE=1 "$1" --detect 2>&1)
case "$out" in
  *"found \`"*hwloc_pci*) printf '%s\n' "$out" | grep "hwloc: Plugin" ;;
  *) echo "SKIP: hwloc's plugins (libhwloc-plugins) are not installed here" ;;
esac
