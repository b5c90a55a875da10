"""The reward layer: named reward components per task, each with a declared range.

    rs = get_reward_set("gsm8k")                 # the paper's components for the task
    rs.task, rs.names                            # "gsm8k", ["format", "correctness", "integer"]
    rs.ranges                                    # {"format": (0.0, 1.0), ...}
    rs.score(completion, ground_truth)           # {"format": 1.0, "correctness": 0.0, ...}
    rs.score_batch(completions, ground_truths, num_tokens=[...])   # {"format": [...], ...}

Tasks and components (defaults first; docs/rewards.md has every rule):
- toolcall: format {0,1}, correctness [-3,3]                (ToolRL)
- gsm8k:    format, correctness, integer, each {0,1}         (GDPO authors' TRL recipe)
- math:     correctness, length; optional format, each {0,1} (math-verify; l = 4000 tokens)
- code:     pass [0,1], length {0,1} (always conditioned), bug {0,1}  (gdpo_nemo.rewards.code)

Rewards never raise on model output and never import torch. A broken ground truth raises
`RewardDataError`, which carries the batch's rewards with bad rows at their lowest values.
Weights are not this layer's business: the advantage layer applies them by name.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence

from gdpo_nemo.errors import UserError
from gdpo_nemo.rewards.base import BatchResult, RewardDataError, TaskRewards, lowest_values

__all__ = ["TASKS", "RewardDataError", "RewardSet", "TaskRewards", "get_reward_set", "task_rewards"]

from gdpo_nemo.tasks import TASKS as _REGISTERED  # noqa: E402  (each task names its reward table)

TASKS = _REGISTERED  # the task registry itself, read live
CODE_MODULE = "gdpo_nemo.rewards.code"
CODE_DEFAULT_LENGTH_LIMIT = 4000


def code_task_rewards() -> TaskRewards:
    """The code task, delegating to `gdpo_nemo.rewards.code.score_code_batch` (imported lazily:
    it pulls in the sandbox)."""
    try:
        code = importlib.import_module(CODE_MODULE)
    except ModuleNotFoundError as err:
        if err.name != CODE_MODULE:
            raise
        raise UserError(f"task 'code' needs the module {CODE_MODULE}, which is not in this build") from None

    def scorer(completions, ground_truths, *, components, num_tokens=None, tests=None, length_limit=None, conditioned_length=False) -> BatchResult:
        # A non-text completion holds no program, which code scores 0 (its lowest) everywhere;
        # it still goes through so that its row's tests are checked like any other.
        texts = [c if isinstance(c, str) else "" for c in completions]
        try:
            return code.score_code_batch(
                texts, list(tests), components=list(components), num_tokens=num_tokens, length_limit=length_limit
            ), {}
        except RewardDataError as err:
            return err.partial, err.rows

    return TaskRewards(
        task="code",
        ranges=dict(code.CODE_RANGES),
        default_components=("pass", "length", "bug"),
        scorer=scorer,
        default_length_limit=CODE_DEFAULT_LENGTH_LIMIT,
        length_always_conditioned=True,
        needs_ground_truth=False,
        needs_tests=True,
    )


def task_rewards(task: str) -> TaskRewards:
    """The `TaskRewards` table of `task`, a registered task (gdpo_nemo.tasks.TASKS): its
    `rewards` names the table, or a function that builds it."""
    if task not in _REGISTERED:
        raise UserError(f"unknown reward task {task!r}; accepted: {', '.join(_REGISTERED)}")
    module, attribute = _REGISTERED[task].rewards.split(":")
    table = getattr(importlib.import_module(module), attribute)
    return table() if callable(table) else table


def _check_length(name: str, values: object, expected: int) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise UserError(f"{name} must be a list with one entry per completion, got {type(values).__name__}")
    if len(values) != expected:
        raise UserError(f"{name} has {len(values)} entries but there are {expected} completions")
    return list(values)


class RewardSet:
    """The chosen reward components of one task, ready to score completions.

    task: the task name. names: component names, in the order asked for. ranges:
    {name: (lowest, highest)} of those components. length_limit: tokens for `length`
    (None when the set has no `length`). conditioned_length: whether `length` pays only
    correct answers.
    """

    def __init__(self, spec: TaskRewards, names: list[str], length_limit: float | None, conditioned_length: bool):
        self._spec = spec
        self.task = spec.task
        self.names = list(names)
        self.ranges = {name: tuple(spec.ranges[name]) for name in names}
        self.length_limit = length_limit
        self.conditioned_length = conditioned_length
        # What each completion must come with, from the task's reward table (not its name).
        self.needs_tests = spec.needs_tests
        self.needs_ground_truth = spec.needs_ground_truth

    def __repr__(self) -> str:
        extra = f", length_limit={self.length_limit}, conditioned_length={self.conditioned_length}" if self.length_limit else ""
        return f"RewardSet(task={self.task!r}, names={self.names}{extra})"

    def lowest(self) -> dict[str, float]:
        """{name: lowest declared value}: what a bad row is scored."""
        return lowest_values(self.ranges, self.names)

    def score(self, completion: object, ground_truth: object = None, *, num_tokens: int | None = None, tests=None) -> dict[str, float]:
        """{name: value} for one completion. `num_tokens`: its length from the caller's
        tokenizer (else ceil(chars/4)). `tests`: its test cases (code only).
        Raises RewardDataError (one row, index 0) when the ground truth is unusable."""
        batch = self.score_batch(
            [completion], [ground_truth], num_tokens=[num_tokens], tests=None if tests is None else [tests]
        )
        return {name: values[0] for name, values in batch.items()}

    def score_batch(
        self,
        completions: Sequence[object],
        ground_truths: Sequence[object] | None = None,
        *,
        num_tokens: Sequence[int | None] | None = None,
        tests: Sequence[object] | None = None,
    ) -> dict[str, list[float]]:
        """{name: [value per completion]} for B completions.

        ground_truths: B entries (may be None for code). num_tokens: None or B token counts
        (None entries fall back to ceil(chars/4)). tests: B test-case lists (code only).
        Raises ValueError on mismatched lengths, and RewardDataError listing the rows whose
        ground truth is unusable (its `.partial` holds the batch with those rows lowest).
        """
        count = len(_check_length("completions", completions, len(completions)))
        if ground_truths is None:
            if self._spec.needs_ground_truth:
                raise UserError(f"task {self.task!r} needs ground_truths, one per completion")
            ground_truths = [None] * count
        ground_truths = _check_length("ground_truths", ground_truths, count)
        if num_tokens is not None:
            num_tokens = _check_length("num_tokens", num_tokens, count)
        if self._spec.needs_tests:
            if tests is None:
                raise UserError(f"task {self.task!r} needs tests, one list of test cases per completion")
            tests = _check_length("tests", tests, count)
        scores, errors = self._spec.scorer(
            list(completions),
            ground_truths,
            components=self.names,
            num_tokens=num_tokens,
            tests=tests,
            length_limit=self.length_limit,
            conditioned_length=self.conditioned_length,
        )
        if errors:
            raise RewardDataError(errors, partial=scores)
        return scores


def get_reward_set(
    task: str,
    components: Sequence[str] | None = None,
    *,
    length_limit: float | None = None,
    conditioned_length: bool = False,
) -> RewardSet:
    """The reward set of `task` ("toolcall" | "gsm8k" | "math" | "code").

    components: names in the order wanted (default: the task's paper set).
    length_limit: tokens for a `length` component, > 0 (default 4000 for math and code).
    conditioned_length: `length` pays only correct answers (paper Table 4); always on for code.
    """
    if not isinstance(task, str) or task not in TASKS:
        raise UserError(f"unknown reward task {task!r}; accepted: {', '.join(TASKS)}")
    spec = task_rewards(task)
    if components is None:
        names = list(spec.default_components)
    elif isinstance(components, str) or not isinstance(components, Sequence):
        raise UserError(f"components must be a list of names such as {list(spec.default_components)}, got {components!r}")
    else:
        names = list(components)
    accepted = ", ".join(spec.ranges)
    if not names:
        raise UserError(f"components is empty; accepted for task {task!r}: {accepted}")
    for name in names:
        if name not in spec.ranges:
            raise UserError(f"unknown reward component {name!r} for task {task!r}; accepted: {accepted}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"components lists {', '.join(duplicates)} more than once")
    if length_limit is not None and (
        isinstance(length_limit, bool)
        or not isinstance(length_limit, (int, float))
        or not (math.isfinite(length_limit) and length_limit > 0)
    ):
        raise UserError(f"length_limit must be a positive number of tokens, got {length_limit!r}")
    if not isinstance(conditioned_length, bool):
        raise UserError(f"conditioned_length must be true or false, got {conditioned_length!r}")
    if "length" in names:
        limit = length_limit if length_limit is not None else spec.default_length_limit
        conditioned = conditioned_length or spec.length_always_conditioned
    else:
        limit, conditioned = None, False
    return RewardSet(spec, names, limit, conditioned)
