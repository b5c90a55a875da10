"""The paper's evaluation metrics, as pure functions of per-response outcomes.

All values are fractions in [0, 1] (the tables print percent).

- `pass_at_1(correct)`: ``correct[q][j]`` is 1 when response j of question q is right;
  pass@1 estimated from k samples is the mean over questions of the mean over their k
  responses (the paper: k = 16). A question with no responses (an unreadable row) counts 0.
- `mean_pass_fraction(fractions)`: code ``pass``, the fraction of tests passed averaged
  over samples, then over problems.
- `exceed_share(lengths, limit)`: share of all responses longer than `limit` tokens (the
  paper: 4,000); a truncated response (it hit the generation limit) always exceeds when the
  generation limit is above `limit`, and counts as exceeding otherwise too, since its true
  length is unknown and at least the generation limit.
- `bug_ratio(bug_free)`: share of programs with a compile error, a runtime error, a timeout
  or a killed run (``1 - bug`` reward), unreadable rows and responses with no program
  included.
- `bfcl_average(live, non_live, multi_turn)`: the paper's Avg Acc, the mean of the three
  overall accuracies.
"""

from __future__ import annotations

import math

from gdpo_nemo.errors import UserError


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def pass_at_1(correct: list) -> float:
    """Mean over questions of each question's mean correctness over its samples."""
    if not correct:
        return 0.0
    return _mean(_mean(float(bool(v)) for v in row) if row else 0.0 for row in correct)


def mean_pass_fraction(pass_fractions: list) -> float:
    """Code ``pass``: mean over problems of the mean over samples of the fraction of tests
    passed (the pass reward). A problem with no samples (unreadable row) counts 0."""
    if not pass_fractions:
        return 0.0
    return _mean(_mean(float(v) for v in row) if row else 0.0 for row in pass_fractions)


def exceed_share(lengths: list, limit: int, truncated: list | None = None) -> float:
    """Share of responses over `limit` tokens (truncated responses count as over)."""
    if limit <= 0:
        raise UserError(f"exceed limit must be a positive number of tokens, got {limit}")
    flags = [n > limit for n in lengths]
    if truncated is not None:
        if len(truncated) != len(lengths):
            raise UserError(f"truncated has {len(truncated)} entries for {len(lengths)} lengths")
        flags = [f or bool(t) for f, t in zip(flags, truncated)]
    return _mean(float(f) for f in flags)


def bug_ratio(bug_free: list) -> float:
    """Share of programs that did not run cleanly (1 - mean of the `bug` reward)."""
    return 1.0 - _mean(float(v) for v in bug_free) if bug_free else 0.0


def bfcl_average(live: float, non_live: float, multi_turn: float) -> float:
    """The paper's Avg Acc: mean of Live, Non-Live and Multi-Turn overall accuracy; NaN if
    any is missing (an average over fewer categories would not be the paper's number)."""
    values = [live, non_live, multi_turn]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return float("nan")
    return sum(values) / 3.0
