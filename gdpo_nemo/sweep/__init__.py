"""Render, submit, watch and cancel the Slurm jobs of a paper experiment (`gdpo-nemo sweep`,
whose flags are gdpo_nemo.commands.sweep).

Modules: profiles (cluster profiles, slurm/profiles/*.yaml), plan (experiment -> run
configs and scripts), render (sbatch scripts from slurm/templates/), manifest (the sweep
manifest and a run's state machine), slurm (sbatch/squeue/sacct/scancel), actions (what
each mode of the command does).
"""
