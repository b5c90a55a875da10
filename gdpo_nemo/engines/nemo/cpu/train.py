"""NeMo RL's own ``grpo_train`` on a CPU: the pieces ``grpo.setup()`` would build, built here.

``grpo.setup()`` cannot run without GPUs (it asks Ray for GPU bundles and knows only the
vLLM / SGLang / TRT-LLM / Dynamo / Megatron generation backends), so `train_on_cpu` builds
what it builds, the same way, from NeMo RL's own classes: seed, tokenizer and generation
config, data and environments (``setup_response_data``, our TaskDataset, processors and
environment actors), its Logger and CheckpointManager (resume: training info, dataloader
state, weights and optimizer from the latest checkpoint), its ClippedPGLossFn, its
``Policy`` with its v2 DTensor worker (`worker.CpuPolicyWorker`, on a CPU
`cluster.policy_cluster`), and `generation.PolicyGeneration` in vLLM's place. Then NeMo
RL's ``grpo_train`` runs unchanged, with our plugin's hooks installed as on a cluster.

Order of shutdown matters: the policy's workers go before Ray (``Policy.__del__`` after
``ray.shutdown()`` starts a new Ray and hangs).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, TextIO

from gdpo_nemo.runs import lifecycle, rundir

# What generates on the CPU path, whatever policy.generation.backend says (vLLM needs a GPU).
CPU_GENERATION = "policy.generate (NeMo RL's DTensor policy on the CPU: gdpo_nemo.engines.nemo.cpu.generation)"

__all__ = ["CpuRun", "train_on_cpu"]


@dataclass
class CpuRun:
    """What a CPU run left: its run dir, NeMo RL's generate calls, seconds per phase
    (``start``: Ray, data, environments and policy workers; ``train``: grpo_train;
    ``stop``: shutting workers, environments and an own Ray down), the policy weights' |w|
    sum before and after, whether a timeout stopped it, the device patches its worker
    needed, how many workers NeMo RL's initializer started from this driver
    (`cluster.workers_started_by_the_driver`), and where the policy worker ran: "driver"
    (in this process, `driver_worker`) or "actor" (a Ray actor's process of its own)."""

    run_dir: Path
    generate_calls: int = 0
    seconds: dict = field(default_factory=dict)
    weights_before: float | None = None
    weights_after: float | None = None
    timed_out: bool = False
    device_patches: list = field(default_factory=list)
    initializers_in_driver: int = 0
    worker: str = "driver"


def train_on_cpu(config: Mapping, *, threads: int = 1, out: TextIO | None = None, worker: str | None = None) -> CpuRun:
    """Run NeMo RL's grpo_train for `config` (a validated ``gdpo.engine: nemo`` run config,
    already sized for a CPU: see `gdpo_nemo.engines.nemo.cpu.smoke`) on this machine.

    The run dir is ``logger.log_dir``; a run dir with checkpoints resumes from the latest,
    as on a cluster. `threads`: torch threads of the policy worker (1 keeps results
    independent of the machine). `out`: where one line per step goes (None: nowhere).
    `worker`: "driver" (the policy worker made in this process: no Python of its own to
    start and import NeMo RL into) or "actor" (NeMo RL's Ray actor); default
    ``$GDPO_NEMO_CPU_WORKER``, else "driver" (`driver_worker.worker_mode`).
    A Ray already started in this process is used and left running; otherwise a private
    one is started and stopped.
    """
    entered = time.perf_counter()
    import ray

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.algorithms.loss import ClippedPGLossFn
    from nemo_rl.algorithms.utils import get_tokenizer, set_seed
    from nemo_rl.data.utils import setup_response_data
    from nemo_rl.models.generation import configure_generation_config
    from nemo_rl.models.policy.lm_policy import Policy
    from nemo_rl.utils.checkpoint import CheckpointManager
    from nemo_rl.utils.logger import Logger

    from gdpo_nemo.engines.nemo import plugin
    from gdpo_nemo.engines.nemo.cpu import cluster, driver_worker
    from gdpo_nemo.engines.nemo.cpu.generation import PolicyGeneration
    from gdpo_nemo.engines.nemo.cpu.report import AdvantageRecorder
    from gdpo_nemo.engines.nemo.metrics import StepMetricsWriter, latest_checkpoint_step
    from gdpo_nemo.engines.nemo.run import end_job, prepare_run_dir
    from gdpo_nemo.engines.nemo.signals import reclaim_sigterm

    started = time.perf_counter()
    digest = lifecycle.config_digest(config)  # before anything below touches it: what a resubmission compares
    config = dict(config)
    imports = started - entered
    run_dir = prepare_run_dir(config, generation_backend=CPU_GENERATION)
    resume_step = latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"])
    result = CpuRun(run_dir=run_dir, worker=driver_worker.worker_mode(worker))
    writer = StepMetricsWriter(run_dir, resume_step=resume_step)
    state = plugin.register(config, writer=writer)
    AdvantageRecorder(run_dir, first_step=(resume_step or 0) + 1, out=out).install()

    master = grpo_module.MasterConfig(**config)
    seed = int(_field(master.grpo, "seed"))
    set_seed(seed)
    tokenizer = get_tokenizer(master.policy["tokenizer"])
    master.policy["generation"] = configure_generation_config(master.policy["generation"], tokenizer)

    own_ray = not ray.is_initialized()
    os.environ[cluster.SEED_ENV], os.environ[cluster.THREADS_ENV] = str(seed), str(int(threads))
    if own_ray:
        cluster.start_ray()
    else:  # NeMo RL's memory tracker asks Ray for "the" address: name this one
        os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    reclaim_sigterm()  # Ray's driver took SIGTERM over (gdpo_nemo.engines.nemo.signals.exit_on_sigterm)
    policy = virtual_cluster = None
    completed = False
    task_to_env, val_task_to_env = {}, {}
    try:
        dataset, val_dataset, task_to_env, val_task_to_env = setup_response_data(tokenizer, master.data, master.env)
        logger = Logger(master.logger)
        logger.log_hyperparams(master.model_dump())
        checkpointer = CheckpointManager(master.checkpointing)
        last_checkpoint = checkpointer.get_latest_checkpoint_path()
        save_state = _save_state(grpo_module, checkpointer.load_training_info(last_checkpoint))

        loader, val_loader = _loaders(master, dataset, val_dataset, last_checkpoint)
        loss_fn = ClippedPGLossFn(master.loss_fn)
        grpo = master.grpo

        init_reference = _field(master.loss_fn, "reference_policy_kl_penalty") > 0
        if not init_reference:  # as grpo.setup() does
            _set_field(grpo, "skip_reference_policy_logprobs_calculation", True)
        weights_path, optimizer_path = checkpointer.get_resume_paths(last_checkpoint)
        virtual_cluster = cluster.policy_cluster()
        with cluster.workers_started_by_the_driver():
            policy = Policy(
                cluster=virtual_cluster, config=master.policy, tokenizer=tokenizer,
                worker_extension_cls_fqn=cluster.register_worker(result.worker), weights_path=weights_path,
                optimizer_path=optimizer_path, init_optimizer=True, init_reference_model=init_reference,
            )
        result.initializers_in_driver = cluster.forget_driver_initializers(policy.worker_group)
        result.device_patches = ray.get(policy.worker_group.run_all_workers_single_data("device_patches"))[0]
        result.weights_before = _weights(policy)
        generation = PolicyGeneration(policy)
        _no_refit_for_shared_weights(grpo_module)
        _tolerant_memory_tracker()
        result.seconds["imports"] = imports
        result.seconds["start"] = time.perf_counter() - started

        trained = time.perf_counter()
        # main's CheckpointManager is a context manager (it waits for a background finalization
        # on exit); the release's finalizes in the call itself
        with checkpointer if hasattr(checkpointer, "__enter__") else contextlib.nullcontext():
            grpo_module.grpo_train(policy, generation, loader, val_loader, tokenizer, loss_fn, task_to_env,
                                   val_task_to_env, logger, checkpointer, save_state, master)
        result.seconds["train"] = time.perf_counter() - trained
        result.generate_calls = generation.calls
        result.weights_after = _weights(policy)
        result.timed_out = state.timed_out
        completed = True
    finally:
        stopping = time.perf_counter()
        end_job(writer, run_dir, completed, config_digest=digest,
                checkpoint=latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"]))
        _shut_down(policy, virtual_cluster, (task_to_env, val_task_to_env), own_ray)
        result.seconds["stop"] = time.perf_counter() - stopping
        sys.stdout.flush()
    if not result.timed_out:
        rundir.mark_done(run_dir, "done (NeMo RL grpo_train on the CPU)\n")
    return result


# How long each step of the shutdown may take before it is left behind: a run whose Ray
# connection broke hung in RayVirtualCluster.shutdown (remove_placement_group waits for GCS)
# and held its Slurm job until cancelled.
SHUTDOWN_STEP_S = 60.0


def _shut_down(policy, virtual_cluster, environments: tuple, own_ray: bool) -> None:
    """Stop what train_on_cpu started, whichever of it exists: the policy's workers, the
    virtual cluster's placement groups (a later run in this Ray reuses their name), the
    environment actors, and the Ray it started itself. Each step but the last gets
    SHUTDOWN_STEP_S; one that does not end in time is left (said on stderr), and Ray's own
    shutdown, which ends the processes it started, still comes."""
    import nemo_rl.algorithms.grpo as grpo_module

    from gdpo_nemo.engines.nemo.cpu import cluster, driver_worker

    if policy is not None:
        _bounded("the policy's workers", lambda: driver_worker.shut_down_group(policy.worker_group))
        _bounded("the policy's workers", policy.shutdown)
    driver_worker.release_all()  # also after a worker that failed in its start
    if virtual_cluster is not None:
        _bounded("the placement groups", virtual_cluster.shutdown)
    if hasattr(grpo_module, "shutdown_environments"):
        _bounded("the environment actors", lambda: grpo_module.shutdown_environments(*environments))
    else:  # the v0.7.0 release has no such helper: each environment actor once, killed if it hangs
        import ray

        actors = {id(env): env for mapping in environments for env in (mapping or {}).values()}
        for env in actors.values():
            try:
                ray.get(env.shutdown.remote(), timeout=10)
            except Exception:  # a stuck or dead actor: make sure it is gone
                _bounded("an environment actor", lambda env=env: ray.kill(env))
    if own_ray:
        cluster.stop_ray()


def _bounded(what: str, step, seconds: float | None = None) -> None:
    """Run `step` in a thread of its own for at most `seconds` (SHUTDOWN_STEP_S). What it
    raises is raised here; a step still running then is left behind (a daemon thread)."""
    import threading

    raised: list[BaseException] = []

    def run():
        try:
            step()
        except BaseException as err:  # handed to the caller
            raised.append(err)

    thread = threading.Thread(target=run, name=f"shutdown: {what}", daemon=True)
    thread.start()
    limit = SHUTDOWN_STEP_S if seconds is None else seconds
    thread.join(limit)
    if thread.is_alive():
        print(f"gdpo-nemo: stopping {what} did not end within {limit:g} s"
              " (Ray unreachable?); going on without it", file=sys.stderr, flush=True)
        return
    if raised:
        raise raised[0]


def _tolerant_memory_tracker() -> None:
    """NeMo RL's memory tracker prints Ray's memory summary at every stage of every step, and
    each summary opens a new connection to Ray's GCS; on a loaded machine one such connect
    timed out ("Failed to connect to GCS") and ended the run after its first step. On the CPU
    path the summary is a diagnostic: asked again once, then given as unavailable. Idempotent."""
    from nemo_rl.utils import memory_tracker

    summary = memory_tracker.memory_summary
    if getattr(summary, "_gdpo_nemo_tolerant", False):
        return

    def memory_summary(*args, **kwargs):
        import ray

        try:
            return summary(*args, **kwargs)
        except ray.exceptions.RaySystemError:
            time.sleep(1.0)
        try:
            return summary(*args, **kwargs)
        except ray.exceptions.RaySystemError as err:
            return f"(Ray's memory summary unavailable: {str(err).splitlines()[0]})"

    memory_summary._gdpo_nemo_tolerant = True
    memory_tracker.memory_summary = memory_summary


def _no_refit_for_shared_weights(grpo_module) -> None:
    """The v0.7.0 release refits the generation from the policy before every rollout
    (``refit_policy_generation``: free GPU memory from NVML, weights over CUDA IPC); main
    asks ``policy_generation.weight_synchronizer`` instead, which `SharedWeights` answers. A
    `PolicyGeneration` generates with the policy's own weights, so its refit moves nothing: a
    no-op for it, the release's own function for any other generation. Idempotent."""
    original = getattr(grpo_module, "refit_policy_generation", None)
    if original is None or getattr(original, "_gdpo_nemo_shared_weights", False):
        return

    from gdpo_nemo.engines.nemo.cpu.generation import PolicyGeneration

    def refit_policy_generation(policy, policy_generation, *args, **kwargs):
        if isinstance(policy_generation, PolicyGeneration):
            return None
        return original(policy, policy_generation, *args, **kwargs)

    refit_policy_generation._gdpo_nemo_shared_weights = True
    grpo_module.refit_policy_generation = refit_policy_generation


def _save_state(grpo_module, loaded):
    """The GRPO save state to resume from, as the version's own setup builds it: main's
    ``_get_grpo_save_state`` (defaults filled in), the release's loaded state or its default."""
    if hasattr(grpo_module, "_get_grpo_save_state"):
        return grpo_module._get_grpo_save_state(loaded)
    return loaded if loaded is not None else grpo_module._default_grpo_save_state()


def _field(section, key: str):
    """A key of a MasterConfig section: an attribute of main's pydantic models, an item of the
    v0.7.0 release's TypedDicts (its GRPOConfig and ClippedPGLossConfig)."""
    return section[key] if isinstance(section, Mapping) else getattr(section, key)


def _set_field(section, key: str, value) -> None:
    if isinstance(section, Mapping):
        section[key] = value
    else:
        setattr(section, key, value)


def _loaders(master, dataset, val_dataset, last_checkpoint):
    """(train loader, validation loader or None) as grpo.setup() makes them: DAPO's batch
    multiplier on the prompts per batch, the loader state of the checkpoint resumed from."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.utils import load_dataloader_state

    grpo = master.grpo
    prompts_per_batch = _field(grpo, "num_prompts_per_step")
    if _field(grpo, "use_dynamic_sampling"):
        prompts_per_batch = int(prompts_per_batch * _field(grpo, "batch_multiplier"))
    workers = master.data["num_workers"]
    if last_checkpoint is not None:
        workers = saved_loader_workers(last_checkpoint, workers)
    loader = StatefulDataLoader(dataset, batch_size=prompts_per_batch, shuffle=master.data["shuffle"],
                                collate_fn=rl_collate_fn, drop_last=True, num_workers=workers)
    if last_checkpoint is not None:
        load_dataloader_state(loader, last_checkpoint, master.data)
    val_loader = None
    if _field(grpo, "val_period") > 0 or _field(grpo, "val_at_start") or _field(grpo, "val_at_end"):
        val_loader = StatefulDataLoader(val_dataset, batch_size=_field(grpo, "val_batch_size"), shuffle=False,
                                        collate_fn=rl_collate_fn, num_workers=workers)
    return loader, val_loader


def saved_loader_workers(checkpoint, configured: int) -> int:
    """How many loader workers the run resumed from had: torchdata's state of a loader with
    workers cannot be loaded into one without (nor the reverse), and the two draw the shuffle
    differently; a run resumes as it started (a CPU-path run checkpointed before the path
    read its batches in the driver, `data.num_workers` 0, keeps its worker). `configured`
    when the checkpoint holds no loader state."""
    import torch

    path = Path(checkpoint) / "train_dataloader.pt"
    if not path.is_file():
        return configured
    state = torch.load(path)
    snapshot = state.get("_snapshot") if isinstance(state, dict) else None
    if isinstance(snapshot, dict):
        return len(snapshot.get("_worker_snapshots") or {}) or configured
    return 0 if isinstance(state, dict) and "_num_yielded" in state else configured


def _weights(policy) -> float:
    import ray

    return float(ray.get(policy.worker_group.run_all_workers_single_data("weights_checksum"))[0])
