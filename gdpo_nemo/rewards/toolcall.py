"""Tool-calling rewards: ToolRL's `format` in {0, 1} and `correctness` in [-3, 3].

The reward the GDPO paper trains its tool-calling models with (ToolRL, Qian et al. 2025),
with the edge semantics of ToolRL's reference code (docs/rewards.md, "Tool calling (ToolRL)"):

- the completion is stripped of surrounding whitespace before both checks;
- `format`: the ground truth's shape (tool_call and/or response present) picks one regex,
  which must match the whole stripped answer (DOTALL), and each tag of that shape must
  appear exactly once (the `<think>` tag is never counted, as in ToolRL);
- `correctness`: 0 when the ground truth has no `<tool_call>`; -3 when the answer lacks
  `<tool_call>` or `</tool_call>`, a line of its first tool_call block is not JSON, a call
  is not an object with a hashable "name", or a call named like a ground-truth call has no
  "parameters" object; +3 when the predicted call list equals the ground truth's (Python `==`
  after `json.loads`, so 250.0 == 250 and 0 == false, "3" != 3, lists in order); otherwise
  6 * S / S_max - 3 with S = name match + greedy per-call matches (see `_partial_score`).
- format and correctness are independent: a wrong format can still score correctness 3.

Ground-truth problems (not a string, a blank or non-JSON line in its tool_call block, a call
without a string "name" or an object "parameters") raise `RewardDataError`. ToolRL's own code
crashes on the first two and silently scores every answer -3 on the last two; both hide a
data bug, so we report it instead.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache

from gdpo_nemo.rewards.base import BatchResult, RewardDataError, TaskRewards, score_rowwise

FORMAT_RANGE = (0.0, 1.0)
CORRECTNESS_RANGE = (-3.0, 3.0)
RANGES = {"format": FORMAT_RANGE, "correctness": CORRECTNESS_RANGE}

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<response>", "</response>"

# (has tool_call, has response) -> (regex, tags that must appear exactly once)
_FORMAT_BY_SHAPE: dict[tuple[bool, bool], tuple[re.Pattern[str], tuple[str, ...]]] = {
    (False, True): (
        re.compile(r"^<think>.*?</think>\n<response>.*?</response>$", re.DOTALL),
        (RESPONSE_OPEN, RESPONSE_CLOSE),
    ),
    (True, False): (
        re.compile(r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>$", re.DOTALL),
        (TOOL_CALL_OPEN, TOOL_CALL_CLOSE),
    ),
    (True, True): (
        re.compile(
            r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>\n<response>.*?</response>$",
            re.DOTALL,
        ),
        (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE),
    ),
    (False, False): (re.compile(r"^<think>.*?</think>$", re.DOTALL), ()),
}


class _Malformed(Exception):
    """The predicted tool calls cannot be scored: the whole answer earns the lowest value."""


def _check_ground_truth_text(ground_truth: object) -> str:
    if not isinstance(ground_truth, str):
        raise RewardDataError.single(
            f"toolcall ground_truth must be a string in ToolRL's tagged format, got {type(ground_truth).__name__}"
        )
    return ground_truth


def first_tool_call_block(text: str) -> str | None:
    """The stripped text between the first `<tool_call>` and the next `</tool_call>` after it
    (to the end of the text when no closing tag follows), or None without `<tool_call>`."""
    if TOOL_CALL_OPEN not in text:
        return None
    return text.split(TOOL_CALL_OPEN, 1)[1].split(TOOL_CALL_CLOSE, 1)[0].strip()


@lru_cache(maxsize=8192)
def ground_truth_calls(ground_truth: str) -> tuple[dict, ...] | None:
    """The ground truth's tool calls (one JSON object per line of its first tool_call block),
    or None when it has no `<tool_call>`. Raises `RewardDataError` on a malformed block.

    Cached: the G rollouts of a prompt share one ground truth. Callers must not mutate it.
    """
    block = first_tool_call_block(_check_ground_truth_text(ground_truth))
    if block is None:
        return None
    calls = []
    for number, line in enumerate(block.split("\n"), start=1):
        if not line.strip():
            raise RewardDataError.single(
                f"toolcall ground_truth has a blank line {number} in its <tool_call> block;"
                " write one JSON call per line with no blank lines"
            )
        try:
            call = json.loads(line)
        except (ValueError, RecursionError) as err:
            raise RewardDataError.single(
                f"toolcall ground_truth line {number} of its <tool_call> block is not JSON ({err})"
            ) from None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise RewardDataError.single(
                f"toolcall ground_truth call {number} must be an object with a string \"name\", got {line[:80]!r}"
            )
        if not isinstance(call.get("parameters"), dict):
            raise RewardDataError.single(
                f"toolcall ground_truth call {number} ({call['name']!r}) needs a \"parameters\" object"
            )
        calls.append(call)
    return tuple(calls)


def format_reward(completion: object, ground_truth: object) -> float:
    """ToolRL format reward, {0.0, 1.0}: 1 when the stripped completion has exactly the
    ground truth's shape (think, then tool_call and/or response, each tag once)."""
    text = _check_ground_truth_text(ground_truth)
    shape = (TOOL_CALL_OPEN in text, RESPONSE_OPEN in text)
    if not isinstance(completion, str):
        return FORMAT_RANGE[0]
    answer = completion.strip()
    pattern, single_tags = _FORMAT_BY_SHAPE[shape]
    # Counting first is ToolRL's condition reordered (it is a conjunction); it also keeps the
    # lazy regexes linear, since each anchor string they search for then occurs once.
    if any(answer.count(tag) != 1 for tag in single_tags):
        return FORMAT_RANGE[0]
    return FORMAT_RANGE[1] if pattern.search(answer) else FORMAT_RANGE[0]


