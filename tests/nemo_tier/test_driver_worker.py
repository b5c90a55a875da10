"""The CPU path's policy worker made in the driver (gdpo_nemo.engines.nemo.cpu.driver_worker),
held to what the same class gives as a real Ray actor: its environment, its random draws,
its thread count, copies of its arguments; and the driver's own state left as it was.

The whole path (NeMo RL's Policy, worker group and grpo_train with the worker in the driver)
runs in test_grpo_train_cpu.py, whose killed and resumed job (worker in the driver) must
give the numbers of the uninterrupted run (worker in a Ray actor).
"""

from __future__ import annotations

import os

import pytest

WORKER_ENV = {"RANK": "3", "WORLD_SIZE": "1", "GDPO_NEMO_TEST_ONLY": "worker's"}


def _probe_class():
    """A worker class defined here (Ray pickles it by value for its actor)."""

    class Probe:
        def __init__(self, payload):
            import torch

            torch.set_num_threads(1)  # as CpuPolicyWorkerImpl's start does
            payload["touched"] = True  # an actor's argument is a copy: the caller's is untouched
            self.started = {"env": {k: os.environ.get(k) for k in WORKER_ENV}, "draw": torch.rand(3).tolist(),
                            "threads": torch.get_num_threads()}

        def start_seen(self):
            return self.started

        def call(self, data, value):
            import random

            import numpy
            import torch

            data.append("worker")
            return {"env": {k: os.environ.get(k) for k in WORKER_ENV}, "draw": torch.rand(2).tolist(),
                    "threads": torch.get_num_threads(), "data": data, "value": value,
                    "python_state_is_driver": random.getstate() == DRIVER_RANDOM[0],
                    "numpy_state_is_driver": numpy.random.get_state()[1].tolist() == DRIVER_RANDOM[1]}

        def fails(self):
            raise KeyError("the worker's own error")

        def shutdown(self):
            self.started["shut down"] = True
            return True

    return Probe


DRIVER_RANDOM: list = [None, None]  # the driver's Python and numpy states, as the worker sees them (never, if isolated)


def _both(local_ray):
    """(the Ray actor, the in-driver worker) of the same class, options and payload."""
    from gdpo_nemo.engines.nemo.cpu.driver_worker import ActorClassInDriver

    probe = _probe_class()
    options = {"runtime_env": {"env_vars": dict(WORKER_ENV)}, "num_cpus": 1}
    payload = {"touched": False}
    actor = local_ray.remote(probe).options(**options).remote(payload)
    here = ActorClassInDriver(probe).options(**options).remote(payload)
    assert payload == {"touched": False}
    return actor, here


def test_a_worker_made_in_the_driver_sees_what_the_same_ray_actor_sees(local_ray):
    if local_ray is None:
        return
    import random

    import numpy
    import torch

    from gdpo_nemo.engines.nemo.cpu import driver_worker

    os.environ.pop("RANK", None)
    threads = torch.get_num_threads()
    torch.manual_seed(11)
    random.seed(5)
    numpy.random.seed(5)
    DRIVER_RANDOM[:] = [random.getstate(), numpy.random.get_state()[1].tolist()]
    actor, here = _both(local_ray)
    try:
        # torch 2.13 seeds a process's generator from the OS at import: a worker's draws are
        # its own, never the driver's stream (seeded above), in an actor and here alike
        seeded = torch.rand(9, generator=torch.Generator().manual_seed(11)).tolist()
        starts = [ray_get(local_ray, worker.start_seen) for worker in (actor, here)]
        for start in starts:
            assert (start["env"], start["threads"]) == (WORKER_ENV, 1)
            assert len(start["draw"]) == 3 and not set(start["draw"]) & set(seeded)
        data, value = ["driver's"], local_ray.put(41)
        from_actor = ray_get(local_ray, actor.call, data, value)
        from_here = ray_get(local_ray, here.call, data, value)
        for result in (from_actor, from_here):
            assert not set(result.pop("draw")) & set(seeded)
        assert from_here == from_actor
        assert from_here["value"] == 41 and from_here["data"] == ["driver's", "worker"]  # the ref resolved, a copy changed
        assert not from_here["python_state_is_driver"] and not from_here["numpy_state_is_driver"]
        # the driver's own state, as if the worker had run elsewhere
        assert data == ["driver's"]
        assert "RANK" not in os.environ and "GDPO_NEMO_TEST_ONLY" not in os.environ
        assert torch.get_num_threads() == threads
        expected = torch.Generator().manual_seed(11)
        assert torch.rand(4).tolist() == torch.rand(4, generator=expected).tolist()
        assert random.getstate() == DRIVER_RANDOM[0]
        assert numpy.random.get_state()[1].tolist() == DRIVER_RANDOM[1]
        with pytest.raises(KeyError, match="the worker's own error"):
            here.fails.remote()
        with pytest.raises(AttributeError):
            here.no_such_method  # noqa: B018 - an actor handle refuses an unknown method too
    finally:
        local_ray.kill(actor)
        driver_worker.release_all()
    assert driver_worker.live_workers() == []


