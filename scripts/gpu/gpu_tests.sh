#!/usr/bin/env bash
# Run the GPU test suite (pytest -m gpu: CUDA graphs, compiled Triton kernels, bf16 engine)
# and write a summary JSON (passed/failed, device, versions, commit) to ${1:-docs/results/h200/gpu_suite/DATE-COMMIT},
# a new run folder (today's UTC date and this tree's commit; peagle_lab.bench.archive).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/results/h200/gpu_suite/$(date -u +%F)-$(git rev-parse --short=7 HEAD 2>/dev/null || echo "${PEAGLE_LAB_COMMIT:0:7}")}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PEAGLE_LAB_RESULTS_DIR=$out
shift || true
# By default the test files that hold GPU tests: collecting the whole tree would import the
# notebook and docs extras (plotly, sphinx), which the GPU image does not have.
[ $# -gt 0 ] || set -- $(grep -l "mark.gpu" tests/*.py)
$PY -m pytest -m gpu -q -p no:cacheprovider -rs --junitxml="$out/gpu_junit.xml" "$@" 2>&1 | tee "$out/gpu_tests.log"
rc=${PIPESTATUS[0]}
$PY - "$out" "$rc" <<'PY'
import json, sys, xml.etree.ElementTree as ET
from peagle_lab.provenance import run_info
out, rc = sys.argv[1], int(sys.argv[2])
suite = ET.parse(f"{out}/gpu_junit.xml").getroot()
s = suite if suite.tag == "testsuite" else suite.find("testsuite")
summary = {**run_info("bash scripts/gpu/gpu_tests.sh"), "exit_code": rc, "tests": int(s.get("tests")), "failures": int(s.get("failures")), "errors": int(s.get("errors")),
           "skipped": int(s.get("skipped"))}
summary["passed"] = summary["tests"] - summary["failures"] - summary["errors"] - summary["skipped"]
json.dump(summary, open(f"{out}/gpu_suite.json", "w"), indent=2)
print(json.dumps(summary))
PY
exit "$rc"
