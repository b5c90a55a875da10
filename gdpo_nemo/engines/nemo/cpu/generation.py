"""NeMo RL's generation interface on a CPU: the policy's own workers generate.

`PolicyGeneration.generate` is NeMo RL's ``Policy.generate`` (shard the batch over data
parallel ranks, call each worker's ``generate``, gather), which `worker.CpuPolicyWorker`
provides with HF ``generate``. Training and generation share one model, so the weight
synchronizer grpo_train consults before each rollout (``policy_generation.
weight_synchronizer``, grpo.py at the pin) never has stale weights: `SharedWeights` moves
nothing, where on a cluster vLLM's refit (CUDA IPC or NCCL) runs.
"""

from __future__ import annotations

from typing import Any

from nemo_rl.models.generation.interfaces import GenerationInterface
from nemo_rl.weight_sync.interfaces import WeightSynchronizer

__all__ = ["PolicyGeneration", "SharedWeights"]


class SharedWeights(WeightSynchronizer):
    """The synchronizer of a generator that IS the policy: never stale, nothing to send."""

    is_stale = False

    def sync_weights(self, *, timer=None, kv_scales=None) -> dict:
        return {}

    def init_communicator(self) -> None:
        return None

    def mark_stale(self) -> None:  # the v0.7.0 release's interface: a step makes nothing stale here
        return None

    def shutdown(self) -> None:
        return None


class PolicyGeneration(GenerationInterface):
    """A GenerationInterface over a NeMo RL ``Policy`` whose workers can ``generate``.
    `calls` counts generate calls (one per rollout turn, validation included)."""

    def __init__(self, policy):
        self.policy = policy
        self.weight_synchronizer = SharedWeights()
        self.calls = 0

    def generate(self, data, greedy: bool = False):
        self.calls += 1
        return self.policy.generate(data, greedy=greedy)

    def init_collective(self, ip, port, world_size, *, train_world_size):
        raise NotImplementedError("the CPU path has no collectives: generation shares the policy's weights")

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def shutdown(self) -> bool:
        return True  # the policy is shut down by its owner

    def snapshot_step_metrics(self) -> None:
        return None

    def get_step_metrics(self) -> dict:
        return {}
