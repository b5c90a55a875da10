"""The local engine and the estimators on a device: the CPU here, CUDA where there is one.

CPU tests pin the device logic a GPU run relies on: the sampling generator lives on the
model's device, `auto` picks the CPU when torch sees no CUDA, autocast and bf16 weights are
honoured while logprob math stays fp32, a checkpoint sampled on one kind of device is not
resumed on another. Tests marked `gpu` run the same engine on CUDA; they are skipped where
torch sees no CUDA device and run on the device machine with `pytest -m gpu`.
"""

import math

import pytest
import torch
from safetensors.torch import load_file
from test_local_engine import (REPO, TASK_COMPONENTS, TASK_RUNS, VARYING, sigkill_then_resume, tiny_config,
                               without_timing)
from test_local_engine_loss import _prompts

from gdpo_nemo.estimators import ESTIMATORS, compute_advantages
from gdpo_nemo.estimators.collapse import distinct_advantage_groups, zero_std_fraction
from gdpo_nemo.engines.local import device as dev
from gdpo_nemo.engines.local.generation import sample_completions, shared_prompt_logprobs
from gdpo_nemo.engines.local.models import build_tiny_model
from gdpo_nemo.engines.local.trainer import train
from gdpo_nemo.runs.rundir import read_metrics

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (marked gpu)")
no_cuda_here = pytest.mark.skipif(HAS_CUDA, reason="checks the behaviour of a machine without CUDA")
DEVICES = ["cpu", *(["cuda"] if HAS_CUDA else [])]
ON_CUDA = ("gdpo.local.device=cuda", "gdpo.local.autocast=bfloat16")


def checkpoint_state(run_dir, step):
    return torch.load(run_dir / "checkpoints" / f"step_{step}" / "state.pt", weights_only=False)


def checkpoint_dtypes(run_dir, step):
    return {t.dtype for t in load_file(str(run_dir / "checkpoints" / f"step_{step}" / "model.safetensors")).values()}


# ---------------------------------------------------------------------------------------
# Choosing the device (CPU).
# ---------------------------------------------------------------------------------------


@no_cuda_here
def test_auto_device_is_the_cpu_when_torch_sees_no_cuda():
    assert dev.resolve_device("auto") == torch.device("cpu")


@no_cuda_here
def test_cuda_device_without_cuda_is_an_error_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"gdpo.local.device='cuda' but torch sees no CUDA device.*'cpu' or 'auto'"):
        train(tiny_config("gdpo.local.device=cuda", "grpo.max_num_steps=1"), tmp_path)


