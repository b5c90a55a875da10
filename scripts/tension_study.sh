#!/usr/bin/env bash
# The study of rewards in tension (experiments/tension_study.yaml): GRPO vs GDPO on correctness
# against a length limit, SmolLM2-135M-Instruct over seeds, on this 2-core machine; then the
# report (paper_figures/tension_study/ holds the committed one and the pre-registration).
#
#   bash scripts/tension_study.sh [--out DIR] [--only KEY=VALUE ...] [key=value ...]
#
# Two runs at a time, one torch thread each. Resumable: rerun the same command after any
# interruption. Runs to DIR/runs/ (default runs/tension_study); see scripts/study.sh.
exec bash "$(dirname "$0")/study.sh" tension_study --jobs 2 "$@"
