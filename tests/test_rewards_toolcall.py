"""ToolRL tool-calling rewards: every case of `format` and every branch of `correctness`.

Partial scores are worked by hand: S = name match + per gt call (key match + equal values),
S_max = 1 + sum over gt calls of (1 + number of gt parameters), reward = 6 * S / S_max - 3.
"""

import json

import pytest

from gdpo_nemo.rewards import RewardDataError
from gdpo_nemo.rewards.toolcall import correctness_reward, format_reward, match_score


def call(name, **parameters):
    return {"name": name, "parameters": parameters}


def tool_answer(*calls, think="reasoning", response=None):
    text = f"<think>{think}</think>\n<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"
    return text + (f"\n<response>{response}</response>" if response is not None else "")


GT_ONE = tool_answer(call("get_weather", city="Paris", days=3))
GT_RESPONSE_ONLY = "<think>no tool needed</think>\n<response>Hello!</response>"


# ---------------------------------------------------------------- format


def test_format_tool_call_shape_matches_exactly():
    assert format_reward(tool_answer(call("f", a=1)), GT_ONE) == 1.0


def test_format_strips_surrounding_whitespace_first():
    assert format_reward("\n  " + tool_answer(call("f")) + "\n\n", GT_ONE) == 1.0


def test_format_needs_think_block_at_start():
    assert format_reward("<tool_call>\n{}\n</tool_call>", GT_ONE) == 0.0


def test_format_rejects_a_second_tool_call_tag():
    text = tool_answer(call("f")) + "\n<tool_call>\n{}\n</tool_call>"
    assert format_reward(text, GT_ONE) == 0.0


def test_format_rejects_text_after_the_last_tag():
    assert format_reward(tool_answer(call("f")) + " trailing words", GT_ONE) == 0.0


def test_format_shape_comes_from_the_ground_truth_response_only():
    assert format_reward(GT_RESPONSE_ONLY, GT_RESPONSE_ONLY) == 1.0
    assert format_reward(tool_answer(call("f")), GT_RESPONSE_ONLY) == 0.0


def test_format_tool_call_and_response_shape():
    gt = tool_answer(call("f"), response="done")
    assert format_reward(tool_answer(call("g"), response="ok"), gt) == 1.0
    assert format_reward(tool_answer(call("g")), gt) == 0.0


def test_format_neither_shape_is_a_think_block_alone():
    gt = "<think>just thinking</think>"
    assert format_reward("<think>anything</think>", gt) == 1.0
    assert format_reward("<think>a</think>\n<response>b</response>", gt) == 0.0


def test_format_of_non_text_completion_is_zero():
    assert format_reward(None, GT_ONE) == 0.0


# ---------------------------------------------------------------- correctness: whole-answer cases


def test_correctness_is_zero_when_ground_truth_calls_no_tool():
    assert correctness_reward("anything at all", GT_RESPONSE_ONLY) == 0.0
    assert correctness_reward(tool_answer(call("f")), GT_RESPONSE_ONLY) == 0.0


def test_correctness_exact_match_is_three():
    assert correctness_reward(tool_answer(call("get_weather", days=3, city="Paris")), GT_ONE) == 3.0


def test_correctness_compares_values_after_json_loads_so_250_point_0_equals_250():
    gt = tool_answer(call("pay", amount=250))
    assert correctness_reward(tool_answer(call("pay", amount=250.0)), gt) == 3.0


def test_correctness_zero_equals_false_as_in_python():
    gt = tool_answer(call("toggle", on=0))
    assert correctness_reward(tool_answer(call("toggle", on=False)), gt) == 3.0


def test_correctness_is_independent_of_format():
    no_think = "<tool_call>\n" + json.dumps(call("get_weather", city="Paris", days=3)) + "\n</tool_call> and more"
    assert format_reward(no_think, GT_ONE) == 0.0
    assert correctness_reward(no_think, GT_ONE) == 3.0


def test_correctness_missing_opening_tag_is_minus_three():
    assert correctness_reward('{"name": "get_weather"}\n</tool_call>', GT_ONE) == -3.0


def test_correctness_missing_closing_tag_is_minus_three():
    assert correctness_reward("<tool_call>\n" + json.dumps(call("get_weather", city="Paris", days=3)), GT_ONE) == -3.0


def test_correctness_any_non_json_line_is_minus_three():
    text = "<tool_call>\n" + json.dumps(call("get_weather", city="Paris", days=3)) + "\n{broken\n</tool_call>"
    assert correctness_reward(text, GT_ONE) == -3.0


def test_correctness_blank_line_in_prediction_is_minus_three():
    text = "<tool_call>\n" + json.dumps(call("a")) + "\n\n" + json.dumps(call("b")) + "\n</tool_call>"
    assert correctness_reward(text, GT_ONE) == -3.0


def test_correctness_reads_only_the_first_tool_call_block():
    text = tool_answer(call("other")) + "\n" + tool_answer(call("get_weather", city="Paris", days=3))
    # first block: one call "other" -> names 0, no same-name candidate: S = 0 -> -3 + 0
    assert correctness_reward(text, GT_ONE) == -3.0
    text = tool_answer(call("get_weather", city="Paris", days=3)) + "\n" + tool_answer(call("other"))
    assert correctness_reward(text, GT_ONE) == 3.0


def test_correctness_call_that_is_not_an_object_is_minus_three():
    assert correctness_reward("<tool_call>\n[1, 2]\n</tool_call>", GT_ONE) == -3.0


def test_correctness_call_without_name_is_minus_three():
    assert correctness_reward('<tool_call>\n{"parameters": {"city": "Paris"}}\n</tool_call>', GT_ONE) == -3.0


