"""The multi-reward environment NeMo RL runs as a Ray actor: a thin shell over `scoring`.

NeMo RL (pinned commit) creates an environment with
``actor_class.options(runtime_env=...).remote(env_config)`` (``create_env`` in
``nemo_rl/environments/utils.py``), calls ``step.remote(message_log_batch, metadata)`` once
per rollout turn and task, and unpacks the result as ``EnvironmentReturn(observations,
metadata, next_stop_strings, rewards, terminateds, answers)``; a dict of
``{"reward/<name>": Tensor[B]}`` rewards puts each key on the batch, sums them into
``total_reward``, and feeds GDPO (keys sorted by name).

`RewardEnvironment` subclasses NeMo RL's ``EnvironmentInterface`` and returns its
``EnvironmentReturn`` when NeMo RL is installed; without it (tests, CPU machines) the base
and the return type are stand-ins with the same methods and fields, so the same actor runs
on a plain local Ray. `RewardEnvironmentActor` is the ``@ray.remote`` class registered
under ``gdpo_<task>`` by ``plugin.register``.
"""

from __future__ import annotations

import abc
import logging
from typing import Any, Mapping, NamedTuple, Sequence

import ray
import torch

from gdpo_nemo.engines.nemo.scoring import EnvSettings, RewardScorer, load_token_counter

__all__ = ["ACTOR_FQN", "EnvironmentInterface", "EnvironmentReturn", "RewardEnvironment", "RewardEnvironmentActor"]

ACTOR_FQN = "gdpo_nemo.engines.nemo.environment.RewardEnvironmentActor"
_log = logging.getLogger(__name__)


class _StandInEnvironmentReturn(NamedTuple):
    """NeMo RL's EnvironmentReturn fields, in its order (used when NeMo RL is absent)."""

    observations: list
    metadata: list
    next_stop_strings: list
    rewards: Any
    terminateds: Any
    answers: list | None


class _StandInEnvironmentInterface(abc.ABC):
    """NeMo RL's EnvironmentInterface methods (used when NeMo RL is absent)."""

    @abc.abstractmethod
    def step(self, message_log_batch, metadata):
        """One environment turn for a batch; returns EnvironmentReturn."""

    @abc.abstractmethod
    def global_post_process_and_metrics(self, batch):
        """(batch, metrics) after all rollouts of a batch."""


def _nemo_rl_types():
    try:
        from nemo_rl.environments.interfaces import EnvironmentInterface as interface
        from nemo_rl.environments.interfaces import EnvironmentReturn as returned
    except ImportError:
        return _StandInEnvironmentInterface, _StandInEnvironmentReturn
    return interface, returned


EnvironmentInterface, EnvironmentReturn = _nemo_rl_types()


def _rollouts_take_named_rewards() -> bool:
    """`interfaces.rollouts_take_named_rewards` where NeMo RL is importable; True (the named
    form, as the pin takes it) where it is not (the stand-in types)."""
    try:
        from gdpo_nemo.engines.nemo.interfaces import rollouts_take_named_rewards

        return rollouts_take_named_rewards()
    except ImportError:
        return True


class RewardEnvironment(EnvironmentInterface):
    """Scores single-turn answers with one task's named rewards.

    env_config: the run config's ``env.gdpo_<task>`` block (see `scoring.EnvSettings`).
    """

    def __init__(self, env_config: Mapping):
        self.settings = EnvSettings.from_config(env_config, where="env")
        self.scorer = RewardScorer(self.settings, load_token_counter(self.settings.tokenizer))
        self.data_errors = 0
        self._unreported = 0
        self._named_rewards = _rollouts_take_named_rewards()

    def step(self, message_log_batch: Sequence[Sequence[Mapping]], metadata: Sequence[Mapping | None]):
        """Score a batch: rewards {"reward/<name>": float32 Tensor[B]}, every episode ends.

        The observation is empty: NeMo RL tokenizes it and appends it to the sample's
        training sequence (masked out of the loss, but it takes sequence length and packing
        room), and every episode ends here, so there is nothing to tell the model. The
        rewards are in the batch (reward/<name>) and in NeMo RL's logged rollouts.
        """
        result = self.scorer.score(message_log_batch, metadata)
        if result.data_errors:
            self.data_errors += len(result.data_errors)
            self._unreported += len(result.data_errors)
            first = min(result.data_errors)
            _log.warning(
                "%d sample(s) with a broken ground truth scored as %s; first: sample %d: %s",
                len(result.data_errors), self.settings.on_data_error, first, result.data_errors[first],
            )
        count = len(message_log_batch)
        rewards = {key: torch.tensor(values, dtype=torch.float32) for key, values in result.rewards.items()}
        if not self._named_rewards:  # the v0.7.0 release: one [B, K] tensor, columns in sorted-name order
            rewards = torch.stack([rewards[key] for key in sorted(rewards)], dim=1)
        observations = [{"role": "environment", "content": ""} for _ in range(count)]
        return EnvironmentReturn(
            observations=observations,
            metadata=list(metadata),
            next_stop_strings=[None] * count,
            rewards=rewards,
            terminateds=torch.ones(count, dtype=torch.bool),
            answers=None,
        )

    def take_data_errors(self) -> int:
        """How many samples had a broken ground truth since the last call (then 0 again).

        NeMo RL never calls ``global_post_process_and_metrics`` at the pinned commit, so the
        plugin's rollout hook asks each of our actors this after every rollout and logs the
        sum as ``data_errors``.
        """
        count, self._unreported = self._unreported, 0
        return count

    def global_post_process_and_metrics(self, batch):
        """(batch, {"reward/<name>": mean}) over a batch carrying our reward keys."""
        metrics = {}
        for key in self.scorer.keys:
            if key in batch:
                values = torch.as_tensor(batch[key], dtype=torch.float32)
                metrics[key] = float(torch.nanmean(values)) if values.numel() else 0.0
        metrics["data_errors"] = self.data_errors
        return batch, metrics

    def shutdown(self) -> None:
        """Nothing to release (NeMo RL calls it when training ends)."""


# The actor NeMo RL creates. Restarted if its process dies (a crashed sandbox child must not
# end a week-long run); exceptions raised by step() still reach the trainer.
RewardEnvironmentActor = ray.remote(max_restarts=-1, max_task_retries=-1)(RewardEnvironment)
