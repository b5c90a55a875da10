#!/usr/bin/env bash
# The GPU study (experiments/gpu_study.yaml): GRPO vs GDPO on SmolLM2-135M-Instruct, GSM8K-style
# arithmetic (3 rewards) and tool calling (2 rewards), 3 seeds each, on one GPU; then the report.
#
#   bash scripts/gpu_study.sh [--out DIR] [--jobs N] [--only KEY=VALUE ...] [--smoke] [key=value ...]
#
# Runs every run of the experiment, N (default 6) side by side on the one GPU, into
# DIR/runs/ (default runs/gpu_study), then writes `gdpo-nemo report` of them into DIR/report/.
# Rerunning skips finished runs and resumes the others from their newest checkpoint.
# --smoke: the same pipeline on builtin:tiny on the CPU at toy sizes (about a minute).
# key=value overrides go to every run (e.g. grpo.max_num_steps=100). PYTHON picks the
# interpreter (default: python3 on PATH, e.g. the activated .venv).
set -uo pipefail

out=runs/gpu_study
args=()
while (($#)); do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
python=${PYTHON:-python3}

"$python" -m gdpo_nemo.commands.local_parallel gpu_study --out "$out" "${args[@]}"
status=$?
if [ -d "$out/runs" ]; then  # the report of whatever finished, even after a failure
    "$python" -m gdpo_nemo.cli report --source "$out/runs" --experiment gpu_study --out "$out/report" \
        --cache "$out/.cache/analysis" --quiet || status=$((status ? status : 1))
fi
exit "$status"
