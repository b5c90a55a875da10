"""The dense path of `compute_advantages` on CPU: one fused pass over rewards and group ids.

`gdpo_nemo.estimators` computes every estimator with torch ops, on any device; on a CPU
each of those ops is another pass over the batch. For the usual layout of a rollout batch
(consecutive groups of one size, finite rewards, no leave-one-out, token mask or batch
scaling) the numba kernels of `gdpo_nemo.estimators.kernel_numba` read each reward and group id once
instead: per block of groups (about ``_BLOCK_SAMPLES`` samples, held in cache), the ids
are checked to be runs of one id per group, each group's mean, centred variance (one
pass, shifted by its first value) and, only where it may be constant, max - min; then the
weighted sum of the centred, scaled components is written once (float64 where GDPO's batch
norm still needs it, else the float32 result). GDPO's batch norm is a second pass over
that sum.

The definitions are the general path's (``_normalize_in_groups``, ``_weighted_sum``,
``_batch_norm`` in gdpo_nemo.estimators.general): a group is constant by the one rule of
gdpo_nemo.estimators.groups.constant_within (equal rewards; GRPO's sums within their
residue), and its centred values are then exactly 0; every statistic is of the values less
the group's first value, so an offset never rounds the mean; a std of 0 leaves the centred
value undivided; dividing by std + eps is multiplying by its
reciprocal (one float64 rounding apart; tests hold the paths together).

Each block keeps its partial sums, so the result does not depend on the thread count.
The kernels release the GIL and the threads are Python's (no numba threading layer: safe
under fork and from several threads at once). `available()` is False when numba cannot
be imported or GDPO_NEMO_NUMBA=0; the torch path then runs.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

_BLOCK_SAMPLES = 1 << 13
"""Samples per block (whole groups; at least one): the unit of work of a thread and of the
partial sums, small enough that a block's rewards stay in cache between its passes."""

# Below this many samples one thread does all (starting threads costs more than it saves).
_PARALLEL_SAMPLES = 1 << 16

_FLOAT32_MAX = float(np.finfo(np.float32).max)

_kernels = None
_available: bool | None = None
_kernels_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def _compile():
    """The numba kernels (gdpo_nemo.estimators.kernel_numba), compiled on first use and cached on disk."""
    from gdpo_nemo.estimators import kernel_numba

    return kernel_numba.group_pass, kernel_numba.normalize


def available() -> bool:
    """Whether the kernels run here: numba importable, and not turned off by the
    environment variable GDPO_NEMO_NUMBA=0 (then the torch path computes the same)."""
    global _available
    if _available is None:
        if os.environ.get("GDPO_NEMO_NUMBA", "1").strip() == "0":
            _available = False
        else:
            try:
                _get_kernels()
            except ImportError as error:
                if not (error.name or "").startswith("numba"):  # our kernels fail to import: say so
                    warnings.warn(f"gdpo_nemo: the numba kernel is off ({error!r}); the torch path computes the same, slower")
                _available = False
            except Exception as error:  # numba present but unusable here (e.g. no cache dir), or a bug
                warnings.warn(f"gdpo_nemo: the numba kernel is off ({error!r}); the torch path computes the same, slower")
                _available = False
            else:
                _available = True
    return _available


def _get_kernels():
    global _kernels
    if _kernels is None:
        with _kernels_lock:
            if _kernels is None:
                _kernels = _compile()
    return _kernels


def _map(fn, ranges: list[tuple[int, int]]) -> None:
    """fn(first, last) for each range, on up to torch's intra-op thread count of threads."""
    global _pool, _pool_pid
    if len(ranges) == 1:
        fn(*ranges[0])
        return
    with _kernels_lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child gets its own threads
            _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="gdpo-dense")
            _pool_pid = os.getpid()
        pool = _pool
    futures = [pool.submit(fn, first, last) for first, last in ranges[1:]]
    fn(*ranges[0])
    for future in futures:
        future.result()


