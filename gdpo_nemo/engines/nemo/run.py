"""What ``python -m gdpo_nemo.commands.nemo_run --config CFG.yaml [overrides]`` runs (that
module holds the flags, the error lines and the exit codes):

1. Reads the run config as NeMo RL does (``defaults:`` inheritance, ``_override_``), applies
   Hydra-grammar overrides and validates it (gdpo_nemo.config.load_config_file):
   a bad key path stops here, before Ray or a GPU is touched. ``--dry-run`` stops after
   printing the resolved config.
2. Writes the resolved config to ``<logger.log_dir>/config.yaml`` (the run dir) and starts
   ``metrics.jsonl`` there (kept up to the latest checkpoint when NeMo RL resumes).
3. Registers our environments, processors and hooks (``plugin.register``).
4. Runs NeMo RL's own GRPO entry script ``examples/run_grpo.py`` in this process, with the
   resolved config, so NeMo RL's setup and trainer run unchanged.
5. Writes ``DONE`` in the run dir when training returned without a timeout stop.

Where ``run_grpo.py`` is looked for: ``--run-grpo PATH``, ``$GDPO_NEMO_RUN_GRPO``,
``./examples/run_grpo.py`` (the Slurm job runs from the NeMo RL checkout), and next to the
installed ``nemo_rl`` package.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.config import ConfigError, load_config_file
from gdpo_nemo.engines.nemo.signals import exit_on_sigterm
from gdpo_nemo.runs import lifecycle, provenance, rundir

__all__ = ["find_run_grpo", "launch", "load_nemo_config", "prepare_run_dir"]

RUN_GRPO_ENV = "GDPO_NEMO_RUN_GRPO"


# Libraries of the NeMo RL environment that change a run's numbers, beside provenance.LIBRARIES.
NEMO_LIBRARIES = ("nemo_rl", "vllm", "ray", "megatron-core")


def find_run_grpo(explicit: str | None = None) -> Path:
    """The path of NeMo RL's ``examples/run_grpo.py`` (see the module docstring for the
    order); ValueError listing every place looked at."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get(RUN_GRPO_ENV):
        candidates.append(Path(os.environ[RUN_GRPO_ENV]))
    candidates.append(Path.cwd() / "examples" / "run_grpo.py")
    try:
        import importlib.util

        spec = importlib.util.find_spec("nemo_rl")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        package_dir = Path(list(spec.submodule_search_locations)[0])
        candidates.append(package_dir.parent / "examples" / "run_grpo.py")
    for path in candidates:
        if path.is_file():
            return path.resolve()
    if explicit:
        raise UserError(f"--run-grpo {explicit}: no such file")
    looked = ", ".join(str(p) for p in candidates)
    raise UserError(
        f"NeMo RL's examples/run_grpo.py not found (looked at {looked}); run from the NeMo RL checkout,"
        f" set {RUN_GRPO_ENV}, or pass --run-grpo"
    )


def nemo_rl_libraries() -> dict:
    """`provenance.library_versions` of NeMo RL's stack; NeMo RL itself by its own
    ``__version__`` and source commit when it runs from a source tree that is a git checkout of
    its own (not installed as a distribution: a container's /opt/nemo-rl, a checkout on
    PYTHONPATH); an unpacked source inside another checkout gets neither that checkout's sha
    nor its commit."""
    libraries = provenance.library_versions((*provenance.LIBRARIES, *NEMO_LIBRARIES))
    try:
        import nemo_rl
    except ImportError:
        return libraries
    source = Path(nemo_rl.__file__).resolve().parents[1]
    # NeMo RL appends "+<short sha>" of whatever git repository holds its source to its
    # __version__; a source tree that is no repository of its own (an archive unpacked inside
    # another checkout: this project's .nemo-rl/) would name that checkout's commit as NeMo RL's.
    own_repository = provenance.git_root(source) == source
    if libraries.get("nemo_rl") is None:
        version = str(getattr(nemo_rl, "__version__", None) or "source")
        libraries["nemo_rl"] = version if own_repository else version.split("+", 1)[0]
    if own_repository:
        commit = provenance.code_version(source).get("commit")
        if commit:
            libraries["nemo_rl_commit"] = commit
    return libraries


