"""Loaders: each log format on disk (and the W&B API) into the one tidy frame.

Files are written by the real writers wherever one runs here: W&B offline files by
`wandb.init(mode="offline")`, TensorBoard files by torch's `SummaryWriter` (the writer
NeMo RL's TensorboardLogger uses). The W&B *server* path is the one fake: no server is
reachable here, so `FakeApi` below implements exactly the public calls the loader uses
(`Api.runs(path, filters)`, `run.name/.group/.config/.state`, `run.scan_history(page_size)`).
"""

from __future__ import annotations

import json
import math

import pytest

from gdpo_nemo.analysis.frame import METRIC_COLUMNS
from gdpo_nemo.analysis.load import load_source
from gdpo_nemo.analysis.tfevents import read_scalars
from gdpo_nemo.analysis.wandb_offline import find_offline_runs, read_offline_run
from gdpo_nemo.runs.run_id import RunId

from tests.support.synthetic import run_config, write_eval, write_run_dir

RID = RunId("exp", "gsm8k", "tiny", "gdpo", 3)


def values(dataset, run_id, metric):
    rows = dataset.metrics[(dataset.metrics["run_id"] == run_id) & (dataset.metrics["metric"] == metric)]
    return dict(zip(rows["step"], rows["value"]))


def test_run_dir_becomes_tidy_rows_with_identity_from_config(tmp_path):
    write_run_dir(tmp_path, RID, [{"step": 1, "train/reward": 0.5, "train/reward/format": 1},
                                  {"step": 2, "train/reward": 0.75, "train/reward/format": 0}],
                  config=run_config(RID, components=("format", "correctness"), max_steps=2))
    ds = load_source(tmp_path, cache_dir=None)
    assert list(ds.metrics.columns) == METRIC_COLUMNS
    assert values(ds, RID.name, "train/reward") == {1: 0.5, 2: 0.75}
    run = ds.runs.iloc[0]
    assert (run["experiment"], run["task"], run["model"], run["algo"], run["seed"]) == ("exp", "gsm8k", "tiny", "gdpo", 3)
    assert (run["status"], run["last_step"], run["max_steps"]) == ("finished", 2, 2)
    assert run["reward_components"] == "format,correctness"
    assert ds.problems.empty


def test_run_dir_without_config_takes_its_id_from_the_folder_name(tmp_path):
    folder = tmp_path / RID.name
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 4, "train/reward": 1.5}\n')
    ds = load_source(tmp_path, cache_dir=None)
    assert ds.runs.iloc[0]["run_id"] == RID.name
    assert ds.runs.iloc[0]["status"] == "unfinished"  # no DONE marker


def test_wandb_offline_file_from_a_real_offline_run(tmp_path):
    import wandb

    config = run_config(RID)
    run = wandb.init(project="p", name=RID.name, group=RID.group, dir=str(tmp_path), mode="offline", config=config)
    for step in (1, 2, 3):
        run.log({"train/reward": step / 4, "train/reward/format": step % 2, "note": "text"}, step=step)
    run.finish()
    wandb.teardown()  # finish() returns before wandb-core has written the file; teardown waits for it
    [path] = find_offline_runs(tmp_path)
    log = read_offline_run(path)
    assert log.run_id == RID
    assert log.status == "finished"
    assert log.config["gdpo"]["algo"] == "gdpo"
    assert {s: r["train/reward"] for s, r in log.rows.items()} == {1: 0.25, 2: 0.5, 3: 0.75}
    ds = load_source(tmp_path, cache_dir=None)
    assert values(ds, RID.name, "train/reward/format") == {1: 1.0, 2: 0.0, 3: 1.0}
    # the string column is reported, not silently averaged or dropped
    [problem] = ds.problems[ds.problems["kind"] == "non_numeric"]["detail"]
    assert problem.startswith("note: 3 non-numeric value(s)")


