"""Issue 48: every path of `compute_advantages` against one exact definition, and each finding
of the fifth estimator round as a test.

The paths: the numba kernel (CPU, groups in order), the dense torch form (the kernel off: the
code that runs on CUDA), the general path (groups out of order), and strict mode where the
peer's float32 arithmetic is exact (TRL's and verl's two-pass stds at offsets too). The
definition: `exact_advantages` below, in rational arithmetic (fractions.Fraction) so that no
offset or dtype can round it; rewards are dyadic values exact in each dtype (bfloat16,
float16, float32, float64, int32, int64) and "a group is constant" is plain equality of the
rewards, or of GRPO's weighted sums (of one reward too; a weight of 0.3 is not dyadic, so
there only the spread relative to the group is exact). The peers' own code (NeMo RL, TRL,
verl, float64) is held to the same batches where it is exact. Round 6 of the probes added
its findings at the end (one weighted reward at an offset, leave-one-out's uneven groups,
the tolerance option's range).
"""

from __future__ import annotations

import importlib.util
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gdpo_nemo.estimators import PRESETS, compute_advantages
from gdpo_nemo.estimators import compute as compute_module
from gdpo_nemo.estimators import kernel as dense_kernel
from gdpo_nemo.estimators.collapse import zero_std_fraction
from gdpo_nemo.estimators.general import RewardOverflow
from tests.support.requirements import requires

HAS_NUMBA = importlib.util.find_spec("numba") is not None
HAS_CUDA = torch.cuda.is_available()

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64]
# The largest offset at which quarters (integers for integer dtypes) stay exact in the dtype.
OFFSETS = {torch.bfloat16: [0, 32, -64], torch.float16: [0, 256, -128], torch.float32: [0, 2**18, -(10**5)],
           torch.float64: [0, 10**8, 2**40, -(10**12)], torch.int32: [0, 10**6, -(2**30)],
           torch.int64: [0, 10**9, 2**50]}
ESTIMATOR_NAMES = ["grpo", "grpo_no_std", "gdpo", "gdpo_no_bn"]


# ---------------------------------------------------------------------------------------
# The definition, exact.
# ---------------------------------------------------------------------------------------


def _sqrt(value: Fraction) -> float:
    return math.sqrt(value) if value > 0 else 0.0


def _normalized(values: list[Fraction], options: dict, divide: bool) -> list[float]:
    """One group, one column: the centred value of each sample (its group-mates' mean with
    leave-one-out), divided by std + eps where the std (of the same pool) is not 0."""
    out = []
    for i, value in enumerate(values):
        pool = [v for j, v in enumerate(values) if j != i] if options["leave_one_out"] else values
        mean = sum(pool, Fraction(0)) / len(pool)
        dof = len(pool) - options["std_ddof"]
        variance = sum(((v - mean) ** 2 for v in pool), Fraction(0)) / dof if dof > 0 else Fraction(0)
        centred = value - mean
        if not options["leave_one_out"] and variance == 0:
            centred = Fraction(0)
        std = _sqrt(variance)
        out.append(float(centred) / (std + options["eps"]) if divide and std > 0 else float(centred))
    return out


def exact_advantages(columns: list[list[Fraction]], groups: list[int], estimator: str, weights: list[Fraction],
                     options: dict) -> list[float]:
    members: dict[int, list[int]] = {}
    for b, g in enumerate(groups):
        members.setdefault(g, []).append(b)
    batch = len(groups)
    scale = "none" if estimator == "grpo_no_std" else options["scale_rewards"]
    advantage = [0.0] * batch
    if estimator.startswith("grpo"):
        sums = [sum((w * column[b] for w, column in zip(weights, columns)), Fraction(0)) for b in range(batch)]
        for rows in members.values():
            for b, a in zip(rows, _normalized([sums[b] for b in rows], options, scale == "group")):
                advantage[b] = a
        if scale == "batch":
            mean = sum(sums, Fraction(0)) / batch
            variance = sum(((s - mean) ** 2 for s in sums), Fraction(0)) / (batch - options["std_ddof"])
            std = _sqrt(variance)
            advantage = [a / (std + options["eps"]) if std > 0 else a for a in advantage]
        return advantage
    for w, column in zip(weights, columns):
        for rows in members.values():
            for b, a in zip(rows, _normalized([column[b] for b in rows], options, scale == "group")):
                advantage[b] += float(w) * a
    if estimator == "gdpo_no_bn":
        return advantage
    mean = math.fsum(advantage) / batch
    variance = math.fsum((a - mean) ** 2 for a in advantage) / (batch - options["std_ddof"])
    if variance <= 1e-24:
        return [0.0] * batch
    return [(a - mean) / (math.sqrt(variance) + options["batch_norm_eps"]) for a in advantage]


