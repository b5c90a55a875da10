"""The commands: one module per `gdpo-nemo` subcommand, plus the front ends of the
`python -m` entry points.

A command module holds its flags and the call into the module that owns the work, nothing
else: `add_arguments(parser)` (cheap: no torch import, so `--help` stays fast) and
`run(args) -> int` (the exit code). `args` holds what every command shares: the KEY=VALUE
parser and the error printer with its exit codes. `gdpo_nemo.cli` maps names to modules.
"""
