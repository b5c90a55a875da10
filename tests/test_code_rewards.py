"""Specification of gdpo_nemo.rewards.code: program extraction, the test formats, and the
pass / bug / conditioned-length rewards computed in the sandbox."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sandbox_support import pool, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.rewards.base import RewardDataError
from gdpo_nemo.rewards.code import CODE_RANGES, extract_program, normalize_output, output_matches, parse_tests, score_code_batch
from gdpo_nemo.sandbox import Limits

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_TESTS = {"inputs": ["1 2\n", "5 5\n", "0 0\n"], "outputs": ["3\n", "10\n", "0\n"]}


def fenced(source: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{source}```\n"


def score(completions, tests, pool, components=("pass", "bug", "length"), **kwargs):
    kwargs.setdefault("length_limit", 4000)
    return score_code_batch(list(completions), list(tests), components=list(components), pool=pool, **kwargs)


def test_the_declared_ranges():
    assert CODE_RANGES == {"pass": (0.0, 1.0), "bug": (0.0, 1.0), "length": (0.0, 1.0)}


# --- extract_program -----------------------------------------------------------------------


def test_the_last_python_block_is_the_program():
    text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```\n```\nplain\n```"
    assert extract_program(text) == "print(2)"


def test_an_untagged_block_is_used_when_no_block_is_tagged_python():
    assert extract_program("```\nprint(1)\n```\n```cpp\nint main(){}\n```") == "print(1)"


@pytest.mark.parametrize("tag", ["python", "Python", "py", "python3"])
def test_python_tags_in_any_case(tag):
    assert extract_program(fenced("print(1)\n", tag)) == "print(1)"


def test_only_the_text_after_the_last_think_end_is_read():
    text = "<think>\ndraft:\n```python\nprint('draft')\n```\n</think>\nfinal:\n```python\nprint('final')\n```"
    assert extract_program(text) == "print('final')"
    assert extract_program("<think>\n```python\nprint(1)\n```\n</think>\nno code after thinking") is None


def test_unfinished_reasoning_has_no_program():
    assert extract_program("<think>\nlet me try\n```python\nprint(1)\n```\nhmm") is None


@pytest.mark.parametrize(
    "text",
    ["no code at all", "```python\nprint(1)\n", "```python\n   \n```", "```cpp\nint main(){}\n```", "inline ```print(1)``` only", ""],
    ids=["prose", "unclosed", "blank", "other-language", "inline", "empty"],
)
def test_texts_without_a_usable_block_have_no_program(text):
    assert extract_program(text) is None


def test_longer_fences_close_only_with_as_many_backticks():
    assert extract_program("````python\nprint('```')\n```\nprint(2)\n````") == "print('```')\n```\nprint(2)"


@given(st.one_of(st.text(), st.none(), st.integers(), st.binary()))
def test_extraction_never_raises(text):
    result = extract_program(text)
    assert result is None or isinstance(result, str)


# --- output comparison and the test formats ------------------------------------------------


def test_trailing_whitespace_and_trailing_blank_lines_do_not_matter():
    assert normalize_output("1 2  \r\n3\t\n\n\n") == normalize_output("1 2\n3") == ["1 2", "3"]


_OUTPUT_TEXT = st.text(alphabet=st.sampled_from(["1", "2", " ", "\t", "\n", "\r", "\x0b", "\u2028", "\x85", "a"]), max_size=40)


@given(_OUTPUT_TEXT, _OUTPUT_TEXT)
def test_output_matches_is_the_comparison_of_normalized_lines(output, expected_text):
    expected = normalize_output(expected_text)
    assert output_matches(output, expected) == (normalize_output(output) == expected)
    assert output_matches(expected_text, expected)


def test_a_correct_answer_followed_by_a_flood_of_newlines_passes_and_any_later_text_fails():
    """The flood's cost (benchmarks/bench_rewards.py: judging 8 MiB of newlines against one
    long line) is the benchmark's; its verdicts are the comparison's."""
    flood = "\n" * (8 << 20)
    assert output_matches("3" + flood, ["3"]) and output_matches("3\r\n \t" + flood, ["3"])
    assert not output_matches("3" + flood + "4", ["3"]) and not output_matches(flood + "3", ["3"])
    assert output_matches(flood, []) and not output_matches(flood + ".", [])


def test_leading_and_inner_whitespace_matter():
    assert normalize_output(" 1") != normalize_output("1")
    assert normalize_output("1  2") != normalize_output("1 2")


def test_the_apps_inputs_outputs_form_and_its_json_text_parse_alike():
    as_dict = parse_tests(ADD_TESTS)
    assert parse_tests(json.dumps(ADD_TESTS)) == as_dict == parse_tests({"input_output": json.dumps(ADD_TESTS)})
    assert [(t.case.stdin, t.expected) for t in as_dict] == [("1 2\n", ["3"]), ("5 5\n", ["10"]), ("0 0\n", ["0"])]


def test_lists_of_lines_are_joined():
    [test] = parse_tests({"inputs": [["1 2", "3"]], "outputs": [["3", "3"]]})
    assert (test.case.stdin, test.expected) == ("1 2\n3\n", ["3", "3"])


def test_the_list_of_pairs_form():
    [test] = parse_tests([{"input": "4\n", "output": "16\n"}])
    assert (test.case.kind, test.case.stdin, test.expected) == ("stdio", "4\n", ["16"])


def test_the_call_based_forms_of_apps_and_eurus():
    apps = parse_tests({"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]})
    eurus = parse_tests(json.dumps({"fn_name": "add", "inputs": ["1\n2"], "outputs": ["3"]}))
    assert [(t.case.call, list(t.case.args), t.expected) for t in apps + eurus] == [("add", [1, 2], [3]), ("add", [1, 2], 3)]


def test_assert_statements_send_only_their_calls_to_the_sandbox():
    tests = parse_tests(["assert f(1) == 2", "assert sorted(g([3, 1])) == [1, 3]"])
    assert [(t.case.kind, t.case.evaluate) for t in tests] == [("eval", ("f(1)",)), ("eval", ("g([3, 1])",))]


@pytest.mark.parametrize(
    ("statement", "values", "holds"),
    [
        ("assert f(1) == 2", [2], True),
        ("assert f(1) == 2", [2.0], True),
        ("assert f(1) == (1, 2)", [[1, 2]], False),  # Python's ==: a list is not a tuple
        ("assert set(f(1)) == set((4, 5))", [{4, 5}], True),
        ("assert math.isclose(area(2), 12.56, rel_tol=0.001)", [12.566], True),
        ("assert abs(f(2) - 3.5) < 1e-6", [3.5000001], True),
        ("assert abs(f(2) - 3.5) < 1e-6", ["3.5"], False),
        ("assert not is_prime(8)", [False], True),
        ("assert 0 < f(3) < 10", [10], False),
        ("assert f(2) is None", [None], True),
        ("assert f(1) == g(1)", [[1], [1]], True),
        ("assert f(1) == 2 and f(2) == 4", [2, 5], False),
        ("assert f(1) == float('inf')", [float("inf")], True),
        ("assert isinstance(f(1), int)", ["1"], False),
        ("assert len(f(1)) == 3", [[1, 2, 3]], True),
    ],
)
def test_assert_statements_are_judged_in_the_harness_as_python_would(statement, values, holds):
    [test] = parse_tests([statement])
    assert test.expected.judge(values) is holds


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("assert f(1) == math.sqrt(2)", "cannot compute without running it"),
        ("assert all(f(x) == x for x in range(3))", "cannot be judged outside the program"),
        ("assert 1 == 1", "never calls the program"),
        ("x = f(1)", "exactly one assert statement"),
        ("assert f(1) is 3", "`is` with something other than None/True/False"),
    ],
)
def test_assert_statements_the_harness_cannot_judge_alone_are_refused(statement, message):
    with pytest.raises(ValueError, match=message):
        parse_tests([statement])


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ({"inputs": ["1"], "outputs": []}, "1 inputs but 0 outputs"),
        ({"inputs": [], "outputs": []}, "no test case"),
        ("not json", "not JSON"),
        ({"questions": []}, '"inputs" and "outputs"'),
        ({"fn_name": "1x", "inputs": [[1]], "outputs": [1]}, "identifier"),
        ({"fn_name": "f", "inputs": ["{bad"], "outputs": ["1"]}, "JSON argument per line"),
        (["assert ("], "does not parse"),
        (42, "tests must be"),
    ],
)
def test_malformed_tests_are_refused_with_the_reason(tests, message):
    with pytest.raises(ValueError, match=message):
        parse_tests(tests)


# --- the rewards ---------------------------------------------------------------------------


def test_a_correct_short_program_earns_every_reward(pool):
    assert score([fenced(ADD)], [ADD_TESTS], pool) == {"pass": [1.0], "bug": [1.0], "length": [1.0]}


def test_pass_is_the_fraction_of_tests_passed_and_a_wrong_answer_is_not_a_bug(pool):
    wrong_on_zero = "a, b = map(int, input().split())\nprint(a + b if a else 7)\n"
    scores = score([fenced(wrong_on_zero)], [ADD_TESTS], pool)
    assert scores == {"pass": [2 / 3], "bug": [1.0], "length": [0.0]}  # length needs every test passed


def test_a_runtime_error_on_one_case_is_a_bug_and_the_other_cases_still_count(pool):
    crashes_on_zero = "a, b = map(int, input().split())\nprint(a + b + 0 // a)\n"
    assert score([fenced(crashes_on_zero)], [ADD_TESTS], pool, ["pass", "bug"]) == {"pass": [2 / 3], "bug": [0.0]}


def test_a_compile_error_earns_nothing(pool):
    assert score([fenced("print(1")], [ADD_TESTS], pool) == {"pass": [0.0], "bug": [0.0], "length": [0.0]}


def test_no_program_earns_nothing_even_when_short(pool):
    assert score(["I cannot solve this."], [ADD_TESTS], pool) == {"pass": [0.0], "bug": [0.0], "length": [0.0]}


def test_a_timeout_is_a_bug_and_the_cases_after_it_count_as_failed(pool):
    slow_on_five = "import time\na, b = map(int, input().split())\nif a == 5:\n    time.sleep(30)\nprint(a + b)\n"
    scores = score([fenced(slow_on_five)], [ADD_TESTS], pool, ["pass", "bug"], limits=Limits(cpu_seconds=1, wall_seconds=1))
    assert scores == {"pass": [1 / 3], "bug": [0.0]}  # case 3 would pass but is not run


def test_length_is_conditioned_on_passing_every_test(pool):
    long_correct = fenced(ADD) + "x" * 400
    scores = score([fenced(ADD), long_correct], [ADD_TESTS] * 2, pool, ["length"], length_limit=50)
    assert scores == {"length": [1.0, 0.0]}


def test_token_counts_given_by_the_caller_decide_length(pool):
    scores = score([fenced(ADD)] * 2, [ADD_TESTS] * 2, pool, ["length"], length_limit=100, num_tokens=[100, 101])
    assert scores == {"length": [1.0, 0.0]}


def test_output_with_trailing_spaces_still_passes(pool):
    spaced = "a, b = map(int, input().split())\nprint(a + b, end='  \\n\\n')\n"
    assert score([fenced(spaced)], [ADD_TESTS], pool, ["pass"]) == {"pass": [1.0]}


def test_call_based_tests_in_both_the_apps_and_the_eurus_form(pool):
    source = "def add(a, b):\n    return a + b\n"
    apps = {"fn_name": "add", "inputs": [[1, 2], [2, 2]], "outputs": [[3], [5]]}
    eurus = json.dumps({"fn_name": "add", "inputs": ["1\n2", "2\n2"], "outputs": ["3", "4"]})
    assert score([fenced(source)] * 2, [apps, eurus], pool, ["pass", "bug"]) == {"pass": [0.5, 1.0], "bug": [1.0, 1.0]}


def test_a_leetcode_solution_class_is_called(pool):
    source = "class Solution:\n    def rev(self, xs: List[int]) -> List[int]:\n        return xs[::-1]\n"
    tests = {"fn_name": "rev", "inputs": [[[1, 2, 3]]], "outputs": [[3, 2, 1]]}
    assert score([fenced(source)], [tests], pool, ["pass"]) == {"pass": [1.0]}


def test_a_call_answer_may_match_an_apps_one_item_wrapper_but_never_the_first_of_several(pool):
    source = "def pick(x):\n    return x\n"
    # pick(5) against [5] (APPS's wrapper of 5) passes; pick(0) against [0, 1] does not.
    apps = {"fn_name": "pick", "inputs": [[5], [0]], "outputs": [[5], [0, 1]]}
    eurus = json.dumps({"fn_name": "pick", "inputs": ["5", "0"], "outputs": ["[5]", "[0, 1]"]})
    assert score([fenced(source)] * 2, [apps, eurus], pool, ["pass"]) == {"pass": [0.5, 0.0]}


def test_assert_tests_a_failed_assert_is_a_wrong_answer_not_a_bug(pool):
    source = "def double(x):\n    return 2 * x if x < 3 else 0\n"
    tests = ["assert double(1) == 2", "assert double(2) == 4", "assert double(3) == 6", "assert double(4) == 8"]
    assert score([fenced(source)], [tests], pool, ["pass", "bug"]) == {"pass": [0.5], "bug": [1.0]}


def test_the_components_come_back_in_the_order_asked(pool):
    assert list(score([fenced(ADD)], [ADD_TESTS], pool, ["bug", "pass"])) == ["bug", "pass"]


def test_a_row_with_broken_tests_is_a_data_error_naming_it_and_the_rest_is_scored(pool):
    with pytest.raises(RewardDataError, match="row 1: tests: .*1 inputs but 2 outputs") as caught:
        score([fenced(ADD)] * 2, [ADD_TESTS, {"inputs": ["1"], "outputs": ["1", "2"]}], pool)
    assert caught.value.rows.keys() == {1}
    assert caught.value.partial == {"pass": [1.0, 0.0], "bug": [1.0, 0.0], "length": [1.0, 0.0]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"components": ["pass", "speed"]}, r"unknown code reward component\(s\) \['speed'\]"),
        ({"components": []}, "non-empty list"),
        ({"length_limit": None}, "length_limit must be a positive number"),
        ({"num_tokens": [1, 2]}, "num_tokens must be None or a list of 1"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(kwargs, message):
    arguments = {"components": ["pass", "bug", "length"], "length_limit": 4000, **kwargs}
    with pytest.raises(ValueError, match=message):
        score_code_batch([fenced(ADD)], [ADD_TESTS], **arguments)


def test_the_registry_scores_code_through_this_module(pool, monkeypatch):
    from gdpo_nemo.rewards import get_reward_set
    from gdpo_nemo.sandbox import pool as pool_module

    monkeypatch.setattr(pool_module, "_shared", pool)  # the registry uses the shared pool
    rewards = get_reward_set("code")
    assert rewards.score(fenced(ADD), tests=ADD_TESTS) == {"pass": 1.0, "length": 1.0, "bug": 1.0}
