"""Benchmark: vectorized `compute_advantages` vs a per-group Python loop (same numbers).

Prints, for each setting, the median and min time of ours and of the loop peer
(tests.support.advantages_loop) and the ratio. Targets (issue 2): gdpo on 8,192 samples x 3
rewards under 5 ms on a 2-core CPU, and at least 20x faster than the loop. The 1M-sample
batch runs with 1 and with 2 intra-op threads; for each it also prints single-pass bounds
for the same bytes (the rewards, float64: 24 MB) at that thread count: one torch sum over
them, warm in cache as ours finds them (they fit this machine's 32 MB L3), and the time to
stream them from memory at the bandwidth a sum over a 512 MB array reaches; and ours (min)
/ each. Target (issue 16): within 5x of the single-pass bound. For the 1M batch it also
times the same call with the CPU kernel (gdpo_nemo.estimators.kernel, numba) switched off: the
torch ops that run on CUDA or without numba. On a shared machine compare mins, and note
the load (`uptime`).

    PYTHONPATH=. python benchmarks/bench_advantages.py [--quick] [--leave-one-out]

--leave-one-out (issue 48) times leave-one-out instead, the general path's, at 8,192 / 65,536 /
524,288 samples (groups of 16, 3 binary rewards, nemo_rl preset, one thread), beside NeMo RL's
own estimators on the same batch (benchmarks/peers/nemo_rl_leave_one_out.py in .venv-nemo,
`scripts/setup.sh --all`), and prints the growth per 8x samples (8x = linear). Then the same
on an uneven batch (benchmarks/peers/leave_one_out_batches.py: one group of half the samples
beside groups of 4, each with a row whose mates' variance cancels), NeMo RL's own at the two
smaller sizes only (its loop over prompts masks the whole batch for each of 65,537 prompts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import torch

from gdpo_nemo.estimators import kernel as dense_kernel
from benchmarks.peers.leave_one_out_batches import uneven_batch
from gdpo_nemo.estimators import compute_advantages
from tests.support.advantages_loop import loop_advantages


def make_batch(prompts: int, group_size: int, num_rewards: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    rewards = {f"r{k}": torch.randint(0, 2, (prompts * group_size,), generator=generator).double()
               for k in range(num_rewards)}
    group_ids = torch.arange(prompts).repeat_interleave(group_size)
    return rewards, group_ids


def timings(fn, repeats: int) -> tuple[float, float]:
    """(median, min) seconds over `repeats` calls after one warm-up. The min is the figure
    least disturbed by other load on a shared 2-core machine; both are printed."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def bandwidth_bound(rewards: dict, repeats: int) -> tuple[float, float]:
    """Single-pass bounds for the rewards' bytes, in seconds (min over `repeats`):
    (one torch sum over them as they are, i.e. as warm in cache as ours finds them; the same
    bytes streamed from memory, at the read bandwidth of a sum over a 512 MB array)."""
    columns = list(rewards.values())
    _, warm = timings(lambda: [c.sum() for c in columns], repeats)
    nbytes = sum(c.numel() * c.element_size() for c in columns)
    big = torch.ones(64 * 1024 * 1024, dtype=torch.float64)  # 512 MB, far beyond any cache here
    _, big_time = timings(lambda: big.sum(), 5)
    return warm, big_time * nbytes / (big.numel() * big.element_size())


REPO = Path(__file__).resolve().parents[1]
LEAVE_ONE_OUT_SIZES = (8_192, 65_536, 524_288)


