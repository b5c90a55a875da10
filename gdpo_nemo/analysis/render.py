"""Tables as Markdown and LaTeX, in the paper's layout, with footnotes.

A cell reads ``mean ± std``, then ``[low, high] n=N`` (95 % t interval of the mean,
number of runs; ``†`` after it: cut to the range the metric can take, see
`stats.clip_interval`), then ``paper P (Δ mean−P)``. ``—`` marks a number that does not exist
(no runs; a std of one run; a value the paper does not report, which reads ``paper n/a``).
"""

from __future__ import annotations

import math

import pandas as pd

from gdpo_nemo.analysis.tables import TableResult
from gdpo_nemo.runs import metric_names as mn

DASH = "—"


def _num(value: float, decimals: int, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


CLIPPED = "†"


def _interval(low: float, high: float, decimals: int, clipped, sign: bool = False) -> str:
    """``[low, high]``, marked CLIPPED when it was cut to the metric's range."""
    return f"[{_num(low, decimals, sign)}, {_num(high, decimals, sign)}]" + (CLIPPED if clipped is True else "")


def _clipped_note(frame: pd.DataFrame, difference: bool = False) -> list[str]:
    """The legend of CLIPPED, when a row of `frame` has it."""
    if "clipped" not in frame or not frame["clipped"].eq(True).any():
        return []
    if difference:
        return [f"{CLIPPED} after an interval: the t interval of the difference left the range a difference can take"
                " (± the width of the metric's range: ±1 for a rate) and is cut to it."]
    return [f"{CLIPPED} after an interval: the t interval left the range the metric can take (a rate's [0, 1] or"
            " [0, 100] %, a reward's declared range) and is cut to it."]


def cell_lines(cell: dict, decimals: int) -> list[str]:
    """The three lines of one cell (plain text, `±`/`Δ` as Unicode)."""
    paper = "paper n/a" if math.isnan(cell["paper"]) else f"paper {cell['paper']:.{decimals}f}"
    if cell["n"] == 0:
        return [DASH, "n=0", paper]
    if not math.isnan(cell["paper"]):
        paper += f" (Δ {_num(cell['diff'], decimals, sign=True)})"
    return [
        f"{_num(cell['mean'], decimals)} ± {_num(cell['std'], decimals)}",
        f"{_interval(cell['low'], cell['high'], decimals, cell.get('clipped'))} n={cell['n']}",
        paper,
    ]


def _layout(result: TableResult):
    """(header labels, rows) where each row is (label cells, [cell dict or None])."""
    spec = result.spec
    cells = {(c["model"], c["benchmark"], c["method"], c["column"]): c for c in result.cells.to_dict("records")}
    benches = spec.benchmarks or (("", ""),)
    has_bench = bool(spec.benchmarks)
    header = ["Model"] + (["Benchmark"] if has_bench else [])
    rows = []
    if spec.methods_in == "rows":
        header += ["Method"] + [c.label for c in spec.columns]
        for tag, label in result.models:
            for bench_key, bench_label in benches:
                for method in spec.methods:
                    row_cells = [cells.get((tag, bench_key, method.key, c.key)) for c in spec.columns]
                    rows.append(([label] + ([bench_label] if has_bench else []) + [method.label], row_cells))
    else:
        header += [f"{m.label} {c.label}" for m in spec.methods for c in spec.columns]
        for tag, label in result.models:
            for bench_key, bench_label in benches:
                row_cells = [cells.get((tag, bench_key, m.key, c.key)) for m in spec.methods for c in spec.columns]
                rows.append(([label] + ([bench_label] if has_bench else []), row_cells))
    return header, rows


def to_markdown(result: TableResult) -> str:
    """The table as GitHub Markdown (cells use ``<br>`` between their lines), footnotes below."""
    header, rows = _layout(result)
    lines = [f"### {result.spec.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for labels, row_cells in rows:
        texts = ["<br>".join(cell_lines(c, result.spec.decimals)) if c else DASH for c in row_cells]
        lines.append("| " + " | ".join(labels + texts) + " |")
    lines += ["", "Cells: mean ± std over runs, [95 % t interval of the mean] n runs, paper value (Δ = ours − paper).",
              *_clipped_note(result.cells)]
    if result.footnotes:
        lines += ["", "Notes:"] + [f"{i}. {note}" for i, note in enumerate(result.footnotes, 1)]
    return "\n".join(lines) + "\n"


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def tex_escape(text: str) -> str:
    """`text` safe inside LaTeX (special characters escaped, ±/Δ/— as math or dashes)."""
    out = "".join(_TEX_ESCAPE.get(ch, ch) for ch in str(text))
    return out.replace("†", r"$^\dagger$").replace("±", r"$\pm$").replace("Δ", r"$\Delta$").replace("—", "---").replace("−", "-")


def to_latex(result: TableResult) -> str:
    """The table as a LaTeX ``table`` (booktabs; cells are ``\\shortstack``s), footnotes below."""
    header, rows = _layout(result)
    n_labels = len(header) - (len(rows[0][1]) if rows else 0)
    spec = "l" * n_labels + "c" * (len(header) - n_labels)
    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", rf"\caption{{{tex_escape(result.spec.title)}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(tex_escape(h) for h in header) + r" \\", r"\midrule"]
    for labels, row_cells in rows:
        texts = []
        for cell in row_cells:
            if cell is None:
                texts.append("---")
                continue
            first, second, third = (tex_escape(t) for t in cell_lines(cell, result.spec.decimals))
            texts.append(rf"\shortstack{{{first}\\{{\tiny {second}}}\\{{\tiny {third}}}}}")
        lines.append(" & ".join([tex_escape(x) for x in labels] + texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines.append(r"\par\smallskip{\tiny Cells: mean $\pm$ std over runs; [95\% t interval of the mean] n runs; paper value ($\Delta$ = ours $-$ paper).}")
    lines += [rf"\par{{\tiny {tex_escape(note)}}}" for note in _clipped_note(result.cells)]
    if result.footnotes:
        lines.append(r"\par{\tiny")
        lines += [rf"{i}. {tex_escape(note)}\\" for i, note in enumerate(result.footnotes, 1)]
        lines.append("}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _left_out(left_out: dict | None) -> list[str]:
    if not left_out:
        return []
    return ["Left out, not finished (`--include-incomplete` keeps them): "
            + "; ".join(f"`{run}` ({why})" for run, why in left_out.items()) + ".", ""]


def summary_markdown(summary: pd.DataFrame, title: str = "Final values per method", left_out: dict | None = None) -> str:
    """The `training_summary` frame as one Markdown table per (experiment, task, model);
    `left_out` ({run_id: why}, `tables.incomplete_runs`) is named under the title."""
    lines = [f"### {title}", "", *_left_out(left_out)]
    if summary.empty:
        return "\n".join(lines + ["No `train/reward*` or `validation/reward*` metrics in the source.", ""])
    for (experiment, task, model), group in summary.groupby(["experiment", "task", "model"]):
        metrics = sorted(group["metric"].unique(), key=_metric_order)
        trained = group["metric"].str.startswith(mn.prefix(mn.TRAIN))
        window = int(group.loc[trained, "steps"].max()) if trained.any() else 1
        lines += [f"**{experiment} / {task} / {model}**: mean ± std over runs [95 % t interval of the mean] n runs; "
                  f"`train/*` is each run's mean over its last {window} logged step(s), `validation/*` its last evaluation.", "",
                  "| Algo | " + " | ".join(f"`{m}`" for m in metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
        for algo, rows in group.groupby("algo"):
            by_metric = {r["metric"]: r for r in rows.to_dict("records")}
            texts = []
            for metric in metrics:
                r = by_metric.get(metric)
                texts.append(DASH if r is None else
                             f"{r['mean']:.3f} ± {_num(r['std'], 3)} {_interval(r['low'], r['high'], 3, r.get('clipped'))} n={r['n']}")
            lines.append(f"| {algo} | " + " | ".join(texts) + " |")
        lines += ["", *_clipped_note(group)] if _clipped_note(group) else []
        lines.append("")
    return "\n".join(lines)


def _metric_order(metric: str) -> tuple:
    return (not mn.is_split(metric, mn.TRAIN), metric not in (mn.train(mn.reward()), mn.validation(mn.reward())), metric)


def _p(value: float) -> str:
    if value is None or math.isnan(value):
        return DASH
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def paired_markdown(paired: pd.DataFrame, title: str = "Paired comparison by seed", left_out: dict | None = None) -> str:
    """The `paired_summary` frame as one Markdown table per (experiment, task, model)."""
    lines = [f"### {title}", "", *_left_out(left_out)]
    if paired.empty:
        return "\n".join(lines + ["No method has runs on the same seeds as the baseline.", ""])
    for (experiment, task, model), group in paired.groupby(["experiment", "task", "model"]):
        baseline = group["baseline"].iloc[0]
        lines += [f"**{experiment} / {task} / {model}**: each method minus `{baseline}` on the same seeds (same prompts and "
                  "initial weights). Δ: mean difference [95 % t interval]; p (t): paired t test; p (sign-flip): exact "
                  "permutation test, whose smallest possible value is 2/2^n; MDE: the difference a paired t test at 5 % "
                  "would detect with 80 % power, given the spread of these differences.", "",
                  "| Algo | metric | n | Δ [95 % CI] | sd of Δ | p (t) | p (sign-flip) | MDE |", "|---|---|---|---|---|---|---|---|"]
        group = group.assign(order=group["metric"].map(_metric_order)).sort_values(["algo", "order"])
        for r in group.to_dict("records"):
            note = f" (unpaired: {r['unpaired']})" if r["unpaired"] else ""
            lines.append(f"| {r['algo']} | `{r['metric']}` | {r['n']}{note} | {_num(r['mean_diff'], 3, sign=True)} "
                         f"{_interval(r['low'], r['high'], 3, r.get('clipped'), sign=True)} | {_num(r['std_diff'], 3)} | "
                         f"{_p(r['p_t'])} | {_p(r['p_sign_flip'])} (min {_p(r['min_p_sign_flip'])}) | {_num(r['mde'], 3)} |")
        lines += ["", *_clipped_note(group, difference=True)] if _clipped_note(group) else []
        lines.append("")
    return "\n".join(lines)
