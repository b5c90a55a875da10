"""What the NeMo RL tier's tests share: small run configs, and the one stand-in allowed.

The stand-in is the generation backend: NeMo RL's vLLM generation needs a GPU, so
`scripted_generation` builds an implementation of NeMo RL's own ``GenerationInterface``
(its abstract class, so a missing method fails at construction) whose ``generate`` answers
each sample with a given text, in the ``GenerationOutputSpec`` shape NeMo RL's rollout reads.
Everything else the tests touch is NeMo RL's real code.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

from gdpo_nemo import config as cc

# (config group task option, model option) of each task's environment.
TASK_RUNS = {
    "toolcall": ("toolcall", "qwen2.5-1.5b-instruct"),
    "gsm8k": ("gsm8k", "qwen2.5-1.5b-instruct"),
    "math": ("math", "r1-distill-qwen-1.5b"),
    "code": ("code_3obj", "r1-distill-qwen-7b"),
}


# The math run that moves (the pin's and the release's matrix, the killed job): rank checkpoints
# by the length reward and keep the best one.
MATH_CHECKPOINTING = ("checkpointing.metric_name=val:reward/length", "checkpointing.keep_top_k=1")

# The matrix run (the pin's and the release's) whose policy worker is NeMo RL's Ray actor, a
# process of its own (the others' are made in the driver, gdpo_nemo.engines.nemo.cpu.driver_worker):
# the math run, which the killed and resumed job (its worker in the driver) must reproduce.
ACTOR_RUN = "math"


def small_config(task: str, tokenizer_dir: str, run_dir: Path, *, algo: str = "gdpo", rows: int = 2,
                 generations: int = 2, extra: tuple[str, ...] = ()) -> dict:
    """A composed nemo-engine run config of `task` sized for a CPU: offline data of `rows`
    prompts, `generations` answers each, the tiny byte-level tokenizer as policy tokenizer
    (a local folder: no hub), one node with one GPU (what NeMo RL will ask Ray for)."""
    option, model = TASK_RUNS[task]
    env = cc.ENV_NAMES[task]
    overrides = [
        "data.train.source=offline", "data.validation.source=offline",
        f"data.train.limit={rows}", f"data.validation.limit={rows}",
        f"policy.model_name={tokenizer_dir}", f"env.{env}.tokenizer={tokenizer_dir}", f"env.{env}.num_workers=1",
        f"grpo.num_prompts_per_step={rows}", f"grpo.num_generations_per_prompt={generations}",
        f"grpo.max_val_samples={rows}", f"grpo.val_batch_size={rows}", "grpo.max_num_steps=1",
        f"policy.train_global_batch_size={rows * generations}", "policy.train_micro_batch_size=1",
        "policy.max_total_sequence_length=2048", "policy.generation.max_new_tokens=256",
        "data.max_input_seq_length=1024", "data.shuffle=false", "logger.monitor_gpus=false",
        f"logger.log_dir={run_dir}", f"checkpointing.checkpoint_dir={run_dir / 'checkpoints'}",
        *extra,
    ]
    return cc.compose(option, model, algo, cluster="nemo_1n1g", seed=0, overrides=overrides)


def demonstrations(task: str, config: dict, count: int, split: str = "train") -> list[str]:
    """Correct answers to the first `count` offline rows of `split` (the task's own demonstrations)."""
    return [demo for _, demo in demonstrated_prompts(task, config, split)[:count]]


def demonstrated_prompts(task: str, config: dict, split: str = "train") -> list[tuple[str, str]]:
    """(the row's last prompt message, a correct answer) for each offline row of `split`,
    loaded as our TaskDataset loads them."""
    from gdpo_nemo.tasks import get_task

    block = config["data"]["train" if split == "train" else "validation"]
    spec = get_task(task, **dict(block.get("task_options") or {}))
    examples = spec.load(split, source="offline", limit=block["limit"], seed=block.get("seed", 0))
    rng = random.Random(0)
    return [(example.messages[-1]["content"], spec.demonstration(example, rng)) for example in examples]


def scripted_generation(tokenizer, answers):
    """A NeMo RL GenerationInterface answering sample i of each generate call with
    answers(i, prompt_text) (a callable) or answers[i % len(answers)] (a list)."""
    import torch

    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.models.generation.interfaces import GenerationInterface

    def generate(self, data, greedy=False):
        self.calls += 1
        input_ids, lengths = data["input_ids"], data["input_lengths"]
        outputs, generated = [], []
        for i in range(input_ids.shape[0]):
            prompt = input_ids[i, : int(lengths[i])]
            text = answers(i, tokenizer.decode(prompt)) if callable(answers) else answers[i % len(answers)]
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0].to(torch.long)
            ids = torch.cat([ids, torch.tensor([tokenizer.eos_token_id])])
            outputs.append(torch.cat([prompt, ids]))
            generated.append(len(ids))
        width = max(len(o) for o in outputs)
        output_ids = torch.full((len(outputs), width), tokenizer.pad_token_id, dtype=torch.long)
        for i, row in enumerate(outputs):
            output_ids[i, : len(row)] = row
        return BatchedDataDict(
            {
                "output_ids": output_ids,
                "generation_lengths": torch.tensor(generated),
                "unpadded_sequence_lengths": torch.tensor([len(o) for o in outputs]),
                "logprobs": torch.zeros(output_ids.shape, dtype=torch.float32),
                "truncated": torch.zeros(len(outputs), dtype=torch.bool),
            }
        )

    def idle(self, *args, **kwargs):
        return True

    def not_on_a_cpu(self, *args, **kwargs):
        raise AssertionError("the scripted generation has no weights to sync (a GPU-only path was reached)")

    namespace = {name: not_on_a_cpu for name in GenerationInterface.__abstractmethods__}
    namespace.update(generate=generate, prepare_for_generation=idle, finish_generation=idle, shutdown=idle,
                     calls=0, get_logger_metrics=lambda self: {}, clear_logger_metrics=idle,
                     snapshot_step_metrics=idle,
                     # no weights, so never stale: grpo_train syncs no policy weights into it
                     weight_synchronizer=SimpleNamespace(is_stale=False))
    cls = type("ScriptedGeneration", (GenerationInterface,), namespace)
    return cls()


