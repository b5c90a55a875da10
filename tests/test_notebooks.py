"""The analysis notebooks run headless (nbclient) on the local engine's real run dirs.

They hold no logic: they must execute top to bottom with the source given through
GDPO_REPORT_SOURCE, and show the tables and figures the package makes.
"""

from __future__ import annotations

from pathlib import Path

import re
import shlex
import subprocess
import sys

import nbformat
import pytest

from gdpo_nemo.analysis.notebooks import execute_notebook

from test_analysis_engine import make_engine_runs

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "analysis" / "notebooks"


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> Path:
    return make_engine_runs(tmp_path_factory.getbasetemp() / "engine_runs")


def execute(name: str, workdir: Path, env: dict) -> nbformat.NotebookNode:
    return execute_notebook(NOTEBOOKS / name, env, workdir=workdir, timeout=180)


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


def test_tables_notebook_runs_on_engine_runs(engine_runs, tmp_path):
    notebook = execute("01_tables.ipynb", tmp_path, {"GDPO_REPORT_SOURCE": str(engine_runs), "PYTHONPATH": str(REPO)})
    text = outputs_text(notebook)
    assert "analysis__gsm8k__tiny__gdpo__seed1" in text
    assert "Table 1: tool calling on BFCL-v3" in text and "paper 55.36" in text
    assert "Final values per method" in text and "95 % t interval of the mean" in text and "| gdpo |" in text


def test_curves_notebook_shows_curves_diagnostics_and_fig3(engine_runs, tmp_path):
    figures = tmp_path / "figures"
    notebook = execute("02_curves.ipynb", tmp_path, {"GDPO_REPORT_SOURCE": str(engine_runs), "PYTHONPATH": str(REPO),
                                                     "GDPO_REPORT_FIGURES": str(figures)})
    assert image_count(notebook) == 3
    assert (figures / "curves__analysis__gsm8k__tiny.pdf").exists()
    assert (figures / "advantage_groups__analysis__gsm8k__tiny.png").exists()


def test_the_docs_notebook_command_runs_as_written_from_the_repo_root(engine_runs, tmp_path):
    """docs/analysis.md's command, word for word, from a repo root whose runs/ holds real
    runs: both notebooks execute and land in the folder it names."""
    text = (REPO / "docs" / "analysis.md").read_text()
    section = text[text.index("## Notebooks"):]
    command = re.search(r"^```bash\n(gdpo-nemo notebooks[^\n]*)\n```", section, re.M).group(1)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "runs").symlink_to(engine_runs, target_is_directory=True)
    words = shlex.split(command)
    gdpo_nemo = Path(sys.executable).with_name("gdpo-nemo")
    done = subprocess.run([str(gdpo_nemo), *words[1:]], cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = root / words[words.index("--out") + 1]
    tables = outputs_text(nbformat.read(str(out / "01_tables.ipynb"), as_version=4))
    assert "analysis__gsm8k__tiny__gdpo__seed1" in tables
    assert image_count(nbformat.read(str(out / "02_curves.ipynb"), as_version=4)) == 3
    assert (out / "figures" / "curves__analysis__gsm8k__tiny.png").exists()


def test_a_missing_source_folder_is_one_line_naming_it(tmp_path):
    gdpo_nemo = Path(sys.executable).with_name("gdpo-nemo")
    done = subprocess.run([str(gdpo_nemo), "notebooks", "--source", "no_such_runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no_such_runs: no such folder" in done.stderr
    assert not (tmp_path / "reports").exists()
