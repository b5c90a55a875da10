"""Math-with-length rewards: `correctness`, `length` (plain or conditioned), optional `format`.

(Named math_rewards, not math, so it never shadows the standard library's `math`.)

- `correctness` in {0, 1}: math-verify's verdict on the whole completion against the
  reference answer, exactly as NeMo RL's `hf_math_verify` (gold wrapped in `\\boxed{}`,
  LaTeX extraction; completion parsed with expression + LaTeX extraction; float rounding 6),
  run by `math_verifier.MathVerifier` under a per-answer time limit (default 5 s). A time-out
  or a crash of the verifier scores 0.
- `length` in {0, 1}: 1 if the response has at most `length_limit` tokens (paper l = 4000),
  from the caller's tokenizer count `num_tokens`; without it, ceil(characters / 4)
  (`gdpo_nemo.rewards.length`). Conditioned (`conditioned_length=True`, paper Table 4):
  1 only if short AND correct.
- `format` in {0, 1} (optional; not in the paper's math runs): 1 if the completion has
  exactly one `</think>`; at most one `<think>`, and if present it comes before `</think>`
  (R1 chat templates put the opening `<think>` in the prompt, so it may be absent); and the
  text after `</think>` contains a `\\boxed{...}` whose braces close and whose content is
  not blank (the last `\\boxed{` is checked).

Ground truth: the reference answer string (e.g. "\\frac{1}{2}", "42"); ints and floats are
taken as their `str()`. An empty or non-text answer, or one math-verify extracts nothing from,
raises `RewardDataError` for that row.
"""

from __future__ import annotations

from collections.abc import Sequence

from gdpo_nemo.rewards import math_verifier
from gdpo_nemo.rewards.base import BatchResult, RewardDataError, TaskRewards, lowest_values
from gdpo_nemo.rewards.length import length_reward

BINARY = (0.0, 1.0)
RANGES = {"correctness": BINARY, "length": BINARY, "format": BINARY}
DEFAULT_LENGTH_LIMIT = 4000

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
BOXED = "\\boxed{"


def reference_answer(ground_truth: object) -> str:
    """The reference answer as text; raises `RewardDataError` when there is none."""
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return str(ground_truth)
    if not isinstance(ground_truth, str):
        raise RewardDataError.single(f"math ground_truth must be the reference answer string, got {type(ground_truth).__name__}")
    if not ground_truth.strip():
        raise RewardDataError.single("math ground_truth is empty")
    return ground_truth


def boxed_content(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text` (braces balanced), or None when
    there is none or its braces never close."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth = 1
    begin = start + len(BOXED)
    for index in range(begin, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[begin:index]
    return None


def format_reward(completion: object, ground_truth: object = None) -> float:
    """{0.0, 1.0}: reasoning closed by one `</think>`, then a final answer in `\\boxed{}`
    (details in the module docstring). The ground truth is not used."""
    if not isinstance(completion, str) or completion.count(THINK_CLOSE) != 1:
        return 0.0
    reasoning, answer = completion.split(THINK_CLOSE)
    if reasoning.count(THINK_OPEN) > 1 or THINK_OPEN in answer:
        return 0.0
    content = boxed_content(answer)
    return 1.0 if content is not None and content.strip() else 0.0


def correctness_reward(completion: object, ground_truth: object, *, verifier: math_verifier.MathVerifier | None = None) -> float:
    """{0.0, 1.0}: math-verify says the completion's answer equals the reference answer.
    `verifier` defaults to the process-wide `math_verifier.shared_verifier()`."""
    scores, errors = score_batch([completion], [ground_truth], components=["correctness"], verifier=verifier)
    if errors:
        raise RewardDataError.single(errors[0])
    return scores["correctness"][0]


def score_batch(
    completions: Sequence[object],
    ground_truths: Sequence[object],
    *,
    components: Sequence[str],
    num_tokens: Sequence[object] | None = None,
    tests=None,
    length_limit: float | None = None,
    conditioned_length: bool = False,
    verifier: math_verifier.MathVerifier | None = None,
) -> BatchResult:
    """Batch scorer for `TaskRewards`. Correctness is verified for every row with text and a
    usable reference (it also gates the conditioned length), all rows in one verifier batch."""
    lowest = lowest_values(RANGES, components)
    errors: dict[int, str] = {}
    references: dict[int, str] = {}
    for index, ground_truth in enumerate(ground_truths):
        try:
            references[index] = reference_answer(ground_truth)
        except RewardDataError as err:
            errors[index] = err.message
    needs_verdict = "correctness" in components or ("length" in components and conditioned_length)
    verdicts: dict[int, str] = {}
    if needs_verdict:
        to_check = [i for i in references if isinstance(completions[i], str)]
        checked = (verifier or math_verifier.shared_verifier()).check_batch(
            [references[i] for i in to_check], [completions[i] for i in to_check]
        )
        verdicts = dict(zip(to_check, checked))
        for index, verdict in verdicts.items():
            if verdict == math_verifier.GOLD_UNPARSABLE:
                errors[index] = f"math-verify extracts no answer from ground_truth {references[index][:80]!r}"

    scores: dict[str, list[float]] = {name: [] for name in components}
    for index, completion in enumerate(completions):
        if index in errors or not isinstance(completion, str):
            row = lowest
        else:
            correct = 1.0 if verdicts.get(index) == math_verifier.CORRECT else 0.0
            row = {}
            for name in components:
                if name == "correctness":
                    row[name] = correct
                elif name == "length":
                    tokens = num_tokens[index] if num_tokens is not None else None
                    limit = DEFAULT_LENGTH_LIMIT if length_limit is None else length_limit
                    row[name] = length_reward(completion, limit, tokens, correct=correct if conditioned_length else None)
                else:
                    row[name] = format_reward(completion)
        for name in components:
            scores[name].append(row[name])
    return scores, errors


TASK_REWARDS = TaskRewards(
    task="math",
    ranges=RANGES,
    default_components=("correctness", "length"),
    scorer=score_batch,
    default_length_limit=DEFAULT_LENGTH_LIMIT,
    notes={
        "correctness": "1 if math-verify finds the completion's answer equal to the reference (5 s limit)",
        "length": "1 if the response has <= length_limit tokens (and, conditioned, is correct)",
        "format": "1 if one </think> is followed by a final \\boxed{...} answer",
    },
)
