"""`gdpo-nemo eval`: metric arithmetic, benchmark files, end-to-end runs, bad input.

The metric tests feed hand-made responses (a replay of fixed texts in place of the model)
through the real scoring: math-verify for math, the sandbox for code. The end-to-end tests
generate with real models: the embedded default SmolLM2-135M-Instruct and the tiny random
model (which never writes its stop token: the "model that never stops").
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.evaluation import datasets, metrics
from gdpo_nemo.evaluation.backends import Response, resolve_model
from gdpo_nemo.evaluation.runner import evaluate_code, evaluate_math, run_benchmarks

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "eval"


class Replay:
    """Hand-made responses in place of a model: `answers[q]` is the list for question q."""

    def __init__(self, answers, lengths=None, truncated=None):
        self.answers, self.lengths, self.truncated = answers, lengths, truncated

    def generate(self, prompts, *, samples, max_new_tokens, temperature, top_p, progress=None):
        out = []
        for q, _ in enumerate(prompts):
            texts = self.answers[q]
            assert len(texts) == samples
            out.append([Response(t, (self.lengths or {}).get((q, j), len(t) // 4),
                                 bool((self.truncated or {}).get((q, j), False))) for j, t in enumerate(texts)])
        return out


# ---------------------------------------------------------------------------------------
# Metric arithmetic
# ---------------------------------------------------------------------------------------


def test_pass_at_1_is_the_mean_over_questions_of_the_mean_over_samples():
    assert metrics.pass_at_1([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]) == pytest.approx((0.5 + 1 + 0) / 3)
    assert metrics.pass_at_1([[1, 1], []]) == 0.5  # an unreadable question counts 0
    assert metrics.pass_at_1([]) == 0.0


def test_exceed_share_counts_responses_over_the_limit_and_truncated_ones():
    assert metrics.exceed_share([100, 4000, 4001, 9000], 4000) == 0.5
    assert metrics.exceed_share([10, 20], 4000, truncated=[False, True]) == 0.5
    with pytest.raises(ValueError, match="positive"):
        metrics.exceed_share([1], 0)


def test_bug_ratio_mean_pass_fraction_and_bfcl_average():
    assert metrics.bug_ratio([1, 1, 0, 1]) == 0.25
    assert metrics.mean_pass_fraction([[1.0, 0.5], [0.0, 0.0], []]) == pytest.approx(0.75 / 3)
    assert metrics.bfcl_average(0.5536, 0.4058, 0.0250) == pytest.approx(0.3281, abs=1e-4)  # paper Table 1, GDPO 1.5B
    assert math.isnan(metrics.bfcl_average(0.5, float("nan"), 0.1))


# ---------------------------------------------------------------------------------------
# Benchmark files
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, first_answer", [("math", "5"), ("aime", "9"), ("amc", "6.0"), ("minerva", "20"),
                                                ("olympiad", "10")])
def test_each_math_benchmark_format_reads_question_and_answer(name, first_answer):
    bench = datasets.load_math(name, DATA / f"{name}.jsonl")
    assert len(bench.items) == 2 and not bench.problems
    assert bench.items[0].reference == first_answer and bench.items[0].question


@pytest.mark.parametrize("name, cases", [("apps", 2), ("taco", 2), ("codecontests", 3), ("codeforces", 2)])
def test_each_code_benchmark_format_reads_statement_and_tests(name, cases):
    from gdpo_nemo.rewards.code import parse_tests

    bench = datasets.load_code(name, DATA / f"{name}.jsonl")
    assert not bench.problems and bench.items[0].question
    assert len(parse_tests(bench.items[0].reference)) == cases


def test_malformed_rows_are_reported_with_line_numbers_and_kept_as_failed_items():
    bench = datasets.load_math("math", DATA / "broken_math.jsonl")
    assert len(bench.items) == 4  # all rows count in the denominator
    assert [i.error is None for i in bench.items] == [True, False, False, False]
    text = "\n".join(bench.problems)
    assert "line 2: no answer" in text and "line 3: not valid JSON" in text and "line 4: expected a JSON object" in text


def test_a_missing_file_names_the_file_and_the_accepted_formats(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"aime\.jsonl.*\.jsonl file with one JSON object per line"):
        datasets.load_math("aime", tmp_path / "aime.jsonl")


# ---------------------------------------------------------------------------------------
# Hand-made outputs through the real scoring
# ---------------------------------------------------------------------------------------


def test_math_metrics_of_hand_made_responses():
    bench = datasets.load_math("math", DATA / "math.jsonl")
    replay = Replay([["The sum is $\\boxed{5}$.", "$\\boxed{6}$"], ["$\\boxed{0.75}$", "It is $\\boxed{\\frac{3}{4}}$"]],
                    lengths={(0, 0): 3000, (0, 1): 5000, (1, 0): 10, (1, 1): 20})
    values, rows = evaluate_math(bench, replay, samples=2, max_new_tokens=8000, temperature=0.6, top_p=0.95,
                                 exceed_limit=4000)
    assert values["acc"] == pytest.approx((0.5 + 1.0) / 2)  # 0.75 == 3/4 for math-verify
    assert values["exceed"] == 0.25
    assert [r["correct"] for r in rows] == [1.0, 0.0, 1.0, 1.0]


def test_a_truncated_response_is_judged_on_what_it_wrote_and_counts_as_exceeding():
    # Issue 37: docs/eval.md said truncated responses count as wrong while the code scored a
    # boxed answer written before the cut as correct. The rule (docs and code): judged on its
    # text, as the training reward is, and always counted as exceeding the length limit.
    bench = datasets.load_math("math", DATA / "math.jsonl")
    replay = Replay([["The sum is $\\boxed{5}$. Let me check again, the", "Let me think about this step by"],
                     ["$\\boxed{0.75}$", "$\\boxed{0.75}$"]],
                    lengths={(0, 0): 64, (0, 1): 64, (1, 0): 5, (1, 1): 5},
                    truncated={(0, 0): True, (0, 1): True})
    values, rows = evaluate_math(bench, replay, samples=2, max_new_tokens=64, temperature=0, top_p=1,
                                 exceed_limit=4000)
    assert [r["correct"] for r in rows] == [1.0, 0.0, 1.0, 1.0]  # an answer before the cut counts
    assert [r["truncated"] for r in rows] == [True, True, False, False]
    assert values["exceed"] == 0.5 and values["acc"] == pytest.approx((0.5 + 1.0) / 2)


def test_unreadable_math_rows_count_as_failed_questions():
    bench = datasets.load_math("math", DATA / "broken_math.jsonl")
    values, rows = evaluate_math(bench, Replay([["$\\boxed{2}$"]]), samples=1, max_new_tokens=100, temperature=0,
                                 top_p=1, exceed_limit=4000)
    assert values["acc"] == 0.25  # 1 right of 4 rows
    assert sum("error" in r for r in rows) == 3


def test_code_metrics_of_hand_made_programs_run_in_the_sandbox():
    bench = datasets.load_code("apps", DATA / "apps.jsonl")
    good_sum = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong_sum = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    reverse = "```python\nprint(input()[::-1])\n```"
    crash = "```python\nraise SystemExit(1 / 0)\n```"
    values, rows = evaluate_code(bench, Replay([[good_sum, wrong_sum], [reverse, crash]]), samples=2,
                                 max_new_tokens=100, temperature=0, top_p=1, exceed_limit=4000)
    # pass: question 1 (1.0 + 0.0)/2, question 2 (1.0 + 0.0)/2; bug: 1 crash of 4 programs
    assert values["pass"] == pytest.approx(0.5)
    assert values["bug"] == 0.25
    assert values["exceed"] == 0.0
    assert [r["pass"] for r in rows] == [1.0, 0.0, 1.0, 0.0]


def test_a_call_based_problem_gets_its_starter_code_and_its_tests_call_the_function():
    bench = datasets.load_code("taco", DATA / "taco.jsonl")
    question = bench.items[1].question
    assert "```python\ndef sum_even(numbers):\n```" in question and "Write the function `sum_even`" in question
    square = "```python\nn = int(input())\nprint(n * n)\n```"
    function = "```python\ndef sum_even(numbers):\n    return sum(x for x in numbers if x % 2 == 0)\n```"
    values, rows = evaluate_code(bench, Replay([[square], [function]]), samples=1, max_new_tokens=100, temperature=0,
                                 top_p=1, exceed_limit=4000)
    assert values == {"pass": 1.0, "exceed": 0.0, "bug": 0.0}


# ---------------------------------------------------------------------------------------
# End to end with real models, through the CLI, into the analysis
# ---------------------------------------------------------------------------------------


def _eval(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "eval", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_every_math_and_code_benchmark_end_to_end_on_the_embedded_model_into_the_analysis(tmp_path):
    from gdpo_nemo.analysis.load import load_source

    for task in ("math", "code"):
        done = _eval("--task", task, "--model", "builtin:smollm2-135m", "--data-dir", DATA, "--samples", 2,
                     "--max-new-tokens", 24, "--out", tmp_path, "--run-id", "paper__math__smollm2-135m__base__seed0")
        assert done.returncode == 0, done.stderr[-2000:]
    written = sorted(p.parent.name for p in (tmp_path / "eval").glob("*/step_0.json"))
    assert written == sorted(datasets.MATH_BENCHMARKS + datasets.CODE_BENCHMARKS)
    payload = json.loads((tmp_path / "eval" / "aime" / "step_0.json").read_text())
    assert payload["samples"] == 2 and set(payload["metrics"]) == {"acc", "exceed"}
    dataset = load_source(tmp_path, cache_dir=None, progress=False)
    assert {"eval/aime/acc", "eval/apps/bug", "eval/taco/pass"} <= set(dataset.metrics["metric"].astype(str))


def test_a_checkpoint_is_evaluated_into_its_run_dir_and_a_never_stopping_model_exceeds(tmp_path):
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train

    config, _ = load_run_config(REPO / "configs" / "local" / "tiny.yaml",
                                ["grpo.max_num_steps=2", "checkpointing.save_period=2"])
    train(config, tmp_path / "run", log=lambda *a: None)
    checkpoint = tmp_path / "run" / "checkpoints" / "step_2"
    ref = resolve_model(str(checkpoint))
    assert ref.step == 2 and ref.name == "builtin:tiny" and ref.run_dir == tmp_path / "run"
    done = _eval("--task", "math", "--model", checkpoint, "--benchmarks", "aime", "--data-dir", DATA,
                 "--samples", 2, "--max-new-tokens", 8)
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads((tmp_path / "run" / "eval" / "aime" / "step_2.json").read_text())
    assert payload["run_id"] == "test__gsm8k__tiny__gdpo__seed7"
    # the tiny random model never writes its stop token: every response is cut and exceeds
    assert payload["metrics"] == {"acc": 0.0, "exceed": 1.0}
    rows = [json.loads(l) for l in (tmp_path / "run" / "eval" / "aime" / "step_2.responses.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["truncated"] and r["num_tokens"] == 8 for r in rows)


def test_a_missing_benchmark_file_is_reported_and_the_others_still_run(tmp_path):
    lines = []
    results = run_benchmarks("math", ["aime", "amc"], Replay([["$\\boxed{9}$"], ["$\\boxed{7}$"]]),
                             data_dir=DATA, out_dir=tmp_path, run_id=None, step=3, samples=1, max_new_tokens=10,
                             temperature=0, top_p=1, exceed_limit=4000, files={"amc": str(tmp_path / "nope.jsonl")},
                             log=lines.append)
    assert "error" in results["amc"] and "nope.jsonl" in results["amc"]["error"]
    assert results["aime"]["acc"] == 0.5  # 1 of the 2 questions answered right
    assert (tmp_path / "eval" / "aime" / "step_3.json").is_file() and not (tmp_path / "eval" / "amc").exists()
    assert any("eval amc: skipped" in line for line in lines)


def test_cli_bad_input_is_one_line_naming_the_problem(tmp_path):
    done = _eval("--task", "math", "--model", "builtin:tiny", "--benchmarks", "gsm8k", "--out", tmp_path)
    assert done.returncode == 2 and "--benchmarks ['gsm8k']" in done.stderr and "aime" in done.stderr
    done = _eval("--task", "math", "--model", "builtin:tiny")
    assert done.returncode == 2 and "--out RUN_DIR is needed" in done.stderr
    done = _eval("--task", "math", "--model", "builtin:tiny", "--data-dir", tmp_path, "--out", tmp_path,
                 "--samples", 1, "--max-new-tokens", 4)
    assert done.returncode == 1 and "skipped" in done.stdout + done.stderr
    done = _eval("--task", "code", "--model", "builtin:tiny", "--benchmarks", "apps", "--file", "taco=x.jsonl",
                 "--out", tmp_path)
    assert done.returncode == 2 and "--file taco=...: not among the benchmarks to run (apps)" in done.stderr
    done = _eval("--task", "toolcall", "--model", "builtin:tiny", "--benchmarks", "sql", "--out", tmp_path)
    assert done.returncode == 2 and "unknown BFCL v3 categories ['sql']" in done.stderr
    done = _eval("--task", "toolcall", "--model", "builtin:tiny", "--benchmarks", "simple", "--ids", "simple_0",
                 "--out", tmp_path)
    assert done.returncode == 2 and "--ids names the BFCL entries" in done.stderr
    done = _eval("--task", "toolcall", "--model", "builtin:tiny", "--samples", 4, "--out", tmp_path)
    assert done.returncode == 2 and "--samples 4: BFCL scores one response per entry" in done.stderr
    done = _eval("--task", "math", "--model", "builtin:tiny", "--limit", 3, "--out", tmp_path)
    assert done.returncode == 2 and "--limit and --ids select BFCL entries" in done.stderr
