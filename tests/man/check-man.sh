#!/usr/bin/env bash
# The man pages stay true to the code:
#  1. every page renders with groff without a warning;
#  2. every function accrun.h declares is documented in a man3 page;
#  3. every long option the accrun binary accepts appears in accrun(1).
set -euo pipefail
src=$1
accrun=$2
fail=0

for page in "$src"/man/man[1-8]/*.[1-8]; do
  out=$(groff -man -ww -z -I "$src/man" "$page" 2>&1 || true)  # -I: .so man3/page.3 links
  if [ -n "$out" ]; then
    echo "man: $page: groff warnings:"; echo "$out"; fail=1
  fi
done

for fn in $(grep -oE '\baccrun_[a-z0-9_]+ *\(' "$src/runtime/include/accrun/accrun.h" | tr -d ' (' | sort -u); do
  if ! grep -lqE "(^|[^a-z_])\\\\?f?B?$fn" "$src"/man/man3/*.3; then
    echo "man: $fn is declared in accrun.h but no man3 page documents it"; fail=1
  fi
done

for opt in $("$accrun" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
  esc=${opt//-/\\\\?-}
  if ! grep -qE -- "$esc" "$src/man/man1/accrun.1"; then
    echo "man: option $opt (accrun --help) is not documented in accrun(1)"; fail=1
  fi
done

[ $fail -eq 0 ] && echo "man: all pages render cleanly and cover the API and options"
exit $fail
