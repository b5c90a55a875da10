"""The local engine's loss (NeMo RL's ClippedPGLossFn semantics) and its sampler.

Loss tests use hand-made logprobs with numbers checkable by hand; the sampler and
update tests use the real tiny model (`builtin:tiny`, random weights, byte tokenizer).
"""

import math

import pytest
import torch

from gdpo_nemo.engines.local.generation import sample_completions, sequence_logprobs
from gdpo_nemo.engines.local.loss import LossConfig, clipped_pg_loss, kl_estimate
from gdpo_nemo.engines.local.models import build_tiny_model

NO_KL = LossConfig(reference_policy_kl_penalty=0.0)


def _loss(logprobs, old, advantages, mask, config=NO_KL, **kwargs):
    tokens = float(mask.sum())
    return clipped_pg_loss(logprobs, old, advantages, mask, config, global_valid_tokens=tokens,
                           global_valid_samples=float(mask.shape[0]), **kwargs)


def test_on_policy_loss_is_minus_token_mean_advantage():
    # ratio 1 everywhere: loss = -(sum_i A_i * n_i) / tokens = -(2*1 + (-1)*3) / 5 = 0.2
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    logprobs = torch.full((2, 3), -1.0)
    loss, parts = _loss(logprobs, logprobs.clone(), torch.tensor([1.0, -1.0]), mask)
    assert loss.item() == pytest.approx(0.2)
    assert parts["clipped_tokens"] == 0


def test_positive_advantage_gain_is_clipped_at_one_plus_ratio_clip_max():
    # ratio e^0.4 = 1.49 > 1.2: the clipped branch (-1.2) is the max, so no gradient flows.
    logprobs = torch.tensor([[0.4]], requires_grad=True)
    loss, parts = _loss(logprobs, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-1.2)
    loss.backward()
    assert logprobs.grad.item() == 0.0
    assert parts["clipped_tokens"] == 1


def test_negative_advantage_takes_the_pessimistic_branch():
    # A = -1, ratio e^-0.7 = 0.50 < 0.8: max(0.50, 0.8) = 0.8 (clipped), no gradient.
    logprobs = torch.tensor([[-0.7]], requires_grad=True)
    loss, _ = _loss(logprobs, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.8)
    loss.backward()
    assert logprobs.grad.item() == 0.0


def test_asymmetric_clip_uses_ratio_clip_max_above_one():
    config = LossConfig(reference_policy_kl_penalty=0.0, ratio_clip_min=0.2, ratio_clip_max=0.28)
    loss, _ = _loss(torch.tensor([[1.0]]), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), config)
    assert loss.item() == pytest.approx(-1.28)


def test_dual_clip_bounds_negative_advantage_loss_by_c_times_advantage():
    # A = -1, ratio e^2 = 7.39: plain clipped loss 7.39, dual clip c = 3 caps it at 3.
    config = LossConfig(reference_policy_kl_penalty=0.0, ratio_clip_c=3.0)
    loss, _ = _loss(torch.tensor([[2.0]]), torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1), config)
    assert loss.item() == pytest.approx(3.0)


def test_sequence_level_loss_averages_tokens_within_each_sample_first():
    # Sample 0: 1 token, A = 1; sample 1: 3 tokens, A = -1. Token level: -(1 - 3)/4 = 0.5;
    # sequence level: -(1 + -1)/2 = 0.
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    logprobs = torch.zeros(2, 3)
    advantages = torch.tensor([1.0, -1.0])
    token, _ = _loss(logprobs, logprobs, advantages, mask)
    sequence, _ = _loss(logprobs, logprobs, advantages, mask,
                        LossConfig(reference_policy_kl_penalty=0.0, token_level_loss=False))
    assert token.item() == pytest.approx(0.5)
    assert sequence.item() == pytest.approx(0.0)


def test_k3_estimator_is_exp_logr_minus_one_minus_logr_and_clamped():
    logprobs = torch.tensor([[0.0, 0.0, 0.0]])
    reference = torch.tensor([[0.0, -1.0, 30.0]])
    kl = kl_estimate(logprobs, reference, "k3", input_clamp=20.0, output_clamp=10.0)
    assert kl[0, 0].item() == 0.0
    assert kl[0, 1].item() == pytest.approx(math.exp(-1) - 1 + 1)
    assert kl[0, 2].item() == 10.0  # logr clamped to 20, then the output to 10
    assert kl_estimate(logprobs, reference, "k1", None, None)[0, 1].item() == pytest.approx(1.0)
    assert kl_estimate(logprobs, reference, "k2", None, None)[0, 1].item() == pytest.approx(0.5)


