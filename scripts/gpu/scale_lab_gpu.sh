#!/usr/bin/env bash
# The scale lab on one GPU (H100 or H200; the JSON names it): decode-step costs of this engine with random
# weights at the shapes of SmolLM2-135M, GPT-OSS-20B (attention + 4 active experts, and a real 32-expert top-4
# MoE layer beside it), Qwen3-Coder-30B-A3B, Llama-3.1-8B and Llama-3.2-1B, in that order (peagle_lab/bench/scale.py
# says how, and which grid: about 300 engine cells).
# No model download; about five minutes: the measurement stops starting cells after SCALE_BUDGET_S (270 s) and
# the JSON is rewritten after every shape, so even a killed run leaves one. Writes $OUT/scale.json and
# $OUT/scale.log (each well under 1 MiB).
#
#   OUT=/tmp/scale PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/scale_lab_gpu.sh
#
# Knobs (environment): PYTHON (python3), SCALE_BUDGET_S (270), SCALE_FLAGS (more flags for peagle-lab scale,
# given last so they win). The rehearsal on a CPU, tiny shapes (a few seconds; its JSON is docs/results/cpu/scale/):
#   OUT=/tmp/scale_cpu PYTHON=.venv/bin/python SCALE_FLAGS="--tiny" bash scripts/gpu/scale_lab_gpu.sh
# The shapes a run did not reach, alone (GPT-OSS-20B's 105 cells take about three minutes on an H100):
#   OUT=/tmp/scale2 SCALE_FLAGS="--shapes gpt-oss-20b qwen3-coder-30b-a3b llama-3.1-8b llama-3.2-1b" bash scripts/gpu/scale_lab_gpu.sh
# A ragged batch, each request's prompt drawn from 50-1450 tokens (headline_session.sh's scale_ragged stage):
#   OUT=/tmp/ragged SCALE_FLAGS="--shapes smollm2-135m --prompt-range 50 1450 -c 64 -k 1 3 5 8 --depths 4" bash scripts/gpu/scale_lab_gpu.sh
# The same with 32 of the 64 requests one token long, stand-ins for the idle rows of a continuous batch that drains
# (the fit then has a run whose mean context lies far below its longest, as a continuous sweep's steps do):
#   OUT=/tmp/short SCALE_FLAGS="--shapes smollm2-135m --prompt-range 50 1000 --short-rows 32 -c 64 -k 1 3 5 8 --depths 4" bash scripts/gpu/scale_lab_gpu.sh
# The GPU JSON lands in docs/results/<device>/scale/ (a later run in a folder of its own there); peagle_lab.lab.predict
# merges the runs of one device, each shape from the newest run that measured it, and notebook 08 reads them.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the output folder}
PY=${PYTHON:-python3}
export PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
echo "### scale_lab_gpu.sh at $(date -u +%FT%TZ), commit ${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
  | tee "$OUT/scale.log"
t=$SECONDS
# a hard stop 75 s after the budget leaves the JSON of every shape finished by then
timeout $(( ${SCALE_BUDGET_S:-270} + 75 )) "$PY" -m peagle_lab.bench.scale --out "$OUT/scale.json" --time-budget-s "${SCALE_BUDGET_S:-270}" \
  ${SCALE_FLAGS:-} 2>&1 | tee -a "$OUT/scale.log"
rc=${PIPESTATUS[0]}
echo "### scale lab took $((SECONDS - t))s, exit $rc" | tee -a "$OUT/scale.log"
[ -s "$OUT/scale.json" ] || { echo "no scale.json written" | tee -a "$OUT/scale.log"; exit 1; }
exit "$rc"
