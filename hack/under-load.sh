#!/usr/bin/env bash
# Runs a command with a CPU hog beside it: one busy loop per core, at the
# same priority as the command, so tests meet a machine as busy as a shared
# CI runner. The hogs end with the command.
#   hack/under-load.sh make test
#   RUNS=3 hack/under-load.sh sh -c 'cd lab && go test -count=1 ./...'
set -uo pipefail
runs=${RUNS:-1}
hogs=()
for _ in $(seq "$(nproc)"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
passed=0
for i in $(seq "$runs"); do
  echo "=== under load: run $i of $runs: $*"
  start=$(date +%s)
  if "$@"; then
    passed=$((passed + 1))
    echo "=== run $i passed in $(( $(date +%s) - start )) s"
  else
    echo "=== run $i FAILED after $(( $(date +%s) - start )) s"
  fi
done
echo "under load: $passed of $runs runs passed"
[ "$passed" = "$runs" ]
