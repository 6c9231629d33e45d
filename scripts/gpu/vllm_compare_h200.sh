#!/usr/bin/env bash
# vLLM 0.24.0 and our engine on one H200, same heads, prompts and settings:
# plain, EAGLE-3 and P-EAGLE (parallel drafting), K ∈ {3,5,7}, c ∈ {1,8,64}, chat and code,
# 128 new tokens, greedy, fixed length, bf16, CUDA graphs on, prefix caching off.
#
#   source scripts/gpu/stage_vllm_h200.sh      # after the bundle's parts came over (see that script)
#   bash scripts/gpu/vllm_compare_h200.sh [more vllm-compare flags]
#
# Writes into ${PIPELINE_OUT:-/tmp/pipeline_out}: vllm_gpu.json (rows of both engines, each with
# engine = vllm | peagle_lab, and the comparison), vllm_compare.log and the last lines of each
# vLLM engine's log. Commit vllm_gpu.json in a new run folder,
# docs/results/h200/vllm/DATE-COMMIT/vllm_gpu.json (its run_info's date and commit; peagle_lab.bench.archive).
#
# Planning: vLLM starts an engine in ~40-90 s (torch.compile of the target and the drafter, CUDA
# graph capture; /tmp/vllm_cache keeps compiled code for the next engine), 7 engines in all; each
# decodes 2 workloads × (8 + 8 + 64) prompts × 128 tokens. Our sweep of the same 42 cells takes 2-3 min.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ "${VLLM_STAGED:-0}" = 1 ] || { echo "vllm_compare_h200.sh: vLLM is not staged: source scripts/gpu/stage_vllm_h200.sh first" >&2; exit 2; }
out=${PIPELINE_OUT:-/tmp/pipeline_out}
mkdir -p "$out"
export VLLM_CACHE_ROOT=/tmp/vllm_cache TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor}
export PEAGLE_LAB_VLLM_PYTHON=${PEAGLE_LAB_VLLM_PYTHON:-$(command -v python3)} PYTHONUNBUFFERED=1
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO} VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# NVLink multicast stays off (one GPU here, but keep the machine's settings).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m peagle_lab.cli vllm-compare --device cuda --out /tmp/vc --json "$out/vllm_gpu.json" "$@" 2>&1 \
  | tee "$out/vllm_compare.log"
rc=${PIPESTATUS[0]}
for f in /tmp/vc/vllm/*/vllm.log; do
  [ -f "$f" ] && tail -c 60000 "$f" > "$out/engine-$(basename "$(dirname "$f")").log"
done
ls /tmp/vc/vllm/*/vllm.log >/dev/null 2>&1 && \
  (cd /tmp/vc/vllm && tail -n 30 ./*/vllm.log) > "$out/engines_tail.log" 2>/dev/null
echo "vllm_compare_h200.sh: exit $rc; files in $out: $(ls "$out" | tr '\n' ' ')"
exit "$rc"
