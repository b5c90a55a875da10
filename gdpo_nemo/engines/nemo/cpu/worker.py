"""NeMo RL's DTensor policy worker (v2) on a CPU, with Hugging Face generation.

`CpuPolicyWorker` is what ``Policy(worker_extension_cls_fqn=WORKER_FQN)`` starts: a
subclass of NeMo RL's ``DTensorPolicyWorkerV2Impl`` (the hook NeMo RL offers for worker
subclasses). Training, logprobs, checkpoints, the reference model and the optimizer are
NeMo RL's own code, run under `device.on_cpu`. The one method added is `generate`: at the
pinned commit ``Policy.generate`` dispatches to a worker method of that name that the
DTensor workers no longer have (vLLM generates on a GPU), so here the worker's own model
generates with HF ``generate``. Generation and training share one set of weights: there
is nothing to refit.

Sampling is seeded from the run's seed and the batch's prompt tokens (not from a call
counter): the same prompts on the same weights give the same answers, so a run killed
after a checkpoint and resumed generates what the uninterrupted run generated.

NeMo RL's worker builder imports this module by name where it starts the worker: in the
driver, which makes the worker there (`CpuPolicyWorkerInDriver`, see
`gdpo_nemo.engines.nemo.cpu.driver_worker`), or, with ``GDPO_NEMO_CPU_WORKER=actor``, in the
worker's own Ray process (`CpuPolicyWorker`). Importing it installs the device patches in
that process.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import ray
import torch

from gdpo_nemo.engines.nemo.cpu import device
from gdpo_nemo.engines.nemo.cpu.cluster import SEED_ENV, THREADS_ENV
from gdpo_nemo.engines.nemo.cpu.driver_worker import ActorClassInDriver

device.install()  # before NeMo RL's worker modules bind torch.cuda / ray functions

from nemo_rl.distributed.batched_data_dict import BatchedDataDict  # noqa: E402
from nemo_rl.models.policy.workers.dtensor_policy_worker import unshard_fsdp2_model  # noqa: E402
from nemo_rl.models.policy.workers.dtensor_policy_worker_v2 import DTensorPolicyWorkerV2Impl  # noqa: E402

__all__ = ["CpuPolicyWorker", "CpuPolicyWorkerImpl", "CpuPolicyWorkerInDriver", "WORKER_FQN", "sampling_seed"]


def sampling_seed(run_seed: int, input_ids: torch.Tensor, input_lengths: torch.Tensor) -> int:
    """A 63-bit seed from the run's seed and the batch's prompts (each row's first
    `input_lengths[i]` tokens): equal prompts, equal seed, whatever came before."""
    digest = hashlib.sha256(str(int(run_seed)).encode())
    for row, length in zip(input_ids.tolist(), input_lengths.tolist()):
        digest.update(str(row[: int(length)]).encode())
    return int.from_bytes(digest.digest()[:8], "little") >> 1


class CpuPolicyWorkerImpl(DTensorPolicyWorkerV2Impl):
    """NeMo RL's v2 DTensor worker, every method run with CUDA mapped to the CPU, plus
    `generate`."""

    def __init__(self, *args, **kwargs):
        device.install()
        # One thread per worker: results do not depend on the machine's core count.
        torch.set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
        with device.CudaAsCpu():
            super().__init__(*args, **kwargs)

    def device_patches(self) -> list[str]:
        """The process-wide replacements `device.install` made in this worker."""
        return device.installed_patches()

    def weights_checksum(self) -> float:
        """Sum of |w| over every parameter (float64): tells whether training moved the weights."""
        with device.CudaAsCpu(), torch.no_grad():
            total = torch.zeros((), dtype=torch.float64)
            for parameter in self.model.parameters():
                local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
                total += local.detach().to(torch.float64).abs().sum()
            return float(total)

    @torch.no_grad()
    def generate(self, data: BatchedDataDict, greedy: bool = False) -> BatchedDataDict:
        """NeMo RL's GenerationOutputSpec for right-padded ``input_ids`` [B, L] and
        ``input_lengths`` [B]: ``output_ids`` [B, L'] (prompt then answer, right-padded),
        ``logprobs`` [B, L'] (of each answer token under the sampling distribution, 0
        elsewhere), ``generation_lengths`` [B], ``unpadded_sequence_lengths`` [B],
        ``truncated`` [B] (no stop token within the budget)."""
        with device.CudaAsCpu():
            return self._generate(data, greedy)

    def _generate(self, data, greedy):
        config = self.cfg["generation"]
        input_ids = data["input_ids"].to("cpu")
        lengths = data["input_lengths"].to("cpu")
        batch, width = input_ids.shape[0], int(lengths.max())
        pad = int(config["_pad_token_id"])
        # HF generate wants the prompts left-padded.
        prompts = torch.full((batch, width), pad, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for i in range(batch):
            n = int(lengths[i])
            prompts[i, width - n:] = input_ids[i, :n]
            attention[i, width - n:] = 1
        budget = min(int(config["max_new_tokens"]), int(self.cfg["max_total_sequence_length"]) - width)
        stop_ids = [int(t) for t in (config.get("stop_token_ids") or [self.tokenizer.eos_token_id])]
        temperature = float(config.get("temperature") or 1.0)
        sampling = {}
        if not greedy:
            sampling = dict(temperature=temperature, top_p=float(config.get("top_p") or 1.0), top_k=int(config.get("top_k") or 0))
        self.model.eval()
        seed = sampling_seed(int(os.environ.get(SEED_ENV, "0")), input_ids, lengths)
        with torch.random.fork_rng(devices=[]), unshard_fsdp2_model(self.model):
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=prompts, attention_mask=attention, max_new_tokens=max(budget, 1), do_sample=not greedy,
                eos_token_id=stop_ids, pad_token_id=pad, return_dict_in_generate=True, output_logits=True, **sampling,
            )
        answers = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / temperature  # NeMo RL's logprobs are of the temperature-scaled distribution
        answer_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, answers.unsqueeze(-1)).squeeze(-1)
        total = width + answers.shape[1]
        output_ids = torch.full((batch, total), pad, dtype=torch.long)
        logprobs = torch.zeros((batch, total), dtype=torch.float32)
        generated, unpadded, truncated = [], [], []
        for i in range(batch):
            n = int(lengths[i])
            row = answers[i].tolist()
            stop = next((t for t, token in enumerate(row) if token in stop_ids), None)
            count = len(row) if stop is None else stop + 1
            output_ids[i, :n] = input_ids[i, :n]
            output_ids[i, n:n + count] = answers[i, :count]
            logprobs[i, n:n + count] = answer_logprobs[i, :count]
            generated.append(count)
            unpadded.append(n + count)
            truncated.append(stop is None)
        return BatchedDataDict({
            "output_ids": output_ids,
            "logprobs": logprobs,
            "generation_lengths": torch.tensor(generated, dtype=torch.long),
            "unpadded_sequence_lengths": torch.tensor(unpadded, dtype=torch.long),
            "truncated": torch.tensor(truncated, dtype=torch.bool),
        })


# Every method NeMo RL's worker classes define runs with CUDA mapped to the CPU (each name
# once, as the subclass resolves it).
_INHERITED = {
    name
    for cls in CpuPolicyWorkerImpl.__mro__[1:]
    for name, value in vars(cls).items()
    if not name.startswith("__") and inspect.isfunction(value) and name not in vars(CpuPolicyWorkerImpl)
}
for _name in sorted(_INHERITED):
    setattr(CpuPolicyWorkerImpl, _name, device.on_cpu(getattr(CpuPolicyWorkerImpl, _name)))

CpuPolicyWorker = ray.remote(CpuPolicyWorkerImpl)
WORKER_FQN = f"{__name__}.CpuPolicyWorker"
# The same worker made in the driver's process, behind an actor's interface.
CpuPolicyWorkerInDriver = ActorClassInDriver(CpuPolicyWorkerImpl, getattr(CpuPolicyWorker, "_default_options", None))
