"""A run dir's lifecycle, the same for both engines: start (or continue) a run, record each
invocation, mark the run finished. The files it touches are named in `rundir`.

    start_run        refuse a run dir that holds an earlier run (unless --resume or
                     --overwrite: the earlier run is moved into ``replaced/<time>/``, never
                     deleted), check a resume against the run's saved config and metrics,
                     write config.yaml, drop a stale DONE
    record_start     append this invocation to provenance.json (code, libraries, numerics,
                     starting weights, the step it resumed from)
    finish_run       write DONE: the run trained all its steps

What differs between the engines comes in as parameters: the local engine finds its own
newest checkpoint and says which keys a resume may change (`ResumeRules`); NeMo RL resumes
by itself from ``checkpointing.checkpoint_dir``, so its run dir is continued as it is
(`rules=None`).
"""

from __future__ import annotations

import json

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.runs import provenance, rundir


def _as_saved(config: dict) -> dict:
    return config


@dataclass(frozen=True)
class ResumeRules:
    """What an engine that checks its own starts tells `start_run`.

    Attributes:
        latest_checkpoint: the newest complete checkpoint of a run dir as `(step, path)`,
            None when there is none.
        resumable_changes: key prefixes (``"logger."``) or whole dotted keys that may differ
            between a run's saved config.yaml and its resume: they do not touch the trajectory.
        as_saved_today: the saved config as today's code reads it (keys added since it was
            written filled with their defaults), so an upgrade is not a "change".
    """

    latest_checkpoint: Callable[[Path], tuple[int, Path] | None]
    resumable_changes: tuple[str, ...] = ()
    as_saved_today: Callable[[dict], dict] = _as_saved


def start_run(run_dir, config: dict, *, resume: bool = False, overwrite: bool = False,
              rules: ResumeRules | None = None, log=print) -> tuple[int, Path] | None:
    """Create the run dir, write its config.yaml and clear a stale DONE; returns the newest
    checkpoint `(step, path)` to resume from (None: start from step 0).

    With `rules` (the local engine): a run dir that already holds files is refused unless
    `resume` (continue it) or `overwrite` (move the earlier run into ``replaced/<time>/`` and
    start again): nothing in a run dir is ever truncated or deleted. A resume is refused when
    the config differs from the saved one in keys outside `rules.resumable_changes`, or when
    metrics.jsonl does not belong with the checkpoint. Without `rules` (NeMo RL, which
    resumes on its own) the run dir is continued as it is and None is returned."""
    run_dir = Path(run_dir)
    latest = None if rules is None else _claim(run_dir, config, resume, overwrite, rules, log)
    rundir.write_config(run_dir, config)
    rundir.clear_done(run_dir)
    return latest


def record_start(run_dir, *, numbers: dict, start_weights: dict, resumed_from: int | None = None,
                 libraries: dict | None = None) -> Path:
    """Append this invocation's provenance to the run dir (`provenance.invocation_record`:
    time, code, `libraries` (default: `provenance.LIBRARIES`), `numbers` (device, dtypes,
    backends), `start_weights` (source and digest), `resumed_from` (step, None at a start))."""
    return provenance.append(run_dir, provenance.invocation_record(
        numbers=numbers, start_weights=start_weights, resumed_from=resumed_from, libraries=libraries))


def fail_run(run_dir, error: BaseException | None, **details) -> None:
    """The run's job ends without finishing (an error, Ctrl-C, a SIGTERM inside a step):
    ``FAILED`` with what stopped it (and `details`, e.g. the checkpoint it would resume
    from), so every reader calls the run crashed, not finished, until a later job starts it
    again."""
    why = "stopped" if error is None else f"{type(error).__name__}: {error}".rstrip(": ")
    rundir.mark_failed(run_dir, why, **details)


def config_digest(config: dict) -> str:
    """A short digest of a run config's content (equal configs, equal digests)."""
    import hashlib

    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finish_run(run_dir, note: str = "") -> None:
    """Mark the run finished (``DONE`` holding `note`): only once it trained all its steps,
    never after a stop (a kill, a timeout) that a resume would continue."""
    rundir.mark_done(run_dir, note)


def _claim(run_dir: Path, config: dict, resume: bool, overwrite: bool, rules: ResumeRules,
           log) -> tuple[int, Path] | None:
    """`start_run`'s checks with `rules`: refuse or move aside an earlier run, check a
    resume; returns the checkpoint to resume from."""
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other: --resume continues the run in the run dir, "
                         "--overwrite moves it aside and starts again; pass one")
    if rundir.holds_run_data(run_dir) and not resume:
        if not overwrite:
            raise UserError(f"run dir {run_dir} already holds a run ({rundir.describe_run_dir(run_dir)}): pass --resume "
                             "to continue it, or --overwrite to move it into "
                             f"{run_dir / rundir.REPLACED_DIR}/<time>/ and start again (nothing is deleted)")
        moved = rundir.move_aside(run_dir)
        log(f"--overwrite: the earlier run in {run_dir} is now in {moved}")
    run_dir.mkdir(parents=True, exist_ok=True)
    latest = rules.latest_checkpoint(run_dir) if resume else None
    if latest is not None:
        _check_config_unchanged(run_dir, config, rules)
        _check_metrics_match(run_dir, latest[0])
    if resume and latest is None:
        log(f"--resume: no checkpoint in {rundir.checkpoints_dir(run_dir)}; starting from step 0")
    if latest is None:
        rundir.set_aside_unlogged_provenance(run_dir)
    return latest


def _check_config_unchanged(run_dir: Path, config: dict, rules: ResumeRules) -> None:
    """Refuse a resume whose config differs from the run's saved config.yaml (when there is
    one) in a key outside `rules.resumable_changes`."""
    config_path = rundir.config_path(run_dir)
    if not config_path.exists():
        return
    saved = rules.as_saved_today(rundir.read_config_file(config_path))
    changed = [k for k in config_differences(saved, config) if not k.startswith(rules.resumable_changes)]
    if changed:
        raise UserError(f"--resume: the config differs from the run's {config_path} at {changed[:5]}:"
                         " a resumed run must keep its settings (only grpo.max_num_steps and logger.* may change)")


def config_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted keys at which two configs differ (a key missing on one side counts), in
    sorted order within each level."""
    out = []
    for key in sorted(set(old) | set(new)):
        where = f"{prefix}{key}"
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, where + ".")
        elif a != b:
            out.append(where)
    return out


def _check_metrics_match(run_dir: Path, step: int) -> None:
    """Refuse to resume from checkpoint `step` when metrics.jsonl cannot be that run's: it
    must hold every step before the checkpoint (the checkpoint's own record may be missing,
    when the run was killed between saving and logging). Records after it are set aside by
    the tracker and logged again."""
    logged = {int(record["step"]) for record in rundir.read_metrics(run_dir)}
    missing = sorted(set(range(1, step)) - logged)
    if missing:
        raise UserError(
            f"--resume: {rundir.metrics_path(run_dir)} lacks step(s) {missing[:5]}{' ...' if len(missing) > 5 else ''} "
            f"before the newest checkpoint step_{step}: the metrics and the checkpoint are not one run's. Keep this run "
            f"dir as it is and start a new one (--run-dir), or --overwrite to move it aside"
        )