def test_truncated_wandb_file_keeps_the_whole_records_before_the_tear(tmp_path):
    import wandb

    run = wandb.init(project="p", name=RID.name, dir=str(tmp_path), mode="offline", config=run_config(RID))
    for step in range(1, 6):
        run.log({"train/reward": float(step)}, step=step)
    run.finish()
    wandb.teardown()
    [path] = find_offline_runs(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    log = read_offline_run(path)
    assert log.status == "unfinished"  # the exit record was torn off
    assert all(r["train/reward"] == float(s) for s, r in log.rows.items())


def test_not_a_wandb_file_is_a_problem_naming_the_file(tmp_path):
    bad = tmp_path / "wandb" / "offline-run-x" / "run-x.wandb"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"hello, not wandb")
    ds = load_source(tmp_path, cache_dir=None)
    [detail] = ds.problems[ds.problems["kind"] == "unreadable_wandb"]["detail"]
    assert str(bad) in detail and "not a W&B run file" in detail


def test_nemo_rl_log_dir_tensorboard_and_train_data(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    # NeMo RL layout: <log_dir>/tensorboard/events..., <log_dir>/train_data_step<N>.jsonl;
    # our nemo engine puts log_dir inside the run dir, next to config.yaml.
    run_dir = tmp_path / "somewhere"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(json.dumps(run_config(RID)))
    log_dir = run_dir / "logs" / "exp_001"
    writer = SummaryWriter(log_dir=str(log_dir / "tensorboard"))
    for step in (1, 2):
        writer.add_scalar("train/reward", 0.5 * step, step)
        writer.add_scalar("validation/accuracy", 0.25 * step, step)
    writer.close()
    for step, rows in ((1, [(1, 0), (0, 0)]), (2, [(1, 1), (1, 0)])):
        with (log_dir / f"train_data_step{step}.jsonl").open("w") as handle:
            for fmt, correct in rows:
                handle.write(json.dumps({"content": ["..."], "rewards": fmt + correct, "reward/format": fmt,
                                         "reward/correctness": correct, "idx": 0}) + "\n")
    ds = load_source(tmp_path, cache_dir=None)
    assert list(ds.runs["run_id"]) == [RID.name]
    assert values(ds, RID.name, "train/reward") == {1: 0.5, 2: 1.0}  # TensorBoard wins over the jsonl means
    assert values(ds, RID.name, "validation/accuracy") == {1: 0.25, 2: 0.5}
    assert values(ds, RID.name, "train/reward/format") == {1: 0.5, 2: 1.0}  # mean of (1, 0) and of (1, 1)
    assert values(ds, RID.name, "train/reward/correctness") == {1: 0.0, 2: 0.5}


def test_tfevents_reader_matches_the_writer_and_survives_a_torn_tail(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path))
    for step in range(5):
        writer.add_scalar("a/b", step * 1.5, step)
    writer.close()
    [path] = tmp_path.glob("events.out.tfevents.*")
    assert list(read_scalars(path)) == [(s, "a/b", s * 1.5) for s in range(5)]
    path.write_bytes(path.read_bytes()[:-10])
    assert list(read_scalars(path)) == [(s, "a/b", s * 1.5) for s in range(4)]