def prepare_run_dir(config: dict, *, generation_backend: str | None = None) -> Path:
    """Start or continue the run dir (logger.log_dir) by the one lifecycle (runs/lifecycle.py):
    config.yaml, no stale DONE, and this invocation's provenance: code, libraries, the
    precision the config asks for, and the generation backend (the config's, unless
    `generation_backend` names what really generates: the CPU path's policy); the weights are
    NeMo RL's to load (on its workers), so their digest is not taken, only their name. NeMo RL
    resumes on its own from ``checkpointing.checkpoint_dir``, so nothing already in the run
    dir is refused."""
    from gdpo_nemo.engines.nemo.metrics import latest_checkpoint_step

    run_dir = Path(config["logger"]["log_dir"])
    lifecycle.start_run(run_dir, config)
    policy = config["policy"]
    lifecycle.record_start(
        run_dir,
        numbers={"engine": "nemo", "precision": policy.get("precision"),
                 "generation_backend": generation_backend or (policy.get("generation") or {}).get("backend")},
        start_weights={"source": policy["model_name"], "digest": None},
        resumed_from=latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"]),
        libraries=nemo_rl_libraries())
    return run_dir


def end_job(writer, run_dir: Path, completed: bool, **details) -> None:
    """The end of a job that ran NeMo RL's trainer (GPU entry or CPU path), from its `finally`:
    metrics.jsonl closed (a step cut short is not a step); when the job did not complete (an
    error, SIGTERM), its W&B run ended failed and its run dir marked FAILED with the exception
    being raised and `details`."""
    from gdpo_nemo.runs.tracking import fail_external_wandb

    writer.close(complete=completed)
    if not completed:
        fail_external_wandb()
        lifecycle.fail_run(run_dir, sys.exc_info()[1], **details)


def launch(config: dict, script: Path) -> None:
    """Steps 2-5 of the module docstring: run dir, metrics sink, plugin registration, NeMo
    RL's ``run_grpo.py`` in this process, ``DONE`` unless stopped by a timeout."""
    from gdpo_nemo.engines.nemo import plugin
    from gdpo_nemo.engines.nemo.metrics import StepMetricsWriter, latest_checkpoint_step

    from gdpo_nemo.runs.tracking import settle_external_wandb

    run_dir = prepare_run_dir(config)
    # NeMo RL's own W&B logger: offline within seconds when its server does not answer.
    settle_external_wandb(bool(config["logger"].get("wandb_enabled")), config["logger"]["log_dir"])
    writer = StepMetricsWriter(run_dir, resume_step=latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"]))
    state = plugin.register(config, writer=writer)
    saved_argv = sys.argv
    sys.argv = [str(script), "--config", str(rundir.config_path(run_dir))]
    completed = False
    try:
        with exit_on_sigterm():
            runpy.run_path(str(script), run_name="__main__")
        completed = True
    finally:
        sys.argv = saved_argv
        end_job(writer, run_dir, completed)
    if not state.timed_out:
        lifecycle.finish_run(run_dir, "done\n")


def load_nemo_config(path, overrides=()) -> dict:
    """The run config at `path` with Hydra-grammar `overrides`, validated
    (gdpo_nemo.config.load_config_file); ConfigError naming the key at fault, or when the
    config is not a ``gdpo.engine: nemo`` one."""
    return load_config_file(path, overrides, engine="nemo", wrong_engine=(
        "this entry point runs gdpo.engine 'nemo' configs (run local-engine configs with `gdpo-nemo train --config"
        " ...`; compose a NeMo RL one with `gdpo-nemo config show task=... model=... algo=... cluster=nemo_1n1g -o"
        " RUN.yaml`)"))