def test_kl_penalty_adds_beta_times_token_mean_kl():
    config = LossConfig(reference_policy_kl_penalty=0.1)
    logprobs = torch.zeros(1, 2)
    reference = torch.tensor([[-1.0, -1.0]])
    loss, parts = _loss(logprobs, logprobs, torch.tensor([0.0]), torch.ones(1, 2), config,
                        reference_logprobs=reference)
    expected = 0.1 * (math.exp(-1) - 1 + 1)
    assert parts["kl_penalty"] == pytest.approx(expected)
    assert loss.item() == pytest.approx(expected)


def test_kl_penalty_without_reference_logprobs_is_an_error():
    with pytest.raises(ValueError, match="reference_logprobs"):
        _loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1),
              LossConfig(reference_policy_kl_penalty=0.1))


# ---------------------------------------------------------------------------------------
# Sampler and update on the real tiny model.
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


def _prompts(tokenizer, questions):
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return encoded.input_ids, encoded.attention_mask


def _sample(model, tokenizer, seed, **kwargs):
    ids, mask = _prompts(tokenizer, ["What is 2 + 3?", "Name a colour."])
    options = dict(group_size=3, max_new_tokens=16, stop_token_ids=[tokenizer.eos_token_id],
                   pad_token_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(seed))
    options.update(kwargs)
    return sample_completions(model, ids, mask, **options)


def test_sampler_returns_group_size_rows_per_prompt_in_prompt_order(tiny):
    model, tokenizer = tiny
    rollouts = _sample(model, tokenizer, seed=0)
    assert rollouts.completion_ids.shape[0] == 6
    ids, _ = _prompts(tokenizer, ["What is 2 + 3?", "Name a colour."])
    assert torch.equal(rollouts.prompt_ids[:3], ids[0].expand(3, -1))
    assert torch.equal(rollouts.prompt_ids[3:], ids[1].expand(3, -1))


def test_same_generator_seed_gives_the_same_completions(tiny):
    model, tokenizer = tiny
    first, second = _sample(model, tokenizer, seed=5), _sample(model, tokenizer, seed=5)
    other = _sample(model, tokenizer, seed=6)
    assert torch.equal(first.completion_ids, second.completion_ids)
    assert not torch.equal(first.completion_ids, other.completion_ids)


def test_completions_end_at_the_first_stop_token(tiny):
    model, tokenizer = tiny
    # Make many byte tokens stop tokens so that rows finish at different lengths.
    stops = [tokenizer.eos_token_id] + list(range(0, 256, 3))
    rollouts = _sample(model, tokenizer, seed=1, stop_token_ids=stops)
    for ids, mask, truncated in zip(rollouts.completion_ids, rollouts.completion_mask, rollouts.truncated):
        length = int(mask.sum())
        assert torch.all(mask[:length] == 1) and torch.all(mask[length:] == 0)
        hit = [i for i in range(length) if int(ids[i]) in stops]
        assert hit == ([] if truncated else [length - 1])
    assert 0 < int(rollouts.truncated.sum()) < 6 or len(set(rollouts.lengths.tolist())) > 1


def test_sampling_logprobs_equal_a_full_forward_pass(tiny):
    # The old-policy logprobs of the ratio come from sampling (KV cache, rows dropped as
    # they finish); they must be the policy's logprobs of the same tokens.
    model, tokenizer = tiny
    rollouts = _sample(model, tokenizer, seed=2, temperature=0.7, stop_token_ids=[tokenizer.eos_token_id, 101, 102])
    with torch.no_grad():
        full = sequence_logprobs(model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids,
                                 rollouts.completion_mask, temperature=0.7)
    difference = ((full - rollouts.logprobs) * rollouts.completion_mask).abs().max().item()
    assert difference < 1e-4


