"""The reward registry: `get_reward_set` and the `RewardSet` contract of docs/interfaces.md."""

import subprocess
import sys

import pytest

from gdpo_nemo.rewards import RewardDataError, get_reward_set

GSM8K_GOOD = "<think>r</think>\n<answer>7</answer>"
TOOL_GT = '<think>t</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>'


@pytest.mark.parametrize(
    ("task", "names"),
    [
        ("toolcall", ["format", "correctness"]),
        ("gsm8k", ["format", "correctness", "integer"]),
        ("math", ["correctness", "length"]),
    ],
)
def test_default_components_are_the_papers(task, names):
    assert get_reward_set(task).names == names


def test_ranges_are_declared_per_component():
    assert get_reward_set("toolcall").ranges == {"format": (0.0, 1.0), "correctness": (-3.0, 3.0)}


def test_names_keep_the_order_given():
    rs = get_reward_set("gsm8k", ["integer", "format"])
    assert rs.names == ["integer", "format"]
    assert list(rs.score(GSM8K_GOOD, "7")) == ["integer", "format"]


def test_optional_math_format_component():
    assert get_reward_set("math", ["correctness", "length", "format"]).ranges["format"] == (0.0, 1.0)


def test_unknown_task_names_the_accepted_tasks():
    with pytest.raises(ValueError, match="unknown reward task 'maths'.*toolcall, gsm8k, math, code"):
        get_reward_set("maths")


def test_unknown_component_names_the_accepted_ones():
    with pytest.raises(ValueError, match="unknown reward component 'length' for task 'gsm8k'; accepted: format, correctness, integer"):
        get_reward_set("gsm8k", ["length"])


def test_components_as_a_bare_string_is_refused():
    with pytest.raises(ValueError, match="list of names"):
        get_reward_set("gsm8k", "format")


def test_repeated_component_is_refused():
    with pytest.raises(ValueError, match="format more than once"):
        get_reward_set("gsm8k", ["format", "format"])


@pytest.mark.parametrize("limit", [0, -5, True, float("inf"), "4000"])
def test_bad_length_limit_is_refused(limit):
    with pytest.raises(ValueError, match="length_limit"):
        get_reward_set("math", length_limit=limit)


def test_sets_without_length_carry_no_limit():
    assert get_reward_set("gsm8k", length_limit=100).length_limit is None


def test_conditioned_length_flag_is_kept():
    assert get_reward_set("math", conditioned_length=True).conditioned_length is True


def test_score_batch_returns_one_list_per_component():
    rs = get_reward_set("gsm8k")
    scores = rs.score_batch([GSM8K_GOOD, "nope"], ["7", "7"])
    assert scores == {"format": [1.0, 0.0], "correctness": [1.0, 0.0], "integer": [1.0, 0.0]}


def test_score_batch_refuses_mismatched_lengths_by_name():
    with pytest.raises(ValueError, match="ground_truths has 1 entries but there are 2 completions"):
        get_reward_set("gsm8k").score_batch(["a", "b"], ["7"])
    with pytest.raises(ValueError, match="num_tokens has 3 entries"):
        get_reward_set("math").score_batch(["a"], ["1"], num_tokens=[1, 2, 3])


def test_data_error_lists_bad_rows_and_carries_the_rest_of_the_batch():
    rs = get_reward_set("toolcall")
    bad_gt = '<tool_call>\n{"name": "f", "parameters": {}}\n\n{"name": "g", "parameters": {}}\n</tool_call>'
    with pytest.raises(RewardDataError) as caught:
        rs.score_batch([TOOL_GT, TOOL_GT], [TOOL_GT, bad_gt])
    assert list(caught.value.rows) == [1]
    assert "blank line" in caught.value.rows[1]
    assert caught.value.partial == {"format": [1.0, 0.0], "correctness": [3.0, -3.0]}


def test_non_text_completion_earns_every_lowest_value():
    assert get_reward_set("toolcall").score(None, TOOL_GT) == {"format": 0.0, "correctness": -3.0}


def test_importing_the_reward_layer_does_not_import_torch():
    code = "import sys, gdpo_nemo.rewards as r; r.get_reward_set('math'); r.get_reward_set('toolcall'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
