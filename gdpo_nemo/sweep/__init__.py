"""`gdpo-nemo sweep`: render, submit, watch and cancel the Slurm jobs of a paper experiment.

Modules: profiles (cluster profiles, slurm/profiles/*.yaml), plan (experiment -> run
configs and scripts), render (sbatch scripts from slurm/templates/), manifest (the sweep
manifest and a run's state machine), slurm (sbatch/squeue/sacct/scancel), cli (the command).
"""

from gdpo_nemo.sweep.cli import add_arguments, run

__all__ = ["add_arguments", "run"]
