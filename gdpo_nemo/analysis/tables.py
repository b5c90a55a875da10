"""The paper's tables from a `Dataset`: our mean +- std over seeds beside the paper's value.

Every table is a `TableSpec` (data, not code): which task's runs it reads, which methods
(a method = conditions on the run table, e.g. estimator ``gdpo`` with a conditioned length
reward), which columns (a column = one tidy metric, or the mean of other columns per run),
and whether methods form rows (Table 1) or column groups (Tables 3-5).

For one cell, each matching run contributes its value at its last logged step (the final
checkpoint's evaluation); the cell shows the mean, the standard deviation over runs, a 95 %
Student t interval of the mean (stats.t_interval), n, the paper's number and our mean minus it.
Runs that crashed or stopped short of their planned steps are left out of the mean
(``include_incomplete=True`` keeps them); they, missing seeds, missing metrics and NaN
values are each named in the table's footnotes, never dropped silently.

The ``base`` method reads runs whose algo is ``base`` (an evaluation of the initial
model); where a model has none, it uses the step-0 evaluations of the table's trained runs
(the same initial weights), and says so in a footnote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators import estimator_info
from gdpo_nemo.analysis.frame import Dataset
from gdpo_nemo.analysis.paper import PaperValues
from gdpo_nemo.analysis.stats import paired_comparison, summarize
from gdpo_nemo.runs import metric_names as mn


@dataclass(frozen=True)
class Method:
    """A row or column group: the runs whose run-table columns equal `where`."""

    key: str
    label: str
    where: tuple = ()
    base: bool = False


@dataclass(frozen=True)
class Column:
    """A tidy `metric` (``{benchmark}`` is filled in), or the per-run mean of `parts` columns."""

    key: str
    label: str
    metric: str = ""
    parts: tuple = ()


@dataclass(frozen=True)
class TableSpec:
    key: str
    title: str
    task: str
    methods: tuple
    columns: tuple
    benchmarks: tuple = ()  # ((key, label), ...): one row per benchmark
    methods_in: str = "rows"  # "rows" or "columns"
    where: tuple = ()  # conditions on every non-base run
    scale: float = 100.0  # fractions in the logs, percent in the table
    decimals: int = 1


def runs_of(estimator: str, suffix: str = "", key: str | None = None, **where) -> Method:
    """The method "runs of `estimator`" (and `where`), keyed `key` (default: the estimator's
    name) and labelled with the registry's label plus `suffix` ("GDPO 2-obj"); a ValueError
    for an estimator that is not registered."""
    label = estimator_info(estimator).label + suffix
    return Method(key or estimator, label, tuple(sorted({"estimator": estimator, **where}.items())))


BASE = Method("base", "Base", base=True)
_BFCL_COLUMNS = (
    Column("live", "Live", "eval/bfcl/live"),
    Column("multi_turn", "Multi-Turn", "eval/bfcl/multi_turn"),
    Column("non_live", "Non-Live", "eval/bfcl/non_live"),
    Column("avg_acc", "Avg Acc", parts=("live", "multi_turn", "non_live")),
    Column("correct_format", "Correct Format", "eval/bfcl/correct_format"),
)
_MATH_BENCHMARKS = (("math", "MATH"), ("aime", "AIME"), ("amc", "AMC"), ("minerva", "Minerva"), ("olympiad", "Olympiad"))
_MATH_COLUMNS = (Column("acc", "Acc", "eval/{benchmark}/acc"), Column("exceed", "Exceed", "eval/{benchmark}/exceed"))
_HELDOUT_COLUMNS = (Column("acc", "Acc", mn.validation(mn.reward("correctness"))), Column("exceed", "Exceed", mn.validation(mn.EXCEED_RATE)))
HELDOUT_METRICS = frozenset(column.metric for column in _HELDOUT_COLUMNS)

TABLES: tuple[TableSpec, ...] = (
    TableSpec("table1", "Table 1: tool calling on BFCL-v3", "toolcall",
              (BASE, runs_of("grpo"), runs_of("grpo_no_std"), runs_of("gdpo")), _BFCL_COLUMNS, decimals=2),
    TableSpec("table2", "Table 2: tool calling, estimator ablations", "toolcall",
              (runs_of("grpo"), runs_of("grpo_no_std"), runs_of("gdpo_no_bn"), runs_of("gdpo")),
              _BFCL_COLUMNS, decimals=2),
    TableSpec("table3", "Table 3: math with a length reward (Acc / Exceed, %)", "math",
              (BASE, runs_of("grpo"), runs_of("gdpo")),
              _MATH_COLUMNS, _MATH_BENCHMARKS, "columns", (("conditioned_length", False), ("length_weight", 1.0))),
    TableSpec("table4", "Table 4: length vs conditioned length reward (Acc / Exceed, %)", "math",
              (BASE, *(runs_of(e, f" ({label})", f"{e}_{key}", conditioned_length=conditioned)
                       for key, label, conditioned in (("length", "R_length", False), ("conditioned", "conditioned", True))
                       for e in ("grpo", "gdpo"))),
              _MATH_COLUMNS, _MATH_BENCHMARKS, "columns", (("length_weight", 1.0),)),
    # The paper's Acc / Exceed on the local engine's own held-out problems (its greedy
    # validation: validation/reward/correctness, validation/exceed_rate), for runs of the
    # offline math set (the study of rewards in tension, paper_figures/tension_study/).
    TableSpec("table3_heldout", "Table 3 analog: held-out problems of the run's task (Acc / Exceed, %)", "math",
              (BASE, runs_of("grpo"), runs_of("gdpo")), _HELDOUT_COLUMNS, (("heldout", "Held-out"),), "columns",
              (("conditioned_length", False), ("length_weight", 1.0))),
    TableSpec("table4_heldout", "Table 4 analog: held-out problems, length vs conditioned length (Acc / Exceed, %)",
              "math", (BASE, *(runs_of(e, f" ({label})", f"{e}_{key}", conditioned_length=conditioned)
                               for key, label, conditioned in (("length", "R_length", False),
                                                               ("conditioned", "conditioned", True))
                               for e in ("grpo", "gdpo"))),
              _HELDOUT_COLUMNS, (("heldout", "Held-out"),), "columns", (("length_weight", 1.0),)),
    TableSpec("table5", "Table 5: coding (pass / exceed / bug, %)", "code",
              (BASE, *(runs_of(e, f" {n}-obj", f"{e}_{n}obj", num_rewards=n) for n in (2, 3) for e in ("grpo", "gdpo"))),
              (Column("pass", "Pass", "eval/{benchmark}/pass"), Column("exceed", "Exceed", "eval/{benchmark}/exceed"),
               Column("bug", "Bug", "eval/{benchmark}/bug")),
              (("apps", "Apps"), ("codecontests", "CodeContests"), ("codeforces", "Codeforces"), ("taco", "Taco")), "columns"),
    TableSpec("weight_ablation", "Weight ablation: length weight (Acc / Exceed, %)", "math",
              tuple(runs_of(e, f" w_length={w}", f"{e}_w{w}", length_weight=w)
                    for e in ("grpo", "gdpo") for w in (1.0, 0.75, 0.5, 0.25)),
              _MATH_COLUMNS, _MATH_BENCHMARKS, "rows", (("conditioned_length", False),)),
)
TABLES_BY_KEY = {spec.key: spec for spec in TABLES}


@dataclass
class TableResult:
    """A computed table: one row per cell in `cells`, numbered `footnotes`."""

    spec: TableSpec
    cells: pd.DataFrame
    footnotes: list = field(default_factory=list)
    models: list = field(default_factory=list)  # (tag, label) in row order


CELL_COLUMNS = ["model", "benchmark", "method", "column", "mean", "std", "low", "high", "n", "clipped", "paper", "diff", "runs"]


def _matches(runs: pd.DataFrame, where) -> pd.Series:
    mask = pd.Series(True, index=runs.index)
    for column, value in where:
        if isinstance(value, float) and column in runs:
            mask &= np.isclose(runs[column].astype(float), value, equal_nan=False)
        else:
            mask &= runs[column] == value
    return mask


def _short_runs(runs: pd.DataFrame) -> pd.Series:
    """Runs that stopped before their planned steps (config max_steps, else their peers' last step)."""
    peers_last = runs.groupby(["experiment", "task", "model"])["last_step"].transform("max")
    planned = runs["max_steps"].where(runs["max_steps"].notna(), peers_last)
    return (runs["algo"] != "base") & (runs["last_step"] >= 0) & (runs["last_step"] < planned)


def _incomplete_reason(run) -> str | None:
    """Why a run's final value is not comparable ("crashed at step 5 of 20", "stopped short
    at step 5 of 20", "unfinished at step 20 of 20"), or None; `run` is a run-table row with a
    ``short`` column (`_short_runs`). A run its source calls unfinished (no DONE marker, no W&B
    exit record: still running, or its job died) is not a finished seed even when its last
    record is its last planned step: a job that dies in its last step leaves just that."""
    if run["status"] not in ("crashed", "unfinished") and not run["short"]:
        return None
    why = "crashed" if run["status"] == "crashed" else "stopped short" if run["short"] else "unfinished"
    planned = "" if pd.isna(run["max_steps"]) else f" of {int(run['max_steps'])}"
    return f"{why} at step {int(run['last_step'])}{planned}"


def eval_index(metrics: pd.DataFrame) -> tuple[dict, dict]:
    """({(run_id, metric): last value}, {(run_id, metric): value at step 0}) of ``eval/*``
    metrics and of the validation metrics a table reads (`HELDOUT_METRICS`).

    One pass over the frame, shared by every cell of every table.
    """
    names = metrics["metric"].astype("category")
    evals = [c for c in names.cat.categories if str(c).startswith("eval/") or str(c) in HELDOUT_METRICS]
    rows = metrics[names.isin(evals)]
    if rows.empty:
        return {}, {}
    rows = rows.astype({"run_id": str, "metric": str}).sort_values(["run_id", "metric", "step"], kind="stable")
    last = rows.groupby(["run_id", "metric"]).tail(1)
    zero = rows[rows["step"] == 0]
    return (dict(zip(zip(last["run_id"], last["metric"]), last["value"])),
            dict(zip(zip(zero["run_id"], zero["metric"]), zero["value"])))


def compute_table(
    spec: TableSpec,
    dataset: Dataset,
    paper: PaperValues,
    *,
    include_incomplete: bool = False,
    expected_seeds: list[int] | None = None,
    resamples: int = 10_000,
    eval_indexes: tuple | None = None,
) -> TableResult:
    """Compute every cell of `spec` from `dataset` (see the module docstring).

    `eval_indexes` is `eval_index(dataset.metrics)` when the caller already has it.
    """
    notes: list[str] = []
    runs = dataset.runs
    task_runs = runs[runs["task"] == spec.task].copy()
    if not task_runs.empty:
        task_runs["short"] = _short_runs(task_runs)
    trained_mask = (task_runs["algo"] != "base") & _matches(task_runs, spec.where) if not task_runs.empty else pd.Series(dtype=bool)

    method_runs: dict[str, pd.DataFrame] = {}
    for method in spec.methods:
        if task_runs.empty:
            method_runs[method.key] = task_runs
        elif method.base:
            method_runs[method.key] = task_runs[task_runs["algo"] == "base"]
        else:
            method_runs[method.key] = task_runs[trained_mask & _matches(task_runs, method.where)]

    used = pd.concat(method_runs.values()) if method_runs else task_runs
    used = used[~used.index.duplicated()] if not used.empty else used
    excluded: set[str] = set()
    if not used.empty:
        for _, run in used.sort_values("run_id").iterrows():
            reason = _incomplete_reason(run)
            if reason:
                verdict = "kept in the mean (include_incomplete)" if include_incomplete else "left out of the mean"
                notes.append(f"{run['run_id']}: {reason}; {verdict}.")
                if not include_incomplete:
                    excluded.add(run["run_id"])
            elif run["status"] == "unfinished" and run["algo"] != "base":
                notes.append(f"{run['run_id']}: reached step {int(run['last_step'])} but has no DONE marker or clean exit; kept.")

    tags = sorted(set(used["model"])) if not used.empty else []
    covered = {paper.model_key(t) for t in tags}
    in_table = {k[1] for k in paper.values if k[0] == spec.key} - covered
    paper_models = [m for m in paper.models if m in in_table] + sorted(in_table - set(paper.models))  # the YAML's order
    models = [(t, paper.model_label(t)) for t in tags] + [(k, paper.models.get(k, {}).get("label", k)) for k in paper_models]
    if not tags:
        notes.append(f"No runs of task {spec.task!r} match this table in the source; paper values shown for reference.")

    benchmarks = spec.benchmarks or (("", ""),)
    indexes = eval_indexes if eval_indexes is not None else eval_index(dataset.metrics)
    problem_runs = set(dataset.problems["run_id"]) if not dataset.problems.empty else set()
    cells = []
    for tag, _label in models:
        paper_model = paper.model_key(tag) or tag
        per_model_trained = task_runs[trained_mask & (task_runs["model"] == tag)] if not task_runs.empty else task_runs
        seeds = sorted(set(expected_seeds) if expected_seeds else set(per_model_trained["seed"]))
        for method in spec.methods:
            chosen = method_runs[method.key]
            chosen = chosen[chosen["model"] == tag] if not chosen.empty else chosen
            kept = chosen[~chosen["run_id"].isin(excluded)] if not chosen.empty else chosen
            fallback = False
            if method.base and kept.empty and not per_model_trained.empty:
                initial = per_model_trained[per_model_trained["run_id"].isin(_runs_with_step_zero_evals(indexes, spec))]
                initial = initial[~initial["run_id"].isin(excluded)]
                if initial.empty:
                    notes.append(f"{paper.model_label(tag)} Base: no runs with algo 'base' and no step-0 evaluations.")
                else:
                    kept, fallback = initial, True
                    notes.append(f"{paper.model_label(tag)} Base: no runs with algo 'base'; used the step-0 evaluations of {len(kept)} trained run(s).")
            has_paper = any(k[0] == spec.key and k[1] == paper_model and k[3] == method.key for k in paper.values)
            if not method.base and tag in set(used["model"]):
                if chosen.empty and has_paper:
                    notes.append(f"{paper.model_label(tag)} {method.label}: no runs (the paper reports this row).")
                elif not chosen.empty:
                    missing = sorted(set(seeds) - set(chosen["seed"]))
                    if missing:
                        notes.append(f"{paper.model_label(tag)} {method.label}: seed(s) {', '.join(map(str, missing))} missing.")
            run_ids = list(kept["run_id"]) if not kept.empty else []
            flagged = sorted(set(run_ids) & problem_runs)
            if flagged:
                notes.append(f"{paper.model_label(tag)} {method.label}: {', '.join(flagged)} had log problems (see problems).")
            for bench_key, _bench_label in benchmarks:
                per_run = _column_values(spec, indexes, run_ids, bench_key, fallback, notes, f"{paper.model_label(tag)} {method.label}")
                for column in spec.columns:
                    values = per_run.get(column.key, {})
                    finite = [v for v in values.values() if math.isfinite(v)]
                    # every column is a rate: fractions in the logs, 0..scale in the table
                    stats = summarize(np.array(finite) * spec.scale, resamples=resamples, bounds=(0.0, spec.scale))
                    paper_value = paper.get(spec.key, paper_model, bench_key, method.key, column.key)
                    diff = stats["mean"] - paper_value if paper_value is not None and stats["n"] else math.nan
                    cells.append({"model": tag, "benchmark": bench_key, "method": method.key, "column": column.key,
                                  **stats, "paper": math.nan if paper_value is None else paper_value, "diff": diff,
                                  "runs": ",".join(sorted(values))})
    frame = pd.DataFrame(cells, columns=CELL_COLUMNS)
    return TableResult(spec, frame, notes, models)


def _runs_with_step_zero_evals(indexes, spec: TableSpec) -> set[str]:
    prefixes = tuple(c.metric.split("{")[0] for c in spec.columns if c.metric)
    return {run for (run, metric) in indexes[1] if metric.startswith(prefixes)}


def _column_values(spec, indexes, run_ids, benchmark, at_step_zero, notes, where_label) -> dict[str, dict[str, float]]:
    """{column key: {run_id: value}} for the given runs (NaN values kept, and noted)."""
    index_last, index_zero = indexes
    out: dict[str, dict[str, float]] = {}
    for column in spec.columns:
        if column.parts:
            continue
        metric = column.metric.format(benchmark=benchmark)
        index = index_zero if at_step_zero else index_last
        values = {r: index[(r, metric)] for r in run_ids if (r, metric) in index}
        lacking = sorted(set(run_ids) - set(values))
        if lacking and len(lacking) == len(run_ids):
            notes.append(f"{where_label}: none of its {len(run_ids)} run(s) logged {metric}.")
        elif lacking:
            notes.append(f"{where_label}: {metric} missing in {', '.join(lacking)}.")
        nans = sorted(r for r, v in values.items() if not math.isfinite(v))
        if nans:
            notes.append(f"{where_label}: {metric} is NaN/inf in {', '.join(nans)}; left out of the mean.")
        out[column.key] = values
    for column in spec.columns:
        if column.parts:
            shared = set.intersection(*(set(out.get(p, {})) for p in column.parts)) if column.parts else set()
            out[column.key] = {r: float(np.mean([out[p][r] for p in column.parts])) for r in shared}
    return out


def all_tables(dataset: Dataset, paper: PaperValues, **options) -> list[TableResult]:
    """Every table of `TABLES` computed from `dataset`."""
    indexes = eval_index(dataset.metrics)
    return [compute_table(spec, dataset, paper, eval_indexes=indexes, **options) for spec in TABLES]


# --------------------------------------------------------------------------------------
# Training summary and paired comparisons: final values per run, over seeds (no paper numbers).
# --------------------------------------------------------------------------------------

GROUP = ["experiment", "task", "model"]
SUMMARY_COLUMNS = [*GROUP, "algo", "metric", "mean", "std", "low", "high", "n", "clipped", "steps"]
PAIRED_COLUMNS = [*GROUP, "metric", "algo", "baseline", "n", "seeds", "mean_diff", "std_diff", "low", "high", "clipped",
                  "t", "p_t", "p_sign_flip", "min_p_sign_flip", "mde", "unpaired"]


EXCEED_METRICS = (mn.train(mn.EXCEED_RATE), mn.validation(mn.EXCEED_RATE))


def is_summary_metric(metric: str) -> bool:
    """The metrics the summary and the paired comparison read: ``train/reward*`` and
    ``validation/reward*`` (the total and each component), and the paper's Exceed
    (``train/exceed_rate``, ``validation/exceed_rate``: runs with a length reward)."""
    return metric.startswith((mn.train(mn.REWARD), mn.validation(mn.REWARD))) or metric in EXCEED_METRICS


def metric_bounds(task: str, metric: str) -> tuple[float, float] | None:
    """The range a summary metric's values can take, where it has one: a reward component's
    declared range in its task's reward set (``train/reward/format`` of gsm8k: (0, 1); of
    toolcall ``correctness``: (-3, 3)); None for a total (its weights are the run's) and for
    a task or component the reward registry does not know."""
    from gdpo_nemo.rewards import task_rewards

    for family in (mn.train(mn.REWARD), mn.validation(mn.REWARD)):
        if mn.component(metric, family) is not None:
            try:
                ranges = task_rewards(task).ranges
            except (KeyError, ValueError):
                return None
            bounds = ranges.get(mn.component(metric, family))
            return None if bounds is None else (float(bounds[0]), float(bounds[1]))
    return (0.0, 1.0) if metric in EXCEED_METRICS else None


def incomplete_runs(dataset: Dataset) -> dict[str, str]:
    """{run_id: why} of the trained runs that crashed or stopped short of their planned steps
    (config max_steps, else their peers' last step): a final value of such a run is not
    comparable with the others'. Runs still going count as short."""
    runs = dataset.runs
    if runs.empty:
        return {}
    runs = runs.assign(short=_short_runs(runs))
    runs = runs[runs["algo"] != "base"]
    reasons = {str(run["run_id"]): _incomplete_reason(run) for run in runs.sort_values("run_id").to_dict("records")}
    return {run_id: reason for run_id, reason in reasons.items() if reason}


def final_values(dataset: Dataset, *, window: float = 0.1, include_incomplete: bool = False) -> pd.DataFrame:
    """One final value per (run, summary metric): columns experiment, task, model, algo,
    seed, run_id, metric, value, steps. Runs of `incomplete_runs` are left out unless
    `include_incomplete`.

    ``train/*`` metrics are noisy per step (a batch of rollouts), so a run's final value is
    the mean over the last `window` share of its logged steps (at least one step);
    ``validation/*`` metrics are evaluations on a fixed held-out set, so it is the value at
    the last validated step. `steps` is the number of steps averaged.
    """
    if not 0 < window <= 1:
        raise UserError(f"window = {window!r}; expected a fraction in (0, 1]")
    m = dataset.metrics
    # astype(bool): on an empty frame (runs that logged nothing) map keeps the str dtype
    m = m[m["metric"].astype(str).map(is_summary_metric).astype(bool) & np.isfinite(m["value"])]
    if not include_incomplete:
        m = m[~m["run_id"].astype(str).isin(set(incomplete_runs(dataset)))]
    columns = [*GROUP, "algo", "seed", "run_id", "metric", "value", "steps"]
    if m.empty:
        return pd.DataFrame(columns=columns)
    m = m.astype({c: str for c in ("run_id", "experiment", "task", "model", "algo", "metric")})
    rank = m.groupby(["run_id", "metric"])["step"].rank(ascending=False, method="first")
    count = m.groupby(["run_id", "metric"])["step"].transform("size")
    width = np.where(m["metric"].str.startswith(mn.prefix(mn.TRAIN)), np.maximum(1, np.ceil(count * window)), 1)
    keep = (rank <= width).to_numpy()
    tail = m[keep].assign(width=width[keep])
    out = tail.groupby([*GROUP, "algo", "seed", "run_id", "metric"], dropna=False).agg(
        value=("value", "mean"), steps=("width", "max")).reset_index()
    return out[columns]


def training_summary(dataset: Dataset, *, window: float = 0.1, interval: str = "t", resamples: int = 10_000,
                     include_incomplete: bool = False) -> pd.DataFrame:
    """Final values (`final_values`) summarized over runs: one row per (experiment, task,
    model, algo, metric) with mean, std, the 95 % interval of the mean (`interval`: "t",
    the default, or "bootstrap"), n runs and ``steps`` (the averaging window used)."""
    per_run = final_values(dataset, window=window, include_incomplete=include_incomplete)
    rows = []
    for key, group in per_run.groupby([*GROUP, "algo", "metric"]):
        rows.append({**dict(zip([*GROUP, "algo", "metric"], key)),
                     **summarize(group["value"].to_numpy(), interval=interval, resamples=resamples,
                                 bounds=metric_bounds(key[GROUP.index("task")], key[-1])),
                     "steps": int(group["steps"].max())})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def paired_summary(dataset: Dataset, *, baseline: str = "grpo", window: float = 0.1, confidence: float = 0.95,
                   power: float = 0.8, include_incomplete: bool = False) -> pd.DataFrame:
    """Every other algo against `baseline`, paired by seed, per (experiment, task, model,
    summary metric): `stats.paired_comparison` of the final values (algo minus baseline).

    Runs pair when they share experiment, task, model and seed (the same prompts and initial
    weights). Seeds that only one side has are not used and are listed in ``unpaired``
    (e.g. "gdpo: 5, 6"); a group whose algo has no paired seed gets n = 0. Without a
    `baseline` run in a group, the group has no rows.
    """
    per_run = final_values(dataset, window=window, include_incomplete=include_incomplete)
    rows = []
    for key, group in per_run.groupby([*GROUP, "metric"]):
        values = {algo: dict(zip(g["seed"], g["value"])) for algo, g in group.groupby("algo")}
        base = values.get(baseline)
        if base is None:
            continue
        for algo, mine in sorted(values.items()):
            if algo == baseline:
                continue
            seeds = sorted(set(mine) & set(base))
            lonely = [f"{who}: {', '.join(map(str, sorted(set(side) - set(seeds))))}"
                      for who, side in ((algo, mine), (baseline, base)) if set(side) - set(seeds)]
            stats = paired_comparison([mine[s] for s in seeds], [base[s] for s in seeds], confidence=confidence, power=power,
                                      bounds=metric_bounds(key[GROUP.index("task")], key[-1]))
            rows.append({**dict(zip([*GROUP, "metric"], key)), "algo": algo, "baseline": baseline, **stats,
                         "seeds": ",".join(map(str, seeds)), "unpaired": "; ".join(lonely)})
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)
