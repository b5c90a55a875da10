"""The analysis on real run dirs made by the local engine (tiny model, 2 seeds x GRPO/GDPO).

`engine_runs` trains four 3-step runs of `configs/local/tiny.yaml` with the real trainer,
W&B offline on, once per test session (tests/test_notebooks.py reuses the same folder).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gdpo_nemo.analysis.load import load_source
from gdpo_nemo.analysis.wandb_offline import find_offline_runs, read_offline_run
from gdpo_nemo.runs.run_id import RunId

ESTIMATORS = ("grpo", "gdpo")
SEEDS = (0, 1)
STEPS = 3
REPO = Path(__file__).resolve().parents[1]


def make_engine_runs(root: Path) -> Path:
    """Train (or reuse, when already complete) the four tiny runs under `root`."""
    import os

    import wandb

    before = os.environ.get("WANDB_MODE")
    os.environ["WANDB_MODE"] = "offline"  # put back below: later tests see the environment they had
    try:
        _train_runs(root)
    finally:
        if before is None:
            os.environ.pop("WANDB_MODE", None)
        else:
            os.environ["WANDB_MODE"] = before
    wandb.teardown()  # flush wandb-core's offline files before anyone reads them
    return root


def _train_runs(root: Path) -> None:
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train

    for estimator in ESTIMATORS:
        for seed in SEEDS:
            config, _ = load_run_config(REPO / "configs" / "local" / "tiny.yaml", [
                f"gdpo.estimator={estimator}", f"gdpo.algo={estimator}", f"grpo.seed={seed}",
                f"grpo.max_num_steps={STEPS}", "gdpo.experiment=analysis", "logger.wandb_enabled=true"])
            run_dir = root / RunId.from_config(config).name
            if not (run_dir / "DONE").exists():
                train(config, run_dir, log=lambda *args: None)


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory) -> Path:
    return make_engine_runs(tmp_path_factory.getbasetemp() / "engine_runs")


def test_engine_run_dirs_load_as_finished_runs_of_both_estimators(engine_runs):
    ds = load_source(engine_runs, cache_dir=None)
    assert sorted(ds.runs["run_id"]) == sorted(RunId("analysis", "gsm8k", "tiny", e, s).name for e in ESTIMATORS for s in SEEDS)
    assert set(ds.runs["status"]) == {"finished"}
    assert set(ds.runs["last_step"]) == {STEPS} and set(ds.runs["max_steps"]) == {STEPS}
    assert set(ds.runs["estimator"]) == set(ESTIMATORS)
    assert set(ds.runs["reward_components"]) == {"format,correctness,integer"}  # the gsm8k default set
    assert ds.problems.empty, ds.problems.to_dict("records")


def test_engine_metrics_equal_the_jsonl_the_engine_wrote(engine_runs):
    from gdpo_nemo.runs.rundir import read_metrics

    ds = load_source(engine_runs, cache_dir=None)
    for run_id in ds.runs["run_id"]:
        for record in read_metrics(engine_runs / run_id):
            step = record.pop("step")
            for key, value in record.items():
                got = ds.metrics[(ds.metrics["run_id"] == run_id) & (ds.metrics["step"] == step) & (ds.metrics["metric"] == key)]["value"]
                if value is None:  # the tracker writes NaN as null: reported, not a number
                    assert got.empty
                else:
                    assert got.tolist() == [pytest.approx(float(value))], (run_id, step, key)
    for metric in ("train/reward/format", "train/reward/correctness", "train/adv/distinct_groups"):
        assert (ds.metrics["metric"] == metric).sum() == len(ESTIMATORS) * len(SEEDS) * STEPS


def test_engine_wandb_offline_files_hold_the_same_numbers(engine_runs):
    from gdpo_nemo.runs.rundir import read_metrics

    files = find_offline_runs(engine_runs)
    assert len(files) == len(ESTIMATORS) * len(SEEDS)
    for path in files:
        log = read_offline_run(path)
        assert log.status == "finished"
        assert log.config["gdpo"]["experiment"] == "analysis"
        run_dir = engine_runs / log.run_id.name
        for record in read_metrics(run_dir):
            step = record.pop("step")
            for key, value in record.items():
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    assert float(log.rows[step][key]) == pytest.approx(float(value)), (path, step, key)


def test_report_command_on_engine_runs(engine_runs, tmp_path, capsys):
    from gdpo_nemo.cli import main

    out = tmp_path / "report"
    code = main(["report", "--source", str(engine_runs), "--out", str(out), "--quiet", "--no-cache", "--seeds", "0-1"])
    assert code == 0, capsys.readouterr().err
    stem = "analysis__gsm8k__tiny"
    for name in (f"figures/curves__{stem}.png", f"figures/curves__{stem}.pdf", f"figures/advantage_groups__{stem}.png",
                 "figures/fig3_advantage_groups.png", "tables/training_summary.md", "runs.csv", "problems.md", "README.md"):
        assert (out / name).stat().st_size > 0, name
    # gsm8k runs fill none of the paper's tables (tool calling, math, code): none is written,
    # and the index says so (issue 24) instead of pages of "n=0".
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["paired.csv", "paired.md", "training_summary.csv", "training_summary.md"]
    summary = (out / "tables" / "training_summary.md").read_text()
    assert "| gdpo |" in summary and "| grpo |" in summary and "n=2" in summary
    readme = (out / "README.md").read_text()
    assert f"![curves__{stem}](figures/curves__{stem}.png)" in readme
    assert "4 run(s)" in readme
    assert "Not written, no run in any of their cells: table1" in readme and "n=0" not in readme


def test_report_on_an_empty_folder_says_so_and_writes_nothing(tmp_path, capsys):
    from gdpo_nemo.cli import main

    (tmp_path / "empty").mkdir()
    code = main(["report", "--source", str(tmp_path / "empty"), "--out", str(tmp_path / "out"), "--quiet",
                 "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 1 and "no runs found in" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # nothing written, no cache


def test_report_on_a_missing_folder_is_a_one_line_error(tmp_path, capsys):
    from gdpo_nemo.cli import main

    code = main(["report", "--source", str(tmp_path / "nope"), "--quiet", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and "nope" in err and "does not exist" in err


def test_the_quickstart_figure_draws_each_method_in_its_registered_colour():
    # Issue 37: the quickstart figure drew GDPO blue and GRPO orange, the report GRPO blue and
    # GDPO green: one colour per method everywhere (the estimator registry's PlotStyle).
    import matplotlib.colors as mcolors

    from gdpo_nemo.analysis.quickstart import curves_figure
    from gdpo_nemo.estimators import ESTIMATORS

    names = ["format", "correctness"]
    record = {"train/reward": 1.0, "train/adv/distinct_groups": 2,
              **{f"train/reward/{n}": 0.5 for n in names}, **{f"train/adv/zero_std_frac/{n}": 0.2 for n in names}}
    histories = {"GDPO": [dict(record, step=s) for s in (1, 2, 3)], "GRPO": [dict(record, step=s) for s in (1, 2, 3)]}
    fig = curves_figure(histories, names)
    legend = {text.get_text(): handle.get_color() for text, handle in
              zip(fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles)}
    for label, algo in (("GDPO", "gdpo"), ("GRPO", "grpo")):
        assert mcolors.same_color(legend[label], ESTIMATORS[algo].style.color), (label, legend[label])
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_label() == label:
                    assert mcolors.same_color(line.get_color(), ESTIMATORS[algo].style.color)


@pytest.fixture
def drawn(monkeypatch):
    """The figures gdpo_nemo.analysis.figures draws during the test, in order, kept open
    until the test ends (its pyplot's `close` records them instead)."""
    from gdpo_nemo.analysis import figures

    figs = []
    real = figures._pyplot()

    class Recorder:
        def __getattr__(self, name):
            return getattr(real, name)

        def close(self, fig):
            figs.append(fig)

    monkeypatch.setattr(figures, "_pyplot", lambda: Recorder())
    yield figs
    for fig in figs:
        real.close(fig)


def test_report_curves_keep_a_rates_band_in_its_range_and_say_when_there_is_no_spread(tmp_path, drawn):
    # Issue 37: std bands went below 0 and above 1 for rates, "mean ± 1 std over seeds" was
    # printed for one run, and the panels had no y-axis label.
    import numpy as np
    import pandas as pd

    from gdpo_nemo.analysis import figures
    from gdpo_nemo.analysis.frame import Dataset

    def dataset(seeds):
        rows, runs = [], []
        for algo in ("grpo", "gdpo"):
            for seed in range(seeds):
                run = f"{algo}{seed}"
                runs.append({"run_id": run, "algo": algo, "experiment": "e", "task": "gsm8k", "model": "m"})
                for step in range(1, 6):  # a rate near 1 whose seeds disagree: mean + std > 1
                    rows.append({"run_id": run, "algo": algo, "metric": "train/reward/format", "step": step,
                                 "value": 1.0 if seed % 2 == 0 else 0.6})
        return Dataset(pd.DataFrame(rows), pd.DataFrame(runs), pd.DataFrame())

    for seeds in (3, 1):
        earlier = len(drawn)
        figures.plot_panels(dataset(seeds), ["train/reward/format"], tmp_path / f"c{seeds}", title="t", smooth=1)
        [fig] = drawn[earlier:]
        ax = fig.axes[0]
        bands = [c for c in ax.collections]
        assert ax.get_ylabel() == "mean over runs"
        if seeds == 3:
            assert len(bands) == 2 and "mean ± 1 std over seeds" in fig._suptitle.get_text()
            for band in bands:
                ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
                assert ys.min() >= 0.6 - 1e-9 and ys.max() <= 1.0 + 1e-9  # the logged range
        else:
            assert bands == [] and "one run per method" in fig._suptitle.get_text()


def test_figures_read_on_their_own_at_any_size_of_data(tmp_path, drawn):
    """Issue 45: y labels like -0.04 were cut by a fixed margin, a legend of four methods was
    cut at both sides, a run with one logged step drew nothing, n counted runs without data,
    and a step that one run reached pinched the band to a point."""
    import pandas as pd

    from gdpo_nemo.analysis import figures
    from gdpo_nemo.analysis.frame import Dataset

    rows, runs = [], []
    algos = ("grpo", "gdpo", "grpo_no_std_with_a_long_variant_name", "gdpo_no_bn_with_a_long_variant_name")
    for algo in algos:
        for seed in range(3):
            run = f"{algo}{seed}"
            runs.append({"run_id": run, "algo": algo, "experiment": "e", "task": "gsm8k", "model": "m"})
            if seed == 2:
                continue  # a run with no step yet: not one of the n
            last = 3 if seed == 0 else 1  # seed 1 reached step 1 only
            for step in range(1, last + 1):
                rows.append({"run_id": run, "algo": algo, "metric": "train/adv/gap/correctness", "step": step,
                             "value": -0.04 * step + 0.01 * seed})
    dataset = Dataset(pd.DataFrame(rows), pd.DataFrame(runs), pd.DataFrame())
    figures.plot_panels(dataset, ["train/adv/gap/correctness"], tmp_path / "f", title="t", smooth=1)
    [fig] = drawn
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    ax = fig.axes[0]
    box = ax.get_tightbbox(renderer)  # the axes with its tick labels, axis labels and title
    assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.x0 >= page.x0 - 1 and legend.x1 <= page.x1 + 1 and not legend.overlaps(box)
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert all(label.endswith("(n=2)") for label in labels) and len(labels) == 4
    for line in ax.get_lines():
        assert line.get_marker() == "o" and len(line.get_xdata()) == 3
    for band in ax.collections:  # steps 2-3 have one run each: the band covers step 1 only
        xs = [x for path in band.get_paths() for x, _ in path.vertices]
        assert max(xs) <= 1.0 + 1e-9
