#!/usr/bin/env bash
# The study of rewards in tension (experiments/tension_study.yaml): GRPO vs GDPO on correctness
# against a length limit, SmolLM2-135M-Instruct over seeds, on this 2-core machine; then the
# report (paper_figures/tension_study/ holds the committed one and the pre-registration).
#
#   bash scripts/tension_study.sh [--out DIR] [--only KEY=VALUE ...] [key=value ...]
#
# Two runs at a time, one torch thread each. Resumable: rerun the same command after any
# interruption. Runs to DIR/runs/ (default runs/tension_study); see scripts/study.sh.
#
# On torch's native CPU kernels unless GDPO_NEMO_CPU_NUMERICS says otherwise: the CPU pins
# (gdpo_nemo/runs/cpu_pins.py) double every step, and pinned, the study's 20 runs and 30
# held-out validations need about 10.7 hours of this machine, past the study's 6-hour budget
# (measured: docs/tension_study.md). Each run's provenance names the CPU and code paths it ran
# on, so its numbers regenerate on that kind of CPU; GDPO_NEMO_CPU_NUMERICS=pinned gives
# numbers every x86-64 CPU with AVX2 regenerates, at twice the time.
export GDPO_NEMO_CPU_NUMERICS="${GDPO_NEMO_CPU_NUMERICS:-native}"
exec bash "$(dirname "$0")/study.sh" tension_study --jobs 2 "$@"
