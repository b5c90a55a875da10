"""Executing the analysis notebooks (analysis/notebooks/) headless, from any folder.

The notebooks hold no logic; they read their source from ``GDPO_REPORT_SOURCE`` (and
``GDPO_REPORT_EXPERIMENT``, ``GDPO_REPORT_FIGURES``). A kernel started by Jupyter runs in
the notebook's own folder, so a relative path such as ``runs/`` given from the repo root
would name ``analysis/notebooks/runs``: `run_notebooks` makes every path absolute against
the caller's folder first, and runs the kernel with nbclient (installed with the package:
no Jupyter front end is needed).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT

__all__ = ["NOTEBOOK_DIR", "NOTEBOOKS", "execute_notebook", "run_notebooks"]

NOTEBOOK_DIR = REPO_ROOT / "analysis" / "notebooks"
NOTEBOOKS = ("01_tables.ipynb", "02_curves.ipynb")


def execute_notebook(path: Path, env: Mapping[str, str], *, workdir: Path, timeout: int = 600):
    """The notebook at `path` executed top to bottom (nbformat NotebookNode), its kernel in
    `workdir` with this process's environment plus `env`. A failing cell raises nbclient's
    CellExecutionError naming the cell."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(str(path), as_version=4)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        # IPC sockets, not TCP on localhost: nothing another user of the machine can connect to
        # (ipykernel warns about unencrypted TCP on every start, on stderr).
        from jupyter_client.manager import KernelManager

        with tempfile.TemporaryDirectory(prefix="gdpo-nemo-kernel-") as sockets:
            manager = KernelManager(kernel_name="python3", transport="ipc",
                                    connection_file=str(Path(sockets) / "kernel.json"))
            try:
                NotebookClient(notebook, timeout=timeout, kernel_name="python3", km=manager,
                               resources={"metadata": {"path": str(workdir)}}).execute()
            finally:  # a client given its kernel manager leaves the kernel to it
                if manager.has_kernel:
                    manager.shutdown_kernel(now=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


def _absolute_source(source: str, base: Path) -> str:
    if source.startswith("wandb:"):
        return source
    path = Path(source).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def run_notebooks(source: str, out, *, experiment: str | None = None, figures=None,
                  names: Sequence[str] = NOTEBOOKS, base: Path | None = None, log=print) -> list[Path]:
    """Execute `names` on `source` (a folder of runs, or ``wandb:ENTITY/PROJECT``) and write
    the executed copies into `out`; figures go to `figures` (default ``<out>/figures``).
    Relative paths are taken from `base` (default: the current folder). Returns the paths
    written. ValueError when `source` is a folder that does not exist."""
    import nbformat

    base = Path(base or Path.cwd())
    source = _absolute_source(source, base)
    if not source.startswith("wandb:") and not Path(source).is_dir():
        raise UserError(f"--source {source}: no such folder (give a folder of runs or wandb:ENTITY/PROJECT)")
    out = Path(out) if Path(out).is_absolute() else base / out
    figures = Path(figures) if figures is not None else out / "figures"
    figures = figures if figures.is_absolute() else base / figures
    out.mkdir(parents=True, exist_ok=True)
    env = {"GDPO_REPORT_SOURCE": source, "GDPO_REPORT_FIGURES": str(figures)}
    if experiment:
        env["GDPO_REPORT_EXPERIMENT"] = experiment
    written = []
    for index, name in enumerate(names, start=1):
        log(f"[{index}/{len(names)}] executing {name} on {source}")
        notebook = execute_notebook(NOTEBOOK_DIR / name, env, workdir=NOTEBOOK_DIR)
        target = out / name
        nbformat.write(notebook, str(target))
        written.append(target)
        log(f"      wrote {target}")
    return written
