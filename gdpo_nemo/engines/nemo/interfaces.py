"""What the plugin needs of NeMo RL's code, checked before a hook is installed.

The hooks (`gdpo_nemo.engines.nemo.plugin`) replace NeMo RL functions and read some of their
arguments by position; NeMo RL's releases and its main branch differ in those functions
(v0.7.0's ``validate``, ``grpo_train`` and ``run_multi_turn_rollout`` take one argument
fewer than main's at 7ea279ab, and its ``CheckpointManager`` has no ``begin_finalization``).
`check_interfaces` compares the NeMo RL that is imported with what every hook reads, and
refuses in one line, naming the versions this plugin is tested with, when a hook would
read the wrong argument or miss its function: a silent mismatch would log wrong metrics or
release a checkpoint before its step's record. `SUPPORTED` names the versions the hooks are
tested with: tests/nemo_tier against main at the pin, tests/nemo_release against v0.7.0.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

# The attribute a hook carries: the NeMo RL function it wraps (`mark_hook`, `unwrapped`).
HOOK_MARK = "__gdpo_nemo_hook__"


def mark_hook(wrapper: Callable, original: Callable) -> Callable:
    """`wrapper` made to look like `original` (name, docstring) and to carry it."""
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, HOOK_MARK, original)
    return wrapper


def unwrapped(fn: Callable) -> Callable:
    """The function NeMo RL defines under `fn`, our hooks peeled off."""
    while hasattr(fn, HOOK_MARK):
        fn = getattr(fn, HOOK_MARK)
    return fn

# The NeMo RL versions the hooks are tested with (README, "NeMo RL versions").
SUPPORTED = ("main at 7ea279ab (0.6.0 development, the pin)", "v0.7.0 (the release containers' version)")

# (module, attribute path, the leading parameter names a hook reads by position, required)
EXPECTED: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("nemo_rl.algorithms.grpo", "_create_advantage_estimator", ("master_config",), True),
    ("nemo_rl.algorithms.grpo", "dynamic_sampling",
     ("repeated_batch", "std", "baseline", "dynamic_sampling_num_gen_batches", "master_config"), True),
    ("nemo_rl.algorithms.grpo", "validate",
     ("policy_generation", "val_dataloader", "tokenizer", "val_task_to_env", "step", "master_config"), True),
    ("nemo_rl.algorithms.grpo", "run_multi_turn_rollout", ("policy_generation", "input_batch", "tokenizer", "task_to_env"),
     True),
    ("nemo_rl.algorithms.grpo", "run_async_multi_turn_rollout",
     ("policy_generation", "input_batch", "tokenizer", "task_to_env"), False),
    # the CPU path calls grpo_train with these twelve, in this order
    ("nemo_rl.algorithms.grpo", "grpo_train",
     ("policy", "policy_generation", "wrapped_dataloader", "val_dataloader", "tokenizer", "loss_fn", "task_to_env",
      "val_task_to_env", "logger", "checkpointer", "grpo_save_state", "master_config"), True),
    ("nemo_rl.utils.logger", "Logger.log_metrics", ("self", "metrics", "step", "prefix", "step_metric", "step_finished"),
     True),
    ("nemo_rl.utils.logger", "get_next_experiment_dir", ("base_log_dir",), True),
    ("nemo_rl.utils.checkpoint", "CheckpointManager.finalize_checkpoint", ("self", "checkpoint_path"), True),
    ("nemo_rl.utils.checkpoint", "CheckpointManager.begin_finalization", ("self", "checkpoint_path"), False),
    ("nemo_rl.distributed.virtual_cluster", "init_ray", ("log_dir",), True),
    ("nemo_rl.utils.timer", "TimeoutChecker.check_save", ("self",), True),
)


class UnsupportedNemoRL(RuntimeError):
    """The imported NeMo RL lacks what a hook reads; the message is one line."""


def _resolve(module, path: str):
    target = module
    for part in path.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target


def interface_problems() -> list[str]:
    """What the imported NeMo RL lacks or orders otherwise than the hooks read, one item a
    function (empty: every hook fits)."""
    import importlib

    problems = []
    for module_name, path, leading, required in EXPECTED:
        target = _resolve(importlib.import_module(module_name), path)
        if target is None:
            if required:
                problems.append(f"{module_name}.{path} is missing")
            continue
        try:
            names = tuple(inspect.signature(unwrapped(target)).parameters)  # NeMo RL's, not our wrapper
        except (TypeError, ValueError):
            problems.append(f"{module_name}.{path} has no readable signature")
            continue
        if names[:len(leading)] != leading:
            problems.append(f"{module_name}.{path} takes ({', '.join(names)}), the hooks read ({', '.join(leading)}, ...)")
    return problems


def nemo_rl_version() -> str:
    """The imported NeMo RL's ``__version__`` and where it was imported from."""
    import nemo_rl

    return f"{getattr(nemo_rl, '__version__', '?')} at {nemo_rl.__file__.rsplit('/nemo_rl/', 1)[0]}"


def check_interfaces() -> None:
    """Raise UnsupportedNemoRL (one line) when a hook would not fit the imported NeMo RL."""
    problems = interface_problems()
    if problems:
        raise UnsupportedNemoRL(
            f"NeMo RL {nemo_rl_version()} is not a version gdpo_nemo's hooks fit: {'; '.join(problems)}."
            f" Supported: {'; '.join(SUPPORTED)}")


def rollouts_take_named_rewards() -> bool:
    """Whether the imported NeMo RL's rollout takes an environment's rewards as a mapping of
    named components (main at the pin: ``{"reward/<name>": Tensor[B]}`` becomes batch keys of
    those names) or only as a tensor (the v0.7.0 release: ``Tensor[B, K]``, whose columns the
    rollout puts on the batch as ``reward1`` ... ``rewardK``). Read from the source of the
    rollout's own reward gathering, which tests a task's rewards for a dict only where it
    takes one: from its file, without importing it (the module pulls in nearly all of NeMo RL,
    ~10 s of CPU in every environment actor that asks)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("nemo_rl.experience.rollouts")
    if spec is None or not spec.origin:
        raise ImportError("nemo_rl.experience.rollouts not found")
    with open(spec.origin, encoding="utf-8") as handle:
        source = handle.read()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "calculate_rewards":
            return "isinstance(task_rewards, dict)" in (ast.get_source_segment(source, node) or "")
    raise ImportError(f"{spec.origin} defines no calculate_rewards")


def name_numbered_rewards(batch, names) -> None:
    """On a batch from a rollout that numbers reward components (``reward1`` ... ``rewardK``,
    the release's format, in the order the environment stacked them: `names`), add each as
    ``reward/<name>``, the key every reader of ours uses (no-op where those keys exist)."""
    if any(isinstance(k, str) and k.startswith("reward/") for k in batch.keys()):
        return
    numbered = [f"reward{i + 1}" for i in range(len(names))]
    if all(key in batch for key in numbered):
        for key, name in zip(numbered, names):
            batch[f"reward/{name}"] = batch[key]
