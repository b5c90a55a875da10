"""GSM8K quick-check rewards: `format`, `correctness`, `integer`, each in {0, 1}.

The three rewards of the GDPO authors' TRL recipe (and NeMo RL's multi-reward math
example), with the edge semantics of their code (docs/rewards.md, "GSM8K quick check"):

- `format`: 1 if the raw completion matches `^<think>.*?</think>\\n<answer>.*?</answer>$`
  (DOTALL; `$` also matches before one final newline, as Python's `re` does) and `<answer>`
  and `</answer>` each appear exactly once;
- the extracted answer is the text after the last `<answer>`, cut at the first `</answer>`
  after it, stripped; without an `<answer>` tag the whole completion is used, and an
  unclosed `<answer>` still counts;
- `correctness`: 1 if the extracted answer equals the ground truth exactly (string `==`);
- `integer`: 1 if the extracted answer `.isdigit()` (so "-5" and "" earn 0, and non-ASCII
  digits such as "٣" earn 1, as `str.isdigit` says).

Ground truth: the final answer string (the text after `####` of a GSM8K solution), used as
given, not stripped. A full GSM8K solution is accepted too: if it contains `####`, the text
after the last `####`, stripped, is the ground truth (the dataset loaders' step). An int is
taken as its decimal string. Anything else, or an empty answer, raises `RewardDataError`.
"""

from __future__ import annotations

import re

from gdpo_nemo.rewards.base import BatchResult, RewardDataError, TaskRewards, score_rowwise

BINARY = (0.0, 1.0)
RANGES = {"format": BINARY, "correctness": BINARY, "integer": BINARY}

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_FORMAT = re.compile(r"^<think>.*?</think>\n<answer>.*?</answer>$", re.DOTALL)
SOLUTION_MARKER = "####"


def ground_truth_answer(ground_truth: object) -> str:
    """The answer string a completion must equal; raises `RewardDataError` when unusable."""
    if isinstance(ground_truth, int) and not isinstance(ground_truth, bool):
        return str(ground_truth)
    if not isinstance(ground_truth, str):
        raise RewardDataError.single(
            f"gsm8k ground_truth must be the answer string (or a GSM8K solution with '####'), got {type(ground_truth).__name__}"
        )
    answer = ground_truth.rsplit(SOLUTION_MARKER, 1)[1].strip() if SOLUTION_MARKER in ground_truth else ground_truth
    if not answer:
        raise RewardDataError.single(f"gsm8k ground_truth has an empty answer: {ground_truth[-80:]!r}")
    return answer


def extract_answer(completion: str) -> str:
    """The text after the last `<answer>` (whole text without one), cut at `</answer>`, stripped."""
    return completion.rsplit(ANSWER_OPEN, 1)[-1].split(ANSWER_CLOSE, 1)[0].strip()


def format_reward(completion: object, ground_truth: object = None) -> float:
    """{0.0, 1.0}: 1 for `<think>...</think>\\n<answer>...</answer>` with one answer tag pair.
    The ground truth is not used (accepted for a uniform signature)."""
    if not isinstance(completion, str):
        return 0.0
    if completion.count(ANSWER_OPEN) != 1 or completion.count(ANSWER_CLOSE) != 1:
        return 0.0
    return 1.0 if _FORMAT.match(completion) else 0.0


def correctness_reward(completion: object, ground_truth: object) -> float:
    """{0.0, 1.0}: 1 if the extracted answer equals the ground-truth answer exactly."""
    expected = ground_truth_answer(ground_truth)
    if not isinstance(completion, str):
        return 0.0
    return 1.0 if extract_answer(completion) == expected else 0.0


def integer_reward(completion: object, ground_truth: object = None) -> float:
    """{0.0, 1.0}: 1 if the extracted answer is all digits (`str.isdigit`).
    The ground truth is not used (accepted for a uniform signature)."""
    if not isinstance(completion, str):
        return 0.0
    return 1.0 if extract_answer(completion).isdigit() else 0.0


def _after_checking_ground_truth(reward):
    def scored(completion: object, ground_truth: object) -> float:
        ground_truth_answer(ground_truth)
        return reward(completion)

    return scored


def score_batch(
    completions, ground_truths, *, components, num_tokens=None, tests=None, length_limit=None, conditioned_length=False
) -> BatchResult:
    """Batch scorer for `TaskRewards`. Every row's ground truth is checked, whichever
    components are asked for, so a broken answer key is reported even by a format-only set."""
    functions = {
        "format": _after_checking_ground_truth(format_reward),
        "correctness": correctness_reward,
        "integer": _after_checking_ground_truth(integer_reward),
    }
    return score_rowwise(functions, RANGES, components, completions, ground_truths)


TASK_REWARDS = TaskRewards(
    task="gsm8k",
    ranges=RANGES,
    default_components=("format", "correctness", "integer"),
    scorer=score_batch,
    notes={
        "format": "1 if <think>...</think>\\n<answer>...</answer> with one <answer> and one </answer>",
        "correctness": "1 if the text in the last <answer> equals the ground-truth answer",
        "integer": "1 if the text in the last <answer> is all digits (str.isdigit)",
    },
)
