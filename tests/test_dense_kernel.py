"""The fused CPU kernel of compute_advantages' dense path (gdpo_nemo.estimators.kernel).

It must give the general path's numbers (that path is held to the loop oracle and the
peers elsewhere), check the group-id layout it relies on, hand every batch it cannot do
(NaN, inf, ids that are not runs, near cancellation) to the general path, and give the
same bits on any number of threads, from several threads at once and in a forked child.
The torch form of the dense path (what runs on CUDA, or without numba) is held to it too.
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
import os
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdpo_nemo.estimators import AdvantageOptions, dense
from gdpo_nemo.estimators import kernel as dense_kernel
from gdpo_nemo.estimators import ESTIMATORS, compute_advantages
from gdpo_nemo.estimators.general import RewardOverflow

from tests.support.advantages_loop import loop_advantages
from tests.support.requirements import requires

# Skipped only where numba is not installed (and under CI=true, where it must be, failed);
# numba installed but the kernel unusable (a bug in it, say) fails the tests below.
pytestmark = requires(importlib.util.find_spec("numba") is not None, "numba (a declared dependency: pip install -e .)")

DENSE = [name for name, info in ESTIMATORS.items() if info.dense is not None]
BLOCK = dense_kernel._BLOCK_SAMPLES


def _rewards(kind: str, n: int, generator: torch.Generator) -> torch.Tensor:
    if kind == "binary":
        return torch.randint(0, 2, (n,), generator=generator).double()
    if kind == "graded":
        return torch.randint(0, 5, (n,), generator=generator).double() / 4
    if kind == "continuous":
        return torch.randn(n, generator=generator, dtype=torch.float64)
    if kind == "offset":  # a large mean over a small spread: centring must be exact
        return 100 + 1e-3 * torch.randn(n, generator=generator, dtype=torch.float64)
    if kind == "thirds":  # constant groups whose float mean is not exact
        return torch.full((n,), 1 / 3, dtype=torch.float64)
    if kind == "float32":
        return torch.rand(n, generator=generator).double()
    raise AssertionError(kind)


def _general(rewards: dict, groups: torch.Tensor, estimator: str, **options) -> torch.Tensor:
    """The same batch through the general path: shuffled, so it is not consecutive runs."""
    order = torch.randperm(groups.shape[0], generator=torch.Generator().manual_seed(1))
    out = compute_advantages({k: v[order] for k, v in rewards.items()}, groups[order], estimator, **options)
    return torch.empty_like(out).index_copy_(0, order, out)


def _kernel(rewards: dict, groups: torch.Tensor, estimator: str, **options) -> torch.Tensor | None:
    """The kernel's own answer (None: it hands the batch to the general path)."""
    opts = AdvantageOptions.resolve(options.pop("preset", None), **options)
    size = dense.dense_group_size(groups, groups.shape[0], torch.device("cpu"), verify=False)
    assert size is not None
    weights = torch.ones(len(rewards), dtype=torch.float64)
    columns = [v.double() for v in rewards.values()]
    return dense.kernel_advantages(columns, groups, size, ESTIMATORS[estimator], weights, opts)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["binary", "graded", "continuous", "offset", "thirds", "float32"]),
                   min_size=2, max_size=4),
    size=st.integers(2, 20),
    prompts=st.integers(1, 30),
    seed=st.integers(0, 2**16),
    option=st.sampled_from([{}, {"preset": "trl"}, {"preset": "nemo_rl"}, {"std_ddof": 0}, {"scale_rewards": "none"}]),
    weighted=st.booleans(),
)
def test_kernel_equals_the_loop_oracle_and_the_general_path(kinds, size, prompts, seed, option, weighted):
    generator = torch.Generator().manual_seed(seed)
    n = size * prompts
    rewards = {f"r{k}": _rewards(kind, n, generator) for k, kind in enumerate(kinds)}
    if "r1" in rewards and seed % 3 == 0:
        rewards["r1"] = 1 - rewards["r0"]  # components that cancel exactly in GDPO's sum
    groups = torch.arange(prompts).repeat_interleave(size) * 3 + 7  # increasing, not 0..N-1
    weights = {"r0": 2.0, "r1": 0.5} if weighted else None
    as_lists = {k: v.tolist() for k, v in rewards.items()}
    for estimator in DENSE:
        if option.get("scale_rewards") and estimator == "grpo_no_std":
            continue
        options = dict(option, reward_weights=weights)
        ours = compute_advantages(rewards, groups, estimator, **options)
        general = _general(rewards, groups, estimator, **options)
        assert torch.allclose(ours.double(), general.double(), atol=2e-6, rtol=1e-6), (estimator, ours, general)
        preset = options.pop("preset", None)
        loop = loop_advantages(as_lists, groups.tolist(), estimator, preset=preset, **options)
        assert torch.allclose(ours.double(), torch.tensor(loop, dtype=torch.float64), atol=1e-5, rtol=1e-5), (estimator, ours, loop)


