#!/usr/bin/env bash
# Stage vLLM 0.24.0, the SmolLM2 GGUF and the shipped heads on the H200 (no network there), from the
# parts that scripts/gpu/vllm_bundle.sh made here, carried one a call (.stage/vllm/pNN) in calls
# less than 30 s apart (/tmp survives only while the machine stays warm).
#
#   source scripts/gpu/stage_vllm_h200.sh     # every call: keeps this call's part in /tmp/vparts
#
# Once every part is there it joins them, checks the bundle's sha256, unpacks vLLM and installs
# the wheels into /tmp/vllm_site, puts the GGUF where stage_h200.sh wants it, and restores the
# heads' weights into peagle_lab/heads (the tree that travels has none: they are re-copied each
# call). Then it imports vLLM and says exactly which module is missing if that fails.
# Sets VLLM_STAGED=1 when vLLM imports, and PYTHONPATH, PEAGLE_LAB_* for the rest of the command.
# A partial state (parts still missing) is not an error: it says how many are there.
_vs_fail() { echo "stage_vllm_h200.sh: $*" >&2; return 2 2>/dev/null || exit 2; }
VLLM_STAGED=0
mkdir -p /tmp/vparts
for m in .stage/vllm/p*/MANIFEST; do
  [ -f "$m" ] || continue
  cp "$(dirname "$m")"/part.* /tmp/vparts/ && cp "$m" /tmp/vparts/MANIFEST
done
if ! [ -f /tmp/vstage/.done ]; then
  [ -f /tmp/vparts/MANIFEST ] || { _vs_fail "no part carried yet (carry .stage/vllm/p00 first)"; }
  want=$(awk '/^parts/{print $2}' /tmp/vparts/MANIFEST)
  have=$(ls /tmp/vparts/part.* 2>/dev/null | wc -l)
  if [ "$have" -lt "$want" ]; then
    echo "stage_vllm_h200.sh: $have of $want parts in /tmp/vparts; carry the next one within 30 s"
    return 0 2>/dev/null || exit 0
  fi
  sha=$(awk '/^sha256/{print $2}' /tmp/vparts/MANIFEST)
  t0=$(date +%s)
  rm -rf /tmp/vstage && mkdir -p /tmp/vstage /tmp/vllm_site
  cat /tmp/vparts/part.* > /tmp/vstage/bundle.tar
  got=$(sha256sum /tmp/vstage/bundle.tar | cut -d' ' -f1)
  [ "$got" = "$sha" ] || { _vs_fail "joined bundle has sha256 $got, expected $sha: a part is stale or truncated"; }
  tar -xf /tmp/vstage/bundle.tar -C /tmp/vstage && rm /tmp/vstage/bundle.tar
  xz -dc /tmp/vstage/vllm-trim.tar.xz | tar -xf - -C /tmp/vllm_site || { _vs_fail "unpacking vLLM failed"; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vllm_site \
    /tmp/vstage/wheels/*.whl || { _vs_fail "pip could not install the bundled wheels"; }
  mkdir -p /tmp/cache/gguf
  mv /tmp/vstage/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/cache/gguf/
  touch /tmp/vllm_site/.staged /tmp/site/.staged 2>/dev/null || true
  touch /tmp/vstage/.done
  echo "stage_vllm_h200.sh: bundle joined, checked and installed in $(( $(date +%s) - t0 )) s"
fi
tar -xf /tmp/vstage/heads.tar -C peagle_lab/heads
export PYTHONPATH=/tmp/vllm_site:$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p /tmp/site
# stage_h200.sh finds the GGUF in place (no /tmp/parts needed), checks its sha256, converts it.
source scripts/gpu/stage_h200.sh
export PYTHONPATH=/tmp/vllm_site:$PYTHONPATH
if python3 - <<'EOF'
import importlib, sys, traceback
for m in ("vllm", "vllm.entrypoints.llm", "vllm.v1.engine.core", "vllm.v1.worker.gpu_model_runner",
          "vllm.v1.spec_decode.eagle", "vllm.v1.attention.backends.flash_attn",
          "vllm.model_executor.models.llama_eagle3", "vllm.vllm_flash_attn.flash_attn_interface"):
    try:
        importlib.import_module(m)
    except Exception as e:
        missing = getattr(e, "name", None)
        print(f"stage_vllm_h200.sh: importing {m} failed: {type(e).__name__}: {e}"
              + (f" (module {missing!r} is missing: add its wheel to scripts/gpu/vllm_wheels.txt)" if missing else ""),
              file=sys.stderr)
        traceback.print_exc(limit=3)
        sys.exit(1)
import vllm, torch
from vllm.vllm_flash_attn import flash_attn_interface as fa
print(f"stage_vllm_h200.sh: vllm {vllm.__version__} imports (torch {torch.__version__}, FA3 available: {fa.FA3_AVAILABLE})")
EOF
then VLLM_STAGED=1; fi
export VLLM_STAGED
