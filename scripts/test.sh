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
# Debian's Chromium for tests/browser (JupyterLab + Playwright); a no-op when already installed.
stage browser-setup bash scripts/dev/install_browser.sh
# The layering (contracts in pyproject.toml, [tool.importlinter]): no module imports from a layer above it.
stage import-layers .venv/bin/lint-imports --no-cache
# Every Triton kernel the engine can launch, built for sm_80 / sm_90 / sm_100 / sm_120 without a GPU: fails on a
# build error, a new spill, shared memory over an arch's limit, or a table that no longer matches the launches
# (peagle_lab/kernels/aot_table.py). Rows of unchanged kernels come from the table and ~/.cache/peagle_lab/aot, so
# only changed kernels compile: about 20 s on a fresh clone; --rebuild compiles all (about 8.5 minutes on 2 cores).
stage kernels-aot .venv/bin/python -m peagle_lab.kernels.aot_table --check docs/results/cpu/kernels_aot.json
stage unit-tests .venv/bin/python -m pytest -q -p no:cacheprovider
# One OpenMP thread: on a 2-core runner two threads spin-wait on each other (15-40x slower).
stage notebooks env OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -p no:cacheprovider \
  --nbval-lax notebooks/
# The workshop's student copies and solutions notebooks, built from notebooks/ into build/workshop/
# (tests/test_student_copies.py checks that each exercise fails in the copy and passes in the source).
stage student-notebooks .venv/bin/python scripts/dev/build_student_notebooks.py --out build/workshop
# The documentation site (Sphinx, warnings are errors) with the API reference.
stage docs bash scripts/dev/build_docs.sh
# The shipped heads against a real vLLM (CPU build, its own venv): see .ci/vllm_step.sh.
stage vllm bash .ci/vllm_step.sh
if compgen -G "ci-artifacts/*" >/dev/null; then
  echo "CI artifacts (browser test screenshots):"; ls -l ci-artifacts/
fi
echo "all stages passed in $SECONDS s"
