"""The local engine: GRPO / GDPO training in one process on torch + transformers.

Reads the same run config as NeMo RL (plus the `gdpo` block) and writes the same run dir
and metric names, so analysis treats local and cluster runs alike. Modules:

- `config`: load YAML + overrides, check every key against NeMo RL's schema
- `models`: `policy.model_name` -> model and tokenizer (builtin:smollm2-135m, builtin:tiny, paths)
- `warm_start`: the cached supervised warm-start on task demonstrations
- `prompts`: the task's prompts tokenized once, served in a seeded order
- `generation`: batched KV-cached sampling of G completions per prompt
- `loss`: NeMo RL's clipped policy-gradient loss with k3 KL
- `trainer`: the training loop (sample, score, advantages, ratio, clip, step)
- `checkpoint`: save / resume
- `quickstart`: the two runs of `gdpo-nemo quickstart` (the commands `gdpo-nemo train` and
  `quickstart` are gdpo_nemo.commands.train and .quickstart)
- `parallel`: runs side by side on this machine, each in a process of its own (an
  experiment's: `python -m gdpo_nemo.commands.local_parallel`; the quickstart's two arms)
- `worker`: that process's entry (`python -m gdpo_nemo.engines.local.worker prepare|train`)

Nothing here is imported by `gdpo_nemo` itself; torch loads only when a run starts.
"""
