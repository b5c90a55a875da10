"""Issue 24, item 6: docs that cannot drift. Every `gdpo-nemo` command in a fenced block of
README.md and docs/*.md is found here; the cheap ones (composing and listing configs,
rendering sweeps: a sweep's Slurm modes as --dry-run) run as written, from the repo root the docs assume (a scratch folder
that links the repo's folders, so that what they write lands there); the others are named
with why they are left to their own tests. A wrong example then fails CI.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.numerics import user_environment
from tests.support.plain_shell import CHECKED_BY, DOCS, checkout, run_as_written, script_of, script_smoke_commands

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```([A-Za-z]*)\n(.*?)^```", re.S | re.M)
# Output lines shown in console blocks ("gdpo-nemo config: error: ..."), not commands.
OUTPUT_LINE = re.compile(r"^gdpo-nemo [\w-]+: ")
# A synopsis, not a command: optional parts, stand-ins in capitals or angle brackets.
PLACEHOLDER = re.compile(r"[\[<]|\b[A-Z][A-Z_]{2,}\b")
# The docs' stand-ins that have a real counterpart here: a profile copied from the sample.
SUBSTITUTIONS = {"mycluster": "example"}
# A sweep's Slurm modes run as --dry-run: the same experiment, profile and --only filters are
# checked (a filter matching no run fails), without a cluster (tests/slurm/ submits for real).
MODES_AS_DRY_RUN = {"--submit": "--dry-run", "--status": "--dry-run", "--cancel": "--dry-run"}


def doc_commands() -> list[tuple[str, str]]:
    """(where: "file:line", command text) of every gdpo-nemo command in a fenced block."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for block in FENCE.finditer(text):
            if block.group(1) not in ("", "bash", "sh", "shell", "console"):
                continue
            first = text[: block.start(2)].count("\n") + 1
            logical, start = "", None
            for offset, line in enumerate(block.group(2).splitlines()):
                if start is None:
                    start = first + offset
                logical += line.rstrip()
                if logical.endswith("\\"):
                    logical = logical[:-1] + " "
                    continue
                command = logical.strip()
                if command.startswith("gdpo-nemo ") and not OUTPUT_LINE.match(command):
                    found.append((f"{path.relative_to(REPO)}:{start}", command))
                logical, start = "", None
    return found


def verdict(command: str) -> str:
    """"run", or why the command is left to its own tests."""
    words = shlex.split(command, comments=True)
    if PLACEHOLDER.search(" ".join(words)):
        return "a synopsis with stand-ins"
    sub = words[1] if len(words) > 1 else ""
    if sub == "config" and len(words) > 2 and words[2] in ("list", "show"):
        return "run"
    if sub == "sweep":
        return "run"  # --submit, --status and --cancel as --dry-run (MODES_AS_DRY_RUN)
    if sub in ("--help", "--version") or "--help" in words:
        return "run"
    if sub == "report":
        return "needs runs to report: the analysis tests run it on real runs"
    if sub == "notebooks":
        return "needs runs: tests/test_notebooks.py runs the docs' command as written on real runs"
    return f"`{sub}` trains or evaluates a model: its own tests run it"


COMMANDS = doc_commands()
CHEAP = [(where, command) for where, command in COMMANDS if verdict(command) == "run"]


def test_the_docs_commands_are_found_and_the_cheap_ones_are_many():
    assert len(COMMANDS) >= 30
    assert len(CHEAP) >= 8, CHEAP
    skipped = [(where, verdict(command)) for where, command in COMMANDS if verdict(command) != "run"]
    assert all(reason for _, reason in skipped)


@pytest.fixture(scope="module")
def repo_root_copy(tmp_path_factory) -> Path:
    """A folder that looks like the repo root (its folders linked) but keeps what the
    commands write (run.yaml, sweeps/)."""
    return checkout(tmp_path_factory.mktemp("docs_root"), also_leave_out=("sweeps",))


@pytest.mark.parametrize(("where", "command"), CHEAP, ids=[where for where, _ in CHEAP])
def test_a_cheap_docs_command_runs_as_written(where, command, repo_root_copy):
    words = [SUBSTITUTIONS.get(word, word) for word in shlex.split(command, comments=True)]
    if words[1] == "sweep":
        words = [MODES_AS_DRY_RUN.get(word, word) for word in words]
    env = dict(user_environment(), PYTHONPATH=str(REPO), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", *words[1:]], cwd=repo_root_copy, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{where}: {command}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr


SCRIPT_SMOKES = script_smoke_commands()


@pytest.mark.parametrize(("where", "command"), SCRIPT_SMOKES, ids=[where for where, _ in SCRIPT_SMOKES])
def test_a_study_scripts_smoke_command_runs_as_written_from_a_plain_shell(where, command, tmp_path):
    """Word for word from a checkout after scripts/setup.sh, in a shell that has not activated
    .venv and sets no PYTHON (docs/gpu.md says none): the script finds the checkout's .venv.
    A script in CHECKED_BY has a test of its own that runs its docs command this way and
    checks what it wrote (the command runs once in the suite): here, that the test does."""
    script = script_of(command)
    if script in CHECKED_BY:
        test_text = (REPO / CHECKED_BY[script]).read_text()
        assert "run_as_written(" in test_text and f'"{script}"' in test_text, f"{where}: {CHECKED_BY[script]} does not run it"
        return
    done = run_as_written(command, tmp_path)
    assert done.returncode == 0, f"{where}: {command}\n{(done.stdout + done.stderr)[-3000:]}"
    assert "Traceback" not in done.stderr
    assert any((checkout(tmp_path) / "runs").rglob("report/README.md")), f"{where}: no report under runs/"


def test_the_docs_show_at_least_one_study_scripts_smoke_command():
    assert SCRIPT_SMOKES, "no `bash scripts/...sh --smoke` line in the docs: the test above runs nothing"


def test_the_experiment_file_example_in_the_slurm_docs_loads_as_documented(tmp_path, monkeypatch):
    from gdpo_nemo import config as cc

    text = (REPO / "docs" / "slurm.md").read_text().split("## Experiment files", 1)[1]
    example = FENCE.search(text).group(2)
    (tmp_path / "documented.yaml").write_text(example)
    monkeypatch.setenv("GDPO_NEMO_EXPERIMENTS", str(tmp_path))
    specs = cc.load_experiment("documented")
    names = [spec.run_id.name for spec in specs]
    assert len(names) == 3 * 2 + 1 and "documented__toolcall__qwen2.5-1.5b-instruct__gdpo_nobn__seed0" in names
    [variant] = [spec for spec in specs if spec.run_id.algo == "gdpo_nobn"]
    assert variant.compose()["gdpo"]["estimator"] == "gdpo_no_bn" and variant.compose()["grpo"]["max_num_steps"] == 200
