"""The commands: one module per `gdpo-nemo` subcommand, plus the `python -m` entry points
(`local_parallel`, `nemo_run`, and `nemo_validation`, which NeMo RL's Python runs). Only
these, `gdpo_nemo.cli` and `evaluation/bfcl_worker.py` (a program started by its path in
bfcl-eval's own venv, where gdpo_nemo is not importable) have a `__main__` block; the
engines, sweep and analysis they call never import this package.

A command module holds its flags and the call into the module that owns the work, nothing
else: `add_arguments(parser)` (cheap: no torch import, so `--help` stays fast) and
`run(args) -> int` (the exit code). `args` holds what every command shares: the KEY=VALUE
parser and the error printer with its exit codes. `gdpo_nemo.cli` maps names to modules.
"""
