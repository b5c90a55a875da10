#!/usr/bin/env bash
# The separate virtualenv that holds bfcl-eval for `gdpo-nemo eval --task toolcall`
# (docs/eval.md). bfcl-eval 2025.7.17 is the last release that ships the BFCL_v3 data; it
# pins numpy 1.26 and many API clients, so it does not share .venv. soundfile: qwen-agent,
# which bfcl-eval imports, needs it without declaring it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh
source scripts/venv_lib.sh
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
make_venv setup_bfcl "$PYTHON" .venv-bfcl
pyver=$(venv_python_version .venv-bfcl)
lock="requirements/bfcl-py$pyver.txt"
want=$(cat "$lock" scripts/versions.sh 2>/dev/null | sha256sum | cut -d' ' -f1)
if needs_install .venv-bfcl "$want"; then
  if [ -f "$lock" ]; then
    echo "setup_bfcl: installing the locked versions of $lock"
    .venv-bfcl/bin/pip install -q -r "$lock"
  else
    echo "setup_bfcl: WARNING: no lock for Python $pyver ($lock); resolving bfcl-eval's own pins" >&2
    .venv-bfcl/bin/pip install -q "bfcl-eval==$BFCL_VERSION" $BFCL_EXTRA
  fi
  mark_installed .venv-bfcl "$want"
fi
echo "setup_bfcl: bfcl-eval $BFCL_VERSION in .venv-bfcl"
