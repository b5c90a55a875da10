"""The local engine's own process entry, for the runners that start runs side by side.

    python -m gdpo_nemo.engines.local.worker prepare CONFIG [CONFIG ...]
    python -m gdpo_nemo.engines.local.worker train CONFIG RUN_DIR

`prepare` makes what the configs' runs share before any of them starts (the converted
model, each distinct warm-start: `parallel.prepare_shared`); `train` runs one config into its
run dir, resuming from its newest checkpoint (a finished run stays as it is). Started by
`parallel.run_all` (the study runner, the quickstart), each in a process of its own with its
output going to a log; users type `gdpo-nemo train` instead. It lives in the engine, so the
engine never starts its own callers (`gdpo_nemo.commands`) by name.

Exit status: 0 done; 1 the work failed (one line on stderr naming why); 2 a bad config or
call; 130 interrupted (a rerun of the runner resumes).
"""

from __future__ import annotations

import sys

USAGE = "usage: python -m gdpo_nemo.engines.local.worker {prepare CONFIG [CONFIG ...] | train CONFIG RUN_DIR}"


def main(argv: list[str] | None = None) -> int:
    """Run `prepare` or `train` (module docstring); the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("prepare", "train") or (args[0] == "train" and len(args) != 3) or len(args) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    from pathlib import Path

    from gdpo_nemo.runs import cpu_pins

    try:
        cpu_pins.pin()  # before torch's first kernel (the runner's environment already asks for it)
        if args[0] == "prepare":
            from gdpo_nemo.engines.local.parallel import prepare_shared

            prepare_shared(args[1:])
            return 0
        from gdpo_nemo.engines.local.config import load_run_config
        from gdpo_nemo.engines.local.trainer import train

        config, note = load_run_config(args[1])
        result = train(config, Path(args[2]), resume=True, ignored_note=note)
        print(f"finished step {result.steps} in {result.wall_time_s:.0f} s; run dir {result.run_dir}")
        return 0
    except KeyboardInterrupt:
        print("interrupted; the runner's command, run again, resumes from the last checkpoint", file=sys.stderr)
        return 130
    except ValueError as err:  # a config the engine refuses (ConfigError is one)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
