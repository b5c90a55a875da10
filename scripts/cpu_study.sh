#!/usr/bin/env bash
# The CPU study (experiments/cpu_study.yaml): GRPO vs GDPO on SmolLM2-135M-Instruct over seeds,
# on this 2-core machine; then the report (paper_figures/cpu_study/ holds the committed one).
#
#   bash scripts/cpu_study.sh [--out DIR] [--only KEY=VALUE ...] [key=value ...]
#
# Two runs at a time, one torch thread each. Resumable: rerun the same command after any
# interruption. Runs to DIR/runs/ (default runs/cpu_study); see scripts/study.sh.
exec bash "$(dirname "$0")/study.sh" cpu_study --jobs 2 "$@"