def resolved(preset: str | None, **given) -> dict:
    options = {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 0.0, "leave_one_out": False, "scale_rewards": "group"}
    options.update(PRESETS.get(preset, {}) if preset else {})
    options.update(given)
    return options


# ---------------------------------------------------------------------------------------
# Running one path, and knowing it ran.
# ---------------------------------------------------------------------------------------


def run_path(path: str, monkeypatch, rewards: dict, groups: torch.Tensor, estimator: str, **options) -> torch.Tensor:
    """compute_advantages on `path` (kernel, torch, general, strict), failing if another ran."""
    ran = []
    kernel_fn, dense_fn = compute_module.kernel_advantages, compute_module.dense_advantages
    monkeypatch.setattr(compute_module, "kernel_advantages",
                        lambda *a, **k: ran.append(("kernel", out := kernel_fn(*a, **k))) or out)
    monkeypatch.setattr(compute_module, "dense_advantages",
                        lambda *a, **k: ran.append(("torch", out := dense_fn(*a, **k))) or out)
    monkeypatch.setattr(dense_kernel, "_available", path == "kernel")
    if path == "general":  # the same groups, out of order, and never the dense layout
        monkeypatch.setattr(compute_module, "dense_group_size", lambda *a, **k: None)
        order = torch.randperm(groups.shape[0], generator=torch.Generator().manual_seed(7))
        got = compute_advantages({k: v[order] for k, v in rewards.items()}, groups[order], estimator, **options)
        monkeypatch.undo()
        assert not ran
        return torch.empty_like(got).index_copy_(0, order, got)
    got = compute_advantages(rewards, groups, estimator, **({"strict": True} if path == "strict" else {}), **options)
    if path in ("kernel", "torch"):
        assert [name for name, out in ran if out is not None] == [path], (path, ran)
    return got


def batch_of(rng: random.Random, dtype: torch.dtype, offset: int, prompts: int, size: int, kinds: int = 2):
    """Dyadic rewards exact in `dtype`: quarters in [0, 4] (integers for integer dtypes) plus
    `offset` on the first component; at least one group of equal values per component."""
    step = 1 if not dtype.is_floating_point else 0.25
    columns = []
    for k in range(kinds):
        values = [rng.choice([0, 1]) * 1.0 if k else rng.randrange(0, 17) * step for _ in range(prompts * size)]
        for i in range(size):  # the first group constant: its signal is exactly none
            values[i] = values[0]
        columns.append([v + (offset if k == 0 else 0) for v in values])
    rewards = {f"r{k}": torch.tensor(values, dtype=torch.float64).to(dtype) for k, values in enumerate(columns)}
    for k, values in enumerate(columns):  # exact in the dtype, as claimed
        assert rewards[f"r{k}"].to(torch.float64).tolist() == values
    exact = [[Fraction(v) for v in values] for values in columns]
    return rewards, torch.arange(prompts).repeat_interleave(size), exact


def close(got: torch.Tensor, want: list[float]) -> bool:
    want_tensor = torch.tensor(want, dtype=torch.float64)
    return bool(torch.allclose(got.double().cpu(), want_tensor, atol=2e-5, rtol=2e-5))