@pytest.mark.parametrize("override, message", [
    ("gdpo.local.device=tpu", r"gdpo.local.device: 'tpu' is not accepted; expected one of \['cpu', 'cuda', 'auto'\]"),
    ("gdpo.local.autocast=float16", r"gdpo.local.autocast: 'float16' is not accepted; expected one of \[None, 'bfloat16'\]"),
    ("gdpo.local.dtype=float16", r"gdpo.local.dtype: 'float16' is not accepted; expected one of \['float32', 'bfloat16'\]"),
])
def test_bad_device_or_precision_is_an_error_naming_the_key_and_the_choices(override, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(override)


@pytest.mark.parametrize("device", DEVICES)
def test_the_sampling_generator_is_seeded_and_on_the_requested_device(device):
    first = dev.sampling_generator(torch.device(device), 5)
    again = dev.sampling_generator(torch.device(device), 5)
    assert first.device.type == device
    draws = [torch.rand(4, generator=g, device=device) for g in (first, again)]
    assert torch.equal(*draws)


@no_cuda_here
def test_an_auto_device_run_here_is_the_cpu_run_and_samples_on_the_cpu(tmp_path):
    train(tiny_config(*VARYING, "grpo.max_num_steps=2"), tmp_path / "cpu")
    train(tiny_config(*VARYING, "grpo.max_num_steps=2", "gdpo.local.device=auto"), tmp_path / "auto")
    assert without_timing(read_metrics(tmp_path / "auto")) == without_timing(read_metrics(tmp_path / "cpu"))
    assert checkpoint_state(tmp_path / "auto", 2)["generator_device"] == "cpu"


def test_a_checkpoint_sampled_on_another_kind_of_device_is_not_resumed(tmp_path):
    train(tiny_config("grpo.max_num_steps=1"), tmp_path)
    state_path = tmp_path / "checkpoints" / "step_1" / "state.pt"
    state = torch.load(state_path, weights_only=False)
    state["generator_device"] = "cuda"  # what a run on a GPU writes
    torch.save(state, state_path)
    with pytest.raises(ValueError, match=r"sampled on cuda and this run's gdpo.local.device resolves to cpu"):
        train(tiny_config("grpo.max_num_steps=2"), tmp_path, resume=True)


# ---------------------------------------------------------------------------------------
# Precision (CPU: torch runs bf16 autocast and bf16 weights on the CPU too).
# ---------------------------------------------------------------------------------------


def _linear_output_dtypes(model, run):
    """dtypes of the first attention projection's outputs while `run()` runs."""
    seen = []
    hook = model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    try:
        result = run()
    finally:
        hook.remove()
    return set(seen), result


@pytest.mark.parametrize("autocast, matmul_dtype", [(None, torch.float32), ("bfloat16", torch.bfloat16)])
def test_autocast_sets_the_matmul_dtype_and_logprobs_stay_fp32(autocast, matmul_dtype):
    model, tokenizer = build_tiny_model(seed=0)
    ids, mask = _prompts(tokenizer, ["What is 2 + 3?", "Name a colour."])
    cpu = torch.device("cpu")

    def sample():
        with dev.autocast(cpu, autocast):
            return sample_completions(model, ids, mask, group_size=2, max_new_tokens=6,
                                      stop_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
                                      generator=dev.sampling_generator(cpu, 0))

    dtypes, rollouts = _linear_output_dtypes(model, sample)
    assert dtypes == {matmul_dtype} and rollouts.logprobs.dtype == torch.float32

    def score():
        with dev.autocast(cpu, autocast):
            return shared_prompt_logprobs(model, ids, mask, torch.tensor([2, 2]), rollouts.completion_ids,
                                          rollouts.completion_mask)

    dtypes, logprobs = _linear_output_dtypes(model, score)
    assert dtypes == {matmul_dtype} and logprobs.dtype == torch.float32
    # the sampler's logprobs are the scorer's (same model, same precision), up to rounding
    tolerance = 1e-4 if autocast is None else 0.1
    generated = rollouts.completion_mask.bool()
    assert torch.allclose(logprobs[generated], rollouts.logprobs[generated], atol=tolerance)


def test_training_under_bf16_autocast_keeps_fp32_weights_and_changes_the_numbers(tmp_path):
    train(tiny_config(*VARYING, "grpo.max_num_steps=2"), tmp_path / "fp32")
    train(tiny_config(*VARYING, "grpo.max_num_steps=2", "gdpo.local.autocast=bfloat16"), tmp_path / "autocast")
    mixed, full = read_metrics(tmp_path / "autocast"), read_metrics(tmp_path / "fp32")
    assert all(math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"]) for r in mixed)
    assert any(r["train/grad_norm"] > 0 for r in mixed)
    assert without_timing(mixed) != without_timing(full)  # bf16 matmuls: other logprobs
    assert checkpoint_dtypes(tmp_path / "autocast", 2) == {torch.float32}


def test_bf16_weights_train_and_are_saved_in_bf16(tmp_path):
    train(tiny_config(*VARYING, "grpo.max_num_steps=2", "gdpo.local.dtype=bfloat16"), tmp_path)
    records = read_metrics(tmp_path)
    assert all(math.isfinite(r["train/loss"]) for r in records) and any(r["train/grad_norm"] > 0 for r in records)
    assert checkpoint_dtypes(tmp_path, 2) == {torch.bfloat16}


def test_step_metrics_report_generation_throughput_and_gpu_memory_only_on_a_gpu(tmp_path):
    train(tiny_config("grpo.max_num_steps=2"), tmp_path)
    for record in read_metrics(tmp_path):
        tokens_per_second = record["train/global_valid_toks"] / record["timing/train/generation"]
        assert record["timing/train/generation_tokens_per_sec"] == pytest.approx(tokens_per_second, rel=1e-6)
        assert record["timing/train/generation_tokens_per_sec"] > 0
        assert record["timing/train/policy_training_tokens_per_sec"] > 0
        assert not [key for key in record if key.startswith("memory/")]  # CPU run


def test_the_warm_start_cache_key_names_its_numerics():
    """A warm start made under other numerics (autocast, thread count) gets its own key (its
    weights differ); the same config under the same numerics keeps one key."""
    from gdpo_nemo.engines.local.warm_start import warm_start_expected, warm_start_key

    config = tiny_config("gdpo.local.warm_start.enabled=true", "gdpo.local.num_threads=1")
    assert warm_start_key(config) == warm_start_key(tiny_config("gdpo.local.warm_start.enabled=true",
                                                                "gdpo.local.num_threads=1"))
    assert warm_start_key(tiny_config("gdpo.local.warm_start.enabled=true", "gdpo.local.autocast=bfloat16",
                                      "gdpo.local.num_threads=1")) != warm_start_key(config)
    assert warm_start_key(tiny_config("gdpo.local.warm_start.enabled=true", "gdpo.local.num_threads=2")) \
        != warm_start_key(config)
    expected = warm_start_expected(config)
    assert expected["numerics"]["threads"] == 1 and expected["numerics"]["device"] == "cpu"
    assert expected["libraries"]["torch"] == torch.__version__


# ---------------------------------------------------------------------------------------
# Advantages and diagnostics on a device.
# ---------------------------------------------------------------------------------------


def test_reward_components_on_different_devices_are_an_error_naming_them():
    rewards = {"format": torch.zeros(4), "correctness": torch.zeros(4, device="meta")}
    with pytest.raises(ValueError, match=r"different devices: \{'format': 'cpu', 'correctness': 'meta'\}"):
        compute_advantages(rewards, torch.tensor([0, 0, 1, 1]))


def random_batch(device, seed=0):
    """48 rollouts in 9 groups of 3-8, shuffled, 3 components (binary, graded, with NaNs)."""
    generator = torch.Generator().manual_seed(seed)
    sizes = [3, 4, 5, 6, 7, 8, 5, 4, 6]
    group_ids = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    group_ids = group_ids[torch.randperm(len(group_ids), generator=generator)]
    batch = len(group_ids)
    rewards = {
        "format": (torch.rand(batch, generator=generator) < 0.5).double(),
        "correctness": torch.rand(batch, generator=generator).double() * 6 - 3,
        "integer": (torch.rand(batch, generator=generator) < 0.3).double(),
    }
    rewards["integer"][::7] = float("nan")
    token_mask = (torch.rand(batch, 12, generator=generator) < 0.8).long()
    return ({k: v.to(device) for k, v in rewards.items()}, group_ids.to(device), token_mask.to(device))


@pytest.mark.parametrize("device", DEVICES)
def test_advantages_and_diagnostics_run_on_the_rewards_device_and_return_there(device):
    rewards, group_ids, token_mask = random_batch(device)
    for estimator in ESTIMATORS:
        advantages = compute_advantages(rewards, group_ids.tolist(), estimator)  # ids as a list follow the rewards
        assert advantages.device.type == device and advantages.dtype == torch.float32
    per_token = compute_advantages(rewards, group_ids, "gdpo", token_mask=token_mask.cpu(), preset="verl")
    assert per_token.device.type == device
    assert distinct_advantage_groups(per_token, group_ids.cpu()) >= 1
    assert set(zero_std_fraction(rewards, group_ids.cpu())) == set(rewards)


# ---------------------------------------------------------------------------------------
# On a GPU (marked gpu: skipped without CUDA).
# ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
@pytest.mark.parametrize("options", [{}, {"leave_one_out": True}, {"preset": "trl"}])
def test_gpu_cuda_advantages_equal_the_cpu_ones(estimator, options):
    for seed in range(5):
        on_cpu, on_gpu = random_batch("cpu", seed), random_batch("cuda", seed)
        expected = compute_advantages(on_cpu[0], on_cpu[1], estimator, **options)
        actual = compute_advantages(on_gpu[0], on_gpu[1], estimator, **options)
        assert actual.device.type == "cuda"
        assert torch.allclose(actual.cpu(), expected, atol=1e-5, rtol=0)
        assert distinct_advantage_groups(actual, on_gpu[1]) == distinct_advantage_groups(expected, on_cpu[1])
        assert zero_std_fraction(on_gpu[0], on_gpu[1]) == zero_std_fraction(on_cpu[0], on_cpu[1])
    if estimator == "gdpo":
        per_token = [compute_advantages(b[0], b[1], "gdpo", token_mask=b[2], preset="verl") for b in (on_cpu, on_gpu)]
        assert torch.allclose(per_token[1].cpu(), per_token[0], atol=1e-5, rtol=0)


@pytest.mark.gpu
@needs_cuda
def test_gpu_sampling_with_a_cpu_generator_is_an_error_naming_the_fix():
    model, tokenizer = build_tiny_model(seed=0)
    model.to("cuda")
    ids, mask = _prompts(tokenizer, ["What is 2 + 3?"])
    with pytest.raises(ValueError, match=r"generator is on cpu but the prompts are on cuda.*torch.Generator\(device='cuda'\)"):
        sample_completions(model, ids.cuda(), mask.cuda(), group_size=2, max_new_tokens=4,
                           stop_token_ids=[tokenizer.eos_token_id], generator=torch.Generator())


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("task, estimator", TASK_RUNS)
def test_gpu_each_task_and_estimator_trains_on_cuda(task, estimator, tmp_path):
    config = tiny_config(*ON_CUDA, f"gdpo.task={task}", f"gdpo.estimator={estimator}", "grpo.max_num_steps=2",
                         "gdpo.length_limit=8", "policy.max_total_sequence_length=4096",
                         f"grpo.num_prompts_per_step={1 if task == 'toolcall' else 2}")
    train(config, tmp_path)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        for name in TASK_COMPONENTS[task]:
            assert f"train/reward/{name}" in record
        assert math.isfinite(record["train/loss"])
        assert record["memory/gpu_peak_allocated_mb"] > 0
        assert record["timing/train/generation_tokens_per_sec"] > 0
    assert checkpoint_state(tmp_path, 2)["generator_device"] == "cuda"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("task", ["gsm8k", "toolcall"])
@pytest.mark.parametrize("estimator", ["grpo", "gdpo"])
def test_gpu_smollm2_trains_a_few_steps_with_warm_start_in_bf16(task, estimator, tmp_path):
    from gdpo_nemo.engines.local.config import load_run_config

    config, _ = load_run_config(REPO / "configs" / "local" / "quickstart_gsm8k.yaml", [
        *ON_CUDA, f"gdpo.task={task}", f"gdpo.estimator={estimator}", f"gdpo.algo={estimator}",
        f"grpo.adv_estimator.name={estimator}", "gdpo.reward_components=null", "gdpo.local.progress=false",
        "grpo.max_num_steps=3", "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=8",
        "policy.train_global_batch_size=64", "policy.train_micro_batch_size=16", "policy.generation_batch_size=64",
        "policy.generation.max_new_tokens=128", "policy.max_total_sequence_length=2048",
        "data.max_input_seq_length=null"])
    train(config, tmp_path)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3]
    # A step whose groups all tie has zero advantages and so no gradient: with the warm start and
    # 128 new tokens some group differs, so some update must move the weights.
    summary = [(r["train/loss"], r["train/grad_norm"]) for r in records]
    assert all(math.isfinite(loss) and math.isfinite(norm) for loss, norm in summary), summary
    assert any(norm > 0 for _, norm in summary), summary
    assert all(0 < r["memory/gpu_peak_allocated_mb"] < 20_000 for r in records)


@pytest.mark.gpu
@needs_cuda
def test_gpu_same_seed_runs_on_cuda_log_identical_metrics(tmp_path):
    config = tiny_config(*ON_CUDA, *VARYING, "grpo.max_num_steps=3")
    train(config, tmp_path / "a")
    train(config, tmp_path / "b")
    first, second = without_timing(read_metrics(tmp_path / "a")), without_timing(read_metrics(tmp_path / "b"))
    assert len(first) == 3 and first == second
    train(tiny_config(*ON_CUDA, *VARYING, "grpo.max_num_steps=3", "grpo.seed=8"), tmp_path / "c")
    assert without_timing(read_metrics(tmp_path / "c")) != first


@pytest.mark.gpu
@needs_cuda
def test_gpu_sigkill_after_a_checkpoint_then_resume_on_cuda_ends_with_the_uninterrupted_metrics(tmp_path):
    sigkill_then_resume(tmp_path, *ON_CUDA)


# ---------------------------------------------------------------------------------------
# Attention kernels: cuDNN's are off on CUDA (docs/gpu.md, "Attention on CUDA").
# ---------------------------------------------------------------------------------------


@pytest.fixture
def cudnn_attention_flag():
    """Leaves torch's process-wide cuDNN-attention flag as the test found it."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_a_cuda_run_turns_cudnn_attention_off_and_records_it(cudnn_attention_flag):
    from gdpo_nemo.runs import provenance

    torch.backends.cuda.enable_cudnn_sdp(True)
    dev.avoid_cudnn_attention(torch.device("cpu"))  # the CPU: untouched
    assert torch.backends.cuda.cudnn_sdp_enabled()
    dev.avoid_cudnn_attention(torch.device("cuda"))  # sets torch's flag; needs no GPU
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    # A CUDA run's numerics name the kernels allowed (so its warm-start key does); a CPU
    # run's record is what it was before the setting existed.
    assert dev.attention_backends(torch.device("cuda")) == "flash,efficient,math"
    assert dev.attention_backends(torch.device("cpu")) is None
    assert "attention" not in provenance.numerics("cpu", attention=dev.attention_backends(torch.device("cpu")))


@pytest.mark.gpu
@needs_cuda
def test_gpu_padded_prompts_give_finite_gradients(cudnn_attention_flag):
    # pytorch/pytorch#196678: cuDNN attention's backward gives NaN with a mask, a key length of
    # 128k + 64 and a row whose logsumexp is below -88.7 (a fully masked left-padding row):
    # what killed 4 of 6 tool-calling runs on an H100 (torch 2.11). The engine's forward pass
    # over such prompts, with the engine's attention setting, must give finite gradients.
    cuda = torch.device("cuda")
    dev.avoid_cudnn_attention(cuda)
    model, tokenizer = build_tiny_model(seed=0)
    model.to(cuda).train()
    generator = torch.Generator().manual_seed(0)
    width = 704
    ids = torch.randint(3, 200, (2, width), generator=generator)
    mask = torch.ones(2, width, dtype=torch.long)
    mask[1, :300] = 0  # left padding: 300 fully masked query rows
    completions = torch.randint(3, 200, (4, 24), generator=generator)
    with dev.autocast(cuda, "bfloat16"):
        logprobs = shared_prompt_logprobs(model, ids.to(cuda), mask.to(cuda), torch.tensor([2, 2]),
                                          completions.to(cuda), torch.ones(4, 24, dtype=torch.long, device=cuda))
    logprobs.sum().backward()
    bad = [name for name, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite gradients in {bad[:5]}"
