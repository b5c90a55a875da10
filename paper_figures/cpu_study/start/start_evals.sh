#!/usr/bin/env bash
# The warm-started models before any RL step: greedy validation on the study's 64 held-out
# problems (grpo.val_at_start), then one training step, per seed, one run at a time.
# The configs are the study's own (paper_figures/cpu_study/configs/, the GRPO one of each seed;
# the warm-start is the same for both methods of a seed). Writes runs/cpu_study_start/seed<S>/.
cd "$(dirname "$0")/../../.." || exit 1
mkdir -p runs/cpu_study_start
for s in 0 1 2 3 4; do
  .venv/bin/gdpo-nemo train --config paper_figures/cpu_study/configs/cpu_study__gsm8k__smollm2-135m__grpo__seed$s.yaml \
    --run-dir runs/cpu_study_start/seed$s grpo.max_num_steps=1 grpo.val_at_start=true grpo.val_at_end=false \
    checkpointing.enabled=false gdpo.local.num_threads=1 > runs/cpu_study_start/seed$s.log 2>&1 || exit 1
done
