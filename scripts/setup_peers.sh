#!/usr/bin/env bash
# The separate virtualenv that holds the peers whose own code the conformance tests run
# (tests/test_peer_conformance.py, docs/estimators.md): TRL (GRPOTrainer) and verl
# (core_algos) from PyPI at the exact versions of requirements/peers-py3.11.txt. verl pins
# transformers < 5.11, older than .venv's. Idempotent: a re-run with an unchanged lock does
# nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv_lib.sh
PYTHON=${PEERS_PYTHON:-python3}
make_venv setup_peers "$PYTHON" .venv-peers
pyver=$(venv_python_version .venv-peers)
lock="requirements/peers-py$pyver.txt"
[ -f "$lock" ] || lock=requirements/peers-py3.11.txt
want=$(cat "$lock" | sha256sum | cut -d' ' -f1)
if needs_install .venv-peers "$want"; then
  echo "setup_peers: installing the pinned versions of $lock"
  .venv-peers/bin/python -m pip install -q --upgrade pip
  # Every package is pinned in the lock; --no-deps keeps out verl's unused dependencies.
  .venv-peers/bin/pip install -q --no-deps -r "$lock"
  mark_installed .venv-peers "$want"
fi
echo "setup_peers: $(grep -E '^(trl|verl)==' "$lock" | tr '\n' ' ')in .venv-peers"
