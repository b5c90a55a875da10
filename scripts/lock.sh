#!/usr/bin/env bash
# Refresh the version locks that scripts/setup.sh installs from:
#   requirements/lock-py<X.Y>.txt   .venv: this package's runtime and dev dependencies
#   requirements/bfcl-py<X.Y>.txt   .venv-bfcl: bfcl-eval and what it needs
# Each lock is resolved from scratch (pyproject.toml for .venv, the bfcl-eval pin for
# .venv-bfcl) in a throwaway virtualenv, then frozen to exact versions, so a refresh picks
# up the newest releases the declared ranges allow. Review the diff, run the test suite
# (bash scripts/test.sh after deleting .venv and .venv-bfcl), and commit the new locks.
#
#   usage: bash scripts/lock.sh [--keep] [PYTHON ...]   default: python3 (its X.Y names the lock)
#   e.g.   bash scripts/lock.sh python3.11 python3.13
#
# --keep: resolve .venv's lock with the current one as constraints, so every locked version
# stays and only what pyproject.toml added (a new dependency and what it needs) is resolved
# anew; .venv-bfcl's lock is left as it is. For adding a dependency without moving the
# versions that the committed results' numbers depend on (torch, transformers, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh

keep=0
if [ "${1:-}" = "--keep" ]; then keep=1; shift; fi
[ $# -eq 0 ] && set -- python3
mkdir -p requirements
for PYTHON in "$@"; do
  pyver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  scratch=$(mktemp -d /tmp/gdpo-lock.XXXXXX)
  trap 'rm -rf "$scratch"' EXIT

  echo "lock: resolving .venv for Python $pyver from pyproject.toml"
  "$PYTHON" -m venv "$scratch/venv"
  "$scratch/venv/bin/pip" install -q "torch==$TORCH_VERSION"
  constraints=()
  how="from pyproject.toml"
  if [ "$keep" = 1 ] && [ -f "requirements/lock-py$pyver.txt" ]; then
    cp "requirements/lock-py$pyver.txt" "$scratch/kept.txt"
    constraints=(-c "$scratch/kept.txt")
    how="from pyproject.toml, keeping the earlier lock's versions (--keep)"
  fi
  "$scratch/venv/bin/pip" install -q ".[dev]" "${constraints[@]}"
  {
    echo "# .venv lock for Python $pyver: written by scripts/lock.sh on $(date -u +%Y-%m-%d) $how."
    echo "# scripts/setup.sh installs it, then this package with --no-deps. Do not edit by hand."
    # The package itself is installed editable by setup.sh; torch's local label (+cpu) is
    # dropped so that the pin also matches a machine that takes torch from another index.
    "$scratch/venv/bin/pip" freeze --exclude-editable | grep -v -i '^gdpo[-_]nemo' | sed -E 's/^(torch==[^+]+)\+.*/\1/'
  } > "requirements/lock-py$pyver.txt"
  echo "lock: wrote requirements/lock-py$pyver.txt ($(grep -vc '^#' "requirements/lock-py$pyver.txt") packages)"

  if [ "$keep" = 1 ]; then
    echo "lock: --keep: requirements/bfcl-py$pyver.txt left as it is"
  elif "$PYTHON" -c 'import sys; sys.exit(sys.version_info >= (3, 13))'; then
    echo "lock: resolving .venv-bfcl for Python $pyver (bfcl-eval $BFCL_VERSION)"
    "$PYTHON" -m venv "$scratch/bfcl"
    "$scratch/bfcl/bin/pip" install -q "bfcl-eval==$BFCL_VERSION" $BFCL_EXTRA
    {
      echo "# .venv-bfcl lock for Python $pyver: written by scripts/lock.sh on $(date -u +%Y-%m-%d) (bfcl-eval $BFCL_VERSION)."
      echo "# scripts/setup_bfcl.sh installs it. Do not edit by hand."
      "$scratch/bfcl/bin/pip" freeze
    } > "requirements/bfcl-py$pyver.txt"
    echo "lock: wrote requirements/bfcl-py$pyver.txt ($(grep -vc '^#' "requirements/bfcl-py$pyver.txt") packages)"
  else
    echo "lock: no .venv-bfcl lock for Python $pyver (bfcl-eval's pins have no wheels for 3.13)"
  fi
  rm -rf "$scratch"
  trap - EXIT
done
