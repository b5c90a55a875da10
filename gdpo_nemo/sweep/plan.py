"""From an experiment name to the planned runs of a sweep: configs and scripts, in memory.

Planning composes and validates every run config and renders every script before
anything is written, so bad input (unknown experiment, a filter matching nothing, a
config the profile cannot run) fails with nothing on disk and nothing submitted.

Sweep dir layout (default sweeps/<experiment>/):

    manifest.json          runs, their jobs and states (gdpo_nemo.sweep.manifest)
    configs/<run>.yaml     resolved run config of each run
    jobs/<run>.sbatch      sbatch script of each run
    logs/<run>-<jobid>.out Slurm output of each job
    runs/<run>/            run dir (config.yaml, metrics.jsonl, checkpoints/, DONE)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gdpo_nemo.runs import rundir
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep.errors import SweepError
from gdpo_nemo.sweep.profiles import ClusterProfile
from gdpo_nemo.sweep.render import render_script
from gdpo_nemo.config.engines import ENGINES

# What `--only KEY=VALUE` may filter on (gdpo-nemo sweep and engines.local.parallel).
FILTER_KEYS = ("run", "task", "model", "algo", "seed")


@dataclass(frozen=True)
class SweepLayout:
    """Where a sweep keeps its files; every path is absolute."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    def config_path(self, name: str) -> Path:
        return self.root / "configs" / f"{name}.yaml"

    def script_path(self, name: str) -> Path:
        return self.root / "jobs" / f"{name}.sbatch"

    def log_path(self, name: str) -> Path:
        """Slurm's --output pattern: one file per job id (%j)."""
        return self.root / "logs" / f"{name}-%j.out"

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / name


@dataclass(frozen=True)
class RunPlan:
    """One run of the sweep, rendered: its id, engine, where its files go, and their text."""

    run_id: RunId
    engine: str
    run_dir: Path
    config_path: Path
    script_path: Path
    config_text: str
    script: str

    @property
    def name(self) -> str:
        return self.run_id.name


def _fields(run_id: RunId) -> dict[str, str]:
    return {
        "run": run_id.name,
        "task": run_id.task,
        "model": run_id.model,
        "algo": run_id.algo,
        "seed": str(run_id.seed),
    }


def select(run_ids: list[RunId], filters: dict[str, set[str]]) -> list[RunId]:
    """The run ids matching every filter key (a key matches if any of its values does)."""
    chosen = [r for r in run_ids if all(_fields(r)[k] in values for k, values in filters.items())]
    if run_ids and not chosen:
        present = {k: sorted({_fields(r)[k] for r in run_ids}) for k in filters}
        raise SweepError(
            "--only matches no run of the experiment; values present: "
            + "; ".join(f"{k} in {', '.join(v)}" for k, v in present.items())
        )
    return chosen


def place_run(config: dict, run_id: RunId, run_dir: Path) -> None:
    """Point a composed run config at its run dir (``logger.log_dir``, on every engine) and name
    its W&B run and group after the run id."""
    config["logger"]["log_dir"] = str(run_dir)
    wandb = config["logger"].setdefault("wandb", {})
    # NeMo RL passes logger.wandb to wandb.init as keyword arguments, group included
    wandb["name"], wandb["group"] = run_id.name, run_id.group
    config["checkpointing"]["checkpoint_dir"] = str(rundir.checkpoints_dir(run_dir))


def plan_sweep(
    experiment: str,
    profile: ClusterProfile,
    sweep_dir: Path,
    filters: dict[str, set[str]] | None = None,
    engine: str | None = None,
    workdir: Path | None = None,
) -> list[RunPlan]:
    """Compose, check and render every selected run of `experiment`; writes nothing.

    filters: {key in FILTER_KEYS: accepted values} (`--only`, parsed by the command), every
    run when None.
    engine: "nemo" or "local" for every run (the override gdpo.engine=<engine>), or None
    for the engine of each run's cluster config (configs/cluster/). workdir: the jobs'
    working directory (default: the current one, against which relative paths in the
    configs were composed). Raises SweepError naming the experiment, filter or run at fault.
    """
    from gdpo_nemo import config as run_config

    try:
        specs = run_config.load_experiment(experiment)  # names the known ones if unknown
    except run_config.ConfigError as err:
        raise SweepError(str(err)) from None
    by_id = {spec.run_id: spec for spec in specs}
    layout = SweepLayout(sweep_dir.resolve())
    workdir = (workdir or Path.cwd()).resolve()
    for what, path in (("--sweep-dir", layout.root), ("the current directory", workdir)):
        if any(ch.isspace() for ch in str(path)):
            raise SweepError(f"{what} {str(path)!r} contains whitespace, which #SBATCH --output/--chdir lines cannot hold")
    plans = []
    for run_id in select(list(by_id), filters or {}):
        spec = by_id[run_id]
        run_dir = layout.run_dir(run_id.name)
        where = f"run {run_id.name} on profile {profile.name!r}"
        try:
            config = run_config.compose(
                spec.task,
                spec.model,
                spec.algo,
                cluster=spec.cluster,
                seed=spec.seed,
                experiment=experiment,
                overrides=(*spec.overrides, *([f"gdpo.engine={engine}"] if engine else [])),
            )
            place_run(config, run_id, run_dir)
            run_config.validate(config)
            run_engine = config["gdpo"]["engine"]
            job_engine = ENGINES[run_engine]
            refused = job_engine.start_problems(config)
            if refused:
                raise run_config.ConfigError(refused)
            nodes = job_engine.job_nodes(profile, config)
            if job_engine.cluster_checked(profile):
                run_config.check_cluster_consistency(config, nodes, profile.gpus_per_node)
        except run_config.ConfigError as err:
            raise SweepError(f"{where}: {err}") from None
        profile.check_engine(run_engine)
        if RunId.from_config(config) != run_id:
            raise SweepError(
                f"{where}: its composed config names itself {RunId.from_config(config).name}"
                " (gdpo.experiment/task/model_tag/algo, grpo.seed); the experiment and config composer disagree"
            )
        script = render_script(
            job_engine,
            run_id=run_id,
            profile=profile,
            run_dir=run_dir,
            config_path=layout.config_path(run_id.name),
            log_path=layout.log_path(run_id.name),
            sweep_dir=layout.root,
            workdir=workdir,
            nodes=nodes,
            gpus_per_node=int(config["cluster"]["gpus_per_node"]),
            overrides=tuple(spec.overrides),
        )
        plans.append(
            RunPlan(
                run_id=run_id,
                engine=run_engine,
                run_dir=run_dir,
                config_path=layout.config_path(run_id.name),
                script_path=layout.script_path(run_id.name),
                config_text=run_config.dump(config),
                script=script,
            )
        )
    return plans


def write_plans(plans: list[RunPlan], layout: SweepLayout, started: set[str] = frozenset()) -> list[str]:
    """Write each run's config and script where their text changed, and create the log dir.

    started: names of runs already submitted once. Their config file is kept as it is, so
    a resubmitted run resumes with the config it started with even if the experiment or
    the composer changed since; the names whose new config differs are returned.
    Slurm does not create the directory of --output (a job whose log cannot be opened
    fails), hence the log dir.
    """
    kept = []
    for plan in plans:
        for path, text in ((plan.config_path, plan.config_text), (plan.script_path, plan.script)):
            if path.is_file() and path.read_text() == text:
                continue
            if path == plan.config_path and plan.name in started and path.is_file():
                kept.append(plan.name)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        plan.script_path.chmod(0o755)
    (layout.root / "logs").mkdir(parents=True, exist_ok=True)
    return kept
