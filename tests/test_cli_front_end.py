"""Issue 24, item 4: the CLI front end: every mistake gets one clear line, every --help its
defaults, the same exit codes across commands, and Ctrl-C a line saying how to go on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gdpo_nemo import __version__

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "local" / "tiny.yaml"


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)), **kwargs)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_unknown_command_is_an_invalid_choice_with_the_nearest_one():
    done = cli("trian")
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done).startswith("gdpo-nemo: error: invalid choice 'trian' (did you mean train?); commands: ")


def test_version():
    done = cli("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"gdpo-nemo {__version__}")


def test_a_misspelt_key_gets_the_nearest_keys():
    line = one_line(cli("train", "--config", TINY, "grpo.max_num_step=3"))
    assert "did you mean grpo.max_num_steps" in line and "+grpo.max_num_step=value" in line


def test_config_show_takes_deletions_as_train_does():
    kept = cli("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo")
    deleted = cli("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo", "~checkpointing.keep_top_k")
    assert kept.returncode == 0 and "keep_top_k" in kept.stdout
    assert deleted.returncode == 2 and one_line(deleted).endswith("checkpointing.keep_top_k: missing; expected int")


def test_every_help_shows_the_defaults():
    eval_help = cli("eval", "--help").stdout
    assert "(default: 0)" in eval_help and "default 32768" in eval_help and "(default: cpu)" in eval_help
    assert "(default: None)" not in cli("train", "--help").stdout


def test_a_missing_checkpoint_is_named_as_such():
    line = one_line(cli("eval", "--task", "math", "--model", "runs/nothing/checkpoints/step_3"))
    assert "--model runs/nothing/checkpoints/step_3: no such checkpoint" in line


def test_eval_exits_1_when_rows_could_not_be_read_like_score(tmp_path):
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.trainer import train

    config, _ = load_run_config(TINY, ["grpo.max_num_steps=1", "checkpointing.save_period=1"])
    train(config, tmp_path / "run", log=lambda *a: None)
    data = tmp_path / "data"
    data.mkdir()
    good = (REPO / "tests" / "data" / "eval" / "aime.jsonl").read_text().splitlines()[0]
    (data / "aime.jsonl").write_text(good + "\nthis row is not JSON\n")
    done = cli("eval", "--task", "math", "--model", tmp_path / "run" / "checkpoints" / "step_1", "--benchmarks", "aime",
               "--data-dir", data, "--samples", 1, "--max-new-tokens", 4)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "1 unreadable row(s) counted as failed questions" in done.stdout
    assert (tmp_path / "run" / "eval" / "aime" / "step_1.json").exists()  # the results are still written


def test_ctrl_c_in_train_is_one_line_with_the_command_that_resumes(tmp_path):
    run = tmp_path / "run"
    overrides = ["grpo.max_num_steps=2000", "grpo.max_num_epochs=1000", "checkpointing.save_period=1"]
    command = [sys.executable, "-m", "gdpo_nemo.cli", "train", "--config", str(TINY), "--run-dir", str(run), *overrides]
    # A shell without job control starts background jobs with SIGINT ignored, and Python then
    # keeps it ignored (so did the test run by fresh-check in the background): the child gets
    # the terminal's default back, as `gdpo-nemo train` typed at a prompt has it.
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "step_1").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # one Ctrl-C must stop the run
    try:
        _, stderr = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("gdpo-nemo train: error: interrupted; to continue: gdpo-nemo train --config ")
    assert last.endswith(f"--run-dir {run} --resume " + " ".join(overrides))


def test_without_a_bar_train_prints_one_line_per_step(tmp_path):
    done = cli("train", "--config", TINY, "--run-dir", tmp_path / "run", "grpo.max_num_steps=3", "gdpo.local.progress=false")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1/3", "step 2/3", "step 3/3"]
    assert all("s/step" in line and "format=" in line for line in lines)


def test_the_ignored_keys_note_says_how_to_see_them_all(tmp_path, monkeypatch):
    from gdpo_nemo.engines.local.config import SHOW_IGNORED_ENV, load_run_config

    composed = tmp_path / "run.yaml"
    composed.write_text(cli("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo").stdout)
    monkeypatch.delenv(SHOW_IGNORED_ENV, raising=False)
    _, short = load_run_config(composed)
    assert short.endswith(f"more (set {SHOW_IGNORED_ENV}=1 to list them all)")
    monkeypatch.setenv(SHOW_IGNORED_ENV, "1")
    _, full = load_run_config(composed)
    assert "more" not in full and len(full.split(", ")) > len(short.split(", ")) + 10


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "gdpo_nemo.cli", "sweep", "smoke", "--cluster", "local",
                                "--sweep-dir", str(tmp_path / "s")], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
    first = process.stdout.readline()
    process.stdout.close()  # `| head -1`
    _, stderr = process.communicate(timeout=120)
    assert first.startswith(b"12 run(s) of smoke")
    assert b"Traceback" not in stderr and process.returncode in (0, 141)


def test_an_interrupted_quickstart_is_continued_by_the_same_command():
    import argparse

    from gdpo_nemo.commands.quickstart import QUICKSTART_CONFIG, resume_hint

    default = argparse.Namespace(out="runs/quickstart", steps=None, config=str(QUICKSTART_CONFIG))
    assert resume_hint(default) == "gdpo-nemo quickstart --out runs/quickstart"
    assert resume_hint(argparse.Namespace(out="my runs", steps=4, config="c.yaml")) == (
        "gdpo-nemo quickstart --out 'my runs' --steps 4 --config c.yaml")


def test_an_output_file_in_a_new_folder_is_written_and_an_impossible_path_is_one_line(tmp_path):
    # Issue 37: `config show -o /nonexistent/dir/run.yaml` ended in a 14-line traceback.
    target = tmp_path / "new" / "folder" / "run.yaml"
    done = cli("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo", "-o", target)
    assert done.returncode == 0 and target.is_file(), done.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for args in (("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo", "-o", blocker / "run.yaml"),
                 ("collapse-figures", "--out", blocker / "figures")):
        done = cli(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert one_line(done).startswith(f"gdpo-nemo {args[0]}: error: {blocker}"), done.stderr


def test_help_says_each_default_once():
    # Issue 37: "(default paper_figures/) (default: paper_figures)", and `sweep --submit`,
    # `--status`, `--cancel` each said "(default: dry-run)".
    from gdpo_nemo.cli import COMMANDS

    import re

    for command in COMMANDS:
        text = " ".join(cli(command, "--help").stdout.split())
        twice = re.search(r"\(default[^)]*\)\s*\(default", text)
        assert twice is None, (command, twice and text[max(0, twice.start() - 60):twice.end() + 20])
        if command == "sweep":
            assert text.count("(default: dry-run)") == 0 and text.count("dry-run") >= 1


def test_a_misspelled_override_and_another_engines_config_say_what_to_do_in_one_line(tmp_path):
    # Issue 37: `config show grpo.max_num_step=3` gave Hydra's bare message; `train` on a NeMo
    # RL config said "expected 'local'" without saying how to get one.
    done = cli("config", "show", "task=gsm8k", "model=tiny", "algo=gdpo", "grpo.max_num_step=3")
    assert done.returncode == 2 and "did you mean grpo.max_num_steps" in one_line(done)
    nemo = tmp_path / "nemo.yaml"
    assert cli("config", "show", "task=gsm8k", "model=qwen2.5-1.5b-instruct", "algo=gdpo", "cluster=nemo_1n1g",
               "-o", nemo).returncode == 0
    done = cli("train", "--config", nemo)
    line = one_line(done)
    assert done.returncode == 2 and "cluster=local" in line and "gdpo_nemo.commands.nemo_run" in line, line


def test_a_library_valueerror_inside_a_command_is_an_internal_error_with_its_traceback(tmp_path):
    # Issue 47: a numpy reshape error inside a command read "error: cannot reshape array ..."
    # with exit 2, as if the input were wrong. Now only our own checks (UserError) are one
    # line with exit 2; anything else keeps its traceback and exits 1.
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "import numpy as np\n"
        "from gdpo_nemo import cli\n"
        "from gdpo_nemo.commands import score\n"
        "score.run = lambda args: np.zeros(3).reshape(2, 2)\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text("")
    done = subprocess.run([sys.executable, str(script), "score", str(rows), "--task", "math"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "reshape" in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gdpo-nemo score: error: internal error (ValueError: cannot reshape array")
    assert "Not a problem with your input" in last
    # our own check of the same command stays one line, exit 2
    done = cli("score", rows, "--task", "math", "--components", "nope")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert one_line(done) == ("gdpo-nemo score: error: unknown reward component 'nope' for task 'math'; accepted:"
                              " correctness, length, format")


def test_every_error_our_checks_raise_is_a_user_error():
    # The checks raise UserError (a ValueError, so `except ValueError` still holds); only the
    # sandbox's own protocol and worker modules raise plain ValueError, which they catch, and
    # the driver runs inside the sandbox, where the package is not.
    import ast

    plain = []
    for path in sorted((REPO / "gdpo_nemo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id == "ValueError":
                    plain.append(f"{path.relative_to(REPO)}:{node.lineno}")
    allowed = ("gdpo_nemo/sandbox/protocol.py", "gdpo_nemo/sandbox/values.py", "gdpo_nemo/sandbox/worker.py",
               "gdpo_nemo/sandbox/_driver", "gdpo_nemo/evaluation/bfcl_worker.py")
    assert [p for p in plain if not p.startswith(allowed)] == []


def test_notebooks_knows_every_kind_of_user_error():
    # A notebook cell's error reaches `gdpo-nemo notebooks` by class name only; every UserError
    # class the package defines must be told apart from a failure there.
    import ast

    from gdpo_nemo.commands.notebooks import _user_error_names

    defined = {"UserError"}
    grew = True
    while grew:
        grew = False
        for path in sorted((REPO / "gdpo_nemo").rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.name not in defined and any(
                        isinstance(base, ast.Name) and base.id in defined for base in node.bases):
                    defined.add(node.name)
                    grew = True
    assert len(defined) > 5 and defined <= _user_error_names()
