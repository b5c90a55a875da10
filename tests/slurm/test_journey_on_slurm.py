"""A number's journey, end to end: sweep -> Slurm -> NeMo RL's grpo_train -> metrics.jsonl
and W&B -> `gdpo-nemo report` -> the notebooks.

One story, run once for the module (`journey`), then checked joint by joint:

1. `gdpo-nemo sweep journey --cluster <CPU profile> --submit` submits GRPO and GDPO x 2 seeds
   of the math family (DAPO dynamic sampling on, as the paper's math runs) through the real
   `slurm/templates/nemo.sbatch` to the one-node Slurm cluster; a profile with `nemo_cpu`
   runs each job through NeMo RL's own grpo_train on the CPU, W&B on (offline files);
2. one job is `scancel`led right after its first checkpoint; the same `--submit` command
   resubmits it and the run resumes there;
3. the same run, uninterrupted, outside Slurm beside the sweep (the job's own command,
   another run dir);
4. `gdpo-nemo report` on the sweep's runs, and `gdpo-nemo notebooks` on them.

The model is builtin:tiny made to stop early (tests/nemo_tier/support.py), so the length
reward (limit 10 tokens) varies within groups and DAPO keeps and drops groups for real.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gdpo_nemo import cli
from gdpo_nemo.sweep import slurm
from gdpo_nemo.sweep.manifest import Manifest
from tests.support.slurm_jobs import cancelled_on_failure

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
NEMO_PYTHON = REPO / ".venv-nemo" / "bin" / "python"
EXPERIMENT = "journey"
STEPS = 2
ALGOS, SEEDS = ("grpo", "gdpo"), (0, 1)
NAMES = {(algo, seed): f"{EXPERIMENT}__math__r1-distill-qwen-1.5b__{algo}__seed{seed}" for algo in ALGOS for seed in SEEDS}
REQUEUED = NAMES[("gdpo", 1)]
COMPONENTS = ("correctness", "length")
WAIT_S = 600


@dataclass
class Journey:
    sweep_dir: Path
    reference_dir: Path
    report_dir: Path
    notebooks_dir: Path
    outputs: dict

    def run_dir(self, name: str) -> Path:
        return self.sweep_dir / "runs" / name


def _sweep(sweep_dir: Path, profile: Path, mode: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["sweep", EXPERIMENT, "--cluster", str(profile), mode, "--sweep-dir", str(sweep_dir)])
    assert rc == 0, out.getvalue()
    return out.getvalue()


def _wait(what: str, condition, sweep_dir: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((sweep_dir / "logs").glob("*.out")))
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}\n{logs}")


def _jobs(sweep_dir: Path, name: str) -> list[str]:
    return [job["job_id"] for job in Manifest.load(sweep_dir / "manifest.json").runs[name].jobs]


def _ended(job_ids) -> bool:
    states = slurm.job_states(list(job_ids))
    return all(states.get(j) in slurm.TERMINAL_STATES for j in job_ids)


def _checkpoints(run_dir: Path) -> set[int]:
    return {int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step_*") if p.name[5:].isdigit()}


@pytest.fixture(scope="module")
def journey(slurm_cluster, tmp_path_factory) -> Journey:
    from tests.support.requirements import require

    require(NEMO_PYTHON.is_file(), f"{NEMO_PYTHON.relative_to(REPO)}: run scripts/setup_nemo.sh (scripts/setup.sh --all runs it)")
    root = tmp_path_factory.mktemp("journey")
    stopper = root / "stopper"
    made = subprocess.run(
        [str(NEMO_PYTHON), "-c", "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
         " from support import early_stopping_tiny; early_stopping_tiny(Path(sys.argv[2]))",
         str(REPO / "tests" / "nemo_tier"), str(stopper)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    experiments = root / "experiments"
    experiments.mkdir()
    (experiments / f"{EXPERIMENT}.yaml").write_text(yaml.safe_dump({
        "description": "GRPO and GDPO on math with DAPO, 2 seeds, NeMo RL on the CPU through Slurm (the journey test)",
        "cluster": "nemo_1n1g", "seeds": list(SEEDS), "overrides": ["gdpo.length_limit=10"],
        "runs": [{"tasks": ["math"], "models": ["r1-distill-qwen-1.5b"], "algos": list(ALGOS)}],
    }, sort_keys=False))
    profile = yaml.safe_load((REPO / "slurm" / "profiles" / "local_nemo_cpu.yaml").read_text())
    profile["nemo_cpu"].update(model=str(stopper), steps=STEPS, generations=4)
    profile_path = root / "local_nemo_cpu_journey.yaml"
    profile_path.write_text(yaml.safe_dump(profile, sort_keys=False))
    sweep_dir = root / "sweeps" / EXPERIMENT
    outputs: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GDPO_NEMO_EXPERIMENTS", str(experiments))
        # A user's shell, which the jobs inherit: no W&B key, no WANDB_MODE, a HOME with no
        # netrc. The jobs' NeMo RL W&B loggers must write offline files, not ask for a login.
        for name in [n for n in os.environ if n.startswith("WANDB_")]:
            mp.delenv(name)
        home = root / "home"
        home.mkdir()
        mp.setenv("HOME", str(home))
        with cancelled_on_failure(sweep_dir) as started:
            outputs["submit"] = _sweep(sweep_dir, profile_path, "--submit")
            # The run to cancel, uninterrupted, beside the sweep: the job's own command, another run dir.
            from gdpo_nemo.sweep.profiles import load_profile
            from gdpo_nemo.engines.nemo.engine import nemo_cpu_command

            reference_dir = root / "uninterrupted"
            command = nemo_cpu_command(load_profile(str(profile_path)), sweep_dir / "configs" / f"{REQUEUED}.yaml",
                                       reference_dir, Path.cwd())
            reference = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         start_new_session=True)
            started.append(reference)
            requeued_dir = sweep_dir / "runs" / REQUEUED
            _wait("the first checkpoint of the run to cancel", lambda: 1 in _checkpoints(requeued_dir), sweep_dir)
            assert not (requeued_dir / "DONE").exists(), "the run finished before it could be cancelled"
            subprocess.run(["scancel", _jobs(sweep_dir, REQUEUED)[0]], check=True)
            first_jobs = [_jobs(sweep_dir, name)[0] for name in NAMES.values()]
            _wait("every first job to end", lambda: _ended(first_jobs), sweep_dir)
            outputs["checkpoints at cancel"] = sorted(_checkpoints(requeued_dir))
            outputs["resubmit"] = _sweep(sweep_dir, profile_path, "--submit")
            _wait("every run's DONE", lambda: all((sweep_dir / "runs" / n / "DONE").exists() for n in NAMES.values()), sweep_dir)
            _wait("every job to end", lambda: _ended(_jobs(sweep_dir, REQUEUED)), sweep_dir)
            printed, _ = reference.communicate(timeout=WAIT_S)
            assert reference.returncode == 0, printed[-3000:]

        report_dir = root / "report"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["report", "--source", str(sweep_dir / "runs"), "--out", str(report_dir),
                             "--no-cache", "--quiet"]) == 0, out.getvalue()
        notebooks_dir = root / "notebooks"
        with contextlib.redirect_stdout(out):
            assert cli.main(["notebooks", "--source", str(sweep_dir / "runs"), "--out", str(notebooks_dir)]) == 0, out.getvalue()
    return Journey(sweep_dir, reference_dir, report_dir, notebooks_dir, outputs)


# ---------------------------------------------------------------------------------------
# What NeMo RL itself wrote, per run and step: the source every other number must equal.


def _train_data(run_dir: Path, step: int) -> list[dict]:
    rows = []
    for line in (run_dir / f"train_data_step{step}.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.append({k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in row.items()})
    return rows


def trained_means(run_dir: Path, step: int) -> dict[str, float]:
    """{component: mean over the trained batch} from the components recorded at the
    estimator (advantages.jsonl), after checking them row by row against NeMo RL's own
    per-sample totals of the trained batch (train_data_step<N>.jsonl, filtered_rewards)."""
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages

    components = read_advantages(run_dir)[step]["components"]
    totals = [row["filtered_rewards"] for row in _train_data(run_dir, step)]
    assert [sum(components[c][i] for c in COMPONENTS) for i in range(len(totals))] == pytest.approx(totals)
    return {c: sum(components[c]) / len(components[c]) for c in COMPONENTS}


def _records(run_dir: Path) -> dict[int, dict]:
    from gdpo_nemo.runs import rundir

    records = rundir.read_metrics(run_dir)
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), (run_dir.name, steps)  # one record per step
    return {r["step"]: r for r in records}


# ---------------------------------------------------------------------------------------


def test_one_command_submits_every_run_through_the_nemo_template_to_nemo_rl_on_the_cpu(journey):
    out = journey.outputs["submit"]
    assert "submitted 4, resubmitted 0" in out
    script = (journey.sweep_dir / "jobs" / f"{REQUEUED}.sbatch").read_text()
    assert "from slurm/templates/nemo.sbatch" in script and "gdpo_nemo.commands.nemo_smoke" in script
    for name in NAMES.values():
        assert (journey.run_dir(name) / "DONE").is_file(), name
        assert (journey.run_dir(name) / "train_data_step1.jsonl").is_file()  # NeMo RL's own trainer wrote it


def test_every_step_is_logged_once_and_each_family_equals_nemo_rl_s_trained_batch(journey):
    for name in NAMES.values():
        run_dir = journey.run_dir(name)
        records = _records(run_dir)
        assert sorted(records) == list(range(1, STEPS + 1)), name
        for step, record in records.items():
            means = trained_means(run_dir, step)
            for component in COMPONENTS:
                assert record[f"train/filtered_reward/{component}"] == pytest.approx(means[component], abs=1e-9)
            assert sum(record[f"train/reward/{c}"] for c in COMPONENTS) == pytest.approx(record["train/reward"], abs=1e-6)
            assert sum(means.values()) == pytest.approx(record["train/filtered_reward"], abs=1e-6)


def test_dapo_redrew_and_filtered_in_at_least_one_step(journey):
    """The families differ only where DAPO filtered: the journey must have such a step."""
    differ = [(name, step) for name in NAMES.values() for step, r in _records(journey.run_dir(name)).items()
              if r["train/reward/length"] != r["train/filtered_reward/length"]]
    redraws = [r.get("train/dynamic_sampling_num_gen_batches", 1) for name in NAMES.values()
               for r in _records(journey.run_dir(name)).values()]
    assert differ or max(redraws) > 1, "no step of the journey exercised DAPO's filter; change the seeds"


def test_the_wandb_offline_files_hold_the_same_numbers(journey):
    from gdpo_nemo.analysis.wandb_offline import chain_requeued_jobs, find_offline_runs, read_offline_run

    for name in NAMES.values():
        run_dir = journey.run_dir(name)
        files = find_offline_runs(run_dir / "wandb")
        assert len(files) == (2 if name == REQUEUED else 1), (name, files)
        [log] = chain_requeued_jobs([read_offline_run(f) for f in files])
        assert sorted(log.rows) == list(range(1, STEPS + 1)), name
        for step, record in _records(run_dir).items():
            for key in ("train/reward", "train/filtered_reward", *(f"train/{f}/{c}" for f in ("reward", "filtered_reward") for c in COMPONENTS),
                        *(f"validation/reward/{c}" for c in COMPONENTS)):
                assert log.rows[step][key] == pytest.approx(record[key], abs=1e-9), (name, step, key)


def test_a_cancelled_job_resubmitted_by_the_same_command_equals_the_uninterrupted_run(journey):
    assert journey.outputs["checkpoints at cancel"][0] == 1
    assert [line.split()[1] for line in journey.outputs["resubmit"].splitlines() if line.startswith("resubmit ")] == [REQUEUED]
    assert len(_jobs(journey.sweep_dir, REQUEUED)) == 2
    mine, theirs = _records(journey.run_dir(REQUEUED)), _records(journey.reference_dir)
    assert sorted(mine) == sorted(theirs) == list(range(1, STEPS + 1))
    for step in mine:
        for key in ("train/loss", "train/reward", "train/filtered_reward", *(f"train/filtered_reward/{c}" for c in COMPONENTS),
                    *(f"validation/reward/{c}" for c in COMPONENTS)):
            assert mine[step][key] == pytest.approx(theirs[step][key], rel=1e-5, abs=1e-7), (step, key)


def _final(run_dir: Path) -> dict[str, float]:
    """The report's final value of a run: the mean of its last 10 % of steps (here: the last)."""
    last = _records(run_dir)[STEPS]
    return {c: last[f"train/reward/{c}"] for c in COMPONENTS}


