"""Run an experiment's runs on this machine, several local-engine processes at a time.

What ``python -m gdpo_nemo.commands.local_parallel EXPERIMENT [--out DIR] [--jobs N]
[--only KEY=VALUE ...] [--smoke] [key=value ...]`` runs (that module holds the flags, the
error lines and the exit codes).

For one machine without Slurm: a GPU box where several small-model runs share the one GPU
(each run is its own process with its own CUDA context; a 135M-parameter model leaves an
80 GB GPU mostly idle, so side-by-side runs finish sooner than back to back), or a CPU box.
`gdpo-nemo sweep --engine local` is the Slurm equivalent (one job per run).

1. Compose every run of experiments/EXPERIMENT.yaml (as `gdpo-nemo sweep` does; `--only`
   filters the same way), with `key=value` overrides last, and write DIR/configs/<run>.yaml.
   A run that already started keeps the config it started with.
2. Prepare what runs share, once, in one process before any run starts: the embedded
   model's conversion and each distinct warm-start (otherwise N runs would compute the
   same warm-start at once).
3. Run `python -m gdpo_nemo.engines.local.worker train configs/<run>.yaml runs/<run>` (what
   `gdpo-nemo train --config configs/<run>.yaml --run-dir runs/<run> --resume` does) in DIR
   (the configs name paths relative to it) for at most N runs at a time, each writing
   DIR/logs/<run>.log, with this checkout's code and the cache ``$GDPO_NEMO_CACHE``
   (default DIR/.cache: a study starts from a clean cache of its own). Runs with a DONE marker
   are skipped; the others resume from their newest checkpoint, so rerunning the command
   after an interruption finishes the experiment.

The command's exit status is 0 when every run finished, 1 otherwise (the failed runs and
their logs are named), 2 on bad input. `--smoke` (SMOKE_OVERRIDES) swaps in `builtin:tiny`
on the CPU at toy sizes (2 steps of 2 prompts x 2 rollouts, 8 new tokens): the whole
pipeline in about a minute, for tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.rundir import shown

# Toy sizes of --smoke: every run of the experiment on the tiny model, CPU, fp32, seconds each.
SMOKE_OVERRIDES = (
    "policy.model_name=builtin:tiny",
    "gdpo.model_tag=tiny",
    "++gdpo.local.device=cpu",
    "++gdpo.local.autocast=null",
    "grpo.num_prompts_per_step=2",
    "grpo.num_generations_per_prompt=2",
    "grpo.max_num_steps=2",
    "grpo.val_period=0",
    "grpo.val_at_end=false",
    "policy.train_global_batch_size=4",
    "policy.train_micro_batch_size=2",
    "policy.generation_batch_size=4",
    "policy.logprob_batch_size=4",
    "policy.generation.max_new_tokens=8",
    "policy.max_total_sequence_length=4096",  # the tiny model's tokens are bytes
    "data.max_input_seq_length=null",
    "checkpointing.save_period=1",
    "++gdpo.local.warm_start.steps=1",
    "++gdpo.local.warm_start.batch_size=2",
)
# The engine's own process entry: `prepare CONFIG ...` (prepare_shared) and `train CONFIG
# RUN_DIR`, each run in a process of its own.
WORKER_MODULE = "gdpo_nemo.engines.local.worker"


@dataclass(frozen=True)
class LocalRun:
    """One run on this machine: its name and where its files go (its config file is whole:
    the run trains it as it is)."""

    name: str
    config_path: Path
    run_dir: Path
    log_path: Path

    @property
    def finished(self) -> bool:
        """Marked DONE at the steps its config asks for now (a quickstart run again with more
        --steps continues its finished runs)."""
        if not rundir.is_done(self.run_dir):
            return False
        if not self.config_path.is_file():
            return True
        import yaml

        wanted = yaml.safe_load(self.config_path.read_text())["grpo"]["max_num_steps"]
        return max((record.get("step", 0) for record in rundir.read_metrics(self.run_dir)), default=0) >= wanted


def plan_runs(experiment: str, out: Path, filters: dict[str, set[str]] | None = None, overrides=(), *,
              smoke: bool = False, threads_per_run: int | None = None) -> list[LocalRun]:
    """Compose and check the config of every run that `filters` ({key: accepted values}, as
    `--only`; None: every run) selects, then write them (a run that started keeps the config
    it started with); returns the runs seed by seed (every run of the first seed, in the
    experiment's order, then the next seed), so that a study cut short leaves whole seeds:
    pairs of methods on the same seed, which is what a paired comparison needs. ValueError
    naming the experiment, filter or run at fault, with nothing written."""
    from gdpo_nemo import config as run_config
    from gdpo_nemo.engines.local.config import resolve_and_check
    from gdpo_nemo.runs.run_id import RunId
    from gdpo_nemo.sweep.errors import SweepError
    from gdpo_nemo.sweep.plan import place_run, select

    try:
        specs = run_config.load_experiment(experiment)
        chosen = set(select([spec.run_id for spec in specs], filters or {}))
    except (run_config.ConfigError, SweepError) as err:
        raise UserError(str(err)) from None
    extra = [*(SMOKE_OVERRIDES if smoke else ()), *overrides]
    # A default only: the experiment's own num_threads (a pinned study) and the user's win.
    defaults = [] if threads_per_run is None else [f"++gdpo.local.num_threads={threads_per_run}"]
    planned = []
    for spec in sorted(specs, key=lambda spec: spec.seed):  # stable: the experiment's order within a seed
        if spec.run_id not in chosen:
            continue
        try:
            config = run_config.compose(spec.task, spec.model, spec.algo, cluster=spec.cluster, seed=spec.seed,
                                        experiment=experiment, overrides=(*defaults, *spec.overrides, *extra))
            if config["gdpo"]["engine"] != "local":
                raise UserError(f"gdpo.engine={config['gdpo']['engine']!r}; this command runs the local engine only"
                                 " (use `gdpo-nemo sweep` for NeMo RL runs)")
            run_id = RunId.from_config(config)
            run = LocalRun(run_id.name, out / "configs" / f"{run_id.name}.yaml", out / "runs" / run_id.name,
                           out / "logs" / f"{run_id.name}.log")
            # Paths relative to DIR, where the runs run: the folder can move and its files
            # name no machine's paths.
            place_run(config, run_id, run.run_dir.relative_to(out))
            resolve_and_check(config)  # the local engine's own check, before anything starts
        except (run_config.ConfigError, ValueError) as err:
            raise UserError(f"run {spec.run_id.name}: {err}") from None
        planned.append((run, run_config.dump(config)))
    for run, text in planned:  # written only once every run checked out
        if not (rundir.config_path(run.run_dir).is_file() and run.config_path.is_file()):
            run.config_path.parent.mkdir(parents=True, exist_ok=True)  # a started run keeps its config (resume)
            run.config_path.write_text(text)
    return [run for run, _ in planned]


def prepare_shared(config_paths, log=print) -> None:
    """Convert the embedded model and train each distinct warm-start of these run configs,
    once each (the runs then find them in the cache). First every run's data is checked
    (`prompts.load_examples`): a run that could not start (too few held-out problems, a
    missing data file) is a ValueError before any warm start is spent."""
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.models import is_builtin, load_policy
    from gdpo_nemo.engines.local.prompts import load_examples
    from gdpo_nemo.engines.local.warm_start import warm_start_checkpoint, warm_start_key

    configs = [load_run_config(path)[0] for path in config_paths]
    for path, config in zip(config_paths, configs):
        try:
            load_examples(config)
        except ValueError as err:
            raise UserError(f"{path}: {err}") from None
    seen = set()
    for config in configs:
        model = config["policy"]["model_name"]
        if config["gdpo"]["local"]["warm_start"]["enabled"]:
            key = warm_start_key(config)
            if key not in seen:
                seen.add(key)
                warm_start_checkpoint(config, log=log)
        elif is_builtin(model) and model not in seen:
            seen.add(model)
            load_policy(model, seed=config["grpo"]["seed"], log=log)  # converts once, then cached


class _Children:
    """The processes run_all started; any still running when run_all leaves (an exception, a
    SIGTERM turned into SystemExit by the command, Ctrl-C) get SIGTERM, then SIGKILL after
    30 s: no run goes on writing after its runner is gone (a rerun resumes it)."""

    def __init__(self):
        self.processes: list[subprocess.Popen] = []

    def start(self, *args, **kwargs) -> subprocess.Popen:
        process = subprocess.Popen(*args, **kwargs)
        self.processes.append(process)
        return process

    def __enter__(self) -> "_Children":
        return self

    def __exit__(self, *exc) -> None:
        alive = [p for p in self.processes if p.poll() is None]
        for process in alive:
            process.terminate()
        for process in alive:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def shared_groups(config_paths) -> dict[str, list[Path]]:
    """The run configs grouped by what they share before they start: the warm-start's key,
    else the model's name."""
    from gdpo_nemo.engines.local.config import load_run_config
    from gdpo_nemo.engines.local.warm_start import warm_start_key

    groups: dict[str, list[Path]] = {}
    for path in config_paths:
        config, _ = load_run_config(path)
        warm = config["gdpo"]["local"]["warm_start"]["enabled"]
        groups.setdefault(warm_start_key(config) if warm else config["policy"]["model_name"], []).append(Path(path))
    return groups


def _relative(path: Path, out: Path) -> str:
    """`path` as the runs' processes (started in `out`) name it: relative inside `out`."""
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


def run_all(runs: list[LocalRun], jobs: int, *, out: Path, python: str = sys.executable, log=print,
            cache: Path | None = None, on_poll=None) -> list[LocalRun]:
    """Run the unfinished runs, at most `jobs` processes at a time, in `out` (the folder their
    configs' relative paths start from); returns the failed ones.

    Every process runs this checkout's code (its root first on PYTHONPATH) and caches under
    ``$GDPO_NEMO_CACHE``, else `cache`, else `out`/.cache: a study makes its own converted model
    and warm starts, whatever another cache holds. `on_poll()`, when given, is called about
    twice a second while runs are running (the quickstart's progress bars)."""
    pending = [run for run in runs if not run.finished]
    for run in runs:
        if run.finished:
            log(f"done already: {run.name}")
    if not pending:
        return []
    env = dict(os.environ)
    env.setdefault("GDPO_NEMO_CACHE", str(cache or out / ".cache"))
    # the checkout whose code every run of this command runs, first on the runs' PYTHONPATH
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # The distinct warm-starts are made before any run starts, `jobs` processes at a time
    # (the runs that share one go to the same process).
    log(f"preparing the shared model files and warm-starts of {len(pending)} run(s)")
    shares: list[list[str]] = [[] for _ in range(jobs)]
    for index, group in enumerate(shared_groups([run.config_path for run in pending]).values()):
        shares[index % jobs] += [_relative(path, out) for path in group]
    with _Children() as children:
        preparing = [children.start([python, "-m", WORKER_MODULE, "prepare", *share], cwd=out, env=env)
                     for share in shares if share]
        codes = [process.wait() for process in preparing]
        if codes.count(0) != len(codes):
            log(f"preparation failed (exit {', '.join(map(str, codes))}; a negative one is the signal that killed it,"
                " -9 often the out-of-memory killer; its output is above); no run started")
            return pending
        # Runs side by side on one GPU: let each process's allocator give back what it frees.
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        running: dict = {}
        failed, finished = [], 0
        queue = list(pending)
        while queue or running:
            while queue and len(running) < jobs:
                run = queue.pop(0)
                run.log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(run.log_path, "ab") as output:
                    command = [python, "-m", WORKER_MODULE, "train", _relative(run.config_path, out),
                               _relative(run.run_dir, out)]
                    running[run] = (children.start(command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=out),
                                    time.monotonic())
                log(f"started {run.name} (log {shown(run.log_path)})")
            time.sleep(0.5)
            if on_poll is not None:
                on_poll()
            for run, (process, started) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[run]
                seconds = time.monotonic() - started
                if process.returncode == 0 and run.finished:
                    finished += 1
                    log(f"finished {run.name} in {seconds:.0f} s ({finished}/{len(pending)})")
                else:
                    failed.append(run)
                    log(f"FAILED {run.name} (exit {process.returncode}) after {seconds:.0f} s: see {shown(run.log_path)}")
        return failed
