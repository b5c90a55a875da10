"""Environment scoring without NeMo RL: message logs in, named reward lists out.

A NeMo RL environment's ``step`` receives a batch of message logs (OpenAI-style
``[{"role": ..., "content": ...}, ...]``) and the per-sample ``extra_env_info`` our data
processors attached (``{"ground_truth": ..., "tests": ...}``). `RewardScorer.score` turns
them into ``{"reward/<name>": [value per sample]}`` with gdpo_nemo's reward registry: the
environment actor (``environment.py``) is a thin shell around it.

The settings come from the run config's ``env.<name>`` block (written by the composer from
the gdpo block; see configs/task/*.yaml): task, components, length_limit,
conditioned_length, num_workers, tokenizer, on_data_error.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from gdpo_nemo.errors import UserError
from gdpo_nemo.rewards import RewardDataError, get_reward_set
from gdpo_nemo.runs import metric_names as mn

__all__ = ["EnvSettings", "RewardScorer", "ScoreResult", "assistant_text", "load_token_counter", "REWARD_PREFIX"]

REWARD_PREFIX = mn.name(mn.REWARD, "")  # the batch keys NeMo RL carries: reward/<name>


@dataclass(frozen=True)
class EnvSettings:
    """What one environment scores (the run config's ``env.<name>`` block).

    task: "toolcall" | "gsm8k" | "math" | "code". components: reward names in order.
    length_limit: tokens for a `length` component (None: the task's default).
    conditioned_length: `length` pays only correct answers. num_workers: threads scoring
    chunks of a batch at once (code runs programs in the sandbox; the others are cheap).
    tokenizer: a tokenizer name or path to count response tokens for `length`; None counts
    ceil(chars / 4). on_data_error: what a sample whose ground truth is broken gets:
    "lowest" (each component's lowest value), "nan" (left out by gdpo_nemo's estimator),
    or "raise" (stop the run).
    """

    task: str
    components: tuple[str, ...]
    length_limit: float | None = None
    conditioned_length: bool = False
    num_workers: int = 1
    tokenizer: str | None = None
    on_data_error: str = "lowest"

    @classmethod
    def from_config(cls, block: Mapping, where: str = "env") -> "EnvSettings":
        """Settings from an ``env.<name>`` block; ValueError naming the key at fault."""
        from gdpo_nemo.config import key_walk
        from gdpo_nemo.config.validate import ENV_SCHEMA, env_value_problems

        problems = key_walk.check_against_schema(dict(block), ENV_SCHEMA, where) or env_value_problems(block, where)
        if problems:
            raise UserError("; ".join(problems))
        return cls(
            task=block["task"],
            components=tuple(block["components"]),
            length_limit=block["length_limit"],
            conditioned_length=block["conditioned_length"],
            num_workers=block["num_workers"],
            tokenizer=block["tokenizer"],
            on_data_error=block["on_data_error"],
        )


@dataclass(frozen=True)
class ScoreResult:
    """One scored batch: ``rewards`` = {"reward/<name>": [value per sample]} in component
    order; ``data_errors`` = {sample index: message} for samples with a broken ground truth."""

    rewards: dict[str, list[float]]
    data_errors: dict[int, str]


def assistant_text(message_log: Sequence[Mapping]) -> str:
    """The model's answer in one message log: every assistant message's content, joined
    (NeMo RL's environments do the same; a single-turn log has one)."""
    return "".join(str(m.get("content", "")) for m in message_log if m.get("role") == "assistant")


def load_token_counter(name: str | None) -> Callable[[str], int] | None:
    """A function counting the tokens of a text with tokenizer `name` (hub name or local
    path, loaded with transformers), or None for `name` None."""
    if name is None:
        return None
    if name.startswith("builtin:"):
        raise UserError(
            f"env tokenizer {name!r} is a local-engine built-in; NeMo RL environments load a hub name or"
            " a local tokenizer folder (or null to count ceil(chars / 4))"
        )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def _chunks(count: int, parts: int) -> list[range]:
    """`count` indices cut into at most `parts` contiguous ranges of near-equal size."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        stop = start + size + (1 if part < extra else 0)
        ranges.append(range(start, stop))
        start = stop
    return [r for r in ranges if len(r)]


class RewardScorer:
    """Scores message logs with one task's reward set (gdpo_nemo.rewards.get_reward_set)."""

    def __init__(self, settings: EnvSettings, count_tokens: Callable[[str], int] | None = None):
        self.settings = settings
        self.reward_set = get_reward_set(
            settings.task,
            list(settings.components),
            length_limit=settings.length_limit,
            conditioned_length=settings.conditioned_length,
        )
        self.count_tokens = count_tokens

    @property
    def keys(self) -> list[str]:
        """The reward keys of a scored batch, in component order: ``reward/<name>``."""
        return [REWARD_PREFIX + name for name in self.reward_set.names]

    def _score_range(self, rows: range, completions, ground_truths, num_tokens, tests):
        pick = lambda values: None if values is None else [values[i] for i in rows]  # noqa: E731
        try:
            scores = self.reward_set.score_batch(
                pick(completions), pick(ground_truths), num_tokens=pick(num_tokens), tests=pick(tests)
            )
            return scores, {}
        except RewardDataError as err:
            errors = {rows[i]: message for i, message in err.rows.items()}
            return err.partial, errors

    def score(self, message_logs: Sequence[Sequence[Mapping]], metadata: Sequence[Mapping | None]) -> ScoreResult:
        """Rewards of a batch: message_logs[i] and metadata[i] (its extra_env_info) per sample.

        The reward functions never raise on model output. A sample whose ground truth is
        broken gets, per `on_data_error`, its components' lowest values or NaN, or the call
        raises RewardDataError naming every such sample ("raise").
        """
        if len(message_logs) != len(metadata):
            raise UserError(f"{len(message_logs)} message logs but {len(metadata)} metadata entries")
        count = len(message_logs)
        if count == 0:
            return ScoreResult({key: [] for key in self.keys}, {})
        infos = [info or {} for info in metadata]
        completions = [assistant_text(log) for log in message_logs]
        ground_truths = [info.get("ground_truth") for info in infos]
        tests = [info.get("tests") for info in infos] if self.reward_set.needs_tests else None
        num_tokens = None
        if self.count_tokens is not None and "length" in self.reward_set.names:
            num_tokens = [self.count_tokens(text) for text in completions]
        ranges = _chunks(count, self.settings.num_workers)
        if len(ranges) == 1:
            results = [self._score_range(ranges[0], completions, ground_truths, num_tokens, tests)]
        else:
            with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
                results = list(
                    pool.map(lambda r: self._score_range(r, completions, ground_truths, num_tokens, tests), ranges)
                )
        rewards: dict[str, list[float]] = {name: [] for name in self.reward_set.names}
        errors: dict[int, str] = {}
        for scores, bad in results:
            for name in self.reward_set.names:
                rewards[name].extend(float(v) for v in scores[name])
            errors.update(bad)
        if errors:
            if self.settings.on_data_error == "raise":
                raise RewardDataError(errors, partial=rewards)
            if self.settings.on_data_error == "nan":
                for index in errors:
                    for name in rewards:
                        rewards[name][index] = math.nan
        return ScoreResult({REWARD_PREFIX + name: values for name, values in rewards.items()}, errors)
