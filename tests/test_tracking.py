"""The metrics sink: metrics.jsonl always, W&B online / offline / disabled.

W&B is exercised for real in offline mode (no server): the run file it writes under the
run dir is read back with W&B's own protobuf records.
"""

import json
import threading
import time
from pathlib import Path

import pytest

from gdpo_nemo.runs.rundir import read_metrics, read_metrics_file
from gdpo_nemo.runs.tracking import (
    INIT_TIMEOUT_ENV,
    Tracker,
    WandbUnavailable,
    _wait_for_wandb_exit,
    iter_wandb_messages,
    read_wandb_history,
    wandb_mode,
)


def test_each_log_call_appends_one_json_record_with_its_step(tmp_path):
    with Tracker(tmp_path) as tracker:
        tracker.log({"train/reward": 0.5, "train/reward/format": 0.25}, step=1)
        tracker.log({"train/reward": 0.75}, step=2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "train/reward": 0.5, "train/reward/format": 0.25},
        {"step": 2, "train/reward": 0.75},
    ]


def test_records_are_on_disk_before_close(tmp_path):
    # A SIGKILL never runs close(): each record must already be flushed.
    tracker = Tracker(tmp_path)
    tracker.log({"train/loss": 1.0}, step=1)
    assert read_metrics(tmp_path) == [{"step": 1, "train/loss": 1.0}]
    tracker.close()


def test_non_finite_values_are_written_as_null(tmp_path):
    with Tracker(tmp_path) as tracker:
        tracker.log({"a": float("nan"), "b": float("inf"), "c": 3}, step=1)
    assert read_metrics(tmp_path) == [{"step": 1, "a": None, "b": None, "c": 3}]


def test_resume_sets_records_after_the_checkpoint_step_aside(tmp_path):
    with Tracker(tmp_path) as tracker:
        for step in (1, 2, 3, 4):
            tracker.log({"x": step}, step=step)
    with Tracker(tmp_path, resume_step=2) as tracker:
        tracker.log({"x": 30}, step=3)
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(1, 1), (2, 2), (3, 30)]
    [aside] = tmp_path.glob("metrics.after-step2.*.jsonl")
    assert [(r["step"], r["x"]) for r in read_metrics_file(aside)] == [(3, 3), (4, 4)]


def test_a_fresh_run_starts_an_empty_metrics_file_and_keeps_the_earlier_one(tmp_path):
    with Tracker(tmp_path) as tracker:
        tracker.log({"x": 1}, step=1)
    with Tracker(tmp_path) as tracker:
        tracker.log({"x": 2}, step=1)
    assert read_metrics(tmp_path) == [{"step": 1, "x": 2}]
    [kept] = (tmp_path / "replaced").iterdir()
    assert read_metrics_file(kept / "metrics.jsonl") == [{"step": 1, "x": 1}]


def test_a_line_torn_by_a_kill_is_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "x": 1}\n{"step": 2, "x"')
    assert read_metrics(tmp_path) == [{"step": 1, "x": 1}]


def test_bad_lines_are_skipped_and_reported_and_the_whole_lines_after_them_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 1}\n{"step": 2, "x"\n{"step": 3, "x": 3}\n[1, 2]\n{"x": 5}\n'
                    '{"step": "6", "x": 6}\n\n{"step": 7.0, "x": 7}\n')
    bad_lines = []
    assert [r["x"] for r in read_metrics_file(path, bad_lines)] == [1, 3, 7]
    assert [number for number, _ in bad_lines] == [2, 4, 5, 6]
    assert bad_lines[0][1].startswith("not JSON") and bad_lines[1][1] == "no numeric 'step'"


