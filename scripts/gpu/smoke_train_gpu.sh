#!/usr/bin/env bash
# The training path on a GPU machine at real shapes, without the model's weights (minutes, no staging):
#   1 training throughput of both methods on a random-weight target of SmolLM2's shape, one method per
#     GPU side by side (compilation, flex-attention block masks, memory) → $OUT/throughput-random.json
#   2 DDP + torch.compile: a short P-EAGLE run on the tiny target over every GPU (torchrun, NCCL)
#   3 data generation sharded over every GPU (torchrun) on the tiny target
#   4 plain decoding at large concurrency on the random SmolLM2-shaped target (the data generator's step)
# Every stage runs even if an earlier one failed; the log says which did. Needs $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU=$(nvidia-smi -L | wc -l)
B=${BATCH:-16}; T=${ROW_LEN:-2048}
FAILED=""
step() { local name=$1; shift; local t=$SECONDS; echo "=== $name"; "$@"; local rc=$?
         echo "=== $name: exit $rc in $((SECONDS - t)) s"; [ $rc = 0 ] || FAILED="$FAILED $name"; }

bench() {
  local g1=$(( NGPU > 1 ? 1 : 0 ))
  CUDA_VISIBLE_DEVICES=0 "$PY" -m peagle_lab.train.bench --random-target --device cuda --methods eagle3 \
    --batch-size "$B" --row-len "$T" --steps 6 --out "$OUT/bench-eagle3.json" > "$OUT/bench-eagle3.log" 2>&1 & local p0=$!
  CUDA_VISIBLE_DEVICES=$g1 "$PY" -m peagle_lab.train.bench --random-target --device cuda --methods peagle \
    --batch-size "$B" --row-len "$T" --steps 6 --out "$OUT/bench-peagle.json" > "$OUT/bench-peagle.log" 2>&1 & local p1=$!
  local rc=0; wait $p0 || rc=1; wait $p1 || rc=1
  tail -3 "$OUT/bench-eagle3.log" "$OUT/bench-peagle.log"
  return $rc
}
ddp() {
  "$PY" -m torch.distributed.run --nproc-per-node "$NGPU" --master-port 29512 -m peagle_lab.train.cli train --tiny \
    --device cuda --method peagle --steps 40 --batch-size $((4 * NGPU)) --row-len 256 --compile on --no-eval \
    --log-every 10 --eval-every 20 --heldout-rows 8 --tiny-examples 400 --draft-vocab-size 64 --no-progress \
    --out /tmp/smoke-ddp 2>&1 | tail -15
}
data() {
  rm -rf /tmp/smoke-data
  "$PY" -m torch.distributed.run --nproc-per-node "$NGPU" --master-port 29513 -m peagle_lab.train.cli data --tiny \
    --device cuda --out /tmp/smoke-data --num-magpie 256 --max-code-prompts 64 --response-max-tokens 32 \
    --concurrency 128 --heldout-fraction 0.2 --no-progress 2>&1 | tail -15
}
decode() {
  "$PY" - <<'PYEOF'
import time, torch
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.train.bench import random_target
t = random_target(torch.device("cuda"))
for c in (1024, 2048):
    prompts = torch.randint(100, 40000, (c, 64), generator=torch.Generator().manual_seed(0)).tolist()
    dec = SpecDecoder(t, None, SpecConfig(method="baseline", max_new_tokens=256))
    dec.generate(prompts[:c], max_new_tokens=8, eos_token_ids=())  # capture the graphs
    m = dec.generate(prompts, eos_token_ids=()).metrics
    print(f"plain decoding c={c}: {m.output_tokens / m.decode_s:,.0f} tok/s decode, "
          f"{m.output_tokens / (m.decode_s + m.prefill_s):,.0f} with prefill, step {1e3 * m.decode_s / m.num_steps:.2f} ms")
PYEOF
}
step bench bench
step ddp ddp
step data data
step decode decode
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
docs = [json.loads(p.read_text()) for p in sorted(out.glob("bench-*.json"))]
if docs:
    doc = dict(docs[0], results=[r for d in docs for r in d["results"]], command=" ; ".join(d["command"] for d in docs),
               layout="one method per GPU, run side by side")
    (out / "throughput-random.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
PYEOF
echo "failed stages:${FAILED:- none}"
