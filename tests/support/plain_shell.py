"""The docs' study-script smoke commands, run as a user runs them: word for word, from a
checkout after scripts/setup.sh, in a shell that has not activated .venv and sets no PYTHON.

tests/test_docs_commands.py runs each such command; a script whose smoke command a test of
its own runs that way (and checks what it wrote) is named in `CHECKED_BY`, and runs once.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.numerics import user_environment

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# script -> the test that runs the docs' smoke command of it (run_as_written) and checks its output.
CHECKED_BY = {"scripts/gpu_study.sh": "tests/test_gpu_study.py"}


def script_smoke_commands() -> list[tuple[str, str]]:
    """(where, command) of every `bash scripts/<study>.sh --smoke ...` line in the docs: the
    study scripts' cheap form (builtin:tiny on the CPU, about a minute)."""
    found = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            command = line.split("#", 1)[0].strip()
            if re.match(r"^(PYTHON=\S+ )?bash scripts/\w+\.sh\b", command) and "--smoke" in command.split():
                found.append((f"{path.relative_to(REPO)}:{number}", command))
    return found


def script_of(command: str) -> str:
    """The scripts/<name>.sh a smoke command runs."""
    return next(word for word in shlex.split(command) if word.startswith("scripts/"))


def checkout(folder: Path, *, also_leave_out: tuple[str, ...] = ()) -> Path:
    """A folder that looks like a checkout after setup (the repo's entries linked, but not
    .git and runs/, which the command writes, nor `also_leave_out`). Made once; returned
    again after."""
    root = folder / "checkout"
    if not root.exists():
        root.mkdir(parents=True)
        for entry in REPO.iterdir():
            if entry.name not in (".git", "runs", *also_leave_out):
                (root / entry.name).symlink_to(entry)
    return root


def run_as_written(command: str, folder: Path) -> subprocess.CompletedProcess:
    """`command` word for word in `checkout(folder)`, in a user's shell: no PYTHON,
    VIRTUAL_ENV or PYTHONPATH, .venv's bin not on PATH, the CPU pins as a user has them, and no
    GDPO_NEMO_CACHE (the study's own cache, under its output folder)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in user_environment().items() if k not in ("PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.pop("GDPO_NEMO_CACHE", None)
    return subprocess.run(shlex.split(command), cwd=checkout(folder), env=env, capture_output=True, text=True,
                          timeout=900)