def test_the_kernel_takes_the_usual_batches_itself():
    # The equality above would hold trivially if the kernel handed every batch on: it must not.
    generator = torch.Generator().manual_seed(0)
    rewards = {k: _rewards(kind, 64 * 8, generator) for k, kind in zip("abc", ["binary", "graded", "continuous"])}
    groups = torch.arange(64).repeat_interleave(8)
    for estimator in DENSE:
        assert _kernel(rewards, groups, estimator) is not None, estimator


def test_the_kernel_runs_wherever_numba_is_installed(monkeypatch):
    # available() falls back to the torch path with a warning when the kernel cannot be
    # built; with numba installed that is a bug, never an expected state.
    monkeypatch.delenv("GDPO_NEMO_NUMBA", raising=False)
    monkeypatch.setattr(dense_kernel, "_available", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dense_kernel.available()


@pytest.mark.parametrize("kinds", [("binary", "graded", "continuous"), ("float32", "binary", "thirds")])
def test_the_torch_form_computes_such_batches_itself_and_equals_the_general_path(kinds):
    # The torch form (CUDA's, and the CPU's without numba) must not hand these batches to the
    # general path: it is the code under test. The general path takes the same groups shuffled.
    generator = torch.Generator().manual_seed(4)
    size, count = 8, 300
    rewards = {k: _rewards(kind, size * count, generator) for k, kind in zip("abc", kinds)}
    groups = torch.arange(count).repeat_interleave(size)
    order = torch.randperm(size * count, generator=generator)
    options = AdvantageOptions.resolve("nemo_rl", reward_weights={"a": 1.5})
    weights = torch.tensor([1.5, 1.0, 1.0], dtype=torch.float64)
    for estimator in DENSE:
        info = ESTIMATORS[estimator]
        columns = [v.double() for v in rewards.values()]
        torch_form = dense.dense_advantages(columns, size, info.dense, info.multi_component, weights, options)
        assert torch_form is not None, estimator
        general = torch.empty(size * count)
        general[order] = compute_advantages({k: v[order] for k, v in rewards.items()}, groups[order], estimator,
                                            options=options)
        assert torch.allclose(torch_form, general, atol=1e-5, rtol=1e-5), estimator


def test_torch_dense_path_equals_the_kernel(monkeypatch):
    # The torch form runs on CUDA and without numba; here it is held to the kernel.
    generator = torch.Generator().manual_seed(3)
    rewards = {k: _rewards(kind, 200 * 6, generator) for k, kind in zip("abc", ["binary", "offset", "thirds"])}
    groups = torch.arange(200).repeat_interleave(6)
    kernel = {e: compute_advantages(rewards, groups, e, reward_weights={"a": 1.5}) for e in DENSE}
    monkeypatch.setattr(dense_kernel, "_available", False)
    for estimator in DENSE:
        torch_path = compute_advantages(rewards, groups, estimator, reward_weights={"a": 1.5})
        assert torch.allclose(kernel[estimator], torch_path, atol=1e-6, rtol=1e-6), estimator


def _big_batch(prompts: int = 9000, size: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    rewards = {"format": _rewards("binary", prompts * size, generator),
               "correct": _rewards("graded", prompts * size, generator),
               "length": _rewards("continuous", prompts * size, generator)}
    return rewards, torch.arange(prompts).repeat_interleave(size)


def test_same_bits_on_one_and_two_threads_across_many_blocks():
    rewards, groups = _big_batch()  # 144,000 samples: 18 blocks, split between the threads
    assert groups.shape[0] >= dense_kernel._PARALLEL_SAMPLES
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results[threads] = {e: compute_advantages(rewards, groups, e) for e in DENSE}
    finally:
        torch.set_num_threads(before)
    for estimator in DENSE:
        assert torch.equal(results[1][estimator], results[2][estimator]), estimator
        assert torch.equal(results[1][estimator], results[3][estimator]), estimator
        general = _general(rewards, groups, estimator)
        assert torch.allclose(results[2][estimator], general, atol=2e-6, rtol=1e-6), estimator


def test_ids_are_checked_in_every_block():
    # Runs of 4 at the start, so the dense path is tried; far past the first block a run is
    # broken in three ways. Each must give the general path's numbers (the loop oracle's).
    prompts, size = 3 * BLOCK // 4, 4
    rewards, _ = _big_batch(prompts, size, seed=5)
    good = torch.arange(prompts).repeat_interleave(size)
    late = 2 * BLOCK + 5 * size  # a sample in the third block
    mixed = good.clone()
    mixed[late + 1] = good[late] + 1  # a run holding two ids
    repeated = good.clone()
    repeated[late : late + size] = 0  # a run repeating the first group's id: one group of 8
    descending = torch.flip(good, dims=[0])  # runs with distinct, decreasing ids: still dense
    for ids in (mixed, repeated, descending):
        lists = {k: v.tolist() for k, v in rewards.items()}
        for estimator in ("gdpo", "grpo"):
            ours = compute_advantages(rewards, ids, estimator)
            loop = loop_advantages(lists, ids.tolist(), estimator)
            assert torch.allclose(ours.double(), torch.tensor(loop, dtype=torch.float64), atol=1e-5), estimator
    assert _kernel(rewards, mixed, "gdpo") is None
    assert _kernel(rewards, repeated, "gdpo") is None
    assert _kernel(rewards, descending, "gdpo") is not None


def test_nan_and_inf_in_a_late_block_go_to_the_general_path():
    rewards, groups = _big_batch(3000, 8, seed=2)
    late = 2 * BLOCK + 13
    with_nan = dict(rewards, length=rewards["length"].clone())
    with_nan["length"][late] = math.nan  # TRL's semantics: left out of its group's statistics
    assert _kernel(with_nan, groups, "gdpo") is None
    for estimator in ("gdpo", "grpo"):
        ours = compute_advantages(with_nan, groups, estimator)
        assert torch.equal(ours, _general(with_nan, groups, estimator)), estimator
        assert torch.isfinite(ours).all()
    with_inf = dict(rewards, format=rewards["format"].clone())
    with_inf["format"][late] = math.inf
    with pytest.raises(ValueError, match="rewards\\['format'\\] contains an infinite value"):
        compute_advantages(with_inf, groups, "gdpo")


def test_cancelling_components_give_zero_as_on_the_general_path():
    rewards, groups = _big_batch(2000, 4, seed=4)
    cancel = {"x": rewards["format"], "y": 1 - rewards["format"]}
    assert torch.equal(compute_advantages(cancel, groups, "gdpo"), torch.zeros(groups.shape[0]))


def test_single_group_large_groups_and_odd_sizes():
    generator = torch.Generator().manual_seed(9)
    for prompts, size in ((1, 2), (1, 4096), (3, 4096), (2731, 3), (5, 1000)):
        n = prompts * size
        rewards = {"a": _rewards("binary", n, generator), "b": _rewards("continuous", n, generator)}
        groups = torch.arange(prompts).repeat_interleave(size)
        for estimator in DENSE:
            ours = compute_advantages(rewards, groups, estimator)
            assert torch.allclose(ours, _general(rewards, groups, estimator), atol=2e-6, rtol=1e-6), (prompts, size)


def test_a_float32_overflow_raises_as_on_the_general_path(monkeypatch):
    rewards = {"r": torch.tensor([0.0, 1e39, 0.0, 1e39], dtype=torch.float64)}
    groups = torch.tensor([0, 0, 1, 1])
    interleaved = {"r": torch.tensor([0.0, 0.0, 1e39, 1e39], dtype=torch.float64)}  # the same groups, not runs
    for kernel_on in (True, False):  # the kernel, the torch form, the general path: one error
        monkeypatch.setattr(dense_kernel, "_available", kernel_on)
        with pytest.raises(RewardOverflow, match=r"rewards\['r'\] reach 1e\+39.*overflows float32"):
            compute_advantages(rewards, groups, "grpo_no_std")
        with pytest.raises(RewardOverflow, match=r"rewards\['r'\] reach 1e\+39.*overflows float32"):
            compute_advantages(interleaved, torch.tensor([0, 1, 0, 1]), "grpo_no_std")


def _in_threads(rewards, groups):
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda e: compute_advantages(rewards, groups, e), ["gdpo", "grpo", "gdpo", "grpo"]))