def nemo_rl_leave_one_out(sizes, uneven: bool = False) -> dict:
    """{(samples, estimator): seconds} of NeMo RL's own estimators, from its venv ({} without it)."""
    python = REPO / ".venv-nemo" / "bin" / "python"
    if not python.exists():
        print("NeMo RL's own: .venv-nemo missing (scripts/setup.sh --all makes it); not timed")
        return {}
    layout = ["--uneven"] if uneven else []
    proc = subprocess.run([str(python), str(REPO / "benchmarks/peers/nemo_rl_leave_one_out.py"), *layout,
                           *map(str, sizes)], capture_output=True, text=True, timeout=3600, cwd=REPO)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            found[(row["samples"], row["estimator"])] = row["seconds"]
    if proc.returncode:
        print(f"NeMo RL's own stopped (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return found


def leave_one_out() -> None:
    torch.set_num_threads(1)
    print("leave-one-out, nemo_rl preset, groups of 16, 3 binary rewards, 1 thread (general path)")
    leave_one_out_table({samples: make_batch(samples // 16, 16, 3) for samples in LEAVE_ONE_OUT_SIZES},
                        nemo_rl_leave_one_out(LEAVE_ONE_OUT_SIZES))
    print("leave-one-out, uneven: one group of half the samples beside groups of 4, a cancelled row in each")
    batches = {}
    for samples in LEAVE_ONE_OUT_SIZES:
        columns, group_ids = uneven_batch(samples)
        batches[samples] = ({f"r{k}": column for k, column in enumerate(columns)}, group_ids)
    leave_one_out_table(batches, nemo_rl_leave_one_out(LEAVE_ONE_OUT_SIZES[:2], uneven=True))


def leave_one_out_table(batches: dict, theirs: dict) -> None:
    """Ours (min and median) on each {samples: (rewards, group_ids)} beside NeMo RL's `theirs`."""
    print(f"{'samples':>9}{'estimator':>10}{'ours median':>13}{'ours min':>10}{'NeMo RL':>11}{'NeMo RL/ours':>14}")
    previous: dict = {}
    for samples, (rewards, group_ids) in batches.items():
        for estimator in ("gdpo", "grpo"):
            repeats = 20 if samples <= 65_536 else 5
            median, low = timings(lambda: compute_advantages(rewards, group_ids, estimator, preset="nemo_rl",
                                                             leave_one_out=True), repeats)
            peer = theirs.get((samples, estimator))
            growth = f"  x{low / previous[estimator]:.1f} per 8x samples" if estimator in previous else ""
            previous[estimator] = low
            peer_text = f"{peer * 1e3:>9.0f}ms{peer / low:>13.0f}x" if peer is not None else f"{'-':>11}{'-':>14}"
            print(f"{samples:>9,}{estimator:>10}{median * 1e3:>11.1f}ms{low * 1e3:>8.1f}ms{peer_text}{growth}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 1M-sample loop (it takes a while)")
    parser.add_argument("--leave-one-out", action="store_true", help="time leave-one-out beside NeMo RL's own instead")
    args = parser.parse_args()
    if args.leave_one_out:
        leave_one_out()
        return
    # (label, prompts, G, rewards, repeats of ours, repeats of the loop, torch threads): small
    # batches are dispatch-bound, so one intra-op thread is fastest for them.
    settings = [("8,192 = 512 prompts x 16 x 3 rewards", 512, 16, 3, 200, 3, 1)]
    for threads in (1, 2):  # the loop peer is single-threaded Python: timed once
        loop_repeats = 0 if args.quick or threads > 1 else 1
        settings.append((f"1M = 62,500 x 16 x 3, {threads} thread(s)", 62_500, 16, 3, 20, loop_repeats, threads))
    kernel_available = dense_kernel.available()
    print(f"CPU kernel (numba): {'on' if kernel_available else 'off (numba missing or GDPO_NEMO_NUMBA=0)'}")
    print(f"{'setting':<38}{'estimator':<11}{'ours median':>12}{'ours min':>10}{'loop':>10}{'loop/ours':>10}")
    for label, prompts, group_size, num_rewards, repeats, loop_repeats, threads in settings:
        torch.set_num_threads(threads)
        rewards, group_ids = make_batch(prompts, group_size, num_rewards)
        as_lists = {k: v.tolist() for k, v in rewards.items()}
        ids = group_ids.tolist()
        # The bounds at this thread count, measured once per setting (a 512 MB sum).
        bounds = bandwidth_bound(rewards, 20) if prompts * group_size >= 1_000_000 else None
        for estimator in ("gdpo", "grpo"):
            ours, ours_min = timings(lambda: compute_advantages(rewards, group_ids, estimator), repeats)
            if loop_repeats:
                loop, _ = timings(lambda: loop_advantages(as_lists, ids, estimator), loop_repeats)
                check = torch.tensor(loop_advantages(as_lists, ids, estimator), dtype=torch.float64)
                assert torch.allclose(compute_advantages(rewards, group_ids, estimator).double(), check, atol=1e-4)
                print(f"{label:<38}{estimator:<11}{ours * 1e3:>10.2f}ms{ours_min * 1e3:>8.2f}ms"
                      f"{loop * 1e3:>8.0f}ms{loop / ours:>9.0f}x")
            else:
                print(f"{label:<38}{estimator:<11}{ours * 1e3:>10.2f}ms{ours_min * 1e3:>8.2f}ms{'skipped':>10}")
            if kernel_available and prompts * group_size >= 1_000_000:
                # The same call with the CPU kernel switched off: the torch ops (CUDA's path).
                dense_kernel._available = False
                try:
                    _, torch_min = timings(lambda: compute_advantages(rewards, group_ids, estimator), repeats)
                finally:
                    dense_kernel._available = True
                print(f"{'':<38}{'':<11}torch ops alone (no numba kernel): {torch_min * 1e3:.2f} ms min,"
                      f" {torch_min / ours_min:.1f}x ours")
            if bounds is not None:
                warm, memory = bounds
                megabytes = sum(v.numel() * v.element_size() for v in rewards.values()) / 1e6
                print(f"{'':<38}{'':<11}one pass over its {megabytes:.0f} MB: {warm * 1e3:.2f} ms warm in cache,"
                      f" {memory * 1e3:.2f} ms from memory; ours (min) / those: {ours_min / warm:.1f}x,"
                      f" {ours_min / memory:.1f}x (target <= 5x)")


if __name__ == "__main__":
    main()
