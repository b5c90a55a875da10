"""What `gdpo-nemo sweep EXPERIMENT --cluster PROFILE [--dry-run | --submit | --status | --cancel]`
does (its flags: gdpo_nemo.commands.sweep), one function per mode, each printing its report:

- --dry-run (the default; `render_and_submit(..., submit=False)`): compose every run, write
  its config and sbatch script into the sweep dir and print the scripts; submits nothing.
- --submit (`render_and_submit(..., submit=True)`): the same, then submit what needs it; safe
  to repeat (see manifest.py): finished runs are skipped, pending/running ones left alone,
  failed, cancelled and timed-out ones resubmitted (their job resumes from the latest
  checkpoint).
- --status (`status`): a table of every run's state from squeue/sacct and the run dirs.
- --cancel (`cancel`): scancel the sweep's pending and running jobs.

Every check (experiment, profile, filters, configs, Slurm commands on PATH) runs before
anything is written or submitted; bad input raises SweepError naming it (the command exits
2), a failing Slurm command SlurmError (exit 1).
Where NeMo RL can be imported (--nemo-rl-python, $GDPO_NEMO_RL_PYTHON, or this Python), the
nemo-engine run configs are also checked by NeMo RL's own loader and MasterConfig.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gdpo_nemo.config.engines import ENGINES
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep import manifest as mf
from gdpo_nemo.sweep import slurm
from gdpo_nemo.sweep.errors import SweepError
from gdpo_nemo.sweep.plan import RunPlan, SweepLayout, plan_sweep, select, write_plans
from gdpo_nemo.sweep.profiles import ClusterProfile, load_profile


def _profile(cluster: str | None, mode: str) -> ClusterProfile:
    if not cluster:
        raise SweepError(f"--{mode} needs --cluster PROFILE (a name from slurm/profiles/ or a .yaml path)")
    return load_profile(cluster)


def _latest_checkpoint(run_dir: Path) -> str | None:
    """Name of the run's newest checkpoints/step_<N>, None if it has none."""
    steps = rundir.checkpoint_steps(rundir.checkpoints_dir(run_dir))
    return steps[-1][1].name if steps else None


@dataclass(frozen=True)
class ConfigCheck:
    """A check of one engine's run configs by that engine's own code (`Engine.native_check`:
    NeMo RL's MasterConfig for nemo), which the sweep gets through the engine registry and so
    never imports an engine. `run({name: config})`: True once checked, False when the engine's
    code was not found to ask; a ValueError (ConfigError) naming the run and the key when it
    refuses one. `unchecked_note`: what to print when it could not run; `owner`: whose check."""

    run: Callable[[dict], bool]
    unchecked_note: str
    owner: str = "NeMo RL"


