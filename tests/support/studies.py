"""What the committed seed studies (paper_figures/cpu_study, paper_figures/tension_study) must
hold, checked alike for each: whole seed pairs of finished runs from one provenance, no
checkpoint or cache committed, no path of the machine that made them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gdpo_nemo.runs import provenance, rundir
from gdpo_nemo.runs.rundir import read_metrics

REPO = Path(__file__).resolve().parents[2]
ALGOS = ("gdpo", "grpo")


def tracked(folder: Path) -> list[str]:
    """The files under `folder` that git tracks (relative to it): what a clean clone has,
    whatever runs of the study are going on in this checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", str(folder)], cwd=REPO, capture_output=True, text=True, check=True)
    return [str(Path(name).relative_to(folder.relative_to(REPO))) for name in listed.stdout.split("\0") if name]


def committed_runs(folder: Path) -> list[Path]:
    return sorted({folder / "runs" / name.split("/")[1] for name in tracked(folder) if name.startswith("runs/")})


def copy_committed(folder: Path, destination: Path) -> Path:
    """The committed files of `folder` (a clean clone's) copied to `destination`."""
    for name in tracked(folder):
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / name, destination / name)
    return destination


def check_committed_pairs(folder: Path, run_prefix: str, steps: int, machine_fields: tuple[str, ...] = ()) -> dict:
    """Assert what every committed study holds; {run name: its first provenance record}.

    Every committed run is finished with `steps` trained steps and a validation; both methods
    of each seed are there; all ran the same clean code, libraries and numerics on one thread,
    each pair from one warm start and one provenance; pairs differ at most in `machine_fields`
    (dotted provenance fields, e.g. the CPU's code path, for a study whose pairs ran on more
    than one kind of machine); nothing under checkpoints/ or .cache/ is committed, and no text
    file names a folder of the machine that made it."""
    runs = committed_runs(folder)
    seeds = sorted({int(p.name.rsplit("seed", 1)[1]) for p in runs})
    assert len(seeds) >= 1, "the study's first seed pairs are committed"
    assert [p.name for p in runs] == sorted(f"{run_prefix}__{a}__seed{s}" for a in ALGOS for s in seeds)
    files = tracked(folder)
    assert not [name for name in files if "/checkpoints/" in name or name.startswith(".cache/")]
    firsts = {}
    for run in runs:
        trained = [r["step"] for r in read_metrics(run) if "train/reward" in r]
        assert trained == list(range(1, steps + 1)), run.name
        assert rundir.is_done(run)
        assert any("validation/reward/correctness" in r for r in read_metrics(run))
        (first, *resumes) = provenance.read(run)
        assert provenance.differences([first, *resumes], ["start", *map(str, resumes)],
                                      (*provenance.NUMBER_FIELDS, "start_weights")) == [], run.name
        assert first["code"]["dirty"] is False and first["numerics"]["threads"] == 1
        firsts[run.name] = first
    for seed in seeds:
        names = [f"{run_prefix}__{a}__seed{seed}" for a in ALGOS]
        pair = [firsts[name] for name in names]
        assert pair[0]["start_weights"] == pair[1]["start_weights"], seed
        assert provenance.differences(pair, names, provenance.NUMBER_FIELDS) == [], seed
    across = provenance.differences(list(firsts.values()), list(firsts), provenance.NUMBER_FIELDS)
    assert [line for line in across if line.split(":", 1)[0] not in machine_fields] == [], across
    for name in files:
        if name.endswith((".yaml", ".log", ".json", ".md", ".csv")):
            text = (folder / name).read_text()
            for machine in ("/work/", "/root/", "/home/", "/tmp/"):
                assert machine not in text, f"{name} names {machine}"
    return firsts


def check_committed_report(folder: Path, experiment: str, table: str, committed_copy: Path, out: Path) -> None:
    """Assert that `gdpo-nemo report` on the committed runs (a clean clone's copy) gives the
    committed report's `table` (its CSV to 1e-9, its Markdown byte for byte)."""
    import sys

    import pandas as pd

    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "report", "--source", str(committed_copy / "runs"),
                           "--experiment", experiment, "--out", str(out), "--no-cache", "--quiet"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    fresh = pd.read_csv(out / "tables" / f"{table}.csv")
    committed = pd.read_csv(folder / "report" / "tables" / f"{table}.csv")
    pd.testing.assert_frame_equal(fresh, committed, check_exact=False, rtol=1e-9)
    assert (out / "tables" / f"{table}.md").read_text() == (folder / "report" / "tables" / f"{table}.md").read_text()