def test_concurrent_calls_from_threads_and_a_forked_child():
    rewards, groups = _big_batch(6000, 16, seed=6)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        serial = {e: compute_advantages(rewards, groups, e) for e in ("gdpo", "grpo")}
        results = _in_threads(rewards, groups)
        assert all(torch.equal(r, serial[e]) for r, e in zip(results, ["gdpo", "grpo", "gdpo", "grpo"]))
        # The parent's worker threads exist now; a forked child must start its own.
        context = multiprocessing.get_context("fork")
        with context.Pool(1) as pool:
            child = pool.apply_async(_child_advantages, (rewards, groups)).get(timeout=120)  # a hang fails
        assert child == serial["gdpo"].numpy().tobytes()
    finally:
        torch.set_num_threads(before)


def _child_advantages(rewards, groups) -> bytes:
    torch.set_num_threads(2)
    # Bytes, not a tensor: torch would send a tensor back through shared memory.
    return compute_advantages(rewards, groups, "gdpo").numpy().tobytes()


def test_switched_off_by_the_environment():
    code = (
        "import torch; from gdpo_nemo.estimators import kernel as dense_kernel, compute_advantages\n"
        "assert not dense_kernel.available()\n"
        "r = {'a': torch.tensor([1., 0, 0, 1]), 'b': torch.tensor([0., 1, 1, 1])}\n"
        "print(compute_advantages(r, torch.tensor([0, 0, 1, 1]), 'gdpo').tolist())\n"
    )
    env = dict(os.environ, GDPO_NEMO_NUMBA="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    off = torch.tensor(eval(done.stdout))
    on = compute_advantages({"a": torch.tensor([1.0, 0, 0, 1]), "b": torch.tensor([0.0, 1, 1, 1])},
                            torch.tensor([0, 0, 1, 1]), "gdpo")
    assert torch.allclose(off, on, atol=1e-6)