def render_and_submit(experiment: str, layout: SweepLayout, cluster: str | None, filters: dict[str, set[str]], *,
                      engine: str | None = None, with_eval: bool = False, native_python: str | None = None,
                      submit: bool = False) -> int:
    """Plan every selected run of `experiment` on profile `cluster` (filters: {key: accepted
    values}, as `--only`), write its config and script into `layout` and print them
    (dry run), or submit what needs it (`submit`; see manifest.submit_action). engine:
    "nemo"/"local" for every run, None for each run's own; with_eval: an evaluation job per
    run; each engine's own check of its runs' configs runs last (`Engine.native_check`: NeMo
    RL's for nemo), with `native_python` (that engine's Python; None: found). Exit code 0."""
    profile = _profile(cluster, "submit" if submit else "dry-run")
    plans = plan_sweep(experiment, profile, layout.root, filters, engine=engine)
    engines = ",".join(sorted({plan.engine for plan in plans}))
    for name in sorted({plan.engine for plan in plans}):
        profile.check_engine(name, submit=submit)
    if submit:
        slurm.require("sbatch", "squeue", action="--submit")
        unset = [name for name in profile.env if name not in os.environ]
        if unset:
            print(f"gdpo-nemo sweep: warning: {', '.join(unset)} not set in this shell; profile {profile.name!r}"
                  " passes them by name, so jobs submitted now will not have them", file=sys.stderr)
    unchecked = _check_natively(plans, native_python)  # slowest: last
    evals = _eval_scripts(plans, profile, layout) if with_eval else {}
    placeholders = placeholder_values(profile)
    if submit and placeholders:
        raise SweepError(f"profile {profile.name!r} ({profile.path}) still holds placeholder values: "
                         f"{'; '.join(placeholders)}; fill in your cluster's before --submit")
    if not submit:
        existing = mf.Manifest.load(layout.manifest)
        if existing:  # never overwrite the scripts of another profile's or engine's sweep
            existing.check_matches(experiment=experiment, cluster=profile.name, engine=engines)
        _write(plans, layout, existing)
        # What will run, first; then warnings; the scripts after (the summary line repeats at the end).
        print(f"{len(plans)} run(s) of {experiment} for profile {profile.name!r} ({engines} engine), under {layout.root}:")
        print(runs_table(plans, layout.root))
        if placeholders:
            print(f"gdpo-nemo sweep: warning: profile {profile.name!r} ({profile.path}) still holds placeholder values: "
                  f"{'; '.join(placeholders)}; --submit refuses them", file=sys.stderr)
        for plan in plans:
            print(f"==> {plan.script_path} <==\n{plan.script}")
            if plan.name in evals:
                print(f"==> {evals[plan.name][0]} <==\n{evals[plan.name][1]}")
        print(f"{len(plans)} run(s) of {experiment} rendered into {layout.root} for profile"
              f" {profile.name!r} ({engines} engine); nothing submitted (use --submit)")
        _note_unchecked(unchecked)
        return 0
    layout.root.mkdir(parents=True, exist_ok=True)
    with mf.locked(layout.root):
        manifest = mf.Manifest.load(layout.manifest) or mf.Manifest(layout.manifest, experiment, profile.name, engines)
        manifest.check_matches(experiment=experiment, cluster=profile.name, engine=engines)
        _write(plans, layout, manifest)
        # sbatch runs here: ray.sub starts its containers in the submit dir, like the jobs' --chdir
        code = _submit(manifest, plans, cwd=Path.cwd(), evals=evals)
    _note_unchecked(unchecked)
    return code


# Values of the sample profile (slurm/profiles/example.yaml) and the usual stand-ins that
# mean "fill this in".
PLACEHOLDER_MARKS = ("my_account", "/path/to/", "CHANGE_ME", "changeme", "<your", "YOUR_")


def placeholder_values(profile) -> list[str]:
    """`key=value` of each profile value that is still a placeholder (PLACEHOLDER_MARKS)."""
    found = []
    for key in ("account", "partition", "container", "nemo_rl_dir", "nemo_launcher", "python", "mounts", "setup"):
        value = getattr(profile, key, None)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, str) and any(mark in item for mark in PLACEHOLDER_MARKS):
                found.append(f"{key}={item}")
    return found