def ray_get(ray, method, *args):
    return ray.get(method.remote(*args))


def test_the_handle_goes_through_ray_s_object_store_as_itself_and_is_stale_once_released(local_ray):
    """NeMo RL's builder hands the worker back through ``ray.put``/``ray.get`` (our
    initializer in the driver): the handle comes back as the same worker, never its model."""
    if local_ray is None:
        return
    from gdpo_nemo.engines.nemo.cpu import driver_worker

    actor, here = _both(local_ray)
    local_ray.kill(actor)
    again = local_ray.get(local_ray.put(here))
    assert again is here and driver_worker.live_workers() == [here]
    assert driver_worker.release_all() == 1
    with pytest.raises(RuntimeError, match="released"):
        here.start_seen.remote()
    with pytest.raises(local_ray.exceptions.RaySystemError, match="released; its handle is stale"):
        local_ray.get(local_ray.put(here))  # Ray's wrapping of the error its unpickling raised


def test_release_all_destroys_the_process_group_the_worker_s_start_made(local_ray):
    if local_ray is None:
        return
    import torch.distributed as dist

    from gdpo_nemo.engines.nemo.cpu import driver_worker

    class Grouped:
        def __init__(self):
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    driver_worker.ActorClassInDriver(Grouped).remote()
    assert dist.is_initialized()
    assert driver_worker.release_all() == 1
    assert not dist.is_initialized()
    # a start that fails leaves no live worker behind
    with pytest.raises(ZeroDivisionError):
        driver_worker.ActorClassInDriver(type("Broken", (), {"__init__": lambda self: 1 / 0})).remote()
    assert driver_worker.live_workers() == []


def test_nemo_rl_s_worker_group_shutdown_ends_in_driver_workers_through_their_cleanup(local_ray, capsys):
    """NeMo RL's RayWorkerGroup.shutdown calls the cleanup method, then ``ray.kill``s each
    worker, which refuses ours; `shut_down_group` does the cleanup and the release first, and
    NeMo RL's own shutdown then has nothing left to kill."""
    if local_ray is None:
        return
    import numpy
    from nemo_rl.distributed.named_sharding import NamedSharding
    from nemo_rl.distributed.worker_groups import RayWorkerGroup

    from gdpo_nemo.engines.nemo.cpu import driver_worker

    def group():
        """NeMo RL's worker group holding one in-driver worker, as the CPU path's Policy has it
        (its own __init__ would start the worker itself: the group is filled in instead)."""
        actor, here = _both(local_ray)
        local_ray.kill(actor)
        made = RayWorkerGroup.__new__(RayWorkerGroup)
        made._workers, made._worker_metadata = [here], [{"global_rank": 0}]
        made.sharding_annotations = NamedSharding(layout=numpy.arange(1).reshape(1, 1), names=["data_parallel", "tensor_parallel"])
        return here, made

    here, plain = group()
    assert RayWorkerGroup.shutdown(plain, cleanup_method="shutdown") is False  # NeMo RL's alone: ray.kill refuses
    assert "Error killing worker" in capsys.readouterr().out
    driver_worker.release_all()

    here, ours = group()
    seen = here._object.started
    assert driver_worker.shut_down_group(ours) == 1
    assert seen["shut down"] is True and driver_worker.live_workers() == []
    assert ours.workers == [] and ours.worker_metadata == []
    assert RayWorkerGroup.shutdown(ours, cleanup_method="shutdown") is True
    assert "Error" not in capsys.readouterr().out


def test_the_worker_mode_comes_from_the_call_the_environment_or_defaults_to_the_driver(monkeypatch):
    from gdpo_nemo.engines.nemo.cpu.driver_worker import WORKER_ENV as ENV, worker_mode
    from gdpo_nemo.errors import UserError

    monkeypatch.delenv(ENV, raising=False)
    assert worker_mode() == "driver"
    monkeypatch.setenv(ENV, "actor")
    assert worker_mode() == "actor" and worker_mode("driver") == "driver"
    monkeypatch.setenv(ENV, "thread")
    with pytest.raises(UserError, match=r"GDPO_NEMO_CPU_WORKER='thread': expected one of driver, actor"):
        worker_mode()
