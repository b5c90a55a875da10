"""The commands: one module per `gdpo-nemo` subcommand, plus the `python -m` entry points
(`local_parallel`, `nemo_run`). Only these, `gdpo_nemo.cli`, `evaluation/bfcl_worker.py` (a
program started by its path in bfcl-eval's own venv, where gdpo_nemo is not importable) and
the processes the engines start themselves (`engines/local/worker.py`: a local run beside
others; `engines/nemo/config_check.py`: NeMo RL's config check in NeMo RL's Python) have a
`__main__` block; the engines, sweep and analysis they call never import this package, nor
start it by name.

A command module holds its flags and the call into the module that owns the work, nothing
else: `add_arguments(parser)` (cheap: no torch import, so `--help` stays fast) and
`run(args) -> int` (the exit code). `args` holds what every command shares: the KEY=VALUE
parser and the error printer with its exit codes. `gdpo_nemo.cli` maps names to modules.
"""