def runs_table(plans: list[RunPlan], root: Path) -> str:
    """A table of the planned runs: run id, engine, config and run dir (paths under `root`)."""

    def short(path: Path) -> str:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            return str(path)

    rows = [("run", "engine", "config", "run dir")] + [
        (plan.name, plan.engine, short(plan.config_path), short(plan.run_dir)) for plan in plans
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(4)]
    return "\n".join("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _check_natively(plans: list[RunPlan], python: str | None) -> list[ConfigCheck]:
    """Refuse the sweep when an engine's own config check refuses one of its runs (its message
    names the run and the key). Returns the checks that found no code of their engine to ask."""
    import yaml

    unchecked = []
    for name in sorted({plan.engine for plan in plans}):
        check = ENGINES[name].native_check(python)
        if check is None:
            continue
        configs = {plan.name: yaml.safe_load(plan.config_text) for plan in plans if plan.engine == name}
        try:
            if not check.run(configs):
                unchecked.append(check)
        except ValueError as err:
            raise SweepError(f"{check.owner}'s own config check refuses this sweep ({len(configs)} {name}-engine run(s)"
                             f" checked): {err}") from None
    return unchecked


def _note_unchecked(unchecked: list[ConfigCheck]) -> None:
    for check in unchecked:
        print(f"gdpo-nemo sweep: note: {check.unchecked_note}", file=sys.stderr)


def _eval_scripts(plans: list[RunPlan], profile: ClusterProfile, layout: SweepLayout) -> dict:
    """{run name: (path, text)} of the evaluation job of each run (`--with-eval`), written now."""
    from gdpo_nemo.sweep.render import EVAL_TASKS, render_eval_script

    without = [plan for plan in plans if not ENGINES[plan.engine].evaluation_jobs]
    if without:
        with_jobs = [name for name in ENGINES if ENGINES[name].evaluation_jobs]
        raise SweepError(f"--with-eval attaches evaluation jobs to {'/'.join(with_jobs)}-engine runs only, and"
                         f" {without[0].name} ({len(without)} run(s)) runs on the {without[0].engine} engine: convert its"
                         " checkpoints to HF and run `gdpo-nemo eval --backend vllm` on them (docs/eval.md)")
    no_eval = [plan for plan in plans if plan.run_id.task not in EVAL_TASKS]
    if no_eval:
        tasks = ", ".join(sorted({plan.run_id.task for plan in no_eval}))
        raise SweepError(f"--with-eval: task {tasks} has no evaluation benchmarks (tasks with one:"
                         f" {', '.join(EVAL_TASKS)}); e.g. run {no_eval[0].name}; use --only task=...")
    scripts = {}
    for plan in plans:
        path = plan.script_path.with_name(f"{plan.name}.eval.sbatch")
        text = render_eval_script(ENGINES[plan.engine], run_id=plan.run_id, profile=profile, run_dir=plan.run_dir,
                                  log_path=layout.root / "logs" / f"{plan.name}.eval-%j.out", workdir=Path.cwd())
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        path.chmod(0o755)
        scripts[plan.name] = (path, text)
    return scripts


def _write(plans: list[RunPlan], layout: SweepLayout, manifest: mf.Manifest | None) -> None:
    started = {name for name, record in (manifest.runs.items() if manifest else ()) if record.jobs}
    if manifest is not None and manifest.moved_from:
        _rebase_kept_configs(manifest, layout, started)
    for name in write_plans(plans, layout, started):
        print(
            f"gdpo-nemo sweep: warning: the config of {name} changed since it was first submitted;"
            f" keeping {layout.config_path(name)} so the run resumes as it started"
            " (remove it and the run dir to start the run over with the new config)",
            file=sys.stderr,
        )


def _rebase_kept_configs(manifest: mf.Manifest, layout: SweepLayout, started: set[str]) -> None:
    """The sweep dir moved since its runs started: their kept configs (a resubmitted run
    resumes with the config it started with) name the old dir in their paths (log_dir,
    checkpoint_dir); point them here, so a resumed job continues the run in its dir as it is
    now, never writing beside it under the old path. Says so on stderr."""
    old, new = manifest.moved_from, str(layout.root.resolve())
    rewritten = []
    for name in sorted(started):
        path = layout.config_path(name)
        if path.is_file() and old in (text := path.read_text()):
            path.write_text(text.replace(old.rstrip("/") + "/", new.rstrip("/") + "/"))
            rewritten.append(name)
    manifest.moved_from = None  # saved from now on with its root here
    if rewritten:
        print(f"gdpo-nemo sweep: note: this sweep dir was {old}; the paths in the kept configs of {len(rewritten)}"
              f" started run(s) now name {new}", file=sys.stderr)


def _submit(manifest: mf.Manifest, plans: list[RunPlan], *, cwd: Path, evals: dict | None = None) -> int:
    """Submit the plans that need it (see manifest.submit_action), recording each job at once."""
    for plan in plans:
        record = manifest.runs.setdefault(
            plan.name, mf.RunRecord(str(plan.run_dir), str(plan.config_path), str(plan.script_path))
        )
        record.run_dir, record.config, record.script = str(plan.run_dir), str(plan.config_path), str(plan.script_path)
    names = [plan.name for plan in plans]
    _refresh(manifest, names)
    manifest.save()
    queued = None  # this user's live jobs by script, fetched once and only if something is to be submitted
    counts = {"submit": 0, "resubmit": 0, "leave": 0, "skip": 0, "adopt": 0}
    for plan in plans:
        record = manifest.runs[plan.name]
        action = mf.submit_action(record.state)
        if action in ("submit", "resubmit"):
            queued = slurm.active_jobs_by_script() if queued is None else queued
            checkpoint = _latest_checkpoint(plan.run_dir)
            if str(plan.script_path) in queued:
                job_id, state = queued[str(plan.script_path)]
                action, note = "adopt", f"job {job_id} already {state} for this script; recorded it"
            else:
                job_id, state = slurm.submit(plan.script_path, cwd=cwd), "PENDING"
                note = f"job {job_id}" + (f", resumes from {checkpoint}" if checkpoint else "")
            job = {"job_id": job_id, "submitted": mf.now(), "resume_from": checkpoint}
            if evals and plan.name in evals:
                stale = [j["eval_job_id"] for j in record.jobs if j.get("eval_job_id")]
                if stale:  # waits on a training job that will never succeed now
                    slurm.cancel(stale[-1:])
                job["eval_job_id"] = slurm.submit(evals[plan.name][0], cwd=cwd, dependency=f"afterok:{job_id}")
                note += f"; eval job {job['eval_job_id']} after it"
            record.jobs.append(job)
            record.state, record.updated = state, mf.now()
            manifest.save()  # after every submission, so a crash never loses a job id
        elif action == "leave":
            note = f"job {record.job_id} is {record.state}; left alone"
        else:
            note = "finished (DONE); skipped"
        counts[action] += 1
        print(f"{action:<9} {plan.name}  {note}")
    print(
        f"submitted {counts['submit']}, resubmitted {counts['resubmit']}, adopted {counts['adopt']},"
        f" left alone {counts['leave']} queued/running, skipped {counts['skip']} finished"
        f" (manifest: {manifest.path})"
    )
    return 0


def _refresh(manifest: mf.Manifest, names: list[str]) -> None:
    job_ids = [manifest.runs[n].job_id for n in names if manifest.runs[n].job_id]
    manifest.refresh(names, slurm.job_states(job_ids))


def _require_manifest(layout: SweepLayout) -> None:
    if not layout.manifest.is_file():
        raise SweepError(f"no sweep manifest at {layout.manifest}: submit first (--submit), or pass --sweep-dir")


def _existing_manifest(experiment: str, layout: SweepLayout, cluster: str | None,
                       filters: dict[str, set[str]]) -> tuple[mf.Manifest, list[str]]:
    """The sweep's manifest, checked against the command's experiment and profile, and the
    names of its runs that the filters select. Call it holding the sweep dir's lock."""
    manifest = mf.Manifest.load(layout.manifest)
    if experiment != manifest.experiment:
        raise SweepError(f"{layout.root} holds experiment {manifest.experiment!r}, not {experiment!r}")
    if cluster and load_profile(cluster).name != manifest.cluster:
        raise SweepError(f"{layout.root} was submitted with --cluster {manifest.cluster!r}, not {cluster!r}")
    run_ids = [RunId.parse(name) for name in manifest.runs]
    names = [r.name for r in select(run_ids, filters)]
    return manifest, names


def status(experiment: str, layout: SweepLayout, cluster: str | None, filters: dict[str, set[str]]) -> int:
    """Refresh the selected runs' states from squeue/sacct and print them as a table, with
    each run's job, job count and newest checkpoint. Exit code 0."""
    _require_manifest(layout)
    slurm.require("squeue", action="--status")
    with mf.locked(layout.root):
        manifest, names = _existing_manifest(experiment, layout, cluster, filters)
        _refresh(manifest, names)
        manifest.save()
    rows = [("RUN", "STATE", "JOB", "JOBS", "CHECKPOINT")]
    for name in names:
        record = manifest.runs[name]
        rows.append((name, record.state, record.job_id or "-", str(len(record.jobs)),
                     _latest_checkpoint(Path(record.run_dir)) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    totals = Counter(manifest.runs[name].state for name in names)
    print(f"{len(names)} run(s): " + ", ".join(f"{n} {state}" for state, n in sorted(totals.items())))
    return 0


def cancel(experiment: str, layout: SweepLayout, cluster: str | None, filters: dict[str, set[str]]) -> int:
    """scancel the selected runs' pending and running jobs and print what was cancelled.
    Exit code 0."""
    _require_manifest(layout)
    slurm.require("squeue", "scancel", action="--cancel")
    with mf.locked(layout.root):
        manifest, names = _existing_manifest(experiment, layout, cluster, filters)
        _refresh(manifest, names)
        live = [n for n in names if mf.is_live(manifest.runs[n].state)]
        slurm.cancel([manifest.runs[n].job_id for n in live])
        _refresh(manifest, live)
        manifest.save()
    for name in live:
        print(f"cancelled {name}  job {manifest.runs[name].job_id} ({manifest.runs[name].state})")
    print(f"cancelled {len(live)} job(s); {len(names) - len(live)} run(s) had no live job")
    return 0
