"""The NeMo RL plugin: gdpo_nemo's rewards, data, estimators and metrics inside NeMo RL's GRPO.

This package is the only code of gdpo_nemo that imports ``nemo_rl``, and it does so lazily:
importing ``gdpo_nemo.engines.nemo`` (or any module below except ``plugin`` and ``run``
when they are *called*) needs neither NeMo RL nor a GPU.

Two layers:

- pure Python, tested on the CPU without NeMo RL:
  ``scoring`` (environment scoring over gdpo_nemo.rewards -> ``{"reward/<name>": [...]}``),
  ``environment`` (the Ray actor shell, runnable on a plain local Ray),
  ``estimators`` (NeMo RL's estimator call mapped onto ``gdpo_nemo.estimators``),
  ``metrics`` (per-component rewards and collapse diagnostics, the metrics.jsonl sink),
  ``data`` (task rows and the data processors building NeMo RL's DatumSpec dicts);
- the adapter that touches NeMo RL: ``datasets`` (a dataset class NeMo RL loads by dotted
  path), ``plugin`` (register_env, the actor-environment registry, register_processor, and
  wrapping ``_create_advantage_estimator``, ``run_multi_turn_rollout`` and ``validate``) and
  ``run`` (what ``python -m gdpo_nemo.commands.nemo_run --config CFG.yaml [overrides]`` runs).
"""