# ---------------------------------------------------------------------------------------
# The property: every path x dtype x offset x estimator x leave-one-out x scaling.
# ---------------------------------------------------------------------------------------


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_every_path_equals_the_exact_definition(dtype, monkeypatch):
    rng = random.Random(str(dtype))
    checked = 0
    for offset in OFFSETS[dtype]:
        for size in (2, 3, 8):
            rewards, groups, exact = batch_of(rng, dtype, offset, prompts=6, size=size)
            for estimator in ESTIMATOR_NAMES:
                for loo in (False, True):
                    for scale in ("group", "none", "batch"):
                        if (scale == "batch" and estimator != "grpo") or (scale != "group" and estimator == "grpo_no_std"):
                            continue
                        if loo and size == 2 and scale == "group":
                            continue  # one group-mate: no std (ddof 1), the same as scale none
                        # GRPO of one reward too, and a weight that is not dyadic (0.3 r rounds)
                        variants = [(["r0", "r1"], None), (["r0", "r1"], {"r0": 0.3, "r1": 2.0})]
                        if estimator.startswith("grpo"):
                            variants += [(["r0"], None), (["r0"], {"r0": 0.3})]
                        for names, weights in variants:
                            given = {"leave_one_out": loo, "scale_rewards": scale, "reward_weights": weights,
                                     "preset": "nemo_rl" if loo else "verl"}
                            options = resolved(given["preset"], leave_one_out=loo, scale_rewards=scale)
                            w = [Fraction(weights[name]) if weights else Fraction(1) for name in names]
                            want = exact_advantages(exact[: len(names)], groups.tolist(), estimator, w, options)
                            dense = not loo and scale != "batch"
                            for path in (["kernel", "torch", "general"] if dense else ["general"]):
                                got = run_path(path, monkeypatch, {name: rewards[name] for name in names}, groups,
                                               estimator, **given)
                                assert close(got, want), (path, dtype, offset, size, estimator, loo, scale, weights,
                                                          got.tolist(), want)
                                checked += 1
    assert checked > 100


@pytest.mark.parametrize("peer", ["nemo_rl", "trl", "verl"])
def test_the_peers_own_code_agrees_on_every_dtype_where_it_is_exact(peer):
    # The same dyadic batches in every dtype, given to the peer's own estimators as float64
    # values (tests/peers/*_driver.py). Where each peer is exact: NeMo RL's variance is
    # E[x^2] - E[x]^2 (it cancels at an offset), so it gets no offset; verl takes a two-pass
    # std, exact at these offsets; TRL computes in float32 only, so it gets the offsets whose
    # rewards float32 holds (groups of 4 and 8: its float32 means are exact too).
    from tests.test_peer_conformance import first_token, our_kwargs, run_peer

    rng = random.Random(peer)
    cases, mine = [], {}
    for dtype in DTYPES:
        offsets = OFFSETS[dtype][:1] if peer == "nemo_rl" else OFFSETS[dtype][:2]
        if peer == "trl" and dtype in (torch.float64, torch.int64):
            offsets = [0]
        for offset in offsets:
            for size in (4, 8):
                rewards, groups, exact = batch_of(rng, dtype, offset, prompts=5, size=size)
                for estimator in ("grpo", "gdpo"):
                    for loo in ((False, True) if peer == "nemo_rl" else (False,)):
                        case = {"id": f"{dtype} {offset} {size} {estimator} {loo}", "peer": peer,
                                "estimator": estimator, "scale": "group", "loo": loo, "names": ["r0", "r1"],
                                "rewards": [[float(v) for v in row] for row in zip(*exact)],
                                "group_ids": groups.tolist(), "weights": [1.0, 1.0],
                                "token_lengths": [1] * groups.shape[0]}
                        cases.append(case)
                        mine[case["id"]] = compute_advantages(rewards, groups, estimator, **our_kwargs(case))
    results = run_peer(peer, cases)
    for case in cases:
        theirs = first_token(results[case["id"]]["float32" if peer == "trl" else "float64"])
        assert torch.allclose(mine[case["id"]].double(), theirs, atol=1e-4, rtol=1e-4), (case["id"], theirs)


