"""verl's own advantage estimators (verl.trainer.ppo.core_algos) on the cases of
tests/test_peer_conformance.py.

Run in .venv-peers (scripts/setup_peers.sh):
    python tests/peers/verl_driver.py cases.json results.json

GRPO: compute_grpo_outcome_advantage with each sample's score (the float sum of its
components) at its last response token, as verl's reward manager places it. GDPO:
compute_gdpo_outcome_advantage with the components in non_tensor_batch under
algorithm.gdpo_reward_keys (and gdpo_reward_weights), prompts and attention mask in `batch`,
as verl's trainer calls it. Groups by uid (`index`), response masks from the case's token
lengths. verl casts GDPO's components to float32 itself; its float64 run is verl's GDPO made
of verl's own parts (compute_grpo_outcome_advantage per component, the weighted sum,
verl_F.masked_whiten), with that cast left out.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_io import read_cases, write_results  # noqa: E402

# Tiny tensors: one intra-op thread is far faster than two (thread start-up per op).
torch.set_num_threads(1)

import verl.utils.torch_functional as verl_F  # noqa: E402
from verl.trainer.ppo.core_algos import (  # noqa: E402
    compute_gdpo_outcome_advantage,
    compute_grpo_outcome_advantage,
)

PROMPT_LENGTH = 3


def at_last_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=scores.dtype)
    out[torch.arange(mask.shape[0]), mask.sum(dim=1).long() - 1] = scores
    return out


def run(case: dict, dtype: torch.dtype) -> list[list[float]]:
    rewards = torch.tensor(case["rewards"], dtype=dtype)
    batch_size, num_rewards = rewards.shape
    lengths = case.get("token_lengths") or [1] * batch_size
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=dtype)
    index = np.array([str(g) for g in case["group_ids"]], dtype=object)
    norm = case["options"]["norm_adv_by_std_in_grpo"]
    if case["estimator"] != "gdpo":
        scores = sum(rewards[:, k] for k in range(num_rewards))
        advantages, _ = compute_grpo_outcome_advantage(at_last_token(scores, mask), mask, index, epsilon=1e-6,
                                                       norm_adv_by_std_in_grpo=norm)
        return advantages.tolist()
    if dtype == torch.float32:  # verl's own entry point, as its trainer calls it
        config = {"gdpo_reward_keys": case["names"], "gdpo_reward_weights": case["weights"]}
        non_tensor_batch = {name: np.array(case["rewards"])[:, k] for k, name in enumerate(case["names"])}
        batch = {"prompts": torch.zeros(batch_size, PROMPT_LENGTH, dtype=torch.long),
                 "attention_mask": torch.cat([torch.ones(batch_size, PROMPT_LENGTH, dtype=torch.long), mask.long()], 1)}
        advantages, _ = compute_gdpo_outcome_advantage(torch.zeros_like(mask), mask, index, epsilon=1e-6,
                                                       norm_adv_by_std_in_grpo=norm, config=config,
                                                       non_tensor_batch=non_tensor_batch, batch=batch)
        return advantages.tolist()
    total = None
    for k in range(num_rewards):
        part, _ = compute_grpo_outcome_advantage(at_last_token(rewards[:, k], mask), mask, index, epsilon=1e-6,
                                                 norm_adv_by_std_in_grpo=norm)
        part = case["weights"][k] * part
        total = part if total is None else total + part
    return (verl_F.masked_whiten(total, mask) * mask).tolist()


def main() -> None:
    results = {}
    for case in read_cases():
        results[case["id"]] = {"float32": run(case, torch.float32), "float64": run(case, torch.float64)}
    write_results(results)


if __name__ == "__main__":
    main()
