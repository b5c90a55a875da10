"""The analysis notebooks run headless (nbclient) on the local engine's real run dirs.

They hold no logic: they must execute top to bottom with the source given through
GDPO_REPORT_SOURCE, and show the tables and figures the package makes.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from test_analysis_engine import make_engine_runs

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "analysis" / "notebooks"


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> Path:
    return make_engine_runs(tmp_path_factory.getbasetemp() / "engine_runs")


def execute(name: str, workdir: Path, env: dict) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


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
