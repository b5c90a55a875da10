"""Loading the real datasets' formats from local files (task.load(source="file"))."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gdpo_nemo.tasks import get_task

TOOL_SYSTEM = "You can use tools.\n**Available Tools**\n1. Name: lookup\nParameters: {\"q\": {\"type\": \"string\"}}"
TOOL_GT = '<think>Look it up.</think>\n<tool_call>\n{"name": "lookup", "parameters": {"q": "owls"}}\n</tool_call>'
CHAT_GT = "<think>No tool needed.</think>\n<response>Hi!</response>"


def _toolrl_rows():
    """Two rows shaped like ToolRL's rlla_4k parquet."""
    return [
        {
            "data_source": "rlla",
            "prompt": [{"role": "system", "content": TOOL_SYSTEM},
                       {"role": "user", "content": "**Dialogue Records History**\n<user> Find owls. </user>"}],
            "ability": "tool_use",
            "reward_model": {"style": "rule", "ground_truth": gt},
            "extra_info": {"index": i, "split": "train"},
        }
        for i, gt in enumerate([TOOL_GT, CHAT_GT])
    ]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# ---- toolcall ----------------------------------------------------------------------


def test_toolrl_parquet_loads_prompt_messages_and_ground_truth(tmp_path):
    path = _write_parquet(tmp_path / "train.parquet", _toolrl_rows())
    examples = get_task("toolcall").load(source="file", path=path)
    assert [e.idx for e in examples] == [0, 1]
    assert examples[0].messages == _toolrl_rows()[0]["prompt"]
    assert [e.ground_truth for e in examples] == [TOOL_GT, CHAT_GT]
    assert examples[1].meta == {"task": "toolcall", "source": "file", "split": "train", "path": str(path), "row": 1}


def test_toolrl_jsonl_with_the_same_columns_loads_the_same(tmp_path):
    parquet = get_task("toolcall").load(source="file", path=_write_parquet(tmp_path / "a.parquet", _toolrl_rows()))
    jsonl = get_task("toolcall").load(source="file", path=_write_jsonl(tmp_path / "a.jsonl", _toolrl_rows()))
    assert [(e.messages, e.ground_truth) for e in parquet] == [(e.messages, e.ground_truth) for e in jsonl]


def test_a_folder_gives_train_and_test_files_as_splits(tmp_path):
    rows = _toolrl_rows()
    _write_parquet(tmp_path / "train.parquet", rows)
    _write_parquet(tmp_path / "test.parquet", rows[:1])
    task = get_task("toolcall")
    assert len(task.load("train", source="file", path=tmp_path)) == 2
    validation = task.load("validation", source="file", path=tmp_path)
    assert len(validation) == 1 and validation[0].meta["path"].endswith("test.parquet")


def test_file_limit_keeps_the_first_rows(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _toolrl_rows())
    assert [e.ground_truth for e in get_task("toolcall").load(source="file", path=path, limit=1)] == [TOOL_GT]


def test_toolrl_demonstration_keeps_the_ground_truth_calls(tmp_path):
    task = get_task("toolcall")
    examples = task.load(source="file", path=_write_jsonl(tmp_path / "t.jsonl", _toolrl_rows()))
    demo = task.demonstration(examples[0], random.Random(1))
    assert demo.startswith("<think>") and demo.endswith(TOOL_GT.split("</think>", 1)[1])
    assert "lookup" in demo.split("</think>")[0]


# ---- gsm8k, math, code ---------------------------------------------------------------


def test_gsm8k_jsonl_takes_the_answer_after_the_hashes(tmp_path):
    row = {"question": "Ann has 3 bags of 4 pears. How many pears?",
           "answer": "Ann has 3*4=<<3*4=12>>12 pears.\n#### 12"}
    task = get_task("gsm8k")
    [example] = task.load(source="file", path=_write_jsonl(tmp_path / "test.jsonl", [row]))
    assert example.ground_truth == "12"
    assert example.messages[1] == {"role": "user", "content": row["question"]}
    assert example.messages[0]["role"] == "system" and "<answer>" in example.messages[0]["content"]
    assert task.demonstration(example, random.Random(0)).endswith(
        "Ann has 3*4=12 pears. So the answer is 12.</think>\n<answer>12</answer>"
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".json"])
def test_deepscaler_style_math_file_loads_problem_and_answer(tmp_path, suffix):
    rows = [{"problem": "What is $1/2 + 1/3$?", "answer": "\\frac{5}{6}", "solution": "Add them: 5/6."},
            {"problem": "Compute $2^5$.", "answer": "32"}]
    path = tmp_path / f"deepscaler{suffix}"
    if suffix == ".parquet":
        _write_parquet(path, rows)
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        _write_jsonl(path, rows)
    task = get_task("math")
    first, second = task.load(source="file", path=path)
    assert first.ground_truth == "\\frac{5}{6}" and second.ground_truth == "32"
    assert first.messages == [{"role": "user", "content": "What is $1/2 + 1/3$?\nPlease reason step by step,"
                                                          " and put your final answer within \\boxed{}."}]
    assert task.demonstration(first, random.Random(0)).endswith("Add them: 5/6.\n</think>\n\nThe answer is \\boxed{\\frac{5}{6}}.")