def test_the_report_tables_and_curves_carry_the_runs_own_numbers(journey):
    from gdpo_nemo.analysis.load import load_source

    summary = pd.read_csv(journey.report_dir / "tables" / "training_summary.csv")
    for algo in ALGOS:
        for component in COMPONENTS:
            row = summary[(summary["algo"] == algo) & (summary["metric"] == f"train/reward/{component}")]
            assert len(row) == 1 and int(row["n"].iloc[0]) == len(SEEDS), summary
            expected = sum(_final(journey.run_dir(NAMES[(algo, s)]))[component] for s in SEEDS) / len(SEEDS)
            assert float(row["mean"].iloc[0]) == pytest.approx(expected, abs=1e-9), (algo, component)
    # the curves are drawn from this frame: every logged step of every run, unchanged
    frame = load_source(str(journey.sweep_dir / "runs"), cache_dir=None).metrics
    for name in NAMES.values():
        for step, record in _records(journey.run_dir(name)).items():
            for component in COMPONENTS:
                cell = frame[(frame["run_id"] == name) & (frame["step"] == step) & (frame["metric"] == f"train/reward/{component}")]
                assert float(cell["value"].iloc[0]) == pytest.approx(record[f"train/reward/{component}"], abs=1e-12)
    assert "train/filtered_reward/<name>" in (journey.report_dir / "README.md").read_text()


def test_the_paired_table_pairs_each_gdpo_seed_with_the_grpo_run_of_the_same_seed(journey):
    paired = pd.read_csv(journey.report_dir / "tables" / "paired.csv")
    for component in COMPONENTS:
        row = paired[(paired["algo"] == "gdpo") & (paired["metric"] == f"train/reward/{component}")].iloc[0]
        assert (int(row["n"]), str(row["seeds"])) == (2, "0,1")
        diffs = [_final(journey.run_dir(NAMES[("gdpo", s)]))[component] - _final(journey.run_dir(NAMES[("grpo", s)]))[component]
                 for s in SEEDS]
        assert float(row["mean_diff"]) == pytest.approx(sum(diffs) / 2, abs=1e-12)


def test_both_notebooks_execute_on_the_sweep(journey):
    import nbformat

    tables = nbformat.read(str(journey.notebooks_dir / "01_tables.ipynb"), as_version=4)
    text = json.dumps([cell.get("outputs", []) for cell in tables.cells])
    assert all(name in text for name in NAMES.values())
    curves = nbformat.read(str(journey.notebooks_dir / "02_curves.ipynb"), as_version=4)
    assert sum("image/png" in o.get("data", {}) for c in curves.cells for o in c.get("outputs", [])) >= 1
