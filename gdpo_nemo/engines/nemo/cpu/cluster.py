"""Ray and NeMo RL's virtual cluster for the CPU path.

`start_ray` starts a private local Ray (its own temp dir, never an existing instance of
the machine) and sets ``RAY_ADDRESS`` to it: NeMo RL's memory tracker calls Ray's
``memory_summary()`` without an address (nemo_rl/utils/memory_tracker.py at the pin), which
raises "Found multiple active Ray instances" when another Ray runs on the machine.
`policy_cluster` is NeMo RL's ``RayVirtualCluster`` with ``use_gpus=False``: placement
bundles of CPU only, workers started with no GPU (``grpo.setup()`` hard-codes
``use_gpus=True``, which is why the CPU path builds its pieces itself).
`workers_started_by_the_driver` starts the policy worker from this driver instead of from
NeMo RL's ``IsolatedWorkerInitializer`` actor (one Python process and its imports fewer).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from gdpo_nemo.layout import REPO_ROOT

__all__ = ["SEED_ENV", "THREADS_ENV", "policy_cluster", "register_worker", "start_ray", "stop_ray",
           "workers_started_by_the_driver"]

# What the CPU policy worker reads from its environment: set in the driver's environment,
# which NeMo RL's RayWorkerGroup passes on to the workers it starts.
SEED_ENV = "GDPO_NEMO_CPU_SEED"
THREADS_ENV = "GDPO_NEMO_CPU_THREADS"
_OWN_TMP: list[str] = []
# Ray's head waits a fixed 30 s for its raylet to register (ray/_private/node.py), then raises
# this; on a busy machine (several jobs starting Ray at once on two cores) it did, and a Slurm
# job of the journey test failed before its first step. `start_ray` tries again.
STARTUP_TIMEOUT = "The current node timed out during startup"
START_ATTEMPTS = 3


def _code_paths() -> list[str]:
    """The folders our package and NeMo RL import from, for the workers' PYTHONPATH."""
    import nemo_rl

    paths = [str(REPO_ROOT), str(Path(nemo_rl.__file__).resolve().parents[1])]
    return list(dict.fromkeys(paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


def start_ray(*, num_cpus: int | None = None, log_to_driver: bool = False) -> str:
    """Start a private local Ray for this process (no GPUs, `num_cpus` logical CPUs, by
    default the machine's count and at least 4: NeMo RL's actors ask for one each).
    Returns its address, also put in ``RAY_ADDRESS``."""
    import ray

    if ray.is_initialized():
        raise RuntimeError("Ray is already initialized in this process; the CPU path starts its own")
    os.environ.pop("RAY_ADDRESS", None)  # never attach to a cluster the shell points at
    if not os.environ.get("RAY_TMPDIR"):
        # Short (socket paths are limited) and ours alone: another Ray's temp dir is never shared.
        temp = tempfile.mkdtemp(prefix="gnr", dir="/tmp")
        _OWN_TMP.append(temp)
        os.environ["RAY_TMPDIR"] = temp
    env = {"PYTHONPATH": os.pathsep.join(_code_paths())}
    for name in ("GDPO_NEMO_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(
                num_cpus=num_cpus or max(4, os.cpu_count() or 1),
                num_gpus=0,
                include_dashboard=False,
                log_to_driver=log_to_driver,
                runtime_env={"env_vars": env},
                # No idle workers started ahead for this driver: NeMo RL's actors each ask
                # for a runtime environment of their own, so none would take them (four
                # interpreters importing Ray for nothing: ~4 s of CPU per run).
                _system_config={"prestart_worker_first_driver": False},
            )
            break
        except Exception as err:  # Ray raises a bare Exception for this one
            if STARTUP_TIMEOUT not in str(err) or attempt == START_ATTEMPTS:
                raise
            ray.shutdown()
            print(f"Ray's node did not register within Ray's fixed 30 s (a busy machine); starting it again"
                  f" ({attempt + 1} of {START_ATTEMPTS})", file=sys.stderr, flush=True)
    address = ray.get_runtime_context().gcs_address
    os.environ["RAY_ADDRESS"] = address
    return address


def stop_ray() -> None:
    """Shut Ray down and remove the temp dir `start_ray` made (if it made one). Ray's implicit
    start is then turned off for this process (`start_ray` starts it explicitly): NeMo RL's
    Policy.__del__ calls a worker's remote method, and at the exit of a run that failed, that
    call started a new local Ray (Ray's auto-init) whose start hung the Slurm job for good."""
    import shutil

    import ray
    from ray._private import auto_init_hook

    ray.shutdown()
    auto_init_hook.enable_auto_connect = False
    os.environ.pop("RAY_ADDRESS", None)
    while _OWN_TMP:
        temp = _OWN_TMP.pop()
        shutil.rmtree(temp, ignore_errors=True)
        if os.environ.get("RAY_TMPDIR") == temp:
            del os.environ["RAY_TMPDIR"]


def register_worker(mode: str | None = None) -> str:
    """Our CPU policy worker in NeMo RL's actor-environment registry, run by this very
    Python (NeMo RL maps its own workers to ``uv run`` environments); returns its FQN.
    `mode` (`driver_worker.worker_mode`: default ``$GDPO_NEMO_CPU_WORKER`` or "driver"):
    "driver" makes the worker in this process (`driver_worker`), "actor" in a Ray actor's."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    from gdpo_nemo.engines.nemo.cpu.driver_worker import worker_mode

    name = "CpuPolicyWorkerInDriver" if worker_mode(mode) == "driver" else "CpuPolicyWorker"
    fqn = f"gdpo_nemo.engines.nemo.cpu.worker.{name}"
    ACTOR_ENVIRONMENT_REGISTRY[fqn] = PY_EXECUTABLES.SYSTEM
    return fqn


def policy_cluster(name: str = "gdpo_cpu_policy"):
    """NeMo RL's RayVirtualCluster with one CPU bundle (one policy worker, no GPU)."""
    from nemo_rl.distributed.virtual_cluster import RayVirtualCluster

    return RayVirtualCluster(
        bundle_ct_per_node_list=[1], use_gpus=False, num_gpus_per_node=1, max_colocated_worker_groups=1, name=name
    )


# The NeMo RL versions whose workers the driver starts: the pin (0.6.0 development) and the
# v0.7.0 release. The release once kept its initializer actor: two of its runs failed at the
# memory tracker's GCS query (2026-11-29), which was Ray's memory summary timing out on a loaded
# machine at either version (train._tolerant_memory_tracker, since 0061f5a), not the driver start.
DRIVER_START_VERSIONS = ("0.6.", "0.7.")


class _InitializerInDriver:
    """One of NeMo RL's ``IsolatedWorkerInitializer``s, run in the driver: `create_worker` is
    called as Ray would call the actor's method (``create_worker.remote(...)``) and answers
    with what the actor's method returns (the worker's handle), as an object ref."""

    def __init__(self, initializer):
        self._initializer = initializer
        self.create_worker = self  # NeMo RL calls ``initializer.create_worker.remote(...)``

    def remote(self, *args, **kwargs):
        import ray

        return ray.put(self._initializer.create_worker(*args, **kwargs))


class _InitializerClassInDriver:
    """Stands for the ``IsolatedWorkerInitializer`` actor class: ``.options(...)`` (the
    initializer's own CPUs and runtime env: nothing to start here) and ``.remote(fqn, *args,
    **kwargs)`` make the plain class's object in this process."""

    def __init__(self, plain_class):
        self._plain_class = plain_class

    def options(self, **_initializer_options):
        return self

    def remote(self, *args, **kwargs) -> _InitializerInDriver:
        return _InitializerInDriver(self._plain_class(*args, **kwargs))


@contextlib.contextmanager
def workers_started_by_the_driver():
    """Within the block, NeMo RL's RayWorkerBuilder starts each worker from this driver.

    NeMo RL starts a worker through an ``IsolatedWorkerInitializer``: a Ray actor of its own
    that imports the worker's module only to read its options and create it, so that a worker
    in another Python environment (on a cluster, a uv venv per worker kind) is made from that
    environment. On the CPU path the worker runs this very Python (`register_worker`), and a
    driver that has imported grpo_train holds everything the worker's module imports (importing
    it here costs about 0.1 s of CPU, in its own process about 20 s). So the initializer's own
    method runs here, unchanged, and creates the worker: the driver then owns the worker (what
    the initializer's life was for), and NeMo RL's shutdown kills it as before. A NeMo RL
    without the initializer class, or not of DRIVER_START_VERSIONS, is left as it is.
    `forget_driver_initializers` removes these from a worker group's pool afterwards (its
    shutdown would ``ray.kill`` them)."""
    import nemo_rl
    from nemo_rl.distributed.worker_groups import RayWorkerBuilder

    actor_class = getattr(RayWorkerBuilder, "IsolatedWorkerInitializer", None)
    plain_class = getattr(actor_class, "__ray_actor_class__", None)
    if plain_class is None or not str(getattr(nemo_rl, "__version__", "")).startswith(DRIVER_START_VERSIONS):
        yield
        return
    RayWorkerBuilder.IsolatedWorkerInitializer = _InitializerClassInDriver(plain_class)
    try:
        yield
    finally:
        RayWorkerBuilder.IsolatedWorkerInitializer = actor_class


def forget_driver_initializers(worker_group) -> int:
    """Drop the driver's stand-ins from `worker_group`'s pool of initializers (NeMo RL kills
    each pooled initializer actor at shutdown and would print an error for each of ours).
    Returns how many were dropped: the number of workers' initializers run in the driver."""
    pool = getattr(worker_group, "_initializer_pool", None) or {}
    ours = [key for key, initializer in pool.items() if isinstance(initializer, _InitializerInDriver)]
    for key in ours:
        del pool[key]
    return len(ours)
