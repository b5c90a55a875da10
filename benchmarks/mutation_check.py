"""Mutation check: realistic one-line bugs put into a copy of the package, one at a time,
and the tests that cover that code run against each. A mutant is killed when a test fails.

Curated rather than generated: each mutant is a bug a person could write (a dropped term, an
off-by-one, a flipped comparison, a missing isolation flag), in the estimator, reward,
sandbox and config packages, and names the tests meant to catch it. The score is printed;
a surviving mutant is a gap in the tests (docs/testing.md lists any that survive on purpose).

    .venv/bin/python benchmarks/mutation_check.py [--only NAME ...] [--list]

Each mutant copies the repo's package and tests into a temporary folder (the checkout is
never changed) and runs `python -m pytest -x -q` there on its tests, with a time budget.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPIED = ("gdpo_nemo", "tests", "configs", "experiments", "slurm", "pyproject.toml")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = [
    # estimators
    Mutant("group std without Bessel", "gdpo_nemo/estimators/general.py",
           "        dof = n - options.std_ddof\n", "        dof = n\n", ("tests/test_advantages.py",)),
    Mutant("leave-one-out counts the sample itself", "gdpo_nemo/estimators/general.py",
           "        m = n - 1  # number of group-mates of each sample\n", "        m = n\n",
           ("tests/test_advantages.py", "tests/test_nemo_estimator_leave_one_out.py")),
    Mutant("GDPO without its batch norm", "gdpo_nemo/estimators/general.py",
           "    return _batch_norm(advantage_sum, valid.any(dim=1), options, token_mask, scale, sum_terms(rewards.shape[1]))\n",
           "    return advantage_sum\n", ("tests/test_advantages.py",)),
    Mutant("dense path std without Bessel", "gdpo_nemo/estimators/dense.py",
           ".div_(size - options.std_ddof)", ".div_(size)", ("tests/test_dense_kernel.py", "tests/test_advantages.py")),
    Mutant("TRL preset with NeMo RL's group eps", "gdpo_nemo/estimators/options.py",
           '"trl": {"std_ddof": 1, "eps": 1e-4, "batch_norm_eps": 1e-4},', '"trl": {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 1e-4},',
           ("tests/test_advantages.py", "tests/test_peer_conformance.py")),
    Mutant("reward weights ignored", "gdpo_nemo/estimators/compute.py",
           "weights = _weight_vector(names, options.reward_weights, device)", "weights = _weight_vector(names, None, device)",
           ("tests/test_advantages.py",)),
    Mutant("constant groups only when exactly equal", "gdpo_nemo/estimators/groups.py",
           "    return (hi <= lo) | ((hi - lo) <= tolerance * magnitude)\n", "    return hi <= lo\n",
           ("tests/test_advantages.py", "tests/test_estimator_defects.py", "tests/test_collapse.py")),
    Mutant("strict verl GRPO drops the weights", "gdpo_nemo/estimators/strict.py",
           "scores = scores + weight[k] * values[:, k]", "scores = scores + values[:, k]",
           ("tests/test_estimator_defects.py", "tests/test_peer_conformance.py")),
    Mutant("GDPO w/o BN counted by GRPO's key", "gdpo_nemo/estimators/builtin.py",
           'collapse_key="normalized_components", style=PlotStyle("tab:purple"', 'collapse_key="normalized_sum", style=PlotStyle("tab:purple"',
           ("tests/test_collapse.py",)),
    Mutant("a NameError in the numba kernels", "gdpo_nemo/estimators/kernel_numba.py",
           "\njit = numba.njit(", "\nundefined_name\njit = numba.njit(", ("tests/test_dense_kernel.py",)),
    # rewards
    Mutant("gsm8k correctness by substring", "gdpo_nemo/rewards/gsm8k.py",
           "    return 1.0 if extract_answer(completion) == expected else 0.0\n",
           "    return 1.0 if expected in extract_answer(completion) else 0.0\n", ("tests/test_rewards_gsm8k.py",)),
    Mutant("length limit exclusive", "gdpo_nemo/rewards/length.py",
           "short = response_length(completion, num_tokens) <= length_limit", "short = response_length(completion, num_tokens) < length_limit",
           ("tests/test_rewards_math.py", "tests/test_rewards_properties.py")),
    Mutant("toolcall: exact match not required for full marks", "gdpo_nemo/rewards/toolcall.py",
           "        if list(gt_calls) == predicted:\n", "        if len(gt_calls) == len(predicted):\n",
           ("tests/test_rewards_toolcall.py",)),
    Mutant("code bug-free if any test passes", "gdpo_nemo/rewards/code.py",
           "bug_free[row] = 1.0 if all(ok for _, ok in judged) else 0.0", "bug_free[row] = 1.0 if any(ok for _, ok in judged) else 0.0",
           ("tests/test_code_rewards.py", "tests/test_rewards_code_registry.py")),
    # sandbox
    Mutant("sandbox keeps the network", "gdpo_nemo/sandbox/isolation.py",
           '"--unshare-user", "--unshare-pid", "--unshare-net", ', '"--unshare-user", "--unshare-pid", ',
           ("tests/test_sandbox.py", "tests/test_sandbox_integrity.py")),
    Mutant("no address-space limit", "gdpo_nemo/sandbox/_driver.py",
           'resource.setrlimit(resource.RLIMIT_AS, (header["memory_bytes"], header["memory_bytes"]))', "pass",
           ("tests/test_sandbox.py", "tests/test_sandbox_integrity.py")),
    # The filter's jump to its `kill` check dropped (removing `kill` from the number table,
    # this mutant's first form, now crashes the filter's construction: no longer the bug).
    Mutant("kill not filtered", "gdpo_nemo/sandbox/seccomp.py",
           '    code.append((_JEQ_K, "kill", 0, table["kill"]))\n', '',
           ("tests/test_sandbox_hostile_driver.py",)),
    # engines and sweeps (the mutations issue 27 named)
    Mutant("warm start built but the base model trained", "gdpo_nemo/engines/local/trainer.py",
           "        model, tokenizer, start_weights = load_warm_start(config, log=log)\n",
           '        load_warm_start(config, log=log)\n        model, tokenizer = load_policy(policy["model_name"], seed=seed, log=log)\n'
           '        start_weights = {}\n',
           ("tests/test_local_engine.py::test_warm_start_runs_once_and_is_reused_from_the_cache",)),
    Mutant("eval job named like its training job", "gdpo_nemo/sweep/render.py",
           'job_name=f"{run_id.name}.eval"', 'job_name=f"{run_id.name}"', ("tests/test_sweep_cli.py", "tests/test_eval_sweep.py")),
    Mutant("sweep job resumes without a checkpoint", "slurm/templates/local.sbatch",
           'if compgen -G "$RUN_DIR/checkpoints/step_*"', 'if ! compgen -G "$RUN_DIR/checkpoints/step_*"',
           ("tests/test_sweep_render.py",)),
    # config
    Mutant("scale_rewards none still normalizes on NeMo RL", "gdpo_nemo/config/derive.py",
           '"normalize_rewards": normalize and gdpo.get("scale_rewards", "group") != "none",', '"normalize_rewards": normalize,',
           ("tests/test_configs.py", "tests/test_configs_settings.py")),
    Mutant("groups of one rollout accepted", "gdpo_nemo/config/validate.py",
           "    if isinstance(groups, int) and groups < 2:\n", "    if isinstance(groups, int) and groups < 1:\n",
           ("tests/test_configs.py", "tests/test_configs_nemo_traps.py")),
    Mutant("the composer does not decide the estimator", "gdpo_nemo/config/derive.py",
           '"gdpo.computed_by": estimator_decision(gdpo, our_env_blocks(config))[0],', '"gdpo.computed_by": "nemo_rl",',
           ("tests/test_estimator_decision.py",)),
    # joints between the parts (issue 33): where a number passes from one part to the next
    Mutant("validation collector not reset between validations", "gdpo_nemo/engines/nemo/plugin.py",
           "        state.collector.reset()\n        state.in_validation = True\n", "        state.in_validation = True\n",
           ("tests/test_nemo_plugin.py",)),
    Mutant("DAPO group spread by the least varying component", "gdpo_nemo/engines/nemo/sampling.py",
           "for values in components.values()]).amax(dim=0)", "for values in components.values()]).amin(dim=0)",
           ("tests/test_nemo_plugin.py", "tests/nemo_tier/test_grpo_train_hooks.py")),
    Mutant("resume from the oldest checkpoint", "gdpo_nemo/engines/nemo/metrics.py",
           "    return steps[-1][0] if steps else None\n", "    return steps[0][0] if steps else None\n",
           ("tests/test_nemo_plugin.py",)),
    Mutant("paired table pairs runs by position", "gdpo_nemo/analysis/tables.py",
           "stats = paired_comparison([mine[s] for s in seeds], [base[s] for s in seeds],",
           "stats = paired_comparison(list(mine.values())[:len(seeds)], list(base.values())[:len(seeds)],",
           ("tests/test_seed_statistics.py",)),
    Mutant("per-reward family of the last generation batch, not the trained one", "gdpo_nemo/engines/nemo/plugin.py",
           "        if filtering and bool((std != 0).any()):\n            state.generated.append(_unfiltered_rewards(repeated_batch))\n",
           "        state.generated = [_unfiltered_rewards(repeated_batch)]\n",
           ("tests/nemo_tier/test_grpo_train_hooks.py",)),
    Mutant("filtered family over the unfiltered samples", "gdpo_nemo/engines/nemo/metrics.py",
           'metrics = reward_family(mn.FILTERED_REWARD, components, trained["filtered_reward"], adjusted=adjusted)',
           'metrics = reward_family(mn.FILTERED_REWARD, reward_components(generated or trained), trained["filtered_reward"], adjusted=adjusted)',
           ("tests/nemo_tier/test_grpo_train_hooks.py",)),
]


def _copy(dest: Path) -> None:
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
        elif source.exists():
            shutil.copy2(source, dest / name)
    for venv in (".venv-peers", ".venv-nemo", ".venv-bfcl"):  # tests find the tiers by path
        if (REPO / venv).exists():
            (dest / venv).symlink_to(REPO / venv)


def run(mutant: Mutant, budget: float) -> tuple[str, float, str]:
    """("killed" | "survived" | "timeout" | "not applied", seconds, detail)."""
    with tempfile.TemporaryDirectory(prefix="gdpo-mutant-") as tmp:
        root = Path(tmp)
        _copy(root)
        target = root / mutant.path
        text = target.read_text()
        if text.count(mutant.old) != 1:
            return "not applied", 0.0, f"{mutant.path}: the line to mutate is not there once"
        target.write_text(text.replace(mutant.old, mutant.new))
        # A test may be named down to its function (file::test); its file must be in the copy.
        tests = [t for t in mutant.tests if (root / t.split("::")[0]).exists()]
        if not tests:  # never run pytest on nothing named: it would collect the whole suite
            return "error", 0.0, f"none of {', '.join(mutant.tests)} is in the copy"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(PYTHONPATH=str(root), GDPO_NEMO_NUMBA=env.get("GDPO_NEMO_NUMBA", "1"))
        start = time.monotonic()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                  cwd=root, env=env, capture_output=True, text=True, timeout=budget)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start, ""
        seconds = time.monotonic() - start
        last = (done.stdout.strip().splitlines() or [""])[-1]
        if done.returncode == 0:
            return "survived", seconds, last
        if done.returncode == 1 and " failed" in last:
            return "killed", seconds, last
        # An error (a fixture, an import) is not a test that caught the bug: it is reported,
        # not counted, and the mutant or its tests need a look.
        return "error", seconds, last + done.stderr[-300:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="mutant names (substrings) to run")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--budget", type=float, default=600, help="seconds per mutant's tests")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or any(s in m.name for s in args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}; tests {', '.join(m.tests)}")
        return 0
    killed = 0
    for index, mutant in enumerate(chosen, 1):
        outcome, seconds, detail = run(mutant, args.budget)
        killed += outcome in ("killed", "timeout")
        print(f"[{index}/{len(chosen)}] {outcome:>11} {seconds:6.1f} s  {mutant.name}  ({mutant.path}) {detail}", flush=True)
    print(f"mutation score: {killed}/{len(chosen)} killed ({100 * killed / max(1, len(chosen)):.0f}%)")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
