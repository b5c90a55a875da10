"""What a local run shows while it trains: a tqdm bar (`gdpo.local.progress: true`) or one
line per step, each with the step's mean reward components and seconds per step."""

from __future__ import annotations

from gdpo_nemo.runs import metric_names as mn


class _StepLines:
    """Progress without a bar (`gdpo.local.progress: false`, as sweep jobs run): one line
    per step, flushed, so that `tail -f` of a Slurm log shows the run's life as NeMo RL's
    and TRL's logs do."""

    def __init__(self, total: int, done: int, log):
        self.total, self.step, self.log = total, done, log

    def update(self, n=1):
        self.step += n

    def set_postfix_str(self, text):
        self.log(f"step {self.step}/{self.total}: {text}")

    def close(self):
        pass


def progress_bar(total: int, done: int, enabled: bool, log=print):
    """A tqdm bar over `total` steps starting at `done` when `enabled`, else step lines
    through `log`; either has `update(n)`, `set_postfix_str(text)` and `close()`."""
    if not enabled:
        return _StepLines(total, done, log)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="train", unit="step", dynamic_ncols=True)


def postfix(metrics: dict, names) -> str:
    """The progress text of a step's metrics record: each reward component `names` mean,
    then the step's wall seconds ("format=1.00 correctness=0.25 3.2s/step")."""
    parts = [f"{name}={metrics.get(mn.train(mn.reward(name)), float('nan')):.2f}" for name in names]
    parts.append(f"{metrics.get(mn.timing(mn.TRAIN, mn.TOTAL_STEP_TIME), 0.0):.1f}s/step")
    return " ".join(parts)

