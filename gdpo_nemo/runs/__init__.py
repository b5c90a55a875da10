"""A run on disk: its name, its folder and its metrics sink, the same on both engines.

Modules: run_id (`RunId`, the (experiment, task, model, algo, seed) name of a run: run dir,
W&B name and group, Slurm job name), rundir (the run-dir layout: every file and folder name
of a run dir and the one reader or writer of each), lifecycle (the one start, record and
finish of a run dir, for both engines), provenance (`provenance.json`: what made a run's
numbers), tracking (`Tracker`, the one metrics sink: ``metrics.jsonl`` always, W&B when
enabled, and the reader of W&B's offline files), metric_names (the one spelling of every metric key
the engines write and the analysis reads).

Nothing here imports torch or another part of gdpo_nemo: the engines, the sweep, the eval
command and the analysis all build on it.
"""
