"""The CPU path's one policy worker, run in the driver's process behind an actor's interface.

NeMo RL starts each policy worker as a Ray actor: a Python process of its own that imports
torch, transformers and NeMo RL's worker modules again (about 20-25 s of CPU on a 2-core
machine, as much as the rest of a short run together). On the CPU path the one worker runs
this very Python on this very machine, and the driver has imported all of it already. So
`ActorClassInDriver` stands where NeMo RL's worker builder expects the worker's Ray actor
class (``worker_class.options(**options).remote(*args, **kwargs)``) and makes the worker's
object here; what it returns, a `WorkerInDriver`, answers ``handle.method.remote(...)`` as an
actor handle does, with an object ref of what the method returned. The worker's code, NeMo
RL's worker group, its ``Policy`` and ``grpo_train`` are unchanged.

What a process of its own gave the worker, each call here gives it too:
- its environment: the ``runtime_env`` variables NeMo RL's worker group sets for it (RANK,
  WORLD_SIZE, MASTER_ADDR, ...) are in ``os.environ`` during each call, the driver's after;
- its own random state: torch's, Python's and numpy's global generators are swapped for the
  worker's around each call (seeded from the OS at its start, as a fresh process's are), so
  the driver's draws (the data loader's shuffle) are the draws it made with the worker in a
  process of its own;
- its thread count (``torch.set_num_threads`` in the worker's start) during its calls;
- copies, not shared objects: arguments go through Ray's pickling (top-level object refs
  resolved, as Ray does) and results come back as object refs.

`release_all` ends every worker made here (its ``shutdown`` method already called by NeMo
RL's worker group or not), drops its objects and destroys the default process group the
worker's start made, so that a later run in this process starts clean.

Where the real actor is wanted (one tier test keeps it: the worker's pickling through Ray),
``GDPO_NEMO_CPU_WORKER=actor`` (`WORKER_ENV`) starts NeMo RL's way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import sys
import threading

from gdpo_nemo.errors import UserError

__all__ = ["ActorClassInDriver", "WORKER_ENV", "WORKER_MODES", "WorkerInDriver", "live_workers",
           "release_all", "shut_down_group", "worker_mode"]

WORKER_ENV = "GDPO_NEMO_CPU_WORKER"
WORKER_MODES = ("driver", "actor")

_LIVE: dict[int, "WorkerInDriver"] = {}
_TOKENS = itertools.count(1)
_LOCK = threading.RLock()


def worker_mode(mode: str | None = None) -> str:
    """`mode`, else ``$GDPO_NEMO_CPU_WORKER``, else "driver"; ValueError naming the accepted
    values for anything else."""
    chosen = (mode or os.environ.get(WORKER_ENV) or "driver").strip().lower()
    if chosen not in WORKER_MODES:
        raise UserError(f"{WORKER_ENV}={chosen!r}: expected one of {', '.join(WORKER_MODES)}")
    return chosen


def live_workers() -> list["WorkerInDriver"]:
    """The workers made in this process and not yet released."""
    with _LOCK:
        return list(_LIVE.values())


def _fresh_random_state():
    """The global random state of a Python process that has just started: torch's, Python's
    and numpy's generators seeded from the OS (torch 2.13 seeds its default generator so at
    import: `torch.initial_seed()` differs from process to process)."""
    import numpy
    import torch

    generator = torch.Generator()
    generator.seed()
    return (generator.get_state(), random.Random().getstate(), numpy.random.RandomState().get_state())


def _current_random_state():
    import numpy
    import torch

    return (torch.get_rng_state(), random.getstate(), numpy.random.get_state())


def _set_random_state(state) -> None:
    import numpy
    import torch

    torch_state, python_state, numpy_state = state
    torch.set_rng_state(torch_state)
    random.setstate(python_state)
    numpy.random.set_state(numpy_state)


def _copied(value):
    """`value` as an actor receives it: a top-level object ref resolved, anything else a
    copy through Ray's pickling (nested refs stay refs, as in Ray)."""
    import ray
    from ray import cloudpickle

    if isinstance(value, ray.ObjectRef):
        return ray.get(value)
    return cloudpickle.loads(cloudpickle.dumps(value))


def _worker_by_token(token: int) -> "WorkerInDriver":
    with _LOCK:
        worker = _LIVE.get(token)
    if worker is None:
        raise RuntimeError(f"the CPU path's in-driver policy worker {token} was released; its handle is stale")
    return worker


