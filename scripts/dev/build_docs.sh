#!/usr/bin/env bash
# Build the documentation site (Sphinx + myst-parser, API reference by autodoc) into
# docs/_build/html, offline. Any warning fails the build (-W, after reporting all of them with
# --keep-going; -n also flags every cross-reference to one of our names that does not resolve).
# Always a clean build: an incremental one would not repeat the warnings of unchanged pages.
# Needs the docs extra: pip install -e ".[docs]" (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=${DOCS_BUILD_DIR:-docs/_build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
rm -rf "$OUT" docs/api/generated
start=$(date +%s.%N)
status=0
"$PY" -m sphinx -b html -W --keep-going -n -q -d "$OUT/doctrees" docs "$OUT/html" || status=$?
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [ "$status" -ne 0 ]; then
  echo "docs: FAILED (sphinx-build exit $status; every warning is an error) in ${secs} s" >&2
  exit "$status"
fi
echo "docs: built $OUT/html/index.html with no warnings in ${secs} s"
