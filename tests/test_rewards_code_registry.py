"""The registry's code task: delegation to gdpo_nemo.rewards.code, data errors, and `score` rows.

The programs are tiny and honest; the sandbox's own hostile-program tests live with it.
"""

import json

import pytest

from gdpo_nemo.cli import main
from gdpo_nemo.rewards import RewardDataError, get_reward_set

DOUBLE = "Read n and print 2n.\n```python\nprint(2 * int(input()))\n```"
CRASH = "```python\nraise SystemExit(int('x'))\n```"
TESTS = {"inputs": ["1\n", "5\n"], "outputs": ["2\n", "10\n"]}


def test_code_defaults_are_pass_length_bug_with_conditioned_length_of_4000():
    rs = get_reward_set("code")
    assert (rs.names, rs.length_limit, rs.conditioned_length) == (["pass", "length", "bug"], 4000, True)
    assert rs.ranges == {"pass": (0.0, 1.0), "length": (0.0, 1.0), "bug": (0.0, 1.0)}


def test_code_needs_tests():
    with pytest.raises(ValueError, match="task 'code' needs tests"):
        get_reward_set("code").score_batch([DOUBLE])


def test_code_scores_in_the_sandbox_without_a_ground_truth():
    scores = get_reward_set("code").score_batch([DOUBLE, CRASH], tests=[TESTS, TESTS])
    assert scores == {"pass": [1.0, 0.0], "length": [1.0, 0.0], "bug": [1.0, 0.0]}


def test_non_text_completion_earns_the_lowest_and_its_tests_are_still_checked():
    with pytest.raises(RewardDataError) as caught:
        get_reward_set("code").score_batch([None, 7], tests=[TESTS, {"inputs": ["1"]}])
    assert list(caught.value.rows) == [1]
    assert caught.value.partial == {"pass": [0.0, 0.0], "length": [0.0, 0.0], "bug": [0.0, 0.0]}


def test_score_cli_code_rows_use_tests_and_report_broken_ones(tmp_path, capsys):
    rows = [
        {"completion": DOUBLE, "tests": TESTS, "num_tokens": 12},
        {"completion": DOUBLE, "tests": {"inputs": ["1\n"], "outputs": []}},
        {"completion": DOUBLE},
    ]
    source = tmp_path / "code.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["score", "--task", "code", str(source)]) == 1
    err = capsys.readouterr().err
    assert "line 2: tests: has 1 inputs but 0 outputs" in err
    assert "line 3: missing 'tests'" in err
    scored = [json.loads(line) for line in (tmp_path / "code.scored.jsonl").read_text().splitlines()]
    assert scored[0]["rewards"] == {"pass": 1.0, "length": 1.0, "bug": 1.0}
    assert scored[1]["rewards"] == {"pass": 0.0, "length": 0.0, "bug": 0.0}
