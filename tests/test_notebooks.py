"""The analysis notebooks run headless on the local engine's real run dirs, through the
command docs/analysis.md gives, word for word, from a repo root whose runs/ holds the runs.

They hold no logic: they must execute top to bottom with the source the command gives them,
and show the tables and figures the package makes. The command runs once for the module;
each test reads what it wrote.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from test_analysis_engine import make_engine_runs

REPO = Path(__file__).resolve().parents[1]
GDPO_NEMO = Path(sys.executable).with_name("gdpo-nemo")


def documented_command() -> list[str]:
    """The words of docs/analysis.md's notebook command (its "Notebooks" section)."""
    text = (REPO / "docs" / "analysis.md").read_text()
    section = text[text.index("## Notebooks"):]
    return shlex.split(re.search(r"^```bash\n(gdpo-nemo notebooks[^\n]*)\n```", section, re.M).group(1))


@pytest.fixture(scope="module")
def documented_run(tmp_path_factory) -> dict:
    """The docs' command run from a scratch repo root whose runs/ holds real runs."""
    runs = make_engine_runs(tmp_path_factory.getbasetemp() / "engine_runs")
    root = tmp_path_factory.mktemp("repo")
    (root / "runs").symlink_to(runs, target_is_directory=True)
    words = documented_command()
    done = subprocess.run([str(GDPO_NEMO), *words[1:]], cwd=root, capture_output=True, text=True, timeout=900)
    out = root / words[words.index("--out") + 1]
    return {"done": done, "out": out}


def _read(run: dict, name: str) -> nbformat.NotebookNode:
    done = run["done"]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return nbformat.read(str(run["out"] / name), as_version=4)


def outputs_text(notebook) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            data = output.get("data", {})
            parts.append(data.get("text/markdown", "") + data.get("text/plain", ""))
    return "\n".join(parts)


def image_count(notebook) -> int:
    return sum("image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", []))


def test_the_docs_command_executes_the_tables_notebook_on_the_runs_of_runs(documented_run):
    text = outputs_text(_read(documented_run, "01_tables.ipynb"))
    assert "analysis__gsm8k__tiny__gdpo__seed1" in text
    assert "Table 1: tool calling on BFCL-v3" in text and "paper 55.36" in text
    assert "Final values per method" in text and "95 % t interval of the mean" in text and "| gdpo |" in text


def test_the_docs_command_executes_the_curves_notebook_with_curves_diagnostics_and_fig3(documented_run):
    notebook = _read(documented_run, "02_curves.ipynb")
    assert image_count(notebook) == 3
    figures = documented_run["out"] / "figures"
    assert (figures / "curves__analysis__gsm8k__tiny.pdf").exists()
    assert (figures / "advantage_groups__analysis__gsm8k__tiny.png").exists()


def test_a_missing_source_folder_is_one_line_naming_it(tmp_path):
    done = subprocess.run([str(GDPO_NEMO), "notebooks", "--source", "no_such_runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no_such_runs: no such folder" in done.stderr
    assert not (tmp_path / "reports").exists()


def test_a_source_the_report_refuses_is_refused_alike_in_one_plain_line(tmp_path):
    """A W&B source without a key: `report` says so in one line, exit 2; `notebooks` fails
    inside its first cell on the same ValueError and must say the same, without the kernel's
    terminal colour codes, and exit 2 as well."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)
    said = {}
    for command in ("report", "notebooks"):
        done = subprocess.run([str(GDPO_NEMO), command, "--source", "wandb:someone/project", "--out", str(tmp_path / command)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (command, lines)
        [line] = lines
        assert "\x1b[" not in line
        said[command] = line.split(": error: ", 1)
    assert said["report"][0] == "gdpo-nemo report" and said["notebooks"][0] == "gdpo-nemo notebooks"
    assert said["notebooks"][1] == said["report"][1]
