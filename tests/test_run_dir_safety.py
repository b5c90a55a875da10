"""Issue 24, item 1: a run's data is never lost: no command truncates or mixes a run dir.

Real runs of the local engine (tiny model, CPU) through the `gdpo-nemo train` command:
finish, rerun, overwrite, resume, and compare every byte that was there before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gdpo_nemo.analysis.sources import load_directory
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.tracking import Tracker

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"


def train_command(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY), "--run-dir", str(run_dir),
         "grpo.num_prompts_per_step=2", "checkpointing.save_period=1", *extra],
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300,
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def steps(run_dir: Path) -> list[int]:
    return [int(record["step"]) for record in rundir.read_metrics(run_dir)]


def test_a_rerun_without_resume_is_refused_overwrite_moves_the_run_aside_and_resume_continues_it(tmp_path):
    run = tmp_path / "runs" / "one"
    assert train_command(run, "grpo.max_num_steps=3").returncode == 0
    finished = snapshot(run)
    assert steps(run) == [1, 2, 3] and "DONE" in finished

    # The rerun: without --resume, a shorter run over a finished one.
    refused = train_command(run, "grpo.max_num_steps=2")
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert "already holds a run" in line and "--resume" in line and "--overwrite" in line and "steps 1..3" in line
    assert snapshot(run) == finished  # not one byte changed

    # --resume with more steps continues the same run: steps 1..4, each once.
    resumed = train_command(run, "grpo.max_num_steps=4", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "finished step 4 (1 step run now, from the checkpoint of step 3)" in resumed.stdout
    assert steps(run) == [1, 2, 3, 4]
    assert [r for r in rundir.read_metrics(run)][:3] == [json.loads(l) for l in finished["metrics.jsonl"].decode().splitlines()]

    # --overwrite starts again and keeps the earlier run, byte for byte, under replaced/.
    before = snapshot(run)
    again = train_command(run, "grpo.max_num_steps=2", "--overwrite")
    assert again.returncode == 0, again.stderr
    [kept] = (run / rundir.REPLACED_DIR).iterdir()
    assert snapshot(kept) == before
    assert steps(run) == [1, 2]
    # The analysis finds one run there, the new one: replaced/ is not a run of its own.
    problems: list = []
    logs = load_directory(tmp_path / "runs", problems)
    assert [(Path(log.path), sorted(log.rows)) for log in logs] == [(run, [1, 2])]


def test_resume_refuses_metrics_that_are_not_the_checkpoints_run(tmp_path):
    run = tmp_path / "run"
    assert train_command(run, "grpo.max_num_steps=3").returncode == 0
    # Another run's metrics (only step 1) beside this run's checkpoints up to step 3.
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/loss": 0.0}) + "\n")
    before = snapshot(run)
    refused = train_command(run, "grpo.max_num_steps=4", "--resume")
    assert refused.returncode == 2
    assert "lacks step(s) [2]" in refused.stderr and "step_3" in refused.stderr
    assert snapshot(run) == before
    both = train_command(run, "--resume", "--overwrite")
    assert both.returncode == 2 and "contradict" in both.stderr


def test_records_past_the_resumed_checkpoint_are_set_aside_not_dropped(tmp_path):
    lines = [json.dumps({"step": step, "x": step}) for step in (1, 2, 3)] + ['{"step": 4, "x"', json.dumps({"step": 5})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    aside = rundir.split_metrics(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == lines[:2]
    assert aside.name.startswith("metrics.after-step2.") and aside.read_text().splitlines() == lines[2:]
    assert rundir.split_metrics(tmp_path, 2) is None  # nothing more past step 2
    assert rundir.read_metrics(tmp_path) == [{"step": 1, "x": 1}, {"step": 2, "x": 2}]


def test_a_fresh_tracker_moves_an_earlier_metrics_file_aside(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1}\n')
    tracker = Tracker(tmp_path)
    tracker.log({"b": 2.0}, step=1)
    tracker.close()
    [kept] = (tmp_path / rundir.REPLACED_DIR).iterdir()
    assert (kept / "metrics.jsonl").read_text() == '{"step": 1, "a": 1}\n'
    assert rundir.read_metrics(tmp_path) == [{"step": 1, "b": 2.0}]


def test_running_the_quickstart_again_continues_its_runs_instead_of_refusing_them(tmp_path, capsys):
    from gdpo_nemo.engines.local.quickstart import run_quickstart

    out = tmp_path / "quickstart"
    run_quickstart(TINY, out, 1)
    runs = sorted(p for p in out.iterdir() if rundir.is_run_dir(p))
    assert len(runs) == 2 and [steps(run) for run in runs] == [[1], [1]]
    # Issue 37: the two arms run side by side (both started before either finished), each
    # in a process of its own writing its log, on its share of the cores.
    events = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith(("started ", "finished "))]
    assert events == ["started", "started", "finished", "finished"]
    assert all("finished step 1" in (out / "logs" / f"{run.name}.log").read_text() for run in runs)
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert [json.loads((run / "provenance.json").read_text())["invocations"][0]["numerics"]["threads"] for run in runs] == [threads] * 2
    first = {run.name: snapshot(run)["metrics.jsonl"] for run in runs}
    run_quickstart(TINY, out, 2)  # the README's command run again, with more steps
    assert [steps(run) for run in runs] == [[1, 2], [1, 2]]
    assert all(snapshot(run)["metrics.jsonl"].startswith(first[run.name]) for run in runs)


def test_a_run_that_stopped_before_its_first_step_may_be_started_again(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("earlier: config\n")
    (run / "metrics.jsonl").write_text("")
    assert not rundir.holds_run_data(run)
    assert train_command(run, "grpo.max_num_steps=1").returncode == 0
    assert steps(run) == [1]
    (run / "notes.txt").write_text("mine")
    assert rundir.holds_run_data(run)


def test_evaluating_a_step_again_keeps_the_earlier_result(tmp_path):
    from test_eval import DATA, Replay

    from gdpo_nemo.evaluation.runner import run_benchmarks

    def evaluate(answer: str) -> dict:
        return run_benchmarks("math", ["aime"], Replay([[answer], ["$\\boxed{6}$"]]), data_dir=DATA, out_dir=tmp_path,
                              run_id=None, step=3, samples=1, max_new_tokens=10, temperature=0, top_p=1,
                              exceed_limit=4000, log=lambda *a: None)

    assert evaluate("$\\boxed{9}$")["aime"]["acc"] == 1.0
    first = rundir.eval_file(tmp_path, "aime", 3).read_bytes()
    assert evaluate("$\\boxed{1}$")["aime"]["acc"] == 0.5
    [kept] = (tmp_path / "eval" / "aime" / rundir.REPLACED_DIR).iterdir()
    assert (kept / "step_3.json").read_bytes() == first and (kept / "step_3.responses.jsonl").exists()
    from gdpo_nemo.analysis.evals import find_eval_files

    assert find_eval_files(tmp_path) == [rundir.eval_file(tmp_path, "aime", 3)]  # the analysis reads the newest only


def test_a_hub_model_this_machine_cannot_load_is_one_line_within_seconds_and_leaves_no_run_dir(tmp_path):
    # Issue 37: about 50 s of Hugging Face retries, then an OSError traceback, and the
    # config.yaml left behind refused the rerun. HF_HUB_OFFLINE stands for a machine without a
    # network (this one has none either): the answer must not wait for one.
    repo = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", "configs/local/tiny.yaml",
                           "--run-dir", str(run_dir), "policy.model_name=someone/no-such-model-here",
                           "policy.tokenizer.name=someone/no-such-model-here"],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "policy.model_name='someone/no-such-model-here' is not a folder here" in lines[-1]
    assert not run_dir.exists()  # nothing that would refuse the rerun


def test_a_start_that_failed_before_its_first_step_does_not_block_the_rerun_its_message_suggests(tmp_path):
    # Issue 37: a failed WANDB_MODE=online start left config.yaml, an empty metrics.jsonl and
    # (since issue 34) provenance.json, and the rerun was refused. The failed start's provenance
    # is set aside (replaced/<time>/), the rerun's record is the run's first.
    from gdpo_nemo.runs import provenance

    repo = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    base = [sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", "configs/local/tiny.yaml", "--run-dir",
            str(run_dir), "grpo.max_num_steps=1"]
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_DIR": str(tmp_path / "wandb-home")}
    env.pop("WANDB_API_KEY", None)
    failed = subprocess.run([*base, "logger.wandb_enabled=true"], cwd=repo, capture_output=True, text=True,
                            timeout=300, env={**env, "WANDB_MODE": "online"})
    assert failed.returncode == 2 and "unset WANDB_MODE" in failed.stderr.strip().splitlines()[-1], failed.stderr[-1500:]
    rerun = subprocess.run([*base, "logger.wandb_enabled=false"], cwd=repo, capture_output=True, text=True,
                           timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert len(provenance.read(run_dir)) == 1
    assert [p.name for p in (run_dir / "replaced").glob("*/provenance.json")] == ["provenance.json"]
