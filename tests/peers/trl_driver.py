"""TRL's own GRPOTrainer computing advantages for the cases of tests/test_peer_conformance.py.

Run in .venv-peers (scripts/setup_peers.sh):
    python tests/peers/trl_driver.py cases.json results.json

TRL computes advantages inside GRPOTrainer._generate_and_score_completions (no helper of its
own to call): this driver builds a real GRPOTrainer per case on a tiny randomly initialized
Llama and a word-level tokenizer made here (no hub), with one reward function per component
that returns the case's values (None for NaN) for the rows it is asked about, and calls that
method on the case's batch: prompts in consecutive blocks of G, as TRL's sampler lays them
out. The completions the model generates are ignored by the rewards. TRL turns rewards into
float32 inside _calculate_rewards, so there is no float64 run ("float64": null).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_io import read_cases, write_results  # noqa: E402

# Tiny tensors: one intra-op thread is far faster than two (thread start-up per op).
torch.set_num_threads(1)

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<pad>", "<eos>", "a", "b", "c", "d"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="a"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return LlamaForCausalLM(config), tokenizer


def reward_function(case: dict, k: int):
    def reward(completions, row, **kwargs):
        values = [case["rewards"][r][k] for r in row]
        return [None if math.isnan(v) else v for v in values]

    reward.__name__ = case["names"][k]
    return reward


def trainer_for(case: dict, model, tokenizer, out_dir: str):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    size = len(case["group_ids"]) // len(set(case["group_ids"]))
    args = GRPOConfig(
        output_dir=out_dir, num_generations=size, per_device_train_batch_size=size, max_completion_length=1,
        beta=0.0, report_to="none", use_cpu=True, bf16=False, save_strategy="no", disable_tqdm=True, seed=0,
        scale_rewards=case["options"]["scale_rewards"],
        multi_objective_aggregation=case["options"]["multi_objective_aggregation"],
        reward_weights=case["weights"],
    )
    dataset = Dataset.from_dict({"prompt": ["a b"], "row": [0]})
    funcs = [reward_function(case, k) for k in range(len(case["names"]))]
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    trainer.model.train()
    return trainer


def run(case: dict, model, tokenizer, out_dir: str) -> list[float]:
    ids = case["group_ids"]
    if any(ids[i] != ids[i - 1] and ids[i] in ids[:i] for i in range(1, len(ids))):
        raise ValueError(f"case {case['id']}: TRL needs each group's samples consecutive")
    trainer = trainer_for(case, model, tokenizer, out_dir)
    inputs = [{"prompt": "a b", "row": b} for b in range(len(ids))]
    with torch.no_grad():
        out = trainer._generate_and_score_completions(inputs)
    return out["advantages"].tolist()


def main() -> None:
    model, tokenizer = tiny_model_and_tokenizer()
    results = {}
    with tempfile.TemporaryDirectory() as out_dir:
        for case in read_cases():
            results[case["id"]] = {"float32": run(case, model, tokenizer, out_dir), "float64": None}
    write_results(results)


if __name__ == "__main__":
    main()
