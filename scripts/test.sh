#!/usr/bin/env bash
# Set up (scripts/setup.sh --all: .venv and the BFCL and conformance-tier venvs), start the one-node Slurm cluster the sweep tests use, and run
# the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
if [ -x slurm/local_cluster.sh ]; then
  bash slurm/local_cluster.sh start
fi
exec .venv/bin/python -m pytest "$@"
