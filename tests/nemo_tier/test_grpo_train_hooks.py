"""Our hooks firing inside NeMo RL's own grpo_train, up to where it asks for a GPU.

grpo_train runs with NeMo RL's real data setup (our TaskDataset and processors), real
environment actors on a local Ray, its real Logger, CheckpointManager and loss, and the
scripted stand-in for vLLM. The training Policy is the one thing that cannot be built
without GPUs (its Ray workers ask for them), so it is passed as `GpuBoundary`, which raises
at the first call grpo_train makes on it: the point where a GPU would be asked for.

Generation is not colocated with training here (vLLM on GPUs of its own): colocated,
grpo_train offloads the policy (a GPU call) before each training rollout, and the training
hooks would not be reached on a CPU.

The run is a math GDPO-without-BN run with DAPO dynamic sampling, a 64-token length limit,
validation at start, 2 prompts x 2 answers: each prompt gets a long correct answer
(correctness 1, length 0) and a short wrong one (correctness 0, length 1). Every group's
reward SUM is constant (1 and 1), so NeMo RL's own filter would drop every group and never
reach the policy; GDPO's components vary, so our dynamic-sampling hook keeps them.
"""

from __future__ import annotations

import json

import pytest

from support import demonstrated_prompts, scripted_generation, small_config

LIMIT = 64
SHORT_WRONG = "No idea."


class GpuRequested(Exception):
    """grpo_train called the training Policy: on a cluster this is where GPUs are needed."""


class GpuBoundary:
    """The training Policy's place in grpo_train; every attribute asks for the GPU."""

    def __getattr__(self, name):
        raise GpuRequested(name)


@pytest.fixture(scope="module")
def grpo_run(local_ray, tiny_tokenizer_dir, tmp_path_factory):
    """One grpo_train call with our hooks installed; what it left behind."""
    if local_ray is None:
        return None
    import io
    from contextlib import redirect_stdout

    from torchdata.stateful_dataloader import StatefulDataLoader

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.algorithms.loss import ClippedPGLossFn
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.utils import setup_response_data
    from nemo_rl.utils.checkpoint import CheckpointManager
    from nemo_rl.utils.logger import Logger

    from gdpo_nemo.engines.nemo import plugin
    from gdpo_nemo.engines.nemo.metrics import StepMetricsWriter

    run_dir = tmp_path_factory.mktemp("grpo_train") / "run"
    config = small_config(
        "math", tiny_tokenizer_dir, run_dir, algo="gdpo_no_bn",
        extra=("grpo.val_at_start=true", "grpo.use_dynamic_sampling=true", "grpo.dynamic_sampling_max_gen_batches=1",
               f"gdpo.length_limit={LIMIT}", "policy.generation.colocated.enabled=false"),
    )
    run_dir.mkdir(parents=True)
    writer = StepMetricsWriter(run_dir)
    state = plugin.register(config, writer=writer)
    master = grpo_module.MasterConfig(**config)
    tokenizer = get_tokenizer(master.policy["tokenizer"])
    dataset, val_dataset, task_to_env, val_task_to_env = setup_response_data(tokenizer, master.data, master.env)
    loader = StatefulDataLoader(dataset, batch_size=master.grpo.num_prompts_per_step, shuffle=False,
                                collate_fn=rl_collate_fn, drop_last=True)
    val_loader = StatefulDataLoader(val_dataset, batch_size=master.grpo.val_batch_size, shuffle=False,
                                    collate_fn=rl_collate_fn)
    right = {prompt: ("Let me think step by step. " * 8) + demo
             for split in ("train", "validation") for prompt, demo in demonstrated_prompts("math", config, split)}

    def answer(i, prompt_text):  # even samples: the long right answer to their prompt; odd: short, wrong
        if i % 2:
            return SHORT_WRONG
        return next(text for problem, text in right.items() if problem in prompt_text)
    printed = io.StringIO()
    raised = None
    with redirect_stdout(printed):
        try:
            grpo_module.grpo_train(
                GpuBoundary(), scripted_generation(tokenizer, answer),
                loader, val_loader, tokenizer, ClippedPGLossFn(master.loss_fn), task_to_env, val_task_to_env,
                Logger(master.logger), CheckpointManager(master.checkpointing), grpo_module._initial_grpo_save_state(),
                master,
            )
        except GpuRequested as err:
            raised = err
        finally:
            writer.close()
            for actor in {id(a): a for a in [*task_to_env.values(), *val_task_to_env.values()]}.values():
                local_ray.kill(actor)
    records = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["step"]] = record
    return {"raised": raised, "printed": printed.getvalue(), "records": records, "state": state, "config": config}


