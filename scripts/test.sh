#!/usr/bin/env bash
# Set up and run every test (the README's test command; .ci/run calls exactly this).
# Prints each stage's duration. pytest's exit code 5 ("no tests collected") is a failure
# here: a suite that runs nothing must not pass silently.
set -uo pipefail
cd "$(dirname "$0")/.."
stage() {  # stage NAME COMMAND...: run, time, and stop at the first failure
  local name=$1; shift
  local t0=$SECONDS
  echo "=== stage: $name"
  "$@"
  local rc=$?
  echo "=== stage: $name took $((SECONDS - t0)) s (exit $rc)"
  if [ "$rc" -eq 5 ]; then echo "pytest collected no tests in stage $name"; exit 1; fi
  [ "$rc" -eq 0 ] || exit "$rc"
}
stage setup bash scripts/setup.sh
stage unit-tests .venv/bin/python -m pytest -q -p no:cacheprovider
echo "all stages passed in $SECONDS s"