def test_eurus_style_code_parquet_parses_tests_and_skips_math_rows(tmp_path):
    tests = {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}
    prompt = [{"role": "system", "content": "Write code."}, {"role": "user", "content": "Add two numbers."}]
    rows = [
        {"prompt": prompt, "ability": "math", "reward_model": {"style": "rule", "ground_truth": "7"}},
        {"prompt": prompt, "ability": "code", "reward_model": {"style": "rule", "ground_truth": json.dumps(tests)}},
    ]
    [example] = get_task("code").load(source="file", path=_write_parquet(tmp_path / "eurus.parquet", rows))
    assert example.ground_truth == tests and example.tests == tests
    assert example.messages == prompt and example.meta["row"] == 1
    with pytest.raises(ValueError, match="no reference solution"):
        get_task("code").demonstration(example, random.Random(0))


def test_code_file_solutions_column_feeds_demonstrations(tmp_path):
    row = {"prompt": [{"role": "user", "content": "Echo."}],
           "reward_model": {"ground_truth": {"inputs": ["a\n"], "outputs": ["a\n"]}},
           "solutions": json.dumps(["print(input())"])}
    [example] = get_task("code").load(source="file", path=_write_jsonl(tmp_path / "apps.jsonl", [row]))
    assert get_task("code").demonstration(example, random.Random(0)).endswith("```python\nprint(input())\n```")


# ---- errors name the file and column ------------------------------------------------------


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ValueError, match=r"nope\.parquet: no such data file"):
        get_task("toolcall").load(source="file", path=tmp_path / "nope.parquet")


def test_folder_without_the_split_file_lists_what_it_looked_for(tmp_path):
    with pytest.raises(ValueError, match=r"no validation file.*'test\.jsonl'"):
        get_task("gsm8k").load("validation", source="file", path=tmp_path)


def test_missing_column_names_the_path_row_and_column(tmp_path):
    rows = _toolrl_rows()
    del rows[1]["reward_model"]["ground_truth"]
    path = _write_jsonl(tmp_path / "broken.jsonl", rows)
    with pytest.raises(ValueError, match=r"broken\.jsonl, row 1: missing column 'reward_model\.ground_truth'"):
        get_task("toolcall").load(source="file", path=path)


def test_parquet_without_the_prompt_column_is_named(tmp_path):
    path = _write_parquet(tmp_path / "flat.parquet", [{"question": "q", "ground_truth": "x"}])
    with pytest.raises(ValueError, match=r"flat\.parquet, row 0: missing column 'prompt'"):
        get_task("toolcall").load(source="file", path=path)


@pytest.mark.parametrize(
    ("task", "row", "message"),
    [
        ("gsm8k", {"question": "q", "answer": "12"}, r"column 'answer' has no '####"),
        ("gsm8k", {"question": "q"}, r"missing column 'answer'"),
        ("math", {"problem": "p", "answer": ""}, r"column 'answer' must be a non-empty"),
        ("math", {"question": "p", "answer": "1"}, r"missing column 'problem'"),
        ("code", {"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": {"inputs": ["1"], "outputs": []}}},
         r"1 inputs and 0 outputs"),
        ("code", {"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "not json"}},
         r"not JSON tests"),
        ("toolcall", {"prompt": [{"role": "robot", "content": "x"}], "reward_model": {"ground_truth": TOOL_GT}},
         r"column 'prompt' holds .*role"),
    ],
)
def test_bad_rows_are_named(tmp_path, task, row, message):
    path = _write_jsonl(tmp_path / "data.jsonl", [row])
    with pytest.raises(ValueError, match=rf"data\.jsonl, row 0: .*{message}"):
        get_task(task).load(source="file", path=path)


def test_unsupported_extension_and_bad_json_lines_are_named(tmp_path):
    csv = tmp_path / "data.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"data\.csv: unsupported file type '\.csv'"):
        get_task("gsm8k").load(source="file", path=csv)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2: not valid JSON"):
        get_task("gsm8k").load(source="file", path=bad)
