"""NeMo RL's own GDPO and GRPO advantage estimators with leave-one-out, timed; run in .venv-nemo
by benchmarks/bench_advantages.py (--leave-one-out), which prints these beside ours.

    .venv-nemo/bin/python benchmarks/peers/nemo_rl_leave_one_out.py [--uneven] SAMPLES [SAMPLES ...]

Prints one JSON line per (samples, estimator): the seconds of one call of
nemo_rl.algorithms.advantage_estimator.{GDPO,GRPO}AdvantageEstimator.compute_advantage on the
batch bench_advantages makes (groups of 16, 3 binary rewards, seed 0; --uneven:
leave_one_out_batches.uneven_batch), as nemo_rl.algorithms.grpo calls it (prompt ids [B, 1], a
[B, 1] mask, float32), one intra-op thread.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from leave_one_out_batches import uneven_batch  # noqa: E402

from nemo_rl.algorithms.advantage_estimator import (  # noqa: E402
    AdvEstimatorConfig,
    GDPOAdvantageEstimator,
    GRPOAdvantageEstimator,
)

GROUP = 16


def main() -> None:
    uneven = "--uneven" in sys.argv[1:]
    for samples in (int(arg) for arg in sys.argv[1:] if arg != "--uneven"):
        if uneven:
            columns, ids = uneven_batch(samples)
            rewards = [column.float() for column in columns]
            prompt_ids = ids.unsqueeze(1)
            samples = ids.shape[0]
        else:
            generator = torch.Generator().manual_seed(0)
            rewards = [torch.randint(0, 2, (samples,), generator=generator).float() for _ in range(3)]
            prompt_ids = torch.arange(samples // GROUP).repeat_interleave(GROUP).unsqueeze(1)
        mask = torch.ones(samples, 1)
        for name in ("gdpo", "grpo"):
            config = AdvEstimatorConfig(name=name, normalize_rewards=True, use_leave_one_out_baseline=True,
                                        reward_weights=[1.0, 1.0, 1.0])
            start = time.perf_counter()
            if name == "gdpo":
                batch = {f"reward/r{k}": values.clone() for k, values in enumerate(rewards)}
                GDPOAdvantageEstimator(config, None).compute_advantage(prompt_ids, None, mask, repeated_batch=batch)
            else:
                total = rewards[0] + rewards[1] + rewards[2]
                GRPOAdvantageEstimator(config, None).compute_advantage(prompt_ids, total, mask)
            print(json.dumps({"samples": samples, "estimator": name, "seconds": time.perf_counter() - start}),
                  flush=True)


if __name__ == "__main__":
    main()
