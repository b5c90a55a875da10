"""Shared pieces of the reward layer: the data-error type and the per-task reward table.

A task module (toolcall, gsm8k, math_rewards, and the code adapter in `__init__`) describes
itself with one `TaskRewards` value; `gdpo_nemo.rewards.get_reward_set` looks it up by name.

Two kinds of bad input, treated differently on purpose:
- model output (the completion) is never an error: malformed text earns the component's
  lowest value, and a completion that is not a string earns the lowest value everywhere;
- the ground truth (our data) can be broken; that raises `RewardDataError`, because a reward
  computed against broken data would be a silent constant, not a learning signal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gdpo_nemo.errors import UserError

# A batch scorer's result: {component: [value per row]} and {row index: data-error message}.
BatchResult = tuple[dict[str, list[float]], dict[int, str]]


class RewardDataError(UserError):
    """The ground truth (or tests) of one or more rows cannot be scored: a data error.

    `rows` maps each bad row's index in the batch to a message naming the problem.
    `partial` holds the whole batch's rewards ({component: [value per row]}) with every bad
    row set to each component's lowest declared value, so a caller that wants to keep
    training (and log the rows) can use it instead of stopping.
    """

    def __init__(self, rows: Mapping[int, str], partial: dict[str, list[float]] | None = None):
        self.rows = dict(rows)
        self.partial = partial
        shown = "; ".join(f"row {i}: {msg}" for i, msg in sorted(self.rows.items())[:5])
        more = f" (and {len(self.rows) - 5} more)" if len(self.rows) > 5 else ""
        super().__init__(f"ground-truth data error in {len(self.rows)} row(s): {shown}{more}")

    @classmethod
    def single(cls, message: str) -> RewardDataError:
        """A data error about one value, before it is placed in a batch (row 0)."""
        return cls({0: message})

    @property
    def message(self) -> str:
        """The first row's message (the whole story for a single-row error)."""
        return self.rows[min(self.rows)] if self.rows else str(self)


@dataclass(frozen=True)
class TaskRewards:
    """How one task scores: its components, their ranges, its defaults and its batch scorer.

    `ranges` lists every component the task knows, in its canonical order, as
    {name: (lowest, highest)}. `default_length_limit` (tokens) applies when a set with a
    `length` component is built without one; `length_always_conditioned` makes `length`
    pay only correct answers whatever `conditioned_length` says (the paper's coding runs). `scorer(completions, ground_truths, *, components,
    num_tokens, tests, length_limit, conditioned_length)` returns a `BatchResult`; it
    never raises on model output and reports ground-truth problems per row instead of raising.
    """

    task: str
    ranges: Mapping[str, tuple[float, float]]
    default_components: tuple[str, ...]
    scorer: Callable[..., BatchResult]
    default_length_limit: int | None = None
    length_always_conditioned: bool = False
    needs_ground_truth: bool = True
    needs_tests: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)


def lowest_values(ranges: Mapping[str, tuple[float, float]], components: Sequence[str]) -> dict[str, float]:
    """{component: its lowest declared value}: what a bad row or non-text completion earns."""
    return {name: float(ranges[name][0]) for name in components}


def score_rowwise(
    row_rewards: Mapping[str, Callable[[object, object], float]],
    ranges: Mapping[str, tuple[float, float]],
    components: Sequence[str],
    completions: Sequence[object],
    ground_truths: Sequence[object],
) -> BatchResult:
    """Score a batch with per-row pure functions `fn(completion, ground_truth) -> float`.

    Rows whose ground truth raises `RewardDataError` get every component's lowest value and
    an entry in the returned error map; the rest of the batch is scored normally.
    """
    lowest = lowest_values(ranges, components)
    scores: dict[str, list[float]] = {name: [] for name in components}
    errors: dict[int, str] = {}
    for index, (completion, ground_truth) in enumerate(zip(completions, ground_truths)):
        try:
            row = {name: row_rewards[name](completion, ground_truth) for name in components}
        except RewardDataError as err:
            errors[index] = err.message
            row = lowest
        for name in components:
            scores[name].append(row[name])
    return scores, errors
