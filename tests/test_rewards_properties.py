"""Property tests: on random and adversarial model output every reward never raises, stays in
its declared range, and gives the same value twice.

Completions mix free unicode text with the fragments the parsers look for (tags, JSON pieces,
LaTeX), huge inputs (hundreds of KB), nested tags, broken JSON and deeply nested LaTeX.
"""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdpo_nemo.rewards import gsm8k, math_rewards, toolcall
from gdpo_nemo.rewards.length import length_reward
from gdpo_nemo.rewards.math_verifier import MathVerifier

FRAGMENTS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>",
    "<answer>", "</answer>", "\n", "\n\n", " ", "####", "\\boxed{", "{", "}", "\\frac{", "^{",
    "\\sqrt{", "\\left(", "\\right)", "$", "$$", "\\\\", "\\text{", "[", "]", ",", ":", "\"",
    '{"name": "get_weather", "parameters": {', '"city": "Paris"', '"days": 3', '"days": 3.0',
    '{"name": "get_weather"}', "NaN", "Infinity", "1e999", "-0", "\"\\ud800\"", "null", "true",
    "72", "-5", "\u0663", "\u00e9", "\U0001f600", "\x00", "\r\n", "\t",
]  # fmt: skip

HUGE = [
    "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>",
    "<tool_call>\n" + '{"name": "get_weather", "parameters": {"city": "Paris"}}\n' * 5_000 + "</tool_call>",
    "<think>" * 20_000 + "</think>\n" * 20_000,
    "<answer>" + "9" * 200_000 + "</answer>",
    "x" * 500_000,
    "</think>" + "\\boxed{" * 30_000 + "}" * 30_000,
]

completions = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=80).map("".join),
    st.integers(1, 5_000).map(lambda n: "<think>" * n + "x" + "</think>" * n),
    st.integers(1, 3_000).map(lambda n: "</think>\\boxed{" + "\\frac{1}{" * n + "2" + "}" * n + "}"),
    st.sampled_from(HUGE),
)

TOOL_GROUND_TRUTHS = [
    '<think>t</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}\n</tool_call>',
    '<tool_call>\n{"name": "f", "parameters": {}}\n{"name": "f", "parameters": {"a": [1, {"b": null}]}}\n</tool_call>\n<response>ok</response>',
    "<think>t</think>\n<response>Hello</response>",
    "<think>t</think>",
]

# Huge and slow-to-generate inputs are the point here, not a health problem.
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
FAST = settings(max_examples=1500, deadline=None, suppress_health_check=QUIET)


def assert_well_behaved(reward, completion, ground_truth, low, high):
    first = reward(completion, ground_truth)
    assert isinstance(first, float)
    assert low <= first <= high and not math.isnan(first)
    assert reward(completion, ground_truth) == first


@FAST
@given(completion=completions, ground_truth=st.sampled_from(TOOL_GROUND_TRUTHS))
def test_toolcall_format_never_raises_and_stays_in_range(completion, ground_truth):
    assert_well_behaved(toolcall.format_reward, completion, ground_truth, *toolcall.FORMAT_RANGE)


@FAST
@given(completion=completions, ground_truth=st.sampled_from(TOOL_GROUND_TRUTHS))
def test_toolcall_correctness_never_raises_and_stays_in_range(completion, ground_truth):
    assert_well_behaved(toolcall.correctness_reward, completion, ground_truth, *toolcall.CORRECTNESS_RANGE)


@FAST
@given(
    calls=st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["get_weather", "f", "g"])},
            optional={
                "parameters": st.one_of(
                    st.dictionaries(st.sampled_from(["city", "days", "a"]), st.recursive(
                        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                        max_leaves=10,
                    ), max_size=3),
                    st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
                )
            },
        ),
        min_size=1,
        max_size=5,
    ),
    ground_truth=st.sampled_from(TOOL_GROUND_TRUTHS),
)
def test_toolcall_correctness_on_json_shaped_calls_stays_in_range(calls, ground_truth):
    completion = "<think>x</think>\n<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"
    assert_well_behaved(toolcall.correctness_reward, completion, ground_truth, *toolcall.CORRECTNESS_RANGE)


@pytest.mark.parametrize("reward", [gsm8k.format_reward, gsm8k.correctness_reward, gsm8k.integer_reward])
@FAST
@given(completion=completions, ground_truth=st.sampled_from(["72", "#### 72", "-5", 18]))
def test_gsm8k_rewards_never_raise_and_stay_in_range(reward, completion, ground_truth):
    assert_well_behaved(reward, completion, ground_truth, 0.0, 1.0)


@FAST
@given(completion=completions)
def test_math_format_never_raises_and_stays_in_range(completion):
    assert_well_behaved(math_rewards.format_reward, completion, None, 0.0, 1.0)


@FAST
@given(completion=completions, num_tokens=st.one_of(st.none(), st.integers(-5, 10_000), st.floats()), correct=st.sampled_from([None, 0.0, 1.0]))
def test_length_never_raises_and_stays_in_range(completion, num_tokens, correct):
    first = length_reward(completion, 4000, num_tokens, correct)
    assert first in (0.0, 1.0)
    assert length_reward(completion, 4000, num_tokens, correct) == first


# math-verify costs ~0.2-2 ms per answer in its worker; inputs that run into the time limit
# cost the whole limit, so the hypothesis run keeps LaTeX nesting shallow and the deep and
# huge cases are listed once each below.
@pytest.fixture(scope="module")
def quick_verifier():
    verifier = MathVerifier(timeout_s=0.3)
    yield verifier
    verifier.close()


math_completions = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=40).map("".join),
    st.integers(1, 4).map(lambda n: "\\boxed{" + "\\frac{1}{" * n + "2" + "}" * n + "}"),
)
MATH_GROUND_TRUTHS = ["\\frac{1}{2}", "42", "x^2+1", "\\sqrt{2}"]


@settings(max_examples=1000, deadline=None, suppress_health_check=QUIET)
@given(completion=math_completions, ground_truth=st.sampled_from(MATH_GROUND_TRUTHS))
def test_math_correctness_never_raises_and_stays_in_range(quick_verifier, completion, ground_truth):
    timeouts = quick_verifier.timeouts
    first = math_rewards.correctness_reward(completion, ground_truth, verifier=quick_verifier)
    assert first in (0.0, 1.0)
    if quick_verifier.timeouts == timeouts:  # a verdict reached near the limit may flip to a time-out
        assert math_rewards.correctness_reward(completion, ground_truth, verifier=quick_verifier) == first


DEEP_AND_HUGE_LATEX = [
    "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",
    "\\boxed{" + "{" * 5_000 + "}" * 5_000 + "}",
    "\\boxed{" + "\\sqrt{" * 2_000 + "2" + "}" * 2_000 + "}",
    "$" + "x^{" * 1_000 + "2" + "}" * 1_000 + "$",
    "\\boxed{9^{9^{9^{9^{9}}}}}",
    "\\boxed{" + "1+" * 50_000 + "1}",
]


@pytest.mark.parametrize("completion", DEEP_AND_HUGE_LATEX, ids=range(len(DEEP_AND_HUGE_LATEX)))
def test_math_correctness_on_deep_and_huge_latex_is_zero_or_one(quick_verifier, completion):
    assert math_rewards.correctness_reward(completion, "42", verifier=quick_verifier) in (0.0, 1.0)
