"""Entry point: ``python -m gdpo_nemo.engines.nemo.run --config CFG.yaml [overrides]``.

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

import argparse
import os
import runpy
import sys
from pathlib import Path

from gdpo_nemo import rundir
from gdpo_nemo.config import ConfigError, dump, load_config_file

__all__ = ["find_run_grpo", "main", "prepare_run_dir"]

RUN_GRPO_ENV = "GDPO_NEMO_RUN_GRPO"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gdpo_nemo.engines.nemo.run",
        description="Run NeMo RL's GRPO on a gdpo_nemo run config (GDPO estimators, multi-reward"
        " environments, per-component metrics). Extra arguments are Hydra overrides (key=value, +key=value).",
    )
    parser.add_argument("--config", required=True, help="run config YAML (gdpo-nemo config show ... -o FILE)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the resolved config; start nothing")
    parser.add_argument("--run-grpo", metavar="PATH", help=f"NeMo RL's examples/run_grpo.py (default: ${RUN_GRPO_ENV}, ./examples, next to nemo_rl)")
    return parser


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
        raise ValueError(f"--run-grpo {explicit}: no such file")
    looked = ", ".join(str(p) for p in candidates)
    raise ValueError(
        f"NeMo RL's examples/run_grpo.py not found (looked at {looked}); run from the NeMo RL checkout,"
        f" set {RUN_GRPO_ENV}, or pass --run-grpo"
    )


def prepare_run_dir(config: dict) -> Path:
    """Create the run dir (logger.log_dir), write config.yaml there, drop a stale DONE."""
    run_dir = Path(config["logger"]["log_dir"])
    rundir.write_config(run_dir, config)
    rundir.clear_done(run_dir)
    return run_dir


def _launch(config: dict, script: Path) -> None:
    from gdpo_nemo.engines.nemo import plugin
    from gdpo_nemo.engines.nemo.metrics import StepMetricsWriter, latest_checkpoint_step

    run_dir = prepare_run_dir(config)
    writer = StepMetricsWriter(run_dir, resume_step=latest_checkpoint_step(config["checkpointing"]["checkpoint_dir"]))
    state = plugin.register(config, writer=writer)
    saved_argv = sys.argv
    sys.argv = [str(script), "--config", str(rundir.config_path(run_dir))]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved_argv
        writer.close()
    if not state.timed_out:
        rundir.mark_done(run_dir, "done\n")


def main(argv: list[str] | None = None) -> int:
    """Validate, register, run NeMo RL's GRPO. Exit code 2 on a bad config."""
    args, overrides = _parser().parse_known_args(argv)
    unknown_flags = [o for o in overrides if o.startswith("-") and not o.startswith("~")]
    if unknown_flags:
        print(f"error: unknown option(s) {unknown_flags}; overrides are key=value", file=sys.stderr)
        return 2
    try:
        config = load_config_file(args.config, overrides)
        if config["gdpo"]["engine"] != "nemo":
            raise ConfigError(
                f"gdpo.engine: {config['gdpo']['engine']!r}; this entry point runs gdpo.engine 'nemo' configs"
                " (run local-engine configs with `gdpo-nemo train --config ...`, or pass gdpo.engine=nemo)"
            )
        if args.dry_run:
            sys.stdout.write(dump(config))
            return 0
        script = find_run_grpo(args.run_grpo)
    except ValueError as err:  # ConfigError included
        print(f"error: {err}", file=sys.stderr)
        return 2
    _launch(config, script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