def test_grpo_train_reaches_the_gpu_request_with_every_gdpo_group_kept(grpo_run):
    assert isinstance(grpo_run["raised"], GpuRequested)
    assert "Detected 4 prompts with non-zero std" in grpo_run["printed"]  # NeMo RL counts samples here


def test_the_estimator_factory_hook_gives_grpo_train_our_gdpo_no_bn(grpo_run):
    assert "Using gdpo_nemo advantage estimator 'gdpo_no_bn'" in grpo_run["printed"]


def test_a_rollout_logs_no_reward_family_before_its_batch_is_trained(grpo_run):
    """grpo_train logs each generation batch's rollout metrics at once; under DAPO that batch
    is not the trained one, so the families wait for the step's metrics (test_grpo_train_cpu
    follows them into the logs; the test below checks them against NeMo RL's totals)."""
    train = grpo_run["records"][1]
    assert "train/mean_gen_tokens_per_sample" in train  # NeMo RL's own rollout metric
    assert not [key for key in train if key.startswith(("train/reward/", "train/filtered_reward/"))]


def _generation_batch(first_idx, correctness, length):
    import torch

    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    correctness, length = torch.tensor(correctness), torch.tensor(length)
    return BatchedDataDict({
        "idx": [first_idx, first_idx, first_idx + 1, first_idx + 1],
        "reward/correctness": correctness,
        "reward/length": length,
        "total_reward": (correctness + length).to(torch.float32),
    })


def test_with_dapo_each_family_adds_up_to_nemo_rl_s_own_total_of_the_same_samples(grpo_run):
    """Two generation batches through NeMo RL's real dynamic_sampling with our hook: the first
    keeps 1 of its 2 groups (the other is constant in both components), the second keeps
    both; 2 prompts x 2 answers are trained: the first batch's kept group and the second's
    first group. NeMo RL logs as train/reward the mean of the first 4 UNFILTERED totals its
    batch cache holds (the whole first batch) and as train/filtered_reward that of the
    trained batch; our families cover the same two sets."""
    import numpy as np
    import torch

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.utils.timer import Timer

    master = grpo_module.MasterConfig(**grpo_run["config"])
    assert (master.grpo.num_prompts_per_step, master.grpo.num_generations_per_prompt) == (2, 2)
    first = _generation_batch(10, [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0])  # group 11 constant: dropped
    second = _generation_batch(20, [0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0])
    zeros = torch.zeros(4)
    cache = None
    for number, batch in enumerate((first, second), start=1):
        trained, complete, cache, ds_metrics = grpo_module.dynamic_sampling(
            batch, torch.ones(4), zeros, number, master, Timer(), cache)
        assert complete == (number == 2)
    assert trained["idx"] == [10, 10, 20, 20]
    ours = {key: float(value[0]) for key, value in ds_metrics.items() if key.startswith(("reward", "filtered_reward"))}
    nemo_reward = float(np.mean(trained["total_reward"].numpy()))  # as grpo_train logs train/reward
    nemo_filtered = float(np.mean(trained["filtered_reward"].numpy()))
    assert (nemo_reward, nemo_filtered) == (1.25, 0.5)
    assert ours == {"reward/correctness": 0.75, "reward/length": 0.5,  # the first batch, unfiltered
                    "filtered_reward/correctness": 0.25, "filtered_reward/length": 0.25}
    assert ours["reward/correctness"] + ours["reward/length"] == nemo_reward
    assert ours["filtered_reward/correctness"] + ours["filtered_reward/length"] == nemo_filtered
    assert grpo_run["state"].generated == []  # the next step starts afresh