def test_correctness_unhashable_name_is_minus_three():
    assert correctness_reward('<tool_call>\n{"name": ["get_weather"], "parameters": {}}\n</tool_call>', GT_ONE) == -3.0


def test_correctness_gt_named_call_without_parameters_makes_whole_answer_minus_three():
    text = tool_answer(call("get_weather", city="Paris", days=3), {"name": "get_weather"})
    assert correctness_reward(text, GT_ONE) == -3.0


def test_correctness_other_named_call_without_parameters_is_only_partial():
    # names [get_weather] vs [get_weather, noop]: 1/(1+2-1) = 0.5; gt call: keys 1 + values 2 = 3
    # S = 3.5, S_max = 1 + (1 + 2) = 4 -> 6 * 3.5 / 4 - 3 = 2.25
    text = tool_answer(call("get_weather", city="Paris", days=3), {"name": "noop"})
    assert correctness_reward(text, GT_ONE) == pytest.approx(2.25)


def test_correctness_non_text_completion_is_minus_three():
    assert correctness_reward(12, GT_ONE) == -3.0


# ---------------------------------------------------------------- correctness: partial credit


def test_partial_missing_parameter_and_float_value():
    # gt f(a=1, b="x"), pred f(a=1.0): names 1; keys [a,b] vs [a] = 1/2; values a -> 1
    # S = 2.5, S_max = 1 + (1 + 2) = 4 -> 6 * 2.5 / 4 - 3 = 0.75
    gt = tool_answer(call("f", a=1, b="x"))
    assert correctness_reward(tool_answer(call("f", a=1.0)), gt) == pytest.approx(0.75)


def test_partial_string_three_is_not_integer_three():
    # names 1; keys 1; values 0 ("3" != 3): S = 2, S_max = 3 -> 6 * 2 / 3 - 3 = 1
    gt = tool_answer(call("f", n=3))
    assert correctness_reward(tool_answer(call("f", n="3")), gt) == pytest.approx(1.0)


def test_partial_list_values_compare_in_order():
    # names 1; keys 1; values 0: S = 2, S_max = 3 -> 1
    gt = tool_answer(call("f", ids=[1, 2]))
    assert correctness_reward(tool_answer(call("f", ids=[2, 1])), gt) == pytest.approx(1.0)


def test_partial_extra_predicted_call():
    # names [f] vs [f, g]: 1/2; f: keys 1 + values 1 = 2: S = 2.5, S_max = 3 -> 2
    gt = tool_answer(call("f", a=1))
    assert correctness_reward(tool_answer(call("f", a=1), call("g", x=1)), gt) == pytest.approx(2.0)


def test_partial_wrong_tool_name_scores_lowest_partial():
    # names 0; no candidate with name f: S = 0 -> -3
    gt = tool_answer(call("f", a=1))
    assert correctness_reward(tool_answer(call("g", a=1)), gt) == -3.0


def test_partial_name_match_is_multiset_jaccard():
    # gt [f, f, g] vs pred [f, h]: intersection 1, union 3 + 2 - 1 = 4 -> 0.25
    assert match_score(["f", "f", "g"], ["f", "h"]) == 0.25
    assert match_score(["a"], ["a"]) == 1.0
    assert match_score([], ["a"]) == 0.0


def test_partial_matching_is_greedy_in_ground_truth_order_not_optimal():
    # gt [f(a=1), f(a=1,b=2)], pred [f(a=1,b=2), f(c=3)]
    # gt0 takes pred0 (keys 1/2 + values 1 = 1.5; pred1 scores 0); gt1 gets only pred1 (0, not taken)
    # names equal -> 1: S = 2.5, S_max = 1 + 2 + 3 = 6 -> 6 * 2.5 / 6 - 3 = -0.5 (optimal would give 1)
    gt = tool_answer(call("f", a=1), call("f", a=1, b=2))
    assert correctness_reward(tool_answer(call("f", a=1, b=2), call("f", c=3)), gt) == pytest.approx(-0.5)


def test_partial_zero_scoring_candidate_stays_free_for_later_calls():
    # gt [f(a=1), f(b=2)], pred [f(b=2)]: gt0 vs pred0 scores 0 (not taken); gt1 takes it: 1 + 1
    # names [f,f] vs [f]: 1/2: S = 2.5, S_max = 1 + 2 + 2 = 5 -> 6 * 2.5 / 5 - 3 = 0
    gt = tool_answer(call("f", a=1), call("f", b=2))
    assert correctness_reward(tool_answer(call("f", b=2)), gt) == pytest.approx(0.0)


def test_partial_ties_go_to_the_first_predicted_call():
    # gt [f(a=1), f(a=2)], pred [f(a=9), f(a=9)]: each gt call takes one (keys 1, values 0)
    # names 1: S = 3, S_max = 5 -> 6 * 3 / 5 - 3 = 0.6
    gt = tool_answer(call("f", a=1), call("f", a=2))
    assert correctness_reward(tool_answer(call("f", a=9), call("f", a=9)), gt) == pytest.approx(0.6)


# ---------------------------------------------------------------- ground-truth data errors


def test_ground_truth_blank_line_between_calls_is_a_data_error():
    gt = "<tool_call>\n" + json.dumps(call("a")) + "\n\n" + json.dumps(call("b")) + "\n</tool_call>"
    with pytest.raises(RewardDataError, match="blank line"):
        correctness_reward(tool_answer(call("a")), gt)


def test_ground_truth_without_parameters_is_a_data_error():
    with pytest.raises(RewardDataError, match='"parameters"'):
        correctness_reward("x", '<tool_call>\n{"name": "f"}\n</tool_call>')


def test_ground_truth_that_is_not_text_is_a_data_error():
    with pytest.raises(RewardDataError, match="must be a string"):
        format_reward("x", None)