def test_strict_mode_equals_the_definition_where_the_peers_float32_is_exact(monkeypatch):
    # Binary rewards in groups of 2, 4 and 8: the peers' float32 sums, means and squares are
    # exact there, so their own arithmetic is the definition's.
    rng = random.Random(3)
    for size in (2, 4, 8):
        rewards, groups, exact = batch_of(rng, torch.float32, 0, prompts=5, size=size)
        rewards = {k: (v > 2).to(torch.float32) if k == "r0" else v for k, v in rewards.items()}
        exact[0] = [Fraction(int(v)) for v in rewards["r0"].tolist()]
        for preset in ("nemo_rl", "trl", "verl"):
            for estimator in ESTIMATOR_NAMES:
                if estimator == "gdpo_no_bn" and preset != "verl":
                    continue  # NeMo RL and TRL have no GDPO without batch norm: no strict form
                want = exact_advantages(exact, groups.tolist(), estimator, [Fraction(1)] * 2, resolved(preset))
                got = run_path("strict", monkeypatch, rewards, groups, estimator, preset=preset)
                assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=2e-4), \
                    (preset, estimator, size, got.tolist(), want)


@pytest.mark.parametrize("preset", ["trl", "verl"])
def test_strict_mode_of_a_two_pass_peer_equals_the_definition_at_an_offset(preset, monkeypatch):
    # TRL's and verl's stds are two-pass (the mean first, then the deviations from it), so
    # their float32 arithmetic does not see an offset whose quarters float32 holds: at 2^18 in
    # groups of 2, 4 and 8 every float32 sum, mean and deviation is exact. (NeMo RL's variance,
    # E[x^2] - E[x]^2, is not invariant: its strict mode has no offset here.)
    rng = random.Random(preset)
    for dtype, offset in ((torch.float32, 2**18), (torch.bfloat16, 32), (torch.float16, -128)):
        for size in (2, 4, 8):
            rewards, groups, exact = batch_of(rng, dtype, offset, prompts=5, size=size)
            for estimator in ESTIMATOR_NAMES:
                if estimator == "gdpo_no_bn" and preset != "verl":
                    continue  # TRL has no GDPO without batch norm: no strict form
                want = exact_advantages(exact, groups.tolist(), estimator, [Fraction(1)] * 2, resolved(preset))
                got = run_path("strict", monkeypatch, rewards, groups, estimator, preset=preset)
                assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=2e-4), \
                    (preset, dtype, offset, estimator, size, got.tolist(), want)


# ---------------------------------------------------------------------------------------
# The findings, one test each.
# ---------------------------------------------------------------------------------------

PATHS = ["kernel", "torch", "general"]


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("path", PATHS)
def test_findings_1_and_4_a_group_at_an_offset_keeps_its_signal_and_its_mean(path, monkeypatch):
    # 1e8: the torch form's variance cancelled (all zeros); 1e15: the kernel's mean rounded at
    # the offset's last place ([-1.08, 0.65, 0.65]).
    for offset in (1e8, 1e15):
        near = {"a": torch.tensor([offset, offset + 1, offset + 1], dtype=torch.float64)}
        got = run_path(path, monkeypatch, near, torch.zeros(3, dtype=torch.long), "grpo", preset="verl")
        assert close(got, [-2 / math.sqrt(3), 1 / math.sqrt(3), 1 / math.sqrt(3)]), (offset, got)
    counts = {"n": torch.tensor([10**9 + i for i in range(4)], dtype=torch.int64),
              "ok": torch.tensor([1, 0, 0, 1], dtype=torch.int64)}
    got = run_path(path, monkeypatch, counts, torch.zeros(4, dtype=torch.long), "gdpo_no_bn")
    want = exact_advantages([[Fraction(v) for v in c.tolist()] for c in counts.values()], [0] * 4, "gdpo_no_bn",
                            [Fraction(1)] * 2, resolved(None))
    assert close(got, want) and got.abs().min() > 0.2, (got, want)


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("path", PATHS)
def test_finding_2_bfloat16_rewards_are_never_merged_by_their_container(path, monkeypatch):
    pair = {"a": torch.tensor([3.0, 3.03125, 3.0, 3.03125], dtype=torch.bfloat16)}
    got = run_path(path, monkeypatch, pair, torch.zeros(4, dtype=torch.long), "grpo")
    exact = [[Fraction(v) for v in (3.0, 3.03125, 3.0, 3.03125)]]
    want = exact_advantages(exact, [0] * 4, "grpo", [Fraction(1)], resolved(None))
    assert close(got, want) and abs(want[0]) > 0.86, (got, want)  # +-0.866, as every peer gives
    # Reward-model-like scores rounded to bfloat16, 512 groups of 8: the same advantages as
    # the same values in float32, and no group with distinct scores is zeroed.
    generator = torch.Generator().manual_seed(48)
    scores = (torch.randn(512 * 8, generator=generator) * 0.05 + 2.5).to(torch.bfloat16)
    groups = torch.arange(512).repeat_interleave(8)
    for estimator in ("grpo", "gdpo"):
        rewards = {"rm": scores, "fmt": (torch.rand(512 * 8, generator=generator) > 0.5).to(torch.bfloat16)}
        got = run_path(path, monkeypatch, rewards, groups, estimator)
        as32 = run_path(path, monkeypatch, {k: v.float() for k, v in rewards.items()}, groups, estimator)
        assert torch.equal(got, as32), estimator
        if estimator == "grpo":
            sums = (rewards["rm"].double() + rewards["fmt"].double()).view(512, 8)
            varying = sums.amax(dim=1) > sums.amin(dim=1)
            zeroed = (got.view(512, 8) == 0).all(dim=1)
            assert int((varying & zeroed).sum()) == 0 and int(varying.sum()) > 400


