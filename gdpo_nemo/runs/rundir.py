"""The run dir: the names of what it holds, and the one reader and writer of each file.

Both engines write the same layout (docs/interfaces.md, "Run dir"); the sweep, the eval
command and the analysis read it. Every path below is built here, so a name changes in one
place:

    <run_dir>/
      config.yaml                 CONFIG_FILE: the resolved run config (`write_config`, `read_config`)
      metrics.jsonl               METRICS_FILE: one JSON object per logged step (`read_metrics`)
      checkpoints/step_<N>/       CHECKPOINTS_DIR: one folder per saved step (`checkpoint_steps`)
      wandb/                      WANDB_DIR: W&B's files when W&B is online or offline
      wandb_id                    WANDB_ID_FILE: the W&B run id, so a resumed run continues it
      eval/<benchmark>/step_<N>.json   EVAL_DIR: `gdpo-nemo eval` results (`eval_file`)
      DONE                        DONE_FILE: the run finished all its steps (`mark_done`, `is_done`)
      FAILED                      FAILED_FILE: the run's last job failed (`mark_failed`), with why
      replaced/<time>/            REPLACED_DIR: an earlier run in this dir, moved here by --overwrite
      metrics.after-step<N>.<time>.jsonl   records past the checkpoint a run resumed from

A NeMo RL log dir inside a run dir may also hold ``tensorboard/`` (TENSORBOARD_DIR) and
``train_data_step<N>.jsonl`` files; the analysis reads those (gdpo_nemo.analysis.sources).

Nothing here deletes or truncates a run's data: starting over moves the earlier run into
``replaced/<time>/`` (`move_aside`), and a resume sets the records past its checkpoint
aside in their own file (`split_metrics`); the analysis reads neither.

Torn files: a run killed mid-write can leave the last line of ``metrics.jsonl`` half
written. `read_metrics_file` skips any line that is not a whole record and keeps reading,
since every other line was written and flushed whole.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from gdpo_nemo.errors import UserError

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
DONE_FILE = "DONE"
FAILED_FILE = "FAILED"
CHECKPOINTS_DIR = "checkpoints"
WANDB_DIR = "wandb"
WANDB_ID_FILE = "wandb_id"
PROVENANCE_FILE = "provenance.json"
EVAL_DIR = "eval"
TENSORBOARD_DIR = "tensorboard"
REPLACED_DIR = "replaced"
# Folders of a run dir that hold no run of their own: the analysis does not descend into them.
NON_RUN_DIRS = (CHECKPOINTS_DIR, WANDB_DIR, EVAL_DIR, REPLACED_DIR)
STEP_DIR = re.compile(r"^step_(\d+)$")  # checkpoints/step_<N>, eval/bfcl/step_<N>


def shown(path) -> str:
    """`path` as a log line shows it: relative to the working dir when inside it (a study's
    logs then name no machine's paths), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_path(run_dir) -> Path:
    """``<run_dir>/config.yaml``."""
    return Path(run_dir) / CONFIG_FILE


def metrics_path(run_dir) -> Path:
    """``<run_dir>/metrics.jsonl``."""
    return Path(run_dir) / METRICS_FILE


def done_path(run_dir) -> Path:
    """``<run_dir>/DONE``."""
    return Path(run_dir) / DONE_FILE


def checkpoints_dir(run_dir) -> Path:
    """``<run_dir>/checkpoints``: the folder of the ``step_<N>`` checkpoints."""
    return Path(run_dir) / CHECKPOINTS_DIR


def wandb_dir(run_dir) -> Path:
    """``<run_dir>/wandb``: where W&B writes its run files (offline ones included)."""
    return Path(run_dir) / WANDB_DIR


def eval_dir(run_dir, benchmark: str | None = None) -> Path:
    """``<run_dir>/eval``, or ``<run_dir>/eval/<benchmark>`` when `benchmark` is given."""
    folder = Path(run_dir) / EVAL_DIR
    return folder / benchmark if benchmark else folder


def eval_file(run_dir, benchmark: str, step: int) -> Path:
    """``<run_dir>/eval/<benchmark>/step_<step>.json``: one benchmark's results at one step."""
    return eval_dir(run_dir, benchmark) / f"step_{step}.json"


def is_run_dir(folder) -> bool:
    """True when `folder` holds a ``metrics.jsonl`` or a ``config.yaml`` (what makes a run dir)."""
    return metrics_path(folder).exists() or config_path(folder).exists()


# ---- DONE ----------------------------------------------------------------------------


def is_done(run_dir) -> bool:
    """True when the engine marked the run finished (``<run_dir>/DONE`` is a file)."""
    return done_path(run_dir).is_file()


def mark_done(run_dir, note: str = "") -> None:
    """Mark the run finished: write ``DONE`` holding `note` (the engines write the step count
    or "done"; readers only test that the file exists)."""
    done_path(run_dir).write_text(note)


def clear_done(run_dir) -> None:
    """Remove a stale ``DONE`` and ``FAILED`` (a run that starts or resumes is neither
    finished nor failed)."""
    done_path(run_dir).unlink(missing_ok=True)
    failed_path(run_dir).unlink(missing_ok=True)


def failed_path(run_dir) -> Path:
    """``<run_dir>/FAILED``."""
    return Path(run_dir) / FAILED_FILE


def mark_failed(run_dir, why: str, **details) -> None:
    """Mark the run's last job failed (an error, or stopped inside a step): ``FAILED`` holds
    {"error": `why` in one line, **details} as JSON; readers call the run crashed until a
    later job starts it again (`clear_done`)."""
    record = {"error": why.strip().replace("\n", " ")[:2000], **details}
    failed_path(run_dir).write_text(json.dumps(record, sort_keys=True) + "\n")


def read_failed(run_dir) -> dict | None:
    """What `mark_failed` wrote ({"error": ...} for a FAILED that is not JSON), None when
    the run dir has no FAILED."""
    path = failed_path(run_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    return record if isinstance(record, dict) else {"error": text.strip()}


def status(run_dir) -> str:
    """``finished`` (DONE), ``crashed`` (FAILED) or ``unfinished`` (neither: running, or a
    job killed without a word)."""
    return "finished" if is_done(run_dir) else "crashed" if failed_path(run_dir).is_file() else "unfinished"


# ---- config.yaml ---------------------------------------------------------------------


def config_yaml(config: Mapping) -> str:
    """The run config as the YAML text of a ``config.yaml``, keys in their composed order:
    the one serialization of a config (run dirs, sweep scripts, `gdpo-nemo config show`)."""
    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=None, width=100)


def write_config(run_dir, config: Mapping) -> Path:
    """Write the resolved run config to ``<run_dir>/config.yaml`` (`config_yaml`); creates
    the run dir. Returns the file's path."""
    path = config_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_yaml(config))
    return path