def match_score(expected: list, predicted: list) -> float:
    """ToolRL's similarity of two lists, in [0, 1]: 1 when equal, else the multiset Jaccard
    index sum(min counts) / (|A| + |B| - intersection); 0 when either is empty.

    Raises TypeError on unhashable elements (a malformed prediction, handled by the caller).
    """
    if expected == predicted:
        return 1.0
    if not expected or not predicted:
        return 0.0
    count_expected, count_predicted = Counter(expected), Counter(predicted)
    intersection = sum(min(count_expected[k], count_predicted[k]) for k in count_expected.keys() & count_predicted.keys())
    union = len(expected) + len(predicted) - intersection
    return intersection / union if union > 0 else 0.0


def _parse_predicted_calls(completion: str) -> list:
    answer = completion.strip()
    if TOOL_CALL_OPEN not in answer or TOOL_CALL_CLOSE not in answer:
        raise _Malformed
    block = first_tool_call_block(answer)
    try:
        return [json.loads(line) for line in block.split("\n")]
    except (ValueError, RecursionError):
        raise _Malformed from None


def _partial_score(gt_calls: tuple[dict, ...], predicted: list) -> tuple[float, float]:
    """(S, S_max) of ToolRL's partial credit for a prediction that is not an exact match.

    S = match_score(gt names, predicted names) + for each ground-truth call in order, the best
    score among unused predicted calls with its name, where a candidate scores
    match_score(gt keys, predicted keys) + #{gt key whose predicted value == gt value};
    only a candidate scoring above 0 is taken (ties: the first). S_max = 1 + sum(1 + |params|).
    """
    if any(not isinstance(call, dict) or "name" not in call for call in predicted):
        raise _Malformed
    try:
        score = match_score([c["name"] for c in gt_calls], [c["name"] for c in predicted])
    except TypeError:  # an unhashable predicted name
        raise _Malformed from None
    score_max = 1.0
    used: set[int] = set()
    for gt_call in gt_calls:
        gt_params = gt_call["parameters"]
        score_max += 1.0 + len(gt_params)
        best_index, best_score = -1, 0.0
        for index, call in enumerate(predicted):
            if index in used or call["name"] != gt_call["name"]:
                continue
            params = call.get("parameters")
            if not isinstance(params, dict):
                raise _Malformed
            candidate = match_score(list(gt_params), list(params)) + sum(
                1.0 for key, value in gt_params.items() if key in params and params[key] == value
            )
            if candidate > best_score:
                best_index, best_score = index, candidate
        if best_index >= 0:
            used.add(best_index)
            score += best_score
    return score, score_max


def correctness_reward(completion: object, ground_truth: object) -> float:
    """ToolRL tool-call correctness, in [-3.0, 3.0] (see the module docstring for every case)."""
    gt_calls = ground_truth_calls(_check_ground_truth_text(ground_truth))
    low, high = CORRECTNESS_RANGE
    if gt_calls is None:
        return 0.0
    if not isinstance(completion, str):
        return low
    try:
        predicted = _parse_predicted_calls(completion)
        if list(gt_calls) == predicted:
            return high
        score, score_max = _partial_score(gt_calls, predicted)
    except (_Malformed, RecursionError):
        return low
    # S <= S_max holds exactly; the clamp only absorbs floating-point rounding of the sum.
    return min(high, max(low, (high - low) * score / score_max + low))


def score_batch(
    completions, ground_truths, *, components, num_tokens=None, tests=None, length_limit=None, conditioned_length=False
) -> BatchResult:
    """Batch scorer for `TaskRewards`: per-row `format` and `correctness`."""
    functions = {"format": format_reward, "correctness": correctness_reward}
    return score_rowwise(functions, RANGES, components, completions, ground_truths)


TASK_REWARDS = TaskRewards(
    task="toolcall",
    ranges=RANGES,
    default_components=("format", "correctness"),
    scorer=score_batch,
    notes={
        "format": "1 if the stripped answer has the ground truth's think/tool_call/response shape, each tag once",
        "correctness": "ToolRL tool-call match: 6*S/S_max - 3; 0 if the ground truth calls no tool",
    },
)
