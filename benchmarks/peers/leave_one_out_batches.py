"""The uneven leave-one-out batch that benchmarks/bench_advantages.py (--leave-one-out) times for
ours and benchmarks/peers/nemo_rl_leave_one_out.py for NeMo RL's own: torch only, so that both
venvs build the same rewards."""

from __future__ import annotations

import torch

SMALL_GROUP = 4


def uneven_batch(samples: int, num_rewards: int = 3) -> tuple[list[torch.Tensor], torch.Tensor]:
    """([Tensor[samples] float64] * num_rewards, group ids Tensor[samples]): one group of
    samples / 2, the rest in groups of 4; in every group and reward an outlier of 1 beside
    mates at 0 but one at 2^-30, so every group holds a row whose mates' variance, taken by
    subtraction, cancels (the rows leave-one-out sums again; issue 48's round 6)."""
    big = samples // 2
    sizes = torch.tensor([big] + [SMALL_GROUP] * ((samples - big) // SMALL_GROUP))
    group_ids = torch.arange(sizes.shape[0]).repeat_interleave(sizes)
    starts = torch.cumsum(sizes, 0) - sizes
    rewards = []
    for k in range(num_rewards):
        values = torch.zeros(group_ids.shape[0], dtype=torch.float64)
        values[starts + k % 2] = 1.0  # the outlier, not always the group's first sample
        values[starts + 2] = 2.0**-30  # one near-equal mate
        rewards.append(values)
    return rewards, group_ids