class WorkerInDriver:
    """What `ActorClassInDriver.remote` returns: the worker object made in this process and
    its own environment, random state and thread count. ``handle.name.remote(*a, **k)``
    runs the method now and returns an object ref of its result. It pickles to a token (NeMo
    RL's builder passes it through ``ray.put``/``ray.get`` in this process), never its model."""

    def __init__(self, cls, args, kwargs, env: dict[str, str]):
        import torch

        self._token = next(_TOKENS)
        self._class_name = cls.__name__
        self._env = {str(k): str(v) for k, v in env.items()}
        self._random = _fresh_random_state()
        self._threads = torch.get_num_threads()
        self._object = None
        with _LOCK:
            _LIVE[self._token] = self
        try:
            with self._its_process(start=True):
                self._object = cls(*[_copied(a) for a in args], **{k: _copied(v) for k, v in kwargs.items()})
        except BaseException:
            with _LOCK:
                _LIVE.pop(self._token, None)
            raise

    def __reduce__(self):
        return _worker_by_token, (self._token,)

    def __repr__(self) -> str:
        state = "released" if self._object is None else "live"
        return f"<{self._class_name} in the driver, #{self._token}, {state}>"

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._object is None:
            raise RuntimeError(f"{self!r}: its {name!r} was called after it was released")
        method = getattr(self._object, name)  # AttributeError as a handle gives for an unknown method
        if not callable(method):
            raise AttributeError(f"{self._class_name}.{name} is not a method")
        return _MethodInDriver(self, name)

    @contextlib.contextmanager
    def _its_process(self, *, start: bool = False):
        """Within the block: the worker's environment, random state and thread count; the
        driver's again after it (the worker's kept for its next call)."""
        import torch

        with _LOCK:
            saved_env = {name: os.environ.get(name) for name in self._env}
            os.environ.update(self._env)
            driver_random = _current_random_state()
            driver_threads = torch.get_num_threads()
            _set_random_state(self._random)
            if not start:
                torch.set_num_threads(self._threads)
            try:
                yield
            finally:
                self._random = _current_random_state()
                if start:
                    self._threads = torch.get_num_threads()  # what the worker's start set
                _set_random_state(driver_random)
                torch.set_num_threads(driver_threads)
                for name, value in saved_env.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value

    def _call(self, name: str, args, kwargs):
        import ray

        if self._object is None:
            raise RuntimeError(f"{self!r}: its {name!r} was called after it was released")
        args = [_copied(a) for a in args]
        kwargs = {k: _copied(v) for k, v in kwargs.items()}
        with self._its_process():
            result = getattr(self._object, name)(*args, **kwargs)
        return ray.put(result)

    def release(self) -> None:
        """Drop the worker's object (its model, optimizer, reference model); idempotent."""
        with _LOCK:
            _LIVE.pop(self._token, None)
            self._object = None


class _MethodInDriver:
    def __init__(self, worker: WorkerInDriver, name: str):
        self._worker, self._name = worker, name

    def remote(self, *args, **kwargs):
        return self._worker._call(self._name, args, kwargs)

    def options(self, **_options):  # per-call actor options: nothing to place here
        return self


class ActorClassInDriver:
    """Stands for ``ray.remote(cls)`` where NeMo RL's worker builder uses it:
    ``_default_options``, ``options(**options)`` (scheduling, resources and the runtime
    environment, of which the variables are kept for the worker) and ``remote(*args,
    **kwargs)``, which makes the worker here."""

    def __init__(self, cls, default_options: dict | None = None):
        self._cls = cls
        self._default_options = dict(default_options or {})
        self._options: dict = {}

    def options(self, **options) -> "ActorClassInDriver":
        chosen = ActorClassInDriver(self._cls, self._default_options)
        chosen._options = options
        return chosen

    def remote(self, *args, **kwargs) -> WorkerInDriver:
        env = dict(((self._options.get("runtime_env") or {}).get("env_vars")) or {})
        return WorkerInDriver(self._cls, args, kwargs, env)


def release_all() -> int:
    """Release every worker made in this process, then destroy torch's default process group
    if one is left (the worker's start made it; a worker's own process would end with it).
    Returns how many workers were released."""
    workers = live_workers()
    for worker in workers:
        worker.release()
    if workers:
        import gc

        gc.collect()
    if "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return len(workers)


def shut_down_group(worker_group, cleanup_method: str = "shutdown") -> int:
    """What NeMo RL's ``RayWorkerGroup.shutdown(cleanup_method=...)`` does to an actor, done
    to the group's in-driver workers: the cleanup method called, then the worker released
    (where Ray would kill the actor's process) and dropped from the group, whose own shutdown
    then ends only real actors (``ray.kill`` of ours would fail). Returns how many."""
    workers = list(getattr(worker_group, "_workers", None) or [])
    metadata = list(getattr(worker_group, "_worker_metadata", None) or [])
    ours = [i for i, worker in enumerate(workers) if isinstance(worker, WorkerInDriver)]
    for i in ours:
        try:
            if workers[i]._object is not None:
                workers[i]._call(cleanup_method, (), {})
        finally:
            workers[i].release()
    if ours:
        worker_group._workers = [w for i, w in enumerate(workers) if i not in ours]
        if len(metadata) == len(workers):
            worker_group._worker_metadata = [m for i, m in enumerate(metadata) if i not in ours]
    return len(ours)
