#!/usr/bin/env bash
# A seed study on this machine: every run of experiments/EXPERIMENT.yaml with the local engine,
# N side by side, then `gdpo-nemo report` of them (tables with 95 % intervals and the paired
# comparison by seed, curves with the seed spread).
#
#   bash scripts/study.sh EXPERIMENT [--out DIR] [--jobs N] [--only KEY=VALUE ...] [--smoke] [key=value ...]
#
# Runs go to DIR/runs/ (default runs/EXPERIMENT), logs to DIR/logs/, the report to DIR/report/.
# Rerunning skips finished runs and resumes the others from their newest checkpoint, so an
# interrupted study (Ctrl-C, a lost session, a reboot) is finished by the same command.
# --smoke: the same pipeline on builtin:tiny on the CPU at toy sizes (about a minute).
# key=value overrides go to every run (e.g. grpo.max_num_steps=100). PYTHON picks the
# interpreter (default: this checkout's .venv/bin/python, made by scripts/setup.sh; else
# python3 on PATH, e.g. an activated environment with gdpo_nemo installed).
set -uo pipefail

if [ $# -eq 0 ] || [[ $1 == -* ]]; then
    echo "usage: bash scripts/study.sh EXPERIMENT [--out DIR] [--jobs N] [--only KEY=VALUE ...] [--smoke] [key=value ...]" >&2
    exit 2
fi
experiment=$1; shift
out=runs/$experiment
args=()
while (($#)); do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
checkout=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PYTHON:-}" ]; then
    python=$PYTHON
elif [ -x "$checkout/.venv/bin/python" ]; then
    python=$checkout/.venv/bin/python
else
    python=python3
fi
if ! "$python" -c "import gdpo_nemo" 2>/dev/null; then
    echo "study.sh: $python cannot import gdpo_nemo: run scripts/setup.sh (it makes .venv), or set PYTHON to an interpreter that has it" >&2
    exit 2
fi

start=$(date +%s)
"$python" -m gdpo_nemo.commands.local_parallel "$experiment" --out "$out" "${args[@]}"
status=$?
echo "study: $experiment: runs took $(( $(date +%s) - start )) s in this invocation (exit $status)"
if [ -d "$out/runs" ]; then  # the report of whatever finished, even after a failure
    "$python" -m gdpo_nemo.cli report --source "$out/runs" --experiment "$experiment" --out "$out/report" \
        --cache "$out/.cache/analysis" --quiet || status=$((status ? status : 1))
fi
exit "$status"
