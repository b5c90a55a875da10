#!/usr/bin/env bash
# Set up (scripts/setup.sh --all: .venv and the BFCL and conformance-tier venvs), start the one-node Slurm cluster the sweep tests use, and run
# the whole test suite on two pytest-xdist workers (the NeMo RL tier and the Slurm tests each
# stay on one worker: tests/conftest.py). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all
if [ -x slurm/local_cluster.sh ]; then
  bash slurm/local_cluster.sh start
fi
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