def read_config_file(path) -> dict:
    """The mapping in a run config file (an empty file reads as {}). ValueError naming the
    file when it is not YAML or not a mapping; OSError when it cannot be read."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not YAML: {err}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a mapping, found {type(config).__name__}")
    return config


def read_config(run_dir) -> dict | None:
    """The resolved config of a run dir (`read_config_file` of its ``config.yaml``), None
    when the run dir has none."""
    path = config_path(run_dir)
    return read_config_file(path) if path.is_file() else None


# ---- metrics.jsonl -------------------------------------------------------------------


def parse_metrics_line(line: str) -> tuple[dict | None, str]:
    """(the record, "") of one line of a metrics.jsonl, or (None, why it is not one): a JSON
    object with a finite numeric ``"step"``."""
    try:
        record = json.loads(line)
    except ValueError:
        return None, f"not JSON: {line.strip()[:60]!r}"
    step = record.get("step") if isinstance(record, dict) else None
    if isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step):
        return record, ""
    return None, "no numeric 'step'"


def read_metrics_file(path, bad_lines: list | None = None) -> list[dict]:
    """The records of a `metrics.jsonl` file, in file order: the one reader of the format.

    A line that is not a JSON object with a numeric ``"step"`` (the last line of a run
    killed mid-write, a hand edit) is skipped, and the lines after it are still read: each
    was written whole on its own. When `bad_lines` is given, each skipped line is appended
    to it as ``(line number, reason)``.
    """
    records = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record, reason = parse_metrics_line(line)
            if record is not None:
                records.append(record)
            elif bad_lines is not None:
                bad_lines.append((number, reason))
    return records


def read_metrics(run_dir) -> list[dict]:
    """The records of `<run_dir>/metrics.jsonl` (`read_metrics_file`); [] when there is none."""
    path = metrics_path(run_dir)
    return read_metrics_file(path) if path.exists() else []


def stamp() -> str:
    import time

    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def split_metrics(run_dir, last_step: int) -> Path | None:
    """Keep in `metrics.jsonl` only the records with step <= `last_step` (a run resuming from
    that checkpoint logs the later steps again) and move the others, unread lines included,
    into ``metrics.after-step<last_step>.<time>.jsonl`` beside it, never deleting any. Both
    files are written through temporary files and atomic renames. Returns the set-aside
    file, or None when nothing was past `last_step`."""
    path = metrics_path(run_dir)
    if not path.exists():
        return None
    kept, later = [], []
    with open(path) as handle:
        for line in handle:
            if not line.strip():
                continue
            record, _ = parse_metrics_line(line)
            (kept if record is not None and record["step"] <= last_step else later).append(line.rstrip("\n") + "\n")
    if not later:
        return None
    aside = path.with_name(f"metrics.after-step{last_step}.{stamp()}.jsonl")
    for target, lines in ((aside, later), (path, kept)):
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "w") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    return aside


def run_dir_contents(run_dir) -> list[str]:
    """The names in `run_dir` ([] when it does not exist or is empty)."""
    folder = Path(run_dir)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def holds_run_data(run_dir) -> bool:
    """True when `run_dir` holds anything of a run but its config.yaml, an empty
    metrics.jsonl, its W&B id and the provenance of starts that logged nothing (what a run
    that stopped before its first step leaves: a failed W&B start, a missing model)."""
    names = set(run_dir_contents(run_dir)) - {REPLACED_DIR, CONFIG_FILE, WANDB_ID_FILE}
    if METRICS_FILE in names and metrics_path(run_dir).stat().st_size == 0:
        names.discard(METRICS_FILE)
    if METRICS_FILE not in names:  # no step was logged: its provenance describes no numbers
        names.discard(PROVENANCE_FILE)
    return bool(names)


def set_aside_unlogged_provenance(run_dir) -> Path | None:
    """Before a run starts from step 0 in `run_dir`: a provenance.json left by starts that
    logged no step is moved into ``replaced/<time>/`` (never deleted), so the new run's
    first record is its own start. Returns where it went."""
    metrics = metrics_path(run_dir)
    if metrics.exists() and metrics.stat().st_size > 0:
        return None
    return keep_earlier(Path(run_dir) / PROVENANCE_FILE)


def keep_earlier(path) -> Path | None:
    """Before `path` (a result file) is written again, move the earlier one (if any) into
    ``<its folder>/replaced/<time>/``, which no reader descends into. Returns where it went."""
    path = Path(path)
    if not path.exists():
        return None
    target = path.parent / REPLACED_DIR / stamp()
    target.mkdir(parents=True, exist_ok=True)
    os.replace(path, target / path.name)
    return target / path.name


def move_aside(run_dir, names=None) -> Path:
    """Move everything in `run_dir` (an earlier run), or only the entries `names`, into
    ``<run_dir>/replaced/<time>/`` so that a new run starts afresh and nothing is lost.
    Returns that folder."""
    folder = Path(run_dir)
    target = folder / REPLACED_DIR / stamp()
    target.mkdir(parents=True)
    for name in run_dir_contents(folder) if names is None else names:
        if name != REPLACED_DIR and (folder / name).exists():
            os.replace(folder / name, target / name)
    return target


def describe_run_dir(run_dir) -> str:
    """One line on what a run dir holds: its metrics' steps, checkpoints and DONE."""
    parts = []
    records = read_metrics(run_dir) if metrics_path(run_dir).exists() else []
    if records:
        steps = [int(r["step"]) for r in records]
        parts.append(f"metrics.jsonl with steps {min(steps)}..{max(steps)}")
    saved = checkpoint_steps(checkpoints_dir(run_dir))
    if saved:
        parts.append(f"checkpoints step_{saved[0][0]}..step_{saved[-1][0]}")
    if is_done(run_dir):
        parts.append("DONE")
    others = [n for n in run_dir_contents(run_dir) if n not in (METRICS_FILE, CHECKPOINTS_DIR, DONE_FILE)]
    if others:
        parts.append(", ".join(others[:6]) + (" ..." if len(others) > 6 else ""))
    return "; ".join(parts) or "files"


# ---- checkpoints/ --------------------------------------------------------------------


def checkpoint_steps(folder) -> list[tuple[int, Path]]:
    """The ``step_<N>`` sub-folders of `folder` (a run dir's ``checkpoints/``, or NeMo RL's
    ``checkpointing.checkpoint_dir``) as ``(N, path)``, smallest N first; [] when `folder`
    does not exist. Whether a folder holds a complete checkpoint is the engine's to judge."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = STEP_DIR.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)
