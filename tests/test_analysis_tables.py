"""Tables: numbers a reader can check by hand, footnotes for every run left out or missing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gdpo_nemo.analysis.load import load_source
from gdpo_nemo.analysis.paper import load_paper_values
from gdpo_nemo.analysis.render import to_latex, to_markdown
from gdpo_nemo.analysis.stats import bootstrap_interval, summarize, t_interval
from gdpo_nemo.analysis.tables import TABLES_BY_KEY, compute_table, training_summary
from gdpo_nemo.runs.run_id import RunId

from tests.support.synthetic import run_config, write_eval, write_run_dir

PAPER = load_paper_values()


def cell(result, model, method, column, benchmark=""):
    rows = result.cells[(result.cells["model"] == model) & (result.cells["method"] == method)
                        & (result.cells["column"] == column) & (result.cells["benchmark"] == benchmark)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def toolcall_run(root, algo, seed, live, non_live, multi_turn, fmt, *, steps=10, done=True, max_steps=10, estimator=None):
    rid = RunId("tool", "toolcall", "qwen2.5-1.5b", algo, seed)
    folder = write_run_dir(root, rid, [{"step": s, "train/reward": 0.1 * s} for s in range(1, steps + 1)],
                           config=run_config(rid, max_steps=max_steps, estimator=estimator), done=done)
    write_eval(folder, rid, "bfcl", steps, {"live": live, "non_live": non_live, "multi_turn": multi_turn, "correct_format": fmt})
    return rid


# --------------------------------------------------------------------------------------

def test_summary_of_three_values():
    s = summarize([1.0, 2.0, 3.0])
    assert (s["mean"], s["std"], s["n"]) == (2.0, 1.0, 3)
    assert (s["low"], s["high"]) == t_interval([1.0, 2.0, 3.0])  # the tables' interval (tests/test_seed_statistics.py)
    boot = summarize([1.0, 2.0, 3.0], interval="bootstrap")
    assert 1.0 <= boot["low"] < 2.0 < boot["high"] <= 3.0


def test_bootstrap_is_seeded_and_degenerate_cases_are_exact():
    assert bootstrap_interval([1.0, 5.0, 2.0]) == bootstrap_interval([1.0, 5.0, 2.0])
    assert bootstrap_interval([7.0]) == (7.0, 7.0)
    assert bootstrap_interval([4.0, 4.0]) == (4.0, 4.0)
    assert all(math.isnan(v) for v in bootstrap_interval([]))
    assert math.isnan(summarize([7.0])["std"])


def test_bootstrap_interval_of_two_values_is_their_range():
    # Resampling 2 values gives means 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4:
    # the 2.5 % and 97.5 % quantiles are the extremes.
    assert bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)


def test_summary_refuses_nan_instead_of_returning_a_nan_mean():
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("nan")])


def test_paper_values_yaml_holds_reference_section_4():
    assert PAPER.get("table1", "qwen2.5-1.5b", "", "gdpo", "live") == 55.36
    assert PAPER.get("table1", "qwen2.5-3b", "", "grpo_no_std", "live") is None
    assert PAPER.get("table3", "r1-1.5b", "minerva", "base", "acc") == 38.41
    assert PAPER.get("table4", "r1-7b", "aime", "gdpo_conditioned", "exceed") == 12.3
    assert PAPER.get("table5", "r1-7b", "taco", "gdpo_2obj", "pass") == 48.4
    assert PAPER.get("table5", "r1-7b", "taco", "gdpo_2obj", "bug") is None
    counts = {t: sum(1 for k in PAPER.values if k[0] == t) for t in ("table1", "table3", "table4", "table5")}
    # table1: 4 + 3 methods x 5 columns; table3: 3 models x 5 benchmarks x 3 methods x 2;
    # table4: 5 benchmarks x 5 methods x 2; table5: 3 benchmarks x 5 x 3 + taco's 5 pass values
    assert counts == {"table1": 35, "table3": 90, "table4": 50, "table5": 50}
    assert PAPER.model_key("Qwen2.5-1.5B-Instruct") == "qwen2.5-1.5b"
    assert PAPER.model_key("smollm2-135m") is None


def test_paper_avg_acc_is_the_mean_of_the_three_overall_columns():
    for model, method in (("qwen2.5-1.5b", "gdpo"), ("qwen2.5-3b", "grpo"), ("qwen2.5-1.5b", "base")):
        three = [PAPER.get("table1", model, "", method, c) for c in ("live", "multi_turn", "non_live")]
        assert PAPER.get("table1", model, "", method, "avg_acc") == pytest.approx(np.mean(three), abs=0.006)


def test_table1_cell_is_mean_std_over_seeds_beside_the_paper(tmp_path):
    for seed, live in enumerate((0.50, 0.55, 0.60)):
        toolcall_run(tmp_path, "gdpo", seed, live, 0.40, 0.02, 0.80)
    ds = load_source(tmp_path, cache_dir=None)
    result = compute_table(TABLES_BY_KEY["table1"], ds, PAPER, resamples=2000)
    live = cell(result, "qwen2.5-1.5b", "gdpo", "live")
    assert (live["mean"], live["std"], live["n"], live["paper"]) == pytest.approx((55.0, 5.0, 3, 55.36))
    assert live["diff"] == pytest.approx(-0.36)
    assert (live["low"], live["high"]) == pytest.approx(t_interval([50.0, 55.0, 60.0]))  # 55 -+ 4.30 * 5 / sqrt(3)
    avg = cell(result, "qwen2.5-1.5b", "gdpo", "avg_acc")  # per run: (live + 40 + 2) / 3
    assert avg["mean"] == pytest.approx((55.0 + 40.0 + 2.0) / 3)
    markdown = to_markdown(result)
    assert "55.00 ± 5.00" in markdown and "paper 55.36 (Δ -0.36)" in markdown and "n=3" in markdown
    assert "Qwen2.5-1.5B GRPO: no runs (the paper reports this row)." in result.footnotes


def test_crashed_and_short_runs_are_left_out_and_named(tmp_path):
    toolcall_run(tmp_path, "gdpo", 0, 0.50, 0.4, 0.0, 0.8)
    toolcall_run(tmp_path, "gdpo", 1, 0.60, 0.4, 0.0, 0.8)
    short = toolcall_run(tmp_path, "gdpo", 2, 0.99, 0.4, 0.0, 0.8, steps=4, done=False)
    ds = load_source(tmp_path, cache_dir=None)
    result = compute_table(TABLES_BY_KEY["table1"], ds, PAPER, resamples=500)
    assert cell(result, "qwen2.5-1.5b", "gdpo", "live")["mean"] == pytest.approx(55.0)
    assert f"{short.name}: stopped short at step 4 of 10; left out of the mean." in result.footnotes
    kept = compute_table(TABLES_BY_KEY["table1"], ds, PAPER, include_incomplete=True, resamples=500)
    assert cell(kept, "qwen2.5-1.5b", "gdpo", "live")["mean"] == pytest.approx((50 + 60 + 99) / 3)


def test_missing_seed_and_missing_metric_are_footnotes(tmp_path):
    for seed in (0, 1, 2):
        toolcall_run(tmp_path, "grpo", seed, 0.5, 0.4, 0.0, 0.8)
    rid = RunId("tool", "toolcall", "qwen2.5-1.5b", "gdpo", 0)
    folder = write_run_dir(tmp_path, rid, [{"step": 10, "train/reward": 1.0}], config=run_config(rid, max_steps=10))
    write_eval(folder, rid, "bfcl", 10, {"live": 0.5, "non_live": 0.4, "multi_turn": 0.0})  # no correct_format
    result = compute_table(TABLES_BY_KEY["table1"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    assert "Qwen2.5-1.5B GDPO: seed(s) 1, 2 missing." in result.footnotes
    assert "Qwen2.5-1.5B GDPO: none of its 1 run(s) logged eval/bfcl/correct_format." in result.footnotes
    assert cell(result, "qwen2.5-1.5b", "gdpo", "correct_format")["n"] == 0


def test_base_row_uses_step_zero_evals_when_there_is_no_base_run(tmp_path):
    for seed, start in enumerate((0.30, 0.40)):
        rid = toolcall_run(tmp_path, "grpo", seed, 0.5, 0.4, 0.0, 0.8)
        write_eval(tmp_path / rid.name, rid, "bfcl", 0, {"live": start, "non_live": 0.1, "multi_turn": 0.0, "correct_format": 0.05})
    result = compute_table(TABLES_BY_KEY["table1"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    base = cell(result, "qwen2.5-1.5b", "base", "live")
    assert (base["mean"], base["n"]) == pytest.approx((35.0, 2))
    assert cell(result, "qwen2.5-1.5b", "grpo", "live")["mean"] == pytest.approx(50.0)  # the last step, not step 0


def test_nan_eval_value_is_left_out_of_the_mean_and_named(tmp_path):
    toolcall_run(tmp_path, "gdpo", 0, 0.5, 0.4, 0.0, 0.8)
    toolcall_run(tmp_path, "gdpo", 1, "nan", 0.4, 0.0, 0.8)
    result = compute_table(TABLES_BY_KEY["table1"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    live = cell(result, "qwen2.5-1.5b", "gdpo", "live")
    assert (live["mean"], live["n"]) == (50.0, 1)
    assert any("eval/bfcl/live is NaN/inf in tool__toolcall__qwen2.5-1.5b__gdpo__seed1" in n for n in result.footnotes)


def test_table5_splits_two_and_three_objective_runs(tmp_path):
    for components, value in ((("pass", "length"), 0.60), (("pass", "length", "bug"), 0.70)):
        rid = RunId("code", "code", "deepseek-r1-distill-qwen-7b", f"gdpo{len(components)}", 0)
        folder = write_run_dir(tmp_path, rid, [{"step": 400, "train/reward": 1.0}],
                               config=run_config(rid, components=components, estimator="gdpo", max_steps=400))
        write_eval(folder, rid, "apps", 400, {"pass": value, "exceed": 0.05, "bug": 0.2})
    result = compute_table(TABLES_BY_KEY["table5"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    assert cell(result, "deepseek-r1-distill-qwen-7b", "gdpo_2obj", "pass", "apps")["mean"] == pytest.approx(60.0)
    three = cell(result, "deepseek-r1-distill-qwen-7b", "gdpo_3obj", "pass", "apps")
    assert (three["mean"], three["paper"]) == pytest.approx((70.0, 67.8))


def test_table4_splits_plain_and_conditioned_length(tmp_path):
    for conditioned, value in ((False, 0.50), (True, 0.58)):
        rid = RunId("len", "math", "r1-7b", "gdpo_cond" if conditioned else "gdpo", 0)
        folder = write_run_dir(tmp_path, rid, [{"step": 500, "train/reward": 1.0}],
                               config=run_config(rid, components=("correctness", "length"), estimator="gdpo",
                                                 conditioned_length=conditioned, max_steps=500))
        write_eval(folder, rid, "aime", 500, {"acc": value, "exceed": 0.1})
    result = compute_table(TABLES_BY_KEY["table4"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    assert cell(result, "r1-7b", "gdpo_length", "acc", "aime")["mean"] == pytest.approx(50.0)
    conditioned = cell(result, "r1-7b", "gdpo_conditioned", "acc", "aime")
    assert (conditioned["mean"], conditioned["paper"], conditioned["diff"]) == pytest.approx((58.0, 57.7, 0.3))


def test_weight_ablation_rows_by_length_weight(tmp_path):
    for weight, value in ((1.0, 0.40), (0.5, 0.45)):
        rid = RunId("wl", "math", "r1-1.5b", f"gdpo_wlen{weight}", 0)
        folder = write_run_dir(tmp_path, rid, [{"step": 5, "train/reward": 1.0}],
                               config=run_config(rid, components=("correctness", "length"), estimator="gdpo",
                                                 reward_weights={"correctness": 1.0, "length": weight}))
        write_eval(folder, rid, "math", 5, {"acc": value, "exceed": 0.0})
    result = compute_table(TABLES_BY_KEY["weight_ablation"], load_source(tmp_path, cache_dir=None), PAPER, resamples=500)
    assert cell(result, "r1-1.5b", "gdpo_w0.5", "acc", "math")["mean"] == pytest.approx(45.0)
    assert cell(result, "r1-1.5b", "gdpo_w1.0", "acc", "math")["mean"] == pytest.approx(40.0)


def test_table_without_runs_shows_the_paper_and_says_so(tmp_path):
    result = compute_table(TABLES_BY_KEY["table3"], load_source(tmp_path, cache_dir=None), PAPER, resamples=10)
    assert result.footnotes[0].startswith("No runs of task 'math'")
    assert cell(result, "r1-1.5b", "gdpo", "acc", "math")["paper"] == 86.2
    assert "paper 86.2" in to_markdown(result)


def test_latex_escapes_and_keeps_the_numbers(tmp_path):
    toolcall_run(tmp_path, "grpo_no_std", 0, 0.47, 0.39, 0.01, 0.0, estimator="grpo_no_std")
    tex = to_latex(compute_table(TABLES_BY_KEY["table1"], load_source(tmp_path, cache_dir=None), PAPER, resamples=10))
    assert r"\begin{tabular}" in tex and r"\bottomrule" in tex
    assert r"47.00 $\pm$ ---" in tex  # one run: no std
    assert "_" not in tex.replace(r"\_", "")


def test_training_summary_averages_the_last_tenth_of_steps(tmp_path):
    for seed, offset in enumerate((0.0, 0.2)):
        rid = RunId("q", "gsm8k", "tiny", "gdpo", seed)
        write_run_dir(tmp_path, rid, [{"step": s, "train/reward/format": s / 20 + offset} for s in range(1, 21)])
    summary = training_summary(load_source(tmp_path, cache_dir=None), resamples=500)
    row = summary[summary["metric"] == "train/reward/format"].iloc[0]
    # last 2 of 20 steps: (19 + 20) / 40 = 0.975 for seed 0, 1.175 for seed 1
    assert (row["mean"], row["n"], row["steps"]) == pytest.approx((1.075, 2, 2))
