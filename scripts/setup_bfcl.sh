#!/usr/bin/env bash
# The separate virtualenv that holds bfcl-eval for `gdpo-nemo eval --task toolcall`
# (docs/eval.md). bfcl-eval 2025.7.17 is the last release that ships the BFCL_v3 data; it
# pins numpy 1.26 and many API clients, so it does not share .venv. soundfile: qwen-agent,
# which bfcl-eval imports, needs it without declaring it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
BFCL_VERSION=2025.7.17
# bfcl-eval's pins (numpy 1.26.4, tree-sitter 0.21.3) have no wheels for Python 3.13: use
# 3.11 or 3.12 when the default python3 is newer.
if [ -z "${BFCL_PYTHON:-}" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info >= (3, 13))'; then
      BFCL_PYTHON=$candidate; break
    fi
  done
fi
PYTHON=${BFCL_PYTHON:?"setup_bfcl: needs Python 3.11 or 3.12 (bfcl-eval's pins have no 3.13 wheels); set BFCL_PYTHON"}
if [ ! -x .venv-bfcl/bin/python ]; then
  echo "setup_bfcl: creating .venv-bfcl with $($PYTHON --version)"
  "$PYTHON" -m venv .venv-bfcl
fi
.venv-bfcl/bin/python -c "import importlib.metadata as m, sys, soundfile; sys.exit(m.version('bfcl-eval') != '$BFCL_VERSION')" 2>/dev/null \
  || .venv-bfcl/bin/pip install -q "bfcl-eval==$BFCL_VERSION" soundfile
echo "setup_bfcl: bfcl-eval $BFCL_VERSION in .venv-bfcl"
