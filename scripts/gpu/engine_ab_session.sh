#!/usr/bin/env bash
# Two engines side by side on one GPU (H100 or H200): answers decoded to EOS at c = 64, batched continuously, with this
# tree's package (head) and then with an earlier commit's (base), one after the other on the same card with the same
# heads and flags, then the GPU suite at this tree. It measures what an engine change is worth where a server runs it.
#
# Here, before the device calls: pack the base commit's package (git archive: peagle_lab/, scripts/, pyproject.toml;
# no weights, about 0.5 MiB)
#   bash scripts/gpu/engine_ab_session.sh --pack BASE            # → .stage/engine_ab_base.tgz (BASE: a commit)
# There, in the call that carries the bundle's last part and .stage/engine_ab_base.tgz (docs/scripts.md, "Running on
# an offline GPU machine"):
#   source scripts/gpu/stage_vllm_h200.sh; [ "$BUNDLE_STAGED" = 1 ] || exit 1; setsid nohup bash -c
#   'OUT=/tmp/pipeline_out PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/engine_ab_session.sh; echo $? > /tmp/pipeline.rc'
#   > /tmp/pipeline.log 2>&1 & sleep 2; bash scripts/gpu/h200_wait.sh 480
# then `bash scripts/gpu/h200_wait.sh 560` in the next calls until every output is fetched. Three stages:
#   head   headline_session.sh's answer_c64 at this tree: baseline, EAGLE-3, P-EAGLE, K 1-8 (HEAD_FLAGS, e.g.
#          "-k 1 3 5 8", replace that), HEAD_BUDGET_S (420) → $OUT/head/answer_c64/ (bench.json, ...)
#   base   the same at the packed commit (its own headline_session.sh, its own snapshot), K 1 3 5 8 by default
#          (BASE_FLAGS), BASE_BUDGET_S (200) → $OUT/base/answer_c64/; its rows' run_info names the base commit
#          (read from the archive's comment)
#   suite  the GPU suite at this tree (SUITE_FILES: its test files, default all), cut where SUITE_S (560) ends
#          → $OUT/suite/gpu_suite/
# Compare cell for cell (workload, method, K): tps, step_ms, verify_ms and, where both record them, mean_row_context /
# longest_row_context. Land head's answer_c64 as an answer-length sweep (answer_length/DATE-COMMIT/) and base's under
# engine_ab/DATE-COMMIT/, outside answer_length/, so no reader takes the base engine's sweep for the newest one.
# SKIP (head, base, suite) leaves stages out. A CPU rehearsal (tiny random target and heads; under a minute):
#   bash scripts/gpu/engine_ab_session.sh --pack HEAD && SMOKE=1 OUT=/tmp/ab_smoke PYTHON=$PWD/.venv/bin/python \
#   OMP_NUM_THREADS=1 bash scripts/gpu/engine_ab_session.sh
set -uo pipefail
main() {
cd "$(dirname "$0")/../.."
PACK=${AB_PACK:-.stage/engine_ab_base.tgz}  # AB_PACK moves it (tests)
if [ "${1:-}" = "--pack" ]; then
  [ -n "${2:-}" ] || { echo "engine_ab_session.sh --pack BASE: name the base commit"; exit 2; }
  local sha
  sha=$(git rev-parse --verify --quiet "$2^{commit}") || { echo "--pack: '$2' is not a commit here"; exit 2; }
  mkdir -p .stage && git archive --format=tar.gz -o "$PACK" "$sha" -- peagle_lab scripts pyproject.toml \
    ':(exclude)peagle_lab/heads/*/*.safetensors' || exit 2
  echo "engine_ab_session.sh: packed $sha into $PACK ($(wc -c < "$PACK") bytes); carry it with the bundle's last part"
  exit 0
fi
source scripts/gpu/stage_lib.sh  # session_paths, whole_numbers, known_stages, copy_tree, stage, stages_done
session_paths || exit 2
whole_numbers HEAD_BUDGET_S BASE_BUDGET_S SUITE_S || exit 2
known_stages head base suite || exit 2
[ -f "$PACK" ] || case " ${SKIP:-} " in *" base "*) ;; *) echo "no $PACK: run --pack BASE here first"; exit 2 ;; esac
local head_sha base_sha="" trees=${TREES:-/tmp/engine_ab} repo=$PWD
head_sha=${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ -f "$PACK" ]; then  # git archive of a commit writes its id as the tar's pax comment
  base_sha=$("$PY" -c "import sys, tarfile; print(tarfile.open(sys.argv[1]).pax_headers.get('comment', ''))" "$PACK")
  [ -n "$base_sha" ] || { echo "$PACK names no commit (pack it with --pack BASE)"; exit 2; }
fi
case $trees in
  "$repo"|"$repo"/*|"$OUT"|"$OUT"/*) echo "TREES='$trees' must lie outside the tree and \$OUT"; exit 2 ;;
esac
rm -rf "$trees" && mkdir -p "$trees/head" "$trees/base" || exit 2
# Both trees are copied once, now: the device calls that follow this one copy the working tree again
copy_tree "$trees/head" || { echo "could not copy the tree to $trees/head"; exit 2; }
[ ! -f "$PACK" ] || tar -xzf "$PACK" -C "$trees/base" || { echo "could not unpack $PACK"; exit 2; }
echo "### engine_ab_session.sh at $(date -u +%FT%TZ): head $head_sha, base ${base_sha:-none}"
local common=(SMOKE="${SMOKE:-0}" PYTHON="$PY" SKIP="scale_ctx scale_ragged attention_splits suite")
stage head env "${common[@]}" OUT="$OUT/head" PEAGLE_LAB_COMMIT="$head_sha" SNAPSHOT="$trees/snap_head" \
  ANSWER_BUDGET_S="${HEAD_BUDGET_S:-420}" ANSWER_FLAGS="${HEAD_FLAGS:-}" \
  bash "$trees/head/scripts/gpu/headline_session.sh"
stage base env "${common[@]}" OUT="$OUT/base" PEAGLE_LAB_COMMIT="$base_sha" SNAPSHOT="$trees/snap_base" \
  ANSWER_BUDGET_S="${BASE_BUDGET_S:-200}" ANSWER_FLAGS="${BASE_FLAGS:--k 1 3 5 8}" \
  bash "$trees/base/scripts/gpu/headline_session.sh"
stage suite env SMOKE="${SMOKE:-0}" PYTHON="$PY" OUT="$OUT/suite" PEAGLE_LAB_COMMIT="$head_sha" \
  SNAPSHOT="$trees/snap_suite" SESSION_BUDGET_S="${SUITE_S:-560}" \
  SKIP="answer_c64 scale_ctx scale_ragged attention_splits" bash "$trees/head/scripts/gpu/headline_session.sh"
stages_done
}
main "$@"; exit  # on one line: bash reads no further in this file once main returns
