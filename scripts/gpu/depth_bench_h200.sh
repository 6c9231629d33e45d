#!/usr/bin/env bash
# Choose the P-EAGLE head's depth by measured throughput, on the H200, after heads of several
# depths were trained on the same data with the same budget and exported by `peagle-lab train-eval`
# into $KEPT/peagle-<N>l (e.g. `--run runs/peagle-1l runs/peagle-4l --export $WORK/heads-kept`),
# each alone on a GPU (see docs/training.md, "Choosing the P-EAGLE depth").
#
# Each head gets the same P-EAGLE sweep through scripts/gpu/bench_h200.sh (bf16, CUDA graphs, 128 new
# tokens, K ∈ {3,5,7}, c ∈ {1,64}, chat + code); `python -m peagle_lab.bench.depth` ranks them by the
# geometric mean of best-K TPS over those columns. Everything (the per-depth bench.json/log, the
# choice and the winner's head) goes into $OUT/depth.tgz.part-N (≤ 15 MiB each):
#   cat depth.tgz.part-* | tar -xzf -
# Knobs: WORK (default /tmp/work), KEPT (default $WORK/heads-kept), PYTHON, DEPTH_BENCH_FLAGS,
# DEPTH_PACK_HEAD=0 (leave the winner's weights out of the archive when they travel back another way).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/work}
OUT=${OUT:?set OUT to the output folder}
KEPT=${KEPT:-$WORK/heads-kept}
DEST=$WORK/depth
mkdir -p "$DEST" "$OUT"
PAIRS=()
for head in "$KEPT"/peagle-*l; do
  [ -d "$head" ] || { echo "no heads under $KEPT (export heads named peagle-<N>l there with train-eval first)"; exit 2; }
  n=$(basename "$head"); n=${n#peagle-}; n=${n%l}
  echo "### depth $n: $head"
  OUT="$DEST/peagle-${n}l" PYTHON="$PY" bash scripts/gpu/bench_h200.sh --methods peagle --peagle-head "$head" \
    -k 3 5 7 --extra-k -c 1 64 --workloads chat code --no-reference --time-budget-s 150 ${DEPTH_BENCH_FLAGS:-} \
    > "$DEST/peagle-${n}l.log" 2>&1 || { echo "bench for depth $n failed:"; tail -20 "$DEST/peagle-${n}l.log"; exit 1; }
  tail -4 "$DEST/peagle-${n}l.log"
  PAIRS+=("$n=$DEST/peagle-${n}l/bench.json")
done
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$PY" -m peagle_lab.bench.depth "${PAIRS[@]}" --out "$DEST/depth_choice.json" \
  | tee "$DEST/depth_choice.txt"
cp "$DEST/depth_choice.json" "$OUT/"
chosen=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen_layers'])" "$DEST/depth_choice.json")
rm -rf "$DEST/heads"
if [ "${DEPTH_PACK_HEAD:-1}" = 1 ]; then mkdir -p "$DEST/heads"; cp -r "$KEPT/peagle-${chosen}l" "$DEST/heads/"; fi
tar -C "$DEST" -czf - . | split -b 15m -d -a 1 - "$OUT/depth.tgz.part-"
ls -la "$OUT"
echo "chosen depth: $chosen layer(s); its head: $KEPT/peagle-${chosen}l"
