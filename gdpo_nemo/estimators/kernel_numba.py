"""The numba kernels of gdpo_nemo.estimators.kernel (which see): imported only there, lazily,
so that the package imports without numba. Module-level functions, so that numba's disk
cache finds them again in the next process."""

from __future__ import annotations

import math

import numba
import numpy as np

# Sums may be reassociated (vectorized): the general path's torch sums have their own
# order too; everything else rounds as written.
jit = numba.njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})


@jit
def statistics(rows, first, count, ddof, eps, divide, tolerance, magnitudes, shifts, means, factors, stds):
    """For rows[first : first + count] (one group each): shifts[j] (the group's first value),
    means[j] (the mean of the values less it) and factors[j] (1 / (std + eps), 1 without
    `divide` or where the std is 0, 0 for a constant group). `magnitudes[j]`: the group's
    largest sum of |terms| where the rows are sums (GRPO's), or None: rewards as given.
    Returns (the largest std * factor, whether a value was not finite)."""
    size = rows.shape[1]
    for j in range(count):
        values = rows[first + j]
        # Shifted by the group's first value, one pass gives the sum and the centred
        # sum of squares without E[x^2] - E[x]^2's cancellation (|x_0 - mean| is at
        # most the group's range), and the mean of the differences is exact to the
        # spread's last place whatever the offset.
        shift = values[0]
        total = 0.0
        squares = 0.0
        for i in range(size):
            d = values[i] - shift
            total += d
            squares += d * d
        shifts[j] = shift
        means[j] = total / size
        factors[j] = max(squares - total * total / size, 0.0)
    # Every group's std, then its factor, at once (vectorized square roots, divisions).
    check = 0.0
    for j in range(count):
        std = math.sqrt(factors[j] / (size - ddof))
        check += shifts[j] + means[j] + std
        stds[j] = std
    if not math.isfinite(check):
        return 0.0, True  # a value is not finite (or the squares overflow)
    largest = 0.0
    for j in range(count):
        std = stds[j]
        # A std of 0 leaves the centred value undivided (as the general path).
        factor = 1.0 / (std + eps) if divide and std > 0.0 else 1.0
        largest = max(largest, std * factor)
        factors[j] = factor
    for j in range(count):
        # The rule of gdpo_nemo.estimators.groups.constant_within: max - min <= tolerance *
        # the group's magnitude (0: equal values). Such a group's std is at most its range,
        # which is at most 2 * tolerance * |mean| (rewards as given) or tolerance *
        # magnitude (sums): only those need their max and min. A std of 0 with values
        # below 1e-140 may be underflow: those are compared too.
        bound = tolerance * (abs(shifts[j] + means[j]) * 2.0 if magnitudes is None else magnitudes[j])
        if stds[j] > bound or (stds[j] == 0.0 and tolerance == 0.0 and abs(shifts[j]) >= 1e-140):
            if stds[j] == 0.0 and tolerance == 0.0:
                factors[j] = 0.0  # equal values: its centred values are exactly 0
            continue
        values = rows[first + j]
        hi = values[0]
        lo = values[0]
        for i in range(size):
            hi = max(hi, values[i])
            lo = min(lo, values[i])
        limit = tolerance * (max(abs(hi), abs(lo)) if magnitudes is None else magnitudes[j])
        if hi - lo <= limit:
            factors[j] = 0.0  # constant: its centred values are exactly 0
    return largest, False


@jit
def accumulate(rows, first, count, shifts, means, factors, weight, acc, assign):
    """acc[j] (+)= (((rows[first + j] - shifts[j]) - means[j]) * factors[j]) * weight:
    `assign` for the first component (constant groups give 0), added for the others."""
    size = rows.shape[1]
    for j in range(count):
        factor = factors[j]
        row = acc[j]
        if factor == 0.0:
            if assign:
                for i in range(size):
                    row[i] = 0.0
            continue
        values = rows[first + j]
        shift = shifts[j]
        mean = means[j]
        if assign:
            for i in range(size):
                row[i] = (((values[i] - shift) - mean) * factor) * weight
        else:
            for i in range(size):
                row[i] += (((values[i] - shift) - mean) * factor) * weight


@jit
def finish(rows, first, count, shifts, means, factors, weight, acc, out, out_first):
    """out[out_first + j] = acc[j] + the term of rows[first + j] (as `accumulate`); returns
    the sum and the sum of squares written."""
    size = rows.shape[1]
    total = 0.0
    squares = 0.0
    for j in range(count):
        factor = factors[j]
        values = rows[first + j]
        source = acc[j]
        row = out[out_first + j]
        shift = shifts[j]
        mean = means[j]
        for i in range(size):
            a = source[i] + (((values[i] - shift) - mean) * factor) * weight
            row[i] = a
            total += a
            squares += a * a
    return total, squares


