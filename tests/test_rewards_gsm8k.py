"""GSM8K quick-check rewards: format, correctness, integer, with the authors' edge semantics."""

import pytest

from gdpo_nemo.rewards import RewardDataError
from gdpo_nemo.rewards.gsm8k import correctness_reward, extract_answer, format_reward, ground_truth_answer, integer_reward

GOOD = "<think>6 * 12 = 72</think>\n<answer>72</answer>"


def test_format_accepts_think_then_answer():
    assert format_reward(GOOD) == 1.0


def test_format_accepts_one_trailing_newline_like_python_dollar():
    assert format_reward(GOOD + "\n") == 1.0
    assert format_reward(GOOD + "\n\n") == 0.0


def test_format_runs_on_raw_text_so_leading_space_fails():
    assert format_reward(" " + GOOD) == 0.0


def test_format_needs_the_newline_between_blocks():
    assert format_reward("<think>r</think><answer>72</answer>") == 0.0


def test_format_rejects_two_answer_tags():
    assert format_reward("<think>r</think>\n<answer>1</answer><answer>72</answer>") == 0.0


def test_format_of_non_text_is_zero():
    assert format_reward(None) == 0.0


def test_extract_answer_takes_the_last_answer_tag():
    assert extract_answer("<answer>1</answer> then <answer> 72 </answer> tail") == "72"


def test_extract_answer_without_tag_is_whole_text_stripped():
    assert extract_answer("  72\n") == "72"


def test_extract_answer_unclosed_tag_still_counts():
    assert extract_answer("<answer> 72") == "72"


def test_correctness_exact_string_match():
    assert correctness_reward(GOOD, "72") == 1.0
    assert correctness_reward("<answer>72.0</answer>", "72") == 0.0


def test_correctness_ground_truth_is_not_stripped():
    assert correctness_reward(GOOD, " 72") == 0.0


def test_correctness_accepts_a_full_gsm8k_solution_as_ground_truth():
    assert ground_truth_answer("Half of 144 is 72.\n#### 72") == "72"
    assert correctness_reward(GOOD, "Half of 144 is 72.\n#### 72") == 1.0


def test_correctness_accepts_an_integer_ground_truth():
    assert correctness_reward(GOOD, 72) == 1.0


def test_integer_is_str_isdigit():
    assert integer_reward("<answer>72</answer>") == 1.0
    assert integer_reward("<answer>-5</answer>") == 0.0
    assert integer_reward("<answer>7.5</answer>") == 0.0
    assert integer_reward("<answer></answer>") == 0.0
    assert integer_reward("<answer>\u0663</answer>") == 1.0  # ARABIC-INDIC DIGIT THREE


def test_non_text_completion_earns_zero_correctness():
    assert correctness_reward(None, "72") == 0.0


@pytest.mark.parametrize("bad", [None, "", "#### ", 7.5, ["72"]])
def test_unusable_ground_truth_is_a_data_error(bad):
    with pytest.raises(RewardDataError, match="gsm8k ground_truth"):
        correctness_reward(GOOD, bad)