def test_eval_files_and_bfcl_score_folder(tmp_path):
    rid = RunId("tc", "toolcall", "qwen2.5-1.5b", "gdpo", 0)
    run_dir = write_run_dir(tmp_path, rid, [{"step": 100, "train/reward": 1.0}])
    write_eval(run_dir, rid, "bfcl", 100, {"correct_format": 0.8066}, samples=1)
    write_eval(run_dir, rid, "aime", 100, {"acc": 0.294, "exceed": 0.065}, samples=16)
    score = run_dir / "eval" / "bfcl" / "step_100" / "score"
    (score / "Qwen_Qwen2.5-1.5B-Instruct").mkdir(parents=True)
    (score / "data_live.csv").write_text("Rank,Model,Live Overall Acc,AST Summary\n1,ours,55.36%,50.00%\n")
    (score / "data_non_live.csv").write_text("Rank,Model,Non_Live Overall Acc\n1,ours,40.58%\n")
    (score / "data_multi_turn.csv").write_text("Rank,Model,Multi Turn Overall Acc\n1,ours,N/A\n")
    (score / "Qwen_Qwen2.5-1.5B-Instruct" / "BFCL_v3_simple_score.json").write_text(
        '{"accuracy": 0.9, "correct_count": 360, "total_count": 400}\n{"id": "simple_3", "valid": false}\n')
    ds = load_source(tmp_path, cache_dir=None)
    at = {m: values(ds, rid.name, m).get(100) for m in ("eval/bfcl/live", "eval/bfcl/non_live", "eval/bfcl/correct_format",
                                                          "eval/bfcl/category/simple", "eval/aime/acc", "eval/aime/samples")}
    assert at == pytest.approx({"eval/bfcl/live": 0.5536, "eval/bfcl/non_live": 0.4058, "eval/bfcl/correct_format": 0.8066,
                                "eval/bfcl/category/simple": 0.9, "eval/aime/acc": 0.294, "eval/aime/samples": 16})
    assert values(ds, rid.name, "eval/bfcl/multi_turn") == {}
    [detail] = ds.problems[ds.problems["kind"] == "non_numeric"]["detail"]
    assert detail.startswith("eval/bfcl/multi_turn: 1 non-numeric") and "'N/A'" in detail
    assert ds.runs.iloc[0]["last_step"] == 100  # eval steps do not count as training progress


class FakeRun:
    """The public attributes of `wandb.apis.public.Run` that the loader reads."""

    def __init__(self, name, group, config, state, rows):
        self.name, self.group, self.config, self.state, self._rows = name, group, config, state, rows
        self.page_sizes = []

    def scan_history(self, page_size=500):
        self.page_sizes.append(page_size)
        return iter(self._rows)


class FakeApi:
    """`wandb.Api` reduced to `runs(path, filters)`; records the calls it gets."""

    def __init__(self, runs):
        self._runs, self.calls = runs, []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        return list(self._runs)


def test_wandb_api_loader_through_a_fake_of_the_public_calls(tmp_path):
    finished = FakeRun(RID.name, RID.group, run_config(RID), "finished",
                       [{"_step": 1, "train/reward": 0.5, "_runtime": 3.0}, {"_step": 2, "train/reward": 1.0}])
    crashed = FakeRun("exp__gsm8k__tiny__grpo__seed3", "exp__gsm8k__tiny__grpo", {}, "crashed",
                      [{"_step": 1, "train/reward": 0.25}])
    stranger = FakeRun("my-first-run", "", {}, "finished", [{"_step": 1, "loss": 1.0}])
    api = FakeApi([finished, crashed, stranger])
    ds = load_source("wandb:team/gdpo", experiment="exp", cache_dir=tmp_path / "cache", progress=False, wandb_api=api)
    assert api.calls == [("team/gdpo", {"config.gdpo.experiment": "exp"})]
    assert dict(zip(ds.runs["run_id"], ds.runs["status"])) == {RID.name: "finished", "exp__gsm8k__tiny__grpo__seed3": "crashed"}
    assert values(ds, RID.name, "train/reward") == {1: 0.5, 2: 1.0}
    assert "_runtime" not in set(ds.metrics["metric"])
    assert "my-first-run" in ds.problems[ds.problems["kind"] == "no_run_id"]["detail"].iloc[0]
    # the second load reads the parquet cache: no further API call
    again = load_source("wandb:team/gdpo", experiment="exp", cache_dir=tmp_path / "cache", progress=False, wandb_api=api)
    assert len(api.calls) == 1 and len(again.metrics) == len(ds.metrics)
    load_source("wandb:team/gdpo", experiment="exp", cache_dir=tmp_path / "cache", refresh=True, progress=False, wandb_api=api)
    assert len(api.calls) == 2