def test_validate_hook_adds_components_next_to_nemo_rl_accuracy_of_the_sum(grpo_run):
    validation = grpo_run["records"][0]
    assert validation["validation/accuracy"] == pytest.approx(1.0)  # mean of the SUM: 1 and 1
    assert validation["validation/reward/correctness"] == pytest.approx(0.5)
    assert validation["validation/reward/length"] == pytest.approx(0.5)


def test_nemo_rl_dynamic_sampling_alone_drops_groups_whose_sum_is_constant(grpo_run):
    """The counter-check of the first test: NeMo RL's own filter, without our hook."""
    import torch

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.algorithms.utils import calculate_baseline_and_std_per_prompt
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.utils.timer import Timer

    from gdpo_nemo.engines.nemo.plugin import _unwrapped

    batch = BatchedDataDict({
        "idx": [0, 0, 1, 1],
        "reward/correctness": torch.tensor([1.0, 0.0, 1.0, 0.0]),
        "reward/length": torch.tensor([0.0, 1.0, 0.0, 1.0]),
        "total_reward": torch.tensor([1.0, 1.0, 1.0, 1.0]),
    })
    prompts = torch.tensor([[7], [7], [8], [8]])
    baseline, std = calculate_baseline_and_std_per_prompt(prompts, batch["total_reward"], torch.ones(4), leave_one_out_baseline=False)
    master = grpo_module.MasterConfig(**grpo_run["config"])
    original = _unwrapped(grpo_module.dynamic_sampling)
    kept, complete, _, _ = original(batch.copy(), std, baseline, 1, master, Timer(), None)
    assert (kept.size, complete) == (0, False)
    kept, complete, _, _ = grpo_module.dynamic_sampling(batch.copy(), std, baseline, 1, master, Timer(), None)
    assert (kept.size, complete) == (4, True)


def test_a_timeout_stop_inside_nemo_rl_marks_the_run_not_done(grpo_run):
    import nemo_rl.algorithms.grpo as grpo_module

    # The run itself ended by its step count: the flag is clear until NeMo RL's checker stops a run.
    assert grpo_run["state"].timed_out is False
    checker = grpo_module.TimeoutChecker(timeout="00:00:00:00", fit_last_save_time=True)
    checker.start_iterations()
    checker.mark_iteration()
    assert checker.check_save() is True
    assert grpo_run["state"].timed_out is True


def test_with_a_larger_generation_batch_the_unfiltered_family_is_nemo_rl_s_first_samples(grpo_run):
    """grpo.batch_multiplier 1.5: 3 prompts are drawn for 2 trained. One draw keeps 2 of its 3
    groups and completes the batch; NeMo RL's train/reward is the mean of the first 4 of the
    6 unfiltered totals, and the families follow it."""
    import numpy as np
    import torch

    import nemo_rl.algorithms.grpo as grpo_module
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.utils.timer import Timer

    master = grpo_module.MasterConfig(**grpo_run["config"])
    correctness = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])  # group 30 constant: dropped
    length = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    draw = BatchedDataDict({"idx": [30, 30, 31, 31, 32, 32], "reward/correctness": correctness, "reward/length": length,
                            "total_reward": (correctness + length).to(torch.float32)})
    trained, complete, _, ds_metrics = grpo_module.dynamic_sampling(draw, torch.ones(6), torch.zeros(6), 1, master, Timer(), None)
    assert complete and trained["idx"] == [31, 31, 32, 32]
    ours = {key: float(value[0]) for key, value in ds_metrics.items() if key.startswith(("reward", "filtered_reward"))}
    assert float(np.mean(trained["total_reward"].numpy())) == 1.25  # totals 2, 2, 1, 0: the first 4 drawn
    assert ours == {"reward/correctness": 0.75, "reward/length": 0.5,
                    "filtered_reward/correctness": 0.5, "filtered_reward/length": 0.5}
