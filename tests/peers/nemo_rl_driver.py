"""NeMo RL's own estimator classes on the cases of tests/test_peer_conformance.py.

Run in .venv-nemo (scripts/setup_nemo.sh: NeMo RL's source at the pinned commit on the path):
    python tests/peers/nemo_rl_driver.py cases.json results.json
Calls nemo_rl.algorithms.advantage_estimator.{GRPO,GDPO}AdvantageEstimator.compute_advantage
as nemo_rl.algorithms.grpo does: prompt_ids [B, 1] (one token row per group), the rollout's
total_reward (float, 0 + r_1 + r_2 + ... as the multi-reward rollout adds the environment's
components) for GRPO, the batch's "reward/<name>" keys for GDPO, a [B, 1] mask.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_io import read_cases, write_results  # noqa: E402

# Tiny tensors: one intra-op thread is far faster than two (thread start-up per op).
torch.set_num_threads(1)

from nemo_rl.algorithms.advantage_estimator import (  # noqa: E402
    AdvEstimatorConfig,
    GDPOAdvantageEstimator,
    GRPOAdvantageEstimator,
)


def run(case: dict, dtype: torch.dtype) -> list[float]:
    rewards = torch.tensor(case["rewards"], dtype=dtype)
    batch_size = rewards.shape[0]
    prompt_ids = torch.tensor(case["group_ids"]).unsqueeze(1)
    mask = torch.ones(batch_size, 1, dtype=dtype)
    options = case["options"]
    names = case["names"]
    config = AdvEstimatorConfig(
        name="gdpo" if case["estimator"] == "gdpo" else "grpo",
        normalize_rewards=options["normalize_rewards"],
        use_leave_one_out_baseline=options["use_leave_one_out_baseline"],
        # NeMo RL orders weights by the sorted component names.
        reward_weights=[case["weights"][names.index(n)] for n in sorted(names)],
    )
    if case["estimator"] == "gdpo":
        batch = {f"reward/{name}": rewards[:, k].clone() for k, name in enumerate(names)}
        estimator = GDPOAdvantageEstimator(config, None)
        advantages = estimator.compute_advantage(prompt_ids, None, mask, repeated_batch=batch)
    else:
        total = torch.zeros(batch_size, dtype=dtype)
        total += sum(rewards[:, k] for k in range(len(names)))
        estimator = GRPOAdvantageEstimator(config, None)
        advantages = estimator.compute_advantage(prompt_ids, total, mask)
    return advantages[:, 0].tolist()


def run_float64(case: dict) -> list[float]:
    """The same code in float64: NeMo RL builds its masks with torch's default dtype (and
    its matrix products need one dtype), so the default is float64 for this run."""
    torch.set_default_dtype(torch.float64)
    try:
        return run(case, torch.float64)
    finally:
        torch.set_default_dtype(torch.float32)


def main() -> None:
    results = {}
    for case in read_cases():
        results[case["id"]] = {"float32": run(case, torch.float32), "float64": run_float64(case)}
    write_results(results)


if __name__ == "__main__":
    main()
