"""NeMo RL's own grpo_train, end to end, on this CPU (gdpo_nemo.engines.nemo.cpu).

Every paper task and every estimator run 2 steps through NeMo RL's real trainer, Policy,
v2 DTensor worker, loss, Logger and CheckpointManager, with our environments, processors,
hooks and estimators, on builtin:tiny. Another Ray instance runs on the machine the whole
time (conftest's `other_ray`): NeMo RL's memory tracker must not trip over it.

builtin:tiny scores 0 on every reward, so runs that must move (advantages, weights,
resuming, checkpoint ranking) use `early_stopping_tiny`, whose answers stop after 1 to 32+
tokens, on math with a 10-token length limit: the length reward varies within groups.
One run uses the embedded SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from support import ACTOR_RUN, MATH_CHECKPOINTING, actor_classes, cpu_config, early_stopping_tiny, nemo_rl_advantages

# Each task with a different estimator: every task and every estimator once.
MATRIX = {
    "gsm8k": "gdpo",
    "toolcall": "grpo",
    "code": "grpo_no_std",
    "math": "gdpo_no_bn",
}
WHOSE = {  # which estimator class grpo_train gets for each
    "gdpo": "nemo_rl.algorithms.advantage_estimator.GDPOAdvantageEstimator",
    "grpo": "nemo_rl.algorithms.advantage_estimator.GRPOAdvantageEstimator",
    "grpo_no_std": "nemo_rl.algorithms.advantage_estimator.GRPOAdvantageEstimator",
    "gdpo_no_bn": "gdpo_nemo.engines.nemo.estimators.AdvantageEstimator",
}
COMPONENTS = {
    "gsm8k": ["correctness", "format", "integer"],
    "toolcall": ["correctness", "format"],
    "code": ["bug", "length", "pass"],
    "math": ["correctness", "length"],
}
LENGTH_LIMIT = ("gdpo.length_limit=10",)  # early_stopping_tiny's answers straddle it
# 8 answers per prompt: a group's answers fall on both sides of the limit, so DAPO (kept on
# for this run, as the math configs have it) finds groups to train on.
MOVING_GENERATIONS = 8


def _train(config, out=None, worker=None):
    from gdpo_nemo.engines.nemo.cpu.train import train_on_cpu

    return train_on_cpu(config, out=out, worker=worker)



@pytest.fixture(scope="module")
def stopper(local_ray, tmp_path_factory):
    if local_ray is None:
        return None
    return early_stopping_tiny(tmp_path_factory.mktemp("early_stopping_tiny"))


@pytest.fixture(scope="module")
def tiny_dir(local_ray):
    if local_ray is None:
        return None
    from gdpo_nemo.engines.nemo.cpu.models import model_folder

    return model_folder("tiny", seed=0)


def _toolcall_files(folder: Path, config: dict) -> Path:
    """The offline tool-calling rows as ToolRL-style jsonl files, the first training row's
    ground truth broken (a blank line between its calls: a data error, not a model error)."""
    from gdpo_nemo.tasks import get_task

    spec = get_task("toolcall")
    folder.mkdir(parents=True, exist_ok=True)
    for split, stem in (("train", "train"), ("validation", "validation")):
        rows = []
        for i, example in enumerate(spec.load(split, source="offline", limit=4, seed=0)):
            truth = example.ground_truth
            if split == "train" and i == 0:
                truth = "<think>two calls</think>\n<tool_call>\n{\"name\": \"a\", \"parameters\": {}}\n\n" \
                        "{\"name\": \"b\", \"parameters\": {}}\n</tool_call>"
            rows.append({"prompt": example.messages, "reward_model": {"ground_truth": truth}})
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture(scope="module")
def matrix_runs(local_ray, tiny_dir, stopper, tmp_path_factory):
    """{task: (config, CpuRun, printed)}: 2 steps of each MATRIX entry."""
    if local_ray is None:
        return None
    runs = {}
    before = actor_classes()
    for task, algo in MATRIX.items():
        run_dir = tmp_path_factory.mktemp(f"{task}_{algo}") / "run"
        overrides: tuple = ()
        model, tiny, compose = tiny_dir, True, ()
        if task == "toolcall":
            data = _toolcall_files(run_dir.parent / "data", {})
            overrides = (f"+data.train.data_path={data}", f"+data.validation.data_path={data}",
                         "data.train.source=file", "data.validation.source=file", "data.shuffle=false")
        if task == "math":  # the run that moves: keep DAPO on, rank checkpoints by the length reward
            model, tiny, compose = stopper, False, LENGTH_LIMIT
            overrides = MATH_CHECKPOINTING
        config = cpu_config(task, algo, run_dir, model, tiny=tiny, compose=compose, overrides=overrides,
                            steps=3 if task == "math" else 2, generations=MOVING_GENERATIONS if task == "math" else 2)
        printed = io.StringIO()
        result = _train(config, out=printed, worker="actor" if task == ACTOR_RUN else None)
        runs[task] = (config, result, printed.getvalue())
    _MATRIX_ACTORS.update(actor_classes() - before)
    return runs


_MATRIX_ACTORS: Counter = Counter()  # the Ray actors the matrix's runs made, by class


def test_each_run_starts_its_policy_worker_from_the_driver_not_from_an_initializer_actor(matrix_runs):
    """NeMo RL makes each worker through an IsolatedWorkerInitializer actor (a process that
    imports the worker's module, about 20 s of CPU); the CPU path runs that initializer's code
    in the driver (gdpo_nemo.engines.nemo.cpu.cluster.workers_started_by_the_driver): one
    policy worker per run, and no initializer actor. The worker itself is made in the driver
    too (driver_worker: no Ray actor), except in ACTOR_RUN, NeMo RL's own Ray actor; every run
    released its worker and the process group its start made."""
    if matrix_runs is None:
        return
    import torch.distributed as dist

    from gdpo_nemo.engines.nemo.cpu import driver_worker
    from gdpo_nemo.engines.nemo.cpu.worker import CpuPolicyWorkerImpl

    assert [result.initializers_in_driver for _, result, _ in matrix_runs.values()] == [1] * len(MATRIX)
    assert _MATRIX_ACTORS["IsolatedWorkerInitializer"] == 0, _MATRIX_ACTORS
    assert {task: result.worker for task, (_, result, _) in matrix_runs.items()} == {
        task: "actor" if task == ACTOR_RUN else "driver" for task in MATRIX}
    assert _MATRIX_ACTORS[CpuPolicyWorkerImpl.__name__] == 1, _MATRIX_ACTORS
    assert driver_worker.live_workers() == [] and not dist.is_initialized()
    for _, result, _ in matrix_runs.values():  # the worker's patches, asked of the worker wherever it ran
        assert any(line.startswith("torch.distributed.init_process_group") for line in result.device_patches)


@pytest.mark.parametrize("task", sorted(MATRIX))
def test_two_steps_of_nemo_rl_grpo_train_run_every_task_on_the_cpu(matrix_runs, task):
    from gdpo_nemo.runs import rundir

    config, result, printed = matrix_runs[task]
    records = {r["step"]: r for r in rundir.read_metrics(result.run_dir)}
    steps = 3 if task == "math" else 2
    assert sorted(records) == list(range(1, steps + 1))
    for step, record in records.items():
        for name in COMPONENTS[task]:
            assert f"train/reward/{name}" in record, (step, sorted(record))
        assert math.isfinite(record["train/loss"])
    assert printed.count("[step ") == steps
    assert rundir.is_done(result.run_dir)


@pytest.mark.parametrize("task", sorted(MATRIX))
def test_grpo_train_gets_the_estimator_the_config_names_nemo_rl_s_or_ours(matrix_runs, task):
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages

    config, result, printed = matrix_runs[task]
    records = read_advantages(result.run_dir)
    assert {r["estimator"] for r in records.values()} == {WHOSE[MATRIX[task]]}
    assert ("gdpo_nemo's 'gdpo_no_bn'" in printed) == (MATRIX[task] == "gdpo_no_bn")


@pytest.mark.parametrize("task", sorted(MATRIX))
def test_the_advantages_nemo_rl_trained_on_equal_compute_advantages_of_the_logged_rewards(matrix_runs, task):
    import torch

    from gdpo_nemo.config.settings import EstimatorSettings
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages
    from gdpo_nemo.engines.nemo.estimators import estimator_advantages

    config, result, printed = matrix_runs[task]
    settings = EstimatorSettings.from_gdpo(config["gdpo"], nemo_engine=True)
    for step, record in read_advantages(result.run_dir).items():
        components = {name: torch.tensor(values, dtype=torch.float64) for name, values in record["components"].items()}
        assert sorted(components) == COMPONENTS[task]
        expected = estimator_advantages(settings, components, torch.tensor(record["group_ids"]))
        trained = nemo_rl_advantages(result.run_dir, step)
        assert len(trained) == len(expected) == config["grpo"]["num_prompts_per_step"] * config["grpo"]["num_generations_per_prompt"]
        assert trained == pytest.approx(expected.tolist(), abs=2e-5), (step, record["components"])


def test_the_moving_run_has_non_zero_advantages_and_changed_weights(matrix_runs):
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages

    config, result, printed = matrix_runs["math"]
    advantages = [a for r in read_advantages(result.run_dir).values() for a in r["advantages"]]
    assert max(abs(a) for a in advantages) > 0.1
    assert result.weights_after != result.weights_before


def test_per_component_metrics_reach_nemo_rl_s_own_tensorboard_logger(matrix_runs):
    from gdpo_nemo.analysis.tfevents import read_scalars

    config, result, printed = matrix_runs["gsm8k"]
    files = list((result.run_dir / "tensorboard").rglob("events.out.tfevents*"))
    assert files
    tags = {(step, tag) for path in files for step, tag, _ in read_scalars(path)}
    for name in COMPONENTS["gsm8k"]:
        assert (1, f"train/reward/{name}") in tags and (2, f"validation/reward/{name}") in tags


def test_validation_runs_every_step_with_per_component_rewards(matrix_runs):
    from gdpo_nemo.runs import rundir

    config, result, printed = matrix_runs["toolcall"]
    for record in rundir.read_metrics(result.run_dir):
        assert "validation/accuracy" in record
        assert {"validation/reward/correctness", "validation/reward/format"} <= set(record)


def test_data_errors_of_a_broken_ground_truth_are_counted_per_sample(matrix_runs):
    from gdpo_nemo.runs import rundir

    config, result, printed = matrix_runs["toolcall"]
    records = {r["step"]: r for r in rundir.read_metrics(result.run_dir)}
    # the first training row (2 answers) has the broken ground truth; step 2's rows are fine
    assert (records[1]["train/data_errors"], records[2]["train/data_errors"]) == (2, 0)


def _train_data_rows(run_dir: Path, step: int) -> list[dict]:
    """NeMo RL's own ``train_data_step<N>.jsonl`` rows (each written as a batch of one)."""
    rows = []
    for line in (Path(run_dir) / f"train_data_step{step}.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.append({k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in row.items()})
    return rows


@pytest.mark.parametrize("task", sorted(MATRIX))
def test_every_logged_reward_family_adds_up_to_nemo_rl_s_total_of_its_samples(matrix_runs, task):
    """The families of docs/interfaces.md, per step of the real grpo_train: train/reward/<name>
    adds up to NeMo RL's train/reward; with DAPO (the math run) filtered_reward/<name> adds
    up to train/filtered_reward and is the mean of the batch that was trained: the components
    advantages.jsonl recorded at the estimator and NeMo RL's own train_data_step<N>.jsonl;
    validation/reward/<name> adds up to validation/accuracy (NeMo RL's mean of the sum)."""
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages
    from gdpo_nemo.runs import rundir

    config, result, printed = matrix_runs[task]
    names = COMPONENTS[task]
    filtered = config["grpo"]["use_dynamic_sampling"]
    assert filtered == (task == "math")
    trained = read_advantages(result.run_dir)
    for record in rundir.read_metrics(result.run_dir):
        step = record["step"]
        assert sum(record[f"validation/reward/{n}"] for n in names) == pytest.approx(record["validation/accuracy"], abs=1e-6)
        if f"train/loss" not in record:
            continue
        assert sum(record[f"train/reward/{n}"] for n in names) == pytest.approx(record["train/reward"], abs=1e-6)
        family = "train/filtered_reward" if filtered else "train/reward"
        rows = _train_data_rows(result.run_dir, step)
        logged_totals = [row["filtered_rewards" if filtered else "rewards"] for row in rows]
        assert sum(record[f"{family}/{n}"] for n in names) == pytest.approx(record[family], abs=1e-6)
        assert record[family] == pytest.approx(sum(logged_totals) / len(logged_totals), abs=1e-6)
        for name in names:
            values = trained[step]["components"][name]
            assert record[f"{family}/{name}"] == pytest.approx(sum(values) / len(values), abs=1e-9), (step, name)
        assert [sum(trained[step]["components"][n][i] for n in names) for i in range(len(rows))] == pytest.approx(logged_totals)


def test_nemo_rl_checkpoint_manager_keeps_the_best_by_the_configured_val_metric(matrix_runs):
    from gdpo_nemo.runs import rundir
    from nemo_rl.utils.checkpoint import CheckpointManager

    config, result, printed = matrix_runs["math"]
    values = {r["step"]: r["validation/reward/length"] for r in rundir.read_metrics(result.run_dir)}
    kept = {step for step, _ in rundir.checkpoint_steps(result.run_dir / "checkpoints")}
    best = max(values, key=lambda s: (values[s], s))  # NeMo RL: higher is better, ties to the later step
    assert kept == {best, max(values)}
    for step, path in rundir.checkpoint_steps(result.run_dir / "checkpoints"):
        info = json.loads((path / "training_info.json").read_text())
        assert info["val:reward/length"] == pytest.approx(values[step])
    manager = CheckpointManager(config["checkpointing"])
    assert Path(manager.get_best_checkpoint_path()).name == f"step_{best}"


_KILL_AFTER_FIRST_CHECKPOINT = textwrap.dedent("""
    import os, signal, sys
    from nemo_rl.utils import checkpoint

    rename = checkpoint.CheckpointManager._rename_checkpoint

    def rename_then_die(self, path):
        rename(self, path)
        if str(path).rstrip("/").endswith("tmp_step_1"):
            os.killpg(os.getpgrp(), signal.SIGKILL)  # the job dies right after step 1 is saved

    checkpoint.CheckpointManager._rename_checkpoint = rename_then_die
    from gdpo_nemo.commands.nemo_smoke import main
    sys.exit(main(sys.argv[1:]))
""")


def test_the_cpu_path_reads_batches_in_the_driver_and_a_run_checkpointed_with_a_loader_worker_resumes_with_it(
        matrix_runs, tmp_path):
    """data.num_workers 0 on the CPU path (a loader worker is a fork of a driver running Ray's
    threads); a checkpoint's loader state says how the run started, and the run resumes that
    way: torchdata's states of the two kinds do not load into each other, and the two draw
    the shuffle differently, so the resumed batches must be the uninterrupted run's."""
    from types import SimpleNamespace

    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from gdpo_nemo.engines.nemo.cpu.train import _loaders, saved_loader_workers

    config, _, _ = matrix_runs["gsm8k"]
    assert config["data"]["num_workers"] == 0
    rows = [{"message_log": [], "length": 1, "loss_multiplier": 1.0, "extra_env_info": None, "idx": i} for i in range(24)]
    master = SimpleNamespace(grpo={"num_prompts_per_step": 3, "use_dynamic_sampling": False, "val_period": 0,
                                   "val_at_start": False, "val_at_end": False},
                             data={"shuffle": True, "num_workers": 0})
    orders = {}
    for workers in (1, 0):
        torch.manual_seed(7)
        loader = StatefulDataLoader(rows, batch_size=3, shuffle=True, drop_last=True, num_workers=workers,
                                    collate_fn=lambda batch: [row["idx"] for row in batch])
        batches = iter(loader)
        first = [next(batches) for _ in range(2)]
        checkpoint = tmp_path / f"workers{workers}"
        checkpoint.mkdir()
        torch.save(loader.state_dict(), checkpoint / "train_dataloader.pt")
        orders[workers] = first + [next(batches) for _ in range(3)]
        assert saved_loader_workers(checkpoint, 0) == workers
        torch.manual_seed(99)  # the resumed run's own seed draws nothing here: the state holds it
        resumed, _ = _loaders(master, rows, None, checkpoint)
        assert [[int(i) for i in batch["idx"]] for batch in list(resumed)[:3]] == orders[workers][2:]
    assert orders[1] != orders[0]  # had the resume taken the configured 0, its batches would differ
    assert saved_loader_workers(tmp_path, 0) == 0 and saved_loader_workers(tmp_path, 1) == 1  # no loader state


_FAIL_INSIDE_LAST_STEP = textwrap.dedent("""
    import os, signal, sys
    from nemo_rl.utils import logger

    last = int(sys.argv.pop(1))
    log_metrics = logger.TensorboardLogger.log_metrics

    def fail_at_the_last_call_of_the_last_step(self, metrics, step, prefix="", step_metric=None, step_finished=False):
        if step == last and step_finished:  # earlier calls of this step are logged: a partial step
            # Slurm's scancel, long after Ray's driver started (and took SIGTERM over)
            os.kill(os.getpid(), signal.SIGTERM)
        return log_metrics(self, metrics, step, prefix, step_metric, step_finished)

    logger.TensorboardLogger.log_metrics = fail_at_the_last_call_of_the_last_step
    from gdpo_nemo.commands.nemo_smoke import main
    sys.exit(main(sys.argv[1:]))
""")


def _users_shell(tmp_path: Path, name: str) -> dict:
    """A user's shell: no W&B key or mode, an empty HOME (no netrc), no RAY_ADDRESS; a Ray
    temp dir of the job's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "RAY_ADDRESS"}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), RAY_TMPDIR=str(Path(os.environ.get("RAY_TMPDIR", "/tmp")) / name))
    Path(env["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    return env


def test_a_job_killed_after_its_first_checkpoint_resumes_to_the_uninterrupted_step_and_a_failed_last_step_is_no_finished_seed(
        matrix_runs, stopper, tmp_path):
    """The matrix's math run as a user's shell runs it twice, `gdpo-nemo nemo-smoke --wandb`
    (no W&B key, no WANDB_MODE, an empty HOME: W&B runs offline instead of asking for a login):

    1. SIGKILLed (the whole process group) right after step 1's checkpoint becomes the one to
       resume from. Step 1's record was written before that (defer_finalization): the kill
       never takes it with it.
    2. Resumed by the same command, it gives the uninterrupted run's step 2, and is sent SIGTERM
       inside its last step, after Ray's driver connected: our handler (reclaimed from Ray)
       ends it with exit code 143 through every `finally`, so its partial step is not a step in
       metrics.jsonl, its W&B run ends failed, FAILED names why, and the report calls the run
       crashed from the run dir and from the two jobs' W&B files alone."""
    if matrix_runs is None:
        return
    from gdpo_nemo import config as cc
    from gdpo_nemo.analysis.frame import assemble
    from gdpo_nemo.analysis.sources import read_run_dir
    from gdpo_nemo.analysis.tables import incomplete_runs
    from gdpo_nemo.analysis.wandb_offline import chain_requeued_jobs, find_offline_runs, read_offline_run
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages
    from gdpo_nemo.runs import rundir
    from support import TASK_RUNS

    run_dir = tmp_path / "runs" / "killed"
    source = tmp_path / "run.yaml"  # the composed config a user has (W&B on), cut down by the command
    option, model = TASK_RUNS["math"]
    source.write_text(cc.dump(cc.compose(option, model, MATRIX["math"], cluster="nemo_1n1g", seed=0, overrides=list(LENGTH_LIMIT))))
    command = [str(source), *MATH_CHECKPOINTING, "--model", str(stopper),
               "--run-dir", str(run_dir), "--steps", "3", "--generations", str(MOVING_GENERATIONS), "--max-new-tokens", "32",
               "--data", "offline", "--wandb"]
    env = _users_shell(tmp_path, "killed")
    done = subprocess.run([sys.executable, "-c", _KILL_AFTER_FIRST_CHECKPOINT, *command], env=env, capture_output=True,
                          text=True, start_new_session=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stdout[-3000:] + done.stderr[-3000:]
    assert [s for s, _ in rundir.checkpoint_steps(run_dir / "checkpoints")] == [1]
    assert [r["step"] for r in rundir.read_metrics(run_dir)] == [1]  # the record outlived the kill
    assert not (run_dir / "train_data_step2.jsonl").exists()
    assert not any(run_dir.glob("*/step_2")) and not any(run_dir.glob("checkpoints/*step_2"))

    done = subprocess.run([sys.executable, "-c", _FAIL_INSIDE_LAST_STEP, "3", *command, "--resume"], env=env,
                          capture_output=True, text=True, start_new_session=True, timeout=600)
    printed = done.stdout + done.stderr
    assert done.returncode == 128 + signal.SIGTERM, printed[-3000:]
    assert "No API key" not in printed and "W&B: offline run under" in printed
    # metrics.jsonl: steps 1 and 2, not the half of step 3
    mine = {r["step"]: r for r in rundir.read_metrics(run_dir)}
    assert sorted(mine) == [1, 2]
    assert "metrics.jsonl: step 3 did not finish" in (run_dir / "nemo_rl.log").read_text()  # NeMo RL's own output
    assert not rundir.done_path(run_dir).exists()
    assert rundir.read_failed(run_dir)["error"] == "SystemExit: 143"
    # the killed job's step 1 and the resumed step 2 are the uninterrupted run's: these jobs'
    # policy worker ran in the driver, the uninterrupted run's in a Ray actor (ACTOR_RUN), so
    # this also holds the in-driver worker to the actor's numbers and the driver's shuffle
    _, uninterrupted, _ = matrix_runs["math"]
    assert uninterrupted.worker == "actor"
    theirs = {r["step"]: r for r in rundir.read_metrics(uninterrupted.run_dir)}
    for step in (1, 2):
        for key in ("train/loss", "train/reward/length", "train/reward/correctness", "validation/reward/length",
                    "train/grad_norm", "train/kl_penalty"):
            assert mine[step][key] == pytest.approx(theirs[step][key], rel=1e-5, abs=1e-7), (step, key)
        ours, reference = read_advantages(run_dir)[step], read_advantages(uninterrupted.run_dir)[step]
        assert ours["components"] == reference["components"], step
        assert ours["advantages"] == pytest.approx(reference["advantages"]), step
    assert max(abs(a) for a in ours["advantages"]) > 0.1  # step 2 trained
    # provenance names what ran, at each job: NeMo RL's version, the CPU path's generation (not the config's vLLM)
    import nemo_rl
    from gdpo_nemo.engines.nemo.cpu.train import CPU_GENERATION
    from gdpo_nemo.runs import provenance

    records = provenance.read(run_dir)
    assert records
    for record in records:
        # .nemo-rl/nemo-rl is an unpacked archive inside this checkout: NeMo RL's "+<sha>" names the
        # checkout's commit, not NeMo RL's, and is left out, as is a commit
        assert record["libraries"]["nemo_rl"] == nemo_rl.__version__.split("+", 1)[0] == "0.6.0"
        assert "nemo_rl_commit" not in record["libraries"]
        assert record["numerics"]["generation_backend"] == CPU_GENERATION
    # W&B: one offline run per job in the run dir (the killed one unfinished), joined; the last
    # one ended failed. Its rows hold what was logged of step 3 too: the report decides.
    jobs = [read_offline_run(job) for job in find_offline_runs(run_dir)]
    assert [job.status for job in jobs] == ["unfinished", "crashed"], [job.path for job in jobs]
    [log] = chain_requeued_jobs(jobs)
    assert log.status == "crashed" and {1, 2} <= set(log.rows)
    # the report, from the run dir and from the W&B files alone: crashed, not a finished seed.
    # W&B's last step may be the failed one: NeMo RL's Logger calls W&B first, which commits the
    # step's row at its last call, before TensorBoard's (where this job failed).
    for logs, last in ((read_run_dir(run_dir, []), 2), ([log], max(log.rows))):
        dataset = assemble(logs)
        [status] = dataset.runs["status"]
        assert status == "crashed", logs
        assert list(incomplete_runs(dataset).values()) == [f"crashed at step {last} of 3"]


def test_dynamic_sampling_stops_at_its_configured_limit(matrix_runs):
    """NeMo RL's own dynamic_sampling (behind our hook), as grpo_train calls it, on draws
    whose every group has zero spread: it asks for another draw up to the limit (2 on the
    CPU path), then stops the run."""
    import torch

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.utils.timer import Timer

    config, _, _ = matrix_runs["math"]
    master = grpo_module.MasterConfig(**config)
    limit = master.grpo.dynamic_sampling_max_gen_batches
    assert (master.grpo.use_dynamic_sampling, limit) == (True, 2)

    def flat_draw():
        return BatchedDataDict({"idx": [0, 0, 1, 1], "reward/correctness": torch.zeros(4), "reward/length": torch.ones(4),
                                "total_reward": torch.ones(4)})

    for draws in range(1, limit + 1):
        kept, complete, _, _ = grpo_module.dynamic_sampling(flat_draw(), torch.zeros(4), torch.ones(4), draws, master, Timer(), None)
        assert (kept.size, complete) == (0, False)
    with pytest.raises(ValueError, match=r"maximum allowed number of batches \(2\)"):
        grpo_module.dynamic_sampling(flat_draw(), torch.zeros(4), torch.ones(4), limit + 1, master, Timer(), None)


def test_the_embedded_smollm2_trains_with_non_zero_advantages_within_the_dapo_limit(local_ray, tmp_path):
    if local_ray is None:
        return
    from gdpo_nemo.engines.nemo.cpu.models import model_folder
    from gdpo_nemo.engines.nemo.cpu.report import read_advantages

    model = model_folder("smollm2-135m")
    # SmolLM2 answers some of these right, and some within 44 tokens; DAPO (the math configs'
    # own, 4 prompts a draw, at most 5 draws here) keeps the groups whose answers differ.
    config = cpu_config("math", "gdpo", tmp_path / "run", model, steps=1, prompts=2, generations=4, max_new_tokens=48,
                        val_period=0, tiny=False, compose=("gdpo.length_limit=44",),
                        overrides=("checkpointing.enabled=false", "loss_fn.reference_policy_kl_penalty=0.0",
                                   "grpo.dynamic_sampling_max_gen_batches=4", "grpo.batch_multiplier=2",
                                   "policy.train_micro_batch_size=4", "policy.logprob_batch_size=4"))
    assert config["grpo"]["use_dynamic_sampling"] is True
    result = _train(config)
    record = read_advantages(result.run_dir)[1]
    assert max(abs(a) for a in record["advantages"]) > 0.1, record["components"]
    assert nemo_rl_advantages(result.run_dir, 1) == pytest.approx(record["advantages"], abs=2e-5)
    assert result.weights_after != result.weights_before
    assert 1 <= result.generate_calls <= 1 + 4  # the first draw and at most the limit's redraws


def test_every_cuda_call_site_the_device_mapping_names_is_at_the_pinned_commit(local_ray):
    if local_ray is None:
        return
    import nemo_rl

    from gdpo_nemo.engines.nemo.cpu.device import CALL_SITES

    root = Path(nemo_rl.__file__).resolve().parents[1]
    for site in CALL_SITES:
        lines = (root / site.path).read_text().splitlines()
        assert site.text in lines[site.line - 1], f"{site.path}:{site.line} no longer reads {site.text!r}"


def test_nemo_rl_memory_tracker_would_fail_beside_another_ray_without_the_address(local_ray, other_ray):
    """The trap the CPU path's RAY_ADDRESS avoids: NeMo RL's memory tracker asks Ray for a
    memory summary without an address, which fails with another Ray on the machine."""
    if local_ray is None:
        return
    from ray.scripts.scripts import memory_summary  # what nemo_rl/utils/memory_tracker.py calls

    saved = os.environ.pop("RAY_ADDRESS")
    try:
        with pytest.raises(ConnectionError, match="multiple"):
            memory_summary(stats_only=True, num_entries=1)
    finally:
        os.environ["RAY_ADDRESS"] = saved
    assert "Plasma memory usage" in memory_summary(stats_only=True, num_entries=1)


def test_the_plugin_names_the_ray_nemo_rl_joined_in_ray_address(local_ray, monkeypatch):
    """On a cluster NeMo RL's own init_ray joins the Ray; the plugin's wrapper then pins
    RAY_ADDRESS to it, as the CPU path does (the memory tracker trap above)."""
    if local_ray is None:
        return
    from gdpo_nemo.engines.nemo import plugin

    joined = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    plugin.pin_ray_address(lambda *a, **k: joined.append(a))("log-dir")
    assert joined == [("log-dir",)]
    assert os.environ["RAY_ADDRESS"] == local_ray.get_runtime_context().gcs_address


_RAY_TIMES_OUT_ONCE = textwrap.dedent("""
    import ray
    from gdpo_nemo.engines.nemo.cpu import cluster

    real_init, calls = ray.init, []

    def init(*args, **kwargs):  # the first start fails as Ray's does when its raylet is late
        calls.append(1)
        if len(calls) == 1:
            raise Exception(cluster.STARTUP_TIMEOUT + ". This could happen because ...")
        return real_init(*args, **kwargs)

    ray.init = init
    cluster.start_ray()
    print("up", ray.is_initialized(), len(calls), ray.cluster_resources().get("CPU", 0) > 0)
    cluster.stop_ray()
    try:  # what NeMo RL's Policy.__del__ does at the exit of a failed run: a remote call
        ray.put(1)
    except Exception as err:
        print("after stop_ray:", type(err).__name__, ray.is_initialized(), len(calls))
""")


def test_a_ray_start_that_times_out_on_a_busy_machine_is_tried_again(local_ray, tmp_path):
    """Ray's head waits a fixed 30 s for its raylet; on a busy machine a Slurm job's start
    timed out there. start_ray starts it again, saying so (here the first start fails as
    Ray's does, and the second is Ray's real start)."""
    if local_ray is None:
        return
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "retry")
    Path(env["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", _RAY_TIMES_OUT_ONCE], env=env, capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "up True 2 True" in done.stdout
    assert "did not register within Ray's fixed 30 s" in done.stderr and "(2 of 3)" in done.stderr
    # ...and after stop_ray nothing starts another Ray behind the run's back (Ray's auto-init,
    # which a remote call in NeMo RL's Policy.__del__ set off at the exit of a failed Slurm job,
    # and whose start hung that job until it was cancelled)
    assert "after stop_ray: RaySystemError False 2" in done.stdout, done.stdout


_TAKEN_MASTER_PORT = textwrap.dedent("""
    import os, socket
    from gdpo_nemo.engines.nemo.cpu import device

    device.install()
    import torch
    import torch.distributed as dist

    held = socket.socket()  # another job's TCPStore on the port NeMo RL handed this worker
    held.bind(("", 0))
    held.listen()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(held.getsockname()[1]), WORLD_SIZE="1", RANK="0",
                      LOCAL_RANK="0")
    dist.init_process_group(backend="nccl")  # what NeMo RL's setup_distributed calls
    summed = torch.ones(3)
    dist.all_reduce(summed)
    print("group", dist.get_backend(), dist.get_world_size(), summed.tolist())
""")


def test_the_cpu_workers_process_group_needs_no_port_another_job_can_take(local_ray):
    """NeMo RL hands each worker a master port it found free (bound once and let go, in
    1400-1999); with the journey's four jobs starting on one node, another job's store took
    it first and the policy worker died with EADDRINUSE. The CPU path's one worker uses an
    in-memory store: a taken master port is no matter."""
    if local_ray is None:
        return
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MASTER_PORT", "MASTER_ADDR")}
    done = subprocess.run([sys.executable, "-c", _TAKEN_MASTER_PORT], env=env, capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "group gloo 1 [1.0, 1.0, 1.0]" in done.stdout


def test_a_memory_summary_that_cannot_reach_ray_is_asked_again_then_given_as_unavailable(local_ray, monkeypatch):
    """NeMo RL's memory tracker opens a new GCS connection for Ray's memory summary at every
    stage; on a loaded machine one connect failed and ended a Slurm job's run after step 1.
    On the CPU path the summary is asked once more, then printed as unavailable."""
    if local_ray is None:
        return
    import ray
    from nemo_rl.utils import memory_tracker

    from gdpo_nemo.engines.nemo.cpu import train

    calls = []

    def failing(*args, failures, **kwargs):
        calls.append(1)
        if len(calls) <= failures:
            raise ray.exceptions.RaySystemError("Failed to connect to GCS. Please check if the GCS server is running")
        return "object store: 0 B"

    point = memory_tracker.MemoryTrackerDataPoint(stage="Generation", memory_used_before_stage_gb=1.0, variables_before_stage=[],
                                                  memory_used_after_stage_gb=1.0, variables_after_stage=[])
    for failures, shown in ((1, "object store: 0 B"), (2, "(Ray's memory summary unavailable: System error: Failed to connect to GCS")):
        calls.clear()
        monkeypatch.setattr(memory_tracker, "memory_summary", lambda *a, failures=failures, **k: failing(*a, failures=failures, **k))
        train._tolerant_memory_tracker()
        train._tolerant_memory_tracker()  # idempotent: one wrapper
        assert shown in point.get_snapshot_str() and len(calls) == 2


def test_a_shutdown_step_that_never_ends_is_left_behind_and_one_that_fails_still_raises(local_ray, capsys):
    """A run whose Ray connection broke hung in the placement groups' removal and held its
    Slurm job until cancelled: each shutdown step gets a bound, then the next one comes."""
    if local_ray is None:
        return
    import threading

    from gdpo_nemo.engines.nemo.cpu import train

    never = threading.Event()
    train._bounded("the placement groups", never.wait, seconds=0.5)
    assert "stopping the placement groups did not end within 0.5 s" in capsys.readouterr().err
    with pytest.raises(ValueError, match="refused"):
        train._bounded("the policy's workers", lambda: (_ for _ in ()).throw(ValueError("refused")), seconds=5)
    never.set()
