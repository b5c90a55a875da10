"""Per-component reward metrics and collapse diagnostics for NeMo RL rollouts; metrics.jsonl.

NeMo RL logs only aggregates of ``total_reward`` (the component sum), and its
``validation/accuracy`` is the mean of that sum on multi-reward environments. The rollout
hook (``plugin.install_hooks``) adds, from the rollout batch's ``reward/<name>`` tensors:

- ``reward/<name>``: mean of each component (logged as ``train/reward/<name>`` and
  ``validation/reward/<name>``), NaN values left out;
- ``adv/zero_std_frac/<name>``: share of prompt groups in which the component is constant;
- ``adv/distinct_groups``: distinct sorted advantage tuples among the batch's groups under
  the run's estimator (paper Fig. 2-3 at batch level; see gdpo_nemo.estimators.collapse).

The group diagnostics need groups of >= 2 samples; they are left out otherwise (validation
with one generation per prompt).

`StepMetricsWriter` mirrors every ``Logger.log_metrics`` call into ``<run dir>/metrics.jsonl``
(docs/interfaces.md, "Run dir"), merging the calls of one step into one record.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor

from gdpo_nemo.estimators.collapse import (collapsed_group_fraction, component_advantage_gaps,
                                           distinct_advantage_groups, zero_std_fraction)
from gdpo_nemo.config.settings import EstimatorSettings
from gdpo_nemo.engines.nemo.estimators import estimator_advantages, reward_components
from gdpo_nemo.runs.rundir import checkpoint_steps
from gdpo_nemo.runs import metric_names as mn

__all__ = [
    "StepMetricsWriter",
    "ValidationCollector",
    "batch_group_ids",
    "component_metrics",
    "latest_checkpoint_step",
    "reward_family",
    "trained_batch_metrics",
]


def batch_group_ids(batch: Mapping) -> Tensor | None:
    """Tensor[B] prompt group of each sample of a rollout batch, or None if unknown.

    NeMo RL repeats each prompt's datum (with its ``idx``) once per generation, so samples
    of one prompt share ``idx``; without ``idx``, identical first-message token ids group.
    """
    if "idx" in batch:
        return torch.as_tensor([int(i) for i in batch["idx"]], dtype=torch.long)
    logs = batch.get("message_log")
    if not logs:
        return None
    keys: dict = {}
    ids = []
    for log in logs:
        first = log[0] if log else {}
        tokens = first.get("token_ids")
        key = tuple(torch.as_tensor(tokens).tolist()) if tokens is not None else str(first.get("content"))
        ids.append(keys.setdefault(key, len(keys)))
    return torch.as_tensor(ids, dtype=torch.long)


def _groups_of_two_or_more(group_ids: Tensor | None) -> bool:
    if group_ids is None or group_ids.numel() == 0:
        return False
    _, counts = torch.unique(group_ids, return_counts=True)
    return bool((counts >= 2).all())


def component_metrics(
    components: Mapping[str, Tensor],
    group_ids: Tensor | None,
    settings: EstimatorSettings | None,
) -> dict[str, float]:
    """{"reward/<name>": mean, "adv/zero_std_frac/<name>": share, "adv/distinct_groups": n}.

    components: {name: Tensor[B]}. group_ids: Tensor[B] or None. settings: the run's
    estimator (for distinct_groups), or None to skip it.
    """
    return {**_component_means(mn.REWARD, components), **group_diagnostics(components, group_ids, settings)}


def _component_means(family: str, components: Mapping[str, Tensor]) -> dict[str, float]:
    """{"<family>/<name>": mean of each component, NaN values left out (NaN when all are)}."""
    metrics: dict[str, float] = {}
    for name, values in components.items():
        values = torch.as_tensor(values, dtype=torch.float64)
        valid = values[~torch.isnan(values)]
        metrics[mn.name(family, name)] = float(valid.mean()) if valid.numel() else float("nan")
    return metrics


def group_diagnostics(
    components: Mapping[str, Tensor],
    group_ids: Tensor | None,
    settings: EstimatorSettings | None,
) -> dict[str, float]:
    """{"adv/zero_std_frac/<name>": share, "adv/collapsed_frac": share, "adv/distinct_groups": n,
    "adv/gap/<name>": gap} ({} without groups of two or more samples; no distinct_groups or
    gaps without `settings`)."""
    if not components or not _groups_of_two_or_more(group_ids):
        return {}
    tolerance = (settings.options.residue_tolerance or 0.0) if settings is not None else 0.0
    shares = zero_std_fraction(dict(components), group_ids, tolerance)
    metrics = {mn.zero_std_frac(name): share for name, share in shares.items()}
    weights = settings.options.reward_weights if settings is not None else None
    metrics[mn.COLLAPSED_FRAC] = collapsed_group_fraction(dict(components), group_ids, weights)
    if settings is not None:
        advantages = estimator_advantages(settings, components, group_ids)
        metrics[mn.DISTINCT_GROUPS] = float(distinct_advantage_groups(advantages, group_ids))
        metrics.update({mn.gap(name): gap
                        for name, gap in component_advantage_gaps(advantages, dict(components), group_ids).items()})
    return metrics


def reward_family(family: str, components: Mapping[str, Tensor], totals: Tensor, *, adjusted: bool) -> dict[str, float]:
    """{"<family>/<name>": mean} of each component over one set of samples, and with
    `adjusted` (NeMo RL's reward scaling or shaping is on) ``"<family>_adjustment"``: the
    mean of what NeMo RL's total adds to the component sum (`totals` - sum of components;
    a shaping penalty, a scaling's offset), so that the family adds up to NeMo RL's total of
    the same set. components: {name: Tensor[B]}; totals: Tensor[B], NeMo RL's total of each
    sample. NaN components are left out of their mean (and out of the adjustment).
    """
    metrics = _component_means(family, components)
    if adjusted and components:
        stacked = torch.stack([torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in components.values()])
        residue = torch.as_tensor(totals, dtype=torch.float64).reshape(-1) - stacked.sum(dim=0)
        residue = residue[~torch.isnan(residue)]
        metrics[f"{family}_adjustment"] = float(residue.mean()) if residue.numel() else float("nan")
    return metrics


def trained_batch_metrics(
    trained: Mapping,
    generated: Mapping[str, Tensor] | None,
    settings: EstimatorSettings | None,
    *,
    filtered: bool,
    adjusted: bool,
) -> dict[str, float]:
    """The reward families and diagnostics of one training step (docs/interfaces.md,
    "Which samples each reward family covers").

    trained: the batch NeMo RL trains on (after dynamic sampling), with its ``reward/<name>``
    keys and NeMo RL's ``total_reward`` (and ``filtered_reward`` when `filtered`).
    generated: with dynamic sampling, {"reward/<name>": Tensor[N], "total_reward": Tensor[N]}
    of the unfiltered samples whose total NeMo RL logs as ``train/reward`` (None: the
    trained batch is that set). Gives ``reward/<name>`` (adds up to NeMo RL's ``reward``),
    with dynamic sampling ``filtered_reward/<name>`` (adds up to ``filtered_reward``), and
    ``adv/zero_std_frac/<name>``, ``adv/distinct_groups`` of the trained batch (what the
    estimator saw).
    """
    components = reward_components(trained)
    if not components:
        return {}
    diagnostics = group_diagnostics(components, batch_group_ids(trained), settings)
    if not filtered:
        return {**reward_family(mn.REWARD, components, trained["total_reward"], adjusted=adjusted), **diagnostics}
    metrics = reward_family(mn.FILTERED_REWARD, components, trained["filtered_reward"], adjusted=adjusted)
    if generated is not None:
        metrics.update(reward_family(mn.REWARD, reward_components(generated), generated["total_reward"], adjusted=adjusted))
    return {**metrics, **diagnostics}


def rollout_metrics(batch: Mapping, settings: EstimatorSettings | None) -> dict[str, float]:
    """`component_metrics` of one rollout batch (empty if it carries no reward/<name> keys)."""
    components = reward_components(batch)
    if not components:
        return {}
    return component_metrics(components, batch_group_ids(batch), settings)


class ValidationCollector:
    """Gathers the reward components of every validation batch; `summary()` gives the
    metrics over all of them (group ids are offset per batch so groups never merge)."""

    def __init__(self, settings: EstimatorSettings | None):
        self.settings = settings
        self.reset()

    def reset(self) -> None:
        """Forget the batches seen so far."""
        self._parts: dict[str, list[Tensor]] = {}
        self._groups: list[Tensor] = []
        self._grouped = True
        self._offset = 0
        self._data_errors: int | None = None

    def add(self, batch: Mapping, data_errors: int | None = None) -> None:
        """Keep one validation rollout batch's components and groups, and the number of its
        samples our environments scored with a broken ground truth (None: no env of ours)."""
        if data_errors is not None:
            self._data_errors = (self._data_errors or 0) + data_errors
        components = reward_components(batch)
        if not components:
            return
        for name, values in components.items():
            self._parts.setdefault(name, []).append(values)
        groups = batch_group_ids(batch)
        if groups is None:
            self._grouped = False
            return
        _, dense = torch.unique(groups, return_inverse=True)
        self._groups.append(dense + self._offset)
        self._offset += int(dense.max()) + 1 if dense.numel() else 0

    def summary(self) -> dict[str, float]:
        """Metrics over every batch added since the last reset (with ``data_errors`` when
        our environments answered)."""
        errors = {} if self._data_errors is None else {"data_errors": self._data_errors}
        if not self._parts:
            return errors
        components = {name: torch.cat(parts) for name, parts in self._parts.items()}
        groups = torch.cat(self._groups) if self._grouped and self._groups else None
        return {**component_metrics(components, groups, self.settings), **errors}


def _scalar(value) -> bool:
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, Tensor):
        return value.numel() == 1
    return hasattr(value, "item") and getattr(value, "size", 2) == 1


def latest_checkpoint_step(checkpoint_dir) -> int | None:
    """The largest N of the ``step_<N>`` folders NeMo RL saved in `checkpoint_dir`, or None."""
    steps = checkpoint_steps(checkpoint_dir)
    return steps[-1][0] if steps else None


class StepMetricsWriter:
    """Writes NeMo RL's logged metrics to ``<run_dir>/metrics.jsonl``, one record per step.

    `log(metrics, step, prefix)` takes what ``Logger.log_metrics`` gets; scalar values are
    kept as ``<prefix>/<key>``, the rest (histograms, tables) skipped; calls for the same
    step are merged, and a record is written at the step's last call (``finished``), when a
    later step arrives, or at `close`.
    Prefixes in `skip_prefixes` (Ray GPU monitoring, which counts its own steps) are not
    recorded. `resume_step`: keep existing records up to that step (NeMo RL resumed from
    that checkpoint), None to start a fresh file.
    """

    def __init__(self, run_dir, *, resume_step: int | None = None, skip_prefixes: tuple[str, ...] = ("ray",)):
        from gdpo_nemo.runs.tracking import Tracker

        self._tracker = Tracker(run_dir, wandb_enabled=False, resume_step=resume_step)
        self.resume_step = resume_step
        self._skip = skip_prefixes
        self._step: int | None = None
        self._record: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._tracker.path

    def earlier_records(self) -> list[dict]:
        """The records a resumed run keeps from its earlier jobs (steps up to `resume_step`,
        oldest first); [] for a fresh run."""
        if self.resume_step is None:
            return []
        from gdpo_nemo.runs.rundir import read_metrics_file

        with self._lock:  # Tracker.log flushes each record it writes
            return [r for r in read_metrics_file(self.path) if r["step"] <= self.resume_step]

    def log(self, metrics: Mapping, step: int, prefix: str = "", *, finished: bool = False) -> None:
        """Add one log call's scalar metrics to the record of `step`; `finished` (NeMo RL's
        ``step_finished``: the step's last call) writes the record now."""
        skipped = bool(prefix) and any(prefix == p or prefix.startswith(p + "/") for p in self._skip)
        with self._lock:
            if not skipped:
                if self._step is not None and step != self._step:
                    self._flush()
                self._step = int(step)
                for key, value in metrics.items():
                    if _scalar(value):
                        name = f"{prefix}/{key}" if prefix else str(key)
                        self._record[name] = value.item() if hasattr(value, "item") else value
            if finished:
                self._flush()
                self._step = None

    def _flush(self) -> None:
        if self._step is not None and self._record:
            self._tracker.log(self._record, self._step)
        self._record = {}

    def close(self, *, complete: bool = True) -> None:
        """Write the last step's record and close the file. `complete` False (the run failed
        or was stopped inside a step): a step whose last log call never came is not a step, so
        its partial record is left out (one line on stderr says so), and the run's last
        record is its last finished step."""
        with self._lock:
            if complete:
                self._flush()
            elif self._step is not None and self._record:
                print(f"metrics.jsonl: step {self._step} did not finish; its {len(self._record)} logged values are not"
                      " written as a step", file=sys.stderr, flush=True)
                self._record = {}
            self._step = None
            self._tracker.close()