@jit
def check_ids(ids, first, count):
    """Rows [first, first + count) of ids [groups, size]: 0 when a row holds two different
    ids, 1 when each holds one and they increase (from the row before `first`), 2 when
    each holds one but they do not increase."""
    size = ids.shape[1]
    increasing = True
    previous = ids[first - 1, 0] if first > 0 else ids[first, 0]
    for j in range(count):
        row = ids[first + j]
        head = row[0]
        differ = False
        for i in range(size):
            differ |= row[i] != head
        if differ:
            return 0
        if (first + j) > 0 and head <= previous:
            increasing = False
        previous = head
    return 1 if increasing else 2


@jit
def weighted_sum(columns, weights, first, count, summed, magnitudes):
    """GRPO's reward sum of rows [first, first + count): summed[j] = sum_k w_k (columns[k] -
    its group's first value), in component order (one reward too), and magnitudes[j] = the
    group's largest sum_k |w_k (x_k - first x_k)| (|w x| for one reward, the weighted reward
    as given): its residue's scale. Relative to the first values, no offset, size or weight
    of a component rounds the sum (the general path's `relative_sums`, with another
    reference)."""
    size = summed.shape[1]
    single = len(columns) == 1
    parts = np.empty(size)  # each sample's sum_k |w_k (x_k - first x_k)|, built beside its sum
    for j in range(count):
        row = summed[j]
        for k in range(len(columns)):
            values = columns[k][first + j]
            w = weights[k]
            reference = values[0]
            for i in range(size):
                term = (values[i] - reference) * w
                scale = abs(values[i] * w) if single else abs(term)
                if k == 0:
                    row[i] = term
                    parts[i] = scale
                else:
                    row[i] += term
                    parts[i] += scale
        largest = 0.0
        for i in range(size):
            largest = max(largest, parts[i])
        magnitudes[j] = largest


@jit
def group_pass(columns, ids, weights, eps, ddof, divide, sum_first, tolerance, out, block_groups,
               first_block, last_block, block_sums, block_squares, block_largest, block_state):
    """Blocks [first_block, last_block) of `block_groups` groups. GDPO (not `sum_first`):
    out[g] = sum_k w_k ((x_k[g] - shift) - mean) * factor, each component normalized in its
    group; GRPO (`sum_first`): the weighted sum of the components normalized in its group
    (`tolerance`: the constant-group rule's, for rewards as given or for the sum). Per
    block: the sum and sum of squares written, each normalized part's largest std * factor,
    and a state: 0 = the ids are not runs of one id per group (nothing computed), 1 / 2 =
    they are (increasing / not), 3 = a value is not finite. `columns`, `ids`: [groups, size]."""
    num_groups, size = columns[0].shape
    shifts = np.empty(block_groups)
    means = np.empty(block_groups)
    factors = np.empty(block_groups)
    stds = np.empty(block_groups)
    magnitudes = np.empty(block_groups)
    acc = np.empty((block_groups, size))
    summed = np.empty((block_groups if sum_first else 1, size))
    last = len(columns) - 1
    for block in range(first_block, last_block):
        first = block * block_groups
        count = min(block_groups, num_groups - first)
        state = check_ids(ids, first, count)
        block_state[block] = state
        if state == 0:
            continue
        bad = False
        if sum_first:
            weighted_sum(columns, weights, first, count, summed, magnitudes)
            largest, bad = statistics(summed, 0, count, ddof, eps, divide, tolerance, magnitudes, shifts, means,
                                      factors, stds)
            block_largest[block, 0] = largest
            acc[:count] = 0.0
            block_sums[block], block_squares[block] = finish(
                summed, 0, count, shifts, means, factors, 1.0, acc, out, first)
        else:
            if last == 0:
                acc[:count] = 0.0
            for k in range(last + 1):
                largest, bad_k = statistics(
                    columns[k], first, count, ddof, eps, divide, tolerance, None, shifts, means, factors, stds)
                block_largest[block, k] = largest
                bad = bad or bad_k
                if k < last:
                    accumulate(columns[k], first, count, shifts, means, factors, weights[k], acc, k == 0)
                else:
                    block_sums[block], block_squares[block] = finish(
                        columns[k], first, count, shifts, means, factors, weights[k], acc, out, first)
        if bad:
            block_state[block] = 3


@jit
def normalize(summed, mean, factor, out, first, last):
    for i in range(first, last):
        out[i] = (summed[i] - mean) * factor
