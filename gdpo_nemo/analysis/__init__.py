"""Analysis layer: logs of runs -> tidy frame -> the paper's tables and figures.

    from gdpo_nemo.analysis import load_source, load_paper_values, build_report
    dataset = load_source("runs/")                  # or "wandb:ENTITY/PROJECT"
    dataset.metrics                                  # run_id, experiment, task, model, algo, seed, step, metric, value
    build_report(dataset, "paper_figures/", load_paper_values())

Modules: `frame` (tidy frame, validation), `sources` (run dirs, NeMo RL logs), `tfevents`,
`wandb_offline`, `wandb_api`, `evals` (eval files, BFCL scores), `load` (dispatch and
parquet cache), `stats` (t intervals, paired tests), `paper` (paper_values.yaml), `tables`, `render`
(Markdown/LaTeX), `figures`, `build` (the report folder). See docs/analysis.md.
"""

from __future__ import annotations

_EXPORTS = {
    "Dataset": "gdpo_nemo.analysis.frame",
    "load_source": "gdpo_nemo.analysis.load",
    "load_paper_values": "gdpo_nemo.analysis.paper",
    "build_report": "gdpo_nemo.analysis.build",
    "compute_table": "gdpo_nemo.analysis.tables",
    "TABLES_BY_KEY": "gdpo_nemo.analysis.tables",
    "training_summary": "gdpo_nemo.analysis.tables",
    "to_markdown": "gdpo_nemo.analysis.render",
    "to_latex": "gdpo_nemo.analysis.render",
    "plot_reward_curves": "gdpo_nemo.analysis.figures",
    "plot_diagnostics": "gdpo_nemo.analysis.figures",
    "plot_mechanism": "gdpo_nemo.analysis.figures",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # Lazy: `import gdpo_nemo.analysis` must not pull in pandas or matplotlib by itself.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gdpo_nemo.analysis' has no attribute {name!r}")
