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


# ---------------------------------------------------------------------------------------
# BFCL-v3 through bfcl-eval's own evaluator (in its virtualenv, scripts/setup_bfcl.sh)
# ---------------------------------------------------------------------------------------


def _bfcl_ready() -> bool:
    from gdpo_nemo.evaluation import bfcl

    try:
        bfcl.data_dir()
        return True
    except ValueError:
        return False


needs_bfcl = pytest.mark.skipif(not _bfcl_ready(), reason="no bfcl-eval virtualenv: run bash scripts/setup_bfcl.sh")


def test_bfcl_prompt_and_decoding_of_our_format():
    from gdpo_nemo.evaluation import bfcl_format

    entry = {"id": "simple_0", "question": [[{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Area of a 10 by 5 triangle?"}]],
             "function": [{"name": "area", "description": "Triangle area.",
                           "parameters": {"type": "dict", "properties": {"base": {"type": "float"}}, "required": ["base"]}}]}
    system, user = bfcl_format.entry_messages(entry)
    assert system["content"].startswith("Be brief.") and '"type": "object"' in system["content"]
    assert '"type": "number"' in system["content"] and "1. Name: area" in system["content"]
    assert user["content"].endswith("<user> Area of a 10 by 5 triangle? </user>")
    text = '<think> x </think>\n<tool_call>\n{"name": "area", "parameters": {"base": 10, "h": "5"}}\n{"name": "g", "parameters": {}}\n</tool_call>'
    assert bfcl_format.decode_calls(text) == [{"area": {"base": 10, "h": "5"}}, {"g": {}}]
    assert bfcl_format.decode_execute(text) == ["area(base=10, h='5')", "g()"]
    assert bfcl_format.decode_calls("<response> none </response>") == []
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        bfcl_format.decode_calls("<tool_call>\narea(base=10)\n</tool_call>")
    assert bfcl_format.correct_format(text, "live_simple")
    assert not bfcl_format.correct_format(text, "live_irrelevance")
    assert bfcl_format.correct_format("<think> no tool fits </think>\n<response> sorry </response>", "irrelevance")


@needs_bfcl
def test_bfcl_hand_made_responses_scored_by_bfcl_eval_and_read_by_the_analysis(tmp_path):
    from gdpo_nemo.analysis.load import load_source
    from gdpo_nemo.evaluation import bfcl

    right = '<think> area </think>\n<tool_call>\n{"name": "calculate_triangle_area", "parameters": {"base": 10, "height": 5}}\n</tool_call>'
    wrong_value = right.replace('"base": 10', '"base": 11')
    refusal = "<think> no tool fits </think>\n<response> I cannot do that with these tools. </response>"
    call = '<think> try </think>\n<tool_call>\n{"name": "determine_body_mass_index", "parameters": {"weight": 1, "height": 2}}\n</tool_call>'
    by_category = {"simple": [right, wrong_value, "garbage"], "irrelevance": [refusal, call, refusal]}

    class Replay:
        def __init__(self):
            self.calls = 0

        def generate(self, prompts, *, samples, **_):
            texts = list(by_category.values())[self.calls]
            self.calls += 1
            return [[Response(texts[i], 7, False)] for i in range(len(prompts))]

    run_dir = tmp_path / "toolcall__toolcall__qwen2.5-1.5b__gdpo__seed1"
    bfcl.run_bfcl(Replay(), categories=["simple", "irrelevance"], out_dir=run_dir, run_id=None, step=5, limit=3,
                  log=lambda *a: None)
    payload = json.loads((run_dir / "eval" / "bfcl" / "step_5.json").read_text())
    assert payload["categories"]["simple"] == {"accuracy": pytest.approx(1 / 3), "total_count": 3}
    assert payload["categories"]["irrelevance"] == {"accuracy": pytest.approx(2 / 3), "total_count": 3}
    # format: the two calls and the refusals fit their category's shape; garbage and a call on irrelevance do not
    assert payload["metrics"]["correct_format"] == pytest.approx(4 / 6)
    assert payload["complete"] is False
    score = run_dir / "eval" / "bfcl" / "step_5" / "score"
    first = json.loads((score / "gdpo-nemo" / "BFCL_v3_simple_score.json").read_text().splitlines()[0])
    assert first == {"accuracy": pytest.approx(1 / 3), "correct_count": 1, "total_count": 3}
    metrics = load_source(tmp_path, cache_dir=None, progress=False).metrics
    names = set(metrics["metric"].astype(str))
    assert {"eval/bfcl/correct_format", "eval/bfcl/live", "eval/bfcl/non_live", "eval/bfcl/category/simple"} <= names


@needs_bfcl
@pytest.mark.slow
def test_bfcl_end_to_end_on_the_embedded_model_through_the_cli(tmp_path):
    done = _eval("--task", "toolcall", "--model", "builtin:smollm2-135m", "--benchmarks", "simple", "live_simple",
                 "live_irrelevance", "--limit", 2, "--max-new-tokens", 48, "--out", tmp_path,
                 "--run-id", "toolcall__toolcall__smollm2-135m__base__seed0")
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads((tmp_path / "eval" / "bfcl" / "step_0.json").read_text())
    assert set(payload["categories"]) == {"simple", "live_simple", "live_irrelevance"}
    assert all(v["total_count"] == 2 for v in payload["categories"].values())
    assert 0.0 <= payload["metrics"]["correct_format"] <= 1.0
    for name in ("data_live.csv", "data_non_live.csv", "data_multi_turn.csv"):
        assert (tmp_path / "eval" / "bfcl" / "step_0" / "score" / name).is_file()


def test_bfcl_multi_turn_and_unknown_categories_are_refused_by_name():
    from gdpo_nemo.evaluation import bfcl

    with pytest.raises(ValueError, match=r"multi-turn categories \['multi_turn_base'\] are not supported yet"):
        bfcl.check_categories(["simple", "multi_turn_base"])
    with pytest.raises(ValueError, match=r"unknown BFCL v3 categories \['java'\]"):
        bfcl.check_categories(["java"])
