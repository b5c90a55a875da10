"""`gdpo-nemo score`: JSONL in, JSONL with rewards out; bad rows reported, never fatal."""

import io
import json

from gdpo_nemo.cli import main

GOOD = {"completion": "<think>r</think>\n<answer>7</answer>", "ground_truth": "7"}
WRONG = {"completion": "<answer>8</answer>", "ground_truth": "7", "id": "b"}
TOOL_GT = '<think>t</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>'


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_scores_rows_into_the_default_output_beside_the_input(tmp_path):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD, WRONG])
    assert main(["score", "--task", "gsm8k", str(source)]) == 0
    rows = read_jsonl(tmp_path / "rows.scored.jsonl")
    assert rows[0]["rewards"] == {"format": 1.0, "correctness": 1.0, "integer": 1.0}
    assert rows[1] == {**WRONG, "rewards": {"format": 0.0, "correctness": 0.0, "integer": 1.0}}


def test_output_dash_writes_to_stdout(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD])
    main(["score", "--task", "gsm8k", str(source), "-o", "-"])
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["rewards"]["correctness"] == 1.0


def test_bad_rows_are_reported_by_line_and_scored_lowest(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD, "", "{not json", {"ground_truth": "7"}, WRONG])
    out = tmp_path / "out.jsonl"
    assert main(["score", "--task", "gsm8k", str(source), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "line 3: not valid JSON" in err
    assert "line 4: missing 'completion'" in err
    rows = read_jsonl(out)
    assert len(rows) == 4  # the blank line 2 is skipped
    assert rows[1]["raw"] == "{not json" and rows[1]["line"] == 3
    assert rows[2]["error"] == "missing 'completion'"
    assert rows[2]["rewards"] == {"format": 0.0, "correctness": 0.0, "integer": 0.0}
    assert "error" not in rows[3]


def test_ground_truth_data_error_is_a_bad_row_not_a_crash(tmp_path, capsys):
    bad_gt = '<tool_call>\n{"name": "f", "parameters": {}}\n\n{"name": "g", "parameters": {}}\n</tool_call>'
    rows = [{"completion": TOOL_GT, "ground_truth": TOOL_GT}, {"completion": TOOL_GT, "ground_truth": bad_gt}]
    source = write_lines(tmp_path / "tool.jsonl", rows)
    assert main(["score", "--task", "toolcall", str(source)]) == 1
    assert "line 2: toolcall ground_truth has a blank line" in capsys.readouterr().err
    scored = read_jsonl(tmp_path / "tool.scored.jsonl")
    assert scored[0]["rewards"] == {"format": 1.0, "correctness": 3.0}
    assert scored[1]["rewards"] == {"format": 0.0, "correctness": -3.0}


def test_summary_line_gives_rows_bad_rows_and_means(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD, WRONG, {"completion": 5, "ground_truth": "7"}])
    main(["score", "--task", "gsm8k", str(source)])
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    # format (1 + 0 + 0) / 3, correctness (1 + 0 + 0) / 3, integer (1 + 1 + 0) / 3
    assert "scored 3 rows (1 bad)" in summary and "(bad rows count as each reward's lowest value)" in summary
    assert "format=0.3333 correctness=0.3333 integer=0.6667" in summary


def test_math_length_limit_and_token_counts(tmp_path):
    rows = [
        {"completion": "\\boxed{2}", "ground_truth": "2", "num_tokens": 10},
        {"completion": "\\boxed{2}", "ground_truth": "2", "num_tokens": 11},
    ]
    source = write_lines(tmp_path / "math.jsonl", rows)
    assert main(["score", "--task", "math", str(source), "--length-limit", "10"]) == 0
    assert [r["rewards"]["length"] for r in read_jsonl(tmp_path / "math.scored.jsonl")] == [1.0, 0.0]


def test_negative_token_count_is_a_bad_row(tmp_path, capsys):
    source = write_lines(tmp_path / "math.jsonl", [{"completion": "x", "ground_truth": "2", "num_tokens": -1}])
    assert main(["score", "--task", "math", str(source)]) == 1
    assert "line 1: 'num_tokens' must be a non-negative integer" in capsys.readouterr().err


def test_components_option_picks_and_orders_rewards(tmp_path):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD])
    main(["score", "--task", "gsm8k", str(source), "--components", "integer,format"])
    assert list(read_jsonl(tmp_path / "rows.scored.jsonl")[0]["rewards"]) == ["integer", "format"]


def test_unknown_component_stops_before_reading(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD])
    assert main(["score", "--task", "gsm8k", str(source), "--components", "length"]) == 2
    assert "unknown reward component 'length'" in capsys.readouterr().err
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_missing_input_file_exits_2(tmp_path, capsys):
    assert main(["score", "--task", "gsm8k", str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_output_may_not_overwrite_the_input(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD])
    assert main(["score", "--task", "gsm8k", str(source), "-o", str(source)]) == 2
    assert read_jsonl(source) == [GOOD]


def test_dash_input_reads_stdin_and_writes_stdout(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO((json.dumps(GOOD) + "\n").encode())))
    assert main(["score", "--task", "gsm8k", "-"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["rewards"]["format"] == 1.0


def test_a_hard_link_to_the_input_is_refused_as_output(tmp_path, capsys):
    source = write_lines(tmp_path / "rows.jsonl", [GOOD])
    (tmp_path / "linked.jsonl").hardlink_to(source)
    assert main(["score", "--task", "gsm8k", str(source), "-o", str(tmp_path / "linked.jsonl")]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert read_jsonl(source) == [GOOD]


def test_a_byte_order_mark_before_the_first_row_is_not_a_bad_row(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + (json.dumps(GOOD) + "\n").encode())
    assert main(["score", "--task", "gsm8k", str(source)]) == 0
    assert read_jsonl(tmp_path / "rows.scored.jsonl")[0]["rewards"]["correctness"] == 1.0


def test_code_rows_with_malformed_tests_are_bad_rows_and_the_file_is_complete(tmp_path, capsys):
    program = "```python\nprint(2 * int(input()))\n```"
    rows = [
        {"completion": program, "tests": {"inputs": ["1\n"], "outputs": ["2\n"]}},
        {"completion": program, "tests": "[" * 100_000 + "]" * 100_000},
        {"completion": program, "tests": ["assert f(" + "1 + " * 50_000 + "1) == 2"]},
        {"completion": program, "tests": {"inputs": ["2\n"], "outputs": ["4\n"]}},
    ]
    source = write_lines(tmp_path / "code.jsonl", rows)
    assert main(["score", "--task", "code", str(source), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "line 2: tests:" in err and "line 3: tests:" in err and "Traceback" not in err
    scored = read_jsonl(tmp_path / "code.scored.jsonl")
    assert [row["rewards"]["pass"] for row in scored] == [1.0, 0.0, 0.0, 1.0]