def _split(count: int, parts: int) -> list[tuple[int, int]]:
    edges = [count * p // parts for p in range(parts + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def dense_advantages(
    columns: list[Tensor], group_ids: Tensor, size: int, weights: Tensor, *, divide: bool, sum_first: bool,
    batch_norm: bool, eps: float, ddof: int, batch_norm_eps: float, tolerance: float, batch_tolerance: float,
) -> Tensor | None:
    """Advantages [B] float32 of float64 CPU `columns` (each [B]) in consecutive groups of
    `size`, all finite; None where the general path must decide: `group_ids` [B] are not
    runs of `size` with one distinct id each (checked in the same pass), a reward is not
    finite, a statistic or advantage overflows (that path raises, naming the cause), or the
    batch std is near cancellation. `tolerance`: the constant-group rule's for what is
    normalized (rewards as given, or GRPO's sum); `batch_tolerance`: the batch norm's.

    Nothing here runs a parallel torch op: torch's OpenMP threads keep spinning for a while
    after one, and would take the cores from this module's threads."""
    group_pass, normalize = _get_kernels()
    arrays = tuple(column.detach().contiguous().view(-1, size).numpy() for column in columns)
    ids = group_ids.detach().to(torch.int64).contiguous().view(-1, size).numpy()
    num_groups, _ = arrays[0].shape
    batch_size = num_groups * size
    block_groups = max(1, _BLOCK_SAMPLES // size)
    num_blocks = -(-num_groups // block_groups)
    threads = torch.get_num_threads() if batch_size >= _PARALLEL_SAMPLES else 1
    out32 = torch.empty(batch_size, dtype=torch.float32)
    summed = np.empty((num_groups, size)) if batch_norm else out32.numpy().reshape(num_groups, size)
    block_sums = np.zeros(num_blocks)
    block_squares = np.zeros(num_blocks)
    block_largest = np.zeros((num_blocks, 1 if sum_first else len(arrays)))
    block_state = np.empty(num_blocks, dtype=np.int8)
    w = weights.detach().cpu().numpy().astype(np.float64)

    def run(first: int, last: int) -> None:
        group_pass(arrays, ids, w, eps, ddof, divide, sum_first, tolerance, summed, block_groups,
                   first, last, block_sums, block_squares, block_largest, block_state)

    _map(run, _split(num_blocks, min(threads, num_blocks)))
    if (block_state == 0).any() or (block_state == 3).any():
        return None  # not runs of one id, or a reward is not finite
    if (block_state == 2).any():  # runs, but their ids do not increase: are they distinct?
        heads = ids[:, 0]
        if np.unique(heads).shape[0] != heads.shape[0]:
            return None
    squares = math.fsum(block_squares.tolist())
    if not math.isfinite(squares):
        return None  # the squares overflow float64
    if not batch_norm:
        # Every |value| is below sqrt(squares): within float32's range unless the rewards
        # are extreme, and only then is the float32 output scanned.
        if not squares < _FLOAT32_MAX**2 and not bool(np.isfinite(out32.numpy()).all()):
            return None  # an advantage overflows float32
        return out32
    mean = math.fsum(block_sums.tolist()) / batch_size
    dof = batch_size - ddof
    variance = (squares - batch_size * mean * mean) / dof if dof > 0 else 0.0
    std = math.sqrt(variance) if variance > 0 else 0.0
    if std <= 0:
        return out32.zero_()
    # An upper bound of the general path's scale (sum_k max |w_k A_k|): |x - mean| <=
    # std * sqrt(G - 1) in a group. A batch std near it may be cancellation: the general
    # path decides with the exact scale.
    largest = block_largest.max(axis=0)
    scale = 0.0
    for k, value in enumerate(largest.tolist()):
        scale += value * abs(float(w[k])) * math.sqrt(size - 1)
    if std <= batch_tolerance * scale:
        return None
    factor = 1.0 / (std + batch_norm_eps)
    flat = summed.reshape(-1)
    result = out32.numpy()
    _map(lambda first, last: normalize(flat, mean, factor, result, first, last), _split(batch_size, threads))
    return out32
