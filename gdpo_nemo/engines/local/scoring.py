"""Steps 2 and 3 of a training step: score every reward component r_k of every completion
(decoded on the host, one reward function per component), then the step's advantages from
the estimator registry (GRPO sums then normalizes, GDPO normalizes each r_k); and the reward
metrics of training and validation."""

from __future__ import annotations

import torch

from gdpo_nemo.engines.local.generation import Rollouts
from gdpo_nemo.runs import metric_names as mn


def score(reward_set, tokenizer, rollouts: Rollouts, examples: list, log=print) -> tuple[dict, list]:
    """Decode every completion and score it: ({name: Tensor[N] float32 on the rollouts'
    device}, texts). Decoding and the reward functions run on the host."""
    from gdpo_nemo.rewards.base import RewardDataError

    completion_ids, completion_mask = rollouts.completion_ids.cpu(), rollouts.completion_mask.cpu()
    texts = tokenizer.batch_decode(
        [ids[mask.bool()] for ids, mask in zip(completion_ids, completion_mask)],
        skip_special_tokens=True,
    )
    lengths = completion_mask.sum(-1).tolist()
    tests = [e.tests for e in examples] if any(e.tests is not None for e in examples) else None
    try:
        scores = reward_set.score_batch(texts, [e.ground_truth for e in examples], num_tokens=lengths, tests=tests)
    except RewardDataError as err:  # bad ground truth in our data: keep going, say so
        log(f"reward data error (rows scored lowest): {err}")
        scores = err.partial
    device = rollouts.completion_ids.device
    return {name: torch.tensor(values, dtype=torch.float32, device=device) for name, values in scores.items()}, texts


def advantages_for(rewards: dict, group_ids: torch.Tensor, gdpo: dict, completion_mask: torch.Tensor) -> torch.Tensor:
    """[N] advantages of the step from the registry (`gdpo_nemo.estimators`), with every
    estimator option of the gdpo block (`gdpo_nemo.config.settings.EstimatorSettings`)."""
    from gdpo_nemo.estimators import compute_advantages
    from gdpo_nemo.config.settings import EstimatorSettings

    settings = EstimatorSettings.from_gdpo(gdpo)
    token_mask = completion_mask if settings.batch_norm == "token" else None
    return compute_advantages(rewards, group_ids, settings.estimator, options=settings.options, token_mask=token_mask)


def reward_metrics(rewards: dict, prefix: str) -> dict:
    """`<prefix>/reward` (mean of the component sum, NeMo RL's total_reward) and
    `<prefix>/reward/<name>` (mean of each component)."""
    total = torch.stack(list(rewards.values())).sum(0)
    metrics = {mn.key(prefix, mn.reward()): float(total.mean())}
    metrics.update({mn.key(prefix, mn.reward(name)): float(values.mean()) for name, values in rewards.items()})
    return metrics
