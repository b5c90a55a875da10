"""Math rewards: math-verify correctness under a time limit, length (plain and conditioned), format."""

import os
import signal
import threading
import time

import pytest

from gdpo_nemo.rewards import RewardDataError, get_reward_set
from gdpo_nemo.rewards import math_verifier
from gdpo_nemo.rewards.math_rewards import boxed_content, correctness_reward, format_reward
from gdpo_nemo.rewards.math_verifier import MathVerifier

# A tower math-verify/sympy keeps expanding for many seconds: a practical hang.
HANGING = "\\boxed{9^{9^{9^{9^{9}}}}}"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout_s=0.5)
    yield v
    v.close()


def _worker_pid(v):
    (worker,) = v._live
    return worker.process.pid


# ---------------------------------------------------------------- correctness


def test_correctness_equal_values_in_other_notation(verifier):
    assert correctness_reward("so the answer is \\boxed{0.5}", "\\frac{1}{2}", verifier=verifier) == 1.0


def test_correctness_wrong_value(verifier):
    assert correctness_reward("\\boxed{3}", "2", verifier=verifier) == 0.0


def test_correctness_no_answer_in_text(verifier):
    assert correctness_reward("I do not know.", "2", verifier=verifier) == 0.0


def test_correctness_numeric_ground_truth(verifier):
    assert correctness_reward("The total is \\boxed{42}.", 42, verifier=verifier) == 1.0


def test_correctness_hanging_latex_scores_zero_within_the_limit(verifier):
    start = time.monotonic()
    assert correctness_reward(HANGING, "1", verifier=verifier) == 0.0
    assert time.monotonic() - start < 0.5 + math_verifier.GRACE_S


def test_time_limit_works_off_the_main_thread(verifier):
    results = []
    thread = threading.Thread(target=lambda: results.append(verifier.check("1", HANGING)))
    thread.start()
    thread.join(timeout=10)
    assert results == [math_verifier.TIMEOUT]


def test_stuck_worker_is_killed_after_the_grace_and_replaced(verifier):
    verifier.check("1", "\\boxed{1}")
    stuck = _worker_pid(verifier)
    os.kill(stuck, signal.SIGSTOP)  # frozen: its own timer cannot fire either
    restarts = verifier.restarts
    assert verifier.check("1", "\\boxed{1}") == math_verifier.TIMEOUT
    assert verifier.restarts == restarts + 1
    assert verifier.check("1", "\\boxed{1}") == math_verifier.CORRECT
    assert _worker_pid(verifier) != stuck


def test_dead_worker_is_replaced_on_next_call(verifier):
    verifier.check("1", "\\boxed{1}")
    os.kill(_worker_pid(verifier), signal.SIGKILL)
    time.sleep(0.1)
    assert verifier.check("2", "\\boxed{2}") == math_verifier.CORRECT


def test_batch_keeps_order_across_several_workers():
    with_two = MathVerifier(timeout_s=2.0, num_workers=2)
    try:
        golds = ["1", "2", "3", "4"]
        predictions = ["\\boxed{1}", "\\boxed{5}", "\\boxed{3}", "no"]
        assert with_two.check_batch(golds, predictions) == ["correct", "wrong", "correct", "wrong"]
    finally:
        with_two.close()


@pytest.mark.parametrize("bad", [{"timeout_s": 0}, {"num_workers": 0}, {"memory_limit_mb": -1}])
def test_verifier_rejects_bad_settings_by_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        MathVerifier(**bad)


def test_ground_truth_math_verify_cannot_read_is_a_data_error(verifier):
    with pytest.raises(RewardDataError, match="extracts no answer"):
        correctness_reward("\\boxed{1}", "}", verifier=verifier)


def test_empty_ground_truth_is_a_data_error(verifier):
    with pytest.raises(RewardDataError, match="empty"):
        correctness_reward("\\boxed{1}", "  ", verifier=verifier)


# ---------------------------------------------------------------- length through the reward set


def test_length_counts_caller_tokens_against_the_limit():
    rs = get_reward_set("math", ["length"], length_limit=10)
    assert rs.score_batch(["a", "b"], ["1", "1"], num_tokens=[10, 11]) == {"length": [1.0, 0.0]}


def test_length_without_token_counts_uses_four_characters_per_token():
    rs = get_reward_set("math", ["length"], length_limit=2)
    assert rs.score_batch(["x" * 8, "x" * 9], ["1", "1"]) == {"length": [1.0, 0.0]}


def test_conditioned_length_pays_only_short_and_correct():
    rs = get_reward_set("math", length_limit=100, conditioned_length=True)
    scores = rs.score_batch(["\\boxed{2}", "\\boxed{3}", "\\boxed{2}"], ["2", "2", "2"], num_tokens=[5, 5, 500])
    assert scores == {"correctness": [1.0, 0.0, 1.0], "length": [1.0, 0.0, 0.0]}


def test_plain_length_ignores_correctness():
    rs = get_reward_set("math", length_limit=100)
    assert rs.score("\\boxed{3}", "2", num_tokens=5) == {"correctness": 0.0, "length": 1.0}


def test_math_set_defaults_to_the_papers_4000_token_limit():
    assert get_reward_set("math").length_limit == 4000


# ---------------------------------------------------------------- format


def test_format_think_then_boxed_answer():
    assert format_reward("<think>work</think>\nSo \\boxed{42}.") == 1.0


def test_format_opening_think_may_live_in_the_prompt():
    assert format_reward("work...</think>\n\\boxed{x+1}") == 1.0


def test_format_needs_exactly_one_closing_think():
    assert format_reward("a</think>b</think>\\boxed{1}") == 0.0
    assert format_reward("\\boxed{1}") == 0.0


def test_format_needs_the_box_after_the_reasoning():
    assert format_reward("<think>\\boxed{1}</think> done") == 0.0


def test_format_rejects_unclosed_or_empty_box():
    assert format_reward("</think>\\boxed{\\frac{1}{2}") == 0.0
    assert format_reward("</think>\\boxed{  }") == 0.0


def test_format_rejects_think_after_the_answer():
    assert format_reward("</think>\\boxed{1}<think>") == 0.0


def test_boxed_content_balances_nested_braces():
    assert boxed_content("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