def test_the_analysis_reads_metrics_files_as_the_engines_do(tmp_path):
    # One reader of the format: the analysis keeps exactly the records the engines' resume
    # keeps, and reports the lines both skip.
    from gdpo_nemo.analysis.frame import RunLog
    from gdpo_nemo.analysis.sources import read_metrics_jsonl
    from gdpo_nemo.runs.run_id import RunId

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 1}\n{"step": 2, "x"\n{"step": 3, "x": 3}\n')
    log = RunLog(run_id=RunId.parse("paper__gsm8k__tiny__gdpo__seed0"), source="rundir", path=str(tmp_path),
                 status="finished", config={}, priority=2)
    problems = []
    read_metrics_jsonl(path, log, problems)
    assert sorted(log.rows) == [r["step"] for r in read_metrics(tmp_path)] == [1, 3]
    assert [kind for _, kind, _ in problems] == ["unreadable_line"] and ":2: not JSON" in problems[0][2]


@pytest.mark.parametrize("enabled, env, expected", [
    (False, {"WANDB_API_KEY": "k"}, "disabled"),
    (True, {"WANDB_API_KEY": "k"}, "online"),
    (True, {}, "offline"),
    (True, {"WANDB_MODE": "disabled", "WANDB_API_KEY": "k"}, "disabled"),
    (True, {"WANDB_MODE": "offline", "WANDB_API_KEY": "k"}, "offline"),
])
def test_wandb_mode_follows_the_switch_and_the_api_key(enabled, env, expected, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert wandb_mode(enabled) == expected


def test_offline_wandb_run_in_the_run_dir_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with Tracker(tmp_path, config={"grpo": {"seed": 1}}, name="exp__gsm8k__tiny__gdpo__seed1",
                 group="exp__gsm8k__tiny__gdpo", project="gdpo-nemo-tests", wandb_enabled=True) as tracker:
        assert tracker.mode == "offline"
        tracker.log({"train/reward": 0.5, "train/reward/format": 0.25}, step=1)
        tracker.log({"train/reward": 0.75, "train/adv/distinct_groups": 3}, step=2)
    files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    run_id = (tmp_path / "wandb_id").read_text().strip()
    assert files[0].name == f"run-{run_id}.wandb"
    rows = read_wandb_history(files[0])
    logged = [{k: v for k, v in row.items() if not k.startswith("_")} | {"step": row["_step"]} for row in rows]
    assert logged == [
        {"step": 1, "train/reward": 0.5, "train/reward/format": 0.25},
        {"step": 2, "train/reward": 0.75, "train/adv/distinct_groups": 3},
    ]
    # metrics.jsonl holds the same records
    assert read_metrics(tmp_path) == [
        {"step": 1, "train/reward": 0.5, "train/reward/format": 0.25},
        {"step": 2, "train/reward": 0.75, "train/adv/distinct_groups": 3},
    ]


def _offline_run_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with Tracker(tmp_path / "run", wandb_enabled=True) as tracker:
        tracker.log({"train/reward": 0.5}, step=1)
    (path,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    return path


def _kinds(path) -> list[str]:
    return [record.WhichOneof("record_type") for record in iter_wandb_messages(path)]


def test_a_closed_tracker_leaves_the_offline_run_file_complete_with_its_exit_record(tmp_path, monkeypatch):
    kinds = _kinds(_offline_run_file(tmp_path, monkeypatch))
    assert kinds[-1] == "exit" and "history" in kinds


def test_closing_waits_for_the_exit_record_that_w_and_bs_service_writes_late(tmp_path, monkeypatch):
    whole = _offline_run_file(tmp_path, monkeypatch).read_bytes()
    # The longest prefix of the real file without its exit record: what a reader may find
    # just after finish() returns while W&B's service process is still writing.
    cut = len(whole)
    while "exit" in _kinds_of_bytes(tmp_path, whole[:cut]):
        cut -= 1
    path = tmp_path / "late.wandb"
    path.write_bytes(whole[:cut])
    writer = threading.Timer(0.5, path.write_bytes, args=(whole,))
    writer.start()
    started = time.monotonic()
    assert _wait_for_wandb_exit(path, timeout=30) is True
    assert time.monotonic() - started >= 0.4
    writer.join()


def test_a_run_file_that_never_gets_its_exit_record_is_reported_after_the_timeout(tmp_path, monkeypatch, capsys):
    whole = _offline_run_file(tmp_path, monkeypatch).read_bytes()
    path = tmp_path / "torn.wandb"
    path.write_bytes(whole[: len(whole) // 2])
    assert _wait_for_wandb_exit(path, timeout=0.3) is False
    assert "has no exit record" in capsys.readouterr().err


def _kinds_of_bytes(tmp_path, data: bytes) -> list[str]:
    probe = tmp_path / "probe.wandb"
    probe.write_bytes(data)
    try:
        return _kinds(probe)
    except ValueError:
        return []


def test_resumed_wandb_run_keeps_its_run_id(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with Tracker(tmp_path, wandb_enabled=True) as tracker:
        tracker.log({"x": 1}, step=1)
    first_id = (tmp_path / "wandb_id").read_text()
    with Tracker(tmp_path, wandb_enabled=True, resume_step=1) as tracker:
        tracker.log({"x": 2}, step=2)
    assert (tmp_path / "wandb_id").read_text() == first_id
    assert len(list((tmp_path / "wandb").glob(f"offline-run-*/run-{first_id}.wandb"))) == 2


def _unreachable_wandb(monkeypatch) -> None:
    """An API key and a W&B server address where nothing listens (connection refused)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv(INIT_TIMEOUT_ENV, "3")
    monkeypatch.delenv("WANDB_MODE", raising=False)


def test_online_start_up_without_a_server_falls_back_to_offline_within_seconds(tmp_path, monkeypatch):
    _unreachable_wandb(monkeypatch)
    lines = []
    started = time.monotonic()
    with Tracker(tmp_path, name="n", project="gdpo-nemo-tests", wandb_enabled=True, log=lines.append) as tracker:
        assert tracker.mode == "offline"
        tracker.log({"train/reward": 0.5}, step=1)
    assert time.monotonic() - started < 60
    assert lines[0].startswith("W&B: could not start online (") and lines[0].endswith("logging offline instead")
    assert lines[1].startswith("W&B: offline run in ") and "; upload it with: wandb sync " in lines[1]
    folder = Path(lines[1].split("wandb sync ")[1])
    [run_file] = folder.glob("run-*.wandb")
    assert [row["train/reward"] for row in read_wandb_history(run_file)] == [0.5]
    assert read_metrics(tmp_path) == [{"step": 1, "train/reward": 0.5}]


def test_strict_online_without_a_server_stops_in_one_line(tmp_path, monkeypatch):
    _unreachable_wandb(monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(WandbUnavailable) as raised:
        Tracker(tmp_path, name="n", project="gdpo-nemo-tests", wandb_enabled=True, log=lambda line: None)
    message = str(raised.value)
    assert "\n" not in message and "WANDB_MODE=online" in message and "could not start online" in message


@pytest.mark.parametrize("server", ["no key", "key but no server", "a server that never answers"])
def test_report_from_an_unreachable_wandb_source_says_so_in_one_line(tmp_path, monkeypatch, server):
    """W&B's own client retries a refused or silent server through its service process for
    minutes (on a loaded CI machine past 180 s): the report asks the server once first."""
    import os
    import socket
    import subprocess
    import sys

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with socket.socket() as silent:
        if server != "no key":
            _unreachable_wandb(monkeypatch)
        if server == "a server that never answers":
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)  # connections complete in the kernel's backlog; nothing ever reads or answers
            monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "report", "--source", "wandb:someone/project",
                               "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gdpo-nemo report: error: W&B source wandb:someone/project: cannot list its runs (")
    assert "WANDB_API_KEY" in line and "--source DIR" in line
    if server != "no key":
        assert "does not answer" in line
        print(f"{server}: answered in {took:.1f} s")


def test_nemo_rls_own_wandb_logger_is_sent_offline_when_the_server_does_not_answer(tmp_path, monkeypatch):
    import os

    from gdpo_nemo.runs.tracking import settle_external_wandb

    _unreachable_wandb(monkeypatch)
    lines = []
    started = time.monotonic()
    assert settle_external_wandb(True, tmp_path, log=lines.append) == "offline"
    assert time.monotonic() - started < 60
    assert os.environ["WANDB_MODE"] == "offline"  # what NeMo RL's wandb.init will read
    assert lines[0].startswith("W&B: could not start online (") and f"wandb sync $(find {tmp_path} -type d -name 'offline-run-*')" in lines[1]
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(WandbUnavailable):
        settle_external_wandb(True, tmp_path, log=lines.append)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert settle_external_wandb(True, tmp_path, log=lines.append) == "disabled"


NEMO_RL_LIKE_INIT = """
import sys
from pathlib import Path
if sys.argv[1] == "settled":
    from gdpo_nemo.runs.tracking import settle_external_wandb
    print("mode", settle_external_wandb(True, sys.argv[2]))
import wandb
# What NeMo RL's WandbLogger does: wandb.init with the config's keyword arguments, no mode.
run = wandb.init(project="gdpo-nemo-tests", name="no-key", dir=sys.argv[2])
run.log({"train/reward": 0.5}, step=1)
run.finish()
"""


@pytest.mark.parametrize("settled", [True, False], ids=["settled", "as W&B alone"])
def test_an_external_wandb_logger_without_a_key_writes_offline_files_instead_of_asking_for_a_login(tmp_path, settled):
    """A user's shell: no WANDB_API_KEY, no WANDB_MODE, an empty HOME (no netrc). wandb.init
    as NeMo RL calls it fails there on its own; after settle_external_wandb it runs offline."""
    import os
    import subprocess
    import sys

    home, runs = tmp_path / "home", tmp_path / "run"
    home.mkdir(), runs.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "-c", NEMO_RL_LIKE_INIT, "settled" if settled else "alone", str(runs)],
                          env=env, capture_output=True, text=True, timeout=300)
    offline = list(runs.rglob("offline-run-*"))
    if settled:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "mode offline" in done.stdout and len(offline) == 1
        [history] = [read_wandb_history(f) for f in offline[0].glob("run-*.wandb")]
        assert [row["train/reward"] for row in history] == [0.5]
    else:  # the failure the settling prevents, seen in W&B itself
        assert done.returncode != 0 and "No API key configured" in done.stderr and not offline
