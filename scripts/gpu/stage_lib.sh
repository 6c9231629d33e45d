# The stage runner of the GPU session scripts (sweep_session_h200.sh, baseline_depth_session.sh,
# headline_session.sh, engine_ab_session.sh), sourced by them:
#   stages_done             writes the stage seconds to $OUT/stage_seconds.json, prints them with the session's
#                           seconds and the failed stages, and returns 1 when any stage failed
#   session_paths           makes $OUT (required) and turns it and $PYTHON (python3) into absolute paths: OUT, PY
#   whole_numbers VAR...    returns 2, naming it, when a set VAR is not a positive whole number
#   known_stages NAME...    returns 2, naming it, when $SKIP names a stage not among NAME...
#   copy_tree DEST          copies the tree ($PWD) into the folder DEST, without .git, .venv, .stage and caches
#   session_start SNAP LOG  copies the tree to SNAP (outside the tree and $OUT; copy_tree), moves there, exports the
#                           offline environment for $PY and sends every later line to $OUT/LOG too; returns 2 with
#                           the reason when it cannot
#   shipped_heads           returns 2, saying so, unless the shipped heads' weights are in peagle_lab/heads (copied
#                           back from the bundle's ${VLLM_STAGE_ROOT:-/tmp}/heads where the tree travelled without them)
#   stage NAME COMMAND...   runs COMMAND unless NAME is in $SKIP, prints "### stage NAME took Ns, exit RC", adds
#                           "NAME": seconds to $STAGES and NAME to $FAILED when it fails; a failure never stops the caller.
STAGES="" FAILED=""
stage() {
  local name=$1 t=$SECONDS rc=0
  shift
  case " ${SKIP:-} " in *" $name "*) echo "### stage $name skipped (SKIP)"; return 0 ;; esac
  echo "### stage $name: $*"
  "$@" || rc=$?
  STAGES="$STAGES\"$name\": $((SECONDS - t)), "
  [ "$rc" = 0 ] || FAILED="$FAILED $name"
  echo "### stage $name took $((SECONDS - t))s, exit $rc (session at $((SECONDS))s)"
}

copy_tree() {
  tar -C "$PWD" --exclude=./.stage --exclude=./.git --exclude=./.venv --exclude=__pycache__ -cf - . | tar -C "$1" -xf -
}
session_start() {
  local snap=$1 log=$2
  case $snap in /|"$PWD"|"$PWD"/*|"$OUT"|"$OUT"/*) echo "SNAPSHOT='$snap' must lie outside the tree and \$OUT"; return 2 ;; esac
  rm -rf "$snap" && mkdir -p "$snap" && copy_tree "$snap" || { echo "could not copy the tree to $snap"; return 2; }
  cd "$snap" || return 2
  export PYTHON=$PY PYTHONPATH=$snap${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1
  export TOKENIZERS_PARALLELISM=false TRANSFORMERS_OFFLINE=1
  exec > >(tee -a "$OUT/$log") 2>&1
}
# Without the shipped heads' weights a benchmark would quietly draft with random heads: stop instead.
shipped_heads() {
  local m
  for m in eagle3 peagle; do
    ls "peagle_lab/heads/$m/"*.safetensors > /dev/null 2>&1 && continue
    cp "${VLLM_STAGE_ROOT:-/tmp}/heads/$m/"*.safetensors "peagle_lab/heads/$m/" 2> /dev/null && continue
    echo "no weights in peagle_lab/heads/$m nor in ${VLLM_STAGE_ROOT:-/tmp}/heads/$m: stage the bundle first" \
         "(source scripts/gpu/stage_vllm_h200.sh in the call that carries its last part)"
    return 2
  done
}
whole_numbers() {
  local v
  for v; do
    case ${!v:-1} in ''|*[!0-9]*|0) echo "$v='${!v}' is not a positive whole number"; return 2 ;; esac
  done
}
known_stages() {
  local s
  for s in ${SKIP:-}; do
    case " $* " in *" $s "*) ;; *) echo "SKIP: unknown stage '$s' (expected one of: $*)"; return 2 ;; esac
  done
}
session_paths() {
  [ -n "${OUT:-}" ] || { echo "set OUT to the output folder"; return 2; }
  mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || return 2
  PY=${PYTHON:-python3}
  case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac
}
stages_done() {
  echo "{${STAGES%, }}" > "$OUT/stage_seconds.json"
  echo "### done in ${SECONDS}s: stage seconds {${STAGES%, }}${FAILED:+; failed:$FAILED}"
  [ -z "$FAILED" ]
}