def test_malformed_wandb_source_names_itself():
    with pytest.raises(ValueError, match="'team': expected ENTITY/PROJECT"):
        load_source("wandb:team", cache_dir=None, wandb_api=FakeApi([]))


def test_folder_cache_is_reused_until_a_log_changes(tmp_path):
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    folder = write_run_dir(runs, RID, [{"step": 1, "train/reward": 0.5}])
    first = load_source(runs, cache_dir=cache)
    assert len(list(cache.iterdir())) == 1
    with (folder / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 2, "train/reward": 0.25}\n')
    second = load_source(runs, cache_dir=cache)
    assert len(first.metrics) == 1 and values(second, RID.name, "train/reward") == {1: 0.5, 2: 0.25}
    assert len(list(cache.iterdir())) == 2
    cached = load_source(runs, cache_dir=cache)
    assert cached.metrics.equals(second.metrics) and cached.runs.equals(second.runs)


# ---------------------------------------------------------------------------------------
# Bad input: reported, never a crash, never a silently wrong mean.
# ---------------------------------------------------------------------------------------

def test_empty_folder_is_an_empty_dataset_with_a_problem(tmp_path):
    ds = load_source(tmp_path, cache_dir=None)
    assert len(ds) == 0 and ds.metrics.empty
    assert list(ds.problems["kind"]) == ["empty_source"]


def test_missing_folder_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="nope.*does not exist"):
        load_source(tmp_path / "nope", cache_dir=None)


def test_non_numeric_values_are_left_out_and_reported(tmp_path):
    write_run_dir(tmp_path, RID, [{"step": 1, "train/reward": 1.0}, {"step": 2, "train/reward": "oops"},
                                  {"step": 3, "train/reward": None}, {"step": 4, "train/reward": "0.5"},
                                  {"step": 5, "train/reward": [2.0]}, {"step": 6, "train/reward": {"a": 1}}])
    (tmp_path / RID.name / "metrics.jsonl").open("a").write("{not json\n")
    ds = load_source(tmp_path, cache_dir=None)
    assert values(ds, RID.name, "train/reward") == {1: 1.0, 4: 0.5, 5: 2.0}
    kinds = ds.problems.groupby("kind")["detail"].apply(list).to_dict()
    assert kinds["non_numeric"] == ["train/reward: 3 non-numeric value(s) left out, first at step 2: 'oops'"]
    assert "metrics.jsonl:7: not JSON" in kinds["unreadable_line"][0]


def test_duplicate_run_ids_keep_one_run_and_report_the_other(tmp_path):
    write_run_dir(tmp_path / "a", RID, [{"step": s, "train/reward": 1.0} for s in (1, 2, 3)])
    write_run_dir(tmp_path / "b", RID, [{"step": 1, "train/reward": 100.0}])
    ds = load_source(tmp_path, cache_dir=None)
    assert len(ds.runs) == 1
    assert values(ds, RID.name, "train/reward") == {1: 1.0, 2: 1.0, 3: 1.0}  # the longer run, never a mix
    [detail] = ds.problems[ds.problems["kind"] == "duplicate_run_id"]["detail"]
    assert str(tmp_path / "b" / RID.name) in detail and "kept" in detail


def test_nan_logged_by_a_run_is_kept_as_nan(tmp_path):
    write_run_dir(tmp_path, RID, [{"step": 1, "train/reward": "nan"}])
    ds = load_source(tmp_path, cache_dir=None)
    assert math.isnan(values(ds, RID.name, "train/reward")[1])