# ---------------------------------------------------------------------------------------
# NeMo RL's grpo_train on the CPU (gdpo_nemo.engines.nemo.cpu)
# ---------------------------------------------------------------------------------------


def early_stopping_tiny(folder: Path, seed: int = 0, stop_bias: float = 0.3) -> Path:
    """builtin:tiny with two changes, saved as a HF folder: every token's embedding gets a
    constant 1.0 in hidden dimension 0 (the end-of-turn token 1.0 + `stop_bias`), and the
    output reads that dimension only. The residual stream is then dominated by dimension 0
    whatever the context, so every next token is uniform over the vocabulary except the
    end-of-turn token, about exp(`stop_bias` x sqrt(96)) times likelier: a stop chance of
    about 7% per token, in every context and every padding. Random builtin:tiny almost
    never stops (1 token in 259), so its length rewards are constant; this one's answers
    stop after 1 to 32+ tokens, so a length reward of limit 10 varies within groups and the
    advantages (and the weights) move.
    """
    import torch

    from gdpo_nemo.engines.local.models import build_tiny_model

    model, tokenizer = build_tiny_model(seed)
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        embedding = model.model.embed_tokens.weight  # tied to the output layer
        embedding[:, 0] = 1.0
        embedding[tokenizer.eos_token_id, 0] = 1.0 + stop_bias
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def cpu_config(task: str, algo: str, run_dir: Path, model_dir, *, steps: int = 2, prompts: int = 2, generations: int = 2,
               max_new_tokens: int = 32, val_period: int = 1, tiny: bool = True, compose: tuple[str, ...] = (),
               overrides: tuple[str, ...] = (), data: str = "offline") -> dict:
    """A composed nemo-engine run config of `task` x `algo`, cut down for the CPU by
    gdpo_nemo.engines.nemo.cpu.smoke exactly as `gdpo-nemo nemo-smoke` does it.
    `compose`: overrides given to the composer (they reach interpolated keys such as the
    environment's length limit); `overrides`: applied after the CPU changes."""
    from gdpo_nemo.engines.nemo.cpu import smoke

    option, model = TASK_RUNS[task]
    config = cc.compose(option, model, algo, cluster="nemo_1n1g", seed=0, overrides=list(compose))
    size = smoke.SmokeSize(steps=steps, prompts=prompts, generations=generations, max_new_tokens=max_new_tokens,
                           val_period=val_period)
    return smoke.cpu_config(config, model_dir=str(model_dir), run_dir=run_dir, size=size, data=data, tiny_model=tiny,
                            overrides=overrides).config


def nemo_rl_advantages(run_dir: Path, step: int) -> list[float]:
    """The advantages NeMo RL trained on at `step`, one per sample (its value on the
    sample's first loss token), from NeMo RL's own ``train_data_step<N>.jsonl``."""
    import json

    values = []
    for line in (Path(run_dir) / f"train_data_step{step}.jsonl").read_text().splitlines():
        row = json.loads(line)
        mask, advantages = row["token_loss_mask"], row["advantages"]
        if mask and isinstance(mask[0], list):  # NeMo RL writes each row as a batch of one
            mask, advantages = mask[0], advantages[0]
        first = next((i for i, m in enumerate(mask) if m), None)
        values.append(None if first is None else float(advantages[first]))
    return values


def actor_classes():
    """How many actors of each class this process's Ray has made (live or dead: GCS's actor
    table), as a Counter."""
    from collections import Counter

    from ray._private import state

    return Counter(actor["ActorClassName"] for actor in state.actors().values())