def test_finding_3_leave_one_out_recomputes_every_cancelled_row_exactly_at_once():
    # 3,000 groups, each an outlier beside near-equal mates ([1, 0, 0, d]: the subtraction
    # cancels) or beside equal mates (std 0): every row against the exact definition. The
    # rows are recomputed together (linear in the batch: benchmarks/bench_advantages.py
    # --leave-one-out times it beside NeMo RL's own).
    rng = random.Random(4)
    values, exact = [], []
    for _ in range(3000):
        d = rng.choice([0.0, 2.0**-27, 2.0**-30, 2.0**-33])
        group = [1.0, 0.0, 0.0, d]
        rng.shuffle(group)
        values += group
        exact += [Fraction(v) for v in group]
    groups = torch.arange(3000).repeat_interleave(4)
    got = compute_advantages({"a": torch.tensor(values, dtype=torch.float64)}, groups, "grpo", preset="nemo_rl",
                             leave_one_out=True)
    want = exact_advantages([exact], groups.tolist(), "grpo", [Fraction(1)], resolved("nemo_rl", leave_one_out=True))
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert got.abs().max() > 1e5  # the cancelled rows: an outlier over a tiny std, as NeMo RL gives


class LargestOutput(TorchDispatchMode):
    """While active, records the most elements any torch op returned (`largest`)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


def test_finding_3_leave_one_out_is_linear_with_one_large_group_beside_many_small_ones():
    # Round 6: the cancelled rows were recomputed in one padded row each, as wide as the
    # widest group holding one: a group of 256 beside 256 groups of 4, each with an outlier
    # over near-equal mates, made a [257, 256] tensor for 1,280 samples (quadratic: 7 s at
    # 32,768 samples of that shape, 13 ms in groups of 4). Every tensor of the call now holds
    # O(B K) elements, and every row is still the exact definition's.
    big = [1.0, 2.0**-30] + [0.0] * 254
    values, groups = list(big), [0] * len(big)
    for g in range(1, 257):
        values += [1.0, 0.0, 2.0**-31 * (g % 3), 2.0**-30]
        groups += [g] * 4
    second = [v * 0.5 if g % 2 else 3.0 - v for v, g in zip(values, groups)]  # its own outliers
    rewards = {"a": torch.tensor(values, dtype=torch.float64), "b": torch.tensor(second, dtype=torch.float64)}
    ids = torch.tensor(groups)
    exact = [[Fraction(v) for v in column.tolist()] for column in rewards.values()]
    for estimator in ("grpo", "gdpo_no_bn"):
        with LargestOutput() as watch:
            got = compute_advantages(rewards, ids, estimator, preset="nemo_rl", leave_one_out=True)
        assert watch.largest <= 4 * len(values) * 2, (estimator, watch.largest, len(values))
        want = exact_advantages(exact, groups, estimator, [Fraction(1)] * 2, resolved("nemo_rl", leave_one_out=True))
        assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-5), estimator
        assert got.abs().max() > 1e5  # the cancelled rows: outliers over tiny stds


# A weighted reward at 8e14 and the next float64 above it: times 3.0 both round to one value.
MERGED_BY_WEIGHT = (803179469476690.6, math.nextafter(803179469476690.6, math.inf))


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("path", PATHS)
def test_round_6_grpo_of_one_weighted_reward_is_not_rounded_at_its_offset(path, monkeypatch):
    # GRPO of one reward formed w x as given: w x rounds at the offset's last place (distinct
    # rewards merged: all zeros; or their spread moved by up to half a unit: 0.3 x (1e15 +
    # k / 8)). It is taken relative to its group, as GRPO's sum of several rewards is.
    low, high = MERGED_BY_WEIGHT
    assert low * 3.0 == high * 3.0
    cases = [([low, high, low, high], 3.0), ([1e15, 1e15 + 0.125, 1e15 + 0.5, 1e15 + 0.625], 0.3),
             ([1e15 + 0.25, 1e15, 1e15 + 0.125, 1e15 + 0.5], -7.1)]
    for values, weight in cases:
        rewards = {"a": torch.tensor(values, dtype=torch.float64)}
        for estimator, scale in (("grpo", "group"), ("grpo", "none"), ("grpo_no_std", "group")):
            got = run_path(path, monkeypatch, rewards, torch.zeros(4, dtype=torch.long), estimator, preset="verl",
                           reward_weights={"a": weight}, scale_rewards=scale)
            want = exact_advantages([[Fraction(v) for v in values]], [0] * 4, estimator, [Fraction(weight)],
                                    resolved("verl", scale_rewards=scale))
            assert close(got, want) and got.abs().min() > 0, (values, weight, estimator, scale, got, want)


def test_round_6_dynamic_sampling_keeps_a_group_of_one_weighted_reward_that_varies():
    from gdpo_nemo.config.settings import EstimatorSettings
    from gdpo_nemo.engines.nemo.sampling import group_signal_spread

    low, high = MERGED_BY_WEIGHT
    batch = {"reward/a": torch.tensor([low, high, low, low], dtype=torch.float64), "idx": torch.tensor([0, 0, 1, 1])}
    settings = EstimatorSettings.from_gdpo({"estimator": "grpo", "reward_components": ["a"],
                                            "reward_weights": {"a": 3.0}})
    spread = group_signal_spread(batch, settings)
    assert spread[:2].min() > 0 and spread[2:].tolist() == [0.0, 0.0], spread


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
def test_round_6_a_residue_tolerance_merges_the_same_groups_on_every_path(monkeypatch):
    # With residue_tolerance=3 a group [-1, 1] was one value on the general path and two on
    # the dense ones; the option now stops at 0.5, where every path merges alike.
    rewards = {"a": torch.tensor([1.0, 1.4, -1.0, 1.0, 5.0, 6.0]), "b": torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])}
    groups = torch.arange(3).repeat_interleave(2)
    outs = [run_path(path, monkeypatch, rewards, groups, "gdpo_no_bn", residue_tolerance=0.5) for path in PATHS]
    for got in outs:
        # a: [1, 1.4] and [5, 6] merged (0.4 <= 0.7, 1 <= 3), [-1, 1] not (2 > 0.5); b: never
        assert torch.allclose(got, torch.tensor([-0.7071, 0.7071, -1.4142, 1.4142, -0.7071, 0.7071]), atol=1e-4), got
    with pytest.raises(ValueError, match=r"residue_tolerance: 3\.0; expected a number in \[0\.0, 0\.5\]"):
        compute_advantages(rewards, groups, "gdpo_no_bn", residue_tolerance=3.0)


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("path", PATHS)
def test_finding_4_overflow_from_a_weight_is_raised_alike_naming_the_weight(path, monkeypatch):
    rewards = {"a": torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0]), "b": torch.tensor([0.0, 1, 1, 1, 0, 0, 1, 0])}
    groups = torch.arange(2).repeat_interleave(4)
    for estimator, weight in (("gdpo", 1e154), ("gdpo_no_bn", 1e300), ("grpo_no_std", 1e300)):
        with pytest.raises(RewardOverflow, match=r"reward_weights\['a'\] = 1e\+(154|300)"):
            run_path(path, monkeypatch, rewards, groups, estimator, reward_weights={"a": weight})
    huge = {"a": torch.tensor([1e200, 0, 0, 1e200, 1, 0, 1, 0], dtype=torch.float64), "b": rewards["b"]}
    with pytest.raises(RewardOverflow, match=r"rewards\['a'\] reach 1e\+200"):
        run_path(path, monkeypatch, huge, groups, "grpo")


@requires(HAS_NUMBA, "numba (a declared dependency: pip install -e .)")
@pytest.mark.parametrize("path", PATHS)
def test_finding_4_a_float64_component_beside_a_float32_one_keeps_its_own_precision(path, monkeypatch):
    # 16 apart at 2^30: 1.5e-8 relative, below float32's old tolerance (2.4e-7), far above eps
    fine = torch.tensor([2.0**30, 2.0**30 + 16, 2.0**30, 2.0**30 + 16], dtype=torch.float64)
    rewards = {"fine": fine, "coarse": torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float32)}
    got = run_path(path, monkeypatch, rewards, torch.zeros(4, dtype=torch.long), "gdpo_no_bn")
    want = exact_advantages([[Fraction(v) for v in fine.tolist()], [Fraction(v) for v in (1, 0, 0, 1)]], [0] * 4,
                            "gdpo_no_bn", [Fraction(1)] * 2, resolved(None))
    assert close(got, want) and abs(want[1] - want[2]) > 1, (got, want)


def test_finding_4_reward_weights_as_numpy_and_torch_scalars():
    rewards = {"a": torch.tensor([1.0, 0, 0, 1]), "b": torch.tensor([0.0, 1, 1, 1])}
    groups = torch.zeros(4, dtype=torch.long)
    want = compute_advantages(rewards, groups, "grpo", reward_weights={"a": 2.0})
    for weight in (np.int64(2), np.float32(2.0), torch.tensor(2.0), torch.tensor(2, dtype=torch.int32)):
        assert torch.equal(compute_advantages(rewards, groups, "grpo", reward_weights={"a": weight}), want)


def test_finding_4_the_diagnostics_and_dynamic_sampling_call_constant_what_the_estimators_do():
    from gdpo_nemo.engines.nemo.sampling import group_range

    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    one_unit = torch.tensor([1.0, 1.0], dtype=torch.float32)
    one_unit[1] = torch.nextafter(one_unit[0], torch.tensor(2.0))
    for values in (torch.tensor([3.0, 3.03125, 1.0, 1.0, 0.0, 1.0], dtype=torch.bfloat16),
                   torch.cat([one_unit, torch.tensor([1.0, 1.0, 0.0, 1.0])])):
        advantages = compute_advantages({"r": values}, groups, "grpo_no_std")
        no_signal = (advantages.view(3, 2) == 0).all(dim=1)
        assert no_signal.tolist() == [False, True, False], values
        assert zero_std_fraction({"r": values}, groups) == {"r": 1 / 3}
        assert (group_range(values, groups).view(3, 2)[:, 0] == 0).tolist() == no_signal.tolist()


# ---------------------------------------------------------------------------------------
# The torch form on CUDA (marked gpu: skipped without one).
# ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (marked gpu)")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_gpu_the_torch_form_on_cuda_equals_the_exact_definition(dtype):
    rng = random.Random(f"cuda {dtype}")
    for offset in OFFSETS[dtype]:
        rewards, groups, exact = batch_of(rng, dtype, offset, prompts=6, size=8)
        rewards = {k: v.cuda() for k, v in rewards.items()}
        for estimator in ESTIMATOR_NAMES:
            want = exact_advantages(exact, groups.tolist(), estimator, [Fraction(1)] * 2, resolved("verl"))
            got = compute_advantages(rewards, groups.cuda(), estimator, preset="verl")
            assert got.device.type == "cuda" and close(got, want), (dtype, offset, estimator)
    near = compute_advantages({"a": torch.tensor([1e8, 1e8 + 1, 1e8 + 1], dtype=torch.float64, device="cuda")},
                              torch.zeros(3, dtype=torch.long, device="cuda"), "grpo", preset="verl")
    assert close(near, [-2 / math.sqrt(3), 1 / math.sqrt(3), 1 / math.sqrt(3)])