def test_a_run_is_finished_only_when_the_job_reaching_its_last_step_finished(tmp_path):
    """Run dirs: DONE finished, FAILED crashed, neither unfinished, whatever the last step
    logged; W&B jobs of one run (a requeue): the job that logged the last step decides."""
    from gdpo_nemo.analysis.frame import RunLog, assemble
    from gdpo_nemo.analysis.tables import incomplete_runs
    from gdpo_nemo.runs import rundir

    rows = [{"step": s, "train/reward": 0.5} for s in (1, 2, 3)]
    states = {}
    for seed, state in enumerate(("done", "failed", "silent")):
        run_id = RunId("exp", "gsm8k", "qwen2.5-1.5b", "gdpo", seed)
        folder = write_run_dir(tmp_path / "runs", run_id, rows, config=run_config(run_id, max_steps=3), done=state == "done")
        if state == "failed":
            rundir.mark_failed(folder, "ValueError: Dynamic sampling has reached the maximum allowed number of batches")
        states[run_id.name] = state
    dataset = load_source(str(tmp_path / "runs"), cache_dir=None)
    found = dict(zip(dataset.runs["run_id"], dataset.runs["status"]))
    assert {name: found[name] for name in states} == {name: {"done": "finished", "failed": "crashed", "silent": "unfinished"}[s]
                                                      for name, s in states.items()}
    left_out = incomplete_runs(dataset)
    assert {name: left_out.get(name) for name in states} == {
        name: {"done": None, "failed": "crashed at step 3 of 3", "silent": "unfinished at step 3 of 3"}[s]
        for name, s in states.items()}

    run_id = RunId("exp", "gsm8k", "qwen2.5-1.5b", "grpo", 0)
    config = run_config(run_id, max_steps=4)

    def job(status: str, steps) -> RunLog:
        return RunLog(run_id=run_id, source="wandb-offline", path="wandb", status=status, config=config,
                      rows={s: {"train/reward": 0.5} for s in steps}, priority=1)

    requeued = assemble([job("crashed", (1, 2)), job("finished", (3, 4))])  # cancelled, then the requeued job
    assert list(requeued.runs["status"]) == ["finished"] and not incomplete_runs(requeued)
    failed_last = assemble([job("finished", (1, 2)), job("crashed", (3, 4))])
    assert list(failed_last.runs["status"]) == ["crashed"]
    assert incomplete_runs(failed_last) == {run_id.name: "crashed at step 4 of 4"}


def test_a_run_dir_of_two_wandb_jobs_and_no_metrics_reads_as_the_later_job_continuing_the_earlier(tmp_path):
    """A requeue as W&B files alone, read by the report's own loader: job 1 logged steps 1-4
    and was cancelled in step 5 (its W&B run ended failed; its checkpoint: step 3); job 2
    resumed from step 3, replayed steps 1-3 (wrapper in engines/nemo/plugin.py) and failed
    before logging step 4. The run's steps are job 2's (1-3: job 1's step 4 was superseded),
    and its state is job 2's at its last step: crashed at step 3, not at job 1's step 4."""
    import time

    import wandb

    from gdpo_nemo.analysis.tables import incomplete_runs
    from gdpo_nemo.runs import rundir

    folder = tmp_path / "runs" / RID.name
    folder.mkdir(parents=True)
    rundir.write_config(folder, run_config(RID, max_steps=6))
    for job, steps in enumerate(((1, 2, 3, 4), (1, 2, 3))):
        if job:
            time.sleep(1.1)  # the offline-run folders are named by the second the job started
        run = wandb.init(project="p", name=RID.name, dir=str(folder), mode="offline", config=run_config(RID, max_steps=6))
        for step in steps:
            run.log({"train/reward": step + 10 * job}, step=step)
        run.finish(exit_code=1)
        wandb.teardown()
    jobs = find_offline_runs(folder / "wandb")
    assert [max(read_offline_run(p).rows) for p in jobs] == [4, 3]
    dataset = load_source(str(tmp_path / "runs"), cache_dir=None)
    [run] = dataset.runs.to_dict("records")
    assert (run["status"], run["last_step"]) == ("crashed", 3)
    assert values(dataset, RID.name, "train/reward") == {1: 11.0, 2: 12.0, 3: 13.0}
    assert incomplete_runs(dataset) == {RID.name: "crashed at step 3 of 6"}
