"""Registering gdpo_nemo with NeMo RL, and the hooks that add what NeMo RL lacks.

`register(config)` (called by ``run.py`` in the driver process before NeMo RL's GRPO
starts) first checks that the imported NeMo RL has what the hooks read
(`gdpo_nemo.engines.nemo.interfaces`: the pinned main and v0.7.0 do), then does:

1. environments: ``register_env("gdpo_<task>", ACTOR_FQN)`` for the four tasks
   (``nemo_rl.environments.utils``) and ``ACTOR_ENVIRONMENT_REGISTRY[ACTOR_FQN] =
   PY_EXECUTABLES.SYSTEM`` (``nemo_rl.distributed.ray_actor_environment_registry``): without
   the second, ``create_env`` refuses to start the actor;
2. data processors: ``register_processor("gdpo_<task>", fn)`` (``nemo_rl.data.processors``);
3. hooks, by replacing module attributes of ``nemo_rl.algorithms.grpo`` (its trainer looks
   them up at call time; no NeMo RL file is changed):
   - ``_create_advantage_estimator``: our estimator for what NeMo RL cannot run itself (``gdpo_no_bn``,
     any estimator registered without a NeMo RL equivalent, the options it lacks);
   - ``run_multi_turn_rollout`` and ``run_async_multi_turn_rollout``: count ``data_errors``
     (the samples our environment actors scored with a broken ground truth; NeMo RL never
     calls the environments' ``global_post_process_and_metrics`` at the pin, so the hook
     asks the actors); during validation the batches are collected;
   - ``validate``: adds the collected ``reward/<name>`` and diagnostics to the validation
     metrics (logged as ``validation/...``);
   - ``dynamic_sampling`` (called after every generation batch, DAPO on or off): DAPO's
     filter keeps the prompt groups whose trained signal varies (every component for GDPO,
     the weighted sum for weighted GRPO; ``sampling.py``), not those whose unweighted reward
     sum varies; once the step's batch is complete, the per-component reward families of the
     sets NeMo RL's totals cover, and collapse diagnostics of the trained batch, join the
     step's metrics (logged as ``train/...``; docs/interfaces.md);
   - ``nemo_rl.utils.logger.Logger.log_metrics``: also writes ``<run dir>/metrics.jsonl`` (a
     step's record at its last call), and replays a resumed run's earlier steps into W&B;
   - ``nemo_rl.utils.checkpoint.CheckpointManager.begin_finalization`` (v0.7.0:
     ``finalize_checkpoint``): a step's checkpoint becomes the one to resume from only once
     the step's metrics are written;
   - ``TimeoutChecker`` (as imported by the trainer): notes a stop at
     ``checkpointing.checkpoint_must_save_by``, so such a run is not marked DONE;
   - ``nemo_rl.utils.logger.get_next_experiment_dir``: keeps ``logger.log_dir`` as the run
     dir (NeMo RL would add ``exp_<N>/``), so both engines share one run-dir layout;
   - ``nemo_rl.distributed.virtual_cluster.init_ray``: also names the Ray it joined in
     ``RAY_ADDRESS``. NeMo RL's memory tracker calls Ray's ``memory_summary()`` without an
     address at every stage of every step, which raises "Found multiple active Ray
     instances" on a machine where another Ray runs (a shared node, a second job).

The wrappers (`wrap_rollout`, `wrap_validate`, `wrap_log_metrics`, `wrap_dynamic_sampling`)
take the original function as an argument; tests/nemo_tier runs them inside NeMo RL's own
``grpo_train`` and rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.config import ENV_NAMES
from gdpo_nemo.engines.nemo.data import PROCESSORS
from gdpo_nemo.engines.nemo.environment import ACTOR_FQN
from gdpo_nemo.engines.nemo.interfaces import HOOK_MARK as _MARK
from gdpo_nemo.engines.nemo.interfaces import mark_hook as _mark
from gdpo_nemo.engines.nemo.interfaces import unwrapped as _unwrapped
from gdpo_nemo.config.settings import EstimatorSettings
from gdpo_nemo.engines.nemo.estimators import create_estimator, reward_components
from gdpo_nemo.engines.nemo.metrics import StepMetricsWriter, ValidationCollector, trained_batch_metrics
from gdpo_nemo.engines.nemo.sampling import group_signal_spread

__all__ = [
    "HookState",
    "install_hooks",
    "register",
    "register_environments",
    "register_processors",
    "wrap_dynamic_sampling",
    "wrap_log_metrics",
    "wrap_rollout",
    "wrap_validate",
    "watch_timeout",
    "defer_finalization",
    "pin_ray_address",
]



@dataclass
class HookState:
    """What the hooks share: the run's estimator settings, the validation collector, whether
    a validation is running, and the metrics.jsonl writer (None: no file)."""

    settings: EstimatorSettings | None
    collector: ValidationCollector = field(init=False)
    in_validation: bool = False
    writer: StepMetricsWriter | None = None
    timed_out: bool = False  # NeMo RL stopped early at checkpointing.checkpoint_must_save_by
    # The training step in progress (its generation batches until dynamic sampling says the
    # batch is complete): the unfiltered generation batches NeMo RL's batch cache took, and
    # the data errors of its rollouts.
    generated: list = field(default_factory=list)
    step_data_errors: int | None = None
    pending_checkpoints: list = field(default_factory=list)  # defer_finalization's, until the step is logged

    def __post_init__(self):
        self.collector = ValidationCollector(self.settings)

    def release_checkpoints(self) -> None:
        """Let NeMo RL finalize the checkpoints held back (`defer_finalization`)."""
        pending, self.pending_checkpoints = self.pending_checkpoints, []
        for finalize in pending:
            finalize()

    def end_step(self) -> None:
        """Forget the step in progress (its batch is complete, or the trainer gave up)."""
        self.generated = []
        self.step_data_errors = None


def wrap_rollout(original: Callable, state: HookState) -> Callable:
    """A rollout function returning (batch, metrics) that also counts for our metrics.

    Training: the data errors of the rollout are added to the step's count; the reward
    families are computed once the trained batch is known (`wrap_dynamic_sampling`): a
    rollout batch is not the trained batch under dynamic sampling, and NeMo RL rewrites the
    total (scaling, shaping) after the rollout.
    Validation (state.in_validation): the batch goes to state.collector.
    """

    from gdpo_nemo.engines.nemo.interfaces import name_numbered_rewards

    def rollout(*args, **kwargs):
        batch, metrics = original(*args, **kwargs)
        # the release numbers the components (reward1, ...) in the environment's sorted-name order
        name_numbered_rewards(batch, sorted(state.settings.components if state.settings is not None else ()))
        task_to_env = kwargs.get("task_to_env", args[3] if len(args) > 3 else None)
        errors = _take_data_errors(task_to_env)
        if state.in_validation:
            state.collector.add(batch, data_errors=errors)
        elif errors is not None:
            state.step_data_errors = (state.step_data_errors or 0) + errors
        return batch, metrics

    return _mark(rollout, original)


def _take_data_errors(task_to_env) -> int | None:
    """The broken-ground-truth count of every gdpo_nemo environment actor in `task_to_env`
    since the last call (other environments are skipped); None when none is ours."""
    import ray

    handles = {id(env): env for env in (task_to_env or {}).values()}
    pending = []
    for env in handles.values():
        try:
            pending.append(env.take_data_errors.remote())
        except AttributeError:
            continue  # not one of ours
    return int(sum(ray.get(pending))) if pending else None


def wrap_dynamic_sampling(original: Callable, state: HookState) -> Callable:
    """NeMo RL's ``dynamic_sampling(repeated_batch, std, baseline, num_gen_batches,
    master_config, ...)`` returning (batch, is_batch_complete, batch_cache, ds_metrics),
    which grpo_train calls after every generation batch, with or without DAPO:

    - it filters on the trained signal of the run's estimator
      (`sampling.group_signal_spread`) instead of the std of the unweighted reward sum;
    - once the batch is complete, ds_metrics (logged by grpo_train as ``train/...`` with
      the step's other metrics) gains the step's reward families (`metrics.trained_batch_metrics`)
      and data errors. With DAPO, ``reward/<name>`` covers the samples NeMo RL's own
      ``train/reward`` covers: the first num_prompts_per_step x num_generations_per_prompt
      samples, unfiltered, of the step's generation batches that had a group kept (its
      batch cache takes each such batch's unfiltered totals beside the kept samples);
      ``filtered_reward/<name>`` covers the trained batch.
    """

    def dynamic_sampling(repeated_batch, std, baseline, *args, **kwargs):
        master_config = kwargs.get("master_config", args[1] if len(args) > 1 else None)
        spread = group_signal_spread(repeated_batch, state.settings) if state.settings is not None else None
        if spread is not None:
            std = spread.to(device=std.device, dtype=std.dtype)
        grpo = _get(master_config, "grpo")
        filtering = bool(_get(grpo, "use_dynamic_sampling", False))
        try:
            batch, complete, cache, ds_metrics = original(repeated_batch, std, baseline, *args, **kwargs)
        except BaseException:
            state.end_step()
            raise
        if filtering and bool((std != 0).any()):
            state.generated.append(_unfiltered_rewards(repeated_batch))
        if not complete:
            return batch, complete, cache, ds_metrics
        try:
            size = int(_get(grpo, "num_prompts_per_step")) * int(_get(grpo, "num_generations_per_prompt"))
            generated = _first_rows(state.generated, size) if filtering else None
            if generated is not None and not _same_totals(generated["total_reward"], batch["total_reward"]):
                print("gdpo_nemo: the unfiltered samples behind NeMo RL's train/reward could not be matched at this"
                      " NeMo RL version; train/reward/<name> is left out of this step (filtered_reward/<name> is"
                      " logged)", flush=True)
                generated = None
            adjusted = any(bool(_get(_get(grpo, key, {}), "enabled", False)) for key in ("reward_scaling", "reward_shaping"))
            ours = trained_batch_metrics(batch, generated, state.settings, filtered=filtering, adjusted=adjusted)
            if state.step_data_errors is not None:
                ours["data_errors"] = state.step_data_errors
        finally:
            state.end_step()
        # one-element arrays: grpo_train sums arrays (a no-op here) and prints a line for each float
        return batch, complete, cache, {**dict(ds_metrics), **{k: np.asarray([v], dtype=np.float64) for k, v in ours.items()}}

    return _mark(dynamic_sampling, original)


def _get(section, key: str, default=None):
    if section is None:
        return default
    if isinstance(section, Mapping):
        return section.get(key, default)
    return getattr(section, key, default)


def _unfiltered_rewards(batch: Mapping) -> dict:
    """{"reward/<name>": Tensor[B], "total_reward": Tensor[B]} of a generation batch (after
    NeMo RL's scaling and shaping, as its batch cache keeps the totals)."""
    from gdpo_nemo.engines.nemo.estimators import REWARD_PREFIX

    kept = {f"{REWARD_PREFIX}{name}": values for name, values in reward_components(batch).items()}
    kept["total_reward"] = torch.as_tensor(batch["total_reward"]).detach().cpu().to(torch.float64).reshape(-1)
    return kept


def _first_rows(parts: list, size: int) -> dict | None:
    if not parts:
        return None
    return {key: torch.cat([part[key] for part in parts])[:size] for key in parts[0]}


def _same_totals(ours: Tensor, theirs) -> bool:
    theirs = torch.as_tensor(theirs).detach().cpu().to(torch.float64).reshape(-1)
    return ours.shape == theirs.shape and bool(torch.allclose(ours, theirs, rtol=0, atol=1e-6))


def wrap_validate(original: Callable, state: HookState) -> Callable:
    """NeMo RL's ``validate`` returning (val_metrics, timings), with the collected
    per-component metrics merged into val_metrics."""

    def validate(*args, **kwargs):
        state.collector.reset()
        state.in_validation = True
        try:
            val_metrics, timings = original(*args, **kwargs)
        finally:
            state.in_validation = False
        if isinstance(val_metrics, dict):
            val_metrics = {**val_metrics, **state.collector.summary()}
        return val_metrics, timings

    return _mark(validate, original)


def wrap_log_metrics(original: Callable, writer: StepMetricsWriter, state: "HookState | None" = None) -> Callable:
    """``Logger.log_metrics(self, metrics, step, prefix="", ...)`` that also feeds `writer`.

    In a resumed run (a requeued or resubmitted job), the first call first replays the
    steps the earlier jobs logged up to the checkpoint (`writer.earlier_records`, from
    metrics.jsonl) into NeMo RL's W&B logger: each job starts a new W&B run, and a job killed
    by Slurm takes W&B's unflushed records with it, so every job's W&B run holds the run's
    whole history (gdpo_nemo.analysis.wandb_offline.chain_requeued_jobs joins them).
    The step's last call (``step_finished``) writes its record and releases the checkpoints
    `defer_finalization` held back (`state`)."""
    replayed = []

    def log_metrics(self, metrics, step, prefix="", *args, **kwargs):
        if not replayed:
            replayed.append(True)
            wandb_logger = getattr(self, "wandb_logger", None)
            if wandb_logger is not None:
                for record in writer.earlier_records():
                    values = {k: v for k, v in record.items() if k != "step" and v is not None}
                    wandb_logger.log_metrics(values, int(record["step"]), prefix="")
        result = original(self, metrics, step, prefix, *args, **kwargs)
        finished = bool(kwargs.get("step_finished", args[1] if len(args) > 1 else False))
        writer.log(metrics, step, prefix or "", finished=finished)
        if finished and state is not None:
            state.release_checkpoints()
        return result

    return _mark(log_metrics, original)


def finalization_method(manager_cls: type) -> str:
    """The CheckpointManager method that makes a saved step the one to resume from: main's
    ``begin_finalization`` (in a background thread, which calls ``finalize_checkpoint``),
    else the release's ``finalize_checkpoint`` (v0.7.0 calls it directly after a save)."""
    return "begin_finalization" if hasattr(manager_cls, "begin_finalization") else "finalize_checkpoint"


def defer_finalization(manager_cls: type, state: HookState) -> Callable:
    """NeMo RL's ``CheckpointManager.begin_finalization(self, checkpoint_path, wait_fn=None)``
    (v0.7.0: ``finalize_checkpoint(self, checkpoint_path)``, `finalization_method`)
    (which renames ``tmp_step_N`` to ``step_N``, making it the checkpoint a later job resumes
    from) held back until the step's last log call (``step_finished``) is in metrics.jsonl.

    grpo_train saves a step's checkpoint before it logs that step's metrics: a job killed in
    between (Slurm's cancel, a preemption, SIGKILL) would resume after a step whose metrics
    no file holds. Held back, such a job leaves ``tmp_step_N``; the next one resumes from
    step N-1, runs step N again and logs it once (NeMo RL removes the stale tmp folder)."""
    original = _unwrapped(getattr(manager_cls, finalization_method(manager_cls)))

    def finalization(self, checkpoint_path, *args, **kwargs):
        state.pending_checkpoints.append(lambda: original(self, checkpoint_path, *args, **kwargs))

    return _mark(finalization, original)


def pin_ray_address(original: Callable) -> Callable:
    """NeMo RL's ``init_ray(...)`` that, once connected, sets ``RAY_ADDRESS`` to the Ray it
    joined (so later address-less Ray calls find that one, not "multiple instances")."""

    def init_ray(*args, **kwargs):
        import os

        import ray

        from gdpo_nemo.engines.nemo.signals import reclaim_sigterm

        result = original(*args, **kwargs)
        os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        reclaim_sigterm()  # Ray's driver took SIGTERM over; a Slurm cancel must still close the logs
        return result

    return _mark(init_ray, original)


def watch_timeout(checker_cls: type, state: HookState) -> type:
    """NeMo RL's TimeoutChecker, recording in `state.timed_out` when it asks the trainer to
    save and stop (so the run is not marked DONE)."""

    class WatchedTimeoutChecker(checker_cls):
        def check_save(self, *args, **kwargs):
            due = super().check_save(*args, **kwargs)
            if due:
                state.timed_out = True
            return due

    setattr(WatchedTimeoutChecker, _MARK, checker_cls)
    return WatchedTimeoutChecker


def register_environments() -> None:
    """NeMo RL's env registry and actor-environment registry entries for our envs."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES
    from nemo_rl.environments.utils import ENV_REGISTRY, register_env

    for name in ENV_NAMES.values():
        if name not in ENV_REGISTRY:
            register_env(name, ACTOR_FQN)
        elif ENV_REGISTRY[name].get("actor_class_fqn") != ACTOR_FQN:
            raise UserError(f"NeMo RL env {name!r} is registered to {ENV_REGISTRY[name]!r}, not gdpo_nemo's actor")
    ACTOR_ENVIRONMENT_REGISTRY[ACTOR_FQN] = PY_EXECUTABLES.SYSTEM


def register_processors() -> None:
    """NeMo RL's processor registry entries gdpo_<task> -> our processors."""
    from nemo_rl.data.processors import PROCESSOR_REGISTRY, register_processor

    for name, fn in PROCESSORS.items():
        if name not in PROCESSOR_REGISTRY:
            register_processor(name, fn)


def install_hooks(config: Mapping, *, writer: StepMetricsWriter | None = None) -> HookState:
    """Put the wrappers in place in NeMo RL's modules (idempotent: wrapping twice re-wraps
    the original). Returns the shared state."""
    import nemo_rl.algorithms.grpo as grpo_module
    import nemo_rl.distributed.virtual_cluster as cluster_module
    import nemo_rl.utils.logger as logger_module

    from gdpo_nemo.engines.nemo.interfaces import check_interfaces

    check_interfaces()  # before anything is replaced: a hook that does not fit says so in one line
    gdpo = config["gdpo"]
    state = HookState(settings=EstimatorSettings.from_gdpo(gdpo, nemo_engine=True), writer=writer)

    original_create = _unwrapped(grpo_module._create_advantage_estimator)
    grpo_module._create_advantage_estimator = _mark(
        lambda master_config: create_estimator(master_config, original_create, state.settings), original_create
    )
    for name in ("run_multi_turn_rollout", "run_async_multi_turn_rollout"):
        if hasattr(grpo_module, name):
            setattr(grpo_module, name, wrap_rollout(_unwrapped(getattr(grpo_module, name)), state))
    grpo_module.validate = wrap_validate(_unwrapped(grpo_module.validate), state)
    grpo_module.dynamic_sampling = wrap_dynamic_sampling(_unwrapped(grpo_module.dynamic_sampling), state)
    grpo_module.TimeoutChecker = watch_timeout(_unwrapped(grpo_module.TimeoutChecker), state)
    if writer is not None:
        import nemo_rl.utils.checkpoint as checkpoint_module

        logger_cls = logger_module.Logger
        logger_cls.log_metrics = wrap_log_metrics(_unwrapped(logger_cls.log_metrics), writer, state)
        manager_cls = checkpoint_module.CheckpointManager
        setattr(manager_cls, finalization_method(manager_cls), defer_finalization(manager_cls, state))
    cluster_module.init_ray = pin_ray_address(_unwrapped(cluster_module.init_ray))
    original_next_dir = _unwrapped(logger_module.get_next_experiment_dir)
    logger_module.get_next_experiment_dir = _mark(lambda base_log_dir: str(base_log_dir), original_next_dir)
    return state


def register(config: Mapping, *, writer: StepMetricsWriter | None = None) -> HookState:
    """Everything NeMo RL needs to run a gdpo_nemo config (see the module docstring)."""
    register_environments()
    register_processors()
    return install_hooks(config, writer=writer)
