#!/usr/bin/env bash
# The GPU study (experiments/gpu_study.yaml): GRPO vs GDPO on SmolLM2-135M-Instruct, GSM8K-style
# arithmetic (3 rewards) and tool calling (2 rewards), 3 seeds each, on one GPU; then the report.
#
#   bash scripts/gpu_study.sh [--out DIR] [--jobs N] [--only KEY=VALUE ...] [--smoke] [key=value ...]
#
# Runs N (default 6) side by side on the one GPU, into DIR/runs/ (default runs/gpu_study); see
# scripts/study.sh for the rest (resume, report, --smoke, overrides).
exec bash "$(dirname "$0")/study.sh" gpu_study "$@"