def test_one_update_raises_logprob_of_positive_advantage_completion_and_lowers_negative(tiny):
    import copy

    from gdpo_nemo.engines.local.policy_update import update_policy as _policy_update

    model, tokenizer = tiny
    model = copy.deepcopy(model)
    rollouts = _sample(model, tokenizer, seed=3)
    advantages = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    policy = {"train_global_batch_size": 6, "train_micro_batch_size": 2, "max_grad_norm": 1.0}

    def mean_logprob(rows):
        with torch.no_grad():
            lp = sequence_logprobs(model, rollouts.prompt_ids[rows], rollouts.prompt_mask[rows],
                                   rollouts.completion_ids[rows], rollouts.completion_mask[rows])
        return ((lp * rollouts.completion_mask[rows]).sum() / rollouts.completion_mask[rows].sum()).item()

    before = mean_logprob([0]), mean_logprob([1])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    update = _policy_update(model, optimizer, rollouts, advantages, None, NO_KL, policy, 1.0, torch.device("cpu"))
    model.eval()
    after = mean_logprob([0]), mean_logprob([1])
    assert after[0] > before[0]
    assert after[1] < before[1]
    assert update["probs_ratio"] == pytest.approx(1.0, abs=1e-4)  # first step is on-policy


def test_micro_batches_accumulate_exactly_the_global_batch_gradient(tiny):
    # NeMo RL divides every micro-batch loss by the *global* token count, so the summed
    # micro-batch gradients equal the gradient of the whole batch in one piece.
    import copy

    from gdpo_nemo.engines.local.policy_update import update_policy as _policy_update

    model, tokenizer = tiny
    rollouts = _sample(model, tokenizer, seed=4)
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5, 0.0])
    grads = []
    for micro in (6, 1):
        copy_model = copy.deepcopy(model)
        optimizer = torch.optim.SGD(copy_model.parameters(), lr=0.0)  # keep weights, read grads
        captured = {}
        original_step = optimizer.step

        def step(*args, _optimizer=optimizer, _captured=captured, **kwargs):
            _captured.update({n: p.grad.clone() for n, p in copy_model.named_parameters()})
            return original_step(*args, **kwargs)

        optimizer.step = step
        policy = {"train_global_batch_size": 6, "train_micro_batch_size": micro, "max_grad_norm": None}
        _policy_update(copy_model, optimizer, rollouts, advantages, None, NO_KL, policy, 1.0, torch.device("cpu"))
        grads.append(captured)
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_an_update_with_a_non_finite_gradient_is_skipped_and_counted(tiny, poison, capsys):
    # The stand-in for a kernel fault (cuDNN attention's NaN backward on Hopper, docs/gpu.md):
    # the first backward pass makes one weight's gradient non-finite. Without the guard AdamW
    # writes NaN into the weights and the next sampling step fails.
    import copy

    from gdpo_nemo.engines.local.policy_update import update_policy as _policy_update

    model, tokenizer = tiny
    rollouts = _sample(model, tokenizer, seed=3)
    advantages = torch.tensor([1.0, -1.0, 0.5, 0.0, -0.5, 0.0])

    def run(global_batch, poisoned):
        copy_model = copy.deepcopy(model)
        before = {n: p.detach().clone() for n, p in copy_model.named_parameters()}
        calls = []

        def poison_first(grad):
            calls.append(1)
            return grad * poison if len(calls) == 1 else grad

        if poisoned:
            copy_model.model.layers[0].self_attn.q_proj.weight.register_hook(poison_first)
        optimizer = torch.optim.AdamW(copy_model.parameters(), lr=1e-2)
        copy_model.train()
        policy = {"train_global_batch_size": global_batch, "train_micro_batch_size": 3, "max_grad_norm": 1.0}
        update = _policy_update(copy_model, optimizer, rollouts, advantages, None, NO_KL, policy, 1.0,
                                torch.device("cpu"))
        after = {n: p.detach() for n, p in copy_model.named_parameters()}
        changed = any(not torch.equal(before[n], after[n]) for n in before)
        assert all(torch.isfinite(p).all() for p in after.values())
        return update, changed

    clean, changed = run(6, poisoned=False)
    assert clean["skipped_updates"] == 0 and math.isfinite(clean["grad_norm"]) and changed
    capsys.readouterr()
    # one global batch, poisoned: no update at all, the weights bit for bit as they were
    only, changed = run(6, poisoned=True)
    assert only["skipped_updates"] == 1 and not math.isfinite(only["grad_norm"]) and not changed
    assert "this update is skipped" in capsys.readouterr().err
    # two global batches, the first poisoned: the second still updates
    first, changed = run(3, poisoned=True)
    assert first["skipped_updates"] == 1 and not math.isfinite(first["grad_norm"]) and changed
